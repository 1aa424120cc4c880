//! What perf can measure: every collective, each with nccl-tests' sizes, bus bandwidth
//! factor, buffers, call and reference result.

use std::str::FromStr;

use jitccl::reference::{input, inputs, reduced, RefElement};
use jitccl::{Collective, Comm, DeviceBuffer, Op, Stream, Wire};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerfColl {
    AllReduce,
    Broadcast,
    Reduce,
    AllGather,
    ReduceScatter,
    SendRecv,
    AllToAll,
    /// AlltoAll's even blocks through the AlltoAllv call (counts and offsets per peer).
    AllToAllv,
    Gather,
    Scatter,
}

impl FromStr for PerfColl {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if matches!(s, "all_to_allv" | "alltoallv") {
            return Ok(PerfColl::AllToAllv);
        }
        match Collective::from_str(s) {
            Ok(Collective::AllReduce) => Ok(PerfColl::AllReduce),
            Ok(Collective::Broadcast) => Ok(PerfColl::Broadcast),
            Ok(Collective::Reduce) => Ok(PerfColl::Reduce),
            Ok(Collective::AllGather) => Ok(PerfColl::AllGather),
            Ok(Collective::ReduceScatter) => Ok(PerfColl::ReduceScatter),
            Ok(Collective::SendRecv) => Ok(PerfColl::SendRecv),
            Ok(Collective::AllToAll) => Ok(PerfColl::AllToAll),
            Ok(Collective::Gather) => Ok(PerfColl::Gather),
            Ok(Collective::Scatter) => Ok(PerfColl::Scatter),
            Err(_) => Err(format!(
                "unknown collective '{s}' (expected one of: all_reduce, broadcast, reduce, all_gather, reduce_scatter, sendrecv, all_to_all, all_to_allv, gather, scatter)"
            )),
        }
    }
}

impl std::fmt::Display for PerfColl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PerfColl::AllReduce => "all_reduce",
            PerfColl::Broadcast => "broadcast",
            PerfColl::Reduce => "reduce",
            PerfColl::AllGather => "all_gather",
            PerfColl::ReduceScatter => "reduce_scatter",
            PerfColl::SendRecv => "sendrecv",
            PerfColl::AllToAll => "all_to_all",
            PerfColl::AllToAllv => "all_to_allv",
            PerfColl::Gather => "gather",
            PerfColl::Scatter => "scatter",
        })
    }
}

use PerfColl::*;

impl PerfColl {
    pub fn reduces(self) -> bool {
        matches!(self, AllReduce | Reduce | ReduceScatter)
    }

    pub fn rooted(self) -> bool {
        matches!(self, Broadcast | Reduce | Gather | Scatter)
    }

    /// Whether the size column counts all n per-rank blocks (nccl-tests' byte counts).
    pub fn blocks(self) -> bool {
        matches!(self, AllGather | ReduceScatter | AllToAll | AllToAllv | Gather | Scatter)
    }

    /// Whether a call of it may carry a wire format (`Comm::wired`).
    pub fn has_wire_path(self) -> bool {
        matches!(self, AllReduce | Broadcast | Reduce | AllGather | ReduceScatter | SendRecv)
    }

    /// Whether every rank ends with the same values (which a wire must give bit for bit).
    pub fn same_everywhere(self) -> bool {
        matches!(self, AllReduce | Broadcast | AllGather)
    }

    /// Whether an in-place form exists: not for send/recv, nor AlltoAll(v) (NCCL has none;
    /// nccl-tests reports no errors for it).
    pub fn in_place(self) -> bool {
        !matches!(self, SendRecv | AllToAll | AllToAllv)
    }

    /// (elements per rank or block, bytes in the size column) for a requested size.
    pub fn shape(self, bytes: usize, esize: usize, n: usize) -> (usize, usize) {
        if self.blocks() {
            let per = bytes / esize / n;
            (per, per * esize * n)
        } else {
            (bytes / esize, bytes / esize * esize)
        }
    }

    /// busbw / algbw, as nccl-tests' PERFORMANCE.md and its *GetBw functions define it.
    pub fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            AllReduce => 2.0 * (n - 1.0) / n,
            AllGather | ReduceScatter | AllToAll | AllToAllv | Gather | Scatter => (n - 1.0) / n,
            Broadcast | Reduce | SendRecv => 1.0,
        }
    }

    /// The (send, recv) views one rank passes, in nccl-tests' placement.
    pub fn views<T: jitccl::Element>(
        self, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, rank: usize, count: usize, n: usize, in_place: bool,
    ) -> jitccl::Result<(DeviceBuffer<T>, DeviceBuffer<T>)> {
        let (c, all) = (count, count * n);
        let mine = rank * c..(rank + 1) * c;
        Ok(match (self, in_place) {
            (AllGather | Gather, false) => (send.slice(0..c)?, recv.slice(0..all)?),
            (AllGather | Gather, true) => (recv.slice(mine)?, recv.slice(0..all)?),
            (ReduceScatter | Scatter, false) => (send.slice(0..all)?, recv.slice(0..c)?),
            (ReduceScatter | Scatter, true) => (send.slice(0..all)?, send.slice(mine)?),
            (AllToAll | AllToAllv, _) => (send.slice(0..all)?, recv.slice(0..all)?),
            (_, false) => (send.slice(0..c)?, recv.slice(0..c)?),
            (_, true) => (send.slice(0..c)?, send.slice(0..c)?),
        })
    }

    /// Queues one operation of rank `c` on `s`, its elements carried in `wire` (which the
    /// flags allow only where [`has_wire_path`](Self::has_wire_path)).
    #[allow(clippy::too_many_arguments)]
    pub fn launch<T: jitccl::Element>(
        self, c: &Comm, s: &Stream, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize, op: Option<Op>,
        root: usize, wire: Wire,
    ) -> jitccl::Result<()> {
        let (r, n) = (c.rank(), c.nranks());
        let op = || op.expect("a reducing collective has an op");
        let w = c.wired(wire);
        match self {
            AllReduce => w.all_reduce(send, recv, count, op(), s),
            Broadcast => w.broadcast(send, recv, count, root, s),
            Reduce => w.reduce(send, recv, count, op(), root, s),
            AllGather => w.all_gather(send, recv, count, s),
            ReduceScatter => w.reduce_scatter(send, recv, count, op(), s),
            SendRecv => w.sendrecv(send, count, (r + 1) % n, recv, count, (r + n - 1) % n, s),
            AllToAll => c.all_to_all(send, recv, count, s),
            AllToAllv => {
                let (counts, displs): (Vec<usize>, Vec<usize>) = (0..n).map(|q| (count, q * count)).unzip();
                c.all_to_allv(send, &counts, &displs, recv, &counts, &displs, s)
            }
            Gather => c.gather(send, recv, count, root, s),
            Scatter => c.scatter(send, recv, count, root, s),
        }
    }

    /// What rank `r`'s recv view must hold after one operation on reference inputs (each
    /// rank's send view holding `inputs(op, rank, len)`), or None where it is not defined.
    pub fn expected<T: RefElement>(
        self, op: Option<Op>, n: usize, root: usize, r: usize, count: usize,
    ) -> Option<Vec<T>> {
        let red = || op.expect("a reducing collective has an op");
        let all = |q: usize| (0..count).map(move |i| input::<T>(op, q, i));
        Some(match self {
            AllReduce => (0..count).map(|i| reduced(red(), n, i)).collect(),
            Reduce | Gather if r != root => return None,
            Reduce => (0..count).map(|i| reduced(red(), n, i)).collect(),
            Broadcast => inputs(op, root, count),
            AllGather | Gather => (0..n).flat_map(all).collect(),
            ReduceScatter => (0..count).map(|i| reduced(red(), n, r * count + i)).collect(),
            SendRecv => inputs(op, (r + n - 1) % n, count),
            // Block q comes from rank q's send block r.
            AllToAll | AllToAllv => {
                (0..n).flat_map(|q| (0..count).map(move |i| input::<T>(op, q, r * count + i))).collect()
            }
            Scatter => (0..count).map(|i| input(op, root, r * count + i)).collect(),
        })
    }
}
