//! Abort: rank 0 waits in an AllReduce that rank 1 never joins; another thread aborts rank
//! 0, and the waiting `synchronize` returns `Aborted` at once. With `abort_propagates`, a
//! rank that aborts also fails its peers' waits on it, naming it.
//! Run: `cargo run --release --example abort`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use jitccl::{Comm, Config, Error, Op};

/// What the waiting rank got, and how long after the abort.
pub fn run() -> Result<(Error, Duration), Error> {
    let comms = Comm::init_all(2, &Config { abort_propagates: Some(true), ..Config::default() })?;
    let comm = &comms[0];
    let stream = comm.device().stream()?;
    let buf = comm.device().alloc_from(&[1.0f64; 1024])?;
    comm.all_reduce(&buf, &buf, 1024, Op::Sum, &stream)?;
    std::thread::scope(|s| {
        let waiter = s.spawn(|| (stream.synchronize(), Instant::now()));
        std::thread::sleep(Duration::from_millis(200));
        let aborted = Instant::now();
        comm.abort();
        let (res, back) = waiter.join().expect("waiting thread");
        match res {
            Err(e) => Ok((e, back - aborted)),
            Ok(()) => Err(Error::Internal("the AllReduce completed without its peer".into())),
        }
    })
}

#[allow(dead_code, reason = "the tests call run() only")]
fn main() -> ExitCode {
    match run() {
        Ok((e, after)) => {
            println!("the waiting thread got \"{e}\" {after:?} after the abort");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("abort: {e}");
            ExitCode::FAILURE
        }
    }
}
