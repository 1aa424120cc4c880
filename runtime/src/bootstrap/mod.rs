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
//!    rank its ring successor's address, or the error, to every rank.
//! 3. The ranks connect in a ring and AllGather their listen addresses over it.
//! 4. Then: [`Bootstrap::all_gather`] and [`Bootstrap::barrier`] over the ring, and tagged
//!    any-to-any [`Bootstrap::send`] / [`Bootstrap::recv`].
//!
//! Every wait is bounded by [`BootstrapConfig::timeout`] (`JITCCL_BOOTSTRAP_TIMEOUT`,
//! default 120 s) and ends within ~50 ms of the abort flag being set. The wire format is in
//! [`wire`]. Above 128 ranks the connections to the root are staggered (rank-dependent
//! delays spread over up to ~2 s) so the root is not hit by every rank at once.
//!
//! With several unique ids ([`Bootstrap::init_scalable`], NCCL's scalable init) each id's
//! root serves one contiguous block of ranks ([`scalable`]); the rest is the same.
//!
//! `tests::module_doc_example` shows one rank's whole life (the tests live in `tests/`).

mod env;
mod error;
mod id;
mod iface;
mod incoming;
mod launch;
mod net;
mod ring;
mod root;
mod scalable;
mod wire;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use error::BootstrapError;
pub(crate) use error::Result;
pub use id::{UniqueId, UNIQUE_ID_BYTES};
pub use launch::launcher_vars;
pub(crate) use launch::LaunchEnv;
pub(crate) use net::deadline_after;

use env::{DEFAULT_TIMEOUT, IFNAME_VAR, TIMEOUT_VAR};
use incoming::{Acceptor, Incoming, Mailbox, Message};
use net::Waiter;
use ring::Ring;
use socket2::Socket;
use wire::{Header, Hello, Kind};

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
}

impl Default for BootstrapConfig {
    /// 120 s timeout, a fresh abort flag, automatic interface (the environment is not read).
    fn default() -> Self {
        Self { timeout: DEFAULT_TIMEOUT, abort: Arc::new(AtomicBool::new(false)), ifname: None }
    }
}

impl BootstrapConfig {
    /// `JITCCL_BOOTSTRAP_TIMEOUT` (seconds) and `JITCCL_SOCKET_IFNAME`, with a fresh abort flag.
    pub fn from_env() -> Result<Self> {
        let mut c = Self::default();
        if let Some(t) = env::var(TIMEOUT_VAR)? {
            c.timeout = env::parse_timeout(&t)?;
        }
        c.ifname = env::var(IFNAME_VAR)?;
        Ok(c)
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

    #[allow(dead_code, reason = "bootstrap API used by its tests, not (yet) by the runtime")]
    pub fn with_ifname(mut self, ifname: impl Into<String>) -> Self {
        self.ifname = Some(ifname.into());
        self
    }
}

/// Extra time a rank waits for the root's reply beyond its timeout, so the root (whose
/// deadline is at most the first rank's timeout after that rank arrived) can report which
/// ranks are missing before the ranks give up.
fn reply_grace(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_secs(1), Duration::from_secs(10))
}

/// Delay before rank `rank` contacts the root: none up to [`STAGGER_ABOVE`] ranks, then
/// 1 ms per rank, compressed so the last rank waits at most ~2 s.
fn stagger_delay(rank: usize, nranks: usize) -> Duration {
    if nranks <= STAGGER_ABOVE {
        return Duration::ZERO;
    }
    let per_rank_us = (2_000_000 / nranks as u64).min(1000);
    Duration::from_micros(rank as u64 * per_rank_us)
}

/// One rank's connection to the other ranks of its communicator.
pub struct Bootstrap {
    rank: usize,
    nranks: usize,
    nonce: u64,
    timeout: Duration,
    abort: Arc<AtomicBool>,
    /// Listen address of every rank.
    peers: Vec<SocketAddr>,
    incoming: Acceptor,
    /// Send/recv messages that arrived before they were asked for.
    mailbox: Mutex<Mailbox>,
    /// `None` with one rank.
    ring: Mutex<Option<Ring>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Bootstrap {
    /// Joins the communicator `id` as `rank` of `nranks`: registers with the root, forms the
    /// ring and exchanges listen addresses. Fails with the root's error if the communicator
    /// cannot form (duplicate rank, nranks mismatch, missing ranks), `Timeout` if the root
    /// or a ring neighbour does not answer in time, `Aborted` if the abort flag is set.
    #[allow(dead_code, reason = "the runtime calls init_scalable; the bootstrap tests call this")]
    pub fn init(id: &UniqueId, rank: usize, nranks: usize, config: &BootstrapConfig) -> Result<Bootstrap> {
        Self::init_scalable(std::slice::from_ref(id), rank, nranks, config)
    }

    /// As [`init`](Self::init) with several roots: `ids[k]`'s root serves block `k` of the
    /// ranks ([`scalable::Block`]); every rank must be given the same ids in the same order
    /// (`IdsMismatch` otherwise, `InvalidArgument` for an empty list, more ids than ranks
    /// or two ids of one root).
    pub fn init_scalable(ids: &[UniqueId], rank: usize, nranks: usize, config: &BootstrapConfig) -> Result<Bootstrap> {
        if nranks == 0 || rank >= nranks {
            return Err(BootstrapError::InvalidRank { rank, nranks });
        }
        if nranks >= wire::ROOT_RANK as usize {
            return Err(BootstrapError::InvalidArgument(format!("nranks {nranks} is too large")));
        }
        let abort = &*config.abort;
        let timeout = config.timeout;
        let nonce = scalable::comm_nonce(ids, nranks)?;
        let nroots = ids.len();
        let iroot = scalable::root_of(rank, nranks, nroots);
        let block = scalable::Block::of_root(iroot, nranks, nroots);
        let start = Waiter::new("connect to the root", None, timeout, abort);
        start.check()?;

        let iface = iface::choose_interface(config.ifname.as_deref(), Some(ids[iroot].root_addr().ip()))?;
        let incoming = Acceptor::new(net::listen(SocketAddr::new(iface.addr, 0))?);
        let me = incoming.local_addr()?;

        // 1. Tell the root who we are (each root staggers its own block); a block's first
        //    rank also tells the previous root, whose last rank it follows in the ring.
        start.sleep(stagger_delay(rank - block.first, block.len))?;
        let hello = |k: usize| Hello {
            nranks: nranks as u32,
            iroot: k as u32,
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            listen: me,
            nroots: nroots as u32,
            comm_nonce: nonce,
        };
        say_hello(&ids[iroot], rank, &hello(iroot), &start)?;
        if nroots > 1 && rank == block.first {
            let prev = (iroot + nroots - 1) % nroots;
            say_hello(&ids[prev], rank, &hello(prev), &start)?;
        }

        // 2. Wait for the root's reply (or its error), keeping whatever else arrives.
        let (next_rank, prev_rank) = ((rank + 1) % nranks, (rank + nranks - 1) % nranks);
        let mut mailbox = Mailbox::default();
        let mut prev: Option<Socket> = None;
        let mut wait_root = start.sub("wait for the root's reply", None);
        wait_root.extend(reply_grace(timeout));
        let next_addr = loop {
            wait_root.check()?;
            match incoming.next(nonce, nranks, &wait_root)? {
                Some(Incoming::RootReply(r)) if r.nranks as usize == nranks => break r.next,
                Some(Incoming::RootReply(r)) => {
                    return Err(BootstrapError::Protocol {
                        from: "the root".into(),
                        detail: format!("reply for {} ranks, this rank has nranks = {nranks}", r.nranks),
                    })
                }
                Some(Incoming::RootError(e)) => return Err(e),
                Some(other) => keep(other, prev_rank, &mut prev, &mut mailbox),
                None => {}
            }
        };

        let mut boot = Bootstrap {
            rank,
            nranks,
            nonce,
            timeout,
            abort: config.abort.clone(),
            peers: vec![me],
            incoming,
            mailbox: Mutex::new(Mailbox::default()),
            ring: Mutex::new(None),
        };
        if nranks == 1 {
            *boot.mailbox.get_mut().unwrap() = mailbox;
            return Ok(boot);
        }

        // 3. Form the ring: connect to the successor, accept the predecessor.
        let w = Waiter::new("ring connect", Some(next_rank), timeout, abort);
        let next = net::connect(next_addr, &w)?;
        net::write_all(&next, &Header::new(nonce, Kind::RingConnect, rank as u32, 0, 0).encode(), &w)?;
        let w = w.sub("ring accept", Some(prev_rank));
        while prev.is_none() {
            w.check()?;
            match boot.incoming.next(nonce, nranks, &w)? {
                Some(Incoming::RootReply(_)) | Some(Incoming::RootError(_)) => {
                    tracing::warn!(rank, "jitccl bootstrap: ignoring a second message from the root")
                }
                Some(other) => keep(other, prev_rank, &mut prev, &mut mailbox),
                None => {}
            }
        }
        *boot.mailbox.get_mut().unwrap() = mailbox;
        let mut ring = Ring { next, prev: prev.unwrap(), seq: 0 };

        // 4. AllGather the listen addresses.
        let mut mine = Vec::with_capacity(wire::ADDR_BYTES);
        wire::encode_addr(&me, &mut mine);
        let w = Waiter::new("address all_gather", Some(prev_rank), timeout, abort);
        let all = ring::all_gather(&mut ring, rank, nranks, nonce, &mine, &w)?;
        let peers = all
            .iter()
            .enumerate()
            .map(|(r, b)| {
                wire::decode_addr(b).filter(|_| b.len() == wire::ADDR_BYTES).ok_or_else(|| BootstrapError::Protocol {
                    from: format!("rank {prev_rank} (ring predecessor)"),
                    detail: format!("malformed listen address of rank {r}"),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if peers[next_rank] != next_addr {
            return Err(BootstrapError::Protocol {
                from: "the ring".into(),
                detail: format!("rank {next_rank} listens on {}, the root said {next_addr}", peers[next_rank]),
            });
        }
        boot.peers = peers;
        *boot.ring.get_mut().unwrap() = Some(ring);
        tracing::debug!(rank, nranks, listen = %me, "jitccl bootstrap: ready");
        Ok(boot)
    }

    #[allow(dead_code, reason = "bootstrap API used by its tests, not (yet) by the runtime")]
    pub fn rank(&self) -> usize {
        self.rank
    }

    #[allow(dead_code, reason = "bootstrap API used by its tests, not (yet) by the runtime")]
    pub fn nranks(&self) -> usize {
        self.nranks
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
        let w = Waiter::new(op, None, self.timeout, &self.abort);
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
        let w = Waiter::new("send", Some(peer), self.timeout, &self.abort);
        w.check()?;
        if peer == self.rank {
            lock(&self.mailbox).push(Message { from: peer, tag, data: data.to_vec() });
            return Ok(());
        }
        let s = net::connect(self.peers[peer], &w)?;
        let msg = wire::message(Header::new(self.nonce, Kind::P2p, self.rank as u32, tag, data.len()), data);
        net::write_all(&s, &msg, &w)
    }

    #[allow(dead_code, reason = "bootstrap API used by its tests, not (yet) by the runtime")]
    /// Receives the oldest message from rank `peer` with `tag`. Messages that arrive for
    /// other (peer, tag) pairs meanwhile are kept for later `recv`s, so the sender may send
    /// its tags in any order. Messages with the same (peer, tag) arrive in the order sent
    /// (when one thread at a time receives that pair). Several threads may call `recv`.
    pub fn recv(&self, peer: usize, tag: u64) -> Result<Vec<u8>> {
        self.check_peer(peer, "recv")?;
        let w = Waiter::new("recv", Some(peer), self.timeout, &self.abort);
        loop {
            if let Some(d) = lock(&self.mailbox).take(peer, tag) {
                return Ok(d);
            }
            w.check()?;
            // Accept without holding the mailbox: other threads' recvs and self-sends go on.
            match self.incoming.next(self.nonce, self.nranks, &w)? {
                Some(Incoming::P2p(m)) if m.from == peer && m.tag == tag => return Ok(m.data),
                Some(Incoming::P2p(m)) => lock(&self.mailbox).push(m),
                Some(_) => {
                    tracing::warn!(rank = self.rank, "jitccl bootstrap: ignoring an unexpected ring/root message")
                }
                None => {}
            }
        }
    }

    /// Sets the abort flag (shared with whoever gave it in the config: the whole
    /// communicator) and shuts the ring down; every wait of every user of the flag ends
    /// with `Aborted`. Sockets are closed when the `Bootstrap` is dropped.
    pub fn abort(&self) {
        self.abort.store(true, Ordering::Release);
        if let Ok(guard) = self.ring.try_lock() {
            if let Some(r) = guard.as_ref() {
                let _ = r.next.shutdown(std::net::Shutdown::Both);
                let _ = r.prev.shutdown(std::net::Shutdown::Both);
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

/// Sends `hello` to `id`'s root and waits for its acknowledgement.
fn say_hello(id: &UniqueId, rank: usize, hello: &Hello, w: &Waiter) -> Result<()> {
    let s = net::connect_retry(id.root_addr(), w)?;
    let payload = hello.encode();
    let header = Header::new(id.nonce(), Kind::Hello, rank as u32, 0, payload.len());
    net::write_all(&s, &wire::message(header, &payload), w)?;
    // The root acknowledges on this connection: something else listening at the address
    // (wrong JITCCL_COMM_ID) fails here with WrongMagic.
    let ack = net::read_header(&s, id.nonce(), w)?;
    if ack.kind != Kind::HelloAck {
        return Err(BootstrapError::Protocol {
            from: format!("the root at {}", id.root_addr()),
            detail: format!("expected a hello acknowledgement, got {:?}", ack.kind),
        });
    }
    Ok(())
}

/// During init: keep the ring predecessor's connection and early send/recv messages.
fn keep(m: Incoming, prev_rank: usize, prev: &mut Option<Socket>, mailbox: &mut Mailbox) {
    match m {
        Incoming::Ring(s, from) if from == prev_rank && prev.is_none() => *prev = Some(s),
        Incoming::Ring(_, from) => {
            tracing::warn!(from, expected = prev_rank, "jitccl bootstrap: rejected an unexpected ring connection")
        }
        Incoming::P2p(m) => mailbox.push(m),
        Incoming::RootReply(_) | Incoming::RootError(_) => {}
    }
}

#[cfg(test)]
mod tests;
