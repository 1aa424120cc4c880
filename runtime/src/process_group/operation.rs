//! The state of one process-group operation, shared by its [`Work`](super::Work) handles,
//! the group's in-flight queue and its watchdog: the operation's outcome, once it has one.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, MutexGuard};

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
    /// The error it ends with once the stream has run its launches: its queuing failed
    /// after some of them were queued.
    queue_error: Option<Error>,
    /// `None` while pending; then the outcome (`None`: success).
    ended: Mutex<Option<Option<Error>>>,
}

impl WorkState {
    pub fn new(
        op: Cow<'static, str>, seq: u64, rank: usize, peer: Option<usize>, mark: Mark, queue_error: Option<Error>,
    ) -> Arc<WorkState> {
        Arc::new(WorkState { op, seq, rank, peer, mark, queue_error, ended: Mutex::new(None) })
    }

    fn lock(&self) -> MutexGuard<'_, Option<Option<Error>>> {
        self.ended.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the outcome; the first one stays (a waiter and the watchdog may race).
    pub fn complete(&self, res: Result<()>) {
        self.lock().get_or_insert(res.err());
    }

    /// Records the outcome of an operation whose launches have all run well.
    pub fn complete_ran(&self) {
        self.complete(self.queue_error.as_ref().map_or(Ok(()), |e| Err(e.replay())));
    }

    pub fn is_done(&self) -> bool {
        self.lock().is_some()
    }

    /// The outcome (a copy of the error), once there is one.
    pub fn outcome(&self) -> Option<Result<()>> {
        self.lock().as_ref().map(|o| o.as_ref().map_or(Ok(()), |e| Err(e.replay())))
    }

    /// "pending", "done" or "failed".
    pub fn status(&self) -> &'static str {
        match &*self.lock() {
            None => "pending",
            Some(None) => "done",
            Some(Some(_)) => "failed",
        }
    }

    /// An error about this operation (c10d's messages name the op and its sequence number).
    pub fn error(&self, peer: Option<usize>, reason: String, timed_out: bool) -> Error {
        Error::Work { op: self.op.clone(), seq: self.seq, rank: self.rank, peer, reason, timed_out }
    }
}
