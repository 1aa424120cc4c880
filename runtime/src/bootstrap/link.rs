//! A rank's link to its root: the connection its hello went on, kept open until every rank
//! the root serves has finished init. The root's reply and errors come on it, and so does
//! the root's word when a rank dies or fails before init has ended everywhere (the root
//! sees the rank's own link close); a link that closes before the root said `AllDone`
//! means the root itself is gone, with the process that ran it. Every wait of init looks
//! at the link (through its [`Waiter`] and [`super::liveness`]), so it ends at once,
//! naming the rank that is gone, instead of at its timeout.
//!
//! With `JITCCL_TLS=1` the link carries TLS from the point the communicator agreed to use
//! it ([`RootLink::start_tls`]): the rank asks (`StartTls`), the root answers, and both
//! switch after that answer, so no message is read half in the clear.

use std::fmt::Display;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rustls::Connection;

use super::error::{BootstrapError, Result};
use super::id::UniqueId;
use super::net;
use super::stream::Stream;
use super::wait::Waiter;
use super::wire::{self, Header, Hello, Kind, RootReply, HEADER_BYTES, MAX_CONTROL_PAYLOAD};
use crate::auth::Tls;

/// `host` when no rank is known to run the root.
const NO_HOST: usize = usize::MAX;

pub(crate) struct RootLink {
    rank: usize,
    /// The rank whose process runs the root, or [`NO_HOST`]: who to name when it is gone.
    host: AtomicUsize,
    state: Mutex<State>,
    /// Every root said `AllDone`, or this rank's init failed: the link has nothing more to say.
    retired: AtomicBool,
}

#[derive(Default)]
struct State {
    /// This rank's root first, then (the first rank of a block, with several roots) the root
    /// of the previous block.
    conns: Vec<Conn>,
    reply: Option<RootReply>,
    /// What ended this rank's init, replayed to every later wait, and the link it came on.
    ended: Option<Ended>,
    ended_by: usize,
}

struct Conn {
    s: Stream,
    root: SocketAddr,
    nonce: u64,
    /// Bytes of messages not complete yet.
    buf: Vec<u8>,
    all_done: bool,
    /// The session this rank asked the root for, until the root's answer opens it.
    asked: Option<Connection>,
}

enum Ended {
    /// A `RootError` payload: the communicator cannot form, or a rank died or failed.
    Root(Vec<u8>),
    /// The root at this address is gone (how, in words).
    Gone(SocketAddr, String),
}

impl RootLink {
    /// `host`: the rank known to run the root, if any (the root may say so later).
    pub fn new(rank: usize, host: Option<usize>) -> RootLink {
        RootLink {
            rank,
            host: AtomicUsize::new(host.unwrap_or(NO_HOST)),
            state: Mutex::default(),
            retired: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Says `hello` to `id`'s root and waits for its acknowledgement; the connection stays
    /// in the link. A root whose id it made itself was listening before the id existed,
    /// so a refused connection means it is gone; one named by an address may not be up yet.
    pub fn hello(&self, id: &UniqueId, rank: usize, hello: &Hello, w: &Waiter) -> Result<()> {
        let root = id.root_addr();
        let s = match id.root_was_listening() {
            true => net::connect(root, w),
            false => net::connect_retry(root, w),
        }
        .map_err(|e| match &e {
            BootstrapError::Io { source, .. } if source.raw_os_error() == Some(libc::ECONNREFUSED) => {
                let how = "refused the connection: it has ended (its process died, or it already served or failed \
                           its communicator)";
                self.gone(w.op, root, how.into())
            }
            _ => e,
        })?;
        if let Some(key) = id.key() {
            net::authenticate(&s, &key, rank, &format!("the bootstrap root at {root}"), w)?;
        }
        let payload = hello.encode();
        let header = Header::new(id.nonce(), Kind::Hello, rank as u32, 0, payload.len());
        // A root with a key closes the connection of a rank without one.
        let how = match id.key() {
            Some(_) => "closed the connection",
            None => {
                "closed the connection (if the job's other ranks have a key, JITCCL_AUTH_KEY or \
                     JITCCL_AUTH_KEY_FILE, this rank has none)"
            }
        };
        let closed = |e: BootstrapError| match e {
            BootstrapError::ConnectionClosed { .. } => self.gone(w.op, root, how.into()),
            e => e,
        };
        net::write_all(&s, &wire::message(header, &payload), w).map_err(closed)?;
        // Something else listening at the address (a wrong JITCCL_COMM_ID) fails here with
        // WrongMagic.
        let ack = net::read_header(&s, id.nonce(), w).map_err(closed)?;
        if ack.kind != Kind::HelloAck || ack.len != 4 {
            return Err(BootstrapError::Protocol {
                from: format!("the root at {root}"),
                detail: format!("expected a hello acknowledgement, got {:?} of {} bytes", ack.kind, ack.len),
            });
        }
        let host = net::read_payload(&s, ack.len, w).map_err(closed)?;
        self.learn_host(&host);
        let conn = Conn { s: Stream::new(s), root, nonce: id.nonce(), buf: Vec::new(), all_done: false, asked: None };
        self.lock().conns.push(conn);
        Ok(())
    }

    fn learn_host(&self, payload: &[u8]) {
        if let Some(h) = wire::u32_at(payload, 0).checked_sub(1) {
            self.host.store(h as usize, Ordering::Relaxed);
        }
    }

    /// Waits for this rank's root to tell it its ring successor.
    pub fn wait_reply(&self, w: &Waiter) -> Result<RootReply> {
        loop {
            {
                let mut st = self.lock();
                st.pump(self);
                if let Some(r) = st.reply.take() {
                    return Ok(r);
                }
                if let Some(e) = &st.ended {
                    return Err(self.error(w.op, e));
                }
            }
            w.check()?;
            self.poll(w.slice())?;
        }
    }

    /// `Err` once the root said that init cannot complete, or is gone.
    pub fn check(&self, op: &'static str) -> Result<()> {
        if self.retired.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut st = self.lock();
        st.pump(self);
        match &st.ended {
            Some(e) => Err(self.error(op, e)),
            None => Ok(()),
        }
    }

    /// Whether the link still speaks for the roots (init has not ended).
    pub fn is_live(&self) -> bool {
        !self.retired.load(Ordering::Acquire)
    }

    /// This rank's init is complete: tells its roots, and waits until each says every
    /// rank is done (so no root's process ends while a rank still needs it), or why not.
    /// Writes on the links hold the link, so their waits do not look at it (`unwatched`).
    pub fn done(&self, w: &Waiter) -> Result<()> {
        if self.retired.load(Ordering::Acquire) {
            return Ok(());
        }
        {
            let mut st = self.lock();
            for c in &mut st.conns {
                let msg = Header::new(c.nonce, Kind::Done, self.rank as u32, 0, 0).encode();
                c.s.write_all(&msg, &w.unwatched())?;
            }
        }
        loop {
            {
                let mut st = self.lock();
                st.pump(self);
                if let Some(e) = &st.ended {
                    return Err(self.error(w.op, e));
                }
                if st.conns.iter().all(|c| c.all_done) {
                    self.retired.store(true, Ordering::Release);
                    return Ok(());
                }
            }
            w.check()?;
            self.poll(w.slice())?;
        }
    }

    /// From now on the links carry TLS (`tls`, pinned to the job's key): asks each root,
    /// and waits until each session is open, or why not (the root refused it, or is gone).
    pub fn start_tls(&self, tls: &Tls, w: &Waiter) -> Result<()> {
        {
            let mut st = self.lock();
            if let Some(e) = &st.ended {
                return Err(self.error(w.op, e));
            }
            for c in &mut st.conns {
                let msg = Header::new(c.nonce, Kind::StartTls, self.rank as u32, 0, 0).encode();
                c.s.write_all(&msg, &w.unwatched())?;
                c.asked = Some(tls.client().map_err(|e| BootstrapError::io(format!("{}: TLS", w.op), e))?);
            }
        }
        loop {
            {
                let mut st = self.lock();
                st.pump(self);
                if let Some(e) = &st.ended {
                    return Err(self.error(w.op, e));
                }
                if st.conns.iter().all(|c| c.s.is_secure()) {
                    return Ok(());
                }
            }
            w.check()?;
            self.poll(w.slice())?;
        }
    }

    /// This rank's init failed with `why`: tells its roots (best effort, without waiting),
    /// and they tell their ranks. What a root said first (a rank that is gone, ...) is
    /// passed on to the other roots instead, so a word from one root reaches the ranks of
    /// another through the rank that hears both.
    pub fn fail(&self, why: &dyn Display) {
        self.tell_failure(Some(why))
    }

    fn tell_failure(&self, why: Option<&dyn Display>) {
        if self.retired.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut st = self.lock();
        let (culprit, text) = match (&st.ended, why) {
            (Some(e), _) => match self.error("init", e) {
                BootstrapError::PeerGone { culprit, how, .. } => (culprit as u32, how),
                e => (wire::ROOT_RANK, e.to_string()),
            },
            (None, Some(why)) => (wire::ROOT_RANK, why.to_string()),
            // Left without a word: the closed link says it.
            (None, None) => return,
        };
        let payload = wire::encode_failure(culprit, &text);
        let skip = st.ended.as_ref().map(|_| st.ended_by);
        for (_, c) in st.conns.iter_mut().enumerate().filter(|(i, _)| Some(*i) != skip) {
            let msg = wire::message(Header::new(c.nonce, Kind::Failed, self.rank as u32, 0, payload.len()), &payload);
            // The link is empty (a rank sends nothing else): one write takes it all.
            if let Err(e) = c.s.write(&msg).and_then(|_| c.s.flush()) {
                tracing::debug!(rank = self.rank, root = %c.root, error = %e, "jitccl bootstrap: cannot tell the root");
            }
        }
    }

    /// Waits up to `d` for anything on the links.
    pub fn poll(&self, d: Duration) -> Result<()> {
        let mut fds: Vec<libc::pollfd> = {
            let st = self.lock();
            st.conns.iter().map(|c| net::pollfd(c.s.fd(), c.s.handshake_events() | libc::POLLIN)).collect()
        };
        if fds.is_empty() {
            std::thread::sleep(d);
            return Ok(());
        }
        net::poll(&mut fds, d).map_err(|e| BootstrapError::io("poll the links to the roots", e))?;
        Ok(())
    }

    fn gone(&self, op: &'static str, root: SocketAddr, how: String) -> BootstrapError {
        self.error(op, &Ended::Gone(root, how))
    }

    /// `e` as the error of this rank's `op`.
    fn error(&self, op: &'static str, e: &Ended) -> BootstrapError {
        let rank = self.rank;
        match e {
            Ended::Root(payload) => match wire::decode_error(payload, "the root") {
                BootstrapError::PeerGone { culprit, how, .. } => {
                    BootstrapError::PeerGone { op, rank: Some(rank), culprit, how }
                }
                BootstrapError::MissingRanks { missing, nranks, after, .. } => {
                    BootstrapError::MissingRanks { rank: Some(rank), missing, nranks, after }
                }
                other => other,
            },
            Ended::Gone(root, how) => match self.host.load(Ordering::Relaxed) {
                host if host != NO_HOST && host != rank => BootstrapError::PeerGone {
                    op,
                    rank: Some(rank),
                    culprit: host,
                    how: format!("is gone: the bootstrap root it ran at {root} {how}"),
                },
                _ => BootstrapError::RootGone { op, rank, root: *root, how: how.clone() },
            },
        }
    }
}

impl Drop for RootLink {
    /// Dropped before init ended: what a root said first still goes to the others.
    fn drop(&mut self) {
        self.tell_failure(None)
    }
}

impl State {
    /// Reads what the roots have sent, without waiting.
    fn pump(&mut self, link: &RootLink) {
        if self.ended.is_some() {
            return;
        }
        for (i, c) in self.conns.iter_mut().enumerate() {
            if let Some(e) = c.pump(link, &mut self.reply) {
                (self.ended, self.ended_by) = (Some(e), i);
                return;
            }
        }
    }
}

impl Conn {
    /// Reads what this root has sent, without waiting: a reply goes to `reply`; `Some`
    /// when it ended this rank's init.
    fn pump(&mut self, link: &RootLink, reply: &mut Option<RootReply>) -> Option<Ended> {
        let root = self.root;
        let gone = |how: String| Some(Ended::Gone(root, how));
        if let Err(e) = self.s.handshake() {
            return gone(format!("refused this rank's TLS session: {e}"));
        }
        let eof = match self.fill() {
            Ok(eof) => eof,
            Err(e) if net::is_unreachable(&e) => {
                return gone(
                    "is unreachable: its link carried nothing back for the link timeout (JITCCL_LINK_TIMEOUT)".into(),
                )
            }
            Err(e) => return gone(format!("broke its connection ({e})")),
        };
        loop {
            match self.next_message() {
                Ok(None) => break,
                Ok(Some((Kind::HelloAck, p))) if p.len() == 4 => link.learn_host(&p),
                Ok(Some((Kind::RootReply, p))) => match RootReply::decode(&p) {
                    Some(r) => *reply = Some(r),
                    None => return gone("sent a malformed reply".into()),
                },
                Ok(Some((Kind::RootError, p))) => return Some(Ended::Root(p)),
                Ok(Some((Kind::AllDone, _))) => self.all_done = true,
                Ok(Some((Kind::StartTls, p))) if p.is_empty() => {
                    // The root's last bytes in the clear: what follows them is the session's.
                    let (Some(session), true) = (self.asked.take(), self.buf.is_empty()) else {
                        return gone("answered a TLS request this rank did not make, or sent more after it".into());
                    };
                    self.s.secure(session);
                    if let Err(e) = self.s.handshake() {
                        return gone(format!("refused this rank's TLS session: {e}"));
                    }
                    break;
                }
                Ok(Some((kind, _))) => return gone(format!("sent an unexpected {kind:?} message")),
                Err(e) => return gone(format!("broke the protocol: {e}")),
            }
        }
        (eof && !self.all_done).then(|| Ended::Gone(root, "closed its connection before init ended".into()))
    }

    /// Reads what has arrived; true once the root has closed its side.
    fn fill(&mut self) -> std::io::Result<bool> {
        let mut tmp = [0u8; 512];
        loop {
            match self.s.read(&mut tmp) {
                Ok(0) => return Ok(true),
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(true),
                Err(e) => return Err(e),
            }
        }
    }

    /// The next whole message in `buf`, taken out of it.
    fn next_message(&mut self) -> Result<Option<(Kind, Vec<u8>)>> {
        let Some(b) = self.buf.get(..HEADER_BYTES) else { return Ok(None) };
        let h = Header::decode(b.try_into().unwrap(), self.nonce, &|| format!("the root at {}", self.root))?;
        if h.len > MAX_CONTROL_PAYLOAD {
            return Err(BootstrapError::Protocol {
                from: format!("the root at {}", self.root),
                detail: format!("{:?} message of {} bytes", h.kind, h.len),
            });
        }
        let end = HEADER_BYTES + h.len as usize;
        if self.buf.len() < end {
            return Ok(None);
        }
        let payload = self.buf[HEADER_BYTES..end].to_vec();
        self.buf.drain(..end);
        Ok(Some((h.kind, payload)))
    }
}
