//! What a rank's bootstrap waits know of peers that are gone: during init, the link to its
//! root ([`RootLink`]: the root sees a rank's death or failure, or dies itself); after
//! init, what the communicator learns (its failure board: a peer process's exit, a closed
//! network connection), for later exchanges such as split and shrink. A collective wait
//! (all_gather, barrier) ends when any rank is gone, a wait on one peer (send, recv) only
//! when that peer is.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::error::{BootstrapError, Result};
use super::link::RootLink;
use super::wait::Watch;

/// How long a wait that lost a peer's connection waits for word of which rank died (the
/// root hears of a death as soon as the peer does; a process exit is seen within ~0.1 s):
/// it then names the rank that died first, not only the neighbour that saw it.
const GONE_GRACE: Duration = Duration::from_secs(1);
/// Poll interval meanwhile.
const GRACE_POLL: Duration = Duration::from_millis(20);

/// After init: whether rank `q` is known to be gone.
type Gone = Box<dyn Fn(usize) -> bool + Send + Sync>;

pub(crate) struct Liveness {
    rank: usize,
    nranks: usize,
    pub link: RootLink,
    gone: OnceLock<Gone>,
}

impl Liveness {
    pub fn new(rank: usize, nranks: usize, link: RootLink) -> Liveness {
        Liveness { rank, nranks, link, gone: OnceLock::new() }
    }

    /// Sets where the waits after init learn that a rank is gone (once).
    pub fn set_gone(&self, gone: Gone) {
        if self.gone.set(gone).is_err() {
            tracing::warn!(rank = self.rank, "jitccl bootstrap: the peers are watched already");
        }
    }
}

impl Watch for Liveness {
    /// `Err` naming the rank, once a rank that `op` waits on (`peer`, or every rank) is
    /// known to be gone.
    fn check(&self, op: &'static str, peer: Option<usize>) -> Result<()> {
        self.link.check(op)?;
        let Some(gone) = self.gone.get() else { return Ok(()) };
        let dead = match peer {
            Some(p) => gone(p).then_some(p),
            None => (0..self.nranks).find(|&q| q != self.rank && gone(q)),
        };
        match dead {
            Some(culprit) => Err(BootstrapError::PeerGone {
                op,
                rank: Some(self.rank),
                culprit,
                how: "is gone: its process exited or its connection closed".into(),
            }),
            None => Ok(()),
        }
    }

    /// Why a peer was lost during `op` (waiting on `peer`, or every rank), if word of a
    /// rank that is gone comes within [`GONE_GRACE`].
    fn why_lost(&self, op: &'static str, peer: Option<usize>) -> Option<BootstrapError> {
        let end = Instant::now() + GONE_GRACE;
        loop {
            if let Err(why) = self.check(op, peer) {
                return Some(why);
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() || !(self.link.is_live() || self.gone.get().is_some()) {
                return None;
            }
            let wait = left.min(GRACE_POLL);
            if !self.link.is_live() {
                std::thread::sleep(wait);
            } else if self.link.poll(wait).is_err() {
                return None;
            }
        }
    }
}
