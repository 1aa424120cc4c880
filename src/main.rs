//! The `jitccl` command line: kernel generation tools and the `perf` benchmark sweep.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    // Like other Unix tools, end quietly when the reader of stdout goes away (`| head`).
    // SAFETY: resetting a signal disposition at start-up, before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    cli::Cli::parse().run()
}
