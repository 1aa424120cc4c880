//! Direct point-to-point (`templates/algo/sendrecv_direct.h`): a send/recv, a group's sends
//! and receives or an AlltoAllv as one launch in which each receiver copies straight from
//! its sender's buffer. Where it runs is decided alike on every rank from what every rank
//! knows alike (the target, the overrides) and from this rank's buffers: every buffer of
//! the launch addressable (in the host arena or registered). Ranks that differ there (one
//! rank's buffer plain, its peer's registered) fail by their bounded waits, naming the
//! peer, as the direct collectives do.

use std::sync::Arc;

use jitccl_codegen::abi::{SYM_EAGER_MIN_RANKS, SYM_MAX_RANKS, SYM_P2P_EAGER_BYTES};
use jitccl_codegen::{Collective, DataType, Wire};

use super::{checks, Call, Rank};
use crate::error::{invalid, Result};
use crate::registry::{Keep, Region};

/// The table a point-to-point launch reads (direct, or a batch over the FIFOs), and what
/// keeps its memory alive.
pub(crate) struct Ops {
    pub words: Vec<u64>,
    /// Every rank's flags area.
    pub flags: *const *mut u64,
    _keep: Vec<Keep>,
    _regions: Vec<Arc<Region>>,
}

impl Ops {
    /// A batch over the FIFOs' table (`batch`): no flags areas, no regions.
    pub(super) fn fifo(words: Vec<u64>, keep: Vec<Keep>) -> Ops {
        Ops { words, flags: std::ptr::null(), _keep: keep, _regions: Vec::new() }
    }
}

// SAFETY: the pointers in `words` and `flags` lead into memory `_keep`, `_regions` and the
// communicator (which the launch holds) keep alive; only the kernel dereferences them.
unsafe impl Send for Ops {}
unsafe impl Sync for Ops {}

impl Call {
    /// A batch of point-to-point `rounds` (see `Call::batch`); `coll`'s overrides decide
    /// whether it may run direct. Counted in bytes.
    pub(crate) fn batch(coll: Collective, rounds: Vec<Call>) -> Call {
        let bytes = rounds.iter().map(|c| (c.count + c.recv_count) * c.dtype.size()).sum();
        Call {
            coll,
            dtype: DataType::U8,
            op: None,
            count: bytes,
            recv_count: 0,
            root: 0,
            send: std::ptr::null(),
            recv: std::ptr::null_mut(),
            keep: [None, None],
            // Each transfer's buffers were checked when it was made.
            devices: [None, None],
            bytes,
            send_peer: None,
            recv_peer: None,
            internal: false,
            rounds,
            batch: true,
            moves: None,
            wire: None,
        }
    }
}

/// Words per transfer in the table (JC_P2P_OP).
const OP: usize = 6;
const RECV: u64 = 1 << 32;
/// A send that may go through the sender's eager slot (JC_P2P_EAGER_OK).
const EAGER_OK: u64 = 2 << 32;

impl Rank {
    /// The table of `call` if it runs direct, or InvalidArgument where a receive of a step
    /// overlaps a send of it: a peer may still be reading what the receive overwrites (the
    /// FIFOs move such an in-place exchange chunk by chunk; NCCL leaves it undefined).
    pub(super) fn p2p_table(&self, call: &Call) -> Result<Option<Ops>> {
        let Some(ops) = self.p2p_ops(call) else { return Ok(None) };
        let all = || ops.words[2..].chunks(OP).take(ops.words[0] as usize).filter(|o| o[2] > 0);
        let range = |o: &[u64]| o[3] as usize..(o[3] + o[2]) as usize;
        for a in all().filter(|o| o[1] & RECV != 0) {
            let clash = |b: &&[u64]| b[0] == a[0] && b[1] & RECV == 0 && checks::overlap(&range(a), &range(b));
            if let Some(b) = all().find(clash) {
                return invalid(format!(
                    "{}: a receive from rank {} overlaps a send to rank {} of the same group (in place)",
                    call.coll.name(),
                    a[1] as u32,
                    b[1] as u32
                ));
            }
        }
        Ok(Some(ops))
    }

    /// The table of `call` if it runs direct: a SendRecv, or a batch whose overrides
    /// (`call.coll`'s) allow direct (see the module comment).
    fn p2p_ops(&self, call: &Call) -> Option<Ops> {
        let p2p = call.batch || call.coll == Collective::SendRecv;
        // A wire format is encoded in the FIFOs' steps: the receiver's copy moves raw bytes.
        let wired = self.wire_of(call) != Wire::Exact;
        if !p2p || wired || call.internal || self.device.is_cuda() || self.group.nranks > SYM_MAX_RANKS {
            return None;
        }
        let flags = self.sym.flags()?.table();
        if !self.tuner.allows_direct(call.coll) {
            return None;
        }
        let parts: Vec<&Call> = if call.batch { call.rounds.iter().collect() } else { vec![call] };
        // An AlltoAllv's empty blocks too: every rank takes part with every peer, so the
        // receiver compares a zero size as any other (elsewhere an empty side is no transfer).
        let empty = call.batch && call.coll == Collective::AllToAll;
        let (mut ops, mut keep) = (Vec::new(), Vec::new());
        // Per peer, the sends and receives so far: the step of the next.
        let (mut sent, mut got) = (vec![0u64; self.group.nranks], vec![0u64; self.group.nranks]);
        for c in parts {
            let size = c.dtype.size();
            let sides = [(c.send_peer, c.send as usize, c.count, 0), (c.recv_peer, c.recv as usize, c.recv_count, 1)];
            for (peer, at, count, side) in sides {
                let Some(peer) = peer.filter(|_| empty || count > 0) else { continue };
                let bytes = count * size;
                let region = self.sym.region_of(&(at..at + bytes))?;
                let steps = if side == 0 { &mut sent } else { &mut got };
                let step = steps[peer];
                steps[peer] += 1;
                // An AlltoAllv's small blocks to other ranks go eager (one handshake; its
                // sender learns of a refused block by its next call at the latest, see
                // sendrecv_direct.h); a Send still fails at once with its receiver.
                let eager = empty
                    && self.group.nranks >= SYM_EAGER_MIN_RANKS
                    && peer != self.group.rank
                    && bytes <= SYM_P2P_EAGER_BYTES;
                let kind = if side == 1 {
                    RECV
                } else if eager {
                    EAGER_OK
                } else {
                    0
                };
                let off = (at - region.range.start) as u64;
                ops.push([step, peer as u64 | kind, bytes as u64, at as u64, region.id, off]);
                keep.extend(c.keep[side].clone());
            }
        }
        ops.sort_by_key(|o| o[0]);
        let regions = self.sym.regions();
        let mut words = Vec::with_capacity(2 + ops.len() * OP + regions.len() * 2);
        words.extend([ops.len() as u64, regions.len() as u64]);
        words.extend(ops.iter().flatten());
        words.extend(regions.iter().flat_map(|r| [r.id, r.bases.as_ptr() as u64]));
        Some(Ops { words, flags, _keep: keep, _regions: regions })
    }
}
