//! Compiles the C plugins into OUT_DIR with the system C compiler ($CC, else `cc`):
//! net-fabric/ into libnccl-net-fabric.so, net-edges/edges.c once per edge variant, and
//! net-gpu/gpu.c into the GPU stand-in (libnccl-net-edge-gpu.so), tuner-csv/csv.c into the
//! CSV tuner (every table version, and one exporting only v2), and both plugins into one
//! library.

use std::path::{Path, PathBuf};
use std::process::Command;

const FLAGS: &[&str] = &["-fPIC", "-shared", "-O2", "-Wall", "-Wextra", "-fvisibility=hidden"];

/// (library name, preprocessor switch) of each edge plugin.
const EDGES: &[(&str, &str)] = &[
    ("libnccl-net-edge-v8only.so", "EDGE_V8ONLY"),
    ("libnccl-net-edge-initfail.so", "EDGE_INITFAIL"),
    ("libnccl-net-edge-nodev.so", "EDGE_NODEV"),
    ("libnccl-net-edge-failsend.so", "EDGE_FAILSEND"),
    ("libnccl-net-edge-standin.so", "EDGE_STANDIN"),
];

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    println!("cargo:rerun-if-env-changed=CC");
    println!("cargo:rerun-if-changed=build.rs");
    let include = root.join("include");
    let fabric_sources = watch(&root.join("net-fabric"), "c");
    watch(&root.join("net-fabric"), "h");
    watch(&include, "h");
    let edges_sources = watch(&root.join("net-edges"), "c");

    check_libfabric(&cc, &out);
    let include_flag = format!("-I{}", include.display());
    // Log lines name source files relative to this crate, not to the build machine.
    let prefix_map = format!("-fmacro-prefix-map={}/=", root.display());
    let fabric = out.join("libnccl-net-fabric.so");
    compile(&cc, &fabric, &[&include_flag, &prefix_map], &fabric_sources, &["-lfabric", "-ldl"]);
    let inner = format!("-DEDGE_INNER_DEFAULT=\"{}\"", fabric.display());
    for (name, switch) in EDGES {
        let define = format!("-D{switch}");
        compile(
            &cc,
            &out.join(name),
            &[&include_flag, &prefix_map, &define, &inner],
            &edges_sources,
            &["-ldl", "-lpthread"],
        );
    }
    // No libfabric and no CUDA at build time: it runs on a GPU machine that has neither's
    // development files, and loads the CUDA driver itself.
    let gpu_sources = watch(&root.join("net-gpu"), "c");
    compile(
        &cc,
        &out.join("libnccl-net-edge-gpu.so"),
        &[&include_flag, &prefix_map],
        &gpu_sources,
        &["-ldl", "-lpthread"],
    );
    let tuner_sources = watch(&root.join("tuner-csv"), "c");
    for (name, flags) in [("libnccl-tuner-csv.so", &[][..]), ("libnccl-tuner-csv-v2.so", &["-DJT_V2_ONLY"][..])] {
        let flags: Vec<&str> =
            [&include_flag, &prefix_map].into_iter().map(String::as_str).chain(flags.iter().copied()).collect();
        compile(&cc, &out.join(name), &flags, &tuner_sources, &[]);
    }
    // A network plugin library that carries a tuner too, as vendors' plugins may.
    let both: Vec<PathBuf> = fabric_sources.iter().chain(&tuner_sources).cloned().collect();
    compile(&cc, &out.join("libnccl-net-fabric-csv.so"), &[&include_flag, &prefix_map], &both, &["-lfabric", "-ldl"]);
}

/// The files of `dir` ending in `.ext`, each (and the folder, for files added later)
/// registered with cargo as an input.
fn watch(dir: &Path, ext: &str) -> Vec<PathBuf> {
    println!("cargo:rerun-if-changed={}", dir.display());
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    files.sort();
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    files
}

/// Fails with the package to install when libfabric's header is missing.
fn check_libfabric(cc: &str, out: &Path) {
    let probe = out.join("libfabric-probe.c");
    std::fs::write(&probe, "#include <rdma/fabric.h>\n").expect("writing the libfabric probe");
    let status = Command::new(cc)
        .args(["-E", "-o", "/dev/null"])
        .arg(&probe)
        .status()
        .unwrap_or_else(|e| panic!("running the C compiler '{cc}' (install gcc or set CC): {e}"));
    if !status.success() {
        panic!(
            "libfabric's header <rdma/fabric.h> was not found: install it with \
             `apt-get install libfabric-dev` (scripts/setup.sh does)"
        );
    }
}

fn compile(cc: &str, output: &Path, flags: &[&str], sources: &[PathBuf], libs: &[&str]) {
    let result = Command::new(cc)
        .args(FLAGS)
        .args(flags)
        .args(sources)
        .arg("-o")
        .arg(output)
        .args(libs)
        .output()
        .unwrap_or_else(|e| panic!("running the C compiler '{cc}': {e}"));
    let diagnostics = String::from_utf8_lossy(&result.stderr);
    if !result.status.success() {
        panic!("compiling {} failed:\n{diagnostics}", output.display());
    }
    for line in diagnostics.lines() {
        println!("cargo:warning={line}");
    }
}
