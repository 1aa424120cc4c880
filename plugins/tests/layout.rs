//! The C declarations in include/jitccl_net.h keep NCCL's binary layout: tests/layout.c pins
//! the size of every properties struct, the offsets a version added or moved and the slots
//! of the function tables, and fails to compile on any slip.

use std::process::Command;

#[test]
fn plugin_interface_layout_matches_nccl() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let program = dir.path().join("layout");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let build = Command::new(&cc)
        .args(["-Wall", "-Wextra", "-Werror"])
        .arg(format!("-I{}", jitccl_plugins::INCLUDE_DIR))
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/layout.c"))
        .arg("-o")
        .arg(&program)
        .output()
        .unwrap_or_else(|e| panic!("running the C compiler '{cc}': {e}"));
    assert!(build.status.success(), "layout.c does not compile:\n{}", String::from_utf8_lossy(&build.stderr));
    let run = Command::new(&program).output().expect("run the layout program");
    assert!(run.status.success());
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), "props v8 64 v9 104 v10 104 v11 112 v12 128");
}
