//! The group's operations in flight, in the order they were queued, and what the group's
//! threads share. An operation is queued on the calling thread (its launches go onto the
//! group's stream, as c10d's ProcessGroupNCCL launches on the caller's thread) and is
//! retired, in order, once the stream has passed its mark: by whoever waits for it or asks
//! about it, or by the watchdog. A failed launch fails the operation it belongs to and
//! breaks the group, as in c10d: every operation in flight and every later one then fails,
//! naming the operation that broke it (those the stream had already run end well).

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::process_group::operation::WorkState;
use crate::stream::{Mark, Stream};

/// What broke the group: the operation and the peer it waited for (when known).
#[derive(Clone)]
pub(crate) struct Broken {
    pub op: Cow<'static, str>,
    pub seq: u64,
    pub peer: Option<usize>,
    pub reason: String,
    pub timed_out: bool,
}

impl Broken {
    /// The error of operation `w` when the group broke: `w`'s own failure, or, for any
    /// other, that it did not run.
    fn error_of(&self, w: &WorkState) -> Error {
        match w.seq == self.seq {
            true => w.error(self.peer, self.reason.clone(), self.timed_out),
            false => w.error(
                self.peer,
                format!("not run: {} #{} failed first: {}", self.op, self.seq, self.reason),
                self.timed_out,
            ),
        }
    }
}

pub(crate) struct InFlight {
    /// Queued and not yet retired, oldest first.
    pub works: VecDeque<Arc<WorkState>>,
    pub broken: Option<Broken>,
    pub next_seq: u64,
    /// No more operations come: the watchdog exits once every one has ended.
    pub closing: bool,
}

/// What the group's handle, its works and its watchdog share.
pub(crate) struct Shared {
    pub comm: Comm,
    /// Where the group's operations are queued.
    pub stream: Stream,
    /// The stream's point when the group was made: launches before it (another call's on
    /// a shared stream) are not the group's, nor are their failures.
    start: Mark,
    pub timeout: Duration,
    state: Mutex<InFlight>,
    /// Held while an operation is queued, so that the stream's order is the sequence
    /// numbers' order.
    queuing: Mutex<()>,
    /// Wakes the watchdog: when the group closes or breaks.
    pub changed: Condvar,
}

impl Shared {
    pub fn new(comm: Comm, stream: Stream, timeout: Duration) -> Shared {
        let state = InFlight { works: VecDeque::new(), broken: None, next_seq: 1, closing: false };
        let start = stream.watch();
        let (state, queuing) = (Mutex::new(state), Mutex::new(()));
        Shared { comm, stream, start, timeout, state, queuing, changed: Condvar::new() }
    }

    pub fn lock(&self) -> MutexGuard<'_, InFlight> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits on `changed` for at most `d`.
    pub fn wait<'a>(&self, g: MutexGuard<'a, InFlight>, d: Duration) -> MutexGuard<'a, InFlight> {
        self.changed.wait_timeout(g, d).unwrap_or_else(|e| e.into_inner()).0
    }

    /// Queues operation `op` by running `queue` on this thread (it queues the operation's
    /// launches on the group's stream); a broken group fails it at once, without running it.
    pub fn submit(
        &self, op: Cow<'static, str>, peer: Option<usize>, queue: impl FnOnce(&Comm, &Stream) -> Result<()>,
    ) -> Arc<WorkState> {
        let _order = self.queuing.lock().unwrap_or_else(|e| e.into_inner());
        let rank = self.comm.rank();
        let seq = {
            let mut s = self.lock();
            let seq = s.next_seq;
            s.next_seq += 1;
            if let Some(b) = &s.broken {
                let w = WorkState::new(op, seq, rank, peer, self.stream.mark(), None);
                w.complete(Err(b.error_of(&w)));
                return w;
            }
            seq
        };
        let before = self.stream.mark();
        // A panic must not leave a work without an outcome.
        let queued = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| queue(&self.comm, &self.stream)))
            .unwrap_or_else(|_| Err(Error::Internal(format!("{op} #{seq}: queuing the operation panicked"))));
        let mark = self.stream.mark();
        let mut s = self.lock();
        // The watchdog is not woken: it finds the operation at its next look (a wake-up per
        // call would cost the caller a system call and a thread competing for its core).
        match queued {
            Err(e) if breaks(&e) || self.comm.async_error().is_err() => {
                // The operations the stream has run meanwhile ended well, whatever follows.
                self.retire(&mut s);
                let w = WorkState::new(op, seq, rank, peer, mark, None);
                let (peer, timed_out) = (waited_for(&e).or(peer), timed_out(&e));
                // A binding's failed call given as this operation's failure: the group names it.
                let reason = match e {
                    Error::Work { reason, .. } => reason,
                    e => e.to_string(),
                };
                s.works.push_back(w.clone());
                self.break_group(&mut s, Broken { op: w.op.clone(), seq, peer, reason, timed_out });
                w
            }
            // A caller's mistake (bad count, root, buffer) that queued nothing: it fails this
            // work only, at once.
            Err(e) if mark == before => {
                let w = WorkState::new(op, seq, rank, peer, mark, None);
                w.complete(Err(e));
                w
            }
            // Launches queued before a later call failed still run, on the caller's memory:
            // the work ends (with that error) only once the stream has run them.
            queued => {
                let w = WorkState::new(op, seq, rank, peer, mark, queued.err());
                match &s.broken {
                    // The watchdog broke the group meanwhile: this one fails as not run.
                    Some(b) => w.complete(Err(b.error_of(&w))),
                    None => s.works.push_back(w.clone()),
                }
                w
            }
        }
    }

    /// Retires, in order, the operations the stream has passed: each ends as it ran, or
    /// the first whose launches failed breaks the group.
    pub fn retire(&self, s: &mut InFlight) {
        while let Some(w) = s.works.front() {
            if !w.is_done() && !self.stream.passed(w.mark) {
                return;
            }
            let w = s.works.pop_front().expect("a front work");
            if w.is_done() {
                continue;
            }
            match self.stream.failure_between(self.start, w.mark) {
                None => w.complete_ran(),
                Some(e) => {
                    let b = Broken {
                        op: w.op.clone(),
                        seq: w.seq,
                        peer: waited_for(&e).or(w.peer),
                        reason: e.to_string(),
                        timed_out: timed_out(&e),
                    };
                    s.works.push_front(w);
                    self.break_group(s, b);
                }
            }
        }
    }

    /// Breaks the group (the first break stays): the operation `b` names fails with its
    /// reason, every other one in flight as not run (callers retire what the stream has
    /// passed first: those ended well).
    pub fn break_group(&self, s: &mut InFlight, b: Broken) {
        if s.broken.is_none() {
            tracing::error!(
                "process group on rank {}: {} #{} failed ({}); failing the {} operation(s) in flight",
                self.comm.rank(),
                b.op,
                b.seq,
                b.reason,
                s.works.len()
            );
            s.broken = Some(b);
            self.changed.notify_all();
        }
        let b = s.broken.as_ref().expect("broken");
        for w in s.works.drain(..) {
            w.complete(Err(b.error_of(&w)));
        }
    }
}

/// Whether an error fails the communicator, and so breaks the group.
fn breaks(e: &Error) -> bool {
    matches!(e, Error::Timeout { .. } | Error::PeerFailed { .. } | Error::Aborted { .. } | Error::Work { .. })
}

fn timed_out(e: &Error) -> bool {
    matches!(e, Error::Timeout { .. } | Error::Work { timed_out: true, .. })
}

/// The rank a failed wait was waiting for, as the communicator's error names it.
fn waited_for(e: &Error) -> Option<usize> {
    match e {
        Error::Timeout { peer, .. } | Error::PeerFailed { peer, .. } => usize::try_from(*peer).ok(),
        _ => None,
    }
}
