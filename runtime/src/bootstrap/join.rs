//! How a rank joins its communicator ([`Bootstrap::init`] and
//! [`Bootstrap::init_scalable`]): its hello to the root(s), the root's reply on its link,
//! the ring, and the AllGather of every rank's listen address.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

use socket2::Socket;

use super::error::{BootstrapError, Result};
use super::incoming::{Acceptor, Incoming, Mailbox};
use super::link::RootLink;
use super::liveness::Liveness;
use super::net;
use super::ring::{self, Ring};
use super::stream::Stream;
use super::wait::Waiter;
use super::wire::{self, Header, Hello, Kind, RootReply};
use super::{iface, root, scalable, test_hook, Bootstrap, BootstrapConfig, UniqueId, STAGGER_ABOVE};
use crate::auth::Session;

const SESSION_BYTES: usize = std::mem::size_of::<Session>();

/// Extra time a rank waits for the root's reply beyond its timeout, so the root (whose
/// deadline is at most the first rank's timeout after that rank arrived) can report which
/// ranks are missing before the ranks give up.
pub(super) fn reply_grace(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_secs(1), Duration::from_secs(10))
}

/// Delay before rank `rank` contacts the root: none up to [`STAGGER_ABOVE`] ranks, then
/// 1 ms per rank, compressed so the last rank waits at most ~2 s.
pub(super) fn stagger_delay(rank: usize, nranks: usize) -> Duration {
    if nranks <= STAGGER_ABOVE {
        return Duration::ZERO;
    }
    let per_rank_us = (2_000_000 / nranks as u64).min(1000);
    Duration::from_micros(rank as u64 * per_rank_us)
}

impl Bootstrap {
    /// Joins the communicator `id` as `rank` of `nranks`: registers with the root, forms the
    /// ring, exchanges listen addresses, and waits until every rank has (as
    /// [`init_scalable`](Self::init_scalable) then [`finish_init`](Self::finish_init)).
    /// Fails with the root's error if the communicator cannot form (duplicate rank, nranks
    /// mismatch, missing ranks, a rank gone), `Timeout` if the root or a ring neighbour does
    /// not answer in time, `Aborted` if the abort flag is set.
    #[allow(dead_code, reason = "the runtime calls init_scalable; the bootstrap tests call this")]
    pub fn init(id: &UniqueId, rank: usize, nranks: usize, config: &BootstrapConfig) -> Result<Bootstrap> {
        let boot = Self::init_scalable(std::slice::from_ref(id), rank, nranks, config)?;
        boot.finish_init()?;
        Ok(boot)
    }

    /// As [`init`](Self::init) with several roots, `ids[k]`'s root serving block `k` of the
    /// ranks ([`scalable::Block`]), and without the final wait: the roots keep watching
    /// every rank (a rank's death or failure ends every other rank's waits) until each
    /// calls [`finish_init`](Self::finish_init), or [`fail_init`](Self::fail_init). Every
    /// rank must be given the same ids in the same order (`IdsMismatch` otherwise,
    /// `InvalidArgument` for an empty list, more ids than ranks or two ids of one root).
    pub fn init_scalable(ids: &[UniqueId], rank: usize, nranks: usize, config: &BootstrapConfig) -> Result<Bootstrap> {
        if nranks == 0 || rank >= nranks {
            return Err(BootstrapError::InvalidRank { rank, nranks });
        }
        if nranks >= wire::ROOT_RANK as usize {
            return Err(BootstrapError::InvalidArgument(format!("nranks {nranks} is too large")));
        }
        let nonce = scalable::comm_nonce(ids, nranks)?;
        let key = scalable::comm_key(ids)?;
        if key.is_none() {
            crate::auth::note_unauthenticated("bootstrap");
        }
        Waiter::new("connect to the root", None, config.timeout, &config.abort).check()?;
        let root_ip = ids[scalable::root_of(rank, nranks, ids.len())].root_addr().ip();
        let iface = iface::choose_interface(config.ifname.as_deref(), Some(root_ip))?;
        let incoming = Acceptor::new(net::listen(SocketAddr::new(iface.addr, 0))?, key)?;
        let me = incoming.local_addr()?;
        let mut boot = Bootstrap {
            rank,
            nranks,
            nonce,
            key,
            sessions: Vec::new(),
            sent: AtomicU64::new(0),
            timeout: config.timeout,
            abort: config.abort.clone(),
            peers: vec![me],
            incoming,
            mailbox: Mutex::new(Mailbox::default()),
            ring: Mutex::new(None),
            live: Liveness::new(rank, nranks, RootLink::new(rank, config.root_rank)),
        };
        match boot.join(ids) {
            Ok(()) => Ok(boot),
            Err(e) => {
                boot.fail_init(&e);
                Err(e)
            }
        }
    }

    /// The rest of `init_scalable`: hello, the root's reply, the ring, the addresses.
    fn join(&mut self, ids: &[UniqueId]) -> Result<()> {
        let (rank, nranks, nonce, timeout, me) = (self.rank, self.nranks, self.nonce, self.timeout, self.peers[0]);
        let (abort, live) = (&*self.abort, &self.live);
        let link = &live.link;
        let nroots = ids.len();
        let iroot = scalable::root_of(rank, nranks, nroots);
        let block = scalable::Block::of_root(iroot, nranks, nroots);
        let start = Waiter::new("connect to the root", None, timeout, abort);

        // 1. Tell the root who we are (each root staggers its own block); a block's first
        //    rank also tells the previous root, whose last rank it follows in the ring.
        start.sleep(stagger_delay(rank - block.first, block.len))?;
        let hello = |k: usize| Hello {
            nranks: nranks as u32,
            iroot: k as u32,
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            listen: me,
            nroots: nroots as u32,
            flags: if root::runs_here(ids[k].nonce()) { wire::HOSTS_ROOT } else { 0 },
            comm_nonce: nonce,
        };
        test_hook::at("join");
        link.hello(&ids[iroot], rank, &hello(iroot), &start)?;
        if nroots > 1 && rank == block.first {
            let prev = (iroot + nroots - 1) % nroots;
            link.hello(&ids[prev], rank, &hello(prev), &start.watching(live))?;
        }
        test_hook::at("hello");

        // 2. Wait for the root's reply (or its error) on the link; ring and send/recv
        //    connections wait in the listener's backlog meanwhile.
        let (next_rank, prev_rank) = ((rank + 1) % nranks, (rank + nranks - 1) % nranks);
        let mut wait_root = start.sub("wait for the root's reply", None).watching(live);
        wait_root.extend(reply_grace(timeout));
        let next_addr = match link.wait_reply(&wait_root)? {
            RootReply { nranks: n, next } if n as usize == nranks => next,
            r => {
                return Err(BootstrapError::Protocol {
                    from: "the root".into(),
                    detail: format!("reply for {} ranks, this rank has nranks = {nranks}", r.nranks),
                })
            }
        };
        test_hook::at("ring");
        if nranks == 1 {
            return Ok(());
        }

        // 3. Form the ring: connect to the successor while accepting the predecessor (its
        //    handshake, with a key, waits for the successor to accept this rank's).
        let w = Waiter::new("ring connect", Some(next_rank), timeout, abort).watching(live);
        let key = self.key;
        let connect = || {
            let next = net::connect(next_addr, &w)?;
            if let Some(key) = &key {
                net::authenticate(&next, key, rank, &format!("rank {next_rank} at {next_addr}"), &w)?;
            }
            net::write_all(&next, &Header::new(nonce, Kind::RingConnect, rank as u32, 0, 0).encode(), &w)?;
            Ok(next)
        };
        let w = w.sub("ring accept", Some(prev_rank));
        let (incoming, mailbox) = (&self.incoming, self.mailbox.get_mut().unwrap());
        let (next, prev) = std::thread::scope(|s| -> Result<(Socket, Socket)> {
            let joined = |c: std::thread::ScopedJoinHandle<'_, Result<Socket>>| {
                c.join().unwrap_or_else(|_| Err(BootstrapError::InvalidArgument("the ring connect panicked".into())))
            };
            let mut connecting = Some(s.spawn(connect));
            let (mut next, mut prev) = (None, None);
            while prev.is_none() {
                // A failed connect (another key) ends the wait for the predecessor too.
                if let Some(c) = connecting.take_if(|c| c.is_finished()) {
                    next = Some(joined(c)?);
                }
                w.check()?;
                if let Some(m) = incoming.next(nonce, nranks, &w)? {
                    keep(m, prev_rank, &mut prev, mailbox);
                }
            }
            let next = match (next, connecting) {
                (Some(next), _) => next,
                (None, Some(c)) => joined(c)?,
                (None, None) => unreachable!("the connecting thread is joined once"),
            };
            Ok((next, prev.unwrap()))
        })?;
        let mut ring = Ring { next: Stream::new(next), prev: Stream::new(prev), seq: 0 };

        // 4. AllGather the listen addresses (and, with a key, the session nonces senders
        //    seal their messages with).
        let mut mine = Vec::with_capacity(wire::ADDR_BYTES + SESSION_BYTES);
        wire::encode_addr(&me, &mut mine);
        let session = self.incoming.session();
        let each = wire::ADDR_BYTES + session.map_or(0, |s| s.len());
        mine.extend(session.iter().flatten());
        let w = Waiter::new("address all_gather", None, timeout, abort).watching(live);
        let all = ring::all_gather(&mut ring, rank, nranks, nonce, &mine, &w)?;
        let peers = all
            .iter()
            .enumerate()
            .map(|(r, b)| {
                wire::decode_addr(b).filter(|_| b.len() == each).ok_or_else(|| BootstrapError::Protocol {
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
        self.peers = peers;
        if session.is_some() {
            self.sessions = all.iter().map(|b| b[wire::ADDR_BYTES..].try_into().expect("checked above")).collect();
        }
        *self.ring.get_mut().unwrap() = Some(ring);
        tracing::debug!(rank, nranks, listen = %me, "jitccl bootstrap: ready");
        Ok(())
    }
}

/// During init: keep the ring predecessor's connection and early send/recv messages.
fn keep(m: Incoming, prev_rank: usize, prev: &mut Option<Socket>, mailbox: &mut Mailbox) {
    match m {
        Incoming::Ring(s, from) if from == prev_rank && prev.is_none() => *prev = Some(s),
        Incoming::Ring(_, from) => {
            tracing::warn!(from, expected = prev_rank, "jitccl bootstrap: rejected an unexpected ring connection")
        }
        Incoming::P2p(m) => mailbox.push(m),
    }
}
