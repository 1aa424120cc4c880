//! Split: four ranks (threads of one `init_all`) split into odd and even halves, and each
//! half sums its ranks at the same time. Run: `cargo run --release --example split`.

use std::process::ExitCode;

use jitccl::{Comm, Config, Op};

/// Each rank's (child rank, child size, sum over its half).
pub fn run() -> Result<Vec<(usize, usize, i64)>, jitccl::Error> {
    let comms = Comm::init_all(4, &Config::default())?;
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .map(|c| {
                s.spawn(move || {
                    // Every rank calls split; the color picks the half, the key the order.
                    let half = c.split((c.rank() % 2) as u32, c.rank() as i64)?.expect("every rank gave a color");
                    let stream = half.device().stream()?;
                    let buf = half.device().alloc_from(&[c.rank() as i64; 8])?;
                    half.all_reduce(&buf, &buf, 8, Op::Sum, &stream)?;
                    stream.synchronize()?;
                    Ok((half.rank(), half.nranks(), buf.to_vec()[0]))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
    })
}

#[allow(dead_code, reason = "the tests call run() only")]
fn main() -> ExitCode {
    match run() {
        Ok(out) => {
            for (r, (cr, cn, sum)) in out.iter().enumerate() {
                println!("rank {r}: rank {cr} of {cn} in its half, sum {sum}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("split: {e}");
            ExitCode::FAILURE
        }
    }
}
