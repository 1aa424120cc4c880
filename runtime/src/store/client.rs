//! The store client: a blocking socket that carries one request at a time, every call
//! bounded by a deadline. A call that fails mid-request drops the connection (its reply
//! could still arrive and be taken for the next call's) and the next call reconnects; a
//! WAIT that times out is cancelled with CANCEL_WAIT instead, keeping the connection.
//! Connecting retries refusals until the deadline (the server may not be up yet), but once
//! the client has reached the server, a refused reconnection means the server is gone.
//! With a key ([`TcpStore::connect_keyed`]), every connection opens with the job's
//! handshake ([`crate::auth`]) before VALIDATE: only a jitccl server with the same key
//! answers it.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tracing::debug;

use super::protocol::{
    Command, Put, MAX_WAIT_KEY_BYTES, NOT_READY, READY, STOP_WAITING, VALIDATION_MAGIC, WAIT_CANCELED,
};
use super::request::{invalid, is_timeout, key_list, remaining, Frame, Wire, KEY_PREFIX};
use super::{Result, Store, StoreError};
use crate::auth::{Initiator, JobKey, Refusal, Service, REPLY_LEN};
use crate::bootstrap::deadline_after;

const FIRST_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
const REFUSED: &str = "the server closed the connection before answering: it is at its connection limit \
                       (or out of file descriptors), or it is not a store server that knows PING";

/// A connection to a store [`Server`](super::Server) (or a PyTorch TCPStore server).
/// Calls from several threads take turns on the one connection.
pub struct TcpStore {
    addrs: Vec<SocketAddr>,
    timeout: Duration,
    /// What every connection proves that it knows, if anything.
    key: Option<JobKey>,
    /// `None` after a failed call, until the next call reconnects.
    link: Mutex<Option<TcpStream>>,
    /// A connection was made once: the server was up.
    reached: AtomicBool,
}

impl TcpStore {
    /// Connects to the server at `addr`, retrying with exponential backoff until `timeout`
    /// (the server may not be up yet). `timeout` also bounds every later call, and is how
    /// long `get` and `multi_get` wait for missing keys.
    pub fn connect(addr: impl ToSocketAddrs, timeout: Duration) -> Result<TcpStore> {
        Self::open_with(addr, timeout, None)
    }

    /// As [`connect`](Self::connect); with `key`, every connection first proves that it
    /// knows it to a server that proves the same ([`Server::bind_keyed`](super::Server::bind_keyed)
    /// with that key): a server without it (PyTorch's) is refused.
    pub fn connect_keyed(addr: impl ToSocketAddrs, timeout: Duration, key: Option<JobKey>) -> Result<TcpStore> {
        if key.is_none() {
            crate::auth::note_unauthenticated("store client");
        }
        Self::open_with(addr, timeout, key)
    }

    fn open_with(addr: impl ToSocketAddrs, timeout: Duration, key: Option<JobKey>) -> Result<TcpStore> {
        crate::logging::init();
        let addrs: Vec<SocketAddr> =
            addr.to_socket_addrs().map_err(|source| StoreError::Io { op: "connect", source })?.collect();
        if addrs.is_empty() {
            return Err(StoreError::InvalidArgument { op: "connect", msg: "the address resolves to nothing".into() });
        }
        let store = TcpStore { addrs, timeout, key, link: Mutex::new(None), reached: AtomicBool::new(false) };
        let stream = store.open("connect", deadline_after(Instant::now(), timeout))?;
        *store.session() = Some(stream);
        Ok(store)
    }

    /// The timeout given to `connect`.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Checks that the server answers.
    pub fn ping(&self) -> Result<()> {
        let nonce = std::process::id();
        let mut frame = Frame::new("ping", Command::Ping);
        frame.bytes.put_u32(nonce);
        let frame = frame.finish()?;
        self.request(&mut self.session(), "ping", &[], |w| {
            w.send(&frame)?;
            expect_nonce(w.u32()?, nonce)
        })
    }

    fn session(&self) -> MutexGuard<'_, Option<TcpStream>> {
        self.link.lock().unwrap_or_else(|poisoned| {
            // A call panicked mid-request: its connection may be out of step.
            self.link.clear_poison();
            let mut link = poisoned.into_inner();
            *link = None;
            link
        })
    }

    /// Opens and validates a connection for `op`, retrying until `deadline`.
    fn open(&self, op: &'static str, deadline: Instant) -> Result<TcpStream> {
        let started = Instant::now();
        let mut backoff = FIRST_BACKOFF;
        let addr = || self.addrs.iter().map(SocketAddr::to_string).collect::<Vec<_>>().join(", ");
        loop {
            let err = match self.try_open(deadline) {
                Ok(stream) => {
                    self.reached.store(true, Ordering::Relaxed);
                    return Ok(stream);
                }
                Err(e) => e,
            };
            if let Some(why) = err.get_ref().and_then(|e| e.downcast_ref::<Refusal>()) {
                return Err(StoreError::Auth { addr: addr(), why: *why });
            }
            if err.kind() == io::ErrorKind::ConnectionRefused && self.reached.load(Ordering::Relaxed) {
                return Err(StoreError::Gone { op, addr: addr(), source: err });
            }
            let now = Instant::now();
            // Closed by a server that accepted the connection: retrying would only be
            // refused again until the deadline.
            if now >= deadline || err.kind() == io::ErrorKind::ConnectionAborted {
                return Err(StoreError::Connect { addr: addr(), after: now - started, source: err });
            }
            // Jitter spreads out the retries of many ranks started together.
            let delay = (backoff / 2 + jitter(backoff / 2)).min(deadline - now);
            debug!("store: connecting to {:?} failed ({err}); retrying in {delay:?}", self.addrs);
            std::thread::sleep(delay);
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One attempt: connect, VALIDATE, then PING to learn that a store server is there.
    fn try_open(&self, deadline: Instant) -> io::Result<TcpStream> {
        let mut last = io::Error::new(io::ErrorKind::TimedOut, "no time left to connect");
        for addr in &self.addrs {
            let Some(left) = remaining(deadline) else { break };
            match TcpStream::connect_timeout(addr, left) {
                Ok(mut stream) => {
                    stream.set_nodelay(true)?;
                    let nonce = std::process::id();
                    let mut hello = Vec::new();
                    hello.put_u8(Command::Validate as u8);
                    hello.put_u32(VALIDATION_MAGIC);
                    hello.put_u8(Command::Ping as u8);
                    hello.put_u32(nonce);
                    let mut wire = Wire { stream: &mut stream, deadline };
                    if let Some(key) = &self.key {
                        authenticate(&mut wire, key)?;
                    }
                    let echoed = wire.send(&hello).and_then(|()| wire.u32()).map_err(|e| match e.kind() {
                        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => {
                            io::Error::new(io::ErrorKind::ConnectionAborted, REFUSED)
                        }
                        _ => e,
                    })?;
                    expect_nonce(echoed, nonce)?;
                    return Ok(stream);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Runs one request on the connection (reconnecting first if needed) within the
    /// store's timeout. On failure the connection is dropped: it may be out of step.
    fn request<T>(
        &self, link: &mut Option<TcpStream>, op: &'static str, keys: &[&str],
        exchange: impl FnOnce(&mut Wire<'_>) -> io::Result<T>,
    ) -> Result<T> {
        let deadline = deadline_after(Instant::now(), self.timeout);
        let stream = match link {
            Some(stream) => stream,
            None => link.insert(self.open(op, deadline)?),
        };
        exchange(&mut Wire { stream, deadline }).map_err(|e| {
            *link = None;
            self.error(op, keys, e)
        })
    }

    /// WAIT for `keys` up to `timeout`; on timeout, cancels the WAIT so the connection
    /// stays usable.
    fn wait_in(&self, link: &mut Option<TcpStream>, op: &'static str, keys: &[&str], timeout: Duration) -> Result<()> {
        let key_bytes: usize = keys.iter().map(|k| KEY_PREFIX.len() + k.len()).sum();
        if key_bytes > MAX_WAIT_KEY_BYTES {
            let msg = format!("a WAIT for {key_bytes} bytes of keys (limit {MAX_WAIT_KEY_BYTES})");
            return Err(StoreError::InvalidArgument { op, msg });
        }
        let frame = key_list(op, Command::Wait, keys)?.finish()?;
        let reply = self.request(link, op, keys, |w| {
            w.send(&frame)?;
            w.deadline = deadline_after(Instant::now(), timeout);
            match w.u8() {
                Ok(byte) => Ok(Some(byte)),
                Err(e) if is_timeout(&e) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        match reply {
            Some(STOP_WAITING) => Ok(()),
            Some(byte) => {
                *link = None;
                Err(StoreError::Protocol { op, msg: format!("WAIT reply {byte}, expected STOP_WAITING") })
            }
            None => {
                let cancel = [Command::CancelWait as u8];
                // The keys may have arrived just before the cancel: then STOP_WAITING
                // comes first. Any failure here drops the connection instead.
                let cancelled = self.request(link, "cancel wait", keys, |w| {
                    w.send(&cancel)?;
                    let mut byte = w.u8()?;
                    if byte == STOP_WAITING {
                        byte = w.u8()?;
                    }
                    if byte != WAIT_CANCELED {
                        return Err(invalid(format!("CANCEL_WAIT reply {byte}, expected WAIT_CANCELED")));
                    }
                    Ok(())
                });
                if let Err(e) = cancelled {
                    debug!("store: cancelling a timed-out wait failed ({e}); reconnecting on the next call");
                }
                Err(StoreError::Timeout { op, keys: keys.iter().map(|k| k.to_string()).collect(), after: timeout })
            }
        }
    }

    fn error(&self, op: &'static str, keys: &[&str], e: io::Error) -> StoreError {
        use io::ErrorKind::*;
        match e.kind() {
            WouldBlock | TimedOut => {
                StoreError::Timeout { op, keys: keys.iter().map(|k| k.to_string()).collect(), after: self.timeout }
            }
            UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe => StoreError::Closed { op },
            InvalidData => StoreError::Protocol { op, msg: e.to_string() },
            _ => StoreError::Io { op, source: e },
        }
    }
}

impl Store for TcpStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let mut frame = Frame::new("set", Command::Set);
        frame.key(key)?;
        frame.value(value)?;
        let frame = frame.finish()?;
        self.request(&mut self.session(), "set", &[key], |w| w.send(&frame))
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        let mut frame = Frame::new("get", Command::Get);
        frame.key(key)?;
        let frame = frame.finish()?;
        let mut link = self.session();
        self.wait_in(&mut link, "get", &[key], self.timeout)?;
        self.request(&mut link, "get", &[key], |w| {
            w.send(&frame)?;
            w.bytes()
        })
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let mut frame = Frame::new("add", Command::Add);
        frame.key(key)?;
        frame.bytes.put_i64(delta);
        let frame = frame.finish()?;
        self.request(&mut self.session(), "add", &[key], |w| {
            w.send(&frame)?;
            w.i64()
        })
    }

    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        let mut frame = Frame::new("compare_set", Command::CompareSet);
        frame.key(key)?;
        frame.value(expected)?;
        frame.value(desired)?;
        let frame = frame.finish()?;
        self.request(&mut self.session(), "compare_set", &[key], |w| {
            w.send(&frame)?;
            w.bytes()
        })
    }

    fn check(&self, keys: &[&str]) -> Result<bool> {
        let frame = key_list("check", Command::Check, keys)?.finish()?;
        self.request(&mut self.session(), "check", keys, |w| {
            w.send(&frame)?;
            match w.u8()? {
                READY => Ok(true),
                NOT_READY => Ok(false),
                other => Err(invalid(format!("CHECK reply {other}, expected READY or NOT_READY"))),
            }
        })
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        self.wait_in(&mut self.session(), "wait", keys, timeout)
    }

    fn delete(&self, key: &str) -> Result<bool> {
        let mut frame = Frame::new("delete", Command::DeleteKey);
        frame.key(key)?;
        let frame = frame.finish()?;
        self.request(&mut self.session(), "delete", &[key], |w| {
            w.send(&frame)?;
            Ok(w.i64()? == 1)
        })
    }

    fn num_keys(&self) -> Result<u64> {
        let frame = Frame::new("num_keys", Command::GetNumKeys).finish()?;
        self.request(&mut self.session(), "num_keys", &[], |w| {
            w.send(&frame)?;
            let n = w.i64()?;
            u64::try_from(n).map_err(|_| invalid(format!("GETNUMKEYS reply {n}")))
        })
    }

    fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        let mut frame = Frame::new("append", Command::Append);
        frame.key(key)?;
        frame.value(value)?;
        let frame = frame.finish()?;
        self.request(&mut self.session(), "append", &[key], |w| w.send(&frame))
    }

    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>> {
        let frame = key_list("multi_get", Command::MultiGet, keys)?.finish()?;
        let mut link = self.session();
        self.wait_in(&mut link, "multi_get", keys, self.timeout)?;
        self.request(&mut link, "multi_get", keys, |w| {
            w.send(&frame)?;
            keys.iter().map(|_| w.bytes()).collect()
        })
    }

    fn multi_set(&self, pairs: &[(&str, &[u8])]) -> Result<()> {
        let mut frame = Frame::new("multi_set", Command::MultiSet);
        frame.count(pairs.len())?;
        for (key, value) in pairs {
            frame.key(key)?;
            frame.value(value)?;
        }
        let frame = frame.finish()?;
        let keys: Vec<&str> = pairs.iter().map(|p| p.0).collect();
        self.request(&mut self.session(), "multi_set", &keys, |w| w.send(&frame))
    }
}

/// The job's handshake as the initiator: a refusal is an `io::Error` holding the
/// [`Refusal`] (the server closing instead of answering is one: it cannot authenticate).
fn authenticate(wire: &mut Wire<'_>, key: &JobKey) -> io::Result<()> {
    let refused = |why: Refusal| io::Error::new(io::ErrorKind::PermissionDenied, why);
    let (me, hello) = Initiator::start(key, Service::Store)?;
    let mut reply = [0u8; REPLY_LEN];
    wire.send(&hello).and_then(|()| wire.exact(&mut reply)).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => {
            refused(Refusal::Closed)
        }
        _ => e,
    })?;
    let proof = me.finish(&reply).map_err(refused)?;
    wire.send(&proof)
}

fn expect_nonce(echoed: u32, nonce: u32) -> io::Result<()> {
    if echoed == nonce {
        Ok(())
    } else {
        Err(invalid(format!("PING reply {echoed:#x}, expected {nonce:#x}: not a store server")))
    }
}

/// A random duration up to `max`, from the standard library's per-process random hash keys.
fn jitter(max: Duration) -> Duration {
    let r = RandomState::new().build_hasher().finish();
    max.mul_f64((r % 1024) as f64 / 1024.0)
}
