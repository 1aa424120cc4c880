//! Communicators: a rank's view of a group, and the collectives it runs. Each operation is
//! validated (an error changes nothing), tuned identically on every rank, compiled (once)
//! by the generator, and launched on the caller's stream as one CTA per channel.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;

use jitccl_codegen::abi::{self, Args, Channel, Conn, Status};
use jitccl_codegen::compile::host::HostKernel;
use jitccl_codegen::{Collective, CustomOp, DataType, Generator, KernelSpec, RedOp};

use crate::bootstrap::Bootstrap;
use crate::config::{Config, Resolved};
use crate::store::Server;
use crate::device::{Device, DeviceBuffer};
use crate::element::Element;
use crate::error::{invalid, Error, Result};
use crate::fault::{Board, Notice};
use crate::affinity::{self, CpuSet, LiveRank};
use crate::stream::{CtaPool, Stream};
use crate::transport::connect::{connect, RankConns};
use crate::transport::net::Activity;
use crate::transport::layout::Layout;
use crate::transport::p2p::LocalSegments;
use crate::tune;

/// A reduction operator as the caller names it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    Sum,
    Prod,
    Min,
    Max,
    /// Sum divided by the number of ranks.
    Avg,
    /// Each rank's input multiplied by this rank's scalar, then summed. For integer types
    /// the scalar must be a whole number.
    PreMulSum(f64),
    /// A user-defined reduction (see `#[jitccl::reduction]`).
    Custom(&'static CustomOp),
}

impl Op {
    pub fn custom(op: &'static CustomOp) -> Op {
        Op::Custom(op)
    }

    fn red_op(self) -> RedOp {
        use jitccl_codegen::BuiltinOp as B;
        match self {
            Op::Sum => B::Sum.into(),
            Op::Prod => B::Prod.into(),
            Op::Min => B::Min.into(),
            Op::Max => B::Max.into(),
            Op::Avg => B::Avg.into(),
            Op::PreMulSum(_) => B::PreMulSum.into(),
            Op::Custom(c) => RedOp::Custom(c),
        }
    }
}

/// A fixed table that kernels update in place (connector step counters, statuses).
struct KernelTable<T>(UnsafeCell<Box<[T]>>);

// SAFETY: the table is written only by the kernels of one communicator, which run one at
// a time (CommInner::exec), and read by the runtime between them.
unsafe impl<T> Send for KernelTable<T> {}
unsafe impl<T> Sync for KernelTable<T> {}

impl<T> KernelTable<T> {
    fn new(v: Vec<T>) -> Self {
        KernelTable(UnsafeCell::new(v.into_boxed_slice()))
    }
    fn ptr(&self) -> *mut T {
        // SAFETY: see the Sync impl.
        unsafe { (*self.0.get()).as_mut_ptr() }
    }
}

pub(crate) struct CommInner {
    rank: usize,
    nranks: usize,
    device: Device,
    cfg: Resolved,
    channels: KernelTable<Channel>,
    /// Per peer, one connector end per channel.
    p2p_send: Vec<KernelTable<Conn>>,
    p2p_recv: Vec<KernelTable<Conn>>,
    /// Per peer, its `p2p_send` / `p2p_recv` table: what one-shot kernels index by rank.
    peer_send: KernelTable<*mut Conn>,
    peer_recv: KernelTable<*mut Conn>,
    status: KernelTable<Status>,
    abort: AtomicI32,
    /// Per rank, its failure board where this process can write it (this rank's own and
    /// those of peers in memory; None for net peers, reached through the proxy).
    boards: Vec<Option<Board>>,
    /// The error that failed this communicator: every later operation returns it.
    failure: Mutex<Option<Error>>,
    failed: AtomicBool,
    /// One kernel of this communicator at a time: they share connector state.
    exec: Mutex<()>,
    /// The CPUs this rank's kernel threads are bound to, if any.
    cpus: Option<Arc<CpuSet>>,
    _live: LiveRank,
    /// The kernels this communicator has launched: a launch looks its kernel up here, without
    /// the generator's process-wide locks.
    kernels: Mutex<FxHashMap<KernelSpec, Arc<HostKernel>>>,
    /// Ring orders the channels point into.
    _ring_ranks: Vec<Box<[i32]>>,
    /// Keeps every segment the connectors point into alive.
    _segments: Arc<dyn Send + Sync>,
    /// Ranks in other processes: the bootstrap (kept for later exchanges) and its abort
    /// flag, and the rendezvous store this rank serves, if any.
    bootstrap: Option<(Bootstrap, Arc<AtomicBool>)>,
    _store_server: Option<Server>,
    /// The net proxy serving this rank's connectors, if any: it watches the FIFOs only
    /// while a kernel runs.
    net: Option<Arc<Activity>>,
}

impl CommInner {
    /// A rank wired by `conns`, whose pointers stay valid while `segments` lives.
    /// `boards` holds, per rank, its failure board where this process can write it (this
    /// rank's own at least).
    pub(crate) fn new(
        rank: usize,
        device: Device,
        cfg: Resolved,
        conns: RankConns,
        boards: Vec<Option<Board>>,
        segments: Arc<dyn Send + Sync>,
        cpus: Option<Arc<CpuSet>>,
    ) -> CommInner {
        let table = |v: Vec<Vec<Conn>>| v.into_iter().map(KernelTable::new).collect::<Vec<_>>();
        let ptrs = |t: &[KernelTable<Conn>]| KernelTable::new(t.iter().map(KernelTable::ptr).collect());
        let (p2p_send, p2p_recv) = (table(conns.p2p_send), table(conns.p2p_recv));
        CommInner {
            rank,
            nranks: p2p_send.len(),
            device,
            status: KernelTable::new(vec![Status::default(); cfg.nchannels]),
            cfg,
            channels: KernelTable::new(conns.channels),
            peer_send: ptrs(&p2p_send),
            peer_recv: ptrs(&p2p_recv),
            p2p_send,
            p2p_recv,
            abort: AtomicI32::new(0),
            boards,
            failure: Mutex::new(None),
            failed: AtomicBool::new(false),
            exec: Mutex::new(()),
            cpus,
            _live: LiveRank::new(),
            kernels: Mutex::default(),
            _ring_ranks: conns.ring_ranks,
            _segments: segments,
            bootstrap: None,
            _store_server: None,
            net: None,
        }
    }

    pub(crate) fn with_bootstrap(self, bs: Bootstrap, abort: Arc<AtomicBool>, store_server: Option<Server>) -> CommInner {
        CommInner { bootstrap: Some((bs, abort)), _store_server: store_server, ..self }
    }

    pub(crate) fn with_net(self, net: Option<Arc<Activity>>) -> CommInner {
        CommInner { net, ..self }
    }

    fn own_board(&self) -> Board {
        self.boards[self.rank].expect("a rank can always write its own board")
    }

    /// The error that failed this communicator, if one did.
    fn failure(&self) -> Option<Error> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        self.failure.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(Error::replay)
    }

    /// Fails the communicator with `err` (the first failure stays) and tells every peer, so
    /// that their waits on this rank end now. An abort is this rank's own decision and is
    /// not announced.
    fn fail(&self, err: &Error) {
        let mut failure = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        if failure.is_some() {
            return;
        }
        *failure = Some(err.replay());
        self.failed.store(true, Ordering::Release);
        let culprit = match err {
            Error::Aborted { .. } => return,
            Error::Timeout { peer, .. } if *peer >= 0 => *peer as usize,
            Error::PeerFailed { culprit, .. } => *culprit,
            _ => self.rank,
        };
        tracing::warn!("rank {}: communicator failed (rank {culprit} failed first): {err}", self.rank);
        self.announce(culprit);
    }

    /// Notes on every peer's failure board that this rank failed, blaming `blames`: first
    /// the rank it waited on in vain, then whom it found to have failed first.
    fn announce(&self, blames: usize) {
        let notice = Notice { culprit: blames, closed: false };
        for b in self.boards.iter().enumerate().filter(|&(q, _)| q != self.rank).filter_map(|(_, b)| b.as_ref()) {
            b.announce(self.rank, notice);
        }
        if let Some(net) = &self.net {
            net.report_failure(blames);
        }
    }

    /// The error of a wait that ended because `peer` had failed.
    fn peer_failed(&self, op: String, peer: usize) -> Error {
        let (culprit, how) = self.culprit(peer);
        self.announce(culprit);
        Error::PeerFailed { op, rank: self.rank, peer: peer as i32, culprit, how }
    }

    /// The rank that failed first, as this rank's board tells it, from `peer` on: each
    /// failed rank's notice names whom it waited on, so the chain ends at a rank that
    /// said nothing (stuck or dead) or whose connection closed. A chain that comes back
    /// around is a ring of ranks that all waited: then a rank that said nothing is blamed,
    /// or this one if every other spoke. Returns the culprit and how it became known.
    fn culprit(&self, peer: usize) -> (usize, String) {
        let board = self.own_board();
        let mut seen = vec![false; self.nranks];
        let (mut at, mut how) = (peer, "it did not answer".to_string());
        while at != self.rank && !seen[at] {
            seen[at] = true;
            let Some(n) = board.get(at) else { return (at, how) };
            how = n.how(at);
            if n.closed || n.culprit == at {
                return (at, how);
            }
            at = n.culprit;
        }
        let silent = (0..self.nranks).find(|&q| q != self.rank && board.get(q).is_none());
        (silent.unwrap_or(self.rank), how)
    }
}

/// One rank of a communicator.
#[derive(Clone)]
pub struct Comm {
    inner: Arc<CommInner>,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Comm(rank {} of {})", self.inner.rank, self.inner.nranks)
    }
}

/// Raw launch arguments moved to the stream thread.
struct SendArgs(Args);
// SAFETY: the pointers in Args stay valid until the task ends (buffers and connectors are
// kept alive by the task), and kernels synchronize their own accesses.
unsafe impl Send for SendArgs {}
unsafe impl Sync for SendArgs {}

/// One validated operation, ready to launch.
struct Launch {
    coll: Collective,
    dtype: DataType,
    op: Option<Op>,
    /// `args.count`, in elements of `dtype`.
    count: usize,
    recv_count: usize,
    root: usize,
    send: *const u8,
    recv: *mut u8,
    /// The send and recv memory, kept alive while the operation is queued (no heap
    /// allocation per launch).
    keep: [Option<Arc<dyn Send + Sync>>; 2],
    /// Per-rank bytes, for tuning.
    bytes: usize,
    send_peer: Option<usize>,
    recv_peer: Option<usize>,
}

impl Launch {
    /// A launch that moves nothing yet.
    fn new(coll: Collective, dtype: DataType, op: Option<Op>) -> Launch {
        Launch {
            coll,
            dtype,
            op,
            count: 0,
            recv_count: 0,
            root: 0,
            send: std::ptr::null(),
            recv: std::ptr::null_mut(),
            keep: [None, None],
            bytes: 0,
            send_peer: None,
            recv_peer: None,
        }
    }
}

fn elems_fit<T: Element>(what: &str, buf: &DeviceBuffer<T>, need: usize) -> Result<()> {
    if buf.len() < need {
        return invalid(format!("{what} holds {} elements, {need} are needed", buf.len()));
    }
    Ok(())
}

fn overlap(a: &std::ops::Range<usize>, b: &std::ops::Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

impl Comm {
    pub(crate) fn from_inner(inner: CommInner) -> Comm {
        Comm { inner: Arc::new(inner) }
    }

    /// Creates `nranks` communicators in this process (one per rank, each with its own
    /// host device), connected through shared memory.
    pub fn init_all(nranks: usize, config: &Config) -> Result<Vec<Comm>> {
        crate::logging::init();
        if nranks == 0 {
            return invalid("a communicator needs at least one rank");
        }
        let cfg = config.resolve(nranks)?;
        let layout = Layout { nranks, nchannels: cfg.nchannels, slot_bytes: cfg.slot_bytes };
        let segments = Arc::new(LocalSegments::new(&layout)?);
        let bases = segments.bases();
        tracing::info!(
            "init_all: {nranks} ranks in one process, {} channel(s), slots {:?} B, timeout {:?}",
            cfg.nchannels,
            cfg.slot_bytes,
            cfg.timeout
        );
        Ok((0..nranks)
            .map(|rank| Comm {
                inner: Arc::new(CommInner::new(
                    rank,
                    Device::host(rank),
                    cfg.clone(),
                    connect(&layout, rank, &bases),
                    bases.iter().map(|&b| Some(layout.board(b))).collect(),
                    segments.clone(),
                    affinity::for_local_rank(rank, nranks),
                )),
            })
            .collect())
    }

    pub fn rank(&self) -> usize {
        self.inner.rank
    }
    pub fn nranks(&self) -> usize {
        self.inner.nranks
    }
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// Stops this rank's running operations (they end with [`Error::Aborted`]) and refuses
    /// new ones. Peers waiting on this rank fail by their timeout.
    pub fn abort(&self) {
        tracing::warn!("rank {}: communicator aborted", self.inner.rank);
        self.inner.abort.store(1, Ordering::Release);
        if let Some((bs, flag)) = &self.inner.bootstrap {
            flag.store(true, Ordering::Release);
            bs.abort();
        }
    }

    pub fn is_aborted(&self) -> bool {
        self.inner.abort.load(Ordering::Acquire) != 0
    }

    /// `recv[i] = op over ranks of send[i]` for `i < count`. In place when `send` and
    /// `recv` are the same buffer.
    pub fn all_reduce<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &DeviceBuffer<T>,
        count: usize,
        op: Op,
        stream: &Stream,
    ) -> Result<()> {
        elems_fit("all_reduce send buffer", send, count)?;
        elems_fit("all_reduce recv buffer", recv, count)?;
        self.check_same_or_disjoint("all_reduce", send, recv)?;
        self.submit(self.launch(Collective::AllReduce, Some(op), count, send, recv), stream)
    }

    /// Copies `count` elements of `send` on `root` into `recv` on every rank (`send` is
    /// not read elsewhere).
    pub fn broadcast<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &DeviceBuffer<T>,
        count: usize,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.rooted(Collective::Broadcast, None, send, recv, count, root, stream)
    }

    /// Reduces `count` elements of every rank's `send` into `recv` on `root` (`recv` is
    /// not touched elsewhere).
    pub fn reduce<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &DeviceBuffer<T>,
        count: usize,
        op: Op,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.rooted(Collective::Reduce, Some(op), send, recv, count, root, stream)
    }

    /// Broadcast and Reduce: the root's `send` (broadcast) or `recv` (reduce) is the only
    /// buffer of its side that matters, so only it is checked.
    #[allow(clippy::too_many_arguments)]
    fn rooted<T: Element>(
        &self,
        coll: Collective,
        op: Option<Op>,
        send: &DeviceBuffer<T>,
        recv: &DeviceBuffer<T>,
        count: usize,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.check_root(root)?;
        let is_root = self.rank() == root;
        let (send_used, recv_used) = if coll == Collective::Broadcast { (is_root, true) } else { (true, is_root) };
        if send_used {
            elems_fit(&format!("{coll} send buffer"), send, count)?;
        }
        if recv_used {
            elems_fit(&format!("{coll} recv buffer"), recv, count)?;
        }
        if is_root {
            self.check_same_or_disjoint(coll.name(), send, recv)?;
        }
        let mut l = self.launch(coll, op, count, send, recv);
        l.root = root;
        self.submit(l, stream)
    }

    /// Gathers every rank's `count` elements of `send` into `recv` (rank r's at
    /// `r * count`). In place when `send` is `recv`'s slice at `rank * count`.
    pub fn all_gather<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &DeviceBuffer<T>,
        count: usize,
        stream: &Stream,
    ) -> Result<()> {
        elems_fit("all_gather send buffer", send, count)?;
        let total = self.total(count)?;
        elems_fit("all_gather recv buffer", recv, total)?;
        self.check_in_place_block("all_gather", send, recv, count)?;
        let mut l = self.launch(Collective::AllGather, None, count, send, recv);
        l.bytes = total * size_of::<T>();
        self.submit(l, stream)
    }

    /// Reduces every rank's `send` (nranks blocks of `count`) and leaves block `rank` of the
    /// result in `recv`. In place when `recv` is `send`'s slice at `rank * count`.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &DeviceBuffer<T>,
        count: usize,
        op: Op,
        stream: &Stream,
    ) -> Result<()> {
        let total = self.total(count)?;
        elems_fit("reduce_scatter send buffer", send, total)?;
        elems_fit("reduce_scatter recv buffer", recv, count)?;
        self.check_in_place_block("reduce_scatter", recv, send, count)?;
        let mut l = self.launch(Collective::ReduceScatter, Some(op), count, send, recv);
        l.bytes = total * size_of::<T>();
        self.submit(l, stream)
    }

    /// Sends `count` elements of `buf` to `peer` (which must post a matching receive).
    pub fn send<T: Element>(&self, buf: &DeviceBuffer<T>, count: usize, peer: usize, stream: &Stream) -> Result<()> {
        self.sendrecv_impl(Some((buf, count, peer)), None, stream)
    }

    /// Receives `count` elements from `peer` into `buf`.
    pub fn recv<T: Element>(&self, buf: &DeviceBuffer<T>, count: usize, peer: usize, stream: &Stream) -> Result<()> {
        self.sendrecv_impl(None, Some((buf, count, peer)), stream)
    }

    /// Sends `send_count` elements of `send` to `to` while receiving `recv_count` from
    /// `from` into `recv`, in one launch (so that exchanges in a cycle cannot deadlock).
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        send_count: usize,
        to: usize,
        recv: &DeviceBuffer<T>,
        recv_count: usize,
        from: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.sendrecv_impl(Some((send, send_count, to)), Some((recv, recv_count, from)), stream)
    }

    fn sendrecv_impl<T: Element>(
        &self,
        send: Option<(&DeviceBuffer<T>, usize, usize)>,
        recv: Option<(&DeviceBuffer<T>, usize, usize)>,
        stream: &Stream,
    ) -> Result<()> {
        let size = size_of::<T>();
        let mut l = Launch::new(Collective::SendRecv, T::DTYPE, None);
        if let Some((buf, count, peer)) = send {
            self.check_peer(peer)?;
            elems_fit("send buffer", buf, count)?;
            (l.count, l.send, l.send_peer) = (count, buf.as_ptr(), Some(peer));
            l.keep[0] = Some(buf.keep_alive());
            l.bytes = count * size;
        }
        if let Some((buf, count, peer)) = recv {
            self.check_peer(peer)?;
            elems_fit("recv buffer", buf, count)?;
            (l.recv_count, l.recv, l.recv_peer) = (count, buf.as_ptr(), Some(peer));
            l.keep[1] = Some(buf.keep_alive());
            l.bytes = l.bytes.max(count * size);
        }
        if let (Some((s, sc, _)), Some((r, rc, _))) = (send, recv) {
            let (sr, rr) = (s.byte_range(), r.byte_range());
            if sc > 0 && rc > 0 && overlap(&(sr.start..sr.start + sc * size), &(rr.start..rr.start + rc * size)) {
                return invalid("sendrecv send and recv buffers overlap");
            }
        }
        self.submit(l, stream)
    }

    fn launch<T: Element>(
        &self,
        coll: Collective,
        op: Option<Op>,
        count: usize,
        send: &DeviceBuffer<T>,
        recv: &DeviceBuffer<T>,
    ) -> Launch {
        Launch {
            count,
            send: send.as_ptr(),
            recv: recv.as_ptr(),
            keep: [Some(send.keep_alive()), Some(recv.keep_alive())],
            bytes: count * size_of::<T>(),
            ..Launch::new(coll, T::DTYPE, op)
        }
    }

    fn total(&self, count: usize) -> Result<usize> {
        count
            .checked_mul(self.nranks())
            .ok_or_else(|| Error::InvalidArgument(format!("count {count} x {} ranks overflows", self.nranks())))
    }

    fn check_root(&self, root: usize) -> Result<()> {
        if root >= self.nranks() {
            return invalid(format!("root {root} is not a rank of this {}-rank communicator", self.nranks()));
        }
        Ok(())
    }

    fn check_peer(&self, peer: usize) -> Result<()> {
        if peer >= self.nranks() {
            return invalid(format!("peer {peer} is not a rank of this {}-rank communicator", self.nranks()));
        }
        Ok(())
    }

    /// In place means the very same start; any other overlap is an error.
    fn check_same_or_disjoint<T: Element>(&self, what: &str, a: &DeviceBuffer<T>, b: &DeviceBuffer<T>) -> Result<()> {
        let (ra, rb) = (a.byte_range(), b.byte_range());
        if ra.start != rb.start && overlap(&ra, &rb) {
            return invalid(format!("{what}: send and recv buffers overlap without being the same (in place)"));
        }
        Ok(())
    }

    /// `small` may overlap `big` only as its block `rank` (NCCL's in-place convention).
    fn check_in_place_block<T: Element>(
        &self,
        what: &str,
        small: &DeviceBuffer<T>,
        big: &DeviceBuffer<T>,
        count: usize,
    ) -> Result<()> {
        let (rs, rb) = (small.byte_range(), big.byte_range());
        let block = rb.start + self.rank() * count * size_of::<T>();
        let rs = rs.start..rs.start + count * size_of::<T>();
        if count > 0 && overlap(&rs, &rb) && rs.start != block {
            return invalid(format!(
                "{what}: buffers overlap; in place, the per-rank buffer must be block {} of the full one",
                self.rank()
            ));
        }
        Ok(())
    }

    /// The host kernel for one launch: from this communicator's table, else validated and
    /// fetched (compiled if need be) from the generator.
    fn kernel(&self, coll: Collective, choice: tune::Choice, dtype: DataType, op: Option<RedOp>) -> Result<Arc<HostKernel>> {
        let spec = KernelSpec { coll, algo: choice.algo, proto: choice.proto, dtype, op };
        if let Some(k) = self.inner.kernels.lock().unwrap_or_else(|e| e.into_inner()).get(&spec) {
            return Ok(k.clone());
        }
        let spec = KernelSpec::new(coll, choice.algo, choice.proto, dtype, op)
            .map_err(|e| Error::InvalidArgument(format!("{} with {dtype}: {e}", coll.name())))?;
        let (kernel, _) = Generator::global().host_kernel(&spec)?;
        self.inner.kernels.lock().unwrap_or_else(|e| e.into_inner()).insert(spec, kernel.clone());
        Ok(kernel)
    }

    fn submit(&self, l: Launch, stream: &Stream) -> Result<()> {
        let me = &self.inner;
        let name = l.coll.name();
        if self.is_aborted() {
            return Err(Error::InvalidUsage(format!("{name} on rank {}: the communicator was aborted", me.rank)));
        }
        if let Some(e) = me.failure() {
            return Err(e);
        }
        if stream.device() != &me.device {
            return invalid(format!("{name}: the stream is on {:?}, the communicator on {:?}", stream.device(), me.device));
        }
        if l.count == 0 && l.recv_count == 0 {
            return Ok(());
        }
        if let (Some(Op::PreMulSum(s)), true) = (l.op, l.dtype.is_integer()) {
            if s.fract() != 0.0 || !s.is_finite() {
                return invalid(format!("PreMulSum scalar {s} is not a whole number, as {} needs", l.dtype));
            }
        }
        // Collectives that only move data run as bytes.
        let (kdtype, scale) = if l.coll.reduces() { (l.dtype, 1) } else { (DataType::U8, l.dtype.size()) };
        let cfg = &me.cfg;
        let commutative = !matches!(l.op, Some(Op::Custom(c)) if !c.commutative);
        let choice = tune::choose(l.coll, l.bytes, kdtype.size(), me.nranks, commutative, cfg)?;
        let kernel = self.kernel(l.coll, choice, kdtype, l.op.map(Op::red_op))?;

        let p2p_send = l.send_peer.map_or(std::ptr::null_mut(), |peer| me.p2p_send[peer].ptr());
        let p2p_recv = l.recv_peer.map_or(std::ptr::null_mut(), |peer| me.p2p_recv[peer].ptr());
        let keep = l.keep;
        let scalar_f = match l.op {
            Some(Op::PreMulSum(s)) => s,
            Some(Op::Avg) => 1.0 / me.nranks as f64,
            _ => 0.0,
        };
        let args = SendArgs(Args {
            sendbuff: l.send,
            recvbuff: l.recv,
            count: (l.count * scale) as u64,
            recv_count: (l.recv_count * scale) as u64,
            chunk_elems: choice.chunk_elems,
            timeout_ns: cfg.timeout.as_nanos().min(u64::MAX as u128) as u64,
            channels: me.channels.ptr(),
            p2p_send,
            p2p_recv,
            peer_send: me.peer_send.ptr(),
            peer_recv: me.peer_recv.ptr(),
            status: me.status.ptr(),
            abort_flag: me.abort.as_ptr(),
            peer_failed: me.own_board().as_ptr(),
            scalar_f,
            scalar_i: scalar_f as i64,
            spin: affinity::spin_budget(me.cpus.as_deref()),
            nranks: me.nranks as i32,
            rank: me.rank as i32,
            root: l.root as i32,
            nchannels: choice.nchannels as i32,
        });
        tracing::trace!("rank {}: enqueue {name} {choice:?} x {} elements", me.rank, l.count);
        stream.enqueue(KernelLaunch {
            comm: self.inner.clone(),
            kernel,
            args,
            nchannels: choice.nchannels,
            name,
            _keep: keep,
        });
        Ok(())
    }
}

/// How long a failed rank lets the peers it waited on say whom they waited on, before it
/// names the rank that failed first (at most a quarter of the timeout).
const FAILURE_GRACE: std::time::Duration = std::time::Duration::from_millis(250);

/// One queued kernel launch, owning everything its CTAs touch until it is released.
pub(crate) struct KernelLaunch {
    comm: Arc<CommInner>,
    kernel: Arc<HostKernel>,
    args: SendArgs,
    nchannels: usize,
    name: &'static str,
    _keep: [Option<Arc<dyn Send + Sync>>; 2],
}

impl KernelLaunch {
    /// Runs one CTA per channel on the stream's pool; a failing channel's status becomes
    /// the error.
    pub(crate) fn run(&self, pool: &mut CtaPool) -> Result<()> {
        let inner = &self.comm;
        let _one_at_a_time = inner.exec.lock().unwrap_or_else(|e| e.into_inner());
        // Behind a failed operation, nothing runs: it would pair with stale FIFO steps.
        if let Some(e) = inner.failure() {
            return Err(e);
        }
        // SAFETY: statuses are only written by this communicator's kernels, not running now.
        unsafe { std::slice::from_raw_parts_mut(inner.status.ptr(), self.nchannels) }.fill(Status::default());
        let _net = inner.net.as_ref().map(|a| a.kernel_running());
        let failed = pool.run(self.nchannels, &|c| {
            if let Some(set) = &inner.cpus {
                affinity::bind_current(set);
            }
            // SAFETY: args describe live buffers and connectors (kept alive by this launch);
            // each channel runs on exactly one thread.
            unsafe { self.kernel.run(&self.args.0, c as i32) }
        })?;
        let err = match failed {
            None => return Ok(()),
            Some(chan) => {
                // SAFETY: the kernels have finished.
                let statuses = unsafe { std::slice::from_raw_parts(inner.status.ptr(), self.nchannels) };
                debug_assert!(statuses[chan].code != abi::OK);
                kernel_error(self.name, inner, statuses)
            }
        };
        inner.fail(&err);
        Err(err)
    }
}

/// The error of a kernel whose channels ended with `statuses`.
fn kernel_error(op: &str, inner: &CommInner, statuses: &[Status]) -> Error {
    let (op, rank) = (op.to_string(), inner.rank);
    let failed = || statuses.iter().enumerate().filter(|(_, st)| st.code != abi::OK);
    let Some((_, st)) = failed().next() else {
        return Error::Internal(format!("{op} on rank {rank}: a kernel failed without a status"));
    };
    if failed().any(|(_, st)| st.code == abi::ERR_ABORTED) {
        return Error::Aborted { op, rank };
    }
    // Waits that timed out may have waited on ranks stuck themselves, and waits that ended
    // on a failed peer may have heard from it before the others spoke: tell the peers whom
    // this rank waited on, and give them a moment to say whom they waited on.
    let waited: Vec<usize> = failed().map(|(_, st)| st.peer as usize).filter(|&p| p < inner.nranks).collect();
    if st.code != abi::ERR_TIMEOUT && st.code != abi::ERR_PEER || waited.is_empty() {
        return Error::Internal(format!("{op} on rank {rank}: kernel returned status {} (peer {})", st.code, st.peer));
    }
    inner.announce(waited[0]);
    let board = inner.own_board();
    // Until every chain from the waited peers ends at a rank that spoke (or the grace is
    // over): one that looks silent may be a moment from speaking.
    let end = std::time::Instant::now() + (inner.cfg.timeout / 4).min(FAILURE_GRACE);
    while waited.iter().any(|&w| board.get(inner.culprit(w).0).is_none()) && std::time::Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    if let Some((_, st)) = failed().find(|(_, st)| st.code == abi::ERR_PEER) {
        return inner.peer_failed(op, st.peer as usize);
    }
    match failed().find(|(_, st)| board.get(st.peer as usize).is_none()) {
        // A rank that never said it failed: the one that stopped answering.
        Some((channel, st)) => {
            inner.announce(st.peer as usize);
            Error::Timeout {
                op,
                rank,
                channel,
                peer: st.peer,
                waiting: if st.what == abi::WAIT_SPACE { "a free FIFO slot at" } else { "data from" },
                timeout_s: inner.cfg.timeout.as_secs_f64(),
            }
        }
        None => inner.peer_failed(op, waited[0]),
    }
}
