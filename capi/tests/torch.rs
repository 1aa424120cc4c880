//! PyTorch's "jitccl" process-group backend (`python/jitccl/torch/`) in a real PyTorch:
//! Debian trixie's CPU-only python3-torch 2.6, in the debootstrap chroot that
//! `scripts/setup-torch.sh` makes, once per machine (a test requirement, as mpirun is
//! for the MPI tests: a failed set-up fails the test; it needs root and Debian's package
//! servers the first time, about 270 MB, and is instant after). Each rank of `jitccl launch`
//! runs `scripts/setup-torch.sh run python3 python/tests/torch_collectives.py`: the script's
//! private mount namespace shows the repository, the built library and the kernel cache
//! inside the chroot, and its mounts go with the rank.
//!
//! `torch_collectives.py` checks every collective against Gloo in the same processes, DDP
//! training against DDP on Gloo, async Works, sends and receives, new_group and
//! destroy_process_group, and calls that disagree across ranks (an error on every rank,
//! nothing written), at 2 and 4 ranks. `torch_killed_rank.py` kills one rank of 3 or 4 with
//! SIGKILL at several points: the others' calls must fail naming it within seconds. Both run
//! the C++ backend (`python/jitccl/torch/_native.cpp`, compiled in the chroot at first use);
//! the collectives run once more on the Python group alone, and `torch_native_modes.py` checks
//! what `JITCCL_TORCH_NATIVE` does where the C++ part cannot be built. `torch_hooks.py`
//! trains under DDP with `jitccl.torch.hooks.compress(wire)` at 2 ranks, through the C++
//! backend and through the Python group alone.

mod common;

use std::fs::File;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;

/// The longest the chroot's first set-up may take (a download of about 270 MB).
const SETUP_LIMIT: Duration = Duration::from_secs(900);

/// The longest one launch (all its ranks) may run. More than common's [`LIMIT`]: with a
/// cold kernel cache each of the 4 ranks compiles about 75 kernels (every type and op)
/// first, which on a small machine takes minutes.
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
    let out = Command::new("bash").arg(setup_script()).arg("dir").output().expect("run setup-torch.sh dir");
    let chroot = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(out.status.success() && !chroot.is_empty(), "setup-torch.sh dir: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&*chroot))
        .map(str::to_string)
        .collect()
}

/// The environment of a rank running `python/tests/*.py` in the chroot: the package, the
/// built library, and the folders to show inside it besides the repository and /tmp (the
/// library's, the kernel cache's and `dir`).
fn torch_env<'a>(cmd: &'a mut Command, dir: &Path) -> &'a mut Command {
    let built = built();
    let mut binds = vec![built.dir.clone(), dir.to_path_buf()];
    if let Some(cache) = std::env::var_os("JITCCL_CACHE_DIR").filter(|c| !c.is_empty()) {
        binds.push(PathBuf::from(cache));
    }
    cmd.env("PYTHONPATH", repo().join("python"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("JITCCL_NCCL_SO", built.dir.join("libnccl.so.2"))
        .env("JITCCL_TORCH_BIND", std::env::join_paths(&binds).expect("paths without ':'"))
        // Debian's torch has no libuv; Gloo on loopback (the host name may not resolve).
        .env("USE_LIBUV", "0")
        // The C++ backend, or a failure where it does not build (not a silent fallback).
        .env("JITCCL_TORCH_NATIVE", "1")
        .env("GLOO_SOCKET_IFNAME", "lo")
        .current_dir(dir)
}

/// `nranks` ranks of `python/tests/<script>` under `jitccl launch` in the chroot, with
/// [`torch_env`] (`dir`: the run's folder) and `JITCCL_TORCH_NATIVE` set to `native`.
fn launch_torch(nranks: usize, script: &str, native: &str, dir: &Path) -> Command {
    let mut cmd = Command::new(&built().jitccl);
    rank_env(&mut cmd)
        .args(["launch", "-n", &nranks.to_string(), "--timeout", &(RUN_LIMIT.as_secs() - 10).to_string(), "--"])
        .arg(setup_script())
        .args(["run", "python3"])
        .arg(repo().join("python/tests").join(script));
    torch_env(&mut cmd, dir).env("JITCCL_TORCH_NATIVE", native);
    cmd
}

#[test]
fn the_jitccl_backend_matches_gloo_at_2_and_4_ranks() {
    built();
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
    // The C++ backend (required, so that a failed build fails the test) at 2 and 4 ranks;
    // the Python group alone at 2.
    for (n, native) in [(2, "1"), (4, "1"), (2, "0")] {
        let cmd = launch_torch(n, "torch_collectives.py", native, tmp.path());
        run_limited(cmd, tmp.path(), &format!("torch-{n}-native{native}")).assert_passed(n, 700);
    }
    assert_eq!(chroot_mounts(), before, "the ranks' mounts are gone with them");
}

#[test]
fn ddp_hooks_average_gradients_in_a_wire_within_its_bound() {
    setup();
    let tmp = tempfile::tempdir().expect("a temporary folder");
    for native in ["1", "0"] {
        let mut cmd = launch_torch(2, "torch_hooks.py", native, tmp.path());
        // The ranks share a host, where wires run exactly unless asked to encode.
        cmd.env("JITCCL_WIRE_LOCAL", "encode");
        run_limited(cmd, tmp.path(), &format!("hooks-native{native}")).assert_passed(2, 20);
    }
}

#[test]
fn without_a_cpp_compiler_the_python_group_serves_or_the_setting_refuses() {
    setup();
    let tmp = tempfile::tempdir().expect("a temporary folder");
    for mode in ["auto", "1", "bogus"] {
        let mut cmd = launch_torch(1, "torch_native_modes.py", mode, tmp.path());
        cmd.env("CXX", "/nonexistent/c++");
        run_limited(cmd, tmp.path(), &format!("native-{mode}")).assert_passed(1, if mode == "auto" { 4 } else { 2 });
    }
}

/// One killed-rank run: `nranks` ranks of `python/tests/torch_killed_rank.py`, started one
/// by one (`jitccl launch` would end them all when one dies), rank `victim` killing itself
/// at `point`. The victim must die of SIGKILL; every other rank must see its calls fail
/// naming it within the script's 10 s (against a 60 s group timeout) and exit cleanly.
fn killed_rank(nranks: usize, victim: usize, point: &str) {
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let port = free_port().to_string();
    let mut children = Vec::new();
    for r in 0..nranks {
        let mut cmd = Command::new("bash");
        rank_env(&mut cmd)
            .arg(setup_script())
            .args(["run", "python3"])
            .arg(repo().join("python/tests/torch_killed_rank.py"))
            .envs([("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", &port)])
            .envs([("RANK", r.to_string()), ("WORLD_SIZE", nranks.to_string())])
            .envs([("LOCAL_RANK", r.to_string()), ("LOCAL_WORLD_SIZE", nranks.to_string())])
            .env("JITCCL_TORCH_VICTIM", victim.to_string())
            .env("JITCCL_TORCH_KILL_AT", point);
        torch_env(&mut cmd, tmp.path())
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(File::create(tmp.path().join(format!("{r}.stdout"))).expect("stdout file"))
            .stderr(File::create(tmp.path().join(format!("{r}.stderr"))).expect("stderr file"));
        children.push(cmd.spawn().expect("start a rank"));
    }
    let pids: Vec<u32> = children.iter().map(Child::id).collect();
    let (status, took) = wait_all(&mut children, LIMIT);
    let outcome = |r: usize| {
        let read = |s: &str| std::fs::read_to_string(tmp.path().join(format!("{r}.{s}"))).unwrap_or_default();
        Outcome {
            what: format!("torch_killed_rank.py {point}: rank {r} of {nranks}, rank {victim} killed"),
            status: status[r],
            stdout: read("stdout"),
            stderr: read("stderr"),
            took,
        }
    };
    let everything = || (0..nranks).map(|r| outcome(r).report()).collect::<Vec<_>>().join("\n=====\n");
    for r in 0..nranks {
        let o = outcome(r);
        if r == victim {
            assert_eq!(o.status.and_then(|s| s.signal()), Some(SIGKILL), "rank {victim} should die\n{}", everything());
            assert!(o.stdout.contains("dying"), "{}", everything());
        } else {
            let passed = o.checks_passed(r);
            assert!(
                o.status.is_some_and(|s| s.success()) && passed.len() == 1 && passed[0] >= 14,
                "rank {r}: checks passed {passed:?}\n{}",
                everything()
            );
        }
    }
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    let left: Vec<&String> =
        left.iter().filter(|n| pids.iter().any(|p| n.starts_with(&format!("jitccl-{p}-")))).collect();
    assert!(left.is_empty(), "shared memory left in /dev/shm by the ranks (pids {pids:?}): {left:?}");
    eprintln!("torch {point}: {nranks} ranks, rank {victim} killed: passed in {:.1} s", took.as_secs_f64());
}

#[test]
fn a_killed_rank_fails_the_others_calls_naming_it_within_seconds() {
    built();
    setup();
    let before = chroot_mounts();
    // Between collectives; while the others wait (rank 0: the store's and the root's);
    // after the ranks agreed on a call, before its data; inside a 64 MiB all_reduce; while
    // the others hold a send to it and a receive from it.
    for (nranks, victim, point) in
        [(3, 1, "next"), (4, 0, "pending"), (4, 3, "agreed"), (3, 2, "during"), (3, 1, "held")]
    {
        killed_rank(nranks, victim, point);
    }
    assert_eq!(chroot_mounts(), before, "the ranks' mounts are gone with them");
}
