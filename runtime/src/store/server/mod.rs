//! The store server: one background thread running a mio event loop over non-blocking
//! sockets. Each connection decodes its frames as they arrive; a WAIT whose keys are missing
//! parks the connection (which keeps serving its other commands, CANCEL_WAIT among them)
//! until later writes complete it. A connection that breaks the protocol is closed with a
//! warning; the server and the other connections carry on. What the server holds is bounded
//! ([`Limits`]): connections, buffered bytes, time to VALIDATE, warning lines per second.
//!
//! A server with a key ([`Server::bind_keyed`]) serves only clients that prove that they
//! know it ([`crate::auth`]: its handshake comes before VALIDATE), so jitccl's own clients
//! given the key; PyTorch's clients, which cannot, are refused. Without one, the protocol
//! is PyTorch's, unchanged.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use socket2::{Domain, Protocol, Socket, Type};
use tracing::{debug, warn};

use super::conn::{Conn, Fill};
use super::limits::{Limits, SpareFd, Stats, Throttle};
use super::protocol::{self, Command, ProtocolError, Request, STOP_WAITING, VALIDATION_MAGIC};
use super::state::{ConnId, State};
use super::StoreError;
use crate::auth::{JobKey, Refusal};

mod admit;
mod inherited;

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
const FIRST_CONN: ConnId = 2;
/// A connection stops decoding requests while this many reply bytes wait to be sent, so a
/// client that never reads its replies cannot make the server buffer without bound.
const OUTPUT_HIGH_WATER: usize = 4 << 20;
/// How often connections that have not validated are checked for their deadline.
const SWEEP_EVERY: Duration = Duration::from_millis(250);
/// Memory is handed back to the OS once closed connections have freed this much (glibc
/// keeps freed memory of the server thread's arena otherwise).
const TRIM_AFTER: usize = 16 << 20;

/// A running store server; dropping it stops the server and closes every connection.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    stats: Arc<Stats>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl Server {
    /// Listens on `addr` (port 0 picks a free port; see [`Server::local_addr`]) and serves
    /// on a background thread.
    pub fn bind(addr: impl ToSocketAddrs) -> Result<Server, StoreError> {
        Self::bind_with(addr, Limits::default(), None)
    }

    /// As [`bind`](Self::bind); with `key`, only clients that prove that they know it are
    /// served ([`TcpStore::connect_keyed`](super::TcpStore::connect_keyed)), PyTorch's not.
    pub fn bind_keyed(addr: impl ToSocketAddrs, key: Option<JobKey>) -> Result<Server, StoreError> {
        if key.is_none() {
            crate::auth::note_unauthenticated("store server");
        }
        Self::bind_with(addr, Limits::default(), key)
    }

    /// Rank 0's store at its launcher's `MASTER_ADDR:MASTER_PORT`, as
    /// [`bind_keyed`](Self::bind_keyed); on the socket `jitccl launch` reserved there and
    /// handed to this process (`JITCCL_MASTER_FD`), when it did, so that the port never
    /// stood free between the launcher's choice and this server.
    pub fn bind_master(addr: impl ToSocketAddrs, key: Option<JobKey>) -> Result<Server, StoreError> {
        let io_err = |source| StoreError::Io { op: "bind", source };
        let addrs: Vec<SocketAddr> = addr.to_socket_addrs().map_err(io_err)?.collect();
        let Some(socket) = inherited::take(&addrs) else { return Self::bind_keyed(&addrs[..], key) };
        if key.is_none() {
            crate::auth::note_unauthenticated("store server");
        }
        socket.listen(BACKLOG).map_err(io_err)?;
        debug!("store: listening on the socket the launcher reserved");
        Self::serve(socket.into(), Limits::default(), key)
    }

    pub(crate) fn bind_with(
        addr: impl ToSocketAddrs, limits: Limits, key: Option<JobKey>,
    ) -> Result<Server, StoreError> {
        let listener = listen(addr).map_err(|source| StoreError::Io { op: "bind", source })?;
        Self::serve(listener, limits, key)
    }

    /// Serves on `listener` (listening already) on a background thread.
    fn serve(listener: std::net::TcpListener, limits: Limits, key: Option<JobKey>) -> Result<Server, StoreError> {
        crate::logging::init();
        let io_err = |op| move |source| StoreError::Io { op, source };
        listener.set_nonblocking(true).map_err(io_err("bind"))?;
        let addr = listener.local_addr().map_err(io_err("bind"))?;
        let mut listener = TcpListener::from_std(listener);
        let poll = Poll::new().map_err(io_err("bind"))?;
        poll.registry().register(&mut listener, LISTENER, Interest::READABLE).map_err(io_err("bind"))?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(io_err("bind"))?);
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Stats::default());
        let thread = {
            let (stop, stats) = (Arc::clone(&stop), Arc::clone(&stats));
            std::thread::Builder::new()
                .name("jitccl-store".into())
                .spawn(move || EventLoop::new(poll, listener, limits, stats, key)?.run(&stop))
                .map_err(io_err("bind"))?
        };
        debug!("store: serving on {addr}");
        Ok(Server { addr, stop, waker, stats, thread: Some(thread) })
    }

    pub(crate) fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Blocks for as long as the server runs: only a fatal error of its event loop (returned
    /// here) ends it, since nothing else can stop a `Server` but dropping it.
    pub fn join(mut self) -> Result<(), StoreError> {
        let thread = self.thread.take().expect("only Drop and join take the thread");
        match thread.join() {
            Ok(res) => res.map_err(|source| StoreError::Io { op: "serve", source }),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let Some(thread) = self.thread.take() else { return };
        let s = self.stats();
        debug!(
            "store: stopping the server on {} ({} connections, {} bytes buffered, {} warnings logged)",
            self.addr,
            s.conns(),
            s.buffered(),
            s.warnings()
        );
        self.stop.store(true, Ordering::Release);
        if let Err(e) = self.waker.wake() {
            // The loop cannot be told to stop; leave it rather than block forever.
            warn!("store: cannot wake the server thread on {} to stop it: {e}", self.addr);
            return;
        }
        // Not re-raised: a panic in drop may abort the process.
        match thread.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!("store: the server on {} failed: {e}", self.addr),
            Err(_) => warn!("store: the server thread on {} panicked", self.addr),
        }
    }
}

/// The accept queue of a listening server (the kernel caps it at net.core.somaxconn).
const BACKLOG: i32 = 4096;

/// Binds the first of `addr`'s addresses that works, with SO_REUSEADDR (a restarted
/// server gets its port back at once) and a long accept queue: every rank of a job
/// connects at about the same time, and std's 128 would drop the SYNs of a large job.
fn listen(addr: impl ToSocketAddrs) -> io::Result<std::net::TcpListener> {
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "the address resolves to nothing");
    for addr in addr.to_socket_addrs()? {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        match socket.bind(&addr.into()).and_then(|()| socket.listen(BACKLOG)) {
            Ok(()) => return Ok(socket.into()),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Why a connection is being closed.
enum Close {
    /// The peer closed its side.
    Eof,
    Io(io::Error),
    Protocol(ProtocolError),
    /// Its buffers grew while every connection's together passed the budget.
    OverBudget {
        held: usize,
    },
    /// It did not VALIDATE in time, or was the oldest such when the connections ran out.
    Unvalidated(&'static str),
}

impl From<ProtocolError> for Close {
    fn from(e: ProtocolError) -> Close {
        Close::Protocol(e)
    }
}

impl From<io::Error> for Close {
    fn from(e: io::Error) -> Close {
        Close::Io(e)
    }
}

struct EventLoop {
    poll: Poll,
    registry: Registry,
    listener: TcpListener,
    conns: HashMap<ConnId, Conn>,
    next_id: ConnId,
    state: State,
    /// Reusable buffers: socket reads, one request's reply, the WAITs it completed.
    scratch: Box<[u8]>,
    reply: Vec<u8>,
    woken: Vec<ConnId>,
    /// Connections that were sent STOP_WAITING by another connection's request.
    dirty: Vec<ConnId>,
    limits: Limits,
    stats: Arc<Stats>,
    throttle: Throttle,
    spare: SpareFd,
    /// Connections in accept order with the time they were accepted, until they validate
    /// (entries of validated or closed connections are skipped when met).
    unvalidated: VecDeque<(ConnId, Instant)>,
    /// Sum of every connection's `charged`.
    buffered: usize,
    /// What clients must prove that they know, if anything.
    key: Option<JobKey>,
    /// Bytes released by closed connections since memory was last handed back to the OS.
    freed: usize,
}

impl EventLoop {
    fn new(
        poll: Poll, listener: TcpListener, limits: Limits, stats: Arc<Stats>, key: Option<JobKey>,
    ) -> io::Result<EventLoop> {
        Ok(EventLoop {
            registry: poll.registry().try_clone()?,
            poll,
            listener,
            conns: HashMap::new(),
            next_id: FIRST_CONN,
            state: State::default(),
            scratch: vec![0; 64 << 10].into_boxed_slice(),
            reply: Vec::new(),
            woken: Vec::new(),
            dirty: Vec::new(),
            limits,
            stats,
            throttle: Throttle::default(),
            spare: SpareFd::new(),
            unvalidated: VecDeque::new(),
            buffered: 0,
            freed: 0,
            key,
        })
    }

    /// Logs a warning, at most one line a second (see [`Throttle`]).
    fn warn(&mut self, line: fmt::Arguments<'_>) {
        let Some(suppressed) = self.throttle.allow(Instant::now()) else { return };
        self.stats.warned();
        if suppressed > 0 {
            warn!("{line} ({suppressed} similar lines suppressed)");
        } else {
            warn!("{line}");
        }
    }

    fn run(mut self, stop: &AtomicBool) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        loop {
            let timeout = (!self.unvalidated.is_empty()).then_some(SWEEP_EVERY);
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(),
                    WAKER if stop.load(Ordering::Acquire) => return Ok(()),
                    WAKER => {}
                    Token(id) => self.drive(id),
                }
            }
            while let Some(id) = self.dirty.pop() {
                self.drive(id);
            }
            self.sweep();
        }
    }

    fn publish(&self) {
        self.stats.set(self.conns.len(), self.buffered);
    }

    /// Serves one connection as far as it can go without blocking.
    fn drive(&mut self, id: ConnId) {
        // Taken out of the map while it is served, so requests can reach other connections.
        let Some(mut conn) = self.conns.remove(&id) else { return };
        match self
            .pump(id, &mut conn)
            .and_then(|()| self.watch(id, &mut conn))
            .and_then(|()| self.charge(id, &mut conn))
        {
            Ok(()) => {
                self.conns.insert(id, conn);
            }
            Err(why) => self.close(id, conn, why),
        }
    }

    fn pump(&mut self, id: ConnId, conn: &mut Conn) -> Result<(), Close> {
        let mut drained = false;
        loop {
            conn.flush()?;
            if conn.pending_output() >= OUTPUT_HIGH_WATER {
                // Resumed by the WRITABLE event once the client reads.
                return Ok(());
            }
            if self.serve_one(id, conn)? {
                self.charge(id, conn)?;
                continue;
            }
            if drained {
                return Ok(());
            }
            match conn.fill(&mut self.scratch)? {
                Fill::Data { drained: d } => {
                    drained = d;
                    self.charge(id, conn)?;
                }
                Fill::Empty => return Ok(()),
                Fill::Eof => {
                    // Best effort: the client may have half-closed and still read.
                    let _ = conn.flush();
                    return Err(Close::Eof);
                }
            }
        }
    }

    /// Decodes and runs the next complete request, if one has arrived.
    fn serve_one(&mut self, id: ConnId, conn: &mut Conn) -> Result<bool, ProtocolError> {
        let Some(&first) = conn.unparsed().first() else { return Ok(false) };
        if !conn.is_open() {
            return conn.authenticate().map_err(ProtocolError::Unauthenticated);
        }
        if !conn.validated && first != Command::Validate as u8 {
            // Refused before the rest arrives: a stranger's stream is not buffered.
            return Err(ProtocolError::NotValidated(first));
        }
        let Some((req, len)) = protocol::parse(conn.unparsed())? else { return Ok(false) };
        self.reply.clear();
        self.woken.clear();
        let validates = if conn.validated {
            self.state.apply(id, req, &mut self.reply, &mut self.woken)?;
            false
        } else {
            match req {
                Request::Validate { magic } if magic == VALIDATION_MAGIC => true,
                Request::Validate { magic } => return Err(ProtocolError::BadMagic(magic)),
                _ => return Err(ProtocolError::NotValidated(first)),
            }
        };
        conn.consume(len);
        conn.validated |= validates;
        for &w in &self.woken {
            if w == id {
                conn.queue(&[STOP_WAITING]);
            } else if let Some(other) = self.conns.get_mut(&w) {
                other.queue(&[STOP_WAITING]);
                self.dirty.push(w);
            }
        }
        conn.queue(&self.reply);
        Ok(true)
    }

    /// Asks for WRITABLE events exactly while replies wait to be sent.
    fn watch(&mut self, id: ConnId, conn: &mut Conn) -> Result<(), Close> {
        let wants_write = conn.pending_output() > 0;
        if wants_write != conn.wants_write {
            let interest = if wants_write { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE };
            self.registry.reregister(&mut conn.stream, Token(id), interest)?;
            conn.wants_write = wants_write;
        }
        Ok(())
    }

    fn close(&mut self, id: ConnId, mut conn: Conn, why: Close) {
        let peer = conn.peer;
        let unparsed = conn.unparsed().len();
        match why {
            Close::Protocol(e) => self.warn(format_args!("store: closing the connection from {peer}: {e}")),
            Close::OverBudget { held } => {
                let (total, max) = (self.buffered, self.limits.max_buffered);
                self.warn(format_args!(
                    "store: closing the connection from {peer}: the server's buffers are full \
                     (this connection {held} bytes, all {total}, limit {max})"
                ))
            }
            Close::Unvalidated(why) => debug!("store: closing the connection from {peer}: {why}"),
            Close::Eof if unparsed > 0 => self.warn(format_args!(
                "store: connection from {peer} closed in the middle of a message ({unparsed} bytes received)"
            )),
            Close::Eof if !conn.is_open() => self.warn(format_args!(
                "store: the connection from {peer} closed before it authenticated: {}",
                Refusal::Closed
            )),
            Close::Eof => debug!("store: connection from {peer} closed"),
            Close::Io(e) => debug!("store: connection from {peer} failed: {e}"),
        }
        self.state.disconnect(id);
        if let Err(e) = self.registry.deregister(&mut conn.stream) {
            debug!("store: deregistering the connection from {peer}: {e}");
        }
        self.buffered -= conn.charged;
        self.freed += conn.charged;
        drop(conn);
        self.publish();
        if self.freed >= TRIM_AFTER {
            self.freed = 0;
            trim();
        }
    }
}

/// Hands freed memory back to the OS (glibc keeps it in the thread's arena otherwise).
fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator's arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}
