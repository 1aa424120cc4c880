//! jitccl-runtime: host devices and streams, communicators and their collectives, graph
//! search, transports and tuning. Kernels come from `jitccl-codegen`.

mod affinity;
pub mod bootstrap;
mod comm;
mod config;
mod device;
mod element;
mod error;
mod fault;
mod init;
pub mod graph;
mod logging;
pub mod store;
mod stream;
pub mod topo;
mod transport;
pub mod tune;

pub use bootstrap::UniqueId;
pub use comm::{Comm, Op};
pub use config::{Config, MAX_CHANNELS};
pub use device::{cuda_device_count, Device, DeviceBuffer};
pub use element::Element;
pub use error::{Error, Result};
pub use jitccl_codegen::{Algorithm, Collective, CustomOp, DataType, Protocol};
pub use stream::Stream;
