//! `jitccl launch -n N -- program [args]`: starts N local rank processes the way torchrun
//! does (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), prefixes
//! their output with the rank, and fails fast: when one exits unsuccessfully, the others
//! are terminated and its status is returned.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub(super) struct LaunchArgs {
    /// Number of rank processes.
    #[arg(short = 'n', long = "nproc")]
    nproc: usize,
    /// Port of the rendezvous (default: a free one).
    #[arg(long)]
    master_port: Option<u16>,
    /// Give up (terminating every rank) after this many seconds.
    #[arg(long)]
    timeout: Option<f64>,
    /// The program and its arguments.
    #[arg(trailing_var_arg = true, required = true, num_args = 1..)]
    command: Vec<String>,
}

/// How long a terminated rank gets to exit before it is killed.
const GRACE: Duration = Duration::from_secs(3);

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("finding a free port: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("finding a free port: {e}"))
}

/// Copies a child's stream to ours line by line, each line prefixed with the rank.
fn forward(rank: usize, stream: impl Read + Send + 'static, to_stderr: bool) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            let res = if to_stderr {
                writeln!(std::io::stderr().lock(), "[{rank}] {line}")
            } else {
                writeln!(std::io::stdout().lock(), "[{rank}] {line}")
            };
            if res.is_err() {
                break;
            }
        }
    })
}

/// Terminates every rank with its whole process group (a rank's own children, such as
/// the program a shell script started, would otherwise live on and hold its output open).
fn terminate(children: &mut [(usize, Child)]) {
    for (_, c) in children.iter() {
        // SAFETY: signalling the process group our child leads.
        unsafe { libc::kill(-(c.id() as i32), libc::SIGTERM) };
    }
    let deadline = Instant::now() + GRACE;
    for (_, c) in children.iter_mut() {
        while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above.
        unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
        let _ = c.wait();
    }
}

impl LaunchArgs {
    pub(super) fn run(self) -> Result<ExitCode, String> {
        let timeout = self.timeout.map(Duration::from_secs_f64);
        run_ranks(self.nproc, self.master_port, &self.command, timeout, true)
    }
}

/// Runs `command` as `nproc` local ranks and waits for them (see the module doc). With
/// `prefix_stdout` false, the ranks' standard output passes through unchanged (for
/// programs where only rank 0 prints, such as `jitccl perf`).
pub(super) fn run_ranks(
    nproc: usize,
    master_port: Option<u16>,
    command: &[String],
    timeout: Option<Duration>,
    prefix_stdout: bool,
) -> Result<ExitCode, String> {
    if nproc == 0 {
        return Err("the number of ranks must be at least 1".into());
    }
    let port = match master_port {
        Some(p) => p,
        None => free_port()?,
    };
    let (program, args) = command.split_first().ok_or("no program to launch")?;
    let mut children = Vec::new();
    let mut pipes = Vec::new();
    for rank in 0..nproc {
        let spawned = Command::new(program)
            .args(args)
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("WORLD_SIZE", nproc.to_string())
            .env("LOCAL_WORLD_SIZE", nproc.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(if prefix_stdout {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                terminate(&mut children);
                return Err(format!("starting rank {rank} ('{program}'): {e}"));
            }
        };
        if let Some(out) = child.stdout.take() {
            pipes.push(forward(rank, out, false));
        }
        pipes.push(forward(rank, child.stderr.take().expect("piped"), true));
        children.push((rank, child));
    }
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut running = nproc;
    let mut failure = None;
    while running > 0 && failure.is_none() {
        running = 0;
        for (rank, c) in children.iter_mut() {
            match c.try_wait() {
                Ok(None) => running += 1,
                Ok(Some(st)) if !st.success() => failure = Some(format!("rank {rank} exited with {st}")),
                Ok(Some(_)) => {}
                Err(e) => failure = Some(format!("waiting for rank {rank}: {e}")),
            }
        }
        if deadline.is_some_and(|d| Instant::now() > d) {
            failure = Some(format!(
                "timed out after {:.0} s",
                timeout.unwrap_or_default().as_secs_f64()
            ));
        }
        if running > 0 && failure.is_none() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    if failure.is_some() {
        terminate(&mut children);
    }
    for p in pipes {
        let _ = p.join();
    }
    match failure {
        None => Ok(ExitCode::SUCCESS),
        Some(why) => {
            eprintln!("jitccl launch: {why}; terminated the other ranks");
            Ok(ExitCode::FAILURE)
        }
    }
}
