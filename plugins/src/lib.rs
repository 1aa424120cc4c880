//! jitccl's NCCL network plugins, built from C by this crate's build script, and where
//! they are: dev-dependents load them by path in their tests.
//!
//! - [`FABRIC`]: the "Fabric" plugin, a network over libfabric's RDM endpoints (the `tcp`
//!   provider unless `FI_PROVIDER` names another; `FI_TCP_IFACE` pins the interface),
//!   host memory only, exporting `ncclNetPlugin_v8` .. `ncclNetPlugin_v12`.
//! - The edge plugins, for a loader's unusual cases: [`EDGE_V8ONLY`] (only
//!   `ncclNetPlugin_v8`, forwarding to the fabric plugin), [`EDGE_INITFAIL`] (init fails),
//!   [`EDGE_NODEV`] (no devices), [`EDGE_FAILSEND`] (the Nth send of the process fails,
//!   N from `JITCCL_EDGE_FAIL_SEND`), [`EDGE_STANDIN`] (a stand-in for a hardware plugin:
//!   devices at the PCI paths `JITCCL_EDGE_PCI_PATHS` lists, each listen and connect's
//!   device appended to the file `JITCCL_EDGE_TRACE` names, and a process abort when a
//!   receive comm closes with a receive posted). The forwarding ones load the plugin named by
//!   `JITCCL_EDGE_INNER`, else [`FABRIC`].
//! - [`EDGE_GPU`]: "EdgeGpu", a stand-in for a NIC that reaches GPU memory: TCP sockets on
//!   loopback, `NCCL_PTR_HOST | NCCL_PTR_CUDA` and `forceFlush`, GPU memory copied with the
//!   CUDA driver (loaded with dlopen), `regMr` refusing memory of another kind than its type
//!   says, `iflush` counted and made to fail on request; its counts go to the file
//!   `JITCCL_EDGE_COUNTS` names.
//! - [`TUNER_CSV`]: a tuner plugin ("csv", `ncclTunerPlugin_v6` .. `_v2`) taking overrides
//!   from the CSV file `NCCL_TUNER_CONFIG_FILE` names, in the format of NCCL's example
//!   tuner; [`TUNER_CSV_V2`] the same exporting only `_v2`; [`FABRIC_CSV`] one library
//!   exporting both the fabric plugin's tables and the CSV tuner's.
//! - [`INCLUDE_DIR`]: `jitccl_net.h` and `jitccl_tuner.h`, the C declarations of the plugin
//!   interfaces.
//! - [`in_child`]: a test's body run in a child process of its test binary, with the
//!   variables these plugins read set there.

mod isolated;

pub use isolated::in_child;

/// The "Fabric" network plugin.
pub const FABRIC: &str = concat!(env!("OUT_DIR"), "/libnccl-net-fabric.so");
/// Exports only `ncclNetPlugin_v8` ("EdgeV8"), forwarding to the fabric plugin.
pub const EDGE_V8ONLY: &str = concat!(env!("OUT_DIR"), "/libnccl-net-edge-v8only.so");
/// `ncclNetPlugin_v12` and `_v8` whose init returns `ncclInternalError` ("EdgeInitFail").
pub const EDGE_INITFAIL: &str = concat!(env!("OUT_DIR"), "/libnccl-net-edge-initfail.so");
/// `ncclNetPlugin_v12` and `_v8` that initialize and report 0 devices ("EdgeNoDev").
pub const EDGE_NODEV: &str = concat!(env!("OUT_DIR"), "/libnccl-net-edge-nodev.so");
/// `ncclNetPlugin_v12` forwarding to the fabric plugin, except that send number
/// `JITCCL_EDGE_FAIL_SEND` of the process fails with `ncclSystemError`, as does every later
/// test on its communicator ("EdgeFailSend").
pub const EDGE_FAILSEND: &str = concat!(env!("OUT_DIR"), "/libnccl-net-edge-failsend.so");
/// `ncclNetPlugin_v12` forwarding to the fabric plugin, standing in for a hardware plugin
/// ("EdgeStandIn"): with `JITCCL_EDGE_PCI_PATHS` (comma-separated sysfs paths) one device per
/// path, each carried by the inner plugin's device 0; each listen and connect appends "listen
/// D" or "connect D" to the file `JITCCL_EDGE_TRACE` names; a receive comm closed with a
/// receive still posted aborts the process, as plugins do that cannot take one back.
pub const EDGE_STANDIN: &str = concat!(env!("OUT_DIR"), "/libnccl-net-edge-standin.so");
/// `ncclNetPlugin_v12` ("EdgeGpu"), standing in for a NIC with GPU Direct RDMA: one device
/// reporting `NCCL_PTR_HOST | NCCL_PTR_CUDA` and `forceFlush`, bytes over TCP on loopback,
/// GPU memory reached through the CUDA driver (`libcuda.so.1`, loaded with dlopen; without
/// it only host memory registers). `regMr` refuses memory whose kind is not the type given.
/// Its iflush requests complete on their `JITCCL_EDGE_FLUSH_TESTS`-th test (1 unless set);
/// iflush number `JITCCL_EDGE_FAIL_FLUSH` of the process fails with `ncclSystemError`.
/// `finalize` appends the process's counts to the file `JITCCL_EDGE_COUNTS` names:
/// `pid P regmr_host H regmr_cuda C iflush F gpu_bytes_out O gpu_bytes_in I`.
pub const EDGE_GPU: &str = concat!(env!("OUT_DIR"), "/libnccl-net-edge-gpu.so");
/// The CSV tuner: `ncclTunerPlugin_v6` .. `_v2`.
pub const TUNER_CSV: &str = concat!(env!("OUT_DIR"), "/libnccl-tuner-csv.so");
/// The CSV tuner exporting only `ncclTunerPlugin_v2`.
pub const TUNER_CSV_V2: &str = concat!(env!("OUT_DIR"), "/libnccl-tuner-csv-v2.so");
/// The "Fabric" network plugin and the CSV tuner in one library (`ncclNetPlugin_v8` ..
/// `_v12` and `ncclTunerPlugin_v2` .. `_v6`).
pub const FABRIC_CSV: &str = concat!(env!("OUT_DIR"), "/libnccl-net-fabric-csv.so");
/// The folder holding `jitccl_net.h` and `jitccl_tuner.h`.
pub const INCLUDE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/include");
