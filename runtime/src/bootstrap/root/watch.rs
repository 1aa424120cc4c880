//! The ranks' links as the root sees them, and its watch over them once it has replied:
//! until every rank has said `Done`, a rank whose link closes (its process died) or that
//! says `Failed` fails every other rank at once, told on their links; then `AllDone`.
//!
//! The watch has no deadline of its own: every wait of a rank's init has one, and a rank
//! that gives up fails, which ends the watch.
//!
//! A rank asks for TLS on its link (`StartTls`) once its communicator agreed to use it:
//! the root answers in the clear and serves the session from there; anything else from
//! that rank (bytes in the clear, another key) fails the communicator, naming the rank.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{RootReport, RootState, TELL_TIMEOUT};
use crate::auth::Tls;
use crate::bootstrap::error::{BootstrapError, Result};
use crate::bootstrap::net;
use crate::bootstrap::stream::Stream;
use crate::bootstrap::wait::{self, Waiter};
use crate::bootstrap::wire::{self, decode_failure, Header, Kind, HEADER_BYTES, MAX_CONTROL_PAYLOAD, ROOT_RANK};

/// A rank's link, from its hello on.
pub(super) struct Member {
    pub s: Stream,
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
    pub fn new(s: Stream, rank: usize, from: String, nonce: u64, with_root: bool) -> Member {
        Member { s, rank, from, nonce, buf: Vec::new(), done: false, with_root }
    }

    /// What to poll the link for (a TLS handshake may wait to send).
    pub fn pollfd(&self) -> libc::pollfd {
        net::pollfd(self.s.fd(), self.s.handshake_events() | libc::POLLIN)
    }

    /// Writes one message on the link, bounded by `limit`. Not abortable: the root uses it
    /// to report errors, aborts included.
    pub fn send(&mut self, kind: Kind, payload: &[u8], limit: Duration) -> Result<()> {
        static NEVER: AtomicBool = AtomicBool::new(false);
        let w = Waiter::new("root: tell a rank", Some(self.rank), limit, &NEVER);
        let msg = wire::message(Header::new(self.nonce, kind, ROOT_RANK, 0, payload.len()), payload);
        self.s.write_all(&msg, &w)
    }

    /// Reads what the rank sent, without waiting: notes `Done`, answers `StartTls` with
    /// `tls` (the job's, when it has a key); `Some` when it left.
    pub fn read(&mut self, tls: Option<&Tls>) -> Option<Leave> {
        match self.s.handshake() {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset) => {
                return Some(Leave::Closed)
            }
            Err(e) => return Some(Leave::Broken(format!("its link's TLS session did not open: {e}"))),
        }
        let mut tmp = [0u8; 512];
        // How the link ended, if it did: its messages before that are read first.
        let ended = loop {
            match self.s.read(&mut tmp) {
                Ok(0) => break Some(Leave::Closed),
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break None,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if net::is_unreachable(&e) => break Some(Leave::Unreachable),
                // Bytes the session cannot take: the rank left TLS (or never started it).
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    break Some(Leave::Broken(format!("its link carries TLS, and it sent what TLS does not read: {e}")))
                }
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
                Kind::StartTls if h.len == 0 => {
                    if let Err(why) = self.start_tls(tls) {
                        return Some(Leave::Broken(why));
                    }
                }
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

    /// Answers the rank's `StartTls` (in the clear, the last bytes so) and serves its
    /// session from here: `Err` says why the rank cannot have one.
    fn start_tls(&mut self, tls: Option<&Tls>) -> std::result::Result<(), String> {
        if self.s.is_secure() {
            return Err("it asked for TLS on a link that carries TLS".into());
        }
        // The rank waits for the answer before its session's first byte: more is not TLS.
        if !self.buf.is_empty() {
            return Err("it sent more after asking for TLS, before the root's answer".into());
        }
        let Some(tls) = tls else {
            return Err("it asked for TLS, which needs the job's key, and the root has none".into());
        };
        let session = tls.server().map_err(|e| format!("cannot open a TLS session: {e}"))?;
        self.send(Kind::StartTls, &[], TELL_TIMEOUT).map_err(|e| format!("cannot answer its TLS request: {e}"))?;
        self.s.secure(session);
        Ok(())
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
            let mut fds: Vec<_> = self.members.iter().map(Member::pollfd).collect();
            net::poll(&mut fds, wait::SLICE).map_err(|e| BootstrapError::io("bootstrap root: poll", e))?;
            for i in (0..self.members.len()).rev() {
                if fds[i].revents == 0 {
                    continue;
                }
                if let Some(leave) = self.members[i].read(self.tls.as_ref()) {
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
