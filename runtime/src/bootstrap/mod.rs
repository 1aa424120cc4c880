//! Bootstrap: how the ranks of one communicator, in separate processes or hosts, find each
//! other (NCCL's bootstrap).
//!
//! 1. Someone (normally rank 0) creates a [`UniqueId`] — [`UniqueId::new`] starts a
//!    [`Root`](root::Root) thread in that process — and hands the id's 128 bytes to every
//!    rank (through a store, MPI, a file, ...). Or every rank computes it from
//!    `JITCCL_COMM_ID=host:port` ([`UniqueId::from_env`]), rank 0 starting the root at that
//!    address.
//! 2. Every rank calls [`Bootstrap::init`]: it listens on the chosen interface
//!    ([`iface`]), sends the root its rank, nranks and listen address, and waits. The root
//!    checks them (wrong magic, duplicate rank, nranks mismatch, missing ranks) and tells each
//!    rank its ring successor's address, or the error, to every rank, on the connection the
//!    rank's hello came on: the rank's [`link`], open until every rank has finished init.
//! 3. The ranks connect in a ring and AllGather their listen addresses over it.
//! 4. Then: [`Bootstrap::all_gather`] and [`Bootstrap::barrier`] over the ring, and tagged
//!    any-to-any [`Bootstrap::send`] / [`Bootstrap::recv`]. A communicator's init
//!    ([`Bootstrap::init_scalable`]) uses them too, and ends with
//!    [`Bootstrap::finish_init`] (or [`Bootstrap::fail_init`]).
//!
//! Every wait is bounded by [`BootstrapConfig::timeout`] (`JITCCL_BOOTSTRAP_TIMEOUT`,
//! default 120 s) and ends within ~50 ms of the abort flag being set. Until init has ended
//! everywhere, a rank that dies or fails is seen by its root, which tells every other rank
//! at once: their waits end naming it, instead of at the timeout; so does the root's own
//! death. A rank slow to start still gets the whole timeout. The wire format is in
//! [`wire`]. Above 128 ranks the connections to the root are staggered (rank-dependent
//! delays spread over up to ~2 s) so the root is not hit by every rank at once.
//!
//! With several unique ids ([`Bootstrap::init_scalable`], NCCL's scalable init) each id's
//! root serves one contiguous block of ranks ([`scalable`]); the rest is the same.
//!
//! `tests::module_doc_example` shows one rank's whole life (the tests live in `tests/`).

mod error;
mod id;
mod iface;
mod incoming;
mod join;
mod launcher;
mod link;
mod liveness;
mod net;
mod ring;
mod root;
mod scalable;
mod stream;
pub(crate) mod test_hook;
mod wait;
mod wire;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use error::BootstrapError;
pub(crate) use error::{Result, Secs};
pub use id::{UniqueId, UNIQUE_ID_BYTES};
pub use launcher::launcher_vars;
pub(crate) use launcher::LaunchEnv;
pub(crate) use net::watch_link;
pub(crate) use wait::deadline_after;

use crate::auth::{self, JobKey, Session, Tls};
use crate::settings::{BOOTSTRAP_TIMEOUT, SOCKET_IFNAME};
use incoming::{Acceptor, Incoming, Mailbox, Message};
use liveness::Liveness;
use ring::Ring;
use wait::{Waiter, Watch};
use wire::{Header, Kind};

/// Above this many ranks, connections to the root are staggered.
pub const STAGGER_ABOVE: usize = 128;

/// Settings of a bootstrap (and of a root).
#[derive(Clone, Debug)]
pub struct BootstrapConfig {
    /// Bound of every wait (each operation gets this much from its start; waiting for the
    /// root's reply gets a little more, so the root's missing-rank report arrives first).
    pub timeout: Duration,
    /// The communicator's abort flag: once set, every wait ends with `Aborted`.
    pub abort: Arc<AtomicBool>,
    /// Interface filter (`JITCCL_SOCKET_IFNAME` syntax, see [`iface`]); `None`: automatic.
    pub ifname: Option<String>,
    /// The rank whose process runs the root, when the caller knows it (the rank that made
    /// the id): named if the root dies before this rank hears which rank runs it.
    pub root_rank: Option<usize>,
}

impl Default for BootstrapConfig {
    /// 120 s timeout, a fresh abort flag, automatic interface (the environment is not read).
    fn default() -> Self {
        Self {
            timeout: BOOTSTRAP_TIMEOUT.default_duration(),
            abort: Arc::new(AtomicBool::new(false)),
            ifname: None,
            root_rank: None,
        }
    }
}

impl BootstrapConfig {
    /// `JITCCL_BOOTSTRAP_TIMEOUT` (seconds) and `JITCCL_SOCKET_IFNAME`, with a fresh abort flag.
    pub fn from_env() -> Result<Self> {
        Ok(Self { timeout: BOOTSTRAP_TIMEOUT.seconds(None)?, ifname: SOCKET_IFNAME.text()?, ..Self::default() })
    }

    #[allow(dead_code, reason = "bootstrap API used by its tests, not (yet) by the runtime")]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn with_abort(mut self, abort: Arc<AtomicBool>) -> Self {
        self.abort = abort;
        self
    }

    pub fn with_root_rank(mut self, root_rank: Option<usize>) -> Self {
        self.root_rank = root_rank;
        self
    }

    #[allow(dead_code, reason = "bootstrap API used by its tests, not (yet) by the runtime")]
    pub fn with_ifname(mut self, ifname: impl Into<String>) -> Self {
        self.ifname = Some(ifname.into());
        self
    }
}

/// One rank's connection to the other ranks of its communicator.
pub struct Bootstrap {
    rank: usize,
    nranks: usize,
    nonce: u64,
    /// What the ranks' connections to each other prove that they know, if anything.
    key: Option<JobKey>,
    /// With a key, every rank's session nonce, which messages to it are sealed for.
    sessions: Vec<Session>,
    /// Sequence numbers of the messages this rank sent (each taken once by its receiver).
    sent: AtomicU64,
    timeout: Duration,
    abort: Arc<AtomicBool>,
    /// Listen address of every rank.
    peers: Vec<SocketAddr>,
    incoming: Acceptor,
    /// Send/recv messages that arrived before they were asked for.
    mailbox: Mutex<Mailbox>,
    /// `None` with one rank.
    ring: Mutex<Option<Ring>>,
    /// What the waits know of peers that are gone: the link to the root(s) until init has
    /// ended everywhere, then what the communicator learns.
    live: Liveness,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Bootstrap {
    /// This rank's init is complete: waits until every rank's is (or one died or failed),
    /// so no rank's process, the root's among them, ends while another still needs it.
    /// After it, a rank's death is no longer the roots' business.
    pub fn finish_init(&self) -> Result<()> {
        self.live.link.done(&self.waiter("finish init", None))
    }

    /// This rank's init failed with `why`: the roots tell the other ranks at once.
    pub fn fail_init(&self, why: &dyn std::fmt::Display) {
        self.live.link.fail(why)
    }

    /// `Err` (naming the rank) once a rank is known to be gone: during init, the roots said
    /// that a rank died or failed.
    pub fn check_peers(&self, op: &'static str) -> Result<()> {
        self.live.check(op, None)
    }

    /// A peer's connection was lost outside the bootstrap during `op`: word of the rank
    /// that is gone, if it comes soon (as for the bootstrap's own waits).
    pub fn why_lost(&self, op: &'static str) -> Option<BootstrapError> {
        self.live.why_lost(op, None)
    }

    /// After init: `gone(q)` says whether rank `q` is known to be gone (its process
    /// exited, its connection closed), for the waits of later exchanges (split, shrink).
    pub fn watch_peers(&self, gone: impl Fn(usize) -> bool + Send + Sync + 'static) {
        self.live.set_gone(Box::new(gone))
    }

    /// A waiter for one operation of this bootstrap: its timeout, its abort flag, what it
    /// knows of peers that are gone (`peer`'s, or every rank's).
    fn waiter(&self, op: &'static str, peer: Option<usize>) -> Waiter<'_> {
        Waiter::new(op, peer, self.timeout, &self.abort).watching(&self.live)
    }

    /// The communicator's nonce: the same on every rank, another for every communicator
    /// (NCCL's commHash, which network plugins get to group a communicator's connections).
    pub fn nonce(&self) -> u64 {
        self.nonce
    }

    #[allow(dead_code, reason = "bootstrap API used by its tests, not (yet) by the runtime")]
    pub fn rank(&self) -> usize {
        self.rank
    }

    #[allow(dead_code, reason = "bootstrap API used by its tests, not (yet) by the runtime")]
    pub fn nranks(&self) -> usize {
        self.nranks
    }

    /// The communicator's key, which its other connections (the network transport's) prove
    /// that they know too; `None`: they are not authenticated.
    pub fn key(&self) -> Option<JobKey> {
        self.key
    }

    /// The listen address of rank `peer`.
    pub fn peer_addr(&self, peer: usize) -> Option<SocketAddr> {
        self.peers.get(peer).copied()
    }

    #[allow(dead_code, reason = "bootstrap API used by its tests, not (yet) by the runtime")]
    /// True once the abort flag is set.
    pub fn is_aborted(&self) -> bool {
        self.abort.load(Ordering::Acquire)
    }

    fn check_peer(&self, peer: usize, op: &str) -> Result<()> {
        if peer >= self.nranks {
            return Err(BootstrapError::InvalidArgument(format!("{op}: peer {peer} is not in 0..{}", self.nranks)));
        }
        Ok(())
    }

    /// Every rank's contribution, by rank. Contributions may have different lengths (each is
    /// sent with its length). Every rank must call it (and [`barrier`](Self::barrier)) in
    /// the same order; calls from several threads of one rank are serialized.
    pub fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.ring_all_gather("all_gather", mine)
    }

    /// Returns once every rank has entered the barrier (an all-gather of nothing).
    pub fn barrier(&self) -> Result<()> {
        self.ring_all_gather("barrier", &[]).map(|_| ())
    }

    fn ring_all_gather(&self, op: &'static str, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let w = self.waiter(op, None);
        w.check()?;
        let mut guard = lock(&self.ring);
        let Some(ring) = guard.as_mut() else { return Ok(vec![mine.to_vec()]) };
        ring::all_gather(ring, self.rank, self.nranks, self.nonce, mine, &w)
    }

    #[allow(dead_code, reason = "bootstrap API used by its tests, not (yet) by the runtime")]
    /// Sends `data` to rank `peer` with `tag` (one connection per message). Returns once
    /// the message is handed to the OS; a message larger than the socket buffers waits for
    /// the peer to receive it (up to the timeout). Sending to oneself is allowed.
    pub fn send(&self, peer: usize, tag: u64, data: &[u8]) -> Result<()> {
        self.check_peer(peer, "send")?;
        let w = self.waiter("send", Some(peer));
        w.check()?;
        if peer == self.rank {
            lock(&self.mailbox).push(Message { from: peer, tag, data: data.to_vec() });
            return Ok(());
        }
        let s = net::connect(self.peers[peer], &w)?;
        let header = Header::new(self.nonce, Kind::P2p, self.rank as u32, tag, data.len());
        let mut msg = wire::message(header, data);
        if let (Some(key), Some(session)) = (&self.key, self.sessions.get(peer)) {
            let seq = self.sent.fetch_add(1, Ordering::Relaxed);
            msg.extend_from_slice(&auth::seal(key, session, seq, &[&header.encode(), data]));
        }
        net::write_all(&s, &msg, &w)
    }

    #[allow(dead_code, reason = "bootstrap API used by its tests, not (yet) by the runtime")]
    /// Receives the oldest message from rank `peer` with `tag`. Messages that arrive for
    /// other (peer, tag) pairs meanwhile are kept for later `recv`s, so the sender may send
    /// its tags in any order. Messages with the same (peer, tag) arrive in the order sent
    /// (when one thread at a time receives that pair). Several threads may call `recv`.
    pub fn recv(&self, peer: usize, tag: u64) -> Result<Vec<u8>> {
        self.check_peer(peer, "recv")?;
        let w = self.waiter("recv", Some(peer));
        loop {
            if let Some(d) = lock(&self.mailbox).take(peer, tag) {
                return Ok(d);
            }
            w.check()?;
            // Accept without holding the mailbox: other threads' recvs and self-sends go on.
            match self.incoming.next(self.nonce, self.nranks, &w)? {
                Some(Incoming::P2p(m)) if m.from == peer && m.tag == tag => return Ok(m.data),
                Some(Incoming::P2p(m)) => lock(&self.mailbox).push(m),
                Some(Incoming::Ring(..)) => {
                    tracing::warn!(rank = self.rank, "jitccl bootstrap: ignoring an unexpected ring connection")
                }
                None => {}
            }
        }
    }

    /// From now on the ring's connections and the links to the root(s) carry TLS ([`Tls`],
    /// pinned to the job's key): every rank calls it at the same point (once the
    /// communicator's configuration, which says whether it uses TLS, is agreed). A
    /// neighbour that does not, or that proves another key, fails it naming that rank; a
    /// rank whose link stays in the clear is refused by its root, which names it.
    pub fn start_tls(&self, tls: &Tls) -> Result<()> {
        let w = self.waiter("start TLS on the ring", None);
        w.check()?;
        if let Some(ring) = lock(&self.ring).as_mut() {
            ring.start_tls(tls, self.rank, self.nranks, &w)?;
        }
        if self.live.link.is_live() {
            self.live.link.start_tls(tls, &w.sub("start TLS on the links to the root", None))?;
        }
        tracing::debug!(rank = self.rank, "jitccl bootstrap: the ring and the links to the root carry TLS");
        Ok(())
    }

    /// Sets the abort flag (shared with whoever gave it in the config: the whole
    /// communicator) and shuts the ring down; every wait of every user of the flag ends
    /// with `Aborted`. Sockets are closed when the `Bootstrap` is dropped.
    pub fn abort(&self) {
        self.abort.store(true, Ordering::Release);
        if let Ok(guard) = self.ring.try_lock() {
            if let Some(r) = guard.as_ref() {
                let _ = r.next.socket().shutdown(std::net::Shutdown::Both);
                let _ = r.prev.socket().shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

impl std::fmt::Debug for Bootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bootstrap")
            .field("rank", &self.rank)
            .field("nranks", &self.nranks)
            .field("peers", &self.peers)
            .finish()
    }
}

#[cfg(test)]
mod tests;
