//! Connections arriving at a rank's listening socket: the ring predecessor, and one
//! connection per send/recv message (the root talks on the rank's link instead). With a
//! key, the predecessor's first proves that it knows it (the handshake of [`crate::auth`]),
//! and a message carries a seal made for this rank's session ([`crate::auth::seal`]: a
//! sender does not wait for its receiver). Anything that is not a well-formed message of
//! this communicator is logged and dropped.
//!
//! Connections are accepted as they come and their headers read concurrently (one `poll`
//! over the listener and every connection whose header is incomplete), so a stranger's
//! silent or slow connections never delay the real ones: each is dropped after
//! [`HEADER_TIMEOUT`], and beyond [`MAX_PENDING`] of them the oldest is dropped.

use std::collections::VecDeque;
use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use socket2::Socket;

use super::error::{BootstrapError, Result};
use super::lock;
use super::net::{self, Opening};
use super::wait::Waiter;
use super::wire::{Header, Kind, HEADER_BYTES};
use crate::auth::{Gate, JobKey, Refusal, Seen, Session, HELLO_LEN, SEAL_LEN};

/// A connection that has not sent its header (or a control message its payload) within
/// this time is dropped.
const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// Most connections whose header is still arriving; the oldest is dropped beyond it (real
/// peers send their header with the connection, so they are never the oldest for long).
const MAX_PENDING: usize = 128;

pub(crate) enum Incoming {
    /// The ring predecessor's connection (rank it claims).
    Ring(Socket, usize),
    P2p(Message),
}

/// One send/recv message.
pub(crate) struct Message {
    pub from: usize,
    pub tag: u64,
    pub data: Vec<u8>,
}

/// Messages received before they were asked for, in arrival order.
#[derive(Default)]
pub(crate) struct Mailbox {
    msgs: VecDeque<Message>,
}

impl Mailbox {
    pub fn push(&mut self, m: Message) {
        self.msgs.push_back(m);
    }

    /// The oldest message from `from` with `tag`.
    pub fn take(&mut self, from: usize, tag: u64) -> Option<Vec<u8>> {
        let i = self.msgs.iter().position(|m| m.from == from && m.tag == tag)?;
        self.msgs.remove(i).map(|m| m.data)
    }
}

/// A connection whose header is still arriving, or has arrived but waits for an older
/// connection from the same address (see [`Acceptor::next`]).
struct Pending {
    s: Socket,
    ip: Option<IpAddr>,
    /// The handshake, with a key, and the part of its current message that has arrived.
    gate: Option<(Gate, Vec<u8>)>,
    /// Came without the handshake (with a key): a send/recv message, whose seal is checked.
    sealed: bool,
    header: [u8; HEADER_BYTES],
    got: usize,
    since: Instant,
    done: Option<Header>,
}

/// Accepted connections: those whose header is incomplete, and those with a whole header
/// of this communicator, in arrival order.
#[derive(Default)]
struct Queue {
    pending: Vec<Pending>,
    ready: VecDeque<Ready>,
}

/// A connection whose header has arrived: whether its message is sealed.
struct Ready {
    s: Socket,
    h: Header,
    sealed: bool,
}

/// What a rank with a key checks messages with: the key, this rank's session nonce (which
/// the senders learn at init), the sequence numbers taken.
struct Sealing {
    key: JobKey,
    session: Session,
    seen: Mutex<Seen>,
}

/// A rank's listening socket and the connections accepted on it.
pub(crate) struct Acceptor {
    listener: Socket,
    sealing: Option<Sealing>,
    queue: Mutex<Queue>,
}

impl Acceptor {
    /// `key`: the communicator's, which every connection must prove that it knows; a
    /// session nonce is drawn for it.
    pub fn new(listener: Socket, key: Option<JobKey>) -> Result<Self> {
        let sealing = match key {
            Some(key) => {
                let session = crate::auth::new_session().map_err(|e| BootstrapError::io("a session nonce", e))?;
                Some(Sealing { key, session, seen: Mutex::default() })
            }
            None => None,
        };
        Ok(Self { listener, sealing, queue: Mutex::default() })
    }

    /// This rank's session nonce, with a key: what senders seal their messages to it for.
    pub fn session(&self) -> Option<Session> {
        self.sealing.as_ref().map(|s| s.session)
    }

    pub fn local_addr(&self) -> Result<SocketAddr> {
        net::local_addr(&self.listener)
    }

    /// Waits at most one slice for a connection with a valid header and reads its message.
    /// `Ok(None)`: nothing arrived, or a connection was rejected. Send/recv messages from one
    /// address are delivered in the order they were accepted (messages from one rank with
    /// one tag arrive in the order sent), so one waits for older incomplete connections from
    /// its address: a stranger elsewhere cannot delay it at all, one on the same host by at
    /// most [`HEADER_TIMEOUT`]. Nothing else waits.
    pub fn next(&self, nonce: u64, nranks: usize, w: &Waiter) -> Result<Option<Incoming>> {
        let Some(Ready { s, h, sealed }) = self.next_header(nonce, w)? else { return Ok(None) };
        let from = net::describe(&s);
        let sealing = self.sealing.as_ref().filter(|_| sealed);
        match read_body(s, h, nranks, sealing, w) {
            Ok(m) => Ok(Some(m)),
            Err(e) => {
                // The operation's own deadline or abort ends it; a bad connection does not.
                w.check()?;
                tracing::warn!(%from, error = %e, "jitccl bootstrap: rejected an incoming connection");
                Ok(None)
            }
        }
    }

    /// A connection whose whole header has arrived and is of this communicator, waiting at
    /// most one slice. The lock is held only for the poll and non-blocking reads, never
    /// while a payload is read, so other threads' receives go on.
    fn next_header(&self, nonce: u64, w: &Waiter) -> Result<Option<Ready>> {
        let mut queue = lock(&self.queue);
        if let Some(r) = queue.ready.pop_front() {
            return Ok(Some(r));
        }
        let Queue { pending, ready } = &mut *queue;
        let now = Instant::now();
        pending.retain(|p| {
            let keep = p.done.is_some() || now.duration_since(p.since) < HEADER_TIMEOUT;
            if !keep {
                tracing::debug!(from = %net::describe(&p.s), "jitccl bootstrap: dropping a connection that sent no header");
            }
            keep
        });
        w.check()?;
        let mut fds = Vec::with_capacity(1 + pending.len());
        fds.push(net::pollfd(self.listener.as_raw_fd(), libc::POLLIN));
        fds.extend(pending.iter().map(|p| net::pollfd(p.s.as_raw_fd(), libc::POLLIN)));
        net::poll(&mut fds, w.slice()).map_err(|e| BootstrapError::io(format!("{}: poll", w.op), e))?;

        // `fds[k + 1]` is the k-th entry before any removal.
        let mut i = 0;
        for fd in &fds[1..] {
            if fd.revents == 0 || pending[i].done.is_some() {
                i += 1;
                continue;
            }
            match read_header(&mut pending[i], nonce) {
                Ok(h) => {
                    pending[i].done = h;
                    i += 1;
                }
                Err(e) => {
                    let p = pending.remove(i);
                    tracing::warn!(from = %net::describe(&p.s), error = %e, "jitccl bootstrap: rejected an incoming connection");
                }
            }
        }
        if fds[0].revents != 0 {
            // Bounded, so a flood of connections cannot keep this thread accepting.
            for _ in 0..MAX_PENDING {
                let Some(s) = net::try_accept(&self.listener, w.op)? else { break };
                if pending.len() >= MAX_PENDING {
                    let p = pending.remove(pending.iter().position(|p| p.done.is_none()).unwrap_or(0));
                    tracing::debug!(from = %net::describe(&p.s), "jitccl bootstrap: too many incomplete connections, dropping the oldest");
                }
                let ip = s.peer_addr().ok().and_then(|a| a.as_socket()).map(|a| a.ip());
                let gate = match net::gate(self.sealing.as_ref().map(|s| &s.key)) {
                    Ok(gate) => gate.map(|g| (g, Vec::new())),
                    Err(e) => {
                        tracing::warn!(from = %net::describe(&s), error = %e, "jitccl bootstrap: dropping a connection");
                        continue;
                    }
                };
                let since = Instant::now();
                let header = [0; HEADER_BYTES];
                pending.push(Pending { s, ip, gate, sealed: false, header, got: 0, since, done: None });
            }
        }
        release(pending, ready);
        Ok(ready.pop_front())
    }
}

/// Moves, in accept order, each complete connection to `ready`; a send/recv message only
/// once no older connection from its address is incomplete (only those need an order).
fn release(pending: &mut Vec<Pending>, ready: &mut VecDeque<Ready>) {
    let mut i = 0;
    while i < pending.len() {
        if let Some(h) = pending[i].done {
            let ip = pending[i].ip;
            if h.kind != Kind::P2p || !pending[..i].iter().any(|q| q.done.is_none() && q.ip == ip) {
                let p = pending.remove(i);
                ready.push_back(Ready { s: p.s, h, sealed: p.sealed });
                continue;
            }
        }
        i += 1;
    }
}

/// Reads what has arrived of `p`'s handshake and header; the header once it is whole and
/// of this communicator. An error (refused, closed, wrong magic or nonce, unknown kind)
/// drops it. With a key, the first bytes are the handshake's hello (the ring predecessor)
/// or, for a sealed send/recv message only, its header: both are [`HEADER_BYTES`] long.
fn read_header(p: &mut Pending, nonce: u64) -> Result<Option<Header>> {
    const { assert!(HELLO_LEN == HEADER_BYTES) };
    let refused = |p: &Pending, detail: String| BootstrapError::Protocol { from: net::describe(&p.s), detail };
    loop {
        while p.got < HEADER_BYTES {
            match (&p.s).read(&mut p.header[p.got..]) {
                Ok(0) => return Err(BootstrapError::ConnectionClosed { op: "read a header", peer: None }),
                Ok(n) => p.got += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(BootstrapError::io("read a header", e)),
            }
        }
        let Some((gate, buf)) = p.gate.as_mut().filter(|(g, _)| !g.is_open()) else {
            return Header::decode(&p.header, nonce, &|| net::describe(&p.s)).map(Some);
        };
        if gate.wants() == HELLO_LEN && buf.is_empty() {
            if !Gate::may_begin(&p.header) {
                let h = Header::decode(&p.header, nonce, &|| net::describe(&p.s))?;
                if h.kind != Kind::P2p {
                    return Err(refused(p, Refusal::NoHandshake.to_string()));
                }
                (p.gate, p.sealed) = (None, true);
                return Ok(Some(h));
            }
            buf.extend_from_slice(&p.header);
        }
        match net::open_gate(gate, &p.s, buf) {
            // The header follows the handshake.
            Opening::Open => p.got = 0,
            Opening::More => return Ok(None),
            Opening::Refused(why) => return Err(refused(p, why)),
        }
    }
}

fn read_body(s: Socket, h: Header, nranks: usize, sealing: Option<&Sealing>, w: &Waiter) -> Result<Incoming> {
    let from = || net::describe(&s);
    let bad = |detail: String| BootstrapError::Protocol { from: from(), detail };
    match h.kind {
        Kind::RingConnect | Kind::P2p if h.rank as usize >= nranks => {
            Err(bad(format!("{:?} message from rank {} of a {nranks}-rank communicator", h.kind, h.rank)))
        }
        Kind::RingConnect if h.len == 0 => Ok(Incoming::Ring(s, h.rank as usize)),
        Kind::P2p => {
            let w = w.sub(w.op, Some(h.rank as usize));
            let data = net::read_payload(&s, h.len, &w)?;
            if let Some(sealing) = sealing {
                let mut seal = [0u8; SEAL_LEN];
                net::read_exact(&s, &mut seal, &w)?;
                let parts: [&[u8]; 2] = [&h.encode(), &data];
                lock(&sealing.seen)
                    .check(&sealing.key, &sealing.session, h.rank as usize, &parts, &seal)
                    .map_err(|why| bad(why.to_string()))?;
            }
            Ok(Incoming::P2p(Message { from: h.rank as usize, tag: h.tag, data }))
        }
        k => Err(bad(format!("unexpected {k:?} message on a new connection"))),
    }
}
