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
/// Set when the writer's own network link with the culprit failed with data in flight.
const LINK: i32 = 1 << 29;

/// What a board word says about one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Notice {
    /// The rank that failed first, as far as the writer knew.
    pub culprit: usize,
    /// The writer saw the rank go: its connection closed or its process exited (the
    /// culprit is that rank).
    pub closed: bool,
    /// The writer's network link with the culprit failed with data in flight: written for
    /// every peer, so that whatever the writer's kernels wait on fails, naming the culprit.
    pub link: bool,
}

impl Notice {
    fn encode(self) -> i32 {
        (self.culprit as i32 + 1) | if self.closed { CLOSED } else { 0 } | if self.link { LINK } else { 0 }
    }

    fn decode(w: i32) -> Option<Notice> {
        (w != 0).then(|| Notice {
            culprit: ((w & !(CLOSED | LINK)) - 1) as usize,
            closed: w & CLOSED != 0,
            link: w & LINK != 0,
        })
    }

    /// How the culprit's failure became known, for error messages.
    pub(crate) fn how(self, from: usize) -> String {
        if self.link {
            format!("this rank's network link with rank {} failed with data in flight", self.culprit)
        } else if self.closed {
            format!("rank {from} is gone: its process exited or its connection closed")
        } else if self.culprit == from {
            format!("reported by rank {from} itself: it failed or was aborted")
        } else {
            format!("reported by rank {from}")
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
        b.note(3, Notice { culprit: 0, closed: true, link: false });
        b.note(3, Notice { culprit: 4, closed: false, link: false });
        b.note(1, Notice { culprit: 4, closed: false, link: false });
        assert_eq!(b.get(3), Some(Notice { culprit: 0, closed: true, link: false }));
        assert_eq!(b.get(1), Some(Notice { culprit: 4, closed: false, link: false }));
        assert_eq!(b.get(0), None);
        b.note(2, Notice { culprit: 4, closed: false, link: true });
        assert_eq!(b.get(2), Some(Notice { culprit: 4, closed: false, link: true }));
        b.announce(1, Notice { culprit: 2, closed: false, link: false });
        assert_eq!(
            b.get(1),
            Some(Notice { culprit: 2, closed: false, link: false }),
            "a rank's own word replaces its notice"
        );
    }
}
