//! How a failure spreads: every rank's receive segment starts with a failure board, one
//! word per rank. A rank that fails writes, into the board of every peer it can reach, what
//! it knows of the first failure (its culprit); a net proxy writes its own rank's board when
//! a connection closes or a peer's proxy reports a failure. Kernels poll the word of the
//! peer they wait for (`Args::peer_failed`), so a wait on a failed rank ends at once, and
//! the error names the rank that failed first, not merely the neighbour that was waited on.

mod watch;

use std::sync::atomic::{AtomicI32, Ordering};

pub(crate) use watch::Watch;

/// Set in a board word when the failure was seen as a closed connection rather than
/// reported.
const CLOSED: i32 = 1 << 30;
/// Set in a board word when the rank's link stopped carrying anything for the link timeout.
const UNREACHABLE: i32 = 1 << 29;
/// Both: the writer's own link with the culprit failed with data in flight.
const LINK_LOST: i32 = CLOSED | UNREACHABLE;

/// How a failure became known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// A rank said it failed, naming the culprit.
    Reported,
    /// The writer saw the rank go: its connection closed or its process exited (the
    /// culprit is that rank).
    Closed,
    /// The rank's link carried nothing, not even TCP's acknowledgements, for the link
    /// timeout (the culprit is that rank).
    Unreachable,
    /// The writer's network link with the culprit failed with data in flight: written for
    /// every peer, so that whatever the writer's kernels wait on fails, naming the culprit.
    LinkLost,
}

/// What a board word says about one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Notice {
    /// The rank that failed first, as far as the writer knew.
    pub culprit: usize,
    pub seen: Seen,
}

impl Notice {
    /// The rank `rank` itself is gone, as `seen`.
    pub(crate) fn gone(rank: usize, seen: Seen) -> Notice {
        Notice { culprit: rank, seen }
    }

    /// A rank reported that `culprit` failed first.
    pub(crate) fn reported(culprit: usize) -> Notice {
        Notice { culprit, seen: Seen::Reported }
    }

    fn encode(self) -> i32 {
        let how = match self.seen {
            Seen::Reported => 0,
            Seen::Closed => CLOSED,
            Seen::Unreachable => UNREACHABLE,
            Seen::LinkLost => LINK_LOST,
        };
        (self.culprit as i32 + 1) | how
    }

    fn decode(w: i32) -> Option<Notice> {
        let seen = match w & (CLOSED | UNREACHABLE) {
            0 => Seen::Reported,
            CLOSED => Seen::Closed,
            UNREACHABLE => Seen::Unreachable,
            _ => Seen::LinkLost,
        };
        (w != 0).then(|| Notice { culprit: ((w & !(CLOSED | UNREACHABLE)) - 1) as usize, seen })
    }

    /// The writer saw the culprit itself go (rather than hearing of it).
    pub(crate) fn is_gone(self) -> bool {
        matches!(self.seen, Seen::Closed | Seen::Unreachable)
    }

    /// How the culprit's failure became known, for error messages.
    pub(crate) fn how(self, from: usize) -> String {
        match self.seen {
            Seen::Closed => format!("rank {from} is gone: its process exited or its connection closed"),
            Seen::Unreachable => format!(
                "rank {from} is unreachable: its network link carried nothing for the link timeout (JITCCL_LINK_TIMEOUT)"
            ),
            Seen::LinkLost => {
                format!("this rank's network link with rank {} failed with data in flight", self.culprit)
            }
            Seen::Reported if self.culprit == from => {
                format!("reported by rank {from} itself: it failed or was aborted")
            }
            Seen::Reported => format!("reported by rank {from}"),
        }
    }
}

/// One rank's failure board as mapped in this process: `nranks` words.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Board {
    words: *mut i32,
    nranks: usize,
}

// SAFETY: the words are only accessed atomically, and the segment holding them outlives
// every Board (the communicator owns both).
unsafe impl Send for Board {}
unsafe impl Sync for Board {}

impl Board {
    /// The board at `words`, which must point to `nranks` i32 words that outlive it.
    pub(crate) fn new(words: *mut i32, nranks: usize) -> Board {
        Board { words, nranks }
    }

    pub(crate) fn nranks(&self) -> usize {
        self.nranks
    }

    pub(crate) fn as_ptr(&self) -> *const i32 {
        self.words
    }

    fn word(&self, rank: usize) -> &AtomicI32 {
        assert!(rank < self.nranks, "rank {rank} out of a board of {}", self.nranks);
        // SAFETY: in bounds (above); i32 and AtomicI32 share their layout.
        unsafe { AtomicI32::from_ptr(self.words.add(rank)) }
    }

    /// Records that `rank` failed; the first notice about a rank stays.
    pub(crate) fn note(&self, rank: usize, notice: Notice) {
        let _ = self.word(rank).compare_exchange(0, notice.encode(), Ordering::AcqRel, Ordering::Acquire);
    }

    /// Records what `rank` itself says of its failure: it replaces whatever was there.
    pub(crate) fn announce(&self, rank: usize, notice: Notice) {
        self.word(rank).store(notice.encode(), Ordering::Release);
    }

    pub(crate) fn get(&self, rank: usize) -> Option<Notice> {
        Notice::decode(self.word(rank).load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_round_trip_and_the_first_stays() {
        let mut words = vec![0i32; 5];
        let b = Board::new(words.as_mut_ptr(), 5);
        b.note(3, Notice::gone(0, Seen::Closed));
        b.note(3, Notice::reported(4));
        b.note(1, Notice::reported(4));
        b.note(2, Notice::gone(2, Seen::Unreachable));
        assert_eq!(b.get(3), Some(Notice::gone(0, Seen::Closed)));
        assert_eq!(b.get(1), Some(Notice::reported(4)));
        assert_eq!(b.get(2), Some(Notice::gone(2, Seen::Unreachable)));
        assert!(b.get(2).unwrap().how(2).contains("unreachable"));
        let lost = Notice { culprit: 3, seen: Seen::LinkLost };
        b.note(4, lost);
        assert_eq!(b.get(4), Some(lost));
        assert!(!lost.is_gone() && lost.how(4).contains("link with rank 3 failed"), "{}", lost.how(4));
        assert_eq!(b.get(0), None);
        b.announce(1, Notice::reported(2));
        assert_eq!(b.get(1), Some(Notice::reported(2)), "a rank's own word replaces its notice");
    }
}
