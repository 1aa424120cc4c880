//! The calls a user makes to move data: AllReduce, Broadcast, Reduce, AllGather,
//! ReduceScatter, point to point, AlltoAll(v), Gather and Scatter, and the cost model's
//! estimate of a collective. Each is thin: `enqueue` checks it (an error changes nothing),
//! then it leaves through `submit`, to be tuned, compiled (once) and queued on the caller's
//! stream.
//!
//! AlltoAll(v), Gather and Scatter. Where every rank's buffers are registered (plain host
//! buffers are, through the host arenas) the tuner may pick a direct kernel: one launch
//! that copies every block straight from or into the peers' buffers (AlltoAllv: the direct
//! point-to-point kernel, which compares each block's size with its sender's, see
//! `enqueue::p2p`). Otherwise they run as NCCL builds them: from point-to-point transfers,
//! one `sendrecv` launch per round. Round `k` sends to `rank + k` and receives from `rank - k`
//! (mod nranks), so every round pairs up across ranks and a cycle of exchanges cannot
//! deadlock; round 0 is the rank's own block, moved by a transfer to itself. In a wire
//! format (`Comm::wired`) AlltoAll(v) always runs in rounds, each block encoded once by its
//! sender and decoded on arrival (the own block too). Every block of a call is checked
//! before anything is queued, so a bad argument changes nothing. AlltoAll, Gather and
//! Scatter carry where their blocks lie (`enqueue::Moves`), from which a launch derives the
//! rounds only where it runs them; AlltoAllv carries its transfers, built here.

use std::ops::Range;

use jitccl_codegen::{Collective, DataType, Wire};

use super::group::note;
use super::Comm;
use crate::device::DeviceBuffer;
use crate::element::Element;
use crate::enqueue::{disjoint, Call, Moves, Side, Spread};
use crate::error::{invalid, Result};
use crate::op::Op;
use crate::stream::Stream;

impl Comm {
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
        self.submit(Call::checked_p2p(&self.group(), Some(Side::of(buf, count, peer)), None), stream)
    }

    /// Receives `count` elements from `peer` into `buf`.
    pub fn recv<T: Element>(&self, buf: &DeviceBuffer<T>, count: usize, peer: usize, stream: &Stream) -> Result<()> {
        self.submit(Call::checked_p2p(&self.group(), None, Some(Side::of(buf, count, peer))), stream)
    }

    /// Sends `send_count` elements of `send` to `to` while receiving `recv_count` from
    /// `from` into `recv`, in one launch (so that exchanges in a cycle cannot deadlock).
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv<T: Element>(
        &self, send: &DeviceBuffer<T>, send_count: usize, to: usize, recv: &DeviceBuffer<T>, recv_count: usize,
        from: usize, stream: &Stream,
    ) -> Result<()> {
        self.submit(
            Call::checked_p2p(
                &self.group(),
                Some(Side::of(send, send_count, to)),
                Some(Side::of(recv, recv_count, from)),
            ),
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

    /// A collective of `count` elements (a block per rank where it moves blocks), in `wire`
    /// if given, else the communicator's default where it fits.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn collective<T: Element>(
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
}

/// An AlltoAllv's side: per peer, the elements of `buf` sent to it or received from it.
struct Blocks<'a, T: Element> {
    buf: &'a DeviceBuffer<T>,
    at: Vec<Option<Range<usize>>>,
}

impl<'a, T: Element> Blocks<'a, T> {
    /// The byte ranges of the blocks that move anything.
    fn used(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.at.iter().flatten().filter(|r| !r.is_empty()).map(|r| {
            let start = self.buf.ptr_at(r.start) as usize;
            start..start + r.len() * size_of::<T>()
        })
    }

    /// Peer `q`'s side of a transfer: its block, if it has one (an empty one too).
    fn side(&self, q: usize) -> Option<Side<'a, T>> {
        let r = self.at[q].as_ref()?;
        Some(Side { buf: self.buf, at: r.start, count: r.len(), peer: q })
    }
}

impl Comm {
    /// Sends block `q` of `send` to rank `q` and receives rank `q`'s block for this rank
    /// into block `q` of `recv`. A block is `count` elements; `send` and `recv` each hold
    /// `nranks * count` and must not overlap (not in place, as in NCCL).
    pub fn all_to_all<T: Element>(
        &self, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize, stream: &Stream,
    ) -> Result<()> {
        self.all_to_all_in(send, recv, count, None, stream)
    }

    /// [`Comm::all_to_all`], its blocks in `wire` where given (then always in rounds).
    pub(super) fn all_to_all_in<T: Element>(
        &self, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize, wire: Option<Wire>, stream: &Stream,
    ) -> Result<()> {
        note((|| {
            let total = self.group().total(count)?;
            let name = "AllToAll";
            holds(name, "send", send, total)?;
            holds(name, "recv", recv, total)?;
            let each = |b: &DeviceBuffer<T>| Spread::Each { at: b.address(), skip: None };
            let moves =
                self.checked_moves(name, Moves { send: each(send), recv: each(recv) }, count * size_of::<T>())?;
            let call = Call::moves(&self.group(), Collective::AllToAll, send, recv, count, 0, moves);
            self.submit(Ok(in_wire(call, wire)?), stream)
        })())
    }

    /// AlltoAll with a count and an offset per peer: `send_counts[q]` elements at
    /// `send_displs[q]` of `send` go to rank `q`, and `recv_counts[q]` elements from rank
    /// `q` land at `recv_displs[q]` of `recv` (all in elements). Each slice holds nranks
    /// entries; every block lies inside its buffer; send blocks overlap no recv block.
    /// `recv_counts[q]` must equal what rank `q` sends here.
    #[allow(clippy::too_many_arguments)]
    pub fn all_to_allv<T: Element>(
        &self, send: &DeviceBuffer<T>, send_counts: &[usize], send_displs: &[usize], recv: &DeviceBuffer<T>,
        recv_counts: &[usize], recv_displs: &[usize], stream: &Stream,
    ) -> Result<()> {
        self.all_to_allv_in(send, send_counts, send_displs, recv, recv_counts, recv_displs, None, stream)
    }

    /// [`Comm::all_to_allv`], its blocks in `wire` where given (then always in rounds).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn all_to_allv_in<T: Element>(
        &self, send: &DeviceBuffer<T>, send_counts: &[usize], send_displs: &[usize], recv: &DeviceBuffer<T>,
        recv_counts: &[usize], recv_displs: &[usize], wire: Option<Wire>, stream: &Stream,
    ) -> Result<()> {
        note((|| {
            let name = "AllToAllv";
            let sends = self.blocks(name, "send", send, send_counts, send_displs)?;
            let recvs = self.blocks(name, "recv", recv, recv_counts, recv_displs)?;
            // The batch counts bytes: its rounds, one per rank, each checked its dtype.
            let batch = Call::batch(Collective::AllToAll, self.rounds(name, sends, recvs, wire)?);
            self.submit(Ok(Call { wire, ..batch }), stream)
        })())
    }

    /// Gathers every rank's `count` elements of `send` into `recv` on `root` (rank q's at
    /// `q * count`; `recv` holds `nranks * count` there and is not touched elsewhere). In
    /// place when the root's `send` is `recv`'s slice at `root * count`.
    pub fn gather<T: Element>(
        &self, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize, root: usize, stream: &Stream,
    ) -> Result<()> {
        note(self.rooted(Collective::Gather, root, count, send, recv, stream))
    }

    /// Sends block `q` (`count` elements at `q * count`) of `send` on `root` to rank `q`'s
    /// `recv` (`count` elements; `send` holds `nranks * count` on the root and is not read
    /// elsewhere). In place when the root's `recv` is `send`'s slice at `root * count`.
    pub fn scatter<T: Element>(
        &self, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize, root: usize, stream: &Stream,
    ) -> Result<()> {
        note(self.rooted(Collective::Scatter, root, count, send, recv, stream))
    }

    /// Gather or Scatter (`coll`): `one` is a rank's own block, `all` the root's nranks
    /// blocks. The root's own block does not move when it is already in place.
    fn rooted<T: Element>(
        &self, coll: Collective, root: usize, count: usize, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>,
        stream: &Stream,
    ) -> Result<()> {
        self.group().root(root)?;
        let to_root = coll == Collective::Gather;
        let (name, (one, all)) =
            (if to_root { "Gather" } else { "Scatter" }, if to_root { (send, recv) } else { (recv, send) });
        let (one_side, all_side) = if to_root { ("send", "recv") } else { ("recv", "send") };
        block(name, one_side, one, 0, count)?; // the one block fits its buffer
        let mut ones = Spread::One { peer: root, at: one.address() };
        let mut alls = Spread::None;
        if self.rank() == root {
            holds(name, all_side, all, self.group().total(count)?)?;
            // In place: the root's own block is already where it belongs.
            let in_place = count > 0 && one.address() == all.ptr_at(root * count) as usize;
            alls = Spread::Each { at: all.address(), skip: in_place.then_some(root) };
            if in_place {
                ones = Spread::None;
            }
        }
        let (sends, recvs) = if to_root { (ones, alls) } else { (alls, ones) };
        let moves = self.checked_moves(name, Moves { send: sends, recv: recvs }, count * size_of::<T>())?;
        self.submit(Ok(Call::moves(&self.group(), coll, send, recv, count, root, moves)), stream)
    }

    /// `moves`, or InvalidArgument where a block received would land on one sent.
    fn checked_moves(&self, name: &str, moves: Moves, block: usize) -> Result<Moves> {
        match moves.overlap(self.nranks(), block) {
            true => invalid(format!("{name}: a send block overlaps a recv block")),
            false => Ok(moves),
        }
    }

    /// `buf` cut by per-peer counts and offsets, each checked.
    fn blocks<'a, T: Element>(
        &self, name: &str, side: &str, buf: &'a DeviceBuffer<T>, counts: &[usize], displs: &[usize],
    ) -> Result<Blocks<'a, T>> {
        let n = self.nranks();
        if counts.len() != n || displs.len() != n {
            return invalid(format!(
                "{name}: {} {side} counts and {} {side} offsets given, one per rank ({n}) is needed",
                counts.len(),
                displs.len()
            ));
        }
        let at =
            counts.iter().zip(displs).map(|(&c, &d)| block(name, side, buf, d, c).map(Some)).collect::<Result<_>>()?;
        Ok(Blocks { buf, at })
    }

    /// An AlltoAllv's transfers, one a round (see the module comment), every block with its
    /// peer, an empty one too (its direct kernel compares every block's size with the
    /// sender's, a zero one too). All transfers are checked, and send blocks against recv
    /// blocks. Each transfer travels in `wire` where given.
    fn rounds<T: Element>(
        &self, name: &str, sends: Blocks<T>, recvs: Blocks<T>, wire: Option<Wire>,
    ) -> Result<Vec<Call>> {
        if !disjoint(&sends.used().collect::<Vec<_>>(), &recvs.used().collect::<Vec<_>>()) {
            return invalid(format!("{name}: a send block overlaps a recv block"));
        }
        let (rank, n) = (self.rank(), self.nranks());
        let mut calls = Vec::with_capacity(n);
        for k in 0..n {
            let (to, from) = ((rank + k) % n, (rank + n - k) % n);
            let (send, recv) = (sends.side(to), recvs.side(from));
            if send.is_some() || recv.is_some() {
                calls.push(in_wire(Call::checked_p2p(&self.group(), send, recv)?, wire)?);
            }
        }
        Ok(calls)
    }
}

/// `call` in `wire` where given (checked that it may be), else as it is.
fn in_wire(call: Call, wire: Option<Wire>) -> Result<Call> {
    match wire {
        Some(w) => call.wired(w),
        None => Ok(call),
    }
}

/// Whether `buf` holds the `total` elements a call's side needs; InvalidArgument naming the
/// call where it does not.
fn holds<T: Element>(name: &str, side: &str, buf: &DeviceBuffer<T>, total: usize) -> Result<()> {
    if buf.len() < total {
        return invalid(format!("{name} {side} buffer holds {} elements, {total} are needed", buf.len()));
    }
    Ok(())
}

/// Elements `start..start + len` of `buf`, or InvalidArgument naming the call. An empty
/// block is never read or written, so its offset does not matter (as in NCCL): it is `0..0`.
fn block<T: Element>(name: &str, side: &str, buf: &DeviceBuffer<T>, start: usize, len: usize) -> Result<Range<usize>> {
    match start.checked_add(len) {
        _ if len == 0 => Ok(0..0),
        Some(end) if end <= buf.len() => Ok(start..end),
        _ => invalid(format!(
            "{name}: {side} block of {len} elements at {start} is outside its buffer of {} elements",
            buf.len()
        )),
    }
}
