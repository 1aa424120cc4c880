//! The C part of the runtime: the variadic logger handed to NCCL-style plugins
//! (src/plugin/logger.c), which stable Rust cannot define.

fn main() {
    println!("cargo:rerun-if-changed=src/plugin/logger.c");
    cc::Build::new().file("src/plugin/logger.c").warnings(true).extra_warnings(true).compile("jitccl_plugin_logger");
}
