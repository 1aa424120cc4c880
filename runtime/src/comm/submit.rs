//! How a call leaves a `Comm`: into the open group (see `group`), onto its stream at once
//! (blocking mode), or to the communicator's progress thread (nonblocking mode, queued in
//! call order behind init). Either way `enqueue` then queues it (`enqueue::queuing`), once
//! the communicator is found usable.

use std::sync::Arc;

use crate::comm::{group, Comm, CommInner};
use crate::enqueue::{precheck, Call};
use crate::error::{Error, Result};
use crate::stream::{Launch, Stream};

/// Calls handed to the progress thread.
pub(crate) struct Calls(Vec<Call>);

// SAFETY: a call's raw pointers point into the memory its `keep` holds alive; they are only
// dereferenced by the kernel it launches.
unsafe impl Send for Calls {}

impl Calls {
    fn into_inner(self) -> Vec<Call> {
        self.0
    }
}

impl CommInner {
    /// Launches one call on `stream` now (blocking mode's path), if the communicator is
    /// usable: `enqueue` takes it from there down to the stream.
    #[inline]
    pub(crate) fn launch(self: &Arc<Self>, call: &mut Call, stream: &Stream) -> Result<()> {
        self.usable(call.coll.name())?;
        self.enq.launch(self, call, stream)
    }

    /// Compiles every call's launch, if the communicator is usable; queues none (see
    /// `enqueue::Rank::enqueue_all`).
    pub(crate) fn prepare_all(self: &Arc<Self>, calls: Vec<Call>, stream: &Stream) -> Result<Vec<Launch>> {
        self.usable(calls.first().map_or("group", |c| c.coll.name()))?;
        self.enq.prepare_all(self, calls, stream)
    }

    /// Stops this rank: kernels end with `Aborted`, bootstrap waits end, and with
    /// `abort_propagates` every peer is told that this rank failed.
    pub(crate) fn abort(&self) {
        self.enq.abort().store(1, std::sync::atomic::Ordering::Release);
        if let Some((bs, flag)) = &self.bootstrap {
            flag.store(true, std::sync::atomic::Ordering::Release);
            bs.abort();
        }
        if self.enq.cfg.abort_propagates {
            self.failure().announce_abort();
        }
    }
}

impl Comm {
    /// Where every call goes once made: `call` is its checked value, or the check's error
    /// (which also fails an open group, so that its end launches nothing).
    pub(crate) fn submit(&self, mut call: Result<Call>, stream: &Stream) -> Result<()> {
        if self.h.progress.is_none() && !group::is_open() {
            // Blocking mode's path borrows the call down to the launch: each move of it is a
            // copy that stalls on the stores that just built it (seen in perf profiles of
            // small calls).
            return match &mut call {
                Ok(c) => self.inner(c.coll.name())?.launch(c, stream),
                Err(_) => call.map(drop),
            };
        }
        let call = group::note(call)?;
        if group::is_open() {
            return group::note(precheck(&call, &self.h.device, stream)).map(|()| group::post(self, call, stream));
        }
        self.defer(vec![call], stream)
    }

    /// Nonblocking mode: checks `calls` now, then queues them on the progress thread
    /// (behind init and the operations before), holding a reservation on `stream` so that
    /// its `synchronize` waits for them. A failure there fails the communicator (the
    /// caller has moved on; `async_error` tells it).
    pub(crate) fn defer(&self, calls: Vec<Call>, stream: &Stream) -> Result<()> {
        let Some(progress) = &self.h.progress else {
            return Err(Error::Internal("defer on a blocking communicator".into()));
        };
        let (rank, name) = (self.h.rank, calls.first().map_or("group", |c| c.coll.name()));
        for c in &calls {
            precheck(c, &self.h.device, stream)?;
        }
        match self.inner(name) {
            Ok(inner) => inner.usable(name)?,
            Err(Error::InProgress(_)) => {}
            Err(e) => return Err(e),
        }
        let (cell, calls, res) = (self.h.cell.clone(), Calls(calls), stream.reserve(name, rank));
        progress.push(Box::new(move || {
            let inner = match cell.inner(name, rank) {
                Ok(inner) => inner,
                Err(e) => return res.fail(e),
            };
            if let Err(e) = inner.usable(name) {
                return res.fail(e);
            }
            let stream = res.stream().clone();
            match inner.prepare_all(calls.into_inner(), &stream).and_then(|l| inner.enq.enqueue_all(l, &stream)) {
                Ok(()) => res.fulfil(),
                Err(e) => {
                    inner.failure().fail(&e);
                    res.fail(e);
                }
            }
        }))
    }
}
