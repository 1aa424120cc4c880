//! This package's example programs, which some tests run as programs.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The example `name`, built beside this test (target/<profile>/examples): `cargo test
/// --all-targets` builds examples; a narrower `cargo test` does not, so it is built then.
pub fn example(name: &str) -> PathBuf {
    let test = std::env::current_exe().expect("the test binary's path");
    let profile_dir = test.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
    let exe = profile_dir.join("examples").join(name);
    if !exe.exists() {
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => "dev",
            Some(p) => p,
            None => panic!("{} has no profile name", profile_dir.display()),
        };
        let mut cargo = Command::new(env!("CARGO"));
        cargo.args(["build", "--profile", profile, "--example", name]).current_dir(env!("CARGO_MANIFEST_DIR"));
        let status = cargo.status().unwrap_or_else(|e| panic!("run cargo to build examples/{name}: {e}"));
        assert!(status.success(), "building examples/{name} failed: {status}");
    }
    assert!(exe.exists(), "{} is missing after building it", exe.display());
    exe
}
