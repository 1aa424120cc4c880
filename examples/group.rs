//! Groups: every rank sends a large block to every other rank and receives one from each,
//! posting sends first, all inside `jitccl::group`: the group launches them together, so
//! the exchange cannot deadlock whatever the order. Run: `cargo run --release --example group`.

use std::process::ExitCode;

use jitccl::{group, Comm, Config, Error};

const COUNT: usize = 1 << 18;

/// Per rank, per peer: the first value received from it (rank q sends q * 1000 + rank).
pub fn run(nranks: usize) -> Result<Vec<Vec<u32>>, Error> {
    let comms = Comm::init_all(nranks, &Config::default())?;
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .map(|c| {
                s.spawn(move || {
                    let (rank, n) = (c.rank(), c.nranks());
                    let stream = c.device().stream()?;
                    let sends = (0..n)
                        .map(|q| c.device().alloc_from(&vec![(rank * 1000 + q) as u32; COUNT]))
                        .collect::<Result<Vec<_>, _>>()?;
                    let recvs = (0..n).map(|_| c.device().alloc::<u32>(COUNT)).collect::<Result<Vec<_>, _>>()?;
                    let peers = (0..n).filter(|&q| q != rank);
                    group(|| {
                        peers.clone().try_for_each(|q| c.send(&sends[q], COUNT, q, &stream))?;
                        peers.clone().try_for_each(|q| c.recv(&recvs[q], COUNT, q, &stream))
                    })?;
                    stream.synchronize()?;
                    Ok(recvs.iter().map(|b| b.to_vec()[0]).collect())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
    })
}

#[allow(dead_code, reason = "the tests call run() only")]
fn main() -> ExitCode {
    match run(3) {
        Ok(out) => {
            for (r, got) in out.iter().enumerate() {
                println!("rank {r} received {got:?}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("group: {e}");
            ExitCode::FAILURE
        }
    }
}
