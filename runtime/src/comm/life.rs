//! A communicator's lifecycle beyond abort: `finalize` (accept nothing more, wait for what
//! was queued) and the bookkeeping splits need (a per-rank split counter, the rendezvous
//! shared by the thread ranks of one `init_all`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::comm::rendezvous::Rendezvous;
use crate::error::{Error, Result};

#[derive(Default)]
pub(crate) struct Life {
    /// Launches queued and not yet run, and whether the communicator is finalized: plain
    /// atomics, for they are touched on every launch by the caller and the stream, and a
    /// lock or a wake-up there costs a launch's latency. SeqCst on both sides (count, then
    /// flag; flag, then count) keeps a submit from slipping past a finalize unseen.
    queued: AtomicUsize,
    finalized: AtomicBool,
    /// How many splits this rank has started: ranks split in the same order, so the n-th
    /// split of every rank meets in round n.
    splits: AtomicU64,
    /// How many shrinks this rank has started: kept apart from splits, since only the
    /// remaining ranks shrink (a shared count would pair the excluded ranks' next split
    /// with another round than the others').
    shrinks: AtomicU64,
    /// Set for ranks made by `init_all` (they have no bootstrap to split over).
    pub rendezvous: OnceLock<Arc<Rendezvous>>,
}

/// One queued launch, counted until its owner has run it.
pub(crate) struct Queued<'a>(&'a Life);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Life {
    pub(crate) fn finalized_error(name: &str, rank: usize) -> Error {
        Error::InvalidUsage(format!("{name} on rank {rank}: the communicator was finalized"))
    }

    pub(crate) fn is_finalized(&self) -> bool {
        self.finalized.load(Ordering::SeqCst)
    }

    /// Counts a launch about to be queued; refused once finalized. The count goes down
    /// when the launch has run ([`Life::running`]) or was not queued ([`Life::unqueue`]).
    pub(crate) fn queue(&self, name: &str, rank: usize) -> Result<()> {
        self.queued.fetch_add(1, Ordering::SeqCst);
        if self.finalized.load(Ordering::SeqCst) {
            self.unqueue();
            return Err(Self::finalized_error(name, rank));
        }
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

    pub(crate) fn next_shrink(&self) -> u64 {
        self.shrinks.fetch_add(1, Ordering::Relaxed)
    }

    /// Refuses new launches, then waits up to `timeout` for the queued ones to run.
    /// Returns whether they all did.
    pub(crate) fn finalize(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        self.finalized.store(true, Ordering::SeqCst);
        // Rare and short: polling spares every launch a wake-up.
        while self.queued.load(Ordering::SeqCst) > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }
}
