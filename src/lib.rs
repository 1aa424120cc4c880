//! jitccl: collective communication (AllReduce, Broadcast, Reduce, AllGather,
//! ReduceScatter, Send/Recv) with kernels generated and compiled at run time for exactly
//! the (collective, algorithm, protocol, datatype, op) in use — NVRTC for CUDA, the system
//! C compiler for the host target.
//!
//! ```no_run
//! use jitccl::{Comm, Config, Op};
//! let comms = Comm::init_all(2, &Config::default())?;
//! for c in &comms {
//!     let stream = c.device().stream()?;
//!     let buf = c.device().alloc_from(&[1.0f32, 2.0, 3.0])?;
//!     c.all_reduce(&buf, &buf, 3, Op::Sum, &stream)?;
//! }
//! # Ok::<(), jitccl::Error>(())
//! ```

pub use jitccl_codegen as codegen;
pub use jitccl_macros::{reduction, wire_codec};
pub use jitccl_runtime::*;
#[doc(hidden)]
pub use {float8, half};

pub mod reference;
