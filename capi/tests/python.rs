//! Python without a build step, as vLLM's pynccl loads NCCL: `tests/python/ctypes_ranks.py`
//! loads libnccl.so.2 with ctypes and runs collectives on numpy arrays at 2 and 4 ranks
//! started by `jitccl launch`, each rank checking against its own reference. Python 3 with
//! numpy is a test requirement (scripts/setup.sh installs numpy), so its absence fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The folder cargo built this test's package into (…/target/release).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// The `jitccl` binary (built here if this narrower test run did not build it).
fn jitccl(dir: &Path) -> PathBuf {
    let exe = dir.join("jitccl");
    if !exe.exists() {
        let mut cargo = Command::new(env!("CARGO"));
        cargo.args(["build", "-p", "jitccl", "--bin", "jitccl"]).current_dir(env!("CARGO_MANIFEST_DIR"));
        if dir.ends_with("release") {
            cargo.arg("--release");
        }
        assert!(cargo.status().expect("run cargo to build jitccl").success(), "building jitccl failed");
    }
    exe
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("bind a free port").port()
}

#[test]
fn ctypes_program_runs_collectives_on_numpy_arrays() {
    let dir = target_dir();
    let lib = dir.join("libnccl.so.2");
    assert!(lib.exists(), "{} is missing (cargo builds it with this package)", lib.display());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/ctypes_ranks.py");
    for n in [2, 4] {
        let start = Instant::now();
        let out = Command::new(jitccl(&dir))
            .args(["launch", "-n", &n.to_string(), "--timeout", "180", "--", "python3"])
            .arg(&script)
            .env("NCCL_SO", &lib)
            .env("NCCL_COMM_ID", format!("127.0.0.1:{}", free_port()))
            .stdin(Stdio::null())
            .output()
            .expect("run jitccl launch");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{n} ranks: {}\n{text}", out.status);
        for r in 0..n {
            let passed = |l: &str| l.contains(&format!("rank {r}: ")) && l.ends_with("checks passed");
            assert!(text.lines().any(passed), "{n} ranks: rank {r} did not pass:\n{text}");
        }
        assert!(start.elapsed() < Duration::from_secs(180), "{n} ranks took {:?}", start.elapsed());
    }
}
