//! The programs some tests run (libnccl.so, the `jitccl` command, the examples), built when
//! a narrow `cargo test` did not build them: all at once, with the workspace's features, as
//! scripts/run_tests.py builds them for the whole suite. A build of fewer packages would
//! unify their dependencies' features differently and relink those files, under the tests
//! that run them; this one finds them fresh after the suite's build.

use std::path::Path;
use std::process::{Command, Stdio};

/// Builds them into `profile_dir` (…/target/<profile>, where this test was built) from
/// `workspace` (the repository's root).
pub fn build(workspace: &Path, profile_dir: &Path) {
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(p) => p,
        None => panic!("{} has no profile name", profile_dir.display()),
    };
    eprintln!("building the workspace's libraries, programs and examples ({profile}) for this test");
    let mut cargo = Command::new(env!("CARGO"));
    // The variables cargo gives a test describe the test's package; a build script that
    // reads one (ring's reads CARGO_MANIFEST_DIR) would see it changed and rebuild, and
    // everything above it with it.
    for (var, _) in std::env::vars_os() {
        let name = var.to_string_lossy();
        if ["CARGO_MANIFEST_", "CARGO_PKG_", "CARGO_BIN_", "CARGO_CRATE_", "CARGO_PRIMARY_", "CARGO_TARGET_TMPDIR"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            cargo.env_remove(&var);
        }
    }
    let out = cargo
        .args(["build", "--profile", profile, "--workspace", "--lib", "--bins", "--examples"])
        .env("CARGO_TARGET_DIR", profile_dir.parent().expect("target/<profile>"))
        .current_dir(workspace)
        .stdin(Stdio::null())
        .output()
        .expect("run cargo");
    assert!(out.status.success(), "the build failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
}
