//! [`BootstrapError`]: every way a bootstrap can fail, each variant naming what happened;
//! [`Secs`], how every message of the bootstrap and the store writes a duration.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use crate::auth::{KeyError, Refusal};
use crate::settings::SettingError;

/// Errors of the bootstrap. Errors the root detects for the whole communicator
/// (`DuplicateRank`, `NranksMismatch`, `InvalidRank`, `MissingRanks`, an aborted root) are
/// sent to every rank that reached the root, so each of them fails with the same error.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// A wait made no progress before the deadline. `peer` is the rank waited for, if the
    /// wait was for one rank (`None`: the root, or no particular rank).
    #[error("bootstrap {op}: timed out after {}{}", Secs(*.after), waiting_for(.peer))]
    Timeout { op: &'static str, peer: Option<usize>, after: Duration },
    /// The root's deadline passed before every rank had connected: `missing` never did.
    /// `rank`: the rank told so (`None` in the root's own report).
    #[error("bootstrap{} timed out after {}: rank(s) {} of {nranks} never connected to the root", on_rank(.rank), Secs(*.after), list(.missing))]
    MissingRanks { rank: Option<usize>, missing: Vec<usize>, nranks: usize, after: Duration },
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
    /// The connection to a peer carried nothing back (no TCP acknowledgement, no answer to
    /// keepalive probes) for the link timeout (`JITCCL_LINK_TIMEOUT`) in the middle of `op`.
    #[error("bootstrap {op}: {} is unreachable: its link carried nothing back for the link timeout (JITCCL_LINK_TIMEOUT)", peer_name(.peer))]
    Unreachable { op: &'static str, peer: Option<usize> },
    /// Rank `culprit` died or failed before every rank had finished init (its root saw it,
    /// or it ran the root and the root is gone), so `rank`'s `op` cannot complete. `rank` is
    /// `None` in the root's own report.
    #[error("bootstrap {op}{}: rank {culprit} {how}", on_rank(.rank))]
    PeerGone { op: &'static str, rank: Option<usize>, culprit: usize, how: String },
    /// The root at `root` (run by no rank this rank knows of) ended before `rank`'s init
    /// did: its process died, or it had already served or failed its communicator.
    #[error("bootstrap {op} on rank {rank}: the bootstrap root at {root} {how}")]
    RootGone { op: &'static str, rank: usize, root: SocketAddr, how: String },
    /// The launcher's store, which rank `server` serves at `addr`, failed `rank`'s `op`
    /// (`detail`: the store's error, and whether rank `server` is gone).
    #[error("bootstrap {op} on rank {rank}: the store that rank {server} serves at {addr}: {detail}")]
    Store { op: &'static str, rank: usize, server: usize, addr: String, detail: String },
    /// A connection of rank `rank`'s `op` did not authenticate: `peer` (an address) did not
    /// prove that it knows the job's key, or refused this rank's proof.
    #[error("bootstrap {op} on rank {rank}: {peer}: {why}")]
    Auth { op: &'static str, rank: usize, peer: String, why: Refusal },
    /// The TLS session of rank `rank`'s ring connection with rank `peer` did not open
    /// (`JITCCL_TLS=1`): the peer does not speak TLS, or proves another key.
    #[error("bootstrap {op} on rank {rank}: TLS with rank {peer}: {detail}")]
    Tls { op: &'static str, rank: usize, peer: usize, detail: String },
    /// The job's key cannot be had (`JITCCL_AUTH_KEY`, its file, the OS's randomness).
    #[error("bootstrap: the job key: {0}")]
    Key(#[from] KeyError),
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

impl From<SettingError> for BootstrapError {
    fn from(e: SettingError) -> Self {
        let value = e.value.map_or(String::new(), |v| format!("'{v}': "));
        let alias = if e.var == e.setting { String::new() } else { format!(" (read as {})", e.setting) };
        BootstrapError::EnvVar { var: e.var, problem: format!("{value}{}{alias}", e.problem) }
    }
}

impl BootstrapError {
    /// True for the errors that mean "a wait ran out of time" (`Timeout`, `MissingRanks`).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Timeout { .. } | Self::MissingRanks { .. })
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io { context: context.into(), source }
    }

    /// A copy for one more caller (a nonblocking init's error, asked for again and again);
    /// an OS error keeps its kind and message.
    pub(crate) fn duplicate(&self) -> Self {
        use BootstrapError::*;
        match self {
            Timeout { op, peer, after } => Timeout { op, peer: *peer, after: *after },
            MissingRanks { rank, missing, nranks, after } => {
                MissingRanks { rank: *rank, missing: missing.clone(), nranks: *nranks, after: *after }
            }
            WrongMagic { from, got } => WrongMagic { from: from.clone(), got: *got },
            DuplicateRank { rank } => DuplicateRank { rank: *rank },
            NranksMismatch { expected, got, rank } => NranksMismatch { expected: *expected, got: *got, rank: *rank },
            IdsMismatch { rank, iroot } => IdsMismatch { rank: *rank, iroot: *iroot },
            InvalidRank { rank, nranks } => InvalidRank { rank: *rank, nranks: *nranks },
            Aborted { op } => Aborted { op },
            ConnectionClosed { op, peer } => ConnectionClosed { op, peer: *peer },
            Unreachable { op, peer } => Unreachable { op, peer: *peer },
            PeerGone { op, rank, culprit, how } => PeerGone { op, rank: *rank, culprit: *culprit, how: how.clone() },
            RootGone { op, rank, root, how } => RootGone { op, rank: *rank, root: *root, how: how.clone() },
            Store { op, rank, server, addr, detail } => {
                Store { op, rank: *rank, server: *server, addr: addr.clone(), detail: detail.clone() }
            }
            Auth { op, rank, peer, why } => Auth { op, rank: *rank, peer: peer.clone(), why: *why },
            Tls { op, rank, peer, detail } => Tls { op, rank: *rank, peer: *peer, detail: detail.clone() },
            Key(e) => Key(e.clone()),
            Protocol { from, detail } => Protocol { from: from.clone(), detail: detail.clone() },
            InvalidArgument(m) => InvalidArgument(m.clone()),
            EnvVar { var, problem } => EnvVar { var, problem: problem.clone() },
            Launch(m) => Launch(m.clone()),
            NoInterface { filter, available } => NoInterface { filter: filter.clone(), available: available.clone() },
            Io { context, source } => {
                Io { context: context.clone(), source: io::Error::new(source.kind(), source.to_string()) }
            }
        }
    }
}

pub type Result<T, E = BootstrapError> = std::result::Result<T, E>;

fn peer_name(peer: &Option<usize>) -> String {
    match peer {
        Some(p) => format!("rank {p}"),
        None => "the peer".to_string(),
    }
}

fn on_rank(rank: &Option<usize>) -> String {
    rank.map(|r| format!(" on rank {r}")).unwrap_or_default()
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

/// A duration as people write it: "120 s", "2.5 s", "0.15 s", "3 ms".
#[derive(Clone, Copy, Debug)]
pub struct Secs(pub Duration);

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0.as_secs_f64();
        let text = match s {
            s if s >= 10.0 => format!("{s:.0}"),
            s if s >= 1.0 => format!("{s:.1}"),
            s if s >= 0.01 => format!("{s:.2}"),
            _ => return write!(f, "{} ms", self.0.as_millis()),
        };
        // "2.0" and "0.50" read as "2" and "0.5".
        let text = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.') } else { &text };
        write!(f, "{text} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        let ms = Duration::from_millis;
        for (d, want) in [
            (Duration::from_secs_f64(120.000122036), "120 s"),
            (ms(130_000), "130 s"),
            (ms(2500), "2.5 s"),
            (ms(2000), "2 s"),
            (ms(150), "0.15 s"),
            (ms(500), "0.5 s"),
            (ms(3), "3 ms"),
            (Duration::MAX, "18446744073709551616 s"),
        ] {
            assert_eq!(Secs(d).to_string(), want, "{d:?}");
        }
    }
}
