//! `jitccl launch -n N -- program [args]`: starts N local rank processes the way torchrun
//! does, prefixes their output with the rank, and fails fast (see `ranks`), or with
//! `--keep-going` lets the other ranks live on when one fails.

use std::process::ExitCode;
use std::time::Duration;

use super::ranks::{parse_nranks, run_ranks, OnFailure};

#[derive(clap::Args)]
pub(super) struct LaunchArgs {
    /// Number of rank processes (at most max(1024, 4 x CPUs)).
    #[arg(short = 'n', long = "nproc", value_parser = parse_nranks)]
    nproc: usize,
    /// Port of the rendezvous (default: a free one outside the ephemeral range, held for
    /// rank 0 from the start; a program serving it itself must set SO_REUSEADDR, as
    /// PyTorch's TCPStore does).
    #[arg(long)]
    master_port: Option<u16>,
    /// Give up (terminating every rank) after this many seconds.
    #[arg(long, value_parser = jitccl::settings::parse::seconds)]
    timeout: Option<Duration>,
    /// When a rank fails, let the others run on (for a job that shrinks its communicator
    /// past dead ranks) and wait for them all. Exit code: 0 if every rank succeeded, 3 if
    /// some failed and every other one succeeded, 1 if none succeeded.
    #[arg(long)]
    keep_going: bool,
    /// The program and its arguments.
    #[arg(trailing_var_arg = true, required = true, num_args = 1..)]
    command: Vec<String>,
}

impl LaunchArgs {
    pub(super) fn run(self) -> Result<ExitCode, String> {
        let on_failure = if self.keep_going { OnFailure::KeepGoing } else { OnFailure::Terminate };
        run_ranks(self.nproc, self.master_port, &self.command, self.timeout, true, on_failure)
    }
}
