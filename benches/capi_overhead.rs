//! One rank of `tools/compare-capi.sh`: the C API's cost beside the Rust API's, in one
//! process, so that the VM's phases hit both alike. The rank holds two communicators of
//! the same ranks: one made with the Rust API (`RUST_COMM_ID` = host:port) and one through
//! libnccl.so.2, loaded as a C program would use it (`NCCL_SO`, `NCCL_COMM_ID`), each with
//! two buffers of the host arena. Rounds alternate a block of blocking f32 AllReduces of
//! BYTES on each; a blocking C call is complete when it returns, so each Rust call is
//! followed by a synchronize.
//!
//! ```sh
//! RUST_COMM_ID=127.0.0.1:29500 NCCL_COMM_ID=127.0.0.1:29501 NCCL_SO=target/release/libnccl.so.2 \
//!   jitccl launch -n 2 -- target/release/examples/capi_overhead 8 2000 20
//! ```
//! Rank 0 prints `BYTES B: rust R us, c C us per call (medians of ROUNDS blocks), c/rust
//! X (median of the rounds' ratios)`.

use std::ffi::{c_int, c_void};
use std::process::ExitCode;
use std::time::Instant;

use jitccl::{Comm, Config, Op, UniqueId};

type Res = c_int;
type AllReduce = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, *mut c_void, *mut c_void) -> Res;

/// The C side: the library's entry points and a communicator with two buffers.
struct CSide {
    all_reduce: AllReduce,
    comm: *mut c_void,
    send: *mut c_void,
    recv: *mut c_void,
    _lib: libloading::Library,
}

fn env(var: &str) -> Result<String, String> {
    std::env::var(var).map_err(|_| format!("{var} is not set"))
}

fn c_side(rank: usize, nranks: usize, bytes: usize) -> Result<CSide, String> {
    // SAFETY: the library is jitccl's libnccl.so.2; each symbol is used with the type of
    // its declaration in nccl.h.
    unsafe {
        let lib = libloading::Library::new(env("NCCL_SO")?).map_err(|e| e.to_string())?;
        let ck = |what: &str, r: Res| if r == 0 { Ok(()) } else { Err(format!("{what} returned {r}")) };
        let mut id = [0u8; 128];
        let get_id: libloading::Symbol<unsafe extern "C" fn(*mut u8) -> Res> =
            lib.get(b"ncclGetUniqueId").map_err(|e| e.to_string())?;
        ck("ncclGetUniqueId", get_id(id.as_mut_ptr()))?;
        let init: libloading::Symbol<unsafe extern "C" fn(*mut *mut c_void, c_int, [u8; 128], c_int) -> Res> =
            lib.get(b"ncclCommInitRank").map_err(|e| e.to_string())?;
        let mut comm = std::ptr::null_mut();
        ck("ncclCommInitRank", init(&mut comm, nranks as c_int, id, rank as c_int))?;
        let alloc: libloading::Symbol<unsafe extern "C" fn(*mut *mut c_void, usize) -> Res> =
            lib.get(b"ncclMemAlloc").map_err(|e| e.to_string())?;
        let (mut send, mut recv) = (std::ptr::null_mut(), std::ptr::null_mut());
        ck("ncclMemAlloc", alloc(&mut send, bytes.max(4)))?;
        ck("ncclMemAlloc", alloc(&mut recv, bytes.max(4)))?;
        let all_reduce = *lib.get::<AllReduce>(b"ncclAllReduce").map_err(|e| e.to_string())?;
        Ok(CSide { all_reduce, comm, send, recv, _lib: lib })
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn run() -> Result<Option<String>, String> {
    let args: Vec<usize> =
        std::env::args().skip(1).map(|a| a.parse().map_err(|e| format!("{a}: {e}"))).collect::<Result<_, _>>()?;
    let [bytes, block, rounds] = args[..] else { return Err("usage: capi_overhead BYTES BLOCK ROUNDS".into()) };
    let (rank, nranks): (usize, usize) = (
        env("RANK")?.parse().map_err(|_| "RANK is not a number")?,
        env("WORLD_SIZE")?.parse().map_err(|_| "WORLD_SIZE is not a number")?,
    );
    let id = UniqueId::at_address(&env("RUST_COMM_ID")?, rank == 0).map_err(|e| e.to_string())?;
    let comm = Comm::init_rank(&id, nranks, rank, &Config::default()).map_err(|e| e.to_string())?;
    let c = c_side(rank, nranks, bytes)?;
    let fail = |e: jitccl::Error| format!("rank {rank}: {e}");
    let count = bytes / 4;
    let stream = comm.device().stream().map_err(fail)?;
    let (send, recv) =
        (comm.device().alloc::<f32>(count).map_err(fail)?, comm.device().alloc::<f32>(count).map_err(fail)?);
    let rust_call = || {
        comm.all_reduce(&send, &recv, count, Op::Sum, &stream)?;
        stream.synchronize()
    };
    // SAFETY: buffers of `bytes` from ncclMemAlloc, a live communicator, no stream (host).
    let c_call = || match unsafe { (c.all_reduce)(c.send, c.recv, count, 7, 0, c.comm, std::ptr::null_mut()) } {
        0 => Ok(()),
        r => Err(format!("rank {rank}: ncclAllReduce returned {r}")),
    };
    let (mut rust_us, mut c_us, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..=rounds {
        let t = Instant::now();
        for _ in 0..block {
            rust_call().map_err(fail)?;
        }
        let r = t.elapsed().as_secs_f64() * 1e6 / block as f64;
        let t = Instant::now();
        for _ in 0..block {
            c_call()?;
        }
        let cc = t.elapsed().as_secs_f64() * 1e6 / block as f64;
        // Round 0 warms both up.
        if round > 0 {
            rust_us.push(r);
            c_us.push(cc);
            ratio.push(cc / r);
        }
    }
    Ok((rank == 0).then(|| {
        format!(
            "{bytes} B: rust {:.3} us, c {:.3} us per call (medians of {rounds} blocks), c/rust {:.3} (median of the rounds' ratios)",
            median(&mut rust_us),
            median(&mut c_us),
            median(&mut ratio)
        )
    }))
}

fn main() -> ExitCode {
    match run() {
        Ok(line) => {
            if let Some(l) = line {
                println!("{l}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("capi_overhead: {e}");
            ExitCode::FAILURE
        }
    }
}
