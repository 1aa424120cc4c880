//! A communicator's lifecycle beyond abort: `finalize` (accept nothing more, wait for what
//! was queued) and the bookkeeping splits need (a per-rank split counter, the rendezvous
//! shared by the thread ranks of one `init_all`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::comm::rendezvous::Rendezvous;
use crate::error::{Error, Result};

#[derive(Default)]
pub(crate) struct Life {
    /// (finalized, launches queued and not yet run). One lock for both, so a submit cannot
    /// slip in between finalize's check and its wait.
    state: Mutex<(bool, usize)>,
    drained: Condvar,
    /// How many splits this rank has started: ranks split in the same order, so the n-th
    /// split of every rank meets in round n.
    splits: AtomicU64,
    /// Set for ranks made by `init_all` (they have no bootstrap to split over).
    pub rendezvous: OnceLock<Arc<Rendezvous>>,
}

/// One queued launch, counted until its owner has run it.
pub(crate) struct Queued<'a>(&'a Life);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.1 = s.1.saturating_sub(1);
        if s.1 == 0 {
            self.0.drained.notify_all();
        }
    }
}

impl Life {
    fn lock(&self) -> std::sync::MutexGuard<'_, (bool, usize)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn finalized_error(name: &str, rank: usize) -> Error {
        Error::InvalidUsage(format!("{name} on rank {rank}: the communicator was finalized"))
    }

    pub(crate) fn is_finalized(&self) -> bool {
        self.lock().0
    }

    /// Counts a launch about to be queued; refused once finalized. The count goes down
    /// when the launch has run ([`Life::running`]) or was not queued ([`Life::unqueue`]).
    pub(crate) fn queue(&self, name: &str, rank: usize) -> Result<()> {
        let mut s = self.lock();
        if s.0 {
            return Err(Self::finalized_error(name, rank));
        }
        s.1 += 1;
        Ok(())
    }

    /// Undoes [`Life::queue`] for a call that queued nothing.
    pub(crate) fn unqueue(&self) {
        drop(Queued(self));
    }

    /// Held while a queued launch runs: its end uncounts it.
    pub(crate) fn running(&self) -> Queued<'_> {
        Queued(self)
    }

    /// The sequence number of this rank's next split.
    pub(crate) fn next_split(&self) -> u64 {
        self.splits.fetch_add(1, Ordering::Relaxed)
    }

    /// Refuses new launches, then waits up to `timeout` for the queued ones to run.
    /// Returns whether they all did.
    pub(crate) fn finalize(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut s = self.lock();
        s.0 = true;
        while s.1 > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            s = self.drained.wait_timeout(s, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        true
    }
}
