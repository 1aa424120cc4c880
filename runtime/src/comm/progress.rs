//! Nonblocking mode's progress thread (NCCL's async jobs): a communicator created with
//! `blocking = false` hands its init and every later operation to this thread as a job, in
//! call order, and the calls return at once. The communicator is `InProgress` while a job
//! is queued or running; abort cancels the queued ones (a job's drop releases what it held,
//! e.g. its stream reservation, with an error).

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// What [`Comm::async_error`](crate::Comm::async_error) reports when the communicator has
/// not failed (NCCL's ncclSuccess and ncclInProgress).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommState {
    /// Init and every operation queued so far have been done (operations launched on
    /// their streams: [`Stream::synchronize`](crate::Stream::synchronize) waits for them).
    Ready,
    /// Init, or an operation queued in nonblocking mode, is still being done.
    InProgress,
}

pub(crate) type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// A job is running now.
    busy: bool,
    /// The communicator's last handle is gone: the thread exits once the queue is empty.
    closed: bool,
    /// The thread was started (it starts with the first job: a communicator that never
    /// queues one, e.g. a blocking one's temporary, costs no thread).
    started: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Signals both a new job (to the thread) and a finished one (to waiters).
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn run(&self) {
        let mut q = self.lock();
        loop {
            if let Some(job) = q.jobs.pop_front() {
                q.busy = true;
                drop(q);
                // A panicking job must not take the thread (and every later job) with it.
                if catch_unwind(AssertUnwindSafe(job)).is_err() {
                    tracing::error!("a nonblocking communicator job panicked");
                }
                q = self.lock();
                q.busy = false;
                self.changed.notify_all();
            } else if q.closed {
                return;
            } else {
                q = self.changed.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        }
    }
}

/// One communicator's progress thread and queue.
#[derive(Default)]
pub(crate) struct Progress {
    shared: Arc<Shared>,
}

impl Progress {
    /// Queues `job` behind the others, starting the thread on the first one.
    pub(crate) fn push(&self, job: Job) -> Result<()> {
        let mut q = self.shared.lock();
        if !q.started {
            let shared = self.shared.clone();
            std::thread::Builder::new().name("jitccl-progress".into()).spawn(move || shared.run()).map_err(|e| {
                Error::System { context: "starting a communicator's progress thread".into(), source: e }
            })?;
            q.started = true;
        }
        q.jobs.push_back(job);
        self.shared.changed.notify_all();
        Ok(())
    }

    /// Whether a job is queued or running.
    pub(crate) fn pending(&self) -> bool {
        let q = self.shared.lock();
        q.busy || !q.jobs.is_empty()
    }

    /// Drops every queued job (not the running one); returns how many.
    pub(crate) fn cancel(&self) -> usize {
        let jobs: Vec<Job> = self.shared.lock().jobs.drain(..).collect();
        self.shared.changed.notify_all();
        // Dropped outside the lock: a job's drop may take other locks (a stream's).
        jobs.len()
    }

    /// Wakes the waiters of [`Progress::wait_idle`] (to look at `stop` again).
    pub(crate) fn wake(&self) {
        let _q = self.shared.lock();
        self.shared.changed.notify_all();
    }

    /// Waits until no job is queued or running, `stop()` is true or `deadline` passes;
    /// returns whether the queue is idle. `stop` is looked at on every wake-up and at least
    /// every 10 ms (an abort ends the wait without a wake-up of its own).
    pub(crate) fn wait_idle(&self, deadline: Instant, stop: impl Fn() -> bool) -> bool {
        let mut q = self.shared.lock();
        loop {
            if !q.busy && q.jobs.is_empty() {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || stop() {
                return false;
            }
            q = self
                .shared
                .changed
                .wait_timeout(q, left.min(Duration::from_millis(10)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl Drop for Progress {
    /// The last handle is gone: the thread runs what is queued (the user asked for it),
    /// then exits. Nothing here waits for it.
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.changed.notify_all();
    }
}
