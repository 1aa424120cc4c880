//! Python on the C API, each rank checking against its own reference under `jitccl launch`:
//!
//! - without a build step, as vLLM's pynccl loads NCCL: `tests/python/ctypes_ranks.py` loads
//!   libnccl.so.2 with ctypes and runs collectives on numpy arrays at 2 and 4 ranks;
//! - the `jitccl` package (`python/`), installed with pip (given the built library, so pip
//!   builds nothing): its settings read through the library, and `python/tests/ranks.py` at
//!   1 to 3 ranks;
//! - the wheel as users get it (`scripts/wheel.sh`): a manylinux tag by auditwheel, the
//!   library inside, and a collective from a copy installed into a fresh venv.
//!
//! Python 3 with pip and numpy, and the wheel tools, are test requirements (scripts/setup.sh
//! installs them), so their absence fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use common::*;

/// pip builds `python/` in place (its `build/` folder), so one build at a time.
static PIP_BUILD: Mutex<()> = Mutex::new(());

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace")
}

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
    let repo = repo();
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let site = tmp.path().join("site");
    let mut pip = Command::new("python3");
    pip.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target"])
        .arg(&site)
        .arg(repo.join("python"))
        .env("JITCCL_NCCL_SO", built.dir.join("libnccl.so"));
    let out = {
        let _one = PIP_BUILD.lock().unwrap_or_else(|e| e.into_inner());
        run(pip, tmp.path(), "pip")
    };
    assert!(out.status.is_some_and(|s| s.success()), "pip install ./python: {}", out.report());
    assert!(site.join("jitccl/lib/libnccl.so.2").exists(), "the package holds no library");
    assert!(
        site.join("jitccl/torch/_native.cpp").exists(),
        "the package holds no source of the PyTorch backend's C++ part (compiled at first use)"
    );
    let xdg = tmp.path().join("xdg");
    let mut settings = Command::new("python3");
    settings
        .args(["-c", THE_LIBRARYS_SETTINGS])
        .arg(&xdg)
        .env("PYTHONPATH", &site)
        .env_remove("JITCCL_CACHE_DIR")
        .env_remove("JITCCL_TIMEOUT")
        .env_remove("NCCL_TIMEOUT")
        .env("XDG_CACHE_HOME", &xdg)
        .envs([("JITCCL_NCHANNELS", "3"), ("NCCL_BUFFSIZE", "2M"), ("JITCCL_TORCH_NATIVE", "sometimes")]);
    let out = run(settings, tmp.path(), "settings");
    assert!(out.status.is_some_and(|s| s.success()), "the package's settings: {}", out.report());
    for n in [1, 2, 3] {
        let mut cmd = Command::new(&built.jitccl);
        rank_env(&mut cmd)
            .args(["launch", "-n", &n.to_string(), "--", "python3"])
            .arg(repo.join("python/tests/ranks.py"))
            .env("PYTHONPATH", &site)
            // Its wire checks need the wires' kernels, which one host runs only when asked.
            .env("JITCCL_WIRE_LOCAL", "encode")
            .env("NCCL_COMM_ID", format!("127.0.0.1:{}", free_port()));
        run(cmd, tmp.path(), &format!("package-{n}")).assert_passed(n, 45);
    }
}

/// The package reads settings through the library (`jitcclSettingsJson`, `jitcclCacheDir`):
/// values, their sources and the library's refusals, and the cache folder the library uses
/// (the user's cache folder follows XDG_CACHE_HOME, given as argv[1]).
const THE_LIBRARYS_SETTINGS: &str = r#"
import os, sys, jitccl
from jitccl import _settings
s = jitccl.settings()
assert (s["JITCCL_NCHANNELS"]["value"], s["JITCCL_NCHANNELS"]["given"]) == ("3", True), s["JITCCL_NCHANNELS"]
assert s["JITCCL_BUFFSIZE"]["source"] == "NCCL_BUFFSIZE", s["JITCCL_BUFFSIZE"]
assert _settings.given("JITCCL_TIMEOUT") is None
try:
    _settings.given("JITCCL_TORCH_NATIVE")
    sys.exit("a value the library refuses was taken")
except ValueError as e:
    assert "JITCCL_TORCH_NATIVE='sometimes': expected one of auto, 0, 1" in str(e), e
assert _settings.cache_dir() == os.path.join(sys.argv[1], "jitccl"), _settings.cache_dir()
os.environ["JITCCL_CACHE_DIR"] = ""
assert _settings.cache_dir() == "", "an empty JITCCL_CACHE_DIR keeps no cache"
print("settings through the library")
"#;

/// A 1-rank PreMulSum out of place, run by the venv's Python outside the repository: the
/// package and its library must be the installed ones.
const FROM_THE_WHEEL: &str = r#"
import array, os, sys, jitccl
venv = os.path.realpath(sys.argv[1])
for path in (jitccl.__file__, jitccl.library_path):
    if not os.path.realpath(path).startswith(venv + os.sep):
        sys.exit(f"{path} is not the copy installed in {venv}")
comm = jitccl.Comm(1, jitccl.get_unique_id(), 0)
x, y = array.array("f", [1.5, -2.0, 3.0]), array.array("f", [0.0] * 3)
comm.all_reduce(x, y, op=("premul_sum", 0.5))
if list(y) != [0.75, -1.0, 1.5]:
    sys.exit(f"all_reduce gave {list(y)}")
print("the installed wheel reduced")
"#;

#[test]
fn the_wheel_is_manylinux_with_the_library_and_runs_from_a_fresh_venv() {
    let built = built();
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let dist = tmp.path().join("dist");
    let mut build = Command::new("bash");
    build.arg(repo().join("scripts/wheel.sh")).arg(&dist).env("JITCCL_NCCL_SO", built.dir.join("libnccl.so"));
    let out = {
        let _one = PIP_BUILD.lock().unwrap_or_else(|e| e.into_inner());
        run(build, tmp.path(), "wheel")
    };
    assert!(out.status.is_some_and(|s| s.success()), "scripts/wheel.sh: {}", out.report());
    let wheel = PathBuf::from(out.stdout.trim());
    let name = wheel.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    assert!(name.starts_with("jitccl-") && name.contains("-py3-none-manylinux_"), "wheel named {name:?}");

    let mut show = Command::new(repo().join(".deps/wheel-tools/bin/auditwheel"));
    show.arg("show").arg(&wheel);
    let shown = run(show, tmp.path(), "auditwheel");
    assert!(shown.status.is_some_and(|s| s.success()), "auditwheel show: {}", shown.report());
    let words = shown.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("consistent with the following platform tag: \"manylinux_"),
        "auditwheel gives no manylinux tag: {}",
        shown.report()
    );
    let mut list = Command::new("python3");
    list.args(["-c", "import sys, zipfile; print(*zipfile.ZipFile(sys.argv[1]).namelist(), sep='\\n')"]).arg(&wheel);
    let listed = run(list, tmp.path(), "list");
    assert!(
        listed.stdout.lines().any(|l| l == "jitccl/lib/libnccl.so.2"),
        "the wheel holds no jitccl/lib/libnccl.so.2: {}",
        listed.report()
    );

    let venv = tmp.path().join("venv");
    let mut make = Command::new("python3");
    make.args(["-m", "venv", "--without-pip"]).arg(&venv);
    let made = run(make, tmp.path(), "venv");
    assert!(made.status.is_some_and(|s| s.success()), "python3 -m venv: {}", made.report());
    let python = venv.join("bin/python");
    let mut pip = Command::new("python3");
    pip.args(["-m", "pip", "--python"])
        .arg(&python)
        .args(["install", "--quiet", "--disable-pip-version-check", "--no-index", "--no-deps"])
        .arg(&wheel);
    let installed = run(pip, tmp.path(), "install");
    assert!(installed.status.is_some_and(|s| s.success()), "pip install of the wheel: {}", installed.report());

    let mut cmd = Command::new(&python);
    rank_env(&mut cmd)
        .current_dir(tmp.path())
        .args(["-c", FROM_THE_WHEEL])
        .arg(&venv)
        .env_remove("PYTHONPATH")
        .env_remove("JITCCL_NCCL_SO");
    let ran = run(cmd, tmp.path(), "from-wheel");
    assert!(
        ran.status.is_some_and(|s| s.success()) && ran.stdout.contains("the installed wheel reduced"),
        "the installed wheel: {}",
        ran.report()
    );
}
