//! What the server may hold, so that no client — misbehaving or merely too many — can make
//! it run out of memory or file descriptors, or flood its log: the limits, the counters the
//! server keeps against them, a warning throttle, and a spare descriptor to refuse
//! connections with when the process has none left.

use std::fs::File;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Limits of one server. Per connection, the protocol's own limits already bound what one
/// request can make the server hold (a frame, a reply, a parked WAIT's keys).
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    /// Most open connections. Past it, the oldest connection that has not sent VALIDATE
    /// yet is closed to make room, or else the new connection is closed at once (refused).
    pub max_conns: usize,
    /// Most bytes buffered for all connections together (requests being received, replies
    /// not yet sent, parked WAITs' keys): a connection whose buffers grow past it is closed.
    pub max_buffered: usize,
    /// A connection that has not sent VALIDATE within this time is closed.
    pub validate_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_conns: conn_cap(nofile_limit()),
            max_buffered: 512 << 20,
            validate_timeout: Duration::from_secs(10),
        }
    }
}

/// The process's soft limit on open descriptors.
fn nofile_limit() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit into the valid, exclusively borrowed `lim`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    lim.rlim_cur
}

/// Connections allowed under a descriptor limit of `nofile`: an eighth of it (and 16) is
/// left to the rest of the process — the server usually shares it with a communicator.
fn conn_cap(nofile: u64) -> usize {
    let cap = nofile.saturating_sub(nofile / 8 + 16).clamp(16, 1 << 20);
    cap as usize
}

/// Counters of a running server, shared with its handle.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    conns: AtomicUsize,
    buffered: AtomicUsize,
    warnings: AtomicU64,
}

impl Stats {
    /// Open connections.
    pub fn conns(&self) -> usize {
        self.conns.load(Ordering::Relaxed)
    }

    /// Bytes buffered for all connections (see [`Limits::max_buffered`]).
    pub fn buffered(&self) -> usize {
        self.buffered.load(Ordering::Relaxed)
    }

    /// Warning lines logged (suppressed ones not counted).
    pub fn warnings(&self) -> u64 {
        self.warnings.load(Ordering::Relaxed)
    }

    pub(super) fn set(&self, conns: usize, buffered: usize) {
        self.conns.store(conns, Ordering::Relaxed);
        self.buffered.store(buffered, Ordering::Relaxed);
    }

    pub(super) fn warned(&self) {
        self.warnings.fetch_add(1, Ordering::Relaxed);
    }
}

/// At most one warning line per second: any client can make the server warn (a malformed
/// frame, a refused connection), and a loop of them must not flood the log.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    last: Option<Instant>,
    suppressed: u64,
}

impl Throttle {
    const PERIOD: Duration = Duration::from_secs(1);

    /// Whether a line may be logged at `now`; if so, how many were suppressed before it.
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        if self.last.is_some_and(|t| now.saturating_duration_since(t) < Self::PERIOD) {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// A descriptor held in reserve: when accept fails for want of descriptors, it is freed to
/// accept the waiting connection and close it at once — refused, instead of left hanging in
/// the backlog — and then taken again.
pub(crate) struct SpareFd(Option<File>);

impl SpareFd {
    pub fn new() -> SpareFd {
        SpareFd(File::open("/dev/null").ok())
    }

    /// Frees the descriptor; false if there was none to free.
    pub fn release(&mut self) -> bool {
        self.0.take().is_some()
    }

    pub fn restore(&mut self) {
        if self.0.is_none() {
            self.0 = File::open("/dev/null").ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_allows_one_line_a_second_and_counts_the_rest() {
        let mut t = Throttle::default();
        let t0 = Instant::now();
        assert_eq!(t.allow(t0), Some(0));
        assert_eq!(t.allow(t0 + Duration::from_millis(10)), None);
        assert_eq!(t.allow(t0 + Duration::from_millis(999)), None);
        assert_eq!(t.allow(t0 + Duration::from_millis(1000)), Some(2));
        assert_eq!(t.allow(t0 + Duration::from_millis(1500)), None);
    }

    #[test]
    fn connection_cap_leaves_room_below_the_descriptor_limit() {
        assert_eq!(conn_cap(1024), 880);
        assert_eq!(conn_cap(64), 40);
        assert_eq!(conn_cap(10), 16);
        assert_eq!(conn_cap(u64::MAX), 1 << 20);
    }
}
