//! Communicators: a rank's view of a group, and the collectives it runs. Each public call
//! here is thin: `enqueue` checks it (an error changes nothing), then tunes, compiles
//! (once) and queues it on the caller's stream. The rank's state lives in `inner` (what
//! runs its launches, with its failure state, is the stream's: `stream::Executor`), its
//! creation in `init`; new communicators from it come from `split`, `shrink` and `grow`.
//!
//! Where each `Comm` method lives (a test keeps this index true):
//! - `mod.rs`: rank, nranks, name, device, is_blocking, bind_current_thread, all_reduce,
//!   broadcast, reduce, all_gather, reduce_scatter, send, recv, sendrecv, estimate, wired
//! - `alltoall.rs`: all_to_all, all_to_allv, gather, scatter
//! - `handle.rs`: from_inner, start_init, async_error, wait_ready, abort, is_aborted, inner,
//!   finalize, is_finalized
//! - `init/entry.rs`: init_rank, init_rank_scalable, init_from_store, init_from_env
//! - `init/threads.rs`: init_all, init_all_on
//! - `split/mod.rs`: split, split_with, dup, share_rendezvous
//! - `shrink.rs`: shrink, revoke
//! - `grow.rs`: grow_id, grow
//! - `registration.rs`: alloc_symmetric, register
//! - `submit.rs`: submit, defer

mod alltoall;
mod group;
mod grow;
mod handle;
mod init;
mod inner;
mod peer_arenas;
mod progress;
mod registration;
mod shrink;
mod split;
mod submit;
mod wired;

use std::sync::Arc;

use jitccl_codegen::{Collective, DataType, Wire};

use crate::device::{Device, DeviceBuffer};
use crate::element::Element;
use crate::enqueue::{Call, Group};
use crate::error::{Error, Result};
use crate::op::Op;
use crate::stream::Stream;
pub use group::{group, group_depth, group_discard, group_end, group_end_launched, group_simulate_end, group_start};
use handle::Handle;
pub(crate) use inner::CommInner;
pub use progress::CommState;
pub use registration::Registration;
pub use split::Split;
pub use wired::Wired;

/// One rank of a communicator: a handle (clones share the rank). In nonblocking mode
/// (`Config::blocking = false`) it may exist before its init is done: see
/// [`Comm::async_error`].
#[derive(Clone)]
pub struct Comm {
    h: Arc<Handle>,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            Some(name) => write!(f, "Comm '{name}' (rank {} of {})", self.rank(), self.nranks()),
            None => write!(f, "Comm(rank {} of {})", self.rank(), self.nranks()),
        }
    }
}

impl Comm {
    pub fn rank(&self) -> usize {
        self.h.rank
    }
    pub fn nranks(&self) -> usize {
        self.h.nranks
    }
    /// The name given by `Config.comm_name` or `JITCCL_COMM_NAME`, if any.
    pub fn name(&self) -> Option<&str> {
        self.h.name.as_deref()
    }
    pub fn device(&self) -> &Device {
        &self.h.device
    }

    /// Whether calls run in blocking mode (`Config::blocking`), or on the progress thread.
    pub fn is_blocking(&self) -> bool {
        self.h.progress.is_none()
    }

    /// Binds the calling thread to the CPUs of this rank's kernel threads, as `mpirun
    /// --bind-to` binds a rank, and returns them; `None` (nothing changed) where the rank
    /// has none: binding is off (the process was bound by its launcher, or
    /// `JITCCL_IGNORE_CPU_AFFINITY=1`). A thread that drives one rank and synchronizes its
    /// calls then always runs them itself (see `Stream::synchronize`), instead of handing
    /// them to the stream's thread whenever the scheduler put it on another CPU.
    pub fn bind_current_thread(&self) -> Result<Option<Vec<usize>>> {
        let Some(set) = self.inner("bind_current_thread")?.enq.cpus.clone() else {
            return Ok(None);
        };
        crate::affinity::bind_thread(&set).map_err(|source| Error::System {
            context: format!("binding the calling thread of rank {} to {set:?}", self.h.rank),
            source,
        })?;
        Ok(Some(set.cpus().to_vec()))
    }

    /// `recv[i] = op over ranks of send[i]` for `i < count`. In place when `send` and
    /// `recv` are the same buffer.
    pub fn all_reduce<T: Element>(
        &self, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize, op: Op, stream: &Stream,
    ) -> Result<()> {
        self.collective(Collective::AllReduce, Some(op), send, recv, count, 0, None, stream)
    }

    /// Copies `count` elements of `send` on `root` into `recv` on every rank (`send` is
    /// not read elsewhere).
    pub fn broadcast<T: Element>(
        &self, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize, root: usize, stream: &Stream,
    ) -> Result<()> {
        self.collective(Collective::Broadcast, None, send, recv, count, root, None, stream)
    }

    /// Reduces `count` elements of every rank's `send` into `recv` on `root` (`recv` is
    /// not touched elsewhere).
    pub fn reduce<T: Element>(
        &self, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize, op: Op, root: usize, stream: &Stream,
    ) -> Result<()> {
        self.collective(Collective::Reduce, Some(op), send, recv, count, root, None, stream)
    }

    /// Gathers every rank's `count` elements of `send` into `recv` (rank r's at
    /// `r * count`). In place when `send` is `recv`'s slice at `rank * count`.
    pub fn all_gather<T: Element>(
        &self, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize, stream: &Stream,
    ) -> Result<()> {
        self.collective(Collective::AllGather, None, send, recv, count, 0, None, stream)
    }

    /// Reduces every rank's `send` (nranks blocks of `count`) and leaves block `rank` of the
    /// result in `recv`. In place when `recv` is `send`'s slice at `rank * count`.
    pub fn reduce_scatter<T: Element>(
        &self, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize, op: Op, stream: &Stream,
    ) -> Result<()> {
        self.collective(Collective::ReduceScatter, Some(op), send, recv, count, 0, None, stream)
    }

    /// Sends `count` elements of `buf` to `peer` (which must post a matching receive).
    pub fn send<T: Element>(&self, buf: &DeviceBuffer<T>, count: usize, peer: usize, stream: &Stream) -> Result<()> {
        self.submit(Call::checked_p2p(&self.group(), Some((buf, count, peer)), None), stream)
    }

    /// Receives `count` elements from `peer` into `buf`.
    pub fn recv<T: Element>(&self, buf: &DeviceBuffer<T>, count: usize, peer: usize, stream: &Stream) -> Result<()> {
        self.submit(Call::checked_p2p(&self.group(), None, Some((buf, count, peer))), stream)
    }

    /// Sends `send_count` elements of `send` to `to` while receiving `recv_count` from
    /// `from` into `recv`, in one launch (so that exchanges in a cycle cannot deadlock).
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv<T: Element>(
        &self, send: &DeviceBuffer<T>, send_count: usize, to: usize, recv: &DeviceBuffer<T>, recv_count: usize,
        from: usize, stream: &Stream,
    ) -> Result<()> {
        self.submit(
            Call::checked_p2p(&self.group(), Some((send, send_count, to)), Some((recv, recv_count, from))),
            stream,
        )
    }

    /// The cost model's estimate, in microseconds, of `coll` over `count` elements of
    /// `dtype` on this communicator (NCCL's ncclGroupSimulateEnd sums these): the time of
    /// the algorithm, protocol and channels it would choose. 0 for point to point.
    pub fn estimate(&self, coll: Collective, dtype: DataType, count: usize) -> Result<f64> {
        let inner = self.inner("estimate")?;
        // NCCL's nBytes: a rank's buffer, the whole one for AllGather / ReduceScatter.
        let per_rank = match coll {
            Collective::AllGather
            | Collective::ReduceScatter
            | Collective::AllToAll
            | Collective::Gather
            | Collective::Scatter => count.saturating_mul(self.nranks()),
            _ => count,
        };
        let bytes = per_rank.saturating_mul(dtype.size());
        if coll == Collective::SendRecv {
            return Ok(0.0);
        }
        inner.enq.tuner.estimate_us(coll, bytes, dtype.size())
    }

    /// This communicator's collectives with their elements carried in `wire` (see
    /// [`Wire`] for the formats and their error bounds): `comm.wired(Wire::Bf16).all_reduce(..)`.
    /// `Wire::Exact` sends them exactly whatever the communicator's default
    /// (`Config::wire`). A call the wire cannot carry (not a float type wider than its codes,
    /// an op other than sum or avg) fails with `InvalidArgument`, queuing nothing.
    pub fn wired(&self, wire: Wire) -> Wired<'_> {
        Wired { comm: self, wire }
    }

    /// A collective of `count` elements (a block per rank where it moves blocks), in `wire`
    /// if given, else the communicator's default where it fits.
    #[allow(clippy::too_many_arguments)]
    fn collective<T: Element>(
        &self, coll: Collective, op: Option<Op>, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize,
        root: usize, wire: Option<Wire>, stream: &Stream,
    ) -> Result<()> {
        let call = Call::checked(&self.group(), coll, op, send, recv, count, root);
        self.submit(
            call.and_then(|c| match wire {
                Some(w) => c.wired(w),
                None => Ok(c),
            }),
            stream,
        )
    }

    fn group(&self) -> Group {
        Group { rank: self.h.rank, nranks: self.h.nranks }
    }
}
