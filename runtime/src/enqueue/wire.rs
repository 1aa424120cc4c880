//! Which wire format a call's elements travel in: the one the call asks for (checked when
//! the call is made, so that a refusal changes nothing), else the communicator's default
//! where it fits (`Config::wire`: collectives only), else exact; and exact, whatever was
//! asked, where every hop is in memory, unless `Config::wire_local` says encode.

use std::sync::atomic::Ordering;

use jitccl_codegen::{Collective, Wire};

use super::{Call, Rank};
use crate::config::WireLocal;
use crate::error::{invalid, Result};
use crate::op::Op;
use crate::settings;

/// The collectives a communicator's default wire applies to (their kernels encode and
/// decode; see `Wire::algorithms`).
fn carries(coll: Collective) -> bool {
    matches!(
        coll,
        Collective::AllReduce
            | Collective::ReduceScatter
            | Collective::AllGather
            | Collective::Broadcast
            | Collective::Reduce
    )
}

/// Why `call` cannot travel in `wire`, if it cannot. Point to point and AlltoAll(v) take a
/// wire only where asked (`asked`), as both sides of each transfer must ask for the same one.
fn refusal(call: &Call, wire: Wire, asked: bool) -> Option<String> {
    if wire == Wire::Exact {
        return None;
    }
    let name = call.coll.name();
    if !(carries(call.coll) || asked && matches!(call.coll, Collective::SendRecv | Collective::AllToAll)) {
        return Some(format!(
            "{name}: the {wire} wire runs on AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, AlltoAll(v) \
             and point to point"
        ));
    }
    if let Err(e) = wire.check_dtype(call.dtype) {
        return Some(format!("{name}: {e}"));
    }
    match call.op {
        None | Some(Op::Sum | Op::Avg) => None,
        Some(op) => Some(format!(
            "{name}: the {wire} wire reduces with sum or avg only (it accumulates in fp32), not {}",
            op.red_op()
        )),
    }
}

impl Call {
    /// This call with its elements carried in `wire` (exact included: then whatever the
    /// communicator's default), or why it cannot be.
    pub(crate) fn wired(self, wire: Wire) -> Result<Call> {
        match refusal(&self, wire, true) {
            Some(why) => invalid(why),
            None => Ok(Call { wire: Some(wire), ..self }),
        }
    }

    /// The wire the call's kernel runs with: its own, or `default` where it fits.
    pub(super) fn wire_with(&self, default: Wire) -> Wire {
        match self.wire {
            Some(w) => w,
            None if self.internal || refusal(self, default, false).is_some() => Wire::Exact,
            None => default,
        }
    }
}

/// How a communicator's ranks reach each other, as its wired calls see it: the same on
/// every rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reach {
    /// Every rank reaches every other through memory.
    pub in_memory: bool,
    /// The most hops of one channel's ring that go through the network.
    pub ring_net_hops: usize,
}

impl Rank {
    /// Whether wired calls run exactly here: every rank reaches every other through memory
    /// and `Config::wire_local` leaves it so.
    pub(crate) fn wires_run_exactly(&self) -> bool {
        self.reach.in_memory && self.cfg.wire_local == WireLocal::Exact
    }

    /// The most times a wired ring call of `coll` encodes a value on its way into a rank's
    /// result (0 where wired calls run exactly): a partial sum on each hop through the
    /// network (on every hop where `Config::wire_local` says encode), at most n - 1 of them,
    /// and an AllReduce's final sums once more; a value only moved, once. Hops in memory
    /// carry partial sums as fp32 (`Conn::wire_plain`).
    pub(crate) fn ring_encodings(&self, coll: Collective) -> usize {
        let n = self.group.nranks;
        if n < 2 || self.wires_run_exactly() {
            return 0;
        }
        let hops = match self.cfg.wire_local {
            WireLocal::Encode => n,
            WireLocal::Exact => self.reach.ring_net_hops,
        };
        let partial = hops.min(n - 1);
        match coll {
            Collective::AllReduce => partial + 1,
            Collective::ReduceScatter | Collective::Reduce => partial,
            _ => 1,
        }
    }

    /// The wire `call`'s kernel runs with (`Call::wire_with`), or exact where every rank
    /// reaches every other through memory: there memory bandwidth is the wire, and encoding
    /// only adds work. Every rank decides alike (the reach and the setting are agreed), so
    /// their kernels match.
    pub(super) fn wire_of(&self, call: &Call) -> Wire {
        let wire = call.wire_with(self.cfg.wire);
        if wire == Wire::Exact || !self.wires_run_exactly() {
            return wire;
        }
        if self.group.rank == 0 && !self.told_exact.swap(true, Ordering::Relaxed) {
            tracing::info!(
                "{}: the {wire} wire was asked, but every hop of this communicator is in memory, where encoding \
                 cannot pay: its wired calls run exactly ({}=encode runs the wire's kernels)",
                call.coll.name(),
                settings::WIRE_LOCAL.name
            );
        }
        Wire::Exact
    }
}
