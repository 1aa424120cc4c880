//! The group's watchdog (c10d's NCCL watchdog): it only watches. It retires the operations
//! the stream has passed (so that a Work nobody waits for still completes), and when the
//! oldest operation in flight has run longer than the group's timeout, it breaks the group
//! (the operation and every one behind it fail with an error naming the operation, its
//! sequence number and the peer it waited for) and aborts the communicator, so its kernel
//! stops and later calls fail.
//!
//! The communicator's own timeout normally equals the group's (the group creates it so):
//! a stalled kernel then ends by itself at about the same time with an error that names
//! the peer it waited for, so the watchdog first gives the operation [`grace`] to end with
//! it; only an operation that still does not end is cut short (its peer is then the send /
//! recv peer, or unknown).

use std::time::{Duration, Instant};

use crate::process_group::inflight::{Broken, Shared};

/// How often the watchdog looks at the oldest operation when nothing wakes it.
const POLL: Duration = Duration::from_millis(50);

/// How long an overdue operation may still end with its own error (which names the peer).
pub(crate) fn grace(timeout: Duration) -> Duration {
    (timeout / 2).min(Duration::from_secs(1))
}

/// Runs until the group closes and every operation has ended. An operation's time counts
/// from when it became the oldest in flight: those queued behind it wait their turn.
pub(crate) fn watch(shared: &Shared) {
    let timeout = shared.timeout;
    let tick = (timeout / 10).clamp(Duration::from_millis(5), POLL);
    // The oldest operation seen, and since when it is the oldest.
    let mut oldest: Option<(u64, Instant)> = None;
    let mut s = shared.lock();
    loop {
        shared.retire(&mut s);
        let Some(w) = s.works.front().cloned() else {
            if s.closing {
                return;
            }
            oldest = None;
            s = shared.wait(s, tick);
            continue;
        };
        let since = match oldest {
            Some((seq, since)) if seq == w.seq => since,
            _ => {
                let now = Instant::now();
                oldest = Some((w.seq, now));
                now
            }
        };
        if s.broken.is_none() && since.elapsed() >= timeout + grace(timeout) {
            let waiting =
                w.peer.map_or("an unknown peer (the kernel did not say)".to_string(), |p| format!("rank {p}"));
            let reason = format!(
                "timed out after {:.1} s (the group's timeout is {:.1} s) waiting for {waiting}; the watchdog aborted the communicator",
                since.elapsed().as_secs_f64(),
                timeout.as_secs_f64()
            );
            // Abort first, so whoever sees the failed work finds the communicator aborted.
            shared.comm.abort();
            let b = Broken { op: w.op.clone(), seq: w.seq, peer: w.peer, reason, timed_out: true };
            shared.break_group(&mut s, b);
            continue;
        }
        s = shared.wait(s, tick);
    }
}
