//! `examples/process_group.rs` run as a program: it serves a store and starts 3 copies
//! of itself as ranks, each checking every result; all must print `rank R ok`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The example beside the `jitccl` binary, built if a narrower `cargo test` did not.
fn example(name: &str) -> PathBuf {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_jitccl")).parent().expect("the jitccl binary has a directory");
    let exe = bin_dir.join("examples").join(name);
    if !exe.exists() {
        let mut cargo = Command::new(env!("CARGO"));
        cargo.args(["build", "--example", name]).current_dir(env!("CARGO_MANIFEST_DIR"));
        if bin_dir.ends_with("release") {
            cargo.arg("--release");
        }
        assert!(cargo.status().expect("run cargo").success(), "building examples/{name} failed");
    }
    exe
}

#[test]
fn the_process_group_example_passes_its_checks_on_3_processes() {
    // The example bounds its ranks' lifetime itself (it kills them past its limit).
    let out = Command::new(example("process_group")).arg("3").output().expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    for r in 0..3 {
        assert!(stdout.contains(&format!("rank {r} ok")), "{stdout}");
    }
}
