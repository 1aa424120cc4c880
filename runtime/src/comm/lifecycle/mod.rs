//! A communicator's life after init: what its handle holds (the rank's identity, known
//! before init ends, the rank state once init has made it and, in nonblocking mode, the
//! progress thread its work runs on), its state as `async_error` reports it (NCCL's
//! ncclCommGetAsyncError), abort from any thread, whatever the rank is doing
//! (initializing, running, or nothing), finalize (NCCL's ncclCommFinalize) and revoke; and
//! the communicators made from it: `split` (and `dup`), `shrink`, `grow`.

mod grow;
mod shrink;
mod split;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::comm::progress::{CommState, Progress};
use crate::comm::{Comm, CommInner};
use crate::device::Device;
use crate::error::{Error, Result};
pub use split::Split;
pub(crate) use split::Splits;

/// The part of a handle that init and the queued jobs share.
#[derive(Default)]
pub(crate) struct Cell {
    /// The rank state, once init has made it.
    pub(super) inner: OnceLock<Arc<CommInner>>,
    /// Why init failed, if it did.
    init_error: OnceLock<Error>,
    /// `abort` was called.
    aborted: AtomicBool,
    /// The abort flag of the init in flight (its bootstrap ends every wait on it).
    pub init_abort: Arc<AtomicBool>,
}

impl Cell {
    /// Takes the state init made (aborting it at once if the handle was aborted meanwhile).
    pub(crate) fn set(&self, inner: Arc<CommInner>) {
        let inner = self.inner.get_or_init(|| inner);
        // SeqCst pairs with `abort` (flag, then state): one of the two sees the other.
        if self.aborted.load(Ordering::SeqCst) {
            inner.abort();
        }
    }

    pub(super) fn init_failed(&self, rank: usize, e: Error) {
        let e = if self.is_aborted() { Error::Aborted { op: "init".into(), rank } } else { e };
        let _ = self.init_error.set(e);
    }

    pub(crate) fn get(&self) -> Option<&Arc<CommInner>> {
        self.inner.get()
    }

    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }

    /// The rank state, or why there is none (yet) for `op` of `rank`.
    pub(crate) fn inner(&self, op: &str, rank: usize) -> Result<&Arc<CommInner>> {
        if let Some(inner) = self.inner.get() {
            return Ok(inner);
        }
        if self.aborted.load(Ordering::SeqCst) {
            return Err(Error::InvalidUsage(format!("{op} on rank {rank}: the communicator was aborted")));
        }
        match self.init_error.get() {
            Some(e) => Err(e.duplicate()),
            None => Err(Error::InProgress(format!(
                "{op} on rank {rank}: the communicator is still being initialized (nonblocking): poll async_error"
            ))),
        }
    }
}

pub(crate) struct Handle {
    pub rank: usize,
    pub nranks: usize,
    pub device: Device,
    pub name: Option<String>,
    /// The configured timeout (bounds finalize's wait for the progress thread).
    pub timeout: Duration,
    pub cell: Arc<Cell>,
    /// Nonblocking mode: where init and the operations run.
    pub progress: Option<Progress>,
}

impl Drop for Handle {
    /// The last handle of a rank still initializing: nobody can use it any more, so its
    /// init stops (it would otherwise wait on its peers up to the bootstrap timeout).
    fn drop(&mut self) {
        if self.cell.inner.get().is_none() {
            self.cell.init_abort.store(true, Ordering::SeqCst);
        }
    }
}

impl Comm {
    /// The communicator's state, as NCCL's ncclCommGetAsyncError: `Ready`, `InProgress`
    /// (nonblocking init or queued operations not done yet), or the error that failed it
    /// (init's, an operation's, a peer's, or `Aborted` after [`abort`](Self::abort)).
    /// After an error only `abort` and drop are of use: every other call returns it.
    pub fn async_error(&self) -> Result<CommState> {
        let cell = &self.h.cell;
        if cell.aborted.load(Ordering::SeqCst) {
            return Err(Error::Aborted { op: "the communicator".into(), rank: self.rank() });
        }
        if let Some(e) = cell.init_error.get() {
            return Err(e.duplicate());
        }
        if let Some(e) = cell.inner.get().and_then(|i| i.failure().error()) {
            return Err(e);
        }
        let pending = self.h.progress.as_ref().is_some_and(Progress::pending);
        Ok(if pending || cell.inner.get().is_none() { CommState::InProgress } else { CommState::Ready })
    }

    /// Waits until the communicator is no longer `InProgress` (or `timeout` passes), then
    /// returns [`async_error`](Self::async_error). Ends early, with `Aborted`, on an abort.
    pub fn wait_ready(&self, timeout: Duration) -> Result<CommState> {
        if let Some(p) = &self.h.progress {
            p.wait_idle(Instant::now() + timeout, || self.h.cell.aborted.load(Ordering::SeqCst));
        }
        self.async_error()
    }

    /// Aborts the communicator (NCCL's ncclCommAbort), from any thread: a running init ends,
    /// queued operations are dropped (their streams report `Aborted`), running operations
    /// end with [`Error::Aborted`], and every later call is refused. With
    /// `Config::abort_propagates` the peers are told, so their operations waiting on this
    /// rank fail at once naming it; else they fail by their timeout. Bounded: it waits for
    /// nothing but the note to the network peers (at most 200 ms). A blocking init has no
    /// handle to abort until it returns (as in NCCL): use nonblocking mode to abort an init.
    pub fn abort(&self) {
        tracing::warn!("{self:?}: communicator aborted");
        let cell = &self.h.cell;
        cell.aborted.store(true, Ordering::SeqCst);
        cell.init_abort.store(true, Ordering::SeqCst);
        if let Some(inner) = cell.inner.get() {
            inner.abort();
        }
        if let Some(p) = &self.h.progress {
            let n = p.cancel();
            if n > 0 {
                tracing::info!("{self:?}: abort dropped {n} queued operation(s)");
            }
            p.wake();
        }
    }

    pub fn is_aborted(&self) -> bool {
        self.h.cell.aborted.load(Ordering::SeqCst) || self.h.cell.inner.get().is_some_and(|i| i.is_aborted())
    }

    /// The rank state for `op`, or why it is not there (still initializing, init failed,
    /// aborted).
    pub(crate) fn inner(&self, op: &str) -> Result<&Arc<CommInner>> {
        self.h.cell.inner(op, self.h.rank)
    }

    /// Ends this rank's use of the communicator (NCCL's ncclCommFinalize): from now on
    /// every call (collectives, split, dup) fails with `InvalidUsage` "finalized". The
    /// operations already queued still run on their streams (the streams are the
    /// caller's); this waits, up to the timeout, until they have. Returns the error that
    /// failed the communicator, if one did (the queued work did not complete), or
    /// `InvalidUsage` if the queued work was still running at the timeout. A second call
    /// does the same again.
    pub fn finalize(&self) -> Result<()> {
        let timeout = self.h.timeout;
        // Nonblocking: what the progress thread holds is launched first (within the timeout).
        if let Some(p) = &self.h.progress {
            p.wait_idle(Instant::now() + timeout, || self.h.cell.is_aborted());
        }
        let inner = self.inner("finalize")?;
        if !inner.exec().finalize(timeout) {
            return Err(Error::InvalidUsage(format!(
                "finalize on rank {}: operations still queued after {timeout:?}",
                self.rank()
            )));
        }
        if inner.enq.abort().load(Ordering::Acquire) != 0 {
            return Err(Error::InvalidUsage(format!("finalize on rank {}: the communicator was aborted", self.rank())));
        }
        inner.failure().error().map_or(Ok(()), Err)
    }

    /// Whether [`finalize`](Self::finalize) was called.
    pub fn is_finalized(&self) -> bool {
        self.h.cell.get().is_some_and(|i| i.exec().is_finalized())
    }

    /// Ends this communicator's running and queued operations (they fail with `Aborted`)
    /// and refuses new ones, as NCCL's ncclCommRevoke; unlike [`abort`](Self::abort) it
    /// keeps what a later [`shrink`](Self::shrink) needs. Local: it tells no peer.
    pub fn revoke(&self) -> Result<()> {
        let inner = self.inner("revoke")?;
        inner.enq.abort().store(1, Ordering::Release);
        tracing::warn!("{self:?}: communicator revoked");
        Ok(())
    }
}
