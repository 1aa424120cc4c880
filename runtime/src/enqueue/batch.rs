//! Point-to-point rounds as one launch over the FIFOs (`templates/algo/sendrecv_ring.h`,
//! its batch): on the host, an AlltoAll(v), Gather, Scatter or a group's sends and receives
//! that no direct launch carries (over the network, or on buffers that are not
//! addressable) moves every transfer as its peer allows, instead of one round after
//! another, each a round trip over a network. Also how many channels a point-to-point
//! launch over the FIFOs runs: those its transfers reach.
//!
//! A rank decides from its own call alone: every transfer's steps are those of the SendRecv
//! its round would launch (a kernel of bytes, the same split over the channels, its bytes
//! as its tag), so a peer that runs the same transfers in rounds pairs with it. The rounds
//! remain where a batch cannot run: on GPUs (the table is host memory), in a wire format
//! (encoded per round), past `P2P_BATCH_MAX` transfers, or where a receive lands on a send
//! of the call (an exchange in place, which the rounds move chunk by chunk).

use std::ops::Range;

use jitccl_codegen::abi::P2P_BATCH_MAX;
use jitccl_codegen::Wire;

use super::p2p::Ops;
use super::{checks, Call, Rank};

/// Words per transfer in the table (JC_P2P_BATCH_OP), and its kinds.
const OP: usize = 4;
const RECV: u64 = 1;
const COPY: u64 = 2;

/// One transfer of a batch: its peer and bytes.
struct Transfer {
    peer: usize,
    bytes: Range<usize>,
}

impl Rank {
    /// `call`'s transfers (its moves' rounds, or a batch's: see `Call::moves`,
    /// `Call::rounds`) as one batch launch over the FIFOs, where one can run them (see the
    /// module comment).
    pub(super) fn fifo_batch(&self, call: &Call) -> Option<Ops> {
        let none = call.moves.is_none() && call.rounds.is_empty();
        if self.device.is_cuda() || call.internal || none || self.wire_of(call) != Wire::Exact {
            return None;
        }
        let most = self.group.nranks.max(call.rounds.len());
        let (mut sends, mut recvs) = (Vec::with_capacity(most), Vec::with_capacity(most));
        if let Some(moves) = call.moves {
            let block = call.count * call.dtype.size();
            for (send, recv) in moves.rounds(self.group, block) {
                sends.extend(send.map(|(peer, at)| Transfer { peer, bytes: at..at + block }));
                recvs.extend(recv.map(|(peer, at)| Transfer { peer, bytes: at..at + block }));
            }
        } else {
            for c in &call.rounds {
                let bytes = |at: usize, n: usize| at..at + n * c.dtype.size();
                if let Some(peer) = c.send_peer.filter(|_| c.count > 0) {
                    sends.push(Transfer { peer, bytes: bytes(c.send as usize, c.count) });
                }
                if let Some(peer) = c.recv_peer.filter(|_| c.recv_count > 0) {
                    recvs.push(Transfer { peer, bytes: bytes(c.recv as usize, c.recv_count) });
                }
            }
        }
        if sends.len() + recvs.len() > P2P_BATCH_MAX {
            return None;
        }
        if recvs.iter().any(|r| sends.iter().any(|s| checks::overlap(&r.bytes, &s.bytes))) {
            return None;
        }
        // The whole buffers where the call holds them (its moves' blocks lie in them), else
        // every transfer's (a batch's).
        let keep = match call.moves {
            Some(_) => call.keep.iter().flatten().cloned().collect(),
            None => call.rounds.iter().flat_map(|c| c.keep.iter().flatten().cloned()).collect(),
        };
        Some(Ops::fifo(table(self.group.rank, self.group.nranks, &sends, &recvs), keep))
    }
}

/// The kernel's table of rank `me`'s (of `n`) transfers, none of whose receives overlaps
/// a send; at most `P2P_BATCH_MAX` of them. Two allocations, the ops and the table: it is
/// built on every small AlltoAll's path.
fn table(me: usize, n: usize, sends: &[Transfer], recvs: &[Transfer]) -> Vec<u64> {
    const _: () = assert!(P2P_BATCH_MAX <= 128, "a transfer's bit in a u128");
    debug_assert!(sends.len() + recvs.len() <= P2P_BATCH_MAX);
    let word = |t: &Transfer, kind: u64| [t.peer as u64 | kind << 32, t.bytes.start as u64, t.bytes.len() as u64];
    // The j-th send to itself meets the j-th receive from itself: one copy, where their
    // sizes agree (else both go through the FIFO and fail as their rounds would). Which
    // ones paired: a bit per transfer.
    let mut ops: Vec<(usize, [u64; OP])> = Vec::with_capacity(sends.len() + recvs.len());
    fn own(t: &[Transfer], me: usize) -> impl Iterator<Item = usize> + '_ {
        t.iter().enumerate().filter(move |(_, t)| t.peer == me).map(|(i, _)| i)
    }
    let mut paired = (0u128, 0u128);
    for (s, r) in own(sends, me).zip(own(recvs, me)) {
        if sends[s].bytes.len() == recvs[r].bytes.len() {
            let [w, at, len] = word(&sends[s], COPY);
            ops.push((0, [w, at, len, recvs[r].bytes.start as u64]));
            paired.0 |= 1 << s;
            paired.1 |= 1 << r;
        }
    }
    // Ordered by distance, as the rounds are (send to rank + k, receive from rank - k), so
    // that the ranks start on different peers; a FIFO's transfers stay in posted order.
    for (kind, list, done) in [(0, sends, paired.0), (RECV, recvs, paired.1)] {
        for (_, t) in list.iter().enumerate().filter(|(i, _)| done >> i & 1 == 0) {
            let k = if kind == RECV { (me + n - t.peer) % n } else { (t.peer + n - me) % n };
            let [w, at, len] = word(t, kind);
            ops.push((k, [w, at, len, 0]));
        }
    }
    ops.sort_by_key(|(k, o)| (*k, o[0] >> 32));
    let mut words = Vec::with_capacity(2 + ops.len() * OP);
    words.extend([ops.len() as u64, 0]);
    words.extend(ops.iter().flat_map(|(_, o)| *o));
    words
}

/// How many of `nch` channels a point-to-point transfer of `count` elements moves anything
/// on, `chunk` elements a step (`jc_p2p_range`: on the host one channel a step's worth, up
/// to `nch`; the split of `jc_channel_range`, `per` rounded up to 16 elements); at least
/// one. A point-to-point launch on the host runs only those channels, its steps unchanged:
/// the others would return at once, after waking a thread each.
pub(super) fn channels_used(count: u64, chunk: u64, nch: usize) -> usize {
    if count == 0 {
        return 1;
    }
    let nch = (nch as u64).min(count.div_ceil(chunk.max(1))).max(1);
    let per = count.div_ceil(nch).next_multiple_of(16);
    count.div_ceil(per) as usize
}

/// The channels a batch's launch runs: those of its largest transfer.
pub(super) fn busy(batch: &Ops, chunk: u64, nch: usize) -> usize {
    let transfers = batch.words[2..].chunks(OP).take(batch.words[0] as usize);
    transfers.map(|o| channels_used(o[2], chunk, nch)).max().unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(peer: usize, at: usize, len: usize) -> Transfer {
        Transfer { peer, bytes: at..at + len }
    }

    /// The table's transfers as (peer, kind, at, bytes, copy's destination).
    fn rows(words: &[u64]) -> Vec<(u64, u64, u64, u64, u64)> {
        assert_eq!(words.len(), 2 + words[0] as usize * OP);
        words[2..].chunks(OP).map(|o| (o[0] & 0xffff_ffff, o[0] >> 32, o[1], o[2], o[3])).collect()
    }

    #[test]
    fn transfers_run_by_distance_in_posted_order_per_fifo_and_a_rank_copies_to_itself() {
        // Rank 1 of 4: two sends to rank 2 (posted in that order), one to 0, a receive
        // from 0 and from 3; a send to itself meets the receive from itself.
        let sends = [t(2, 100, 8), t(0, 200, 4), t(2, 300, 16), t(1, 400, 32)];
        let recvs = [t(0, 1000, 4), t(1, 2000, 32), t(3, 3000, 8)];
        let got = rows(&table(1, 4, &sends, &recvs));
        let want = vec![
            (1, COPY, 400, 32, 2000),
            (2, 0, 100, 8, 0),
            (2, 0, 300, 16, 0),
            (0, RECV, 1000, 4, 0),
            (3, RECV, 3000, 8, 0),
            (0, 0, 200, 4, 0),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn a_send_to_itself_of_another_size_stays_on_the_fifo() {
        let got = rows(&table(0, 2, &[t(0, 0, 8)], &[t(0, 64, 16)]));
        assert_eq!(got, vec![(0, 0, 0, 8, 0), (0, RECV, 64, 16, 0)]);
    }

    #[test]
    fn channels_used_follows_the_kernels_split() {
        // Up to a step's worth: one channel, whatever the channel count.
        assert_eq!(channels_used(0, 1024, 8), 1);
        assert_eq!(channels_used(1, 1024, 8), 1);
        assert_eq!(channels_used(1024, 1024, 8), 1);
        // Then one channel a step's worth, up to every channel.
        assert_eq!(channels_used(1025, 1024, 8), 2);
        assert_eq!(channels_used(3 * 1024, 1024, 8), 3);
        assert_eq!(channels_used(100 * 1024, 1024, 8), 8);
        assert_eq!(channels_used(100 * 1024, 1024, 1), 1);
        // Per channel rounded up to 16 elements: 33 elements over 3 channels of 16.
        assert_eq!(channels_used(33, 11, 3), 3);
        assert_eq!(channels_used(32, 11, 3), 2);
    }
}
