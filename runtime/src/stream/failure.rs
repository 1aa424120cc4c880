//! A communicator's failure state: the first error that failed it (every later call and
//! every queued operation returns it), and how the failure is told to the peers and traced
//! back to the rank that failed first (see `fault` for the boards this reads and writes).
//! Held by the rank's `Executor`: a launch that fails fails the communicator where it ran.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jitccl_codegen::abi::{self, Status};

use crate::error::Error;
use crate::fault::{Board, Notice};
use crate::transport::net::Activity;

/// How long a failed rank lets the peers it waited on say whom they waited on, before it
/// names the rank that failed first (at most a quarter of the timeout).
const FAILURE_GRACE: Duration = Duration::from_millis(250);

pub(crate) struct Failure {
    rank: usize,
    nranks: usize,
    timeout: Duration,
    /// This rank's own failure board.
    board: Board,
    /// Per rank, its failure board where this process can write it (peers in memory; None
    /// for net peers, reached through the proxy).
    boards: Vec<Option<Board>>,
    net: Option<Arc<Activity>>,
    first: Mutex<Option<Error>>,
    failed: AtomicBool,
}

impl Failure {
    /// `board` is this rank's board, `boards` holds per rank its board where this process
    /// can write it.
    pub(crate) fn new(
        rank: usize, timeout: Duration, board: Board, boards: Vec<Option<Board>>, net: Option<Arc<Activity>>,
    ) -> Failure {
        Failure {
            rank,
            nranks: boards.len(),
            timeout,
            board,
            boards,
            net,
            first: Mutex::new(None),
            failed: AtomicBool::new(false),
        }
    }

    /// The error that failed this communicator, if one did. Inlined: every launch asks,
    /// twice, and the answer is nearly always a load that says no.
    #[inline]
    pub(crate) fn error(&self) -> Option<Error> {
        if !self.failed() {
            return None;
        }
        self.first_error()
    }

    /// Whether this communicator has failed.
    #[inline]
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    #[cold]
    fn first_error(&self) -> Option<Error> {
        self.first.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(Error::replay)
    }

    /// Fails the communicator with `err` (the first failure stays) and tells every peer, so
    /// that their waits on this rank end now. An abort is this rank's own decision and is
    /// not announced.
    pub(crate) fn fail(&self, err: &Error) {
        let mut failure = self.first.lock().unwrap_or_else(|e| e.into_inner());
        if failure.is_some() {
            return;
        }
        *failure = Some(err.replay());
        self.failed.store(true, Ordering::Release);
        let culprit = match err {
            Error::Aborted { .. } => return,
            Error::Timeout { peer, .. } if *peer >= 0 => *peer as usize,
            Error::PeerFailed { culprit, .. } => *culprit,
            _ => self.rank,
        };
        tracing::warn!("rank {}: communicator failed (rank {culprit} failed first): {err}", self.rank);
        self.announce(culprit);
    }

    /// Tells every peer that this rank was aborted (`Config::abort_propagates`): noted as
    /// this rank's own failure, so their waits on it end now and name it.
    pub(crate) fn announce_abort(&self) {
        tracing::warn!("rank {}: telling the peers of the abort", self.rank);
        self.announce(self.rank);
    }

    /// Notes on every peer's failure board that this rank failed, blaming `blames`: first
    /// the rank it waited on in vain, then whom it found to have failed first.
    fn announce(&self, blames: usize) {
        let notice = Notice::reported(blames);
        for b in self.boards.iter().enumerate().filter(|&(q, _)| q != self.rank).filter_map(|(_, b)| b.as_ref()) {
            b.announce(self.rank, notice);
        }
        if let Some(net) = &self.net {
            net.report_failure(blames);
        }
    }

    /// The error of a wait that ended because `peer` had failed. When several ranks went at
    /// once (a host's), it names the others this rank saw go too, so that the survivors can
    /// tell whom to shrink without.
    fn peer_failed(&self, op: String, peer: usize) -> Error {
        let (culprit, mut how) = self.culprit(peer);
        self.announce(culprit);
        let others: Vec<String> =
            self.gone_ranks().into_iter().filter(|&q| q != culprit).map(|q| q.to_string()).collect();
        if !others.is_empty() {
            how += &format!("; rank(s) {} are gone too", others.join(", "));
        }
        Error::PeerFailed { op, rank: self.rank, peer: peer as i32, culprit, how }
    }

    /// The ranks this rank saw go (a closed connection, an exited process, a dead link), in
    /// order. Only what it saw itself: a rank another one blamed may have been merely the
    /// one it waited on.
    fn gone_ranks(&self) -> Vec<usize> {
        (0..self.nranks).filter(|&q| q != self.rank && self.board.get(q).is_some_and(|n| n.is_gone())).collect()
    }

    /// The rank that failed first, as this rank's board tells it, from `peer` on: each
    /// failed rank's notice names whom it waited on, so the chain ends at a rank that
    /// said nothing (stuck or dead) or whose connection closed. A chain that comes back
    /// around is a ring of ranks that all waited: then a rank that said nothing is blamed,
    /// or this one if every other spoke. Returns the culprit and how it became known.
    fn culprit(&self, peer: usize) -> (usize, String) {
        let board = self.board;
        let mut seen = vec![false; self.nranks];
        let (mut at, mut how) = (peer, "it did not answer".to_string());
        while at != self.rank && !seen[at] {
            seen[at] = true;
            let Some(n) = board.get(at) else { return (at, how) };
            how = n.how(at);
            if n.is_gone() || n.culprit == at {
                return (at, how);
            }
            at = n.culprit;
        }
        let silent = (0..self.nranks).find(|&q| q != self.rank && board.get(q).is_none());
        (silent.unwrap_or(self.rank), how)
    }

    /// The error of a kernel whose channels ended with `statuses`.
    pub(crate) fn kernel_error(&self, op: &str, statuses: &[Status]) -> Error {
        let (op, rank) = (op.to_string(), self.rank);
        let failed = || statuses.iter().enumerate().filter(|(_, st)| st.code != abi::OK);
        let Some((_, st)) = failed().next() else {
            return Error::Internal(format!("{op} on rank {rank}: a kernel failed without a status"));
        };
        if failed().any(|(_, st)| st.code == abi::ERR_ABORTED) {
            return Error::Aborted { op, rank };
        }
        if failed().any(|(_, st)| st.code == abi::ERR_SPECIALIZED) {
            return Error::Internal(format!(
                "{op} on rank {rank}: its kernel is specialized for another rank count than the communicator's {}",
                self.nranks
            ));
        }
        if let Some((_, st)) = failed().find(|(_, st)| st.code == abi::ERR_MISMATCH) {
            return Error::InvalidUsage(format!(
                "{op} on rank {rank}: rank {} called it differently (another count, datatype, op, root or wire format; or, \
                 for a direct algorithm, buffers in other registrations)",
                st.peer
            ));
        }
        // Waits that timed out may have waited on ranks stuck themselves, and waits that ended
        // on a failed peer may have heard from it before the others spoke: tell the peers whom
        // this rank waited on, and give them a moment to say whom they waited on.
        let waited: Vec<usize> = failed().map(|(_, st)| st.peer as usize).filter(|&p| p < self.nranks).collect();
        if st.code != abi::ERR_TIMEOUT && st.code != abi::ERR_PEER || waited.is_empty() {
            return Error::Internal(format!(
                "{op} on rank {rank}: kernel returned status {} (peer {})",
                st.code, st.peer
            ));
        }
        self.announce(waited[0]);
        // Until every chain from the waited peers ends at a rank that spoke (or the grace is
        // over): one that looks silent may be a moment from speaking.
        let end = Instant::now() + (self.timeout / 4).min(FAILURE_GRACE);
        while waited.iter().any(|&w| self.board.get(self.culprit(w).0).is_none()) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        if let Some((_, st)) = failed().find(|(_, st)| st.code == abi::ERR_PEER) {
            return self.peer_failed(op, st.peer as usize);
        }
        match failed().find(|(_, st)| self.board.get(st.peer as usize).is_none()) {
            // A rank that never said it failed: the one that stopped answering.
            Some((channel, st)) => {
                self.announce(st.peer as usize);
                Error::Timeout {
                    op,
                    rank,
                    channel,
                    peer: st.peer,
                    waiting: match st.what {
                        abi::WAIT_SPACE => "a free FIFO slot at",
                        abi::WAIT_BARRIER => "the barrier of",
                        _ => "data from",
                    },
                    timeout_s: self.timeout.as_secs_f64(),
                }
            }
            None => self.peer_failed(op, waited[0]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::Seen;

    /// A host's two ranks gone at once: the error names the first and the other one this
    /// rank saw go, not a rank that was only blamed.
    #[test]
    fn a_failed_peer_error_names_every_rank_seen_gone() {
        let mut words = [0i32; 5];
        let board = Board::new(words.as_mut_ptr(), 5);
        board.note(3, Notice::gone(3, Seen::Closed));
        board.note(2, Notice::gone(2, Seen::Closed));
        board.note(4, Notice::reported(3));
        board.note(1, Notice::reported(4));
        let failure = Failure::new(0, Duration::from_secs(1), board, vec![None; 5], None);
        let e = failure.peer_failed("all_reduce".into(), 4);
        assert!(matches!(&e, Error::PeerFailed { culprit: 3, .. }), "{e}");
        assert!(e.to_string().contains("; rank(s) 2 are gone too)"), "{e}");
    }

    /// A kernel that refused a call of another rank count than it was specialized for is
    /// named as such (a bug of the runtime's, never a peer's), beside an aborted one.
    #[test]
    fn a_refused_specialized_kernel_says_so() {
        let mut words = [0i32; 2];
        let board = Board::new(words.as_mut_ptr(), 2);
        let failure = Failure::new(1, Duration::from_secs(1), board, vec![None, None], None);
        let refused = Status { code: abi::ERR_SPECIALIZED, peer: -1, ..Status::default() };
        let e = failure.kernel_error("all_reduce", &[Status::default(), refused]);
        assert!(
            matches!(&e, Error::Internal(m) if m.contains("rank 1") && m.contains("specialized for another rank count")),
            "{e}"
        );
        let aborted = Status { code: abi::ERR_ABORTED, ..Status::default() };
        assert!(matches!(failure.kernel_error("all_reduce", &[aborted, refused]), Error::Aborted { .. }));
    }
}
