//! PyTorch's "jitccl" process-group backend (`python/jitccl/torch.py`) in a real PyTorch:
//! Debian trixie's CPU-only python3-torch 2.6, in the debootstrap chroot that
//! `scripts/setup-torch.sh` makes in `.deps/torch-chroot` (a test requirement, as mpirun is
//! for the MPI tests: a failed set-up fails the test; it needs root and Debian's package
//! servers the first time, about 270 MB, and is instant after). Each rank of `jitccl launch`
//! runs `scripts/setup-torch.sh run python3 python/tests/torch_collectives.py`: the script's
//! private mount namespace shows the repository, the built library and the kernel cache
//! inside the chroot, and its mounts go with the rank.
//!
//! `torch_collectives.py` checks every collective against Gloo in the same processes, DDP
//! training against DDP on Gloo, async Works, sends and receives, new_group and
//! destroy_process_group, and calls that disagree across ranks (an error on every rank,
//! nothing written), at 2 and 4 ranks.

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;

/// The longest the chroot's first set-up may take (a download of about 270 MB).
const SETUP_LIMIT: Duration = Duration::from_secs(900);

/// The longest one launch (all its ranks) may run. More than common's [`LIMIT`]: with a
/// cold kernel cache each of the 4 ranks compiles about 75 kernels (every type and op),
/// about 75 s on 2 busy cores; warm, it takes about 15 s.
const RUN_LIMIT: Duration = Duration::from_secs(300);

fn repo() -> &'static Path {
    capi_dir().parent().expect("the workspace")
}

fn setup_script() -> PathBuf {
    repo().join("scripts/setup-torch.sh")
}

/// Runs `scripts/setup-torch.sh` (once per test process) within [`SETUP_LIMIT`]; panics
/// with its output when it fails. Returns what it printed.
fn setup() -> &'static str {
    static DONE: OnceLock<String> = OnceLock::new();
    DONE.get_or_init(|| {
        let tmp = tempfile::tempdir().expect("a temporary folder");
        let (out, err) = (tmp.path().join("setup.stdout"), tmp.path().join("setup.stderr"));
        let start = Instant::now();
        let child = Command::new("bash")
            .arg(setup_script())
            .stdin(Stdio::null())
            .stdout(File::create(&out).expect("stdout file"))
            .stderr(File::create(&err).expect("stderr file"))
            .spawn()
            .expect("run bash scripts/setup-torch.sh");
        let (status, took) = wait_all(&mut [child], SETUP_LIMIT);
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        let (stdout, stderr) = (read(&out), read(&err));
        assert!(
            status[0].is_some_and(|s| s.success()),
            "scripts/setup-torch.sh failed ({:?} after {:.0} s): PyTorch for this test is Debian trixie's \
             python3-torch in a debootstrap chroot, which needs root and Debian's package servers\n\
             --- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
            status[0],
            took.as_secs_f64()
        );
        eprintln!("torch: set-up in {:.1} s: {}", start.elapsed().as_secs_f64(), stdout.trim());
        stdout
    })
}

/// `cmd` as common's `run`, within [`RUN_LIMIT`]; killed at it, a failure.
fn run_limited(cmd: Command, dir: &Path, tag: &str) -> Outcome {
    let outcome = run_within(cmd, dir, tag, RUN_LIMIT);
    assert!(outcome.status.is_some(), "killed at the {} s limit: {}", RUN_LIMIT.as_secs(), outcome.report());
    outcome
}

/// The mounts of this process's namespace under the chroot (none should outlive a rank).
fn chroot_mounts() -> Vec<String> {
    let chroot = repo().join(".deps/torch-chroot");
    let chroot = chroot.to_string_lossy();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&*chroot))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_jitccl_backend_matches_gloo_at_2_and_4_ranks() {
    let built = built();
    setup();
    // The set-up is idempotent: a second run finds the marker and returns at once.
    let again = Instant::now();
    let out = Command::new("bash").arg(setup_script()).stdin(Stdio::null()).output().expect("run setup-torch.sh");
    assert!(out.status.success(), "a second setup-torch.sh: {}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("present at") && again.elapsed() < Duration::from_secs(5),
        "a second setup-torch.sh is not instant ({:.1} s): {}",
        again.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&out.stdout)
    );
    let before = chroot_mounts();
    let tmp = tempfile::tempdir().expect("a temporary folder");
    // Inside the chroot: the repository and /tmp are there; the library's folder, the
    // kernel cache and this test's folder may be elsewhere.
    let mut binds = vec![built.dir.clone(), tmp.path().to_path_buf()];
    if let Some(cache) = std::env::var_os("JITCCL_CACHE_DIR").filter(|c| !c.is_empty()) {
        binds.push(PathBuf::from(cache));
    }
    let binds = std::env::join_paths(&binds).expect("paths without ':'");
    for n in [2, 4] {
        let mut cmd = Command::new(&built.jitccl);
        rank_env(&mut cmd)
            .args(["launch", "-n", &n.to_string(), "--timeout", &(RUN_LIMIT.as_secs() - 10).to_string(), "--"])
            .arg(setup_script())
            .args(["run", "python3"])
            .arg(repo().join("python/tests/torch_collectives.py"))
            .env("PYTHONPATH", repo().join("python"))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("JITCCL_NCCL_SO", built.dir.join("libnccl.so.2"))
            .env("JITCCL_TORCH_BIND", &binds)
            // Debian's torch has no libuv; Gloo on loopback (the host name may not resolve).
            .env("USE_LIBUV", "0")
            .env("GLOO_SOCKET_IFNAME", "lo")
            .current_dir(tmp.path());
        run_limited(cmd, tmp.path(), &format!("torch-{n}")).assert_passed(n, 700);
    }
    assert_eq!(chroot_mounts(), before, "the ranks' mounts are gone with them");
}
