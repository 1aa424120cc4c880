//! The bookkeeping splits, shrinks and grows need: per-rank split and shrink counters,
//! whether a grow id is out, the rendezvous shared by the thread ranks of one `init_all`. (Finalize, which waits for the
//! queued launches, is the executor's: `stream::Executor`.)

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::comm::rendezvous::Rendezvous;

#[derive(Default)]
pub(crate) struct Splits {
    /// How many splits this rank has started: ranks split in the same order, so the n-th
    /// split of every rank meets in round n.
    splits: AtomicU64,
    /// How many shrinks this rank has started: kept apart from splits, since only the
    /// remaining ranks shrink (a shared count would pair the excluded ranks' next split
    /// with another round than the others').
    shrinks: AtomicU64,
    /// Whether this rank made a grow id that no grow has used yet (NCCL allows one at a
    /// time).
    grow_id_out: AtomicBool,
    /// Set for ranks made by `init_all` (they have no bootstrap to split over).
    pub rendezvous: OnceLock<Arc<Rendezvous>>,
}

impl Splits {
    /// The sequence number of this rank's next split.
    pub(crate) fn next_split(&self) -> u64 {
        self.splits.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn next_shrink(&self) -> u64 {
        self.shrinks.fetch_add(1, Ordering::Relaxed)
    }

    /// Notes that a grow id is out; false if one already was.
    pub(crate) fn hand_out_grow_id(&self) -> bool {
        !self.grow_id_out.swap(true, Ordering::AcqRel)
    }

    /// Notes that the grow id that was out has been used (or could not be made).
    pub(crate) fn grow_id_used(&self) {
        self.grow_id_out.store(false, Ordering::Release);
    }
}
