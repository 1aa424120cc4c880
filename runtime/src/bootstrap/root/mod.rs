//! The root: a thread that collects every rank's `Hello` (rank, nranks, listen address),
//! checks them, and then tells each rank its ring successor's address, on the rank's link
//! (the connection its hello came on). It then watches the links until every rank has
//! finished init ([`watch`]). It serves one communicator (or, as one of several roots, one
//! block of its ranks: see [`super::scalable`]) and exits.
//!
//! The root is event-driven (one `poll` over the listener, the connections that have not
//! finished their `Hello` yet and the links), so a stray connection that sends nothing or
//! garbage never delays the real ranks: a wrong magic, another communicator's nonce,
//! another message kind or a malformed `Hello` is logged and dropped; a connection silent
//! for [`STRAY_TIMEOUT`] is dropped.
//!
//! Communicator-wide errors (a duplicate rank, an nranks mismatch, a rank out of range,
//! ranks missing at the deadline, a rank whose link closed or that failed, the root's
//! abort flag) are sent to every rank that reached the root, and to every rank that
//! reaches it afterwards until the deadline. The deadline is the root's timeout from its
//! start until the first `Hello`, then the smaller of the root's and that rank's timeout
//! from the first `Hello` on.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::Socket;

use super::error::{BootstrapError, Result};
use super::id::{resolve, UniqueId};
use super::iface::choose_interface;
use super::net::{self, Opening};
use super::scalable::{neighbour_of, Block};
use super::stream::Stream;
use super::wait;
use super::wire::{self, Header, Hello, Kind, HEADER_BYTES, HOSTS_ROOT, MAX_CONTROL_PAYLOAD};
use super::BootstrapConfig;
use crate::auth::{Gate, JobKey, Tls};
use crate::settings::COMM_ID;
use reply::clone_err;
use watch::{Leave, Member};

mod reply;
mod watch;

/// The ids whose making starts their root in this process (or, with `JITCCL_COMM_ID`,
/// may): NCCL's `ncclGetUniqueId` and its relatives.
impl UniqueId {
    /// NCCL's `ncclGetUniqueId`: starts a root thread in this process, listening on the
    /// chosen interface (`JITCCL_SOCKET_IFNAME`, as NCCL_SOCKET_IFNAME) at an ephemeral
    /// port, and returns its id. The root serves one communicator, watching its ranks until
    /// every one has finished init (it tells them all when one dies), then exits (also on
    /// its timeout, `JITCCL_BOOTSTRAP_TIMEOUT`, if ranks are missing): this process must
    /// live that long. Pass the id to every rank (e.g. with [`to_bytes`](Self::to_bytes)
    /// through a store).
    pub fn new() -> Result<Self> {
        Self::with_config(&BootstrapConfig::from_env()?)
    }

    /// As [`new`](Self::new) for a job whose key is `key`, which the id then carries
    /// instead of a fresh one. The ranks that know it get the id without it
    /// ([`without_key`](Self::without_key)), so the key never travels with it; `None`: a
    /// fresh key, which does.
    pub(crate) fn for_job(key: Option<JobKey>) -> Result<Self> {
        Ok(Root::start_keyed(&BootstrapConfig::from_env()?, key)?.detach())
    }

    /// As [`new`](Self::new) with an explicit configuration for the root (timeout, abort
    /// flag, interface). Use [`Root::start`] to keep a handle on the root.
    pub(crate) fn with_config(config: &BootstrapConfig) -> Result<Self> {
        Ok(Root::start(config)?.detach())
    }

    /// `JITCCL_COMM_ID` style start: `spec` is `host:port` (or `[v6]:port`); every rank
    /// computes the same id from it ([`for_address`](Self::for_address)), with the key of
    /// `JITCCL_AUTH_KEY` or `JITCCL_AUTH_KEY_FILE` if one is set. With
    /// `is_root` (normally on rank 0) this process also starts the root thread listening on
    /// exactly that address (an error if it cannot bind it, e.g. it is not local or in use).
    pub(crate) fn from_comm_id(spec: &str, is_root: bool, config: &BootstrapConfig) -> Result<Self> {
        let addr = resolve(spec, COMM_ID.name)?;
        let id = Self::for_address(addr).with_key(JobKey::from_env()?);
        if is_root {
            Root::start_for(&id, config)?.detach();
        }
        Ok(id)
    }

    /// The id of a root at `spec` (`host:port`, as `JITCCL_COMM_ID` / NCCL_COMM_ID give
    /// it): every process computes the same id from the same address. With `start_root`
    /// this process also starts the root there (on the rank that is rank 0 of the
    /// communicator), configured from the environment.
    pub fn at_address(spec: &str, start_root: bool) -> Result<Self> {
        Self::from_comm_id(spec, start_root, &BootstrapConfig::from_env()?)
    }

    /// [`from_comm_id`](Self::from_comm_id) with `JITCCL_COMM_ID`; `None` when it is not set.
    pub(crate) fn from_env(is_root: bool, config: &BootstrapConfig) -> Result<Option<Self>> {
        match COMM_ID.text()? {
            Some(v) => Self::from_comm_id(&v, is_root, config).map(Some),
            None => Ok(None),
        }
    }
}

/// A connection that has not sent a whole `Hello` within this time is dropped.
pub const STRAY_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest time the root spends writing one message on a rank's link.
const TELL_TIMEOUT: Duration = Duration::from_secs(5);

/// The nonces of the roots running in this process: a rank whose root runs here says so
/// in its hello, so the others can name it if the process dies.
static RUNNING: Mutex<Vec<u64>> = Mutex::new(Vec::new());

fn running() -> std::sync::MutexGuard<'static, Vec<u64>> {
    RUNNING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether the root of the id with `nonce` runs in this process.
pub fn runs_here(nonce: u64) -> bool {
    running().contains(&nonce)
}

/// What a root that served its communicator saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootReport {
    pub nranks: usize,
    /// The first rank this root served (0 unless it is one of several roots).
    pub first: usize,
    /// The listen address of each rank it served, from `first` on.
    pub addrs: Vec<SocketAddr>,
    /// Connections dropped as not being well-formed ranks of this communicator.
    pub rejected: usize,
}

/// A running root thread. Dropping the handle leaves the thread running until it has served
/// its communicator, timed out or been aborted (as [`detach`](Self::detach)).
pub struct Root {
    id: UniqueId,
    thread: JoinHandle<Result<RootReport>>,
}

impl Root {
    /// Starts a root listening on the chosen interface (`config.ifname`, see
    /// [`super::iface`]) at an ephemeral port, with a fresh random id.
    pub fn start(config: &BootstrapConfig) -> Result<Root> {
        Self::start_keyed(config, None)
    }

    /// As [`start`](Self::start), the id carrying `key` (`None`: a fresh one).
    pub fn start_keyed(config: &BootstrapConfig, key: Option<JobKey>) -> Result<Root> {
        let iface = choose_interface(config.ifname.as_deref(), None)?;
        let listener = net::listen(SocketAddr::new(iface.addr, 0))?;
        let id = UniqueId::random(net::local_addr(&listener)?)?;
        let id = if key.is_some() { id.with_key(key) } else { id };
        Self::spawn(listener, id, config)
    }

    /// Starts a root for `id`, listening on exactly `id.root_addr()`.
    pub fn start_for(id: &UniqueId, config: &BootstrapConfig) -> Result<Root> {
        if id.root_addr().port() == 0 {
            return Err(BootstrapError::InvalidArgument(format!("root address {} has port 0", id.root_addr())));
        }
        let listener = net::listen(id.root_addr())?;
        Self::spawn(listener, *id, config)
    }

    fn spawn(listener: Socket, id: UniqueId, config: &BootstrapConfig) -> Result<Root> {
        let timeout = config.timeout;
        let abort = config.abort.clone();
        tracing::debug!(root = %id.root_addr(), "jitccl bootstrap: root started");
        running().push(id.nonce());
        let thread = std::thread::Builder::new()
            .name("jitccl-bootstrap-root".into())
            .spawn(move || {
                let r = RootState::new(listener, id, timeout, abort).serve();
                running().retain(|&n| n != id.nonce());
                match &r {
                    Ok(rep) => tracing::debug!(nranks = rep.nranks, "jitccl bootstrap: root done"),
                    Err(e) => tracing::error!(root = %id.root_addr(), error = %e, "jitccl bootstrap: root failed"),
                }
                r
            })
            .map_err(|e| {
                running().retain(|&n| n != id.nonce());
                BootstrapError::io("spawn the bootstrap root thread", e)
            })?;
        Ok(Root { id, thread })
    }

    #[allow(dead_code, reason = "root handle API used by the bootstrap tests, not (yet) by the runtime")]
    /// The id the ranks must use.
    pub fn id(&self) -> UniqueId {
        self.id
    }

    #[allow(dead_code, reason = "root handle API used by the bootstrap tests, not (yet) by the runtime")]
    /// True once the root thread has ended.
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    #[allow(dead_code, reason = "root handle API used by the bootstrap tests, not (yet) by the runtime")]
    /// Waits for the root thread: the ranks it served, or the error it ended with.
    pub fn join(self) -> Result<RootReport> {
        self.thread.join().unwrap_or_else(|_| {
            Err(BootstrapError::io("bootstrap root thread", std::io::Error::other("the root thread panicked")))
        })
    }

    /// Lets the root run on its own; returns its id.
    pub fn detach(self) -> UniqueId {
        self.id
    }
}

/// A connection whose `Hello` is still arriving (or, with a key, its handshake).
struct Pending {
    s: Socket,
    buf: Vec<u8>,
    since: Instant,
    from: String,
    gate: Option<Gate>,
}

enum Step {
    /// Keep reading.
    More,
    /// Drop the connection (already logged).
    Drop,
    /// A complete, well-formed hello from `rank`.
    Hello(usize, Hello),
}

struct RootState {
    /// Closed once every rank is here.
    listener: Option<Socket>,
    id: UniqueId,
    timeout: Duration,
    abort: Arc<AtomicBool>,
    start: Instant,
    deadline: Instant,
    first_hello: Option<Instant>,
    /// What the first hello said the communicator is: every later one must agree.
    comm: Option<Hello>,
    /// The ranks this root serves, and the first rank of the next block (several roots).
    block: Block,
    neighbour: Option<usize>,
    by_rank: Vec<Option<SocketAddr>>,
    neighbour_addr: Option<SocketAddr>,
    /// The link of every accepted hello (duplicates included): who to tell what.
    members: Vec<Member>,
    /// The rank whose process runs this root, once it has said hello.
    host: Option<usize>,
    failed: Option<BootstrapError>,
    /// Ranks told the communicator's error, or gone.
    told: usize,
    rejected: usize,
    /// The job's TLS settings, for the ranks that ask (made when the id has a key).
    tls: Option<Tls>,
}

impl RootState {
    fn new(listener: Socket, id: UniqueId, timeout: Duration, abort: Arc<AtomicBool>) -> Self {
        let start = Instant::now();
        Self {
            listener: Some(listener),
            id,
            timeout,
            abort,
            start,
            deadline: wait::deadline_after(start, timeout),
            first_hello: None,
            comm: None,
            block: Block { first: 0, len: 0 },
            neighbour: None,
            by_rank: Vec::new(),
            neighbour_addr: None,
            members: Vec::new(),
            host: None,
            failed: None,
            told: 0,
            rejected: 0,
            tls: id.key().and_then(|key| {
                Tls::new(&key)
                    .map_err(|e| tracing::warn!(error = %e, "jitccl bootstrap root: no TLS for the links"))
                    .ok()
            }),
        }
    }

    fn serve(mut self) -> Result<RootReport> {
        let report = self.collect()?;
        self.watch(report)
    }

    /// Collects the hellos until every rank of the block is here (and told its successor)
    /// or the communicator has failed.
    fn collect(&mut self) -> Result<RootReport> {
        let mut pending: Vec<Pending> = Vec::new();
        loop {
            if self.abort.load(Ordering::Acquire) {
                let e = BootstrapError::Aborted { op: "root" };
                self.tell_all(&e, Duration::from_millis(500));
                return Err(e);
            }
            let now = Instant::now();
            if now >= self.deadline {
                return Err(self.on_deadline());
            }
            // Drop connections that stayed silent too long.
            pending.retain(|p| {
                let keep = now.duration_since(p.since) < STRAY_TIMEOUT;
                if !keep {
                    tracing::warn!(from = %p.from, "jitccl bootstrap root: dropping a connection that sent no complete hello");
                }
                keep
            });
            // `fds`: the listener, then `pending`, then the links.
            let mut fds = Vec::with_capacity(1 + pending.len() + self.members.len());
            fds.push(net::pollfd(self.listener.as_ref().map_or(-1, |l| l.as_raw_fd()), libc::POLLIN));
            fds.extend(pending.iter().map(|p| net::pollfd(p.s.as_raw_fd(), libc::POLLIN)));
            fds.extend(self.members.iter().map(Member::pollfd));
            let wait = self.deadline.saturating_duration_since(now).min(wait::SLICE).max(Duration::from_millis(1));
            net::poll(&mut fds, wait).map_err(|e| BootstrapError::io("bootstrap root: poll", e))?;

            // A rank that leaves before the communicator formed fails it (links first: the
            // hellos below add links). One a round: failing lets every link go, and the
            // next round (at once) sees any other.
            let first_link = 1 + pending.len();
            let left = (0..self.members.len())
                .filter(|&i| fds[first_link + i].revents != 0)
                .find_map(|i| self.members[i].read(self.tls.as_ref()).map(|leave| (i, leave)));
            if let Some((i, leave)) = left {
                if let Some(done) = self.on_leave(i, leave) {
                    return done;
                }
            }
            // Read what arrived on pending connections, last first: swap_remove(i) then
            // moves an already handled connection into slot i. `fds[i + 1]` is pending[i].
            for i in (0..pending.len()).rev() {
                if fds[i + 1].revents == 0 {
                    continue;
                }
                match self.read_pending(&mut pending[i]) {
                    Step::More => {}
                    Step::Drop => {
                        pending.swap_remove(i);
                    }
                    Step::Hello(rank, hello) => {
                        let p = pending.swap_remove(i);
                        if let Some(done) = self.on_hello(p, rank, hello) {
                            return done;
                        }
                    }
                }
            }
            if fds[0].revents != 0 {
                self.accept_all(&mut pending)?;
            }
        }
    }

    fn accept_all(&mut self, pending: &mut Vec<Pending>) -> Result<()> {
        let Some(listener) = &self.listener else { return Ok(()) };
        while let Some(s) = net::try_accept(listener, "bootstrap root")? {
            let from = net::describe(&s);
            let gate = match net::gate(self.id.key().as_ref()) {
                Ok(gate) => gate,
                Err(e) => {
                    tracing::warn!(%from, error = %e, "jitccl bootstrap root: dropping a connection");
                    continue;
                }
            };
            pending.push(Pending { s, buf: Vec::with_capacity(HEADER_BYTES + 64), since: Instant::now(), from, gate });
        }
        Ok(())
    }

    /// Reads what is available on `p` and tells whether its hello is complete.
    fn read_pending(&mut self, p: &mut Pending) -> Step {
        use std::io::Read;
        if let Some(gate) = p.gate.as_mut() {
            match net::open_gate(gate, &p.s, &mut p.buf) {
                Opening::Open => {}
                Opening::More => return Step::More,
                Opening::Refused(why) => {
                    tracing::warn!(from = %p.from, "jitccl bootstrap root: refused a connection: {why}");
                    self.rejected += 1;
                    return Step::Drop;
                }
            }
        }
        loop {
            let need = if p.buf.len() < HEADER_BYTES {
                HEADER_BYTES
            } else {
                HEADER_BYTES + wire::u64_at(&p.buf, 32) as usize
            };
            if p.buf.len() == need {
                break;
            }
            let mut tmp = [0u8; 256];
            let want = (need - p.buf.len()).min(tmp.len());
            match (&p.s).read(&mut tmp[..want]) {
                Ok(0) => {
                    if !p.buf.is_empty() {
                        tracing::warn!(from = %p.from, "jitccl bootstrap root: connection closed in the middle of a hello");
                        self.rejected += 1;
                    }
                    return Step::Drop;
                }
                Ok(n) => p.buf.extend_from_slice(&tmp[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Step::More,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::warn!(from = %p.from, error = %e, "jitccl bootstrap root: dropping a connection");
                    return Step::Drop;
                }
            }
            if p.buf.len() == HEADER_BYTES {
                let b: &[u8; HEADER_BYTES] = p.buf[..HEADER_BYTES].try_into().unwrap();
                let from = p.from.clone();
                let reject = match Header::decode(b, self.id.nonce(), &|| format!("connection from {from}")) {
                    Err(e) => Some(e.to_string()),
                    Ok(h) if h.kind != Kind::Hello => Some(format!("expected a hello, got {:?}", h.kind)),
                    Ok(h) if h.len > MAX_CONTROL_PAYLOAD => Some(format!("hello of {} bytes", h.len)),
                    Ok(_) => None,
                };
                if let Some(why) = reject {
                    tracing::warn!(from = %p.from, "jitccl bootstrap root: rejected connection: {why}");
                    self.rejected += 1;
                    return Step::Drop;
                }
            }
        }
        let rank = wire::u32_at(&p.buf, 20) as usize;
        match Hello::decode(&p.buf[HEADER_BYTES..]) {
            Some(h) => Step::Hello(rank, h),
            None => {
                tracing::warn!(from = %p.from, "jitccl bootstrap root: rejected a malformed hello");
                self.rejected += 1;
                Step::Drop
            }
        }
    }

    /// Hellos this root waits for: its block, and the next block's first rank.
    fn expected(&self) -> usize {
        self.block.len + usize::from(self.neighbour.is_some())
    }

    /// Handles one hello, which came on `p` (kept as the rank's link); `Some` when the root
    /// is done (served, or failed for good).
    fn on_hello(&mut self, p: Pending, rank: usize, hello: Hello) -> Option<Result<RootReport>> {
        let got = hello.nranks as usize;
        tracing::debug!(rank, nranks = got, iroot = hello.iroot, listen = %hello.listen, "jitccl bootstrap root: hello");
        if hello.flags & HOSTS_ROOT != 0 && rank < got && self.host.is_none() {
            // Every rank may have to name it: those here already learn it now.
            self.host = Some(rank);
            self.announce_host();
        }
        self.members.push(Member::new(Stream::new(p.s), rank, p.from, self.id.nonce(), hello.flags & HOSTS_ROOT != 0));
        let new = self.members.len() - 1;
        self.ack(new);
        if let Some(e) = &self.failed {
            let e = clone_err(e);
            self.tell(new, &e, TELL_TIMEOUT);
            self.told += 1;
            return (self.told >= self.expected()).then_some(Err(e));
        }
        if self.first_hello.is_none() {
            let now = Instant::now();
            self.first_hello = Some(now);
            self.deadline = wait::deadline_after(now, self.timeout.min(Duration::from_millis(hello.timeout_ms)));
            let (iroot, nroots) = (hello.iroot as usize, (hello.nroots as usize).max(1));
            self.block = Block::of_root(iroot.min(nroots - 1), got, nroots);
            self.neighbour = neighbour_of(iroot, got, nroots);
            self.by_rank = vec![None; self.block.len];
            self.comm = Some(hello.clone());
        }
        // Set by the first hello (above).
        let (expected, iroot) = self.comm.as_ref().map_or((got, 0), |c| (c.nranks as usize, c.iroot as usize));
        let comm = self.comm.as_ref().unwrap_or(&hello);
        let same_ids = (hello.comm_nonce, hello.nroots, hello.iroot) == (comm.comm_nonce, comm.nroots, comm.iroot);
        let err = if got != expected {
            Some(BootstrapError::NranksMismatch { expected, got, rank })
        } else if rank >= expected {
            Some(BootstrapError::InvalidRank { rank, nranks: got })
        } else if !same_ids || !(self.block.contains(rank) || self.neighbour == Some(rank)) {
            Some(BootstrapError::IdsMismatch { rank, iroot })
        } else {
            let slot = match self.block.contains(rank) {
                true => &mut self.by_rank[rank - self.block.first],
                false => &mut self.neighbour_addr,
            };
            slot.replace(hello.listen).map(|_| BootstrapError::DuplicateRank { rank })
        };
        if let Some(e) = err {
            return self.fail_comm(e);
        }
        let neighbour_here = self.neighbour.is_none() || self.neighbour_addr.is_some();
        if neighbour_here && self.by_rank.iter().all(Option::is_some) {
            return Some(self.reply_all());
        }
        None
    }

    /// Fails the communicator with `e`: tells every rank here, and every rank that comes
    /// until the deadline. `Some` when no rank is left to tell.
    fn fail_comm(&mut self, e: BootstrapError) -> Option<Result<RootReport>> {
        tracing::error!(error = %e, "jitccl bootstrap root: failing the communicator");
        self.tell_all(&e, TELL_TIMEOUT);
        self.told += self.members.len();
        self.members.clear();
        let done = self.told >= self.expected();
        self.failed = Some(clone_err(&e));
        done.then_some(Err(e))
    }

    /// Member `i` left before the communicator formed: it fails the communicator (unless it
    /// failed already: the member was told, and may go).
    fn on_leave(&mut self, i: usize, leave: Leave) -> Option<Result<RootReport>> {
        let m = self.members.remove(i);
        if self.failed.is_some() {
            return None;
        }
        self.told += 1;
        self.fail_comm(leave.error(m.rank))
    }
}
