//! Compilers that turn generated source into loadable kernels: the system C compiler for
//! the host target (a shared object) and NVRTC for CUDA (CUBIN or PTX).

pub mod host;
pub mod nvrtc;

use crate::spec::{InvalidSpec, Target};

/// Why a kernel could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The compiler (or its library) is not installed or cannot be loaded.
    #[error("{compiler} is not available: {reason}")]
    Unavailable { compiler: &'static str, reason: String },
    /// The compiler rejected the source; `log` is its full output.
    #[error("{compiler} failed to compile {kernel}:\n{log}")]
    Failed { compiler: &'static str, kernel: String, log: String },
    /// A compiled artifact could not be loaded or lacks the kernel symbol.
    #[error("cannot load compiled kernel {kernel}: {reason}")]
    Load { kernel: String, reason: String },
    /// A generic lookup's artifact is for another target than the caller expects.
    #[error("the kernel compiled for {target} is not a {wanted}")]
    WrongArtifact { target: Target, wanted: &'static str },
    #[error(transparent)]
    Spec(#[from] InvalidSpec),
    #[error("template rendering failed: {0}")]
    Render(String),
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
}

impl CompileError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        CompileError::Io { context: context.into(), source }
    }
}
