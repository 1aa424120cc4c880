//! The library's soname is libnccl.so.2, as NCCL's: programs linked against it record that
//! name, and PyTorch's wheels look for it. Beside the built libnccl.so, a link of that name
//! lets such programs run from the build folder (the link dangles until the first link).

use std::path::PathBuf;

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnccl.so.2");
    println!("cargo:rerun-if-changed=build.rs");
    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out.
    let Some(profile_dir) =
        std::env::var_os("OUT_DIR").map(PathBuf::from).and_then(|p| p.ancestors().nth(3).map(PathBuf::from))
    else {
        return;
    };
    let link = profile_dir.join("libnccl.so.2");
    if std::fs::symlink_metadata(&link).is_err() {
        // Best effort: a missing link only means linking with -lnccl needs it made by hand.
        let _ = std::os::unix::fs::symlink("libnccl.so", &link);
    }
}
