//! The group's operations in flight, in the order they were queued, and what the group's
//! threads share. An operation is queued on the calling thread (its launches go onto the
//! group's stream, as c10d's ProcessGroupNCCL launches on the caller's thread) and is
//! retired, in order, once the stream has passed its mark: by whoever waits for it or asks
//! about it, or by the watchdog. A failed launch fails the operation it belongs to and
//! breaks the group, as in c10d: every operation in flight and every later one then fails,
//! naming the operation that broke it.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::process_group::operation::WorkState;
use crate::stream::Stream;

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
        Shared { comm, stream, timeout, state: Mutex::new(state), queuing: Mutex::new(()), changed: Condvar::new() }
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
        let seq = {
            let mut s = self.lock();
            let seq = s.next_seq;
            s.next_seq += 1;
            if let Some(b) = &s.broken {
                let w = WorkState::new(op, seq, self.comm.rank(), peer, self.stream.mark());
                w.complete(Err(b.error_of(&w)));
                return w;
            }
            seq
        };
        // A panic must not leave a work without an outcome.
        let queued = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| queue(&self.comm, &self.stream)))
            .unwrap_or_else(|_| Err(Error::Internal(format!("{op} #{seq}: queuing the operation panicked"))));
        let w = WorkState::new(op, seq, self.comm.rank(), peer, self.stream.mark());
        let mut s = self.lock();
        match queued {
            // The watchdog broke the group meanwhile: this one fails as not run.
            Ok(()) if s.broken.is_some() => w.complete(Err(s.broken.as_ref().map(|b| b.error_of(&w)).expect("broken"))),
            Ok(()) => s.works.push_back(w.clone()),
            Err(e) if breaks(&e) || self.comm.async_error().is_err() => {
                let peer = waited_for(&e).or(peer);
                let timed_out = timed_out(&e);
                s.works.push_back(w.clone());
                self.break_group(&mut s, Broken { op: w.op.clone(), seq, peer, reason: e.to_string(), timed_out });
            }
            // A caller's mistake (bad count, root, buffer): nothing was queued; it fails
            // this work only.
            Err(e) => w.complete(Err(e)),
        }
        // The watchdog is not woken: it finds the operation at its next look (a wake-up per
        // call would cost the caller a system call and a thread competing for its core).
        w
    }

    /// Retires, in order, the operations the stream has passed: each succeeds, or the
    /// first whose launches failed breaks the group.
    pub fn retire(&self, s: &mut InFlight) {
        while let Some(w) = s.works.front() {
            if !w.is_done() && !self.stream.passed(w.mark) {
                return;
            }
            let w = s.works.pop_front().expect("a front work");
            if w.is_done() {
                continue;
            }
            match self.stream.failure_before(w.mark) {
                None => w.complete(Ok(())),
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
    /// reason, every other one in flight as not run. Returns whether this call broke it.
    pub fn break_group(&self, s: &mut InFlight, b: Broken) -> bool {
        if s.broken.is_some() {
            return false;
        }
        tracing::error!(
            "process group on rank {}: {} #{} failed ({}); failing the {} operation(s) in flight",
            self.comm.rank(),
            b.op,
            b.seq,
            b.reason,
            s.works.len()
        );
        for w in s.works.drain(..) {
            w.complete(Err(b.error_of(&w)));
        }
        s.broken = Some(b);
        self.changed.notify_all();
        true
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
