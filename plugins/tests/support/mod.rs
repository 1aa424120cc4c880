//! Runs tests/driver.c against a plugin: one process, or a receiver and a sender joined
//! through a handle file. Every process runs under a deadline and is killed past it; a
//! failure shows what both processes printed.

#![allow(dead_code)] // each test file uses its own part of this module

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long one driver process may run; its own waits are shorter (20 s).
pub const PROCESS_LIMIT: Duration = Duration::from_secs(90);

/// The compiled driver, built once per test binary.
pub fn driver() -> &'static Path {
    static DRIVER: OnceLock<PathBuf> = OnceLock::new();
    DRIVER.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("plugin-driver-{}", std::process::id()));
        compile_c(&[concat!(env!("CARGO_MANIFEST_DIR"), "/tests/driver.c")], &out, &["-ldl"]);
        out
    })
}

/// Compiles C sources against jitccl_net.h into the program `out`.
pub fn compile_c(sources: &[&str], out: &Path, libs: &[&str]) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let result = Command::new(&cc)
        .args(["-O2", "-Wall", "-Wextra", "-Werror"])
        .arg(format!("-I{}", jitccl_plugins::INCLUDE_DIR))
        .args(sources)
        .arg("-o")
        .arg(out)
        .args(libs)
        .output()
        .unwrap_or_else(|e| panic!("running the C compiler '{cc}': {e}"));
    assert!(result.status.success(), "compiling {sources:?} failed:\n{}", String::from_utf8_lossy(&result.stderr));
}

/// A finished process: its status (None: killed at the deadline) and what it printed.
pub struct Run {
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn ok(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    fn describe(&self, who: &str) -> String {
        let status = match self.status {
            Some(s) => format!("{s}"),
            None => "killed at the deadline".into(),
        };
        format!("--- {who}: {status}\nstdout:\n{}stderr:\n{}", self.stdout, self.stderr)
    }
}

/// How one driver process is started.
pub struct Spec<'a> {
    pub plugin: &'a str,
    pub version: u32,
    pub env: Vec<(&'a str, String)>,
    /// Network namespace to run in (`ip netns exec`), if any.
    pub netns: Option<&'a str>,
}

impl<'a> Spec<'a> {
    /// A process on loopback: FI_TCP_IFACE=lo, the default provider.
    pub fn loopback(plugin: &'a str, version: u32) -> Self {
        Spec { plugin, version, env: vec![("FI_TCP_IFACE", "lo".into())], netns: None }
    }

    pub fn with_env(mut self, key: &'a str, value: &str) -> Self {
        self.env.retain(|(k, _)| *k != key);
        self.env.push((key, value.into()));
        self
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = match self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(driver());
                c
            }
            None => Command::new(driver()),
        };
        cmd.arg(self.plugin).arg(self.version.to_string()).args(args);
        cmd.env_remove("FI_PROVIDER").env_remove("JITCCL_EDGE_INNER").env_remove("JITCCL_EDGE_FAIL_SEND");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }
}

/// A started process whose output goes to files (no pipe can fill up and stall it).
pub struct Running {
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

pub fn start(spec: &Spec, args: &[&str], dir: &Path, name: &str) -> Running {
    let stdout = dir.join(format!("{name}.stdout"));
    let stderr = dir.join(format!("{name}.stderr"));
    let child = spec
        .command(args)
        .stdout(File::create(&stdout).expect("stdout file"))
        .stderr(File::create(&stderr).expect("stderr file"))
        .spawn()
        .expect("start the driver");
    Running { child, stdout, stderr }
}

impl Running {
    /// Waits until `deadline`, then kills.
    pub fn finish(mut self, deadline: Instant) -> Run {
        let mut status = None;
        while status.is_none() && Instant::now() < deadline {
            status = self.child.try_wait().expect("waiting for the driver");
            if status.is_none() {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        Run { status, stdout: read(&self.stdout), stderr: read(&self.stderr) }
    }

    pub fn kill(mut self) -> Run {
        let _ = self.child.kill();
        let status = self.child.wait().ok();
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        Run { status, stdout: read(&self.stdout), stderr: read(&self.stderr) }
    }
}

/// One process: `driver PLUGIN VERSION <args>`.
pub fn run_one(spec: &Spec, args: &[&str]) -> Run {
    let dir = tempfile::tempdir().expect("temporary directory");
    start(spec, args, dir.path(), "driver").finish(Instant::now() + PROCESS_LIMIT)
}

/// Panics with the process's output unless it succeeded.
pub fn expect_ok(run: &Run, what: &str) {
    assert!(run.ok(), "{what} failed\n{}", run.describe("driver"));
}

/// A receiver and a sender of `scenario`; panics with both outputs unless both succeed.
pub fn run_pair(recv: &Spec, send: &Spec, scenario: &str) -> (Run, Run) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let handle = dir.path().join("handle");
    let handle = handle.to_str().expect("utf-8 path");
    let deadline = Instant::now() + PROCESS_LIMIT;
    let receiver = start(recv, &["recv", handle, scenario], dir.path(), "recv");
    let sender = start(send, &["send", handle, scenario], dir.path(), "send");
    let (r, s) = (receiver.finish(deadline), sender.finish(deadline));
    expect_pair(&r, &s, scenario);
    (r, s)
}

pub fn expect_pair(recv: &Run, send: &Run, what: &str) {
    assert!(recv.ok() && send.ok(), "{what} failed\n{}\n{}", recv.describe("receiver"), send.describe("sender"));
}

pub fn describe_pair(recv: &Run, send: &Run) -> String {
    format!("{}\n{}", recv.describe("receiver"), send.describe("sender"))
}
