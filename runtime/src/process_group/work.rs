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

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.state;
        let status = match &s.lock().ended {
            None => "pending",
            Some(None) => "done",
            Some(Some(_)) => "failed",
        };
        write!(f, "Work({} #{} on rank {}: {status})", s.op, s.seq, s.rank)
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
        let start = Instant::now();
        // No deadline past what an Instant can hold: the watchdog then bounds the wait.
        let deadline = start.checked_add(timeout);
        if !self.state.is_done() && self.group.stream.wait_for(self.state.mark, deadline, timeout >= self.group.timeout)
        {
            self.retire();
        }
        let mut g = self.state.lock();
        loop {
            if let Some(outcome) = &g.ended {
                return outcome.as_ref().map_or(Ok(()), |e| Err(e.replay()));
            }
            let left = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                let reason =
                    format!("wait gave up after {:.1} s; the operation is still pending", timeout.as_secs_f64());
                return Err(self.state.error(self.state.peer, reason, false));
            }
            // Woken when the group breaks and fails it; the stream's passing it is looked at
            // every few milliseconds (the watchdog retires it too).
            g.waiters += 1;
            g = self
                .state
                .done
                .wait_timeout(g, left.min(Duration::from_millis(10)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
            g.waiters -= 1;
            if g.ended.is_none() && self.group.stream.passed(self.state.mark) {
                drop(g);
                self.retire();
                g = self.state.lock();
            }
        }
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
        self.is_completed() && matches!(&self.state.lock().ended, Some(None))
    }

    /// The operation's error, once it failed.
    pub fn error(&self) -> Option<Error> {
        self.is_completed();
        self.state.lock().ended.as_ref().and_then(|o| o.as_ref().map(Error::replay))
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
