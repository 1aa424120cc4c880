//! This package's example programs, which some tests run as programs.

use std::path::{Path, PathBuf};

/// The example `name`, built beside this test (target/<profile>/examples): `cargo test
/// --all-targets` builds examples; a narrower `cargo test` does not, so they are built then.
pub fn example(name: &str) -> PathBuf {
    let test = std::env::current_exe().expect("the test binary's path");
    let profile_dir = test.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
    let exe = profile_dir.join("examples").join(name);
    if !exe.exists() {
        crate::programs::build(Path::new(env!("CARGO_MANIFEST_DIR")), profile_dir);
    }
    assert!(exe.exists(), "{} is missing after building it", exe.display());
    exe
}
