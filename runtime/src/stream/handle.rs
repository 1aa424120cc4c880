//! The public handle of a stream (`Stream`): making one (jitccl's own, or on the
//! application's CUDA stream), queuing launches into it, and waiting for them.

use std::cell::UnsafeCell;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::gpu::GpuQueue;
use super::run::Runner;
use super::{Launch, Padded, Producer, Shared, Slot, AWAKE, DEPTH, NOT_DEFERRING};
use crate::device::{cuda_sync_launches, CtaPool, Device};
use crate::error::{Error, Result};

/// Closes the queue when the last `Stream` handle goes.
struct Handle(Arc<Shared>);

impl Drop for Handle {
    fn drop(&mut self) {
        self.0.closed.store(true, SeqCst);
        self.0.notify_dispatcher();
    }
}

impl Device {
    /// A new stream on this device.
    pub fn stream(&self) -> Result<Stream> {
        Stream::new(self.clone())
    }
}

/// A point in a stream's order: after the launches queued on it before the point was
/// taken ([`Stream::mark`]), as a CUDA event recorded on a stream marks one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mark(u64);

/// An ordered queue of operations on a device (cf. a CUDA stream).
#[derive(Clone)]
pub struct Stream {
    device: Device,
    handle: Arc<Handle>,
    /// A CUDA stream's asynchronous launches.
    pub(super) gpu: Option<Arc<GpuQueue>>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream on {:?}", self.device)
    }
}

impl Stream {
    fn new(device: Device) -> Result<Stream> {
        let pool = CtaPool::new(&device)?;
        Self::with_pool(device, pool)
    }

    /// A stream of `device` that runs its launches on the application's CUDA stream `raw`
    /// (a `cudaStream_t` or cudarc stream handle; 0 is the legacy default stream), ordered
    /// with the application's own work on it. A launch is queued there by the calling
    /// thread and not waited for (with `JITCCL_CUDA_SYNC=1`, the stream's thread queues it
    /// and waits for it).
    ///
    /// # Safety
    /// `raw` is a stream of `device`'s primary context, alive while this stream (and every
    /// clone) is used and until its launches have finished.
    pub unsafe fn from_cuda_stream(device: &Device, raw: usize) -> Result<Stream> {
        Self::with_pool(device.clone(), CtaPool::borrowed(device, raw)?)
    }

    fn with_pool(device: Device, pool: CtaPool) -> Result<Stream> {
        let inline = matches!(pool, CtaPool::Host(_));
        let (pool, gpu) = match pool {
            CtaPool::Cuda(_) if !cuda_sync_launches() => (None, Some(Arc::new(GpuQueue::new(pool)))),
            _ => (Some(pool), None),
        };
        let shared = Arc::new(Shared {
            slots: (0..DEPTH).map(|_| Slot(UnsafeCell::new(None))).collect(),
            produce: Padded(Mutex::new(Producer)),
            submitted: Padded(AtomicU64::new(0)),
            completed: Padded(AtomicU64::new(0)),
            dispatched: Padded(AtomicU64::new(0)),
            emptied: AtomicU64::new(0),
            wake_at: Padded(AtomicU64::new(u64::MAX)),
            dispatcher: Padded(AtomicU8::new(AWAKE)),
            deferring: Padded(AtomicU8::new(NOT_DEFERRING)),
            running: Padded(AtomicBool::new(false)),
            pool: UnsafeCell::new(pool),
            inline,
            closed: AtomicBool::new(false),
            reserved: AtomicU64::new(0),
            error: Mutex::new(None),
            erred: AtomicBool::new(false),
            failed_at: AtomicU64::new(u64::MAX),
            failures: Mutex::default(),
            sleep: Mutex::new(()),
            done: Condvar::new(),
            work: Condvar::new(),
        });
        let sh = shared.clone();
        std::thread::Builder::new()
            .name("jitccl-stream".into())
            .spawn(move || sh.dispatch())
            .map_err(|e| Error::System { context: "starting a stream thread".into(), source: e })?;
        Ok(Stream { device, handle: Arc::new(Handle(shared)), gpu })
    }

    pub(super) fn shared(&self) -> &Shared {
        &self.handle.0
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Whether `other` is a handle on the same stream.
    pub fn same(&self, other: &Stream) -> bool {
        Arc::ptr_eq(&self.handle, &other.handle)
    }

    pub(crate) fn enqueue(&self, launch: Launch) {
        match &self.gpu {
            Some(q) => q.launch_or_note(launch),
            None => self.shared().push(|slot| *slot = Some(launch)),
        }
    }

    /// Whether launches on this stream are queued on the GPU by their caller (see `gpu`):
    /// then a blocking call launches through [`Stream::launch_now`].
    #[inline]
    pub(crate) fn launches_now(&self) -> bool {
        self.gpu.is_some()
    }

    /// Queues `launch` on the GPU now, on this thread; an error means nothing was queued.
    pub(crate) fn launch_now(&self, launch: Launch) -> Result<()> {
        match &self.gpu {
            Some(q) => q.launch(launch),
            None => Err(Error::Internal("launch_now on a stream whose thread runs its launches".into())),
        }
    }

    /// Queues the launch `build` writes into the (empty) slot it is given, under the
    /// queue's lock: a launch built elsewhere and moved in is copied, and the copy stalls on
    /// the stores that just built it (a blocking call's launch, in perf profiles of small
    /// calls). `build` must be quick, cannot fail, and must fill the slot.
    #[inline]
    pub(crate) fn enqueue_with(&self, build: impl FnOnce(&mut Option<Launch>)) {
        if self.gpu.is_some() {
            let mut launch = None;
            build(&mut launch);
            return launch.into_iter().for_each(|l| self.enqueue(l));
        }
        self.shared().push(build);
    }

    /// Waits for every queued operation; returns the first error since the last call.
    /// Operations end by themselves (every kernel wait is bounded), so this returns.
    pub fn synchronize(&self) -> Result<()> {
        let sh = self.shared();
        sh.wait_reserved(None);
        if let Some(q) = &self.gpu {
            let gpu = q.synchronize(None).map(drop);
            return sh.take_error().and(gpu);
        }
        let target = sh.submitted.load(SeqCst);
        // Launches the dispatcher has not started run here: the caller would only wait for
        // them, and running them costs it no hand-off and no wake-up.
        if sh.inline && !sh.reached(target) {
            sh.try_run(target, Runner::Synchronize);
        }
        sh.wait(target, None);
        sh.release_dispatched();
        sh.take_error()
    }

    /// Like [`Stream::synchronize`], giving up after `timeout` with `Ok(false)`.
    pub fn synchronize_timeout(&self, timeout: Duration) -> Result<bool> {
        let sh = self.shared();
        let deadline = Instant::now() + timeout;
        if !sh.wait_reserved(Some(deadline)) || !sh.wait(sh.submitted.load(SeqCst), Some(deadline)) {
            return Ok(false);
        }
        if let Some(q) = &self.gpu {
            let gpu = q.synchronize(Some(deadline));
            return sh.take_error().and(gpu);
        }
        sh.release_dispatched();
        sh.take_error().map(|()| true)
    }

    /// The point after every launch queued so far.
    pub(crate) fn mark(&self) -> Mark {
        match &self.gpu {
            Some(q) => Mark(q.queued()),
            None => Mark(self.shared().submitted.load(SeqCst)),
        }
    }

    /// Whether every launch before `m` has ended (on a GPU, retiring those that have).
    pub(crate) fn passed(&self, m: Mark) -> bool {
        match &self.gpu {
            Some(q) => q.passed(m.0),
            None => self.shared().reached(m.0),
        }
    }

    /// Waits until every launch before `m` has ended, or `deadline` passes; whether they
    /// have. Always bounded: a waiter for a point looks again at why it waits (a process
    /// group's work may be failed meanwhile). With `run_here`, host launches not yet
    /// started run on this thread, as `synchronize` runs them (no hand-off to the stream's
    /// thread): only for a caller that may wait as long as they take, since a launch run
    /// here cannot be left at `deadline`.
    pub(crate) fn wait_for(&self, m: Mark, deadline: Instant, run_here: bool) -> bool {
        if let Some(q) = &self.gpu {
            return q.wait_for(m.0, Some(deadline));
        }
        let sh = self.shared();
        if run_here && sh.inline && !sh.reached(m.0) {
            sh.try_run(m.0, Runner::Synchronize);
        }
        let done = sh.wait(m.0, Some(deadline));
        if done {
            sh.release_dispatched();
        }
        done
    }

    /// The point after every launch queued so far (as [`Stream::mark`]), from which
    /// [`Stream::failure_between`] finds failures: what a process group takes when it is
    /// made, so that failures on the stream before it are not its operations'.
    pub(crate) fn watch(&self) -> Mark {
        match &self.gpu {
            Some(q) => Mark(q.watch()),
            None => Mark(self.shared().watch()),
        }
    }

    /// The error of the first launch between `from` (a point from [`Stream::watch`]) and
    /// `to` that failed, if one did. Unlike `synchronize`'s, it stays: every waiter for a
    /// later point learns it too.
    pub(crate) fn failure_between(&self, from: Mark, to: Mark) -> Option<Error> {
        match &self.gpu {
            Some(q) => q.failure_between(from.0, to.0),
            None => self.shared().failure_between(from.0, to.0),
        }
    }

    /// Whether all queued work has finished.
    pub fn is_idle(&self) -> bool {
        let sh = self.shared();
        sh.reserved.load(SeqCst) == 0
            && sh.reached(sh.submitted.load(SeqCst))
            && self.gpu.as_ref().is_none_or(|q| q.is_idle())
    }
}
