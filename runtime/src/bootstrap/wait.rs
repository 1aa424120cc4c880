//! How long a bootstrap operation may wait, and what ends it early: [`Waiter`] holds its
//! deadline, the abort flag and, through [`Watch`], word of ranks that are gone; every
//! blocking step waits at most one [`SLICE`] between its checks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::error::{BootstrapError, Result};

/// What a wait asks of whoever knows which ranks are gone (a rank's liveness: the link to
/// its root during init, the communicator's failure board after it).
pub trait Watch: Sync {
    /// `op`'s error if a rank it waits on (`peer`, or every rank) is gone.
    fn check(&self, op: &'static str, peer: Option<usize>) -> Result<()>;
    /// A lost connection: word of the rank that is gone if it comes soon.
    fn why_lost(&self, op: &'static str, peer: Option<usize>) -> Option<BootstrapError>;
}

/// Longest single sleep or poll: the latency of noticing an abort.
pub const SLICE: Duration = Duration::from_millis(50);

/// `start + d`, saturating: a timeout too large for an `Instant` (the API takes any
/// `Duration`, e.g. `Duration::MAX`) becomes a deadline ~35,000 years away instead of a panic.
pub(crate) fn deadline_after(start: Instant, d: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(1 << 40);
    start.checked_add(d).or_else(|| start.checked_add(FAR)).unwrap_or(start)
}

/// The deadline and abort flag of one operation, what it knows of peers that are gone,
/// and what to name in its errors.
#[derive(Clone, Copy)]
pub struct Waiter<'a> {
    pub op: &'static str,
    pub peer: Option<usize>,
    start: Instant,
    deadline: Instant,
    abort: &'a AtomicBool,
    live: Option<&'a dyn Watch>,
    /// The rank the operation waits on (`None`: every rank): whose going ends it.
    on: Option<usize>,
}

impl<'a> Waiter<'a> {
    pub fn new(op: &'static str, peer: Option<usize>, timeout: Duration, abort: &'a AtomicBool) -> Self {
        let start = Instant::now();
        Self { op, peer, start, deadline: deadline_after(start, timeout), abort, live: None, on: peer }
    }

    /// This waiter, also ended when `live` says that a rank it waits on is gone (the peer
    /// it was made for, or every rank).
    pub fn watching(self, live: &'a dyn Watch) -> Waiter<'a> {
        Waiter { live: Some(live), ..self }
    }

    /// This waiter, blind to what `watching` showed it: for a wait that holds the link to
    /// the root, which that would look at.
    pub fn unwatched(&self) -> Waiter<'a> {
        Waiter { live: None, ..*self }
    }

    /// A waiter for a different op/peer sharing this one's start and deadline.
    pub fn sub(&self, op: &'static str, peer: Option<usize>) -> Waiter<'a> {
        Waiter { op, peer, ..*self }
    }

    pub fn extend(&mut self, by: Duration) {
        self.deadline = deadline_after(self.deadline, by);
    }

    pub fn aborted(&self) -> bool {
        self.abort.load(Ordering::Acquire)
    }

    /// `Aborted` if the flag is set, `PeerGone` (or the root's word) if a rank it waits on
    /// died or failed, `Timeout` if the deadline has passed.
    pub fn check(&self) -> Result<()> {
        if self.aborted() {
            return Err(BootstrapError::Aborted { op: self.op });
        }
        if let Some(live) = self.live {
            live.check(self.op, self.on)?;
        }
        if Instant::now() >= self.deadline {
            return Err(self.timeout_error());
        }
        Ok(())
    }

    pub fn timeout_error(&self) -> BootstrapError {
        BootstrapError::Timeout { op: self.op, peer: self.peer, after: self.start.elapsed() }
    }

    /// A peer's connection closed or was refused (`e`): word of the rank that is gone if it
    /// comes soon (see [`Watch::why_lost`]), else `e`.
    pub fn lost(&self, e: BootstrapError) -> BootstrapError {
        self.live.and_then(|l| l.why_lost(self.op, self.on)).unwrap_or(e)
    }

    /// The peer's connection closed: word of the rank that is gone, if it comes soon.
    pub fn closed(&self) -> BootstrapError {
        self.lost(BootstrapError::ConnectionClosed { op: self.op, peer: self.peer })
    }

    /// The connection to `peer` failed for the link timeout (see [`super::watch_link`]).
    pub fn unreachable(&self, peer: Option<usize>) -> BootstrapError {
        self.lost(BootstrapError::Unreachable { op: self.op, peer })
    }

    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The next wait: at most one slice, at most what is left, at least 1 ms.
    pub fn slice(&self) -> Duration {
        self.remaining().min(SLICE).max(Duration::from_millis(1))
    }

    /// Sleeps `d` in slices, failing early on abort or deadline.
    pub fn sleep(&self, d: Duration) -> Result<()> {
        let end = deadline_after(Instant::now(), d);
        loop {
            self.check()?;
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            std::thread::sleep(left.min(self.slice()));
        }
    }
}
