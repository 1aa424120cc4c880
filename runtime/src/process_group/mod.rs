//! [`ProcessGroup`]: an asynchronous layer over a communicator in the style of PyTorch's
//! c10d `ProcessGroupNCCL`. Every call queues its operation on the calling thread, on the
//! group's stream, and returns a [`Work`] at once (no thread hand-off: the stream runs it,
//! or a long enough `Work::wait` runs it on the caller's thread); the operations in flight
//! are kept in order (`inflight`) and retired as the stream passes them; a watchdog
//! (`watchdog`) that only watches fails every pending operation once one has run past the
//! group's timeout and aborts the communicator. Any sequence of calls on the group's
//! communicator and stream can be one operation ([`ProcessGroup::submit`]): what the C
//! API's process group (`jitccl.h`) and through it the PyTorch backend run on.
//! Subgroups come from [`ProcessGroup::new_group`] (a split of the communicator).
//!
//! Buffers are taken by handle (a `DeviceBuffer` clone shares the memory): read results
//! after the operation's `Work` has completed.

mod inflight;
mod operation;
#[cfg(test)]
mod tests;
mod watchdog;
mod work;

use std::borrow::Cow;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::comm::{Comm, Split};
use crate::config::Config;
use crate::device::DeviceBuffer;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::op::Op;
use crate::store::Store;
use crate::stream::Stream;
use inflight::{Broken, Shared};
pub use work::Work;

/// One rank's handle on a group of ranks (c10d's `ProcessGroup`).
pub struct ProcessGroup {
    shared: Arc<Shared>,
    watchdog: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProcessGroup(rank {} of {})", self.rank(), self.size())
    }
}

impl ProcessGroup {
    /// Joins a group of `size` ranks through `store` (as c10d's `init_process_group`:
    /// rank 0 creates the communicator's unique id and publishes it there). `timeout` bounds
    /// every operation: it is also the communicator's no-progress timeout.
    pub fn new(store: &dyn Store, rank: usize, size: usize, timeout: Duration) -> Result<ProcessGroup> {
        Self::with_config(store, rank, size, timeout, &Config::default())
    }

    /// As [`new`](Self::new) with a communicator configuration (its `timeout`, if unset,
    /// becomes `timeout`).
    pub fn with_config(
        store: &dyn Store, rank: usize, size: usize, timeout: Duration, config: &Config,
    ) -> Result<ProcessGroup> {
        let config = Config { timeout: config.timeout.or(Some(timeout)), ..config.clone() };
        Self::from_comm(Comm::init_from_store(store, size, rank, &config)?, timeout)
    }

    /// A group over an existing communicator (the group then owns this handle on it), on a
    /// stream of its own.
    pub fn from_comm(comm: Comm, timeout: Duration) -> Result<ProcessGroup> {
        let stream = comm.device().stream()?;
        Self::on_stream(comm, stream, timeout)
    }

    /// A group over `comm` whose operations go onto `stream` (a binding's own stream, where
    /// its calls on `comm` are queued: the C API's). The communicator must be a blocking
    /// one: a nonblocking one's calls are queued later, by its progress thread.
    pub fn on_stream(comm: Comm, stream: Stream, timeout: Duration) -> Result<ProcessGroup> {
        if timeout.is_zero() {
            return Err(Error::InvalidArgument("a process group's timeout must be more than 0".into()));
        }
        if !comm.is_blocking() {
            return Err(Error::InvalidUsage(
                "a process group needs a blocking communicator (a nonblocking one queues its calls later, on its \
                 progress thread, where the group cannot follow them)"
                    .into(),
            ));
        }
        let rank = comm.rank();
        let shared = Arc::new(Shared::new(comm, stream, timeout));
        let s = shared.clone();
        let watchdog = std::thread::Builder::new()
            .name(format!("jitccl-pg{rank}-watchdog"))
            .spawn(move || watchdog::watch(&s))
            .map_err(|e| Error::System { context: "starting a process group's watchdog".into(), source: e })?;
        Ok(ProcessGroup { shared, watchdog: Some(watchdog) })
    }

    pub fn rank(&self) -> usize {
        self.shared.comm.rank()
    }

    pub fn size(&self) -> usize {
        self.shared.comm.nranks()
    }

    pub fn timeout(&self) -> Duration {
        self.shared.timeout
    }

    /// The communicator the group runs on.
    pub fn comm(&self) -> &Comm {
        &self.shared.comm
    }

    /// Queues one operation named `op` (`peer`: the rank it exchanges with, if one): runs
    /// `queue` now, on this thread, which makes its calls on the group's communicator and
    /// stream (queued there, not waited for), and returns its [`Work`]. An error of
    /// `queue` fails the work (a caller's mistake, as a bad count, that alone, once the
    /// launches `queue` made before the error have run; an error that fails the
    /// communicator breaks the group); a broken group fails it without running `queue`.
    /// The collectives below are such operations.
    pub fn submit(
        &self, op: impl Into<Cow<'static, str>>, peer: Option<usize>, queue: impl FnOnce(&Comm, &Stream) -> Result<()>,
    ) -> Work {
        Work::new(self.shared.submit(op.into(), peer, queue), self.shared.clone())
    }

    /// Reduces `buf` over the group, in place on every rank.
    pub fn all_reduce<T: Element>(&self, buf: &DeviceBuffer<T>, op: Op) -> Work {
        let b = buf.clone();
        self.submit("all_reduce", None, move |c, s| c.all_reduce(&b, &b, b.len(), op, s))
    }

    /// Copies `root`'s `buf` into every rank's `buf`.
    pub fn broadcast<T: Element>(&self, buf: &DeviceBuffer<T>, root: usize) -> Work {
        let b = buf.clone();
        self.submit("broadcast", None, move |c, s| c.broadcast(&b, &b, b.len(), root, s))
    }

    /// Reduces `buf` over the group into `root`'s `buf` (the others' are left as they are).
    pub fn reduce<T: Element>(&self, buf: &DeviceBuffer<T>, op: Op, root: usize) -> Work {
        let b = buf.clone();
        self.submit("reduce", None, move |c, s| c.reduce(&b, &b, b.len(), op, root, s))
    }

    /// Gathers every rank's `input` into `output` (rank r's at `r * input.len()`).
    pub fn all_gather<T: Element>(&self, output: &DeviceBuffer<T>, input: &DeviceBuffer<T>) -> Work {
        let (o, i) = (output.clone(), input.clone());
        self.submit("all_gather", None, move |c, s| c.all_gather(&i, &o, i.len(), s))
    }

    /// Reduces every rank's `input` (`size` blocks of `output.len()`) and leaves block
    /// `rank` of the result in `output`.
    pub fn reduce_scatter<T: Element>(&self, output: &DeviceBuffer<T>, input: &DeviceBuffer<T>, op: Op) -> Work {
        let (o, i) = (output.clone(), input.clone());
        self.submit("reduce_scatter", None, move |c, s| c.reduce_scatter(&i, &o, o.len(), op, s))
    }

    /// Sends block q of `input` to rank q and receives rank q's block for this rank into
    /// block q of `output` (blocks of `input.len() / size`).
    pub fn all_to_all<T: Element>(&self, output: &DeviceBuffer<T>, input: &DeviceBuffer<T>) -> Work {
        let (o, i, n) = (output.clone(), input.clone(), self.size());
        self.submit("all_to_all", None, move |c, s| match i.len() % n {
            0 => c.all_to_all(&i, &o, i.len() / n, s),
            _ => Err(Error::InvalidArgument(format!("all_to_all: {} elements is not {n} equal blocks", i.len()))),
        })
    }

    /// Sends `buf` to rank `dst` (which must post a matching `recv`).
    pub fn send<T: Element>(&self, buf: &DeviceBuffer<T>, dst: usize) -> Work {
        let b = buf.clone();
        self.submit("send", Some(dst), move |c, s| c.send(&b, b.len(), dst, s))
    }

    /// Receives `buf.len()` elements from rank `src` into `buf`.
    pub fn recv<T: Element>(&self, buf: &DeviceBuffer<T>, src: usize) -> Work {
        let b = buf.clone();
        self.submit("recv", Some(src), move |c, s| c.recv(&b, b.len(), src, s))
    }

    /// Completes once every rank has queued its barrier and everything queued before it
    /// has run (an all_reduce of one element, as c10d's).
    pub fn barrier(&self) -> Work {
        self.submit("barrier", None, |c, s| {
            let b = c.device().alloc::<i32>(1)?;
            c.all_reduce(&b, &b, 1, Op::Sum, s)
        })
    }

    /// A subgroup of `ranks` (ranks of this group, any order: the subgroup ranks them in
    /// increasing order), with this group's timeout. Every rank of this group calls it, in
    /// the same order as its other `new_group`s (it splits the communicator); a rank not in
    /// `ranks` gets `None` (c10d's `GroupMember.NON_GROUP_MEMBER`).
    pub fn new_group(&self, ranks: &[usize]) -> Result<Option<ProcessGroup>> {
        let mut sorted = ranks.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let n = self.size();
        if sorted.is_empty() || sorted.len() != ranks.len() || sorted.last().is_some_and(|&r| r >= n) {
            return Err(Error::InvalidArgument(format!(
                "new_group: ranks {ranks:?} must be distinct ranks of this group (0..{n}), at least one"
            )));
        }
        let color = match sorted.binary_search(&self.rank()) {
            Ok(i) => (Split::Color(0), i as i64),
            Err(_) => (Split::NoColor, 0),
        };
        match self.shared.comm.split(color.0, color.1)? {
            Some(child) => Self::from_comm(child, self.timeout()).map(Some),
            None => Ok(None),
        }
    }

    /// Fails every pending operation and aborts the communicator (c10d's `abort`): the
    /// running kernel stops, and every later call fails at once. Operations the stream has
    /// already run end well.
    pub fn abort(&self) {
        let mut s = self.shared.lock();
        self.shared.retire(&mut s);
        self.shared.comm.abort();
        let (op, seq) = s.works.front().map_or((Cow::Borrowed("abort"), 0), |w| (w.op.clone(), w.seq));
        let broken = Broken { op, seq, peer: None, reason: "the process group was aborted".into(), timed_out: false };
        self.shared.break_group(&mut s, broken);
    }
}

impl Drop for ProcessGroup {
    /// Lets the operations in flight end (each bounded by the timeout and the watchdog),
    /// then stops the watchdog: dropping a group never hangs and never leaves an operation
    /// without an outcome.
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.changed.notify_all();
        if let Some(t) = self.watchdog.take() {
            let _ = t.join();
        }
    }
}
