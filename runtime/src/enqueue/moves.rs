//! AlltoAll, Gather and Scatter as point-to-point transfers: where each rank's blocks lie
//! (`Moves`, which the call carries), and the rounds they make, round k sending to rank + k
//! and receiving from rank - k. The rounds are derived only where a launch needs them: one
//! batch over the FIFOs (`batch`) or a launch per round (`Call::take_rounds`); a call the
//! direct kernel runs makes none.

use std::ops::Range;

use super::checks::{self, Group};

/// Where one side's blocks lie (addresses, as kernels use them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Spread {
    None,
    /// One block, to or from `peer`.
    One {
        peer: usize,
        at: usize,
    },
    /// A block per rank, rank q's at `at + q * block`, except rank `skip`'s (the root's own
    /// block of a Gather or Scatter in place, which does not move).
    Each {
        at: usize,
        skip: Option<usize>,
    },
}

impl Spread {
    /// Where peer `q`'s block starts, if this side has one.
    fn of(self, q: usize, block: usize) -> Option<usize> {
        match self {
            Spread::None => None,
            Spread::One { peer, at } => (peer == q).then_some(at),
            Spread::Each { at, skip } => (skip != Some(q)).then_some(at + q * block),
        }
    }

    /// The bytes its blocks cover together, if it has any.
    fn span(self, n: usize, block: usize) -> Option<Range<usize>> {
        match self {
            Spread::None => None,
            Spread::One { at, .. } => Some(at..at + block),
            Spread::Each { at, .. } => Some(at..at + n * block),
        }
    }
}

/// A call's blocks, each `block` bytes: those it sends and those it receives.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Moves {
    pub send: Spread,
    pub recv: Spread,
}

/// One round: its send (peer, address), its receive (peer, address), either absent.
pub(crate) type Round = (Option<(usize, usize)>, Option<(usize, usize)>);

impl Moves {
    /// Rank `group.rank`'s rounds over blocks of `block` bytes; those that move nothing
    /// are left out (every one where blocks are empty).
    pub(crate) fn rounds(self, group: Group, block: usize) -> impl Iterator<Item = Round> {
        let (rank, n) = (group.rank, group.nranks);
        (0..if block == 0 { 0 } else { n }).filter_map(move |k| {
            let (to, from) = ((rank + k) % n, (rank + n - k) % n);
            let send = self.send.of(to, block).map(|at| (to, at));
            let recv = self.recv.of(from, block).map(|at| (from, at));
            (send.is_some() || recv.is_some()).then_some((send, recv))
        })
    }

    /// Whether a block received would land on a block sent, among `n` ranks' blocks of
    /// `block` bytes. The spans are compared first: where they do not meet (the common
    /// case), no blocks do, and nothing is allocated.
    pub(crate) fn overlap(self, n: usize, block: usize) -> bool {
        match (self.send.span(n, block), self.recv.span(n, block)) {
            (Some(s), Some(r)) if block > 0 && checks::overlap(&s, &r) => {
                let blocks =
                    |s: Spread| (0..n).filter_map(|q| s.of(q, block)).map(|at| at..at + block).collect::<Vec<_>>();
                !checks::disjoint(&blocks(self.send), &blocks(self.recv))
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_k_sends_to_rank_plus_k_and_receives_from_rank_minus_k() {
        let all = Moves { send: Spread::Each { at: 1000, skip: None }, recv: Spread::Each { at: 5000, skip: None } };
        let got: Vec<Round> = all.rounds(Group { rank: 1, nranks: 3 }, 8).collect();
        let want = vec![
            (Some((1, 1008)), Some((1, 5008))),
            (Some((2, 1016)), Some((0, 5000))),
            (Some((0, 1000)), Some((2, 5016))),
        ];
        assert_eq!(got, want);
        assert_eq!(all.rounds(Group { rank: 1, nranks: 3 }, 0).count(), 0, "empty blocks move nothing");
    }

    #[test]
    fn a_gathers_rounds_skip_what_does_not_move() {
        // Root 2 of 4 in place: it receives from the three others only.
        let root = Moves { send: Spread::None, recv: Spread::Each { at: 0, skip: Some(2) } };
        let got: Vec<Round> = root.rounds(Group { rank: 2, nranks: 4 }, 4).collect();
        assert_eq!(got, vec![(None, Some((1, 4))), (None, Some((0, 0))), (None, Some((3, 12)))]);
        // Another rank sends its one block to the root and receives nothing.
        let leaf = Moves { send: Spread::One { peer: 2, at: 64 }, recv: Spread::None };
        assert_eq!(leaf.rounds(Group { rank: 0, nranks: 4 }, 4).collect::<Vec<_>>(), vec![(Some((2, 64)), None)]);
    }

    #[test]
    fn overlap_looks_at_the_blocks_where_the_spans_meet() {
        let each = |at| Spread::Each { at, skip: None };
        assert!(!Moves { send: each(0), recv: each(24) }.overlap(3, 8), "apart");
        assert!(Moves { send: each(0), recv: each(16) }.overlap(3, 8), "the last send block is the first recv block");
        // A root's one block inside its own slot of the receive buffer, not in place.
        let one = |at| Spread::One { peer: 1, at };
        assert!(Moves { send: one(4), recv: each(0) }.overlap(3, 8));
        // In place: its slot is skipped, and the block lands on nothing else.
        assert!(!Moves { send: one(8), recv: Spread::Each { at: 0, skip: Some(1) } }.overlap(3, 8));
        assert!(!Moves { send: each(0), recv: each(0) }.overlap(3, 0), "empty blocks overlap nothing");
    }
}
