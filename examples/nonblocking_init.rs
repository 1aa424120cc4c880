//! Nonblocking init (NCCL's `blocking = 0`): each rank's `init_rank` returns at once, a
//! collective can be queued right away, and `async_error` is polled until the
//! communicator is `Ready`. Ranks are threads here; in a real job each is a process.
//! Run: `cargo run --release --example nonblocking_init`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use jitccl::{Comm, CommState, Config, Error, Op, UniqueId};

/// Per rank: (how many polls init took, the AllReduce result).
pub fn run(nranks: usize) -> Result<Vec<(usize, f32)>, Error> {
    let id = UniqueId::new()?;
    let config = Config { blocking: Some(false), ..Config::default() };
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..nranks)
            .map(|rank| {
                let config = &config;
                s.spawn(move || {
                    let comm = Comm::init_rank(&id, nranks, rank, config)?;
                    // Queued behind init: it runs once init is done.
                    let stream = comm.device().stream()?;
                    let buf = comm.device().alloc_from(&[(rank + 1) as f32; 64])?;
                    comm.all_reduce(&buf, &buf, 64, Op::Sum, &stream)?;
                    // Meanwhile this thread is free; it polls now and then.
                    let (mut polls, end) = (0, Instant::now() + Duration::from_secs(120));
                    while comm.async_error()? == CommState::InProgress && Instant::now() < end {
                        polls += 1;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    stream.synchronize()?;
                    Ok((polls, buf.to_vec()[0]))
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
            for (r, (polls, sum)) in out.iter().enumerate() {
                println!("rank {r}: ready after {polls} poll(s), sum {sum}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nonblocking_init: {e}");
            ExitCode::FAILURE
        }
    }
}
