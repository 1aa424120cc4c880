//! Errors, in NCCL's kinds: a caller mistake (InvalidArgument / InvalidUsage) changes
//! nothing; a peer that stops answering, an abort or a failed compile end the operation.

use std::borrow::Cow;

use jitccl_codegen::CompileError;

use crate::bootstrap::BootstrapError;
use crate::settings::SettingError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad argument (count, buffer size, root, peer, op for a datatype, ...). Nothing was done.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A call that is not allowed in the communicator's state (destroyed, aborted, ...).
    #[error("invalid usage: {0}")]
    InvalidUsage(String),
    /// The communicator is still being initialized in nonblocking mode (NCCL's
    /// ncclInProgress): poll [`Comm::async_error`](crate::Comm::async_error) until it is
    /// `Ready`, then call again.
    #[error("in progress: {0}")]
    InProgress(String),
    /// A kernel could not be generated, compiled or loaded.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// Ranks could not find each other (wrong id, duplicate rank, a rank missing, ...).
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    /// The rendezvous store failed or timed out.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A wait on a peer made no progress within the timeout.
    #[error(
        "{op} on rank {rank}: no progress for {timeout_s} s on channel {channel} waiting for {waiting} rank {peer}"
    )]
    Timeout { op: String, rank: usize, channel: usize, peer: i32, waiting: &'static str, timeout_s: f64 },
    /// The operation waited for a rank that had failed (or whose connection closed): the
    /// communicator has failed. `culprit` is the rank that failed first, as far as this
    /// rank could learn it.
    #[error("{op} on rank {rank}: rank {culprit} failed first ({how}); this rank was waiting for rank {peer}")]
    PeerFailed { op: String, rank: usize, peer: i32, culprit: usize, how: String },
    /// The communicator was aborted while the operation ran.
    #[error("{op} on rank {rank} was aborted")]
    Aborted { op: String, rank: usize },
    /// A process-group operation (`op`, number `seq` of its group, on `rank`) failed, timed
    /// out or was not run; `peer` is the rank it waited for, when known; `timed_out`: it
    /// (or the operation that broke the group) ran past a timeout, the group's or the
    /// communicator's.
    #[error("process group {op} #{seq} on rank {rank}: {reason}")]
    Work { op: Cow<'static, str>, seq: u64, rank: usize, peer: Option<usize>, reason: String, timed_out: bool },
    /// The operation or target is not available in this build or on this machine.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A device (the CUDA driver) refused an operation: allocation, copy, module load, launch.
    #[error("device error: {0}")]
    Device(String),
    /// An OS call failed.
    #[error("system error: {context}: {source}")]
    System { context: String, source: std::io::Error },
    /// A bug in jitccl.
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A copy of an error that failed a communicator or an operation, for every later
    /// call or waiter. The kinds a caller's result code comes from are kept; a wrapped
    /// error (compile, bootstrap, store) is copied as its message.
    pub(crate) fn replay(&self) -> Error {
        match self {
            Error::Timeout { op, rank, channel, peer, waiting, timeout_s } => Error::Timeout {
                op: op.clone(),
                rank: *rank,
                channel: *channel,
                peer: *peer,
                waiting,
                timeout_s: *timeout_s,
            },
            Error::PeerFailed { op, rank, peer, culprit, how } => {
                Error::PeerFailed { op: op.clone(), rank: *rank, peer: *peer, culprit: *culprit, how: how.clone() }
            }
            Error::Aborted { op, rank } => Error::Aborted { op: op.clone(), rank: *rank },
            Error::Work { op, seq, rank, peer, reason, timed_out } => Error::Work {
                op: op.clone(),
                seq: *seq,
                rank: *rank,
                peer: *peer,
                reason: reason.clone(),
                timed_out: *timed_out,
            },
            Error::InvalidArgument(m) => Error::InvalidArgument(m.clone()),
            Error::InvalidUsage(m) => Error::InvalidUsage(m.clone()),
            Error::InProgress(m) => Error::InProgress(m.clone()),
            Error::Unsupported(m) => Error::Unsupported(m.clone()),
            Error::Device(m) => Error::Device(m.clone()),
            Error::System { context, source } => Error::System {
                context: context.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Error::Internal(m) => Error::Internal(m.clone()),
            other => Error::Internal(other.to_string()),
        }
    }
}

impl Error {
    /// A copy of an error for one more caller: as [`Error::replay`], with a bootstrap's
    /// error whole (a nonblocking init's failure is the one init had).
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::Bootstrap(e) => Error::Bootstrap(e.duplicate()),
            e => e.replay(),
        }
    }
}

/// Maps an OS error to [`Error::System`] with what was being done.
pub(crate) fn sys(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::System { context, source }
}

pub(crate) fn invalid<T>(msg: impl Into<String>) -> Result<T> {
    Err(Error::InvalidArgument(msg.into()))
}

/// A bad setting is a caller's mistake: nothing was done.
impl From<SettingError> for Error {
    fn from(e: SettingError) -> Error {
        Error::InvalidArgument(e.to_string())
    }
}
