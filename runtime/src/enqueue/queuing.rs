//! A checked call's launches onto its stream: counted by the rank's executor (finalize
//! waits for them), tuned and compiled (`Rank::prepare`), written (`Rank::launch_into`) and
//! queued. Every launch of a batch is compiled before any is queued, so an error leaves
//! nothing half-launched. `comm` is the communicator, which every launch keeps alive (only
//! held: the stream runs the launch through the executor).

use std::sync::Arc;

use super::{Call, Form, Rank};
use crate::error::Result;
use crate::stream::{Launch, Stream};

impl Rank {
    /// Launches one call on `stream` now (blocking mode's path: no allocation beyond the
    /// launch itself). The call is borrowed, not moved: see `Comm::submit`.
    pub(crate) fn launch<C: Send + Sync + 'static>(
        &self, comm: &Arc<C>, call: &mut Call, stream: &Stream,
    ) -> Result<()> {
        let form = self.form(call)?;
        if let Form::Rounds = form {
            let launches = self.prepare_all(comm, call.take_rounds(self.group), stream)?;
            return self.enqueue_all(launches, stream);
        }
        // Counted for finalize from here until the launch has run; a call that queues
        // nothing (an error, or nothing to move) is uncounted now.
        self.exec.queue(call.coll.name())?;
        match self.prepare(call, form, stream) {
            // A CUDA stream's launch is queued on the GPU now, and its error returned.
            Ok(Some(mut ready)) if stream.launches_now() => {
                let mut launch = None;
                self.launch_into(&mut launch, comm.clone(), call, &mut ready);
                launch.map_or(Ok(()), |l| stream.launch_now(l))
            }
            Ok(Some(mut ready)) => {
                stream.enqueue_with(|slot| self.launch_into(slot, comm.clone(), call, &mut ready));
                Ok(())
            }
            res => {
                self.exec.unqueue();
                res.map(|_| ())
            }
        }
    }

    /// Compiles every call's launch; queues none.
    pub(crate) fn prepare_all<C: Send + Sync + 'static>(
        &self, comm: &Arc<C>, calls: Vec<Call>, stream: &Stream,
    ) -> Result<Vec<Launch>> {
        let mut out = Vec::with_capacity(calls.len());
        for call in calls {
            self.prepare_into(comm, call, stream, &mut out)?;
        }
        Ok(out)
    }

    /// `call`'s launches (its rounds' where it runs in rounds) onto `out`.
    fn prepare_into<C: Send + Sync + 'static>(
        &self, comm: &Arc<C>, mut call: Call, stream: &Stream, out: &mut Vec<Launch>,
    ) -> Result<()> {
        let form = self.form(&call)?;
        if let Form::Rounds = form {
            let rounds = call.take_rounds(self.group);
            return rounds.into_iter().try_for_each(|c| self.prepare_into(comm, c, stream, out));
        }
        if let Some(mut ready) = self.prepare(&call, form, stream)? {
            let mut launch = None;
            self.launch_into(&mut launch, comm.clone(), &mut call, &mut ready);
            out.extend(launch);
        }
        Ok(())
    }

    /// Queues launches made by [`Rank::prepare_all`], in order.
    pub(crate) fn enqueue_all(&self, launches: Vec<Launch>, stream: &Stream) -> Result<()> {
        for (i, l) in launches.iter().enumerate() {
            if let Err(e) = self.exec.queue(l.call.name) {
                (0..i).for_each(|_| self.exec.unqueue());
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
                launches.for_each(|_| self.exec.unqueue());
                return Err(e);
            }
        }
        Ok(())
    }
}
