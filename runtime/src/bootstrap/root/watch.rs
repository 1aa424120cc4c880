//! The ranks' links as the root sees them, and its watch over them once it has replied:
//! until every rank has said `Done`, a rank whose link closes (its process died) or that
//! says `Failed` fails every other rank at once, told on their links; then `AllDone`.
//!
//! The watch has no deadline of its own: every wait of a rank's init has one, and a rank
//! that gives up fails, which ends the watch.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use socket2::Socket;

use super::{RootReport, RootState, TELL_TIMEOUT};
use crate::bootstrap::error::{BootstrapError, Result};
use crate::bootstrap::net;
use crate::bootstrap::wire::{decode_failure, Header, Kind, HEADER_BYTES, MAX_CONTROL_PAYLOAD};

/// A rank's link, from its hello on.
pub(super) struct Member {
    pub s: Socket,
    pub rank: usize,
    pub from: String,
    nonce: u64,
    /// Bytes of a message not complete yet.
    buf: Vec<u8>,
    /// The rank has finished init.
    pub done: bool,
    /// The rank runs in the root's process.
    pub with_root: bool,
}

/// How a rank left before init ended.
pub(super) enum Leave {
    /// Its link closed: its process died (or it dropped its bootstrap without a word).
    Closed,
    /// Its link carried nothing back for the link timeout (`net::watch_link`).
    Unreachable,
    /// It failed, and said why: rank `culprit` failed first, or (`None`) it did.
    Failed(Option<usize>, String),
    /// It sent what the protocol does not allow.
    Broken(String),
}

impl Leave {
    /// The error every other rank is told: rank `rank` left (or told of the rank that
    /// failed first).
    pub fn error(self, rank: usize) -> BootstrapError {
        let (culprit, how) = match self {
            Leave::Closed => {
                (rank, "is gone: its process died or left init (its connection to the bootstrap root closed)".into())
            }
            Leave::Unreachable => (
                rank,
                "is unreachable: its link to the bootstrap root carried nothing back for the link timeout \
                 (JITCCL_LINK_TIMEOUT)"
                    .into(),
            ),
            Leave::Failed(Some(culprit), how) => (culprit, how),
            Leave::Failed(None, why) => (rank, format!("failed during init: {why}")),
            Leave::Broken(why) => (rank, format!("broke the bootstrap protocol during init: {why}")),
        };
        BootstrapError::PeerGone { op: "root", rank: None, culprit, how }
    }
}

impl Member {
    pub fn new(s: Socket, rank: usize, from: String, nonce: u64, with_root: bool) -> Member {
        Member { s, rank, from, nonce, buf: Vec::new(), done: false, with_root }
    }

    /// Reads what the rank sent, without waiting: notes `Done`; `Some` when it left.
    pub fn read(&mut self) -> Option<Leave> {
        let mut tmp = [0u8; 512];
        // How the link ended, if it did: its messages before that are read first.
        let ended = loop {
            match (&self.s).read(&mut tmp) {
                Ok(0) => break Some(Leave::Closed),
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break None,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if net::is_unreachable(&e) => break Some(Leave::Unreachable),
                Err(_) => break Some(Leave::Closed),
            }
        };
        while self.buf.len() >= HEADER_BYTES {
            let b: &[u8; HEADER_BYTES] = self.buf[..HEADER_BYTES].try_into().unwrap();
            let h = match Header::decode(b, self.nonce, &|| self.from.clone()) {
                Ok(h) if h.len <= MAX_CONTROL_PAYLOAD => h,
                Ok(h) => return Some(Leave::Broken(format!("a {:?} message of {} bytes", h.kind, h.len))),
                Err(e) => return Some(Leave::Broken(e.to_string())),
            };
            let end = HEADER_BYTES + h.len as usize;
            if self.buf.len() < end {
                break;
            }
            let payload: Vec<u8> = self.buf.drain(..end).skip(HEADER_BYTES).collect();
            match h.kind {
                Kind::Done if !self.done => self.done = true,
                Kind::Failed => {
                    return Some(match decode_failure(&payload) {
                        Some((culprit, how)) => Leave::Failed(culprit, how),
                        None => Leave::Broken("a malformed failure".into()),
                    })
                }
                k => return Some(Leave::Broken(format!("an unexpected {k:?} message"))),
            }
        }
        ended
    }
}

impl RootState {
    /// Watches the links after the reply (see the module's documentation); late hellos are
    /// refused from now on (the listener closes), not left waiting.
    pub(super) fn watch(mut self, report: RootReport) -> Result<RootReport> {
        self.listener = None;
        loop {
            if self.abort.load(Ordering::Acquire) {
                let e = BootstrapError::Aborted { op: "root" };
                self.tell_all(&e, Duration::from_millis(500));
                return Err(e);
            }
            if self.members.iter().all(|m| m.done) {
                for m in self.telling_order() {
                    // A rank that cannot hear it is gone, after its init: nothing to tell.
                    let _ = self.send(m, Kind::AllDone, &[], TELL_TIMEOUT);
                }
                tracing::debug!(after = ?self.start.elapsed(), "jitccl bootstrap root: every rank finished init");
                return Ok(report);
            }
            let mut fds: Vec<_> = self.members.iter().map(|m| net::pollfd(m.s.as_raw_fd(), libc::POLLIN)).collect();
            net::poll(&mut fds, net::SLICE).map_err(|e| BootstrapError::io("bootstrap root: poll", e))?;
            for i in (0..self.members.len()).rev() {
                if fds[i].revents == 0 {
                    continue;
                }
                if let Some(leave) = self.members[i].read() {
                    let m = self.members.remove(i);
                    let e = leave.error(m.rank);
                    tracing::error!(error = %e, "jitccl bootstrap root: a rank left during init");
                    self.tell_all(&e, TELL_TIMEOUT);
                    return Err(e);
                }
            }
        }
    }
}

impl RootState {
    /// The members in the order to tell them what ends init: the ranks of the root's own
    /// process last, so that process (which may end as soon as its ranks hear it) cannot
    /// take the root with it before every other rank was told.
    pub(super) fn telling_order(&self) -> Vec<usize> {
        let (others, own): (Vec<usize>, Vec<usize>) =
            (0..self.members.len()).partition(|&m| !self.members[m].with_root);
        others.into_iter().chain(own).collect()
    }
}
