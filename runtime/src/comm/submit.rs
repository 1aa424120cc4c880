//! How a call leaves a `Comm`: into the open group (see `group`), onto its stream at once
//! (blocking mode), or to the communicator's progress thread (nonblocking mode, queued in
//! call order behind init). Either way every launch of a batch is compiled before any is
//! queued, so an error leaves nothing half-launched.

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
    /// Launches one call on `stream` now (blocking mode's path: no allocation beyond the
    /// launch itself). The call is borrowed, not moved: see `Comm::submit`.
    pub(crate) fn launch(self: &Arc<Self>, call: &mut Call, stream: &Stream) -> Result<()> {
        let name = call.coll.name();
        self.usable(name)?;
        if self.enq.in_rounds(call)? {
            let launches = self.prepare_all(std::mem::take(&mut call.rounds), stream)?;
            return self.enqueue_all(launches, stream);
        }
        // Counted for finalize from here until the launch has run; a call that queues
        // nothing (an error, or nothing to move) is uncounted now.
        self.life.queue(name, self.enq.group.rank)?;
        match self.enq.prepare(call, stream) {
            // A CUDA stream's launch is queued on the GPU now, and its error returned.
            Ok(Some(mut ready)) if stream.launches_now() => {
                let mut launch = None;
                self.enq.launch_into(&mut launch, self.clone(), call, &mut ready);
                launch.map_or(Ok(()), |l| stream.launch_now(l))
            }
            Ok(Some(mut ready)) => {
                stream.enqueue_with(|slot| self.enq.launch_into(slot, self.clone(), call, &mut ready));
                Ok(())
            }
            res => {
                self.life.unqueue();
                res.map(|_| ())
            }
        }
    }

    /// Compiles every call's launch; queues none.
    pub(crate) fn prepare_all(self: &Arc<Self>, calls: Vec<Call>, stream: &Stream) -> Result<Vec<Launch>> {
        let name = calls.first().map_or("group", |c| c.coll.name());
        self.usable(name)?;
        let mut out = Vec::with_capacity(calls.len());
        for call in calls {
            self.prepare_into(call, stream, &mut out)?;
        }
        Ok(out)
    }

    /// `call`'s launches (its rounds' where it runs in rounds) onto `out`.
    fn prepare_into(self: &Arc<Self>, mut call: Call, stream: &Stream, out: &mut Vec<Launch>) -> Result<()> {
        if self.enq.in_rounds(&call)? {
            return std::mem::take(&mut call.rounds).into_iter().try_for_each(|c| self.prepare_into(c, stream, out));
        }
        if let Some(mut ready) = self.enq.prepare(&call, stream)? {
            let mut launch = None;
            self.enq.launch_into(&mut launch, self.clone(), &mut call, &mut ready);
            out.extend(launch);
        }
        Ok(())
    }

    /// Queues launches made by [`CommInner::prepare_all`], in order.
    pub(crate) fn enqueue_all(&self, launches: Vec<Launch>, stream: &Stream) -> Result<()> {
        for (i, l) in launches.iter().enumerate() {
            if let Err(e) = self.life.queue(l.call.name, self.enq.group.rank) {
                (0..i).for_each(|_| self.life.unqueue());
                return Err(e);
            }
        }
        if !stream.launches_now() {
            launches.into_iter().for_each(|l| stream.enqueue(l));
            return Ok(());
        }
        // Queued on the GPU now: a launch that could not be queued is the error, and the
        // ones behind it are not queued (their count is undone).
        let mut launches = launches.into_iter();
        while let Some(l) = launches.next() {
            if let Err(e) = stream.launch_now(l) {
                launches.for_each(|_| self.life.unqueue());
                return Err(e);
            }
        }
        Ok(())
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
            self.failure.announce_abort();
        }
    }
}

impl Comm {
    /// Where every call goes once made: `call` is its checked value, or the check's error
    /// (which also fails an open group, so that its end launches nothing).
    pub(crate) fn submit(&self, mut call: Result<Call>, stream: &Stream) -> Result<()> {
        if self.h.progress.is_none() && !group::is_open() {
            // Blocking mode's path borrows the call down to the launch: each move of it is a
            // copy that stalls on the stores that just built it (a tenth of a small call's
            // time at 2 ranks, measured with perf).
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
            match inner.prepare_all(calls.into_inner(), &stream).and_then(|l| inner.enqueue_all(l, &stream)) {
                Ok(()) => res.fulfil(),
                Err(e) => {
                    inner.failure.fail(&e);
                    res.fail(e);
                }
            }
        }))
    }
}
