//! `Comm::wired`: a communicator's collectives and point-to-point calls with their elements
//! carried in a wire format.

use jitccl_codegen::{Collective, Wire};

use super::{group, Comm};
use crate::device::DeviceBuffer;
use crate::element::Element;
use crate::enqueue::{Call, Side};
use crate::error::{invalid, Result};
use crate::op::Op;
use crate::stream::Stream;

/// A communicator's collectives in one wire format (made by [`Comm::wired`]). Each call
/// takes the arguments of the `Comm` method of its name and gives the same result within
/// the wire's error bound ([`Wire`]); every rank ends with the same bits.
#[derive(Debug, Clone, Copy)]
pub struct Wired<'a> {
    pub(super) comm: &'a Comm,
    pub(super) wire: Wire,
}

impl Comm {
    /// This communicator's collectives with their elements carried in `wire` (see
    /// [`Wire`] for the formats and their error bounds): `comm.wired(Wire::Bf16).all_reduce(..)`.
    /// `Wire::Exact` sends them exactly whatever the communicator's default
    /// (`Config::wire`). A call the wire cannot carry (not a float type wider than its codes,
    /// an op other than sum or avg) fails with `InvalidArgument`, queuing nothing.
    pub fn wired(&self, wire: Wire) -> Wired<'_> {
        Wired { comm: self, wire }
    }
}

impl Wired<'_> {
    /// The wire the calls carry their elements in.
    pub fn wire(&self) -> Wire {
        self.wire
    }

    /// Whether the calls run the wire's kernels: not where every rank of the communicator
    /// reaches every other through memory, unless [`Config::wire_local`](crate::Config::wire_local)
    /// says encode (there they run exactly). Fails on a communicator that can no longer run
    /// calls.
    pub fn encodes(&self) -> Result<bool> {
        Ok(self.wire != Wire::Exact && !self.comm.inner("encodes")?.enq.wires_run_exactly())
    }

    /// The most times a call of `coll` over the ring encodes a value on its way into a
    /// rank's result, which its error bound counts ([`Wire`]; 0 where the calls run
    /// exactly). Partial sums cross hops between ranks that share memory as fp32, so over
    /// h hosts whose ranks are together on the ring: AllReduce `min(h, n - 1) + 1` of n
    /// ranks, ReduceScatter and Reduce `min(h, n - 1)`, what is only moved 1. Where
    /// [`Config::wire_local`](crate::Config::wire_local) says encode, every hop encodes.
    pub fn ring_encodings(&self, coll: Collective) -> Result<usize> {
        match self.wire {
            Wire::Exact => Ok(0),
            _ => Ok(self.comm.inner("ring_encodings")?.enq.ring_encodings(coll)),
        }
    }

    /// [`Comm::all_reduce`]: each hop decodes, adds in fp32 and encodes; the final sums are
    /// encoded once and every rank keeps their decoding.
    pub fn all_reduce<T: Element>(
        &self, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize, op: Op, stream: &Stream,
    ) -> Result<()> {
        self.comm.collective(Collective::AllReduce, Some(op), send, recv, count, 0, Some(self.wire), stream)
    }

    /// [`Comm::broadcast`]: encoded once by the root; every rank (the root too) keeps the
    /// decoding.
    pub fn broadcast<T: Element>(
        &self, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize, root: usize, stream: &Stream,
    ) -> Result<()> {
        self.comm.collective(Collective::Broadcast, None, send, recv, count, root, Some(self.wire), stream)
    }

    /// [`Comm::reduce`]: as AllReduce's first half; the root's sums are not encoded again.
    pub fn reduce<T: Element>(
        &self, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize, op: Op, root: usize, stream: &Stream,
    ) -> Result<()> {
        self.comm.collective(Collective::Reduce, Some(op), send, recv, count, root, Some(self.wire), stream)
    }

    /// [`Comm::all_gather`]: each block encoded once by its rank; every rank (its own too)
    /// keeps the decodings.
    pub fn all_gather<T: Element>(
        &self, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize, stream: &Stream,
    ) -> Result<()> {
        self.comm.collective(Collective::AllGather, None, send, recv, count, 0, Some(self.wire), stream)
    }

    /// [`Comm::reduce_scatter`]: each hop decodes, adds in fp32 and encodes; a rank's
    /// own block is not encoded again.
    pub fn reduce_scatter<T: Element>(
        &self, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize, op: Op, stream: &Stream,
    ) -> Result<()> {
        self.comm.collective(Collective::ReduceScatter, Some(op), send, recv, count, 0, Some(self.wire), stream)
    }
}

/// Point to point and AlltoAll(v): the receiver must ask for the same wire as the sender (a
/// step of another size fails the call). Not inside a group, whose transfers are scheduled
/// as bytes.
impl Wired<'_> {
    /// [`Comm::all_to_all`]: each block encoded once by its sender and decoded on arrival
    /// (a rank's own block too).
    pub fn all_to_all<T: Element>(
        &self, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize, stream: &Stream,
    ) -> Result<()> {
        self.outside_group("AllToAll")?;
        self.comm.all_to_all_in(send, recv, count, Some(self.wire), stream)
    }

    /// [`Comm::all_to_allv`], each block encoded once by its sender and decoded on arrival.
    #[allow(clippy::too_many_arguments)]
    pub fn all_to_allv<T: Element>(
        &self, send: &DeviceBuffer<T>, send_counts: &[usize], send_displs: &[usize], recv: &DeviceBuffer<T>,
        recv_counts: &[usize], recv_displs: &[usize], stream: &Stream,
    ) -> Result<()> {
        self.outside_group("AllToAllv")?;
        let wire = Some(self.wire);
        self.comm.all_to_allv_in(send, send_counts, send_displs, recv, recv_counts, recv_displs, wire, stream)
    }

    /// [`Comm::send`], encoded once.
    pub fn send<T: Element>(&self, buf: &DeviceBuffer<T>, count: usize, peer: usize, stream: &Stream) -> Result<()> {
        self.p2p(Call::checked_p2p(&self.comm.group(), Some(Side::of(buf, count, peer)), None), stream)
    }

    /// [`Comm::recv`], decoded on arrival.
    pub fn recv<T: Element>(&self, buf: &DeviceBuffer<T>, count: usize, peer: usize, stream: &Stream) -> Result<()> {
        self.p2p(Call::checked_p2p(&self.comm.group(), None, Some(Side::of(buf, count, peer))), stream)
    }

    /// [`Comm::sendrecv`] in the wire.
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv<T: Element>(
        &self, send: &DeviceBuffer<T>, send_count: usize, to: usize, recv: &DeviceBuffer<T>, recv_count: usize,
        from: usize, stream: &Stream,
    ) -> Result<()> {
        let call = Call::checked_p2p(
            &self.comm.group(),
            Some(Side::of(send, send_count, to)),
            Some(Side::of(recv, recv_count, from)),
        );
        self.p2p(call, stream)
    }

    fn p2p(&self, call: Result<Call>, stream: &Stream) -> Result<()> {
        self.outside_group("sendrecv")?;
        self.comm.submit(call.and_then(|c| c.wired(self.wire)), stream)
    }

    /// InvalidArgument (noted in the group) where `what` in this wire is called inside a group.
    fn outside_group(&self, what: &str) -> Result<()> {
        if group::is_open() && self.wire != Wire::Exact {
            return group::note(invalid(format!(
                "{what} in the {} wire inside a group: a group's transfers run as bytes; make the call outside the group",
                self.wire
            )));
        }
        Ok(())
    }
}
