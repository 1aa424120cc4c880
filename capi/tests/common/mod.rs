//! What the C API's tests share: the built library and `jitccl` binary, C programs
//! compiled against `include/nccl.h`, and processes run with a hard time limit, their
//! output in files, and their "checks passed" lines read.
#![allow(dead_code, reason = "each test file uses part of it")]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

#[path = "../../../tests/common/programs.rs"]
mod programs;

/// The most any one process (a launcher with its ranks) may run before it is killed.
pub const LIMIT: Duration = Duration::from_secs(120);

extern "C" {
    /// kill(2), from the C library every Rust program on Linux links.
    fn kill(pid: i32, sig: i32) -> i32;
}
pub const SIGTERM: i32 = 15;
pub const SIGKILL: i32 = 9;

/// This package's folder (capi/).
pub fn capi_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The folder of the C programs (and the headers they share).
pub fn c_dir() -> PathBuf {
    capi_dir().join("tests/c")
}

/// What the tests run: the profile folder with libnccl.so and the jitccl binary.
pub struct Built {
    pub dir: PathBuf,
    pub jitccl: PathBuf,
}

/// The newest modification time of the files under `dirs` (recursively).
fn newest(dirs: &[PathBuf]) -> Option<std::time::SystemTime> {
    let mut stack: Vec<PathBuf> = dirs.to_vec();
    let mut best = None;
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::metadata(&p) else { continue };
        if meta.is_dir() {
            stack.extend(std::fs::read_dir(&p).into_iter().flatten().flatten().map(|e| e.path()));
        } else if let Ok(t) = meta.modified() {
            best = best.max(Some(t));
        }
    }
    best
}

/// The profile folder cargo built this test into (…/target/<profile>), with libnccl.so and
/// the `jitccl` binary there. A narrow `cargo test -p jitccl-capi` builds neither (a cdylib
/// is not linked into tests; the binary is another package's), so they are built here when
/// missing, or when the library is older than its sources (else the tests would check an
/// old library), as the whole suite builds them (`programs`), which leaves nothing to do
/// here after the suite's own build.
pub fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's path");
        let dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf();
        let (lib, jitccl) = (dir.join("libnccl.so"), dir.join("jitccl"));
        let root = capi_dir().parent().expect("the workspace");
        let sources: Vec<PathBuf> =
            ["capi/src", "capi/build.rs", "runtime/src", "codegen/src", "settings/src", "templates"]
                .iter()
                .map(|d| root.join(d))
                .collect();
        let lib_time = std::fs::metadata(&lib).and_then(|m| m.modified()).ok();
        let stale = match (lib_time, newest(&sources)) {
            (Some(built), Some(src)) => built < src,
            (built, _) => built.is_none(),
        };
        if stale || !jitccl.exists() {
            eprintln!("c_api: libnccl.so or jitccl is missing or older than its sources");
            programs::build(root, &dir);
        }
        for f in [&lib, &dir.join("libnccl.so.2"), &jitccl] {
            assert!(f.exists(), "{} is missing after building it", f.display());
        }
        Built { dir, jitccl }
    })
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("bind a free port").port()
}

/// Compiles `tests/c/<name>.c` into `out` (C99, every warning an error): with `mpicc` for
/// `mpi`, else `CC` or `cc`; linked with libnccl.so (`link`) and found through an rpath.
pub fn compile(name: &str, out: &Path, link: bool, mpi: bool) -> PathBuf {
    let cc = if mpi { "mpicc".to_string() } else { std::env::var("CC").unwrap_or_else(|_| "cc".into()) };
    let exe = out.join(name);
    let mut cmd = Command::new(&cc);
    cmd.args(["-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-DJITCCL_NO_CUDA_HEADERS"])
        .arg("-I")
        .arg(capi_dir().join("include"))
        .arg(c_dir().join(format!("{name}.c")))
        .arg("-o")
        .arg(&exe);
    if link {
        let dir = &built().dir;
        cmd.arg("-L").arg(dir).arg("-lnccl").arg(format!("-Wl,-rpath,{}", dir.display()));
    }
    cmd.args(["-lm", "-pthread"]);
    let res = cmd.stdin(Stdio::null()).output().unwrap_or_else(|e| {
        panic!("cannot run the C compiler '{cc}' ({e}): install gcc (or set CC), and Open MPI's mpicc")
    });
    assert!(
        res.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        res.status,
        String::from_utf8_lossy(&res.stdout),
        String::from_utf8_lossy(&res.stderr)
    );
    exe
}

/// A finished (or killed) process: its status (`None`: killed at the limit), output, time.
pub struct Outcome {
    pub what: String,
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl Outcome {
    /// The outcome for a failure message: the command, status and the output's ends.
    pub fn report(&self) -> String {
        let tail = |s: &str, n: usize| {
            let lines: Vec<&str> = s.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        };
        format!(
            "{}: {} after {:.1} s\n--- stdout (end) ---\n{}\n--- stderr (end) ---\n{}",
            self.what,
            match self.status {
                Some(s) => s.to_string(),
                None => format!("killed at the {} s limit", LIMIT.as_secs()),
            },
            self.took.as_secs_f64(),
            tail(&self.stdout, 60),
            tail(&self.stderr, 60)
        )
    }

    /// The number in this process's line `rank <r>: <N> checks passed`, if there is one.
    pub fn checks_passed(&self, rank: usize) -> Vec<u64> {
        let head = format!("rank {rank}: ");
        self.stdout
            .lines()
            .filter_map(|l| {
                let rest = &l[l.find(&head)? + head.len()..];
                rest.strip_suffix(" checks passed")?.trim().parse().ok()
            })
            .collect()
    }

    /// Whether it exited cleanly with each of `nranks` ranks passing at least `min` checks
    /// (`Err`: why not, with the output).
    pub fn check_passed(&self, nranks: usize, min: u64) -> Result<(), String> {
        self.check_passed_each(&vec![min; nranks])
    }

    /// As `check_passed`, with rank r passing at least `mins[r]` checks.
    pub fn check_passed_each(&self, mins: &[u64]) -> Result<(), String> {
        if !self.status.is_some_and(|s| s.success()) {
            return Err(self.report());
        }
        let mut counts = Vec::new();
        for (r, &min) in mins.iter().enumerate() {
            match self.checks_passed(r)[..] {
                [n] if n >= min => counts.push(n),
                ref got => {
                    return Err(format!(
                        "rank {r}: expected one line 'rank {r}: N checks passed' with N >= {min}, got {got:?}\n{}",
                        self.report()
                    ))
                }
            }
        }
        eprintln!("{}: passed in {:.1} s (checks per rank: {counts:?})", self.what, self.took.as_secs_f64());
        Ok(())
    }

    pub fn assert_passed(&self, nranks: usize, min: u64) {
        self.assert_passed_each(&vec![min; nranks]);
    }

    pub fn assert_passed_each(&self, mins: &[u64]) {
        if let Err(why) = self.check_passed_each(mins) {
            panic!("{why}");
        }
    }
}

/// Waits for `children` (all of one run) until `limit`; past it, each gets SIGTERM (a
/// launcher passes it on to its ranks), then SIGKILL 5 s later. Their output went to files
/// (not pipes: a rank left behind cannot block on them).
pub fn wait_all(children: &mut [Child], limit: Duration) -> (Vec<Option<ExitStatus>>, Duration) {
    let start = Instant::now();
    let mut done: Vec<Option<ExitStatus>> = vec![None; children.len()];
    loop {
        for (c, d) in children.iter_mut().zip(done.iter_mut()) {
            if d.is_none() {
                *d = c.try_wait().expect("wait for a child");
            }
        }
        if done.iter().all(Option::is_some) {
            return (done, start.elapsed());
        }
        if start.elapsed() > limit {
            // Past the limit: each is reported killed (`None`), whenever it ends now.
            let mut reaped: Vec<bool> = done.iter().map(Option::is_some).collect();
            for (c, r) in children.iter().zip(&reaped) {
                if !r {
                    // SAFETY: kill(2) on our own child, not yet reaped (its pid is still ours).
                    unsafe { kill(c.id() as i32, SIGTERM) };
                }
            }
            let grace = Instant::now();
            while grace.elapsed() < Duration::from_secs(5) && reaped.iter().any(|r| !r) {
                for (c, r) in children.iter_mut().zip(reaped.iter_mut()) {
                    *r = *r || !matches!(c.try_wait(), Ok(None));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            for (c, r) in children.iter_mut().zip(&reaped) {
                if !r {
                    // SAFETY: as above; and its process group, for a child that leads one.
                    unsafe {
                        kill(-(c.id() as i32), SIGKILL);
                        kill(c.id() as i32, SIGKILL);
                    }
                    let _ = c.wait();
                }
            }
            return (done, start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The environment every rank gets: the host target, waits bounded well inside [`LIMIT`],
/// no default wire format (unless a test sets one).
pub fn rank_env(cmd: &mut Command) -> &mut Command {
    for v in [
        "NCCL_COMM_ID",
        "JITCCL_COMM_ID",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "JITCCL_WIRE",
        "JITCCL_WIRE_LOCAL",
    ] {
        cmd.env_remove(v);
    }
    cmd.env("JITCCL_DEVICE", "host").env("JITCCL_TIMEOUT", "60").env("JITCCL_BOOTSTRAP_TIMEOUT", "60")
}

/// Runs `cmd` with its output in files under `dir` (named after `tag`), within [`LIMIT`].
pub fn run(cmd: Command, dir: &Path, tag: &str) -> Outcome {
    run_within(cmd, dir, tag, LIMIT)
}

/// [`run`] within `limit`.
pub fn run_within(mut cmd: Command, dir: &Path, tag: &str, limit: Duration) -> Outcome {
    let (out, err) = (dir.join(format!("{tag}.stdout")), dir.join(format!("{tag}.stderr")));
    // The command line without the environment.
    let what = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(File::create(&out).expect("stdout file"))
        .stderr(File::create(&err).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let (status, took) = wait_all(&mut [child], limit);
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    Outcome { what, status: status[0], stdout: read(&out), stderr: read(&err), took }
}

/// `exe args` as `nranks` ranks of `jitccl launch`, meeting at NCCL_COMM_ID.
pub fn launch(exe: &Path, nranks: usize, args: &[&str], dir: &Path, tag: &str) -> Outcome {
    launch_with(exe, nranks, args, &[], dir, tag)
}

/// [`launch`] with the variables `env` set for every rank.
pub fn launch_with(exe: &Path, nranks: usize, args: &[&str], env: &[(&str, &str)], dir: &Path, tag: &str) -> Outcome {
    let mut cmd = Command::new(&built().jitccl);
    rank_env(&mut cmd)
        .args(["launch", "-n", &nranks.to_string(), "--timeout", &(LIMIT.as_secs() - 10).to_string(), "--"])
        .arg(exe)
        .args(args)
        .envs(env.iter().copied())
        .env("NCCL_COMM_ID", format!("127.0.0.1:{}", free_port()));
    run(cmd, dir, tag)
}
