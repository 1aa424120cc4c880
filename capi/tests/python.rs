//! Python without a build step, as vLLM's pynccl loads NCCL: `tests/python/ctypes_ranks.py`
//! loads libnccl.so.2 with ctypes and runs collectives on numpy arrays at 2 and 4 ranks
//! started by `jitccl launch`, each rank checking against its own reference. Python 3 with
//! numpy is a test requirement (scripts/setup.sh installs numpy), so its absence fails.

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
