//! The state of one process-group operation, shared by its [`Work`](super::Work) handles,
//! the group's in-flight queue and its watchdog: the operation's outcome, once it has one.

use std::borrow::Cow;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::stream::Mark;

/// The shared state of one operation.
pub(crate) struct WorkState {
    pub op: Cow<'static, str>,
    pub seq: u64,
    pub rank: usize,
    /// The peer of a send or recv (what a collective waits for is known only from its error).
    pub peer: Option<usize>,
    /// The group's stream after the operation's launches.
    pub mark: Mark,
    /// The outcome and how many threads wait for it.
    outcome: Mutex<Outcome>,
    pub(super) done: Condvar,
}

pub(super) struct Outcome {
    /// `None` while pending; then the outcome (`None`: success).
    pub(super) ended: Option<Option<Error>>,
    /// Threads waiting on `done`: completing wakes them only if there are any (a wake-up
    /// is a system call, on every call's path).
    pub(super) waiters: usize,
}

impl WorkState {
    pub fn new(op: Cow<'static, str>, seq: u64, rank: usize, peer: Option<usize>, mark: Mark) -> Arc<WorkState> {
        let outcome = Mutex::new(Outcome { ended: None, waiters: 0 });
        Arc::new(WorkState { op, seq, rank, peer, mark, outcome, done: Condvar::new() })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Outcome> {
        self.outcome.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the outcome; the first one stays (a waiter and the watchdog may race).
    pub fn complete(&self, res: Result<()>) {
        let mut g = self.lock();
        if g.ended.is_none() {
            g.ended = Some(res.err());
            if g.waiters > 0 {
                self.done.notify_all();
            }
        }
    }

    pub fn is_done(&self) -> bool {
        self.lock().ended.is_some()
    }

    /// An error about this operation (c10d's messages name the op and its sequence number).
    pub fn error(&self, peer: Option<usize>, reason: String, timed_out: bool) -> Error {
        Error::Work { op: self.op.clone(), seq: self.seq, rank: self.rank, peer, reason, timed_out }
    }
}
