//! Argument checks, once for every collective, from one table of what each needs of its
//! buffers. A call that fails a check changes nothing (NCCL's ncclInvalidArgument).

use std::ops::Range;

use jitccl_codegen::Collective;

use crate::error::{invalid, Result};

/// A buffer as the checks see it: its length in elements and the bytes it covers.
#[derive(Debug, Clone)]
pub(crate) struct Buf {
    pub len: usize,
    pub bytes: Range<usize>,
}

/// How many elements a buffer must hold.
#[derive(Clone, Copy)]
enum Size {
    Count,
    /// One block of `count` per rank.
    PerRank,
}

/// Which ranks use a buffer.
#[derive(Clone, Copy)]
enum Used {
    Everywhere,
    AtRoot,
}

/// When the send and recv buffers may overlap.
#[derive(Clone, Copy)]
enum InPlace {
    /// Only as the very same buffer start.
    SameStart,
    /// Only as the send buffer being block `rank` of the recv buffer (AllGather).
    SendIsRecvBlock,
    /// Only as the recv buffer being block `rank` of the send buffer (ReduceScatter).
    RecvIsSendBlock,
}

/// What one collective needs of its buffers.
struct Need {
    send: (Size, Used),
    recv: (Size, Used),
    in_place: InPlace,
}

/// The table (SendRecv's two sides have counts of their own: see `Group::sendrecv`).
fn need(coll: Collective) -> Option<Need> {
    use {InPlace::*, Size::*, Used::*};
    Some(match coll {
        Collective::AllReduce => Need { send: (Count, Everywhere), recv: (Count, Everywhere), in_place: SameStart },
        Collective::Broadcast => Need { send: (Count, AtRoot), recv: (Count, Everywhere), in_place: SameStart },
        Collective::Reduce => Need { send: (Count, Everywhere), recv: (Count, AtRoot), in_place: SameStart },
        Collective::AllGather => {
            Need { send: (Count, Everywhere), recv: (PerRank, Everywhere), in_place: SendIsRecvBlock }
        }
        Collective::ReduceScatter => {
            Need { send: (PerRank, Everywhere), recv: (Count, Everywhere), in_place: RecvIsSendBlock }
        }
        // Their sides have counts of their own, or are checked block by block where the
        // call is cut into them (comm::collectives).
        Collective::SendRecv | Collective::AllToAll | Collective::Gather | Collective::Scatter => return None,
    })
}

pub(crate) fn overlap(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

/// Whether no range of `a` overlaps a range of `b` (empty ranges overlap nothing). Sorted
/// by start, a range overlaps an earlier-starting one of the other side exactly when it
/// starts before the furthest end seen on that side.
pub(crate) fn disjoint(a: &[Range<usize>], b: &[Range<usize>]) -> bool {
    let mut all: Vec<(&Range<usize>, usize)> =
        a.iter().map(|r| (r, 0)).chain(b.iter().map(|r| (r, 1))).filter(|(r, _)| !r.is_empty()).collect();
    all.sort_by_key(|(r, _)| r.start);
    let mut end = [0usize; 2];
    for (r, side) in all {
        if r.start < end[1 - side] {
            return false;
        }
        end[side] = end[side].max(r.end);
    }
    true
}

/// The rank and rank count a call is checked against.
#[derive(Clone, Copy)]
pub(crate) struct Group {
    pub rank: usize,
    pub nranks: usize,
}

impl Group {
    pub(crate) fn root(&self, root: usize) -> Result<()> {
        if root >= self.nranks {
            return invalid(format!("root {root} is not a rank of this {}-rank communicator", self.nranks));
        }
        Ok(())
    }

    pub(crate) fn peer(&self, peer: usize) -> Result<()> {
        if peer >= self.nranks {
            return invalid(format!("peer {peer} is not a rank of this {}-rank communicator", self.nranks));
        }
        Ok(())
    }

    /// `count` elements per rank, all ranks together.
    pub(crate) fn total(&self, count: usize) -> Result<usize> {
        count
            .checked_mul(self.nranks)
            .map_or_else(|| invalid(format!("count {count} x {} ranks overflows", self.nranks)), Ok)
    }

    /// Checks a rooted or unrooted collective's buffers (`elem` bytes per element).
    pub(crate) fn collective(
        &self, coll: Collective, send: &Buf, recv: &Buf, count: usize, root: usize, elem: usize,
    ) -> Result<()> {
        let name = coll.name();
        let Some(need) = need(coll) else {
            return invalid(format!("{name} has no single count for both buffers"));
        };
        if matches!(need.send.1, Used::AtRoot) || matches!(need.recv.1, Used::AtRoot) {
            self.root(root)?;
        }
        let used = |u: Used| matches!(u, Used::Everywhere) || self.rank == root;
        for (side, buf, (size, u)) in [("send", send, need.send), ("recv", recv, need.recv)] {
            let want = match size {
                Size::Count => count,
                Size::PerRank => self.total(count)?,
            };
            if used(u) && buf.len < want {
                return invalid(format!("{name} {side} buffer holds {} elements, {want} are needed", buf.len));
            }
        }
        if !(used(need.send.1) && used(need.recv.1)) {
            return Ok(());
        }
        let block = |big: &Buf| big.bytes.start + self.rank * count * elem;
        let (small, big, what) = match need.in_place {
            InPlace::SameStart => {
                if send.bytes.start != recv.bytes.start && overlap(&send.bytes, &recv.bytes) {
                    return invalid(format!("{name}: send and recv buffers overlap without being the same (in place)"));
                }
                return Ok(());
            }
            InPlace::SendIsRecvBlock => (send, recv, "send"),
            InPlace::RecvIsSendBlock => (recv, send, "recv"),
        };
        let small_used = small.bytes.start..small.bytes.start + count * elem;
        if count > 0 && overlap(&small_used, &big.bytes) && small.bytes.start != block(big) {
            return invalid(format!(
                "{name}: buffers overlap; in place, the per-rank ({what}) buffer must be block {} of the full one",
                self.rank
            ));
        }
        Ok(())
    }

    /// Checks a point-to-point call: each side given is (buffer, count, peer).
    pub(crate) fn sendrecv(
        &self, send: Option<(Buf, usize, usize)>, recv: Option<(Buf, usize, usize)>, elem: usize,
    ) -> Result<()> {
        for (side, (buf, count, peer)) in
            [("send", &send), ("recv", &recv)].into_iter().filter_map(|(s, x)| x.as_ref().map(|x| (s, x)))
        {
            self.peer(*peer)?;
            if buf.len < *count {
                return invalid(format!("{side} buffer holds {} elements, {count} are needed", buf.len));
            }
        }
        if let (Some((s, sc, _)), Some((r, rc, _))) = (&send, &recv) {
            let used = |b: &Buf, n: usize| b.bytes.start..b.bytes.start + n * elem;
            if *sc > 0 && *rc > 0 && overlap(&used(s, *sc), &used(r, *rc)) {
                return invalid("sendrecv send and recv buffers overlap");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One-range lists are meant: each is a side's set of blocks.
    #[allow(clippy::single_range_in_vec_init)]
    #[test]
    fn disjoint_finds_any_cross_overlap() {
        assert!(disjoint(&[0..4, 8..12], &[4..8, 12..16]));
        assert!(disjoint(&[0..4, 2..6], &[6..8]), "overlap on one side only");
        assert!(!disjoint(&[0..4], &[3..5]));
        assert!(!disjoint(&[0..100], &[10..20, 200..300]), "inside a long earlier range");
        assert!(!disjoint(&[5..6], &[0..2, 1..10]));
        assert!(disjoint(&[3..3], &[0..10]), "empty");
    }

    fn buf(start: usize, len: usize) -> Buf {
        Buf { len, bytes: start..start + len * 4 }
    }

    #[test]
    fn the_table_refuses_what_each_collective_cannot_use() {
        let g = Group { rank: 1, nranks: 3 };
        let ok = |c, s: &Buf, r: &Buf, n, root| g.collective(c, s, r, n, root, 4);
        assert!(ok(Collective::AllReduce, &buf(0, 4), &buf(0, 4), 4, 0).is_ok(), "in place");
        assert!(ok(Collective::AllReduce, &buf(0, 4), &buf(4, 4), 4, 0).is_err(), "overlap, not in place");
        assert!(ok(Collective::AllReduce, &buf(0, 3), &buf(100, 4), 4, 0).is_err(), "short send");
        // Broadcast: a non-root's send buffer is not read, so its size does not matter.
        assert!(ok(Collective::Broadcast, &buf(0, 0), &buf(100, 4), 4, 0).is_ok());
        assert!(ok(Collective::Broadcast, &buf(0, 0), &buf(100, 4), 4, 1).is_err(), "the root's send is read");
        assert!(ok(Collective::Reduce, &buf(0, 4), &buf(100, 4), 4, 3).is_err(), "bad root");
        // AllGather in place: send is block `rank` of recv.
        assert!(ok(Collective::AllGather, &buf(16, 4), &buf(0, 12), 4, 0).is_ok());
        assert!(ok(Collective::AllGather, &buf(0, 4), &buf(0, 12), 4, 0).is_err(), "block 0 is not rank 1's");
        assert!(ok(Collective::AllGather, &buf(100, 4), &buf(0, 11), 4, 0).is_err(), "short recv");
        // ReduceScatter in place: recv is block `rank` of send.
        assert!(ok(Collective::ReduceScatter, &buf(0, 12), &buf(16, 4), 4, 0).is_ok());
        assert!(ok(Collective::ReduceScatter, &buf(0, 12), &buf(4, 4), 4, 0).is_err());
        assert!(Group { rank: 0, nranks: 2 }.total(usize::MAX).is_err(), "overflow");
        assert!(g.sendrecv(Some((buf(0, 4), 4, 2)), Some((buf(16, 4), 4, 0)), 4).is_ok());
        assert!(g.sendrecv(Some((buf(0, 4), 4, 3)), None, 4).is_err(), "bad peer");
        assert!(g.sendrecv(None, Some((buf(0, 4), 5, 0)), 4).is_err(), "short recv");
        assert!(g.sendrecv(Some((buf(0, 4), 4, 2)), Some((buf(8, 4), 4, 0)), 4).is_err(), "overlap");
        assert!(g.sendrecv(Some((buf(0, 4), 0, 2)), Some((buf(0, 4), 4, 0)), 4).is_ok(), "nothing sent");
    }
}
