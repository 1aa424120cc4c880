//! Communicators: a rank's view of a group, and the calls it makes. What a `Comm` is (its
//! identity) is here; the rest by concept:
//! - `collectives`: the calls that move data, each thin (`enqueue` checks it, an error
//!   changing nothing, then tunes, compiles once and queues it on the caller's stream), and
//!   the cost model's estimate of one; `wired`: the same calls in a wire format;
//! - `init`: the constructors (one rank of a group of processes, from unique ids, a store
//!   or the launcher's environment; every rank in this process) and nonblocking init;
//! - `lifecycle`: the handle and its state (`async_error`), abort, finalize and revoke, and
//!   the communicators made from this one (`split`, `dup`, `shrink`, `grow`);
//! - `registration`: symmetric and registered memory (`peer_arenas`: the host arenas of a
//!   host's ranks, registered as one region at init);
//! - how calls leave (`submit`), groups (`group`), nonblocking mode's thread (`progress`)
//!   and the rank's state (`inner`; what runs its launches, with its failure state, is the
//!   stream's: `stream::Executor`).

mod collectives;
mod group;
mod init;
mod inner;
mod lifecycle;
mod peer_arenas;
mod progress;
mod registration;
mod submit;
mod wired;

use std::sync::Arc;

use crate::device::Device;
use crate::enqueue::Group;
use crate::error::{Error, Result};
pub use group::{group, group_depth, group_discard, group_end, group_end_launched, group_simulate_end, group_start};
pub(crate) use inner::CommInner;
use lifecycle::Handle;
pub use lifecycle::Split;
pub use progress::CommState;
pub use registration::Registration;
pub use wired::Wired;

/// One rank of a communicator: a handle (clones share the rank). In nonblocking mode
/// (`Config::blocking = false`) it may exist before its init is done: see
/// [`Comm::async_error`].
#[derive(Clone)]
pub struct Comm {
    h: Arc<Handle>,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            Some(name) => write!(f, "Comm '{name}' (rank {} of {})", self.rank(), self.nranks()),
            None => write!(f, "Comm(rank {} of {})", self.rank(), self.nranks()),
        }
    }
}

impl Comm {
    pub fn rank(&self) -> usize {
        self.h.rank
    }
    pub fn nranks(&self) -> usize {
        self.h.nranks
    }
    /// The name given by `Config.comm_name` or `JITCCL_COMM_NAME`, if any.
    pub fn name(&self) -> Option<&str> {
        self.h.name.as_deref()
    }
    pub fn device(&self) -> &Device {
        &self.h.device
    }

    /// Whether calls run in blocking mode (`Config::blocking`), or on the progress thread.
    pub fn is_blocking(&self) -> bool {
        self.h.progress.is_none()
    }

    /// Binds the calling thread to the CPUs of this rank's kernel threads, as `mpirun
    /// --bind-to` binds a rank, and returns them; `None` (nothing changed) where the rank
    /// has none: binding is off (the process was bound by its launcher, or
    /// `JITCCL_IGNORE_CPU_AFFINITY=1`). A thread that drives one rank and synchronizes its
    /// calls then always runs them itself (see `Stream::synchronize`), instead of handing
    /// them to the stream's thread whenever the scheduler put it on another CPU.
    pub fn bind_current_thread(&self) -> Result<Option<Vec<usize>>> {
        let Some(set) = self.inner("bind_current_thread")?.enq.cpus.clone() else {
            return Ok(None);
        };
        crate::affinity::bind_thread(&set).map_err(|source| Error::System {
            context: format!("binding the calling thread of rank {} to {set:?}", self.h.rank),
            source,
        })?;
        Ok(Some(set.cpus().to_vec()))
    }

    fn group(&self) -> Group {
        Group { rank: self.h.rank, nranks: self.h.nranks }
    }
}
