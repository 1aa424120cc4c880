//! jitccl-runtime: communicators and their collectives, and everything below them. Kernels
//! come from `jitccl-codegen`. `docs/architecture.md` maps the whole workspace (the data
//! flow of init and of one call, where to add things). The layers, each importing only
//! those below it (the exceptions are listed there):
//!
//! - `comm/`: the communicator (`Comm`): thin public calls, its state (`state`), its
//!   failure state (`failure`) and its creation (`init`: all ranks in one process, or one
//!   rank of a group of processes through `bootstrap` and `store`); a handle (`handle`:
//!   identity, abort, `async_error`) that exists before init ends in nonblocking mode,
//!   whose work then runs on a progress thread (`progress`); how calls leave it
//!   (`submit`) and groups (`group`); `split` and `shrink` make communicators from it;
//! - `enqueue/`: the one path from a call to a queued launch: table-driven argument checks,
//!   the tuning choice (`tune`), the kernel lookup (`jitccl-codegen`), launch arguments,
//!   and the kernel-visible tables;
//! - `graph`: the rings and trees of each channel, computed once and handed to channel
//!   setup, over `topo` (the machine model: NCCL's XML, detection); `tune`: the
//!   algorithm, protocol and channels of each call; `config`: what a communicator is
//!   created with (`JITCCL_*`), agreed on at init; `symmetric`: registered regions;
//! - `stream`: ordered queues of launches, run by their owner (it knows no communicator);
//! - `transport/`: the transport table (p2p, shm, net: which one connects each pair and
//!   how a peer's receive segment is reached), FIFO layout and connectors; `fault`: the
//!   failure boards through which a failure reaches the peers;
//! - `device/`: per target (`host`, `cuda`) memory, CTA execution and launch;
//! - `wait`: the spin/yield/park policy of every host-side wait (kernels, dispatchers,
//!   callers); `affinity`: which CPUs a rank's threads run on;
//! - `process_group/`: above `comm`, an asynchronous process group (c10d style): `Work`
//!   handles, a worker thread per group, a watchdog;
//! - `bootstrap/` (unique ids, the root, the ring) and `store/` (PyTorch's TCPStore wire
//!   protocol): how ranks find each other, used by init alone;
//! - leaves: `element` (Rust element types), `op` (reduction ops), `error`, `logging`
//!   (`JITCCL_DEBUG`).

mod affinity;
mod bootstrap;
mod comm;
mod config;
mod device;
mod element;
mod enqueue;
mod error;
mod fault;
/// Rings and trees per channel, searched over a topology (public for `jitccl topo` and plan inspection).
pub mod graph;
mod logging;
mod op;
mod process_group;
pub mod store;
mod stream;
mod symmetric;
pub mod topo;
mod transport;
mod tune;
mod wait;

pub use bootstrap::{launcher_vars, BootstrapError, UniqueId, UNIQUE_ID_BYTES};
pub use comm::{group, group_discard, group_end, group_start, Comm, CommState, Registration, Split};
pub use config::{Config, MAX_CHANNELS};
pub use device::{
    cuda_compute_capability, cuda_current_device, cuda_device_count, cuda_sync_launches, cuda_synchronize_stream,
    host_arena_available, Device, DeviceBuffer,
};
pub use element::Element;
pub use error::{Error, Result};
pub use jitccl_codegen::{Algorithm, Collective, CustomOp, DataType, Protocol};
pub use logging::init as init_logging;
pub use op::Op;
pub use process_group::{ProcessGroup, Work};
pub use stream::{Graph, Stream};
pub use tune::{
    AlgoOverrides, Constants, Estimate, Machine, OverrideError, Overrides, ProtoOverrides, Row, Set, Table, TableError,
    Topology,
};
