//! The `jitccl` command line: `jitccl kernels | perf | tune | launch | store | topo | env`,
//! over the library.

mod env;
mod kernels;
mod launch;
mod master_port;
mod perf;
mod ranks;
mod size;
mod store;
mod topo;
mod tune;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "jitccl", version, about = "Collective communication with run-time specialized kernels")]
struct Cli {
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List, show or compile generated kernels.
    #[command(subcommand)]
    Kernels(kernels::KernelsCmd),
    /// Benchmark a collective over a range of sizes (nccl-tests layout).
    Perf(perf::PerfArgs),
    /// Measure every algorithm, protocol, channel count and chunk size per size and write the tuning table.
    Tune(tune::TuneArgs),
    /// Start N local rank processes (torchrun's environment), failing fast.
    Launch(launch::LaunchArgs),
    /// Run the rendezvous key-value store server.
    #[command(subcommand)]
    Store(store::StoreCmd),
    /// Show the system topology, the paths between devices and the rings and trees per channel.
    Topo(topo::TopoArgs),
    /// Show every JITCCL_* setting with its current value and where it comes from.
    Env(env::EnvArgs),
}

/// Value parser of a whole number of at least `MIN` (clap's range parser would print the
/// open upper bound as 18446744073709551615).
fn at_least<const MIN: usize>(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= MIN => Ok(n),
        Ok(_) => Err(format!("must be at least {MIN}")),
        Err(e) => Err(e.to_string()),
    }
}

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of stdout goes away (`| head`).
    // SAFETY: resetting a signal disposition at start-up, before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    Cli::parse().run()
}

impl Cli {
    fn run(self) -> ExitCode {
        // JITCCL_DEBUG holds for every command, also those that make no communicator.
        jitccl::init_logging();
        let res = match self.cmd {
            Command::Kernels(k) => k.run(),
            Command::Perf(p) => p.run(),
            Command::Tune(t) => t.run(),
            Command::Launch(l) => l.run(),
            Command::Store(s) => s.run(),
            Command::Topo(t) => t.run(),
            Command::Env(e) => e.run(),
        };
        match res {
            Ok(code) => code,
            Err(e) => {
                eprintln!("jitccl: error: {e}");
                ExitCode::from(2)
            }
        }
    }
}
