//! The group's queue and its worker thread: operations run one at a time, in the order
//! they were queued, on the group's own stream (launch, then synchronize). An error that
//! fails the communicator (a timeout, a failed peer, an abort) breaks the group, as in
//! c10d: every queued and later operation then fails at once, naming the operation that
//! broke it. Every wait here is bounded: an operation by the communicator's timeout and
//! the watchdog, the worker's idle wait by a poll interval.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::process_group::work::WorkState;
use crate::stream::Stream;

/// One operation as the worker runs it: queue it on the stream.
pub(crate) type Job = Box<dyn FnOnce(&Comm, &Stream) -> Result<()> + Send>;

/// How often idle threads look at the queue when nothing wakes them.
pub(crate) const POLL: Duration = Duration::from_millis(50);

/// What broke the group: the operation and the peer it waited for (when known).
#[derive(Clone)]
pub(crate) struct Broken {
    pub op: &'static str,
    pub seq: u64,
    pub peer: Option<usize>,
    pub reason: String,
}

impl Broken {
    /// The error of an operation that was queued when (or after) the group broke.
    fn not_run(&self, w: &WorkState) -> Error {
        w.error(self.peer, format!("not run: {} #{} failed first: {}", self.op, self.seq, self.reason))
    }
}

pub(crate) struct Queue {
    pub jobs: VecDeque<(Arc<WorkState>, Job)>,
    /// The operation on the worker, and since when.
    pub running: Option<(Arc<WorkState>, Instant)>,
    pub broken: Option<Broken>,
    pub next_seq: u64,
    /// No more operations come: the worker drains the queue and exits.
    pub closing: bool,
    pub worker_done: bool,
}

/// What the group's threads share.
pub(crate) struct Shared {
    pub comm: Comm,
    pub timeout: Duration,
    queue: Mutex<Queue>,
    /// Signalled when a job is queued, one ends, or the group closes or breaks.
    pub changed: Condvar,
}

impl Shared {
    pub fn new(comm: Comm, timeout: Duration) -> Shared {
        let queue = Queue {
            jobs: VecDeque::new(),
            running: None,
            broken: None,
            next_seq: 1,
            closing: false,
            worker_done: false,
        };
        Shared { comm, timeout, queue: Mutex::new(queue), changed: Condvar::new() }
    }

    pub fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits on `changed` for at most `d`.
    pub fn wait<'a>(&self, g: MutexGuard<'a, Queue>, d: Duration) -> MutexGuard<'a, Queue> {
        self.changed.wait_timeout(g, d).unwrap_or_else(|e| e.into_inner()).0
    }

    /// Queues `job` as the next operation; a broken group fails it at once.
    pub fn submit(&self, op: &'static str, peer: Option<usize>, job: Job) -> Arc<WorkState> {
        let mut q = self.lock();
        let w = WorkState::new(op, q.next_seq, self.comm.rank(), peer);
        q.next_seq += 1;
        match &q.broken {
            Some(b) => w.complete(Err(b.not_run(&w))),
            None => {
                q.jobs.push_back((w.clone(), job));
                self.changed.notify_all();
            }
        }
        w
    }

    /// Breaks the group (the first break stays): fails the running operation with `b`'s
    /// reason and every queued one as not run. Returns whether this call broke it.
    pub fn break_group(&self, q: &mut Queue, b: Broken) -> bool {
        if q.broken.is_some() {
            return false;
        }
        tracing::error!(
            "process group on rank {}: {} #{} failed ({}); failing the {} queued operation(s)",
            self.comm.rank(),
            b.op,
            b.seq,
            b.reason,
            q.jobs.len()
        );
        if let Some((w, _)) = &q.running {
            w.complete(Err(w.error(b.peer, b.reason.clone())));
        }
        for (w, _) in q.jobs.drain(..) {
            w.complete(Err(b.not_run(&w)));
        }
        q.broken = Some(b);
        self.changed.notify_all();
        true
    }

    /// The worker: runs the queue until the group closes and the queue is empty.
    pub fn work(&self, stream: &Stream) {
        loop {
            let (w, job) = {
                let mut q = self.lock();
                loop {
                    if let Some((w, job)) = q.jobs.pop_front() {
                        q.running = Some((w.clone(), Instant::now()));
                        break (w, job);
                    }
                    if q.closing {
                        q.worker_done = true;
                        self.changed.notify_all();
                        return;
                    }
                    q = self.wait(q, POLL);
                }
            };
            // A panic below must not leave the work pending and the watchdog waiting for a
            // worker that is gone.
            let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                job(&self.comm, stream).and_then(|()| stream.synchronize())
            }))
            .unwrap_or_else(|_| Err(Error::Internal(format!("{} #{}: the operation panicked", w.op, w.seq))));
            let mut q = self.lock();
            match res {
                Ok(()) => w.complete(Ok(())),
                Err(e) if breaks(&e) => {
                    // Fails this work too, unless the watchdog broke the group first (then
                    // the work already holds the watchdog's error).
                    let peer = waited_for(&e).or(w.peer);
                    self.break_group(&mut q, Broken { op: w.op, seq: w.seq, peer, reason: e.to_string() });
                }
                // A caller's mistake (bad count, root, buffer) fails this work only.
                Err(e) => w.complete(Err(e)),
            }
            q.running = None;
            self.changed.notify_all();
        }
    }
}

/// Whether an error fails the communicator, and so breaks the group.
fn breaks(e: &Error) -> bool {
    matches!(e, Error::Timeout { .. } | Error::PeerFailed { .. } | Error::Aborted { .. } | Error::Work { .. })
}

/// The rank a failed wait was waiting for, as the communicator's error names it.
fn waited_for(e: &Error) -> Option<usize> {
    match e {
        Error::Timeout { peer, .. } | Error::PeerFailed { peer, .. } => usize::try_from(*peer).ok(),
        _ => None,
    }
}
