//! One rank of a job started by a launcher: `Comm::init_from_env` takes the rank and size
//! from mpirun's, srun's, a PMI launcher's or torchrun's variables. mpirun and srun give no
//! rendezvous address, so pass one:
//!
//! ```sh
//! cargo build --release --example mpi_allreduce
//! mpirun -np 3 -x JITCCL_COMM_ID=127.0.0.1:29500 target/release/examples/mpi_allreduce
//! srun -n 3 --export=ALL,JITCCL_COMM_ID=$(hostname):29500 target/release/examples/mpi_allreduce
//! ```
//!
//! Each rank sums rank + 1 over all ranks, checks the result and prints `rank R ok`.

use std::process::ExitCode;

use jitccl::{Comm, Config, Op};

const COUNT: usize = 1000;

fn run() -> Result<usize, String> {
    let comm = Comm::init_from_env(&Config::default()).map_err(|e| format!("init_from_env: {e}"))?;
    let (rank, nranks) = (comm.rank(), comm.nranks());
    let fail = |e: jitccl::Error| format!("rank {rank}: {e}");
    let stream = comm.device().stream().map_err(fail)?;
    let send = comm.device().alloc_from(&vec![(rank + 1) as f32; COUNT]).map_err(fail)?;
    let recv = comm.device().alloc::<f32>(COUNT).map_err(fail)?;
    comm.all_reduce(&send, &recv, COUNT, Op::Sum, &stream).map_err(fail)?;
    stream.synchronize().map_err(fail)?;
    // 1 + 2 + ... + nranks: small integers, exact in f32.
    let want = (nranks * (nranks + 1) / 2) as f32;
    match recv.to_vec().iter().position(|&x| x != want) {
        None => Ok(rank),
        Some(i) => Err(format!("rank {rank} of {nranks}: element {i} is {}, expected {want}", recv.to_vec()[i])),
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(rank) => {
            println!("rank {rank} ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mpi_allreduce: {e}");
            ExitCode::FAILURE
        }
    }
}
