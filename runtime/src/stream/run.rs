//! Running a stream's launches. One thread at a time holds the right to run them
//! (`Shared::running`) and, with it, the stream's CTA pool: the stream's dispatcher thread,
//! or a caller of `synchronize` that finds launches not yet started. Such a caller runs
//! them itself instead of waiting: a blocking collective (call, then synchronize) is then
//! one thread's work, with no hand-off to the dispatcher and no wake-up back. Whoever
//! holds the right runs launches in queue order, so the stream stays ordered. A caller
//! runs only the launches whose owner allows it (`Owner::on_caller`: a rank bound to
//! CPUs, when the caller runs on them, so that two ranks' kernels never share a core the
//! wait policy believes they have to themselves) and leaves the rest to the dispatcher.
//! A caller that finds the ring full runs the queued launches too, where it and the
//! dispatcher share the rank's one CPU (`Shared::run_when_full`); the dispatcher then
//! leaves the launches it has not started to that caller.
//!
//! While callers run their launches so (the last synchronize ran exactly one: a blocking
//! call; or a caller found the ring full), a new launch does not wake the dispatcher (in
//! the first case, one queued behind an unfinished launch does): it dozes, waking by
//! itself after `wait::DEFER`, then after twice as long each time it finds nothing to
//! take, up to `wait::DEFER_MAX`, and takes a launch only once it has found it queued and
//! unstarted at two wake-ups `DEFER` apart. A blocking call then costs no wake-up of the
//! stream's thread, which would also compete for the caller's CPU (a call as long as a
//! doze would otherwise be cut by one), and a launch nobody synchronizes still starts
//! within DEFER_MAX + DEFER.
//! A caller that waits rather than runs (`Shared::wait`) ends the deferring at once.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::time::Instant;

use super::{
    prefetch, Launch, OnCaller, Producer, Shared, ASLEEP, AWAKE, BLOCKING, DEPTH, DOZING, FILLING, NOT_DEFERRING,
};
use crate::affinity;
use crate::error::Error;
use crate::wait::{poll, DEFER, DEFER_MAX, DOZES, POLL};

/// Who runs launches (`Shared::try_run`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Runner {
    /// The stream's own thread.
    Dispatcher,
    /// A caller of `synchronize`.
    Synchronize,
    /// A caller that found the ring full (`Shared::run_when_full`).
    FullRing,
}

impl Runner {
    /// Whether this runner may run a launch whose owner says `on` (a caller's thread).
    fn may_run(self, on: OnCaller) -> bool {
        match self {
            Runner::Dispatcher => true,
            Runner::Synchronize => on != OnCaller::Never,
            Runner::FullRing => on == OnCaller::SameCpu,
        }
    }
}

impl Shared {
    /// Whether launches are queued that nobody runs yet.
    fn runnable(&self) -> bool {
        !self.running.load(SeqCst) && self.submitted.load(SeqCst) > self.completed.load(SeqCst)
    }

    /// Takes the right to run launches and runs the queued ones below `end` (all of them on
    /// the dispatcher, the ones it may on a caller); false when another thread holds it.
    pub(super) fn try_run(&self, end: u64, by: Runner) -> bool {
        if self.running.compare_exchange(false, true, Acquire, Relaxed).is_err() {
            return false;
        }
        let ran = self.run_queued(end, by);
        // One launch run by its synchronize is a blocking call; several, a batch the
        // stream's thread should have been running meanwhile (queued calls, then synchronize).
        let defer = if ran == 1 { BLOCKING } else { NOT_DEFERRING };
        if by == Runner::Synchronize && ran > 0 && defer != self.deferring.load(Relaxed) {
            self.deferring.store(defer, SeqCst);
        }
        self.release();
        true
    }

    /// The ring is full at launch `i`: the caller, which would wait for the queued launches
    /// to finish, runs them itself instead (host CTAs), as `synchronize` does, where its
    /// thread and the dispatcher's share the rank's one CPU (`OnCaller::SameCpu`): waiting
    /// would only hand the core back and forth. Calls queued this fast are then left to the caller, the dispatcher dozing
    /// (see the module comment). It runs up to the last multiple of `DEPTH` (at least one
    /// launch): ranks whose streams carry the same launches then all switch from queuing to
    /// running at the same launch, whoever ran the launches before. Where one rank switched
    /// at another launch than its peer, each would wait in its kernel while the other queues
    /// (a measurable loss for small queued calls), and a boundary that only counts from the last one keeps any offset the
    /// stream's thread made by taking a few launches. True if that made room.
    pub(super) fn run_when_full(&self, i: u64, p: &mut Producer) -> bool {
        if !self.inline {
            return false;
        }
        // The dispatcher gives the right to run up after its current launch.
        self.deferring.store(FILLING, SeqCst);
        // Past the emptied launches (the ring is full: i - DEPTH of them), so one runs at least.
        let end = i / DEPTH * DEPTH;
        poll(Instant::now() + POLL, || self.try_run(end, Runner::FullRing).then_some(()));
        self.reclaim(p);
        i < self.emptied.load(Relaxed) + DEPTH
    }

    /// Runs launches in order from the first not completed while they are queued and below
    /// `end`; how many it ran. The caller holds `running`, so no other thread advances
    /// `completed`. The dispatcher stops early when a caller that found the ring full
    /// wants to run them (`FILLING`).
    fn run_queued(&self, end: u64, by: Runner) -> u64 {
        let first = self.completed.load(Relaxed);
        let caller = by != Runner::Dispatcher;
        loop {
            if !caller && self.deferring.load(Relaxed) == FILLING {
                return self.completed.load(Relaxed) - first;
            }
            let i = self.completed.load(Relaxed);
            let submitted = self.submitted.load(Acquire);
            if i >= submitted.min(end) {
                return i - first;
            }
            if submitted > i + 1 {
                // The next launch was written on the caller's core: start fetching it now.
                prefetch(self.slot(i + 1));
            }
            // SAFETY: launch i was submitted and is not emptied before it completes, and only
            // the holder of `running` reads it meanwhile; the pool is used only by that holder.
            let (launch, pool) = unsafe { ((*self.slot(i)).as_mut(), &mut *self.pool.get()) };
            if caller && launch.as_ref().is_some_and(|l| !by.may_run(l.owner().on_caller())) {
                return i - first;
            }
            let res = match (launch, pool) {
                (Some(l), Some(pool)) => catch_unwind(AssertUnwindSafe(|| {
                    let (owner, call) = l.parts();
                    owner.run(call, pool)
                }))
                .unwrap_or_else(|_| Err(Error::Internal("a stream operation panicked".into()))),
                (None, _) => Err(Error::Internal("empty stream slot".into())),
                (_, None) => Err(Error::Internal("a launch in the ring of a stream that launches on the GPU".into())),
            };
            // A caller releases what its launch holds itself, here, on the core that took it,
            // so that its synchronize need not take the callers' lock to (`release_dispatched`);
            // the dispatcher leaves its launches to the callers (see `Shared`).
            let ran = match caller {
                // SAFETY: as above; nobody else writes the slot before the launch completes.
                true => Launch::take_held(unsafe { &mut *self.slot(i) }),
                false => {
                    self.dispatched.store(i + 1, Relaxed);
                    None
                }
            };
            self.complete(i, res);
            drop(ran);
        }
    }

    /// Gives the right to run back. Waiters that registered meanwhile are woken by `idle`;
    /// launches queued meanwhile (beyond a caller's `end`) by the dispatcher, woken if it
    /// sleeps: it checks for work after announcing its sleep, this after freeing `running`.
    fn release(&self) {
        // Release, not SeqCst: `idle` starts with a SeqCst fence, which orders this store
        // before the loads that follow (one full barrier per release instead of two).
        self.running.store(false, Release);
        self.idle();
        if self.runnable() && self.dispatcher.load(SeqCst) != AWAKE {
            self.notify_dispatcher();
        }
    }

    /// Waits until there are launches to run and nobody runs them: polls, then sleeps; or,
    /// while deferring, dozes (see the module comment). False once the stream is closed with
    /// nothing left to run.
    fn next(&self) -> bool {
        if self.deferring.load(SeqCst) == NOT_DEFERRING
            && (self.runnable() || poll(Instant::now() + POLL, || self.runnable().then_some(())).is_some())
        {
            return true;
        }
        let mut g = self.sleep.lock().unwrap_or_else(|e| e.into_inner());
        // The first unstarted launch at the last wake-up; the completion count then, the
        // wake-ups in a row that found the stream idle (no launch queued, none finished), and
        // the next doze's length.
        let (mut seen, mut last, mut idle, mut nap) = (None, self.completed.load(SeqCst), 0, DEFER);
        let got = loop {
            let dozing = self.deferring.load(SeqCst) != NOT_DEFERRING && idle < DOZES;
            self.dispatcher.store(if dozing { DOZING } else { ASLEEP }, SeqCst);
            let now = self.completed.load(SeqCst);
            if self.runnable() {
                if !dozing || seen == Some(now) {
                    break true;
                }
                seen = Some(now);
                nap = DEFER;
            } else if self.closed.load(SeqCst) {
                break false;
            } else if now == last {
                idle += 1;
            } else {
                idle = 0;
            }
            last = now;
            g = match dozing {
                true => self.work.wait_timeout(g, nap).unwrap_or_else(|e| e.into_inner()).0,
                false => self.work.wait(g).unwrap_or_else(|e| e.into_inner()),
            };
            // Each doze is twice the last (callers are running their launches), up to
            // DEFER_MAX; finding a launch unstarted (above) sets the next one back to DEFER,
            // after which the launch is taken if it is still unstarted.
            nap = (nap * 2).min(DEFER_MAX);
        };
        self.dispatcher.store(AWAKE, SeqCst);
        // It takes work its callers left: they no longer run their launches.
        if got && self.deferring.load(Relaxed) != NOT_DEFERRING {
            self.deferring.store(NOT_DEFERRING, SeqCst);
        }
        got
    }

    /// The dispatcher thread: runs launches as they are queued until the stream is closed.
    pub(super) fn dispatch(&self) {
        affinity::mark_kernel_thread();
        while self.next() {
            self.try_run(u64::MAX, Runner::Dispatcher);
        }
    }
}
