//! Asynchronous launches on a CUDA stream (unless `JITCCL_CUDA_SYNC=1`): the caller's
//! thread queues each launch on the GPU itself and returns, without a host synchronize, as
//! NCCL does; a stream being captured records it into the CUDA graph instead. Each queued
//! launch stays here, holding what its kernel touches (buffers, communicator), until a
//! look at its completion marker (an event recorded after it) finds it finished: lazily, at
//! the next launch, and at `synchronize` / `is_idle`, which poll in order. Its owner then
//! reads how it ended (the kernels' statuses); a failure fails the communicator and is
//! returned by `synchronize`. Every wait is bounded: a launch that has not finished the
//! owner's bound after it became the oldest is declared hung, which fails (and aborts) its
//! communicator with an error naming the rank and operation.
//!
//! No thread watches the GPU: a failure is seen at the stream's next launch, `is_idle` or
//! `synchronize`, and from then on every call on the communicator returns it (the C API's
//! ncclCommGetAsyncError looks at its streams first, as NCCL's polls).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{FailureLog, Launch, Started};
use crate::device::{CtaPool, CudaEvent};
use crate::error::{Error, Result};
use crate::wait::{poll, POLL};

/// Launches in flight per stream before a new one first waits for the oldest: what it
/// holds is bounded, like the ring's slots.
const DEPTH: usize = 1024;

/// How long a waiter sleeps between looks once polling has not seen a launch end.
const NAP: Duration = Duration::from_micros(50);

/// Whether a queued launch has finished (an event recorded after it).
pub(crate) trait Completion: Send {
    fn done(&self) -> Result<bool>;
}

impl Completion for std::sync::Arc<crate::device::CudaEvent> {
    fn done(&self) -> Result<bool> {
        crate::device::CudaEvent::done(self)
    }
}

/// A launch queued on the GPU and not yet seen to finish.
struct Pending {
    launch: Launch,
    done: Box<dyn Completion>,
    /// Since when it is the oldest in flight (its bound counts from there).
    oldest_since: Option<Instant>,
    /// Declared hung (past its bound).
    hung: bool,
}

struct State {
    pool: CtaPool,
    pending: VecDeque<Pending>,
    /// The first failure since the last `synchronize`.
    error: Option<Error>,
    /// Launches queued on the GPU so far, and retired so far (in order): a `Mark` counts
    /// the first.
    queued: u64,
    retired: u64,
    /// The failures of queued launches kept for good (`error` is taken by `synchronize`).
    failed: FailureLog,
    /// What the last look at the oldest launch found.
    last: Front,
    /// Launches recorded into the graph that `Stream::begin_capture` started, for
    /// `end_captured` (None: no such capture).
    captured: Option<Vec<Launch>>,
    /// The last graph replay queued: the event after it, when, and how long it may take.
    /// Replays are in stream order, so the last one's end is every earlier one's too.
    replay: Option<(Arc<CudaEvent>, Instant, Duration)>,
}

/// A CUDA stream's asynchronous launches (see the module comment).
pub(crate) struct GpuQueue {
    state: Mutex<State>,
}

impl GpuQueue {
    pub(crate) fn new(pool: CtaPool) -> GpuQueue {
        GpuQueue {
            state: Mutex::new(State {
                pool,
                pending: VecDeque::new(),
                error: None,
                queued: 0,
                retired: 0,
                failed: FailureLog::default(),
                last: Front::Waiting,
                captured: None,
                replay: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `launch` on the GPU on this thread and returns; an error means nothing was
    /// queued. Finished launches are then retired (without waiting).
    pub(crate) fn launch(&self, mut launch: Launch) -> Result<()> {
        let mut st = self.lock();
        let (owner, call) = launch.parts();
        let started = owner.start(call, &st.pool)?;
        match started {
            // Replays of a graph are the application's to order and wait for; the graph
            // keeps what the launch holds (see `graph`). Nothing is looked at while the
            // stream is captured: an event query then could invalidate the application's
            // capture (CUDA's global capture mode).
            Started::Captured => match &mut st.captured {
                Some(graph) => graph.push(launch),
                // The application's own capture: its graph is its to keep valid, as NCCL's.
                None => drop(launch),
            },
            Started::Queued(done) => {
                st.queued += 1;
                st.pending.push_back(Pending { launch, done, oldest_since: None, hung: false });
                st.retire();
                if st.pending.len() > DEPTH {
                    st.retire_until(1, None);
                }
            }
        }
        Ok(())
    }

    /// Queues `launch`; a failure to queue it is kept for `synchronize`, as a failed
    /// launch's is (the calls that queue several launches at once return nothing).
    pub(crate) fn launch_or_note(&self, launch: Launch) {
        if let Err(e) = self.launch(launch) {
            self.lock().note(e);
        }
    }

    /// Waits until every launch queued so far has finished or `deadline` passes (each is
    /// bounded by its owner anyway); returns the first failure since the last call, or
    /// `Ok(false)` at the deadline.
    pub(crate) fn synchronize(&self, deadline: Option<Instant>) -> Result<bool> {
        let mut st = self.lock();
        let all = st.pending.len();
        let waited = st.retire_until(all, deadline) && st.wait_replay(deadline)?;
        match st.error.take() {
            Some(e) => Err(e),
            // Without a deadline only a stuck launch ends the wait (its hang was reported
            // before): never a success.
            None if !waited && deadline.is_none() => Err(Error::Device(format!(
                "a launch on this CUDA stream ({}) has still not ended, a bound after it was declared hung and its \
                 communicator aborted",
                st.pending.front().map_or("?", |p| p.launch.call.name)
            ))),
            None => Ok(waited),
        }
    }

    /// Launches queued so far (see `Stream::mark`).
    pub(crate) fn queued(&self) -> u64 {
        self.lock().queued
    }

    /// Whether the first `n` launches queued have ended (retiring those that have).
    pub(crate) fn passed(&self, n: u64) -> bool {
        let mut st = self.lock();
        st.retire();
        st.retired >= n
    }

    /// Waits until the first `n` launches queued have ended, or `deadline` passes; whether
    /// they have.
    pub(crate) fn wait_for(&self, n: u64, deadline: Option<Instant>) -> bool {
        let mut st = self.lock();
        let left = n.saturating_sub(st.retired) as usize;
        st.retire_until(left, deadline) && st.retired >= n
    }

    /// Launches queued so far, a point from which `failure_between` finds failures (see
    /// `Stream::watch`).
    pub(crate) fn watch(&self) -> u64 {
        let mut st = self.lock();
        let at = st.queued;
        st.failed.watch(at);
        at
    }

    /// A copy of the error of the first launch among those queued `from..to` that failed.
    pub(crate) fn failure_between(&self, from: u64, to: u64) -> Option<Error> {
        self.lock().failed.between(from, to)
    }

    /// Whether every queued launch has finished (retiring those that have).
    pub(crate) fn is_idle(&self) -> bool {
        let mut st = self.lock();
        st.retire();
        st.pending.is_empty()
    }

    /// Notes a graph replay just queued (see `State::replay`).
    pub(crate) fn replayed(&self, done: Arc<CudaEvent>, bound: Duration) {
        self.lock().replay = Some((done, Instant::now(), bound));
    }

    /// Keeps the launches recorded from now on, for `end_captured`.
    pub(crate) fn begin_captured(&self) {
        self.lock().captured = Some(Vec::new());
    }

    /// The launches recorded since `begin_captured`.
    pub(crate) fn end_captured(&self) -> Vec<Launch> {
        self.lock().captured.take().unwrap_or_default()
    }

    /// Runs `f` on the stream (a graph capture's begin or end, a graph launch), under the
    /// lock, so that no launch of another thread is queued in between.
    pub(crate) fn with_pool<R>(&self, f: impl FnOnce(&CtaPool) -> Result<R>) -> Result<R> {
        f(&self.lock().pool)
    }
}

/// What a look at the oldest launch found.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Front {
    /// It had finished and was retired.
    Retired,
    /// None is in flight, or it runs within its bound.
    Waiting,
    /// It was declared hung a bound ago and has still not ended: waiting on is pointless.
    Stuck,
}

impl State {
    fn note(&mut self, e: Error) {
        if self.error.is_none() {
            tracing::warn!("stream operation failed: {e}");
        }
        self.error.get_or_insert(e);
    }

    /// Notes the failure of queued launch `i`.
    fn fail(&mut self, i: u64, e: Error) {
        self.failed.note(i, &e);
        self.note(e);
    }

    /// Retires the finished launches at the front, in order, without waiting.
    fn retire(&mut self) {
        while self.look() == Front::Retired {}
    }

    /// Waits for the first `n` queued launches to finish, or until `deadline`, or until
    /// one is stuck; whether it reached them. Then retires whatever else has finished.
    /// Waits for the last graph replay to end: false at `deadline`, an error past its bound
    /// (its collectives' communicators then say why when the graph is checked).
    fn wait_replay(&mut self, deadline: Option<Instant>) -> Result<bool> {
        let Some((done, since, bound)) = self.replay.clone() else { return Ok(true) };
        let busy_until = Instant::now() + POLL;
        loop {
            if done.done()? {
                self.replay = None;
                return Ok(true);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
            if since.elapsed() > bound {
                return Err(Error::Device(format!(
                    "a CUDA graph replay on this stream has not ended {:.1} s after it was queued",
                    since.elapsed().as_secs_f64()
                )));
            }
            // Looked at busily first: a replay's end is what timings of replays wait for.
            if Instant::now() >= busy_until {
                std::thread::sleep(NAP);
            }
        }
    }

    fn retire_until(&mut self, mut n: usize, deadline: Option<Instant>) -> bool {
        while n > 0 {
            let end = Instant::now() + POLL;
            let end = deadline.map_or(end, |d| d.min(end));
            match poll(end, || (self.look() != Front::Waiting).then_some(())).map(|()| self.last) {
                Some(Front::Retired) => n -= 1,
                Some(Front::Stuck) => return false,
                _ if deadline.is_some_and(|d| Instant::now() >= d) => return false,
                _ => std::thread::sleep(NAP),
            }
        }
        self.retire();
        true
    }

    /// Looks at the oldest launch: retires it if it has finished; declares it hung past its
    /// owner's bound (its communicator then fails and is aborted, so that its kernel ends
    /// at its next look at the abort flag; it stays in flight, for its memory is still the
    /// kernel's, and is retired once it has ended).
    fn look(&mut self) -> Front {
        self.last = self.look_once();
        self.last
    }

    fn look_once(&mut self) -> Front {
        let Some(front) = self.pending.front_mut() else { return Front::Waiting };
        let since = *front.oldest_since.get_or_insert_with(Instant::now);
        let result = match front.done.done() {
            Ok(true) => front.launch.owner().finish(&front.launch.call, false),
            Ok(false) if since.elapsed() <= front.launch.owner().bound() => return Front::Waiting,
            Ok(false) if front.hung => return Front::Stuck,
            Ok(false) => {
                front.hung = true;
                front.oldest_since = Some(Instant::now());
                if let Err(e) = front.launch.owner().finish(&front.launch.call, true) {
                    self.fail(self.retired, e);
                }
                return Front::Waiting;
            }
            Err(e) => Err(e),
        };
        let Pending { launch, .. } = self.pending.pop_front().expect("a front launch");
        self.retired += 1;
        if let Err(e) = result {
            self.fail(self.retired - 1, e);
        }
        drop(launch);
        Front::Retired
    }
}

impl Drop for GpuQueue {
    fn drop(&mut self) {
        // What the launches hold stays until they have finished: memory freed under a
        // running kernel would be reused under it.
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        let n = st.pending.len();
        if !st.retire_until(n, None) || !st.pending.is_empty() {
            tracing::warn!("a CUDA stream dropped with {} launch(es) unfinished", st.pending.len());
        }
    }
}
