//! [`BootstrapError`]: every way a bootstrap can fail, each variant naming what happened.

use std::io;
use std::time::Duration;

/// Errors of the bootstrap. Errors the root detects for the whole communicator
/// (`DuplicateRank`, `NranksMismatch`, `InvalidRank`, `MissingRanks`, an aborted root) are
/// sent to every rank that reached the root, so each of them fails with the same error.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// A wait made no progress before the deadline. `peer` is the rank waited for, if the
    /// wait was for one rank (`None`: the root, or no particular rank).
    #[error("bootstrap {op}: timed out after {:.1} s{}", .after.as_secs_f64(), waiting_for(.peer))]
    Timeout { op: &'static str, peer: Option<usize>, after: Duration },
    /// The root's deadline passed before every rank had connected: `missing` never did.
    #[error("bootstrap timed out after {:.1} s: rank(s) {} of {nranks} never connected to the root", .after.as_secs_f64(), list(.missing))]
    MissingRanks { missing: Vec<usize>, nranks: usize, after: Duration },
    /// Bytes that should start with the bootstrap magic did not (a stray connection, another
    /// program on the port, or a corrupted / foreign unique id).
    #[error("bootstrap: wrong magic {got:#018x} from {from} (not a jitccl bootstrap peer or unique id)")]
    WrongMagic { from: String, got: u64 },
    /// Two ranks claimed the same rank number.
    #[error("bootstrap: rank {rank} was claimed by two ranks (duplicate rank)")]
    DuplicateRank { rank: usize },
    /// Ranks disagree on the communicator size: `rank` said `got`, the root had `expected`
    /// (from the first rank that reached it).
    #[error(
        "bootstrap: rank {rank} says nranks = {got}, but the communicator has nranks = {expected} (nranks mismatch)"
    )]
    NranksMismatch { expected: usize, got: usize, rank: usize },
    /// A rank reached root `iroot` with another list of unique ids (or another place in it)
    /// than the ranks before it: the ranks were not all given the same ids.
    #[error("bootstrap: rank {rank} was given other unique ids than the other ranks of root {iroot} (ids disagree)")]
    IdsMismatch { rank: usize, iroot: usize },
    /// A rank number outside `0..nranks`.
    #[error("bootstrap: invalid rank {rank} for nranks = {nranks}")]
    InvalidRank { rank: usize, nranks: usize },
    /// The abort flag was set while `op` ran (or the root was aborted).
    #[error("bootstrap {op}: aborted")]
    Aborted { op: &'static str },
    /// A peer closed its connection in the middle of `op`.
    #[error("bootstrap {op}: {} closed the connection", peer_name(.peer))]
    ConnectionClosed { op: &'static str, peer: Option<usize> },
    /// A peer with the right magic sent something the protocol does not allow.
    #[error("bootstrap: protocol error from {from}: {detail}")]
    Protocol { from: String, detail: String },
    /// A bad argument (unique id bytes, address, peer number, ...). Nothing was done.
    #[error("bootstrap: invalid argument: {0}")]
    InvalidArgument(String),
    /// An environment variable is missing or malformed.
    #[error("bootstrap: environment variable {var}: {problem}")]
    EnvVar { var: &'static str, problem: String },
    /// The launchers' variables give no rank, or several launchers give different ones.
    #[error("bootstrap: launcher environment: {0}")]
    Launch(String),
    /// No network interface matches the requested filter.
    #[error(
        "bootstrap: no usable network interface matches JITCCL_SOCKET_IFNAME={filter:?} (interfaces: {available})"
    )]
    NoInterface { filter: String, available: String },
    /// An OS call failed.
    #[error("bootstrap: {context}: {source}")]
    Io { context: String, source: io::Error },
}

impl BootstrapError {
    /// True for the errors that mean "a wait ran out of time" (`Timeout`, `MissingRanks`).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Timeout { .. } | Self::MissingRanks { .. })
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io { context: context.into(), source }
    }
}

pub type Result<T, E = BootstrapError> = std::result::Result<T, E>;

fn peer_name(peer: &Option<usize>) -> String {
    match peer {
        Some(p) => format!("rank {p}"),
        None => "the peer".to_string(),
    }
}

fn waiting_for(peer: &Option<usize>) -> String {
    match peer {
        Some(p) => format!(" waiting for rank {p}"),
        None => String::new(),
    }
}

fn list(ranks: &[usize]) -> String {
    ranks.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")
}
