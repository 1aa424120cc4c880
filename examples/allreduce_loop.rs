//! The Rust side of `scripts/compare-capi.sh`: one rank times `ITERS` blocking f32
//! AllReduces of `BYTES` (each call followed by a synchronize, as a blocking C call is),
//! on buffers of the host arena, as `capi/bench/allreduce_loop.c` does through the C API.
//!
//! ```sh
//! JITCCL_COMM_ID=127.0.0.1:29500 jitccl launch -n 2 -- target/release/examples/allreduce_loop 8 20000
//! ```
//! Prints `rank R: BYTES B: T us per call`.

use std::process::ExitCode;
use std::time::Instant;

use jitccl::{Comm, Config, Op};

fn run() -> Result<String, String> {
    let args: Vec<usize> =
        std::env::args().skip(1).map(|a| a.parse().map_err(|e| format!("{a}: {e}"))).collect::<Result<_, _>>()?;
    let [bytes, iters] = args[..] else { return Err("usage: allreduce_loop BYTES ITERS".into()) };
    let comm = Comm::init_from_env(&Config::default()).map_err(|e| format!("init_from_env: {e}"))?;
    let fail = |e: jitccl::Error| format!("rank {}: {e}", comm.rank());
    let count = bytes / 4;
    let stream = comm.device().stream().map_err(fail)?;
    let (send, recv) =
        (comm.device().alloc::<f32>(count).map_err(fail)?, comm.device().alloc::<f32>(count).map_err(fail)?);
    let call = || {
        comm.all_reduce(&send, &recv, count, Op::Sum, &stream)?;
        stream.synchronize()
    };
    for _ in 0..iters.div_ceil(10) {
        call().map_err(fail)?;
    }
    let start = Instant::now();
    for _ in 0..iters {
        call().map_err(fail)?;
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / iters as f64;
    Ok(format!("rank {}: {bytes} B: {us:.3} us per call", comm.rank()))
}

fn main() -> ExitCode {
    match run() {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("allreduce_loop: {e}");
            ExitCode::FAILURE
        }
    }
}
