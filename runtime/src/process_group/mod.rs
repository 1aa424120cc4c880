//! [`ProcessGroup`]: an asynchronous layer over a communicator in the style of PyTorch's
//! c10d `ProcessGroupNCCL`. Every call returns a [`Work`] at once; the operations run in
//! order on the group's worker thread (`queue`), on a stream of the group's own; a
//! watchdog (`watchdog`) fails every pending operation once one has run past the group's
//! timeout and aborts the communicator. Subgroups come from [`ProcessGroup::new_group`]
//! (a split of the communicator).
//!
//! Buffers are taken by handle (a `DeviceBuffer` clone shares the memory): read results
//! after the operation's `Work` has completed.

mod queue;
mod watchdog;
mod work;

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
use queue::{Broken, Job, Shared};
pub use work::Work;

/// One rank's handle on a group of ranks (c10d's `ProcessGroup`).
pub struct ProcessGroup {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
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

    /// A group over an existing communicator (the group then owns this handle on it).
    pub fn from_comm(comm: Comm, timeout: Duration) -> Result<ProcessGroup> {
        if timeout.is_zero() {
            return Err(Error::InvalidArgument("a process group's timeout must be more than 0".into()));
        }
        let stream = comm.device().stream()?;
        let rank = comm.rank();
        let shared = Arc::new(Shared::new(comm, timeout));
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name)
                .spawn(f)
                .map_err(|e| Error::System { context: "starting a process group thread".into(), source: e })
        };
        let s = shared.clone();
        let worker = spawn(format!("jitccl-pg{rank}"), Box::new(move || s.work(&stream)))?;
        let s = shared.clone();
        let watchdog = match spawn(format!("jitccl-pg{rank}-watchdog"), Box::new(move || watchdog::watch(&s))) {
            Ok(h) => h,
            Err(e) => {
                // Let the worker exit before failing.
                shared.lock().closing = true;
                let _ = worker.join();
                return Err(e);
            }
        };
        Ok(ProcessGroup { shared, worker: Some(worker), watchdog: Some(watchdog) })
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

    fn submit(&self, op: &'static str, peer: Option<usize>, job: Job) -> Work {
        Work::new(self.shared.submit(op, peer, job))
    }

    /// Reduces `buf` over the group, in place on every rank.
    pub fn all_reduce<T: Element>(&self, buf: &DeviceBuffer<T>, op: Op) -> Work {
        let b = buf.clone();
        self.submit("all_reduce", None, Box::new(move |c, s| c.all_reduce(&b, &b, b.len(), op, s)))
    }

    /// Copies `root`'s `buf` into every rank's `buf`.
    pub fn broadcast<T: Element>(&self, buf: &DeviceBuffer<T>, root: usize) -> Work {
        let b = buf.clone();
        self.submit("broadcast", None, Box::new(move |c, s| c.broadcast(&b, &b, b.len(), root, s)))
    }

    /// Reduces `buf` over the group into `root`'s `buf` (the others' are left as they are).
    pub fn reduce<T: Element>(&self, buf: &DeviceBuffer<T>, op: Op, root: usize) -> Work {
        let b = buf.clone();
        self.submit("reduce", None, Box::new(move |c, s| c.reduce(&b, &b, b.len(), op, root, s)))
    }

    /// Gathers every rank's `input` into `output` (rank r's at `r * input.len()`).
    pub fn all_gather<T: Element>(&self, output: &DeviceBuffer<T>, input: &DeviceBuffer<T>) -> Work {
        let (o, i) = (output.clone(), input.clone());
        self.submit("all_gather", None, Box::new(move |c, s| c.all_gather(&i, &o, i.len(), s)))
    }

    /// Reduces every rank's `input` (`size` blocks of `output.len()`) and leaves block
    /// `rank` of the result in `output`.
    pub fn reduce_scatter<T: Element>(&self, output: &DeviceBuffer<T>, input: &DeviceBuffer<T>, op: Op) -> Work {
        let (o, i) = (output.clone(), input.clone());
        self.submit("reduce_scatter", None, Box::new(move |c, s| c.reduce_scatter(&i, &o, o.len(), op, s)))
    }

    /// Sends block q of `input` to rank q and receives rank q's block for this rank into
    /// block q of `output` (blocks of `input.len() / size`).
    pub fn all_to_all<T: Element>(&self, output: &DeviceBuffer<T>, input: &DeviceBuffer<T>) -> Work {
        let (o, i, n) = (output.clone(), input.clone(), self.size());
        self.submit(
            "all_to_all",
            None,
            Box::new(move |c, s| match i.len() % n {
                0 => c.all_to_all(&i, &o, i.len() / n, s),
                _ => Err(Error::InvalidArgument(format!("all_to_all: {} elements is not {n} equal blocks", i.len()))),
            }),
        )
    }

    /// Sends `buf` to rank `dst` (which must post a matching `recv`).
    pub fn send<T: Element>(&self, buf: &DeviceBuffer<T>, dst: usize) -> Work {
        let b = buf.clone();
        self.submit("send", Some(dst), Box::new(move |c, s| c.send(&b, b.len(), dst, s)))
    }

    /// Receives `buf.len()` elements from rank `src` into `buf`.
    pub fn recv<T: Element>(&self, buf: &DeviceBuffer<T>, src: usize) -> Work {
        let b = buf.clone();
        self.submit("recv", Some(src), Box::new(move |c, s| c.recv(&b, b.len(), src, s)))
    }

    /// Completes once every rank has queued its barrier and everything queued before it
    /// has run (an all_reduce of one element, as c10d's).
    pub fn barrier(&self) -> Work {
        self.submit(
            "barrier",
            None,
            Box::new(|c, s| {
                let b = c.device().alloc::<i32>(1)?;
                c.all_reduce(&b, &b, 1, Op::Sum, s)
            }),
        )
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
    /// running kernel stops, and every later call fails at once.
    pub fn abort(&self) {
        let mut q = self.shared.lock();
        self.shared.comm.abort();
        let b = q.running.as_ref().map(|(w, _)| (w.op, w.seq)).unwrap_or(("abort", 0));
        let broken = Broken { op: b.0, seq: b.1, peer: None, reason: "the process group was aborted".into() };
        self.shared.break_group(&mut q, broken);
    }
}

impl Drop for ProcessGroup {
    /// Lets the queued operations run (each bounded by the timeout and the watchdog), then
    /// stops the threads: dropping a group never hangs and never leaves an operation
    /// without an outcome.
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.changed.notify_all();
        for t in [self.worker.take(), self.watchdog.take()].into_iter().flatten() {
            let _ = t.join();
        }
    }
}
