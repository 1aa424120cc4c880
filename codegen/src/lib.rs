//! jitccl-codegen: specializes collective kernels for one (collective, algorithm, protocol,
//! datatype, op), renders them from the askama templates in `templates/`, compiles them for
//! the host (system C compiler) or CUDA (NVRTC), and caches the result in memory and on disk.

pub mod abi;
pub mod cache;
pub mod compile;
pub mod generator;
mod render;
pub mod spec;

pub use compile::CompileError;
pub use generator::{Artifact, CudaImage, Generator, Provenance};
pub use render::render;
pub use spec::*;
