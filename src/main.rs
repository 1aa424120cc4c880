//! The `jitccl` command line: kernel generation tools and the `perf` benchmark sweep.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    cli::Cli::parse().run()
}
