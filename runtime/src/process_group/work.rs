//! [`Work`]: what a process-group call returns at once (c10d's `Work`): it completes
//! when its operation has run on the group's worker, or fails with the operation's error,
//! the watchdog's, or the error of an earlier operation that broke the group.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The shared state of one operation.
pub(crate) struct WorkState {
    pub op: &'static str,
    pub seq: u64,
    pub rank: usize,
    /// The peer of a send or recv (what a collective waits for is known only from its error).
    pub peer: Option<usize>,
    /// `None` while pending; then the outcome (`None`: success).
    outcome: Mutex<Option<Option<Error>>>,
    done: Condvar,
}

impl WorkState {
    pub fn new(op: &'static str, seq: u64, rank: usize, peer: Option<usize>) -> Arc<WorkState> {
        Arc::new(WorkState { op, seq, rank, peer, outcome: Mutex::new(None), done: Condvar::new() })
    }

    fn lock(&self) -> MutexGuard<'_, Option<Option<Error>>> {
        self.outcome.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the outcome; the first one stays (the worker and the watchdog may race).
    pub fn complete(&self, res: Result<()>) {
        let mut g = self.lock();
        if g.is_none() {
            *g = Some(res.err());
            self.done.notify_all();
        }
    }

    pub fn is_done(&self) -> bool {
        self.lock().is_some()
    }

    /// An error about this operation (c10d's messages name the op and its sequence number).
    pub fn error(&self, peer: Option<usize>, reason: String) -> Error {
        Error::Work { op: self.op, seq: self.seq, rank: self.rank, peer, reason }
    }
}

/// The handle of one queued process-group operation. Cloning shares it.
#[derive(Clone)]
pub struct Work {
    state: Arc<WorkState>,
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.state;
        let status = match &*s.lock() {
            None => "pending",
            Some(None) => "done",
            Some(Some(_)) => "failed",
        };
        write!(f, "Work({} #{} on rank {}: {status})", s.op, s.seq, s.rank)
    }
}

impl Work {
    pub(crate) fn new(state: Arc<WorkState>) -> Work {
        Work { state }
    }

    /// Waits at most `timeout` for the operation: `Ok` once it ran and its results are in
    /// the buffers, its error if it failed, or an [`Error::Work`] "still pending" if the
    /// time ran out (the operation itself goes on; the group's watchdog bounds it).
    pub fn wait(&self, timeout: Duration) -> Result<()> {
        let end = Instant::now() + timeout;
        let mut g = self.state.lock();
        loop {
            if let Some(outcome) = &*g {
                return outcome.as_ref().map_or(Ok(()), |e| Err(e.replay()));
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let reason =
                    format!("wait gave up after {:.1} s; the operation is still pending", timeout.as_secs_f64());
                return Err(self.state.error(self.state.peer, reason));
            }
            g = self.state.done.wait_timeout(g, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Whether the operation has ended (successfully or not).
    pub fn is_completed(&self) -> bool {
        self.state.is_done()
    }

    /// Whether the operation has ended without an error.
    pub fn is_success(&self) -> bool {
        matches!(&*self.state.lock(), Some(None))
    }

    /// The operation's error, once it failed.
    pub fn error(&self) -> Option<Error> {
        self.state.lock().as_ref().and_then(|o| o.as_ref().map(Error::replay))
    }

    /// The operation's name (`"all_reduce"`, `"send"`, ...).
    pub fn op(&self) -> &'static str {
        self.state.op
    }

    /// Its sequence number in the group (1 for the group's first operation).
    pub fn seq(&self) -> u64 {
        self.state.seq
    }
}
