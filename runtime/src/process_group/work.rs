//! [`Work`]: what a process-group call returns at once (c10d's `Work`): it completes when
//! the group's stream has run its operation, or fails with the operation's error, the
//! watchdog's, or the error of an earlier operation that broke the group.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::process_group::inflight::Shared;
use crate::process_group::operation::WorkState;

/// The handle of one process-group operation. Cloning shares it.
#[derive(Clone)]
pub struct Work {
    state: Arc<WorkState>,
    group: Arc<Shared>,
}

/// How long a wait looks at the stream before it looks again at whether the operation was
/// failed meanwhile (by `abort` or the watchdog): launches queued before it, another
/// communicator's on a shared stream, may hold the stream long after that.
const SLICE: Duration = Duration::from_millis(10);

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.state;
        write!(f, "Work({} #{} on rank {}: {})", s.op, s.seq, s.rank, s.status())
    }
}

impl Work {
    pub(crate) fn new(state: Arc<WorkState>, group: Arc<Shared>) -> Work {
        Work { state, group }
    }

    /// Retires what the stream has passed, this operation included if it is there.
    fn retire(&self) {
        let mut s = self.group.lock();
        self.group.retire(&mut s);
    }

    /// Waits at most `timeout` for the operation: `Ok` once it ran and its results are in
    /// the buffers, its error if it failed, or an [`Error::Work`] "still pending" if the
    /// time ran out (the operation itself goes on; the group's watchdog bounds it). A wait
    /// at least as long as the group's timeout runs the operation's launches on this thread
    /// where the stream has not started them (a blocking call's cost: no hand-off to the
    /// stream's thread); the watchdog still bounds them.
    pub fn wait(&self, timeout: Duration) -> Result<()> {
        // No deadline past what an Instant can hold: the watchdog then bounds the wait.
        let deadline = Instant::now().checked_add(timeout);
        let run_here = timeout >= self.group.timeout;
        while !self.state.is_done() {
            let slice = Instant::now() + SLICE;
            if self.group.stream.wait_for(self.state.mark, deadline.map_or(slice, |d| d.min(slice)), run_here) {
                self.retire();
            } else if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
        }
        self.state.outcome().unwrap_or_else(|| {
            let reason = format!("wait gave up after {:.1} s; the operation is still pending", timeout.as_secs_f64());
            Err(self.state.error(self.state.peer, reason, false))
        })
    }

    /// Whether the operation has ended (successfully or not); never waits.
    pub fn is_completed(&self) -> bool {
        if !self.state.is_done() && self.group.stream.passed(self.state.mark) {
            self.retire();
        }
        self.state.is_done()
    }

    /// Whether the operation has ended without an error.
    pub fn is_success(&self) -> bool {
        self.is_completed() && matches!(self.state.outcome(), Some(Ok(())))
    }

    /// The operation's error, once it failed.
    pub fn error(&self) -> Option<Error> {
        self.is_completed();
        self.state.outcome().and_then(Result::err)
    }

    /// The operation's name (`"all_reduce"`, `"send"`, ...).
    pub fn op(&self) -> &str {
        &self.state.op
    }

    /// Its sequence number in the group (1 for the group's first operation).
    pub fn seq(&self) -> u64 {
        self.state.seq
    }
}
