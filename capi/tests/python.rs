//! Python on the C API, each rank checking against its own reference under `jitccl launch`:
//!
//! - without a build step, as vLLM's pynccl loads NCCL: `tests/python/ctypes_ranks.py` loads
//!   libnccl.so.2 with ctypes and runs collectives on numpy arrays at 2 and 4 ranks;
//! - the `jitccl` package (`python/`), installed with pip (given the built library, so pip
//!   builds nothing): `python/tests/ranks.py` at 1 to 3 ranks.
//!
//! Python 3 with pip and numpy is a test requirement (scripts/setup.sh installs numpy), so
//! its absence fails.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

#[test]
fn ctypes_program_runs_collectives_on_numpy_arrays() {
    let built = built();
    let lib = built.dir.join("libnccl.so.2");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/ctypes_ranks.py");
    let tmp = tempfile::tempdir().expect("a temporary folder");
    for n in [2, 4] {
        let mut cmd = Command::new(&built.jitccl);
        rank_env(&mut cmd)
            .args(["launch", "-n", &n.to_string(), "--", "python3"])
            .arg(&script)
            .env("NCCL_SO", &lib)
            .env("NCCL_COMM_ID", format!("127.0.0.1:{}", free_port()));
        run(cmd, tmp.path(), &format!("python-{n}")).assert_passed(n, 80);
    }
}

#[test]
fn the_package_installs_with_pip_and_runs_every_collective() {
    let built = built();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace");
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let site = tmp.path().join("site");
    let mut pip = Command::new("python3");
    pip.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target"])
        .arg(&site)
        .arg(repo.join("python"))
        .env("JITCCL_NCCL_SO", built.dir.join("libnccl.so"));
    let out = run(pip, tmp.path(), "pip");
    assert!(out.status.is_some_and(|s| s.success()), "pip install ./python: {}", out.report());
    assert!(site.join("jitccl/lib/libnccl.so.2").exists(), "the package holds no library");
    assert!(
        site.join("jitccl/torch/_native.cpp").exists(),
        "the package holds no source of the PyTorch backend's C++ part (compiled at first use)"
    );
    for n in [1, 2, 3] {
        let mut cmd = Command::new(&built.jitccl);
        rank_env(&mut cmd)
            .args(["launch", "-n", &n.to_string(), "--", "python3"])
            .arg(repo.join("python/tests/ranks.py"))
            .env("PYTHONPATH", &site)
            .env("NCCL_COMM_ID", format!("127.0.0.1:{}", free_port()));
        run(cmd, tmp.path(), &format!("package-{n}")).assert_passed(n, 45);
    }
}
