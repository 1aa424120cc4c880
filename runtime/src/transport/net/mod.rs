//! The network transport: TCP connections (socket2) between ranks that do not share
//! memory, moved by one proxy thread per rank (NCCL's proxy: posted -> transmitted -> done).
//!
//! A sender's kernel writes into a local shadow of the receiver's FIFO (same layout). The
//! proxy forwards each posted step (the protocol slot and byte count its size word names)
//! and counts the slot free locally as soon as it is copied out. The receiving proxy takes
//! a step off its socket once its slot in the rank's own FIFO is free (TCP's flow control
//! holds the sender back meanwhile), writes it there — LL lines as atomic 8-byte words,
//! LL128 flags after their data — and posts the tail. Kernels see ordinary connectors; a
//! host kernel drives the proxy's work itself while it waits (`proxy`), and passes its large
//! moves by reference (`Conn::proxied`): the proxy sends them from the caller's buffer and
//! receives them into it, sparing both FIFO copies.
//!
//! Each connector has `nsocks` TCP sockets (JITCCL_NSOCKS_PERTHREAD) that its steps are
//! striped over. With the communicator's key, each socket first proves that it knows it
//! ([`crate::auth`]), both ways, before its hello; with `JITCCL_TLS=1` it then opens a TLS
//! session pinned to the key ([`crate::auth::Tls`]), which its hello and everything after
//! pass through. This module opens them; `wire` is what they carry, `send` and `recv` the
//! two ends of a connector, `fifo` how those touch the FIFOs, and `proxy` the thread that
//! moves it all.

mod fifo;
pub(crate) mod plugin;
mod proxy;
mod recv;
mod send;
mod wire;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};

use crate::auth::{self, Failure, JobKey, Refusal, Service, Tls};
use crate::config::Resolved;
use crate::device::Memory;
use crate::error::{sys, Error, Result};
use crate::transport::connect::Link;
use crate::transport::layout::Layout;
use crate::transport::{AttachCtx, Attached, Endpoint, Transport};
pub(crate) use proxy::Activity;
use recv::RecvSide;
use send::SendSide;
use wire::{Hello, Opening, Wire};

/// How often a rank awaiting its peers' connections asks whether the job is lost.
const LOST_POLL: Duration = Duration::from_millis(20);
/// An accepted connection that has not authenticated and said its hello within this is
/// dropped: peers send both as soon as they connect, and a stranger's silent connection
/// must not hold the accepting loop until the timeout.
const GREETING: Duration = Duration::from_secs(5);

/// Any two ranks: TCP through each rank's proxy. This rank writes into a local shadow of
/// the peer's segment, which the proxy forwards.
pub(crate) struct Net;

impl Transport for Net {
    fn name(&self) -> &'static str {
        "net"
    }

    fn can_connect(&self, me: &Endpoint, peer: &Endpoint) -> Option<&'static str> {
        Some(if me.net_only || peer.net_only {
            "JITCCL_TRANSPORT=net"
        } else if me.host != peer.host {
            "another host"
        } else {
            "no shared memory"
        })
    }

    /// The shadow is memory both the proxy (host loads) and this rank's kernels reach:
    /// on a GPU, page-locked host memory mapped into it.
    fn attach(&self, ctx: &AttachCtx, _peer: usize) -> Result<Attached> {
        let shadow = Memory::mapped(ctx.device, ctx.bytes)?;
        Ok((shadow.ptr(), Some(Box::new(shadow))))
    }

    fn is_net(&self) -> bool {
        true
    }
}

/// A listening socket for the connections peers open to this rank.
pub(crate) struct NetListener {
    listener: TcpListener,
}

impl NetListener {
    /// Listens on `ip` (the bootstrap's interface) at an ephemeral port.
    pub(crate) fn bind(ip: std::net::IpAddr) -> Result<NetListener> {
        let addr = SocketAddr::new(ip, 0);
        let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None).map_err(sys("creating a socket"))?;
        sock.set_reuse_address(true).map_err(sys("configuring a socket"))?;
        sock.bind(&addr.into()).map_err(sys(format!("binding {addr}")))?;
        // Peers connect all their sockets at once; a deep backlog spares them SYN retries.
        sock.listen(4096).map_err(sys(format!("listening on {addr}")))?;
        Ok(NetListener { listener: sock.into() })
    }

    pub(crate) fn addr(&self) -> Result<SocketAddr> {
        self.listener.local_addr().map_err(sys("reading the listen address"))
    }
}

/// The proxy thread of one rank; stops when dropped.
pub(crate) struct Proxy {
    activity: Arc<Activity>,
    thread: Option<JoinHandle<()>>,
}

/// Per connector, its sockets in socket order.
type Sockets = Vec<Vec<Opening>>;

/// The TLS settings of a communicator whose configuration asks for TLS (`JITCCL_TLS`),
/// pinned to its `key`: refused without a key.
pub(crate) fn tls_of(cfg: &Resolved, key: Option<&JobKey>) -> Result<Option<Tls>> {
    if !cfg.tls {
        return Ok(None);
    }
    let Some(key) = key else {
        return Err(Error::InvalidUsage(
            "JITCCL_TLS=1 needs the job's key, which its certificate is pinned to: set JITCCL_AUTH_KEY or \
             JITCCL_AUTH_KEY_FILE on every rank (or use a unique id made by rank 0, which carries one)"
                .into(),
        ));
    };
    Tls::new(key).map(Some).map_err(|e| Error::Internal(format!("setting up TLS: {e}")))
}

/// `tls` for the net peers' sockets: refused where a network plugin (`plugin`: its name)
/// carries them, as it moves the data itself.
pub(crate) fn tls_for_peers(tls: Option<Tls>, plugin: Option<&str>) -> Result<Option<Tls>> {
    match (tls, plugin) {
        (Some(_), Some(name)) => Err(Error::InvalidUsage(format!(
            "JITCCL_TLS=1 secures jitccl's own sockets, but network plugin {name} carries the data between \
             hosts: set JITCCL_NET=Socket, or unset JITCCL_TLS"
        ))),
        (tls, _) => Ok(tls),
    }
}

/// What opening a rank's connections needs, shared by its connecting and accepting halves.
struct Setup<'a> {
    layout: &'a Layout,
    rank: usize,
    nsocks: usize,
    /// The communicator's key, which every socket proves that it knows.
    key: Option<JobKey>,
    /// The TLS every socket opens after that, if the communicator asks for it.
    tls: Option<Tls>,
    deadline: Instant,
    timeout: Duration,
    /// Set when either half fails, so that the other stops instead of waiting it out.
    failed: AtomicBool,
    /// Says, when asked now and then while connections are awaited, whether the job is
    /// already lost (a rank died): the wait then ends with its error, not the timeout.
    lost: &'a (dyn Fn() -> Result<()> + Sync),
}

impl Proxy {
    /// Opens `cfg.nsocks` TCP connections per link: this rank connects for its sends (to
    /// `addrs`) and accepts its receives on `listener`; then starts the proxy thread.
    /// `bases` are the segment bases the links' FIFOs live in (shadows for net peers).
    /// `lost` is asked every [`LOST_POLL`] while connections are awaited; its error ends
    /// the setup. `key`: the communicator's (the bootstrap's), if it has one; `tls`: its
    /// TLS settings ([`tls_for_peers`]), if it asks for TLS.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        layout: &Layout, rank: usize, sends: &[Link], recvs: &[Link], bases: &[*mut u8], listener: NetListener,
        addrs: &[SocketAddr], cfg: &Resolved, key: Option<JobKey>, tls: Option<Tls>,
        lost: &(dyn Fn() -> Result<()> + Sync),
    ) -> Result<Proxy> {
        let setup = Setup {
            layout,
            rank,
            nsocks: cfg.nsocks,
            key,
            tls,
            deadline: Instant::now() + cfg.timeout,
            timeout: cfg.timeout,
            failed: AtomicBool::new(false),
            lost,
        };
        // Connect while accepting: peers connect to this rank while it connects to them, and
        // neither must wait for the other to finish first.
        let (sent, received) = std::thread::scope(|scope| {
            let connecting = scope.spawn(|| setup.failing(setup.connect_all(sends, addrs)));
            let received = setup.failing(setup.accept_all(&listener.listener, recvs));
            let sent =
                connecting.join().unwrap_or_else(|_| Err(Error::Internal("the net connecting thread panicked".into())));
            (sent, received)
        });
        let (sent, received) = match (sent, received) {
            (Ok(Some(s)), Ok(Some(r))) => (s, r),
            (Err(e), _) | (_, Err(e)) => return Err(e),
            _ => return Err(Error::Internal("net connection setup gave up without an error".into())),
        };
        let wires = |streams: Vec<Opening>| {
            streams
                .into_iter()
                .map(|s| Wire::new(s, cfg.link_timeout))
                .collect::<std::io::Result<Vec<_>>>()
                .map_err(sys("configuring a connection"))
        };
        let send_sides = sends
            .iter()
            .zip(sent)
            .map(|(&l, s)| Ok(SendSide::new(l, layout.end(bases[l.peer], l.chan, l.edge, l.peer), wires(s)?)))
            .collect::<Result<Vec<_>>>()?;
        let recv_sides = recvs
            .iter()
            .zip(received)
            .map(|(&l, s)| {
                Ok(RecvSide::new(l, layout.end(bases[rank], l.chan, l.edge, l.peer), layout.ll128_flag, wires(s)?))
            })
            .collect::<Result<Vec<_>>>()?;
        tracing::info!(
            "rank {rank}: net transport up, {} send and {} receive connector(s), {} socket(s) each{}",
            send_sides.len(),
            recv_sides.len(),
            cfg.nsocks,
            if cfg.tls { ", TLS" } else { "" }
        );
        let (thread, activity) = proxy::spawn(rank, send_sides, recv_sides, layout.board(bases[rank]))?;
        Ok(Proxy::from_thread(thread, activity))
    }

    fn from_thread(thread: JoinHandle<()>, activity: Arc<Activity>) -> Proxy {
        Proxy { activity, thread: Some(thread) }
    }

    /// What this rank's kernels tell the proxy when they run.
    pub(crate) fn activity(&self) -> Arc<Activity> {
        self.activity.clone()
    }
}

impl Setup<'_> {
    /// Passes `r` on, telling the other half to stop if it is an error.
    fn failing<T>(&self, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.failed.store(true, Ordering::Release);
        }
        r
    }

    fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))
    }

    /// Opens every socket of every link in `links`, each greeted with its hello; None if the
    /// accepting half failed.
    fn connect_all(&self, links: &[Link], addrs: &[SocketAddr]) -> Result<Option<Sockets>> {
        let mut all = Vec::with_capacity(links.len());
        for link in links {
            let addr = addrs[link.peer];
            let fifo = self.layout.offset(link.chan, link.edge);
            let mut socks = Vec::with_capacity(self.nsocks);
            for socket in 0..self.nsocks {
                if self.failed.load(Ordering::Acquire) {
                    return Ok(None);
                }
                let what = || {
                    format!(
                        "rank {}: connecting socket {socket} of {} (channel {}) to rank {} at {addr}",
                        self.rank, self.nsocks, link.chan, link.peer
                    )
                };
                let mut stream = TcpStream::connect_timeout(&addr, self.left()).map_err(|e| sys(what())(e))?;
                if let Some(key) = &self.key {
                    // The proof and the hello are two writes before a read: not held for an ACK.
                    stream.set_nodelay(true).map_err(|e| sys(what())(e))?;
                    stream.set_read_timeout(Some(self.left())).map_err(|e| sys(what())(e))?;
                    auth::initiate(&mut stream, key, Service::Net).map_err(|e| match e {
                        // A peer that dies as it is reached closes the connection too: an
                        // I/O error, which the roots' word that it is gone may explain.
                        Failure::Refused(why @ Refusal::Closed) => {
                            sys(what())(std::io::Error::new(ErrorKind::ConnectionAborted, why))
                        }
                        Failure::Refused(why) => Error::InvalidUsage(format!("{}: rank {}: {why}", what(), link.peer)),
                        Failure::Io(e) => sys(what())(e),
                    })?;
                }
                let tls = match &self.tls {
                    Some(tls) => Some(Box::new(
                        tls.connect(&mut stream)
                            .map_err(|e| Error::InvalidUsage(format!("{}: rank {}: TLS: {e}", what(), link.peer)))?,
                    )),
                    None => None,
                };
                let mut opened = Opening { stream, tls };
                let hello = Hello { rank: self.rank, fifo, socket, nsocks: self.nsocks };
                opened.write_all(&hello.encode()).and_then(|()| opened.flush()).map_err(|e| sys(what())(e))?;
                socks.push(opened);
            }
            all.push(socks);
        }
        Ok(Some(all))
    }

    /// Accepts every socket of every link in `links`, in whatever order they come; None if
    /// the connecting half failed.
    fn accept_all(&self, listener: &TcpListener, links: &[Link]) -> Result<Option<Sockets>> {
        let rank = self.rank;
        let mut socks: Vec<Vec<Option<Opening>>> =
            links.iter().map(|_| (0..self.nsocks).map(|_| None).collect()).collect();
        let mut missing = links.len() * self.nsocks;
        listener.set_nonblocking(true).map_err(sys("configuring the listener"))?;
        let mut asked = Instant::now();
        while missing > 0 {
            if self.failed.load(Ordering::Acquire) {
                return Ok(None);
            }
            let (mut stream, from) = match listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if asked.elapsed() >= LOST_POLL {
                        (self.lost)()?;
                        asked = Instant::now();
                    }
                    if Instant::now() > self.deadline {
                        let i = socks.iter().position(|s| s.iter().any(Option::is_none)).expect("a socket is missing");
                        return Err(Error::Timeout {
                            op: format!("net connection setup ({missing} socket(s) missing)"),
                            rank,
                            channel: links[i].chan,
                            peer: links[i].peer as i32,
                            waiting: "a connection from",
                            timeout_s: self.timeout.as_secs_f64(),
                        });
                    }
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                Err(e) => return Err(sys(format!("rank {rank}: accepting a connection"))(e)),
            };
            stream.set_nonblocking(false).map_err(sys("configuring a connection"))?;
            stream.set_read_timeout(Some(self.left().min(GREETING))).map_err(sys("configuring a connection"))?;
            stream.set_write_timeout(Some(GREETING)).map_err(sys("configuring a connection"))?;
            if let Some(key) = &self.key {
                if let Err(why) = auth::respond(&mut stream, key, Service::Net) {
                    tracing::warn!("rank {rank}: refused a net connection from {from}: {why}");
                    continue;
                }
            }
            let tls = match &self.tls {
                Some(tls) => match tls.accept(&mut stream) {
                    Ok(conn) => Some(Box::new(conn)),
                    Err(why) => {
                        tracing::warn!("rank {rank}: refused a net connection from {from}: TLS: {why}");
                        continue;
                    }
                },
                None => None,
            };
            let mut opened = Opening { stream, tls };
            let mut b = [0u8; Hello::LEN];
            let Some(hello) = opened.read_exact(&mut b).ok().and_then(|()| Hello::decode(&b)) else {
                tracing::warn!("rank {rank}: dropped a connection from {from} that is not a jitccl peer");
                continue;
            };
            let i = self.place(&hello, links, &socks).map_err(|why| {
                Error::InvalidUsage(format!(
                    "rank {rank}: refused a net connection from rank {} ({from}): {why}",
                    hello.rank
                ))
            })?;
            socks[i][hello.socket] = Some(opened);
            missing -= 1;
        }
        Ok(Some(socks.into_iter().map(|s| s.into_iter().map(|s| s.expect("every socket arrived")).collect()).collect()))
    }

    /// Which of `links` the socket `hello` names is for, if it is one still missing.
    fn place(
        &self, hello: &Hello, links: &[Link], socks: &[Vec<Option<Opening>>],
    ) -> std::result::Result<usize, String> {
        if hello.nsocks != self.nsocks {
            return Err(format!(
                "it opens {} socket(s) per connector, this rank {} (JITCCL_NSOCKS_PERTHREAD differs)",
                hello.nsocks, self.nsocks
            ));
        }
        let Some(i) =
            links.iter().position(|l| l.peer == hello.rank && self.layout.offset(l.chan, l.edge) == hello.fifo)
        else {
            return Err(format!("this rank receives from it on no FIFO at offset {}", hello.fifo));
        };
        if hello.socket >= self.nsocks || socks[i][hello.socket].is_some() {
            return Err(format!(
                "socket {} of {} for channel {} is {}",
                hello.socket,
                self.nsocks,
                links[i].chan,
                if hello.socket >= self.nsocks { "out of range" } else { "a duplicate" }
            ));
        }
        Ok(i)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.activity.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use jitccl_codegen::abi::ll128_flag_word;

    use super::*;
    use crate::config::Config;
    use crate::device::{Device, HostMemory};
    use crate::transport::layout::Edge;

    /// Rank 0 (2 sockets per connector) sets up its one receive connector, the ring from
    /// rank 1, while a peer opens one socket per hello in `hellos`, in that order.
    fn accept(hellos: &[Hello]) -> Result<()> {
        accept_unless(hellos, &|| Ok(()))
    }

    /// As [`accept`], with `lost` saying whether the job is lost.
    fn accept_unless(hellos: &[Hello], lost: &(dyn Fn() -> Result<()> + Sync)) -> Result<()> {
        let hellos = hellos.to_vec();
        accept_from(None, None, lost, move |addr| {
            hellos
                .iter()
                .map(|h| {
                    let mut s = TcpStream::connect(addr).unwrap();
                    s.write_all(&h.encode()).unwrap();
                    s
                })
                .collect()
        })
    }

    /// As [`accept`] with `key` and `tls`, the peer's sockets opened by `peer` on a thread
    /// of its own.
    fn accept_from(
        key: Option<JobKey>, tls: Option<Tls>, lost: &(dyn Fn() -> Result<()> + Sync),
        peer: impl FnOnce(SocketAddr) -> Vec<TcpStream> + Send + 'static,
    ) -> Result<()> {
        let cfg = Config {
            nchannels: Some(1),
            slot_bytes: Some([256, 64, 256]),
            timeout: Some(Duration::from_secs(5)),
            nsocks: Some(2),
            ..Config::default()
        }
        .resolve(2)
        .unwrap();
        let layout = Layout::new(2, &cfg, &Device::host(0));
        let own = HostMemory::zeroed(layout.segment_bytes()).unwrap();
        let listener = NetListener::bind(Ipv4Addr::LOCALHOST.into()).unwrap();
        let addr = listener.addr().unwrap();
        let peer = std::thread::spawn(move || peer(addr));
        let ring = Link { peer: 1, chan: 0, edge: Edge::Ring };
        let bases = [own.ptr(), std::ptr::null_mut()];
        let proxy = Proxy::start(&layout, 0, &[], &[ring], &bases, listener, &[], &cfg, key, tls, lost);
        drop(peer.join().expect("the peer's thread"));
        // The proxy stops before the segment goes.
        proxy.map(drop)
    }

    fn ring_hello(socket: usize) -> Hello {
        let fifo = Layout { nranks: 2, nchannels: 1, slot_bytes: [256, 64, 256], ll128_flag: ll128_flag_word(false) }
            .offset(0, Edge::Ring);
        Hello { rank: 1, fifo, socket, nsocks: 2 }
    }

    #[test]
    fn with_a_key_only_sockets_that_prove_it_are_taken() {
        let key = JobKey::from_secret("the net transport's test key").unwrap();
        let other = JobKey::from_secret("another job's key, not this one").unwrap();
        // A handshake recorded on the wire of an earlier connection.
        let (me, hello) = auth::Initiator::start(&key, Service::Net).unwrap();
        let mut earlier = auth::Gate::new(&key, Service::Net).unwrap();
        let proof = me.finish(&earlier.take(&hello).unwrap().unwrap()).unwrap();
        let r = accept_from(Some(key), None, &|| Ok(()), move |addr| {
            let mut kept = Vec::new();
            // Each stranger claims socket 0, which the real peer opens later: one let in
            // would make the real one a duplicate.
            let mut plain = TcpStream::connect(addr).unwrap();
            plain.write_all(&ring_hello(0).encode()).unwrap();
            kept.push(plain);
            let mut wrong = TcpStream::connect(addr).unwrap();
            match auth::initiate(&mut wrong, &other, Service::Net) {
                Err(Failure::Refused(auth::Refusal::KeysDiffer)) => {}
                other => panic!("a peer with another key must be found out: {other:?}"),
            }
            drop(wrong);
            let mut replayed = TcpStream::connect(addr).unwrap();
            replayed.write_all(&hello).unwrap();
            replayed.write_all(&proof).unwrap();
            replayed.write_all(&ring_hello(0).encode()).unwrap();
            kept.push(replayed);
            for socket in [0, 1] {
                let mut s = TcpStream::connect(addr).unwrap();
                auth::initiate(&mut s, &key, Service::Net).unwrap();
                s.write_all(&ring_hello(socket).encode()).unwrap();
                kept.push(s);
            }
            kept
        });
        r.expect("the real peer's sockets are taken, the strangers' refused");
    }

    #[test]
    fn with_tls_a_peer_in_the_clear_is_refused_and_the_real_one_taken() {
        let key = JobKey::from_secret("the net transport's TLS test key").unwrap();
        let tls = Tls::new(&key).unwrap();
        let theirs = tls.clone();
        let r = accept_from(Some(key), Some(tls), &|| Ok(()), move |addr| {
            // Knows the key but speaks no TLS: its hello, in the clear, claims socket 0.
            let mut plain = TcpStream::connect(addr).unwrap();
            auth::initiate(&mut plain, &key, Service::Net).unwrap();
            plain.write_all(&ring_hello(0).encode()).unwrap();
            let mut kept = vec![plain];
            for socket in [0, 1] {
                let mut s = TcpStream::connect(addr).unwrap();
                auth::initiate(&mut s, &key, Service::Net).unwrap();
                let conn = theirs.connect(&mut s).unwrap();
                let mut opened = Opening { stream: s, tls: Some(Box::new(conn)) };
                opened.write_all(&ring_hello(socket).encode()).unwrap();
                opened.flush().unwrap();
                kept.push(opened.stream);
            }
            kept
        });
        r.expect("the TLS peer's sockets are taken, the one in the clear refused");
    }

    #[test]
    fn tls_needs_a_key_and_the_built_in_network() {
        let cfg = Config { tls: Some(true), ..Config::default() }.resolve(2).unwrap();
        let m = match tls_of(&cfg, None) {
            Err(Error::InvalidUsage(m)) => m,
            other => panic!("TLS without a key was not refused: {other:?}"),
        };
        assert!(m.contains("JITCCL_TLS=1") && m.contains("JITCCL_AUTH_KEY or JITCCL_AUTH_KEY_FILE"), "{m}");
        let key = JobKey::from_secret("a key for the TLS settings").unwrap();
        let tls = tls_of(&cfg, Some(&key)).unwrap();
        assert!(tls.is_some());
        assert!(
            matches!(tls_for_peers(tls.clone(), Some("Fabric")), Err(Error::InvalidUsage(m)) if m.contains("Fabric"))
        );
        assert!(tls_for_peers(tls, None).unwrap().is_some());
        let off = Config { tls: Some(false), ..Config::default() }.resolve(2).unwrap();
        assert!(tls_of(&off, None).unwrap().is_none());
        assert!(tls_for_peers(None, Some("Fabric")).unwrap().is_none());
    }

    fn refused(r: Result<()>) -> String {
        match r {
            Err(Error::InvalidUsage(m)) => m,
            other => panic!("expected a refused connection, got {other:?}"),
        }
    }

    #[test]
    fn sockets_are_matched_by_their_hello_and_mismatches_refused() {
        let fifo = ring_hello(0).fifo;
        let hello = |socket, nsocks| Hello { nsocks, ..ring_hello(socket) };
        accept(&[hello(1, 2), hello(0, 2)]).expect("sockets in any order");
        let m = refused(accept(&[hello(0, 2), hello(0, 2)]));
        assert!(m.contains("from rank 1") && m.contains("socket 0 of 2 for channel 0 is a duplicate"), "{m}");
        let m = refused(accept(&[hello(2, 2)]));
        assert!(m.contains("socket 2 of 2 for channel 0 is out of range"), "{m}");
        let m = refused(accept(&[hello(0, 3)]));
        assert!(m.contains("opens 3 socket(s) per connector, this rank 2 (JITCCL_NSOCKS_PERTHREAD differs)"), "{m}");
        let m = refused(accept(&[Hello { fifo: fifo + 1, ..hello(0, 2) }]));
        assert!(m.contains("no FIFO at offset"), "{m}");
    }

    #[test]
    fn a_lost_job_ends_the_wait_for_connections_with_its_error() {
        let start = std::time::Instant::now();
        let lost = || Err(Error::InvalidUsage("rank 1 died".into()));
        match accept_unless(&[], &lost) {
            Err(Error::InvalidUsage(m)) => assert_eq!(m, "rank 1 died"),
            other => panic!("expected the job's loss, got {other:?}"),
        }
        // Not the 5 s timeout: within a few polls.
        assert!(start.elapsed() < Duration::from_secs(2), "took {:?}", start.elapsed());
    }
}
