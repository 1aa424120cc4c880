//! jitccl-runtime: communicators and their collectives, and everything below them. Kernels
//! come from `jitccl-codegen`. `docs/architecture.md` maps the whole workspace (the data
//! flow of init and of one call, where to add things).
//!
//! The layers, from the top. A module imports only modules of the layers below its own;
//! `tests/layers.rs` reads this list and checks every `crate::` path of every source file.
//!
//! 1. `process_group`: an asynchronous process group (c10d style) over a communicator:
//!    `Work` handles, operations queued on the caller's thread, a watchdog; `agreement`: the ranks' check
//!    that they make the same call (a descriptor all-gathered, a refusal naming each call);
//! 2. `comm`: the communicator (`Comm`): the calls that move data (`collectives`), its
//!    state (`inner`) and its creation (`init`: all ranks in one process, or one rank of a
//!    group of processes through `bootstrap` and `store`); its life after that
//!    (`lifecycle`: a handle that exists before init ends in nonblocking mode, abort,
//!    `async_error`, finalize, and `split`, `shrink` and `grow`, which make communicators
//!    from it), whose work in nonblocking mode runs on a progress thread (`progress`); how
//!    calls leave it (`submit`) and groups (`group`);
//! 3. `enqueue`: the one path from a call to a queued launch: table-driven argument checks,
//!    the tuning choice, the kernel lookup (`jitccl-codegen`), launch arguments;
//! 4. `tune`: the algorithm, protocol and channels of each call (tuning tables, the cost
//!    model, NCCL's tuner plugins); `stream`: ordered queues of launches, and what runs a communicator's
//!    launches on them (`Executor`: one kernel at a time, the kernel tables, the failure
//!    state, the count `finalize` waits for), so that a launch runs without a call back up
//!    into `comm`;
//! 5. `transport`: the transport table (p2p, shm, net: which one connects each pair and
//!    how a peer's receive segment is reached), FIFO layout, and the connectors of the
//!    graph's rings and trees;
//! 6. `graph`: the rings and trees of each channel, computed once and handed to channel
//!    setup;
//! 7. `topo`: the machine model (NCCL's XML, detection); `registry`: registered regions;
//!    `fault`: the failure boards through which a failure reaches the peers; `netplugin`:
//!    NCCL network plugins loaded, chosen (`net_name`) and driven through one interface;
//! 8. `config`: what a communicator is created with (the `JITCCL_ALGO`/`PROTO` grammar in
//!    `overrides`), completed from the settings and agreed on at init;
//! 9. `device`: per target (`host`, `cuda`) memory, CTA execution and launch;
//! 10. `error`: the runtime's `Error`, which wraps the bootstrap's and the store's own;
//! 11. `store`: PyTorch's TCPStore wire protocol (client and server), over
//! 12. `bootstrap`: unique ids, the root, the ring: how ranks find each other (`comm`'s
//!     init uses both);
//! 13. `logging`: `JITCCL_DEBUG`; `wait`: the spin/yield/park policy of every host-side wait
//!     (kernels, dispatchers, callers); `plugin`: finding and opening NCCL-style plugin
//!     libraries by NCCL's names, and the logger handed to them;
//! 14. `affinity`: which CPUs a rank's threads run on; `auth`: the job's key and the
//!     handshake with which every connection of the job proves that it knows it;
//!     `element`: Rust element types; `op`: reduction ops.
//!
//! Below them all, `settings` (every `JITCCL_*` variable, its parser, default and bounds) is
//! the crate `jitccl-settings`, re-exported here, which codegen reads through too.

mod affinity;
pub mod agreement;
pub mod auth;
mod bootstrap;
mod comm;
mod config;
mod device;
mod element;
mod enqueue;
mod error;
mod fault;
pub mod graph;
mod logging;
mod netplugin;
mod op;
mod plugin;
mod process_group;
mod registry;
pub mod store;
mod stream;
pub mod topo;
mod transport;
pub mod tune;
mod wait;

pub use jitccl_settings as settings;

pub use bootstrap::{launcher_vars, BootstrapError, UniqueId, UNIQUE_ID_BYTES};
pub use comm::{
    group, group_depth, group_discard, group_end, group_end_launched, group_simulate_end, group_start, Comm, CommState,
    Registration, Split, Wired,
};
pub use config::overrides::{AlgoOverrides, OverrideError, ProtoOverrides};
pub use config::{Config, WireLocal};
pub use device::{
    cuda_compute_capability, cuda_current_device, cuda_device_count, cuda_sync_launches, cuda_synchronize_stream,
    host_arena_available, Device, DeviceBuffer,
};
pub use element::Element;
pub use error::{Error, Result};
pub use jitccl_codegen::{Algorithm, Collective, CustomOp, DataType, Protocol, Wire, WireCodec};
pub use logging::init as init_logging;
pub use op::{Op, ScalarAt};
pub use process_group::{ProcessGroup, Work};
pub use settings::MAX_CHANNELS;
pub use stream::{CudaGraph, Stream};
