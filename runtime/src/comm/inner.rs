//! What one rank of a communicator holds: its side of the launch path (`enqueue::Rank`,
//! which holds what runs its launches and its failure state: `stream::Executor`), and what
//! init set up for it (bootstrap, store, transports, the memory the connectors point into).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::bootstrap::Bootstrap;
use crate::comm::lifecycle::Splits;
use crate::enqueue;
use crate::error::{Error, Result};
use crate::store::Server;
use crate::stream::{Executor, Failure};

pub(crate) struct CommInner {
    pub enq: enqueue::Rank,
    /// Split and shrink state.
    pub splits: Splits,
    /// Ranks in other processes: the bootstrap (kept for later exchanges) and its abort
    /// flag, and the rendezvous store this rank serves, if any.
    pub bootstrap: Option<(Bootstrap, Arc<AtomicBool>)>,
    _store_server: Option<Server>,
    /// Keeps every segment the connectors point into alive (declared last: dropped after
    /// everything that uses it).
    _segments: Arc<dyn Send + Sync>,
}

impl CommInner {
    pub(crate) fn new(enq: enqueue::Rank, segments: Arc<dyn Send + Sync>) -> CommInner {
        CommInner { enq, splits: Splits::default(), bootstrap: None, _store_server: None, _segments: segments }
    }

    /// What runs this rank's launches, and its failure state.
    #[inline]
    pub(crate) fn exec(&self) -> &Executor {
        &self.enq.exec
    }

    pub(crate) fn failure(&self) -> &Failure {
        &self.enq.exec.failure
    }

    pub(crate) fn with_bootstrap(
        self, bs: Bootstrap, abort: Arc<AtomicBool>, store_server: Option<Server>,
    ) -> CommInner {
        CommInner { bootstrap: Some((bs, abort)), _store_server: store_server, ..self }
    }

    pub(crate) fn is_aborted(&self) -> bool {
        self.enq.abort().load(Ordering::Acquire) != 0
    }

    /// Whether a new operation may be queued: not after an abort or a failure. Inlined
    /// down to three loads: every call asks.
    #[inline]
    pub(crate) fn usable(&self, name: &str) -> Result<()> {
        if self.is_aborted() || self.exec().is_finalized() || self.failure().failed() {
            return self.unusable(name);
        }
        Ok(())
    }

    #[cold]
    fn unusable(&self, name: &str) -> Result<()> {
        if self.is_aborted() {
            return Err(Error::InvalidUsage(format!(
                "{name} on rank {}: the communicator was aborted",
                self.enq.group.rank
            )));
        }
        if self.exec().is_finalized() {
            return Err(Executor::finalized_error(name, self.enq.group.rank));
        }
        self.failure().error().map_or(Ok(()), Err)
    }
}
