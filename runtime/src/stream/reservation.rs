//! Reservations: launches a nonblocking communicator promises to a stream when the call is
//! made and queues later, from its progress thread. `synchronize` waits for them too, so it
//! covers every call made before it, queued yet or not.

use std::sync::atomic::Ordering::SeqCst;

use super::Stream;
use crate::error::{Error, Result};

impl Stream {
    /// A launch promised now and queued later (by a nonblocking communicator's progress
    /// thread): until the reservation is fulfilled or dropped, `synchronize` waits for it.
    /// Dropped unfulfilled, it records `Aborted` for `op` of `rank` on the stream.
    pub(crate) fn reserve(&self, op: &'static str, rank: usize) -> Reservation {
        self.shared().reserved.fetch_add(1, SeqCst);
        Reservation { stream: self.clone(), op, rank, outcome: None }
    }
}

/// A launch promised to a stream (see [`Stream::reserve`]).
pub(crate) struct Reservation {
    stream: Stream,
    op: &'static str,
    rank: usize,
    /// Set when the promise is kept (`Ok`) or broken with an error of its own.
    outcome: Option<Result<()>>,
}

impl Reservation {
    pub(crate) fn stream(&self) -> &Stream {
        &self.stream
    }

    /// The launches were queued (or there was nothing to launch).
    pub(crate) fn fulfil(mut self) {
        self.outcome = Some(Ok(()));
    }

    /// The launch failed: `synchronize` on the stream returns `e`.
    pub(crate) fn fail(mut self, e: Error) {
        self.outcome = Some(Err(e));
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let sh = self.stream.shared();
        match self.outcome.take() {
            Some(Ok(())) => {}
            Some(Err(e)) => sh.record_error(e),
            None => sh.record_error(Error::Aborted { op: self.op.to_string(), rank: self.rank }),
        }
        // After the launch was pushed (fulfil comes after the push), so a synchronize that
        // sees no reservation also sees the launch.
        sh.reserved.fetch_sub(1, SeqCst);
        let _g = sh.sleep.lock().unwrap_or_else(|e| e.into_inner());
        sh.done.notify_all();
    }
}
