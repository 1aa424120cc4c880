//! Socket helpers: every blocking operation is a loop of `poll` calls no longer than a
//! [`Waiter`]'s slice, checking the abort flag, the link to the root (during init) and the
//! deadline between them, so no wait outlives its timeout, and an abort or a rank's death is seen
//! within one slice. Sockets are socket2 sockets in non-blocking mode; writes use `send`
//! (MSG_NOSIGNAL on Linux: a closed peer is an error, not a SIGPIPE).

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};

use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, SockRef, Socket, TcpKeepalive, Type};

use super::error::{BootstrapError, Result};
use super::wait::Waiter;
use super::wire::{Header, HEADER_BYTES};
use crate::auth::{Gate, Initiator, JobKey, Refusal, Service, REPLY_LEN};
use crate::settings::LINK_TIMEOUT;

/// `poll(2)` over `fds` for at most `timeout`; EINTR counts as "nothing ready".
pub fn poll(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<usize> {
    let ms = timeout.as_millis().clamp(0, i32::MAX as u128) as libc::c_int;
    // SAFETY: `fds` is a valid, exclusively borrowed slice of pollfd for the whole call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(n as usize)
}

pub fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd { fd, events, revents: 0 }
}

/// Waits up to one slice for `events` on `fd`.
fn wait_fd(fd: RawFd, events: libc::c_short, w: &Waiter) -> Result<()> {
    let mut p = [pollfd(fd, events)];
    poll(&mut p, w.slice()).map_err(|e| BootstrapError::io(format!("{}: poll", w.op), e))?;
    Ok(())
}

fn is_closed(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
            | io::ErrorKind::WriteZero
            | io::ErrorKind::NotConnected
    )
}

/// Whether a connection failed because its peer acknowledged nothing for the link timeout.
pub fn is_unreachable(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::TimedOut
}

/// Makes a TCP connection fail (`TimedOut`) once its peer has acknowledged nothing for
/// `link_timeout` while something was owed to it, or answered no keepalive probe for as
/// long while idle. TCP resends what a shorter cut of the link dropped, so such a cut is
/// survived; a peer that is merely slow still acknowledges, so it is never taken for
/// unreachable.
pub(crate) fn watch_link(s: SockRef<'_>, link_timeout: Duration) -> io::Result<()> {
    s.set_tcp_user_timeout(Some(link_timeout))?;
    // Probes (whole seconds) often enough that an idle link's loss is seen within about a
    // tenth of the timeout after it.
    let probe = (link_timeout / 10).max(Duration::from_secs(1));
    s.set_tcp_keepalive(&TcpKeepalive::new().with_time(probe).with_interval(probe))
}

/// Reads exactly `buf.len()` bytes.
pub fn read_exact(s: &Socket, buf: &mut [u8], w: &Waiter) -> Result<()> {
    let mut off = 0;
    while off < buf.len() {
        match (&*s).read(&mut buf[off..]) {
            Ok(0) => return Err(w.closed()),
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                w.check()?;
                wait_fd(s.as_raw_fd(), libc::POLLIN, w)?;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if is_closed(&e) => return Err(w.closed()),
            Err(e) if is_unreachable(&e) => return Err(w.unreachable(w.peer)),
            Err(e) => return Err(BootstrapError::io(format!("{}: read", w.op), e)),
        }
    }
    Ok(())
}

/// Reads a payload of `len` bytes, growing the buffer as bytes arrive (a corrupt length
/// cannot make us allocate it up front).
pub fn read_payload(s: &Socket, len: u64, w: &Waiter) -> Result<Vec<u8>> {
    const CHUNK: usize = 1 << 20;
    let len = usize::try_from(len).map_err(|_| BootstrapError::Protocol {
        from: describe(s),
        detail: format!("payload length {len} does not fit in memory"),
    })?;
    let mut v = Vec::with_capacity(len.min(CHUNK));
    while v.len() < len {
        let old = v.len();
        let n = (len - old).min(CHUNK);
        v.resize(old + n, 0);
        read_exact(s, &mut v[old..], w)?;
    }
    Ok(v)
}

/// Reads and checks one message header.
pub fn read_header(s: &Socket, nonce: u64, w: &Waiter) -> Result<Header> {
    let mut b = [0u8; HEADER_BYTES];
    read_exact(s, &mut b, w)?;
    Header::decode(&b, nonce, &|| describe(s))
}

/// Writes all of `buf`.
pub fn write_all(s: &Socket, buf: &[u8], w: &Waiter) -> Result<()> {
    let mut off = 0;
    send_with(s.as_raw_fd(), w, || {
        if off < buf.len() {
            off += nonzero((&*s).write(&buf[off..])?)?;
        }
        Ok(off == buf.len())
    })
}

/// Calls `step` until it says that all it had to send is sent, waiting for `fd` to take
/// more while it would block.
pub fn send_with(fd: RawFd, w: &Waiter, mut step: impl FnMut() -> io::Result<bool>) -> Result<()> {
    loop {
        match step() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                w.check()?;
                wait_fd(fd, libc::POLLOUT, w)?;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if is_closed(&e) => return Err(w.closed()),
            Err(e) if is_unreachable(&e) => return Err(w.unreachable(w.peer)),
            Err(e) => return Err(BootstrapError::io(format!("{}: write", w.op), e)),
        }
    }
}

/// A write's count, a connection that took nothing being closed.
pub fn nonzero(n: usize) -> io::Result<usize> {
    match n {
        0 => Err(io::ErrorKind::WriteZero.into()),
        n => Ok(n),
    }
}

/// Opens `s` as the initiator of the job's handshake ([`crate::auth`]) for `rank`: `peer`
/// names the other end in errors. Nothing else is sent before the peer has proved that it
/// knows `key`.
pub fn authenticate(s: &Socket, key: &JobKey, rank: usize, peer: &str, w: &Waiter) -> Result<()> {
    let refused = |why| BootstrapError::Auth { op: w.op, rank, peer: peer.to_string(), why };
    let (me, hello) =
        Initiator::start(key, Service::Bootstrap).map_err(|e| BootstrapError::io(format!("{}: a nonce", w.op), e))?;
    let closed = |e| match e {
        BootstrapError::ConnectionClosed { .. } => refused(Refusal::Closed),
        e => e,
    };
    write_all(s, &hello, w).map_err(closed)?;
    let mut reply = [0u8; REPLY_LEN];
    read_exact(s, &mut reply, w).map_err(closed)?;
    let proof = me.finish(&reply).map_err(refused)?;
    write_all(s, &proof, w).map_err(closed)
}

/// A gate for a connection just accepted by a listener of a communicator with `key`
/// (`None`: no key, no gate). `Err`: no nonce could be drawn (the connection is dropped).
pub fn gate(key: Option<&JobKey>) -> io::Result<Option<Gate>> {
    key.map(|k| Gate::new(k, Service::Bootstrap)).transpose()
}

/// How far a connection's handshake has come.
pub enum Opening {
    /// The peer proved that it knows the key.
    Open,
    /// It needs more bytes.
    More,
    /// Refused: drop the connection (the caller logs why, with the peer's address).
    Refused(String),
}

/// Feeds `gate` what has arrived on the non-blocking `s` (the part of the current
/// handshake message in `buf`, which may hold all of it), answering its hello, without
/// waiting and without reading past the handshake.
pub fn open_gate(gate: &mut Gate, s: &Socket, buf: &mut Vec<u8>) -> Opening {
    while !gate.is_open() {
        let want = gate.wants();
        if buf.len() < want {
            let mut tmp = [0u8; REPLY_LEN];
            match (&*s).read(&mut tmp[..want - buf.len()]) {
                Ok(0) => return Opening::Refused(Refusal::Closed.to_string()),
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Opening::More,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Opening::Refused(format!("its connection broke: {e}")),
            }
            continue;
        }
        match gate.take(buf) {
            // A fresh connection's socket buffer takes the reply whole.
            Ok(Some(reply)) if !matches!((&*s).write(&reply), Ok(n) if n == reply.len()) => {
                return Opening::Refused("the handshake's reply could not be sent".into())
            }
            Ok(_) => buf.clear(),
            Err(why) => return Opening::Refused(why.to_string()),
        }
    }
    Opening::Open
}

fn new_socket(addr: &SocketAddr) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(*addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// A non-blocking listening socket bound to `addr` (port 0: an ephemeral port).
pub fn listen(addr: SocketAddr) -> Result<Socket> {
    let ctx = || format!("listen on {addr}");
    let s = new_socket(&addr).map_err(|e| BootstrapError::io(ctx(), e))?;
    s.set_reuse_address(true).map_err(|e| BootstrapError::io(ctx(), e))?;
    s.bind(&addr.into()).map_err(|e| BootstrapError::io(ctx(), e))?;
    s.listen(libc::SOMAXCONN).map_err(|e| BootstrapError::io(ctx(), e))?;
    Ok(s)
}

pub fn local_addr(s: &Socket) -> Result<SocketAddr> {
    s.local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .ok_or_else(|| BootstrapError::io("local address of a socket", io::Error::other("not an inet socket")))
}

/// A readable name of the remote end of `s`, for errors and logs.
pub fn describe(s: &Socket) -> String {
    match s.peer_addr().ok().and_then(|a: SockAddr| a.as_socket()) {
        Some(a) => format!("the peer at {a}"),
        None => "a peer".to_string(),
    }
}

fn setup_stream(s: &Socket, op: &str) -> Result<()> {
    s.set_nonblocking(true).map_err(|e| BootstrapError::io(format!("{op}: set non-blocking"), e))?;
    s.set_tcp_nodelay(true).map_err(|e| BootstrapError::io(format!("{op}: set TCP_NODELAY"), e))?;
    watch_link(SockRef::from(s), LINK_TIMEOUT.seconds(None)?)
        .map_err(|e| BootstrapError::io(format!("{op}: set the link timeout"), e))
}

/// Accepts one connection without waiting, non-blocking with TCP_NODELAY. `None`: none is
/// waiting, or the process is out of descriptors or memory (logged; the connection stays in
/// the backlog until some close).
pub fn try_accept(l: &Socket, op: &str) -> Result<Option<Socket>> {
    loop {
        match l.accept() {
            Ok((s, _)) => match setup_stream(&s, op) {
                Ok(()) => return Ok(Some(s)),
                Err(e) => tracing::debug!(from = %describe(&s), error = %e, "jitccl bootstrap: dropping a connection"),
            },
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if matches!(e.kind(), io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)) => {
                tracing::warn!(op, error = %e, "jitccl bootstrap: accept");
                return Ok(None);
            }
            Err(e) => return Err(BootstrapError::io(format!("{op}: accept"), e)),
        }
    }
}

/// Connects to a listener that is up already (a rank's, once it has told the root): a
/// refused or failed connection is an error at once (the rank is gone).
pub fn connect(addr: SocketAddr, w: &Waiter) -> Result<Socket> {
    connect_with(addr, w, false)
}

/// Connects to `addr`, retrying refused / unreachable attempts (the listener may not be up
/// yet: the root, when ranks start before it) until the waiter's deadline.
pub fn connect_retry(addr: SocketAddr, w: &Waiter) -> Result<Socket> {
    connect_with(addr, w, true)
}

fn connect_with(addr: SocketAddr, w: &Waiter, retry_refused: bool) -> Result<Socket> {
    let mut backoff = Duration::from_millis(2);
    loop {
        w.check()?;
        let s = new_socket(&addr).map_err(|e| BootstrapError::io(format!("{}: socket", w.op), e))?;
        let err = match s.connect(&addr.into()) {
            Ok(()) => None,
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) || e.kind() == io::ErrorKind::WouldBlock => {
                // Wait for the handshake to finish (writable) or fail.
                loop {
                    w.check()?;
                    let mut p = [pollfd(s.as_raw_fd(), libc::POLLOUT)];
                    let n = poll(&mut p, w.slice()).map_err(|e| BootstrapError::io(format!("{}: poll", w.op), e))?;
                    if n > 0 {
                        break;
                    }
                }
                match s.take_error() {
                    Ok(None) => None,
                    Ok(Some(e)) | Err(e) => Some(e),
                }
            }
            Err(e) => Some(e),
        };
        match err {
            None => {
                setup_stream(&s, w.op)?;
                return Ok(s);
            }
            Some(e) if e.raw_os_error() == Some(libc::EAGAIN) || (retry_refused && retryable(&e)) => {
                tracing::trace!(op = w.op, %addr, error = %e, "bootstrap connect: retrying");
                w.sleep(backoff)?;
                backoff = (backoff * 2).min(Duration::from_millis(100));
            }
            Some(e) => {
                let who = w.peer.map(|p| format!("rank {p} at ")).unwrap_or_default();
                return Err(w.lost(BootstrapError::io(format!("{}: connect to {who}{addr}", w.op), e)));
            }
        }
    }
}

fn retryable(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNREFUSED)
            | Some(libc::ECONNRESET)
            | Some(libc::ETIMEDOUT)
            | Some(libc::EHOSTUNREACH)
            | Some(libc::ENETUNREACH)
            | Some(libc::EAGAIN)
            | Some(libc::EADDRNOTAVAIL)
    )
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    /// Both ends of a bootstrap connection fail once their link carries nothing back for the
    /// link timeout, and probe it while idle.
    #[test]
    fn connections_watch_their_link() {
        let abort = AtomicBool::new(false);
        let w = Waiter::new("test", None, Duration::from_secs(10), &abort);
        let l = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let c = connect(local_addr(&l).unwrap(), &w).unwrap();
        let a = loop {
            if let Some(a) = try_accept(&l, "test").unwrap() {
                break a;
            }
            w.sleep(Duration::from_millis(1)).unwrap();
        };
        let timeout = LINK_TIMEOUT.seconds(None).unwrap();
        for s in [&c, &a] {
            assert_eq!(s.tcp_user_timeout().unwrap(), Some(timeout));
            assert!(s.keepalive().unwrap());
            assert!(s.tcp_keepalive_time().unwrap() < timeout.max(Duration::from_secs(2)));
        }
    }
}
