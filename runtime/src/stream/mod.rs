//! Streams: ordered, asynchronous queues of kernel launches (cf. CUDA streams). A stream is
//! a dispatcher thread with its device's CTA pool (`device::CtaPool`: CPU threads on the
//! host, a CUDA stream on a GPU, where each launch runs and is waited for in order). A
//! stream runs each launch through its owner (`Owner`): a communicator's `Executor`, which
//! holds what running its launches needs (kernel tables, failure state), so that nothing
//! calls back up into the communicator.
//!
//! The queue is a fixed ring of `DEPTH` launch slots, like a GPU's command queue: callers
//! write launches into it, the dispatcher runs them in place, and a finished launch's
//! references (buffers, communicator) are released by the next caller or by `synchronize`
//! (or at once by a caller that ran the launch itself, see below). So nothing is allocated
//! per launch, and reference counts are only touched on the callers' side instead of
//! bouncing between the caller's and the dispatcher's core.
//!
//! `synchronize` runs the host launches the dispatcher has not started on the caller's
//! thread (`run`), so that a call followed by synchronize costs no thread hand-off; while
//! calls are blocking so, the dispatcher is not woken per launch either (`wait::DEFER`).
//!
//! A CUDA stream's launches skip the ring (unless `JITCCL_CUDA_SYNC=1`): the caller queues
//! them on the GPU and returns (`gpu`); the ring then only counts nonblocking
//! communicators' reservations. `graph` captures a CUDA stream's launches into a graph.

use std::cell::UnsafeCell;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::device::CtaPool;
use crate::error::{Error, Result};
use crate::wait::{poll, POLL};

mod cuda_graph;
mod executor;
mod failure;
mod failure_log;
mod gpu;
#[cfg(test)]
mod gpu_tests;
mod handle;
mod launch;
mod reservation;
mod run;
mod tables;
#[cfg(test)]
mod tests;

pub use cuda_graph::CudaGraph;
pub(crate) use executor::Executor;
pub(crate) use failure::Failure;
use failure_log::FailureLog;
pub(crate) use handle::Mark;
pub use handle::Stream;
pub(crate) use launch::{KernelCall, Launch};
use launch::{OnCaller, Started};
pub(crate) use tables::Tables;

/// Launch slots per stream. A caller that runs this far ahead waits until half of them
/// have finished.
const DEPTH: u64 = 256;

/// One slot of the ring, on cache lines of its own. Written by a caller only while the
/// dispatcher is not at it (see the protocol on `Shared`).
#[repr(align(64))]
struct Slot(UnsafeCell<Option<Launch>>);

/// The ring and its counters. Slot `i % DEPTH` holds launch `i`. A caller (holding
/// `produce`) writes launch `i` once `i < completed + DEPTH`, then publishes `submitted =
/// i + 1`; the dispatcher reads launch `completed` by reference while `completed <
/// submitted`, then publishes `completed + 1`; a caller empties slots below `completed`
/// (a caller running launches itself empties each before it publishes its completion).
/// "The dispatcher" is whichever thread holds `running` (see `run`): the stream's thread,
/// or a caller of `synchronize`. Sleeping sides are woken as `push`, `next`, `complete`,
/// `idle` and `run::release` say.
struct Shared {
    slots: Box<[Slot]>,
    /// The callers' side (see `Producer`).
    produce: Padded<Mutex<Producer>>,
    /// Each hot word on cache lines of its own, so that one side's writes do not evict
    /// what the other side reads.
    submitted: Padded<AtomicU64>,
    completed: Padded<AtomicU64>,
    /// One past the last launch the dispatcher thread ran (not a caller): slots below it
    /// may hold references until a caller empties them.
    dispatched: Padded<AtomicU64>,
    /// Launches below this index have been emptied: written by callers under `produce`,
    /// read anywhere. Callers read the dispatcher's completion count only to advance it,
    /// not on every launch.
    emptied: AtomicU64,
    /// The smallest completion count a sleeping waiter needs (`u64::MAX`: none sleeps).
    wake_at: Padded<AtomicU64>,
    /// `AWAKE`, `ASLEEP` (until woken) or `DOZING` (wakes by itself, see `run`).
    dispatcher: Padded<AtomicU8>,
    /// Whether new launches are left to their callers for a while instead of waking the
    /// dispatcher, and why (`NOT_DEFERRING`, `BLOCKING` or `FILLING`, see `run`).
    deferring: Padded<AtomicU8>,
    /// The right to run launches, and what runs them (see `run`).
    running: Padded<AtomicBool>,
    /// None where launches skip the ring (`gpu`).
    pool: UnsafeCell<Option<CtaPool>>,
    /// Callers of `synchronize` may run launches themselves (host CTAs, which any thread
    /// can run; a CUDA stream stays with its thread).
    inline: bool,
    /// Every `Stream` handle is gone: the dispatcher exits once the queue is empty.
    closed: AtomicBool,
    /// Launches promised by nonblocking communicators and not yet queued (`Reservation`):
    /// `synchronize` waits for them too, so that it covers every call made before it.
    reserved: AtomicU64,
    error: Mutex<Option<Error>>,
    /// `error` holds one: `synchronize` looks here, not at the lock.
    erred: AtomicBool,
    /// The index of the first launch that failed (`u64::MAX`: none), and the failures kept
    /// for good (`error` is taken by `synchronize`): whoever waits for a point of the
    /// stream (`Stream::mark`) learns whether a launch before it failed.
    failed_at: AtomicU64,
    failures: Mutex<FailureLog>,
    sleep: Mutex<()>,
    done: Condvar,
    work: Condvar,
}

/// The dispatcher's states (`Shared::dispatcher`).
const AWAKE: u8 = 0;
const ASLEEP: u8 = 1;
const DOZING: u8 = 2;

/// Why launches are left to their callers (`Shared::deferring`): not at all; the last
/// `synchronize` ran exactly one launch itself (a blocking call); a caller found the ring
/// full and ran the queued launches itself (calls queued faster than they run).
const NOT_DEFERRING: u8 = 0;
const BLOCKING: u8 = 1;
const FILLING: u8 = 2;

/// Keeps a value on cache lines of its own.
#[repr(align(128))]
struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The callers' right to write and empty slots (`Shared::produce`): a function that
/// takes one must be called under the lock.
struct Producer;

// SAFETY: slots are accessed as the protocol above says: a slot is written (or emptied) by
// one caller under `produce` only while the dispatcher cannot be reading it.
unsafe impl Sync for Shared {}

impl Shared {
    /// Whether `target` launches have completed.
    fn reached(&self, target: u64) -> bool {
        self.completed.load(SeqCst) >= target
    }

    /// Records launch `i` as finished and wakes the sleepers whose target it meets. A plain
    /// store and load, no fence: a waiter that registers concurrently is seen by the next
    /// completion, or by `idle` when there is none.
    fn complete(&self, i: u64, res: Result<()>) {
        if let Err(e) = res {
            // The operations queued behind a failed one fail with the same error: one
            // warning says it.
            let mut first = self.error.lock().unwrap_or_else(|e| e.into_inner());
            if first.is_none() {
                tracing::warn!("stream operation failed: {e}");
            } else {
                tracing::debug!("stream operation failed: {e}");
            }
            self.failures.lock().unwrap_or_else(|e| e.into_inner()).note(i, &e);
            self.failed_at.fetch_min(i, SeqCst);
            first.get_or_insert(e);
            self.erred.store(true, SeqCst);
        }
        self.completed.store(i + 1, Release);
        if i + 1 >= self.wake_at.load(Acquire) {
            self.wake_waiters();
        }
    }

    /// The dispatcher ran out of work: with a full fence, so that a waiter registering now
    /// either sees the last completion or is seen here.
    fn idle(&self) {
        fence(SeqCst);
        if self.completed.load(Relaxed) >= self.wake_at.load(SeqCst) {
            self.wake_waiters();
        }
    }

    fn wake_waiters(&self) {
        let _g = self.sleep.lock().unwrap_or_else(|e| e.into_inner());
        self.wake_at.store(u64::MAX, SeqCst);
        self.done.notify_all();
    }

    /// Waits until `target` launches have completed or `deadline` passes; true if reached.
    /// Launches left to their callers are the dispatcher's again from here: this caller
    /// waits instead of running them.
    #[inline]
    fn wait(&self, target: u64, deadline: Option<Instant>) -> bool {
        // Reached is the blocking call's case (its caller ran it): no clock read, no call.
        self.reached(target) || self.wait_slow(target, deadline)
    }

    #[cold]
    fn wait_slow(&self, target: u64, deadline: Option<Instant>) -> bool {
        self.wake_dispatcher();
        let poll_end = Instant::now() + POLL;
        let poll_end = deadline.map_or(poll_end, |d| d.min(poll_end));
        poll(poll_end, || self.reached(target).then_some(())).is_some() || self.sleep_until(target, deadline)
    }

    fn sleep_until(&self, target: u64, deadline: Option<Instant>) -> bool {
        let mut g = self.sleep.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            self.wake_at.fetch_min(target, SeqCst);
            if self.reached(target) {
                return true;
            }
            g = match deadline {
                None => self.done.wait(g).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return false;
                    }
                    self.done.wait_timeout(g, left).unwrap_or_else(|e| e.into_inner()).0
                }
            };
        }
    }

    /// Empties the slots of finished launches, releasing what they hold, on this thread.
    fn reclaim(&self, _: &mut Producer) {
        let (mut emptied, completed) = (self.emptied.load(Relaxed), self.completed.load(Acquire));
        while emptied < completed {
            // SAFETY: launch `emptied` has completed, so the dispatcher is past its slot, and
            // the caller holds `produce`.
            unsafe { *self.slot(emptied) = None };
            emptied += 1;
        }
        self.emptied.store(emptied, Release);
    }

    /// Releases what the launches the dispatcher ran hold (those a caller ran were released
    /// as they ran), so that a buffer dropped after `synchronize` is freed then. Takes the
    /// callers' lock only when there are such launches: a blocking call has none.
    #[inline]
    fn release_dispatched(&self) {
        if self.dispatched.load(Acquire) > self.emptied.load(Acquire) {
            self.reclaim(&mut self.produce.lock().unwrap_or_else(|e| e.into_inner()));
        }
    }

    #[inline]
    fn slot(&self, i: u64) -> *mut Option<Launch> {
        // SAFETY: the ring has DEPTH slots; i % DEPTH is one of them.
        unsafe { self.slots.get_unchecked((i % DEPTH) as usize) }.0.get()
    }

    /// Queues the launch `build` writes into its (empty) slot (see `Stream::enqueue_with`).
    #[inline]
    fn push(&self, build: impl FnOnce(&mut Option<Launch>)) {
        let mut p = self.produce.lock().unwrap_or_else(|e| e.into_inner());
        let i = self.submitted.load(Relaxed);
        // Slot i is free once launch i - DEPTH is emptied. Emptying in batches, well ahead,
        // leaves the slots in this core's cache, ready to be written without a miss.
        if i + DEPTH / 4 >= self.emptied.load(Relaxed) + DEPTH {
            self.reclaim(&mut p);
            if i >= self.emptied.load(Relaxed) + DEPTH && !self.run_when_full(i, &mut p) {
                self.wait(i - DEPTH / 2, None);
                self.reclaim(&mut p);
            }
        }
        // SAFETY: launch i - DEPTH, the slot's last occupant, has completed and was emptied
        // above; the dispatcher does not read the slot before `submitted` exceeds i.
        build(unsafe { &mut *self.slot(i) });
        // SeqCst store, then load: pairs with the dispatcher's state-then-check in `next`. A
        // dozing dispatcher is left to find the launch itself, unless its caller runs it;
        // but a launch queued behind an unfinished one is not a blocking call's (while the
        // caller fills the ring and runs it, it is: see `run_when_full`).
        self.submitted.store(i + 1, SeqCst);
        match self.dispatcher.load(SeqCst) {
            ASLEEP => self.notify_dispatcher(),
            DOZING if i > self.completed.load(SeqCst) && self.deferring.load(Relaxed) != FILLING => {
                self.wake_dispatcher()
            }
            _ => {}
        }
    }

    /// Wakes the dispatcher from its sleep or doze (under `sleep`, so that it cannot miss it
    /// between checking for work and waiting).
    fn notify_dispatcher(&self) {
        let _g = self.sleep.lock().unwrap_or_else(|e| e.into_inner());
        self.work.notify_one();
    }

    /// Makes the dispatcher take queued launches at once: ends deferring, wakes it if idle.
    fn wake_dispatcher(&self) {
        if self.deferring.load(Relaxed) != NOT_DEFERRING {
            self.deferring.store(NOT_DEFERRING, SeqCst);
        }
        if self.dispatcher.load(SeqCst) != AWAKE {
            self.notify_dispatcher();
        }
    }

    /// Waits until no reservation is outstanding or `deadline` passes; true if none is.
    /// Reservations end by themselves (their jobs are bounded, and an abort cancels them).
    #[inline]
    fn wait_reserved(&self, deadline: Option<Instant>) -> bool {
        self.reserved.load(SeqCst) == 0 || self.wait_reserved_slow(deadline)
    }

    #[cold]
    fn wait_reserved_slow(&self, deadline: Option<Instant>) -> bool {
        let mut g = self.sleep.lock().unwrap_or_else(|e| e.into_inner());
        while self.reserved.load(SeqCst) > 0 {
            let left = deadline.map_or(Duration::from_millis(10), |d| d.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                return false;
            }
            // Released reservations notify `done`; the bound only guards against a missed one.
            g = self.done.wait_timeout(g, left.min(Duration::from_millis(10))).unwrap_or_else(|e| e.into_inner()).0;
        }
        true
    }

    fn record_error(&self, e: Error) {
        self.error.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
        self.erred.store(true, SeqCst);
    }

    /// The point after every launch queued so far, from which `failure_between` finds the
    /// first failure. Under the failures' lock: a launch queued after the point is read
    /// fails after it is watched.
    fn watch(&self) -> u64 {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let at = self.submitted.load(SeqCst);
        failures.watch(at);
        at
    }

    /// A copy of the first failure among launches `from..to`, if one failed.
    fn failure_between(&self, from: u64, to: u64) -> Option<Error> {
        if self.failed_at.load(SeqCst) >= to {
            return None;
        }
        self.failures.lock().unwrap_or_else(|e| e.into_inner()).between(from, to)
    }

    fn take_error(&self) -> Result<()> {
        if !self.erred.load(SeqCst) {
            return Ok(());
        }
        let mut first = self.error.lock().unwrap_or_else(|e| e.into_inner());
        self.erred.store(false, SeqCst);
        first.take().map_or(Ok(()), Err)
    }
}

/// Asks the cache for the lines of `p`'s first 256 bytes (a launch's hot part).
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    for off in (0..size_of::<T>().min(256)).step_by(64) {
        // SAFETY: a prefetch is only a hint; the address lies within *p.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>((p as *const i8).add(off)) };
    }
}
