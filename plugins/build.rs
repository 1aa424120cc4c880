//! Builds the C plugins into OUT_DIR as shared libraries, with the C compiler the `cc`
//! crate finds (`$CC`, else `cc`); `src/lib.rs` names their paths.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Compiles `sources` into the shared library `out`, with `defines` (`-D` values).
fn shared_library(sources: &[&str], defines: &[&str], out: &Path) {
    let compiler = cc::Build::new().get_compiler();
    let mut cmd: Command = compiler.to_command();
    cmd.args(["-shared", "-fPIC", "-O2", "-std=c11", "-D_DEFAULT_SOURCE", "-Wall", "-Wextra", "-Werror", "-Iinclude"]);
    cmd.args(defines.iter().map(|d| format!("-D{d}")));
    cmd.args(sources).arg("-o").arg(out);
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot run the C compiler ({cmd:?}): {e}"));
    assert!(status.success(), "{cmd:?} failed ({status})");
    for s in sources {
        println!("cargo:rerun-if-changed={s}");
    }
}

// --- Tuner plugins -------------------------------------------------------------------

/// The CSV tuner (`tuner-csv/`): every table version, and one exporting only v2.
fn tuner_plugins(out: &Path) {
    println!("cargo:rerun-if-changed=include/jitccl_tuner.h");
    shared_library(&["tuner-csv/csv.c"], &[], &out.join("libnccl-tuner-csv.so"));
    shared_library(&["tuner-csv/csv.c"], &["JT_V2_ONLY"], &out.join("libnccl-tuner-csv-v2.so"));
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    tuner_plugins(&out);
}
