//! The group's watchdog (c10d's NCCL watchdog): when the running operation has run
//! longer than the group's timeout, it breaks the group (the operation and every queued
//! one fail with an error naming the operation, its sequence number and the peer it waited
//! for) and aborts the communicator, so the kernel stops and later calls fail.
//!
//! The communicator's own timeout normally equals the group's (the group creates it so):
//! a stalled kernel then ends by itself at about the same time with an error that names
//! the peer it waited for, so the watchdog first gives the operation [`grace`] to end with
//! it; only an operation that still does not end is cut short (its peer is then the send /
//! recv peer, or unknown).

use std::time::Duration;

use crate::process_group::queue::{Broken, Shared, POLL};

/// How long an overdue operation may still end with its own error (which names the peer).
pub(crate) fn grace(timeout: Duration) -> Duration {
    (timeout / 2).min(Duration::from_secs(1))
}

/// Runs until the worker has exited.
pub(crate) fn watch(shared: &Shared) {
    let timeout = shared.timeout;
    let tick = (timeout / 10).clamp(Duration::from_millis(5), POLL);
    let mut q = shared.lock();
    while !q.worker_done {
        let overdue = match (&q.running, &q.broken) {
            (Some((w, since)), None) if since.elapsed() >= timeout + grace(timeout) => Some((w.clone(), *since)),
            _ => None,
        };
        if let Some((w, since)) = overdue {
            let waiting =
                w.peer.map_or("an unknown peer (the kernel did not say)".to_string(), |p| format!("rank {p}"));
            let reason = format!(
                "timed out after {:.1} s (the group's timeout is {:.1} s) waiting for {waiting}; the watchdog aborted the communicator",
                since.elapsed().as_secs_f64(),
                timeout.as_secs_f64()
            );
            // Abort first, so whoever sees the failed work finds the communicator aborted.
            shared.comm.abort();
            shared.break_group(&mut q, Broken { op: w.op, seq: w.seq, peer: w.peer, reason });
            continue;
        }
        q = shared.wait(q, tick);
    }
}
