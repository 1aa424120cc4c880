//! `jitccl perf`: a size sweep of one collective in the nccl-tests layout (time, algbw,
//! busbw, #wrong for out-of-place and in-place), checked against the reference, with
//! nccl-tests' flags. Without a GPU it runs on the host target; it also measures this
//! machine's single-thread memcpy bandwidth so the host figures have a yardstick.
//!
//! `-N` ranks are spread as nccl-tests spreads them: processes of `-t` threads of `-g`
//! ranks each. Several processes are started by perf itself (it relaunches itself with
//! torchrun's environment) or by an outside launcher; rank 0 prints.
//!
//! - `flags`: the command line and its checks;
//! - `place`: which process and thread holds which rank, on which device;
//! - `coll`: per collective, sizes, bus bandwidth factor, buffers, call and reference;
//! - `sweep`: one thread's sizes, timing and checks;
//! - `report`: the table and its closing lines;
//! - `compare`: `--compare`, setups timed side by side instead of the sweep;
//! - `wire`: the check of a run in a wire format (`--wire`).

mod coll;
mod compare;
mod flags;
mod place;
mod report;
mod sweep;

use std::process::ExitCode;

use jitccl::{with_element_type, Comm, Config, Stream};

use compare::compare;
pub(crate) use flags::wire;
pub use flags::{PerfArgs, Target};
use place::Role;
use sweep::sweep;

impl PerfArgs {
    pub fn run(self) -> Result<ExitCode, String> {
        let lay = self.validate()?;
        place::check_target(&self)?;
        let first = match place::role(&lay)? {
            Role::Launch => {
                let exe = crate::ranks::this_program()?;
                let mut command = vec![exe.to_string_lossy().into_owned()];
                command.extend(std::env::args().skip(1));
                return super::ranks::run_ranks(
                    lay.procs,
                    None,
                    &command,
                    None,
                    false,
                    super::ranks::OnFailure::Terminate,
                );
            }
            Role::Ranks { first } => first,
        };
        let cfg = Config { nchannels: self.channels, algo: self.algo, proto: self.proto, ..Config::default() };
        let local = place::open(&self, &lay, first, &cfg)?;
        let streams = local
            .comms
            .iter()
            .map(|c| c.device().stream())
            .collect::<Result<Vec<Stream>, _>>()
            .map_err(|e| e.to_string())?;
        // Thread i drives ranks i*g..(i+1)*g of this process, as nccl-tests' -t and -g.
        let g = lay.per_thread;
        let results = std::thread::scope(|s| {
            let runs: Vec<_> = local
                .comms
                .chunks(g)
                .zip(streams.chunks(g))
                .map(|(comms, streams)| {
                    s.spawn(|| {
                        bind(comms);
                        match self.compare.is_empty() {
                            true => with_element_type!(self.dtype, sweep(&self, &lay, comms, streams)),
                            false => with_element_type!(self.dtype, compare(&self, &lay, comms, streams)),
                        }
                    })
                })
                .collect();
            runs.into_iter().map(|r| r.join().expect("perf thread panicked")).collect::<Vec<_>>()
        });
        let mut ok = true;
        for r in results {
            ok &= r?;
        }
        Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
    }
}

/// A thread that drives one rank binds itself to the rank's CPUs, as mpirun binds a rank's
/// process, so that the calls it synchronizes run on it rather than being handed to the
/// stream's thread whenever the scheduler moved it (`Comm::bind_current_thread`).
fn bind(comms: &[Comm]) {
    if let [c] = comms {
        match c.bind_current_thread() {
            Ok(cpus) => tracing::debug!("perf: rank {}'s thread bound to CPUs {cpus:?}", c.rank()),
            Err(e) => tracing::warn!("perf: {e}"),
        }
    }
}
