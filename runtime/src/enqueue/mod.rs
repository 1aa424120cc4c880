//! The one path from a public call to a queued launch (NCCL's enqueue step): check the
//! arguments (an error changes nothing), choose the algorithm, protocol and channels
//! (identically on every rank), look the kernel up (compiling it once), build the launch
//! arguments and queue the launch on the caller's stream.

mod batch;
mod checks;
mod moves;
mod p2p;
mod plan;
mod queuing;
mod wire;

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicI32};
use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;

use jitccl_codegen::abi::{Args, Channel, Conn, Status};
use jitccl_codegen::{Collective, DataType, KernelSpec, Wire};

use crate::affinity::{self, CpuSet};
use crate::config::Resolved;
use crate::device::{Device, DeviceBuffer, Kernel, KernelRef};
use crate::element::Element;
use crate::error::{invalid, Error, Result};
use crate::fault::Board;
use crate::op::Op;
use crate::registry::{Direct, Registry};
use crate::stream::{Executor, KernelCall, Launch, Stream, Tables};
use crate::tune::{Choice, Tuner};
use checks::Buf;
pub(crate) use checks::{disjoint, Group};
pub(crate) use moves::{Moves, Spread};
use plan::Shape;
pub(crate) use wire::Reach;

/// One rank's side of the launch path: what every launch of its communicator reads.
pub(crate) struct Rank {
    pub group: Group,
    pub device: Device,
    pub cfg: Resolved,
    /// What runs this rank's launches: its kernel tables, its failure state.
    pub exec: Arc<Executor>,
    /// The CPUs this rank's kernel threads are bound to, if any.
    pub cpus: Option<Arc<CpuSet>>,
    /// The same choices on every rank (built from rank 0's plan).
    pub tuner: Arc<Tuner>,
    /// How the communicator's ranks reach each other, which decides what its wired calls
    /// encode (`wire`).
    pub reach: Reach,
    /// Whether this rank has said that a wired call ran exactly.
    told_exact: AtomicBool,
    /// Registered memory: calls on it may run the direct algorithms.
    pub sym: Arc<Registry>,
    /// The kernels this rank has launched, kept while it lives: a launch looks its kernel
    /// up here, without the generator's process-wide locks, and borrows it (see `plan`).
    kernels: Mutex<FxHashMap<KernelSpec, Kernel>>,
    /// The rank count this rank's kernels are specialized for, if they are (`plan`).
    specialized: Option<u8>,
    /// The launch arguments that are the same for every launch of this rank.
    base: Base,
    /// This rank's identity for the plans threads remember (see `plan`).
    uid: u64,
    _live: affinity::Live,
}

/// The launch arguments every launch of a rank passes alike: its tables, failure board
/// (kernels poll the word of the peer they wait for), abort flag and timeout, found once
/// instead of per launch (each table's address is a match on where its memory lives).
struct Base {
    timeout_ns: u64,
    channels: *mut Channel,
    peer_send: *const *mut Conn,
    peer_recv: *const *mut Conn,
    status: *mut Status,
    abort_flag: *const i32,
    peer_failed: *const i32,
    same_gpu: i32,
}

// SAFETY: the pointers lead into the rank's tables (owned by the `Rank` holding this) and
// its failure board (in a segment its communicator keeps alive longer); only kernels
// dereference them.
unsafe impl Send for Base {}
unsafe impl Sync for Base {}

impl Base {
    fn new(cfg: &Resolved, t: &Tables, board: &Board) -> Base {
        Base {
            timeout_ns: cfg.timeout.as_nanos().min(u64::MAX as u128) as u64,
            channels: t.channels.ptr(),
            peer_send: t.peer_send.ptr(),
            peer_recv: t.peer_recv.ptr(),
            status: t.status.ptr(),
            abort_flag: t.abort_ptr(),
            peer_failed: board.as_ptr(),
            same_gpu: t.same_gpu as i32,
        }
    }
}

/// The send and recv bytes of a call.
type Ranges = (Range<usize>, Range<usize>);

/// A call tuned, its kernel found and its registered regions looked up (`Rank::prepare`).
pub(crate) struct Ready {
    choice: Choice,
    kernel: KernelRef,
    direct: Option<Direct>,
    /// Direct point-to-point: its table (`p2p`).
    ops: Option<Arc<p2p::Ops>>,
    /// Bytes per element of the call's type where its kernel counts bytes, else 1.
    scale: usize,
    /// The channels the launch runs (`choice.nchannels` split its data; see `batch::busy`).
    ctas: usize,
}

/// How a call runs (`Rank::form`).
pub(crate) enum Form {
    /// One launch of its collective's kernel.
    Whole,
    /// One point-to-point launch on a table of transfers: direct (true: `p2p`), or over the
    /// FIFOs (false: `batch`).
    Table(Arc<p2p::Ops>, bool),
    /// Its point-to-point rounds (`Call::rounds`), a launch each.
    Rounds,
}

/// One checked operation, ready to be tuned and launched.
pub(crate) struct Call {
    pub coll: Collective,
    pub dtype: DataType,
    pub op: Option<Op>,
    /// In elements of `dtype`.
    pub count: usize,
    pub recv_count: usize,
    pub root: usize,
    pub send: *const u8,
    pub recv: *mut u8,
    /// The send and recv memory, kept alive while the operation is queued.
    pub keep: [Option<Arc<dyn Send + Sync>>; 2],
    /// Where the send and recv buffers are (checked against the communicator's device).
    pub devices: [Option<Device>; 2],
    /// Per-rank bytes, for tuning.
    pub bytes: usize,
    pub send_peer: Option<usize>,
    pub recv_peer: Option<usize>,
    /// The library's own exchange (e.g. registering memory): the ring on one channel,
    /// whatever JITCCL_ALGO / JITCCL_PROTO say.
    pub internal: bool,
    /// A batch's transfers (AlltoAllv's, a group's sends and receives), which run as one
    /// direct point-to-point launch where they can (`p2p`), else as one launch over the
    /// FIFOs (`batch`) where that can, else one by one.
    pub rounds: Vec<Call>,
    pub batch: bool,
    /// AlltoAll, Gather, Scatter: the same call's blocks as point-to-point transfers, whose
    /// rounds are launched in its place where the direct algorithm does not run it (see
    /// `Rank::form`), as one batch over the FIFOs where that can, else one by one.
    pub moves: Option<Moves>,
    /// The wire format asked for (`Call::wired`), or `None`: the communicator's default
    /// where it fits.
    pub wire: Option<Wire>,
}

impl Call {
    /// A collective of `group` (not SendRecv), its buffers checked against what it needs.
    pub(crate) fn checked<T: Element>(
        group: &Group, coll: Collective, op: Option<Op>, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize,
        root: usize,
    ) -> Result<Call> {
        group.collective(coll, &buf(send), &buf(recv), count, root, size_of::<T>())?;
        // AllGather and ReduceScatter move a block per rank.
        let blocks = if matches!(coll, Collective::AllGather | Collective::ReduceScatter) { group.nranks } else { 1 };
        Ok(Call::of(coll, op, send, recv, count, root, blocks))
    }

    /// AlltoAll, Gather or Scatter (`coll`) of `count` elements a block, whose buffers the
    /// caller has checked while cutting them into `rounds`, its point-to-point form. A
    /// side a rank does not use (Gather's recv, Scatter's send off the root) is given as
    /// the side it uses, so that the direct algorithm's choice rests on used memory only.
    pub(crate) fn moves<T: Element>(
        group: &Group, coll: Collective, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize, root: usize,
        moves: Moves,
    ) -> Call {
        let at_root = group.rank == root;
        let (send, recv) = match coll {
            Collective::Gather if !at_root => (send, send),
            Collective::Scatter if !at_root => (recv, recv),
            _ => (send, recv),
        };
        Call { moves: Some(moves), ..Call::of(coll, None, send, recv, count, root, group.nranks) }
    }

    /// A collective's call on `send` and `recv`, `blocks` blocks of `count` to tune by.
    fn of<T: Element>(
        coll: Collective, op: Option<Op>, send: &DeviceBuffer<T>, recv: &DeviceBuffer<T>, count: usize, root: usize,
        blocks: usize,
    ) -> Call {
        Call {
            coll,
            dtype: T::DTYPE,
            op,
            count,
            recv_count: 0,
            root,
            send: send.as_ptr(),
            recv: recv.as_ptr(),
            keep: send.keep_alive_with(recv),
            devices: [Some(send.device().clone()), Some(recv.device().clone())],
            bytes: count * blocks * size_of::<T>(),
            send_peer: None,
            recv_peer: None,
            internal: false,
            rounds: Vec::new(),
            batch: false,
            moves: None,
            wire: None,
        }
    }

    /// A point-to-point call of `group`, checked: each side given is its elements and peer.
    pub(crate) fn checked_p2p<T: Element>(group: &Group, send: Option<Side<T>>, recv: Option<Side<T>>) -> Result<Call> {
        let view = |x: &Option<Side<T>>| x.as_ref().map(|s| (s.view(), s.count, s.peer));
        group.sendrecv(view(&send), view(&recv), size_of::<T>())?;
        let leg = |s: &Option<Side<T>>| s.as_ref().map(|s| (s.buf.ptr_at(s.at), s.count, s.peer));
        let keep = [send.as_ref().and_then(|s| s.buf.keep_alive()), recv.as_ref().and_then(|r| r.buf.keep_alive())];
        let devices = [send.as_ref().map(|s| s.buf.device().clone()), recv.as_ref().map(|r| r.buf.device().clone())];
        Ok(Call::transfer(T::DTYPE, leg(&send), leg(&recv), keep, devices, None))
    }

    /// A SendRecv of `dtype` elements: `send` and `recv` each its address, elements and
    /// peer; `keep` and `devices` as a call's.
    pub(crate) fn transfer(
        dtype: DataType, send: Option<(*mut u8, usize, usize)>, recv: Option<(*mut u8, usize, usize)>,
        keep: [Option<Arc<dyn Send + Sync>>; 2], devices: [Option<Device>; 2], wire: Option<Wire>,
    ) -> Call {
        let leg =
            |l: Option<(*mut u8, usize, usize)>| l.map_or((std::ptr::null_mut(), 0, None), |(p, n, q)| (p, n, Some(q)));
        let ((send, count, send_peer), (recv, recv_count, recv_peer)) = (leg(send), leg(recv));
        Call {
            coll: Collective::SendRecv,
            dtype,
            op: None,
            count,
            recv_count,
            root: 0,
            send,
            recv,
            keep,
            devices,
            bytes: count.max(recv_count) * dtype.size(),
            send_peer,
            recv_peer,
            internal: false,
            rounds: Vec::new(),
            batch: false,
            moves: None,
            wire,
        }
    }

    /// The point-to-point calls that run this call one after another: a batch's own, or
    /// those its moves make, each a SendRecv of one round's blocks holding the call's
    /// buffers and in its wire.
    pub(crate) fn take_rounds(&mut self, group: Group) -> Vec<Call> {
        let Some(moves) = self.moves else { return std::mem::take(&mut self.rounds) };
        let leg = |s: Option<(usize, usize)>| s.map(|(peer, at)| (at as *mut u8, self.count, peer));
        moves
            .rounds(group, self.count * self.dtype.size())
            .map(|(send, recv)| {
                Call::transfer(self.dtype, leg(send), leg(recv), self.keep.clone(), self.devices.clone(), self.wire)
            })
            .collect()
    }
}

/// One side of a point-to-point call: `count` elements of `buf` from element `at` (at most
/// its length), and the peer. A block of a larger buffer is named by its offset rather than
/// a slice: an AlltoAll makes two a peer, on every small call's path.
pub(crate) struct Side<'a, T: Element> {
    pub buf: &'a DeviceBuffer<T>,
    pub at: usize,
    pub count: usize,
    pub peer: usize,
}

impl<'a, T: Element> Side<'a, T> {
    /// `count` elements from the start of `buf`, with `peer`.
    pub(crate) fn of(buf: &'a DeviceBuffer<T>, count: usize, peer: usize) -> Side<'a, T> {
        Side { buf, at: 0, count, peer }
    }

    /// What the checks see: the buffer from `at` on.
    fn view(&self) -> Buf {
        let start = self.buf.ptr_at(self.at) as usize;
        let len = self.buf.len() - self.at;
        Buf { len, bytes: start..start + len * size_of::<T>() }
    }
}

/// What the checks see of a buffer.
fn buf<T: Element>(b: &DeviceBuffer<T>) -> Buf {
    Buf { len: b.len(), bytes: b.byte_range() }
}

impl Rank {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        group: Group, device: Device, cfg: Resolved, exec: Arc<Executor>, board: Board, cpus: Option<Arc<CpuSet>>,
        tuner: Arc<Tuner>, reach: Reach,
    ) -> Rank {
        let uid = plan::next_uid();
        let specialized = plan::specialized(&group, &cfg);
        Rank {
            base: Base::new(&cfg, &exec.tables, &board),
            group,
            device,
            cfg,
            exec,
            cpus,
            tuner,
            reach,
            told_exact: AtomicBool::new(false),
            sym: Arc::new(Registry::new(uid)),
            kernels: Mutex::default(),
            specialized,
            uid,
            _live: affinity::Live::new(),
        }
    }

    /// Nonzero once the rank is aborted; its kernels poll it.
    pub(crate) fn abort(&self) -> &AtomicI32 {
        self.exec.tables.abort()
    }

    /// `call`'s shape as plans see it, and its bytes if the direct algorithms could run it.
    fn shape(&self, call: &Call) -> (Shape, Option<Ranges>) {
        let wire = self.wire_of(call);
        // Collectives that only move data run as bytes, unless a wire format encodes them;
        // a wire runs direct only where a direct kernel carries it.
        let kdtype = if call.coll.reduces() || wire != Wire::Exact { call.dtype } else { DataType::U8 };
        let direct_wire = Wire::algorithms(call.coll).iter().any(|a| a.is_direct());
        let ranges = if call.internal || wire != Wire::Exact && !direct_wire { None } else { self.direct_ranges(call) };
        let shape = Shape {
            coll: call.coll,
            bytes: call.bytes,
            dtype: kdtype,
            op: call.op.map(Op::red_op),
            direct: ranges.as_ref().is_some_and(|(s, r)| self.sym.holds(s, r)),
            internal: call.internal,
            wire,
        };
        (shape, ranges)
    }

    /// How `call` runs, decided once (see [`Form`]). A point-to-point launch runs direct
    /// where it can (`p2p`), else, on the host, as one batch over the FIFOs (`batch`); a
    /// collective whose ring is point-to-point rounds takes that form where `p2p_form`
    /// says so.
    pub(crate) fn form(&self, call: &Call) -> Result<Form> {
        if call.batch || call.coll == Collective::SendRecv {
            if let Some(table) = self.p2p_table(call)? {
                return Ok(Form::Table(Arc::new(table), true));
            }
            if !call.batch {
                return Ok(Form::Whole);
            }
        } else if !self.p2p_form(call)? {
            return Ok(Form::Whole);
        }
        Ok(self.fifo_batch(call).map_or(Form::Rounds, |t| Form::Table(Arc::new(t), false)))
    }

    /// Whether a collective whose ring is point-to-point rounds (AlltoAll, Gather, Scatter)
    /// takes that form: where its buffers are not all registered or the tuner picks it over
    /// the direct kernel. Every rank decides alike, as for every choice.
    fn p2p_form(&self, call: &Call) -> Result<bool> {
        if !call.coll.in_rounds() || call.count == 0 {
            return Ok(false);
        }
        let (shape, _) = self.shape(call);
        if !shape.direct {
            return Ok(true);
        }
        let choice = self.tuner.choose_for(call.coll, call.bytes, 1, true, true)?;
        Ok(!choice.algo.is_direct())
    }

    /// Tunes `call`, which runs as `form` (not `Form::Rounds`), and finds (compiling if need
    /// be) its kernel: everything about its launch that can fail. `None` when it moves
    /// nothing. Nothing is queued yet, so a group can compile every launch before it queues
    /// any.
    pub(crate) fn prepare(&self, call: &Call, form: Form, stream: &Stream) -> Result<Option<Ready>> {
        precheck(call, &self.device, stream)?;
        if call.count == 0 && call.recv_count == 0 {
            return Ok(None);
        }
        let (mut shape, mut ranges) = self.shape(call);
        let ops = match form {
            Form::Table(table, direct) => {
                shape = Shape { coll: Collective::SendRecv, dtype: DataType::U8, direct, ..shape };
                ranges = None;
                Some(table)
            }
            _ => None,
        };
        let (choice, kernel) = self.plan(shape)?;
        let rank = self.group.rank;
        tracing::trace!("rank {rank}: enqueue {} {choice:?} x {} elements", call.coll.name(), call.count);
        // The regions are taken (counted references) only by a call that runs on them.
        let direct = match (choice.algo.is_direct(), &ranges) {
            (true, Some((s, r))) => Some(self.sym.direct(s, r).ok_or_else(|| {
                Error::InvalidUsage(format!(
                    "{} on rank {rank}: a buffer was deregistered while the call was made",
                    call.coll.name()
                ))
            })?),
            _ => None,
        };
        // A kernel of bytes counts bytes (see `shape`).
        let scale = if shape.dtype == DataType::U8 { call.dtype.size() } else { 1 };
        let (chunk, nch) = (choice.chunk_elems, choice.nchannels);
        let ctas = match (shape.coll, choice.algo.is_direct() || self.device.is_cuda(), &ops) {
            (Collective::SendRecv, false, Some(batch)) => batch::busy(batch, chunk, nch),
            (Collective::SendRecv, false, None) => {
                batch::channels_used((call.count.max(call.recv_count) * scale) as u64, chunk, nch)
            }
            _ => nch,
        };
        Ok(Some(Ready { choice, kernel, direct, ops, scale, ctas }))
    }

    /// Writes the launch of a prepared `call` of `comm` (the communicator, which the launch
    /// keeps alive) into `dst`; takes what `call` and `ready` keep alive. It cannot fail, so
    /// the stream can have it written straight into a queue slot (`Stream::enqueue_with`):
    /// built here, in place, not returned and moved. `ready` is borrowed, not moved, for the same reason: its
    /// copy stalled on the stores that had just built it (perf, 2 ranks, 8 B).
    #[inline]
    pub(crate) fn launch_into(
        &self, dst: &mut Option<Launch>, comm: Arc<dyn Send + Sync>, call: &mut Call, ready: &mut Ready,
    ) {
        let (choice, kernel, direct, ops) = (ready.choice, ready.kernel, ready.direct.take(), ready.ops.take());
        let (scale, ctas) = (ready.scale, ready.ctas);
        let (b, Group { rank, nranks }) = (&self.base, self.group);
        let region = |r: Option<&Arc<crate::registry::Region>>, at: usize| {
            r.map_or((std::ptr::null(), 0, 0), |r| (r.kernel_bases(), r.id, (at - r.range.start) as u64))
        };
        let (sym_send, sym_send_id, sym_send_off) = region(direct.as_ref().map(|d| &d.send), call.send as usize);
        let (sym_recv, sym_recv_id, sym_recv_off) = region(direct.as_ref().map(|d| &d.recv), call.recv as usize);

        let t = &self.exec.tables;
        let scalar_f = match call.op {
            Some(Op::PreMulSum(s)) => s,
            Some(Op::Avg) => 1.0 / nranks as f64,
            _ => 0.0,
        };
        let args = Args {
            sendbuff: call.send,
            recvbuff: call.recv,
            count: (call.count * scale) as u64,
            recv_count: (call.recv_count * scale) as u64,
            chunk_elems: choice.chunk_elems,
            timeout_ns: b.timeout_ns,
            channels: b.channels,
            p2p_send: call.send_peer.map_or(std::ptr::null_mut(), |peer| t.p2p_send[peer].ptr()),
            p2p_recv: call.recv_peer.map_or(std::ptr::null_mut(), |peer| t.p2p_recv[peer].ptr()),
            peer_send: b.peer_send,
            peer_recv: b.peer_recv,
            status: b.status,
            abort_flag: b.abort_flag,
            peer_failed: b.peer_failed,
            sym_send,
            sym_recv,
            sym_flags: match (&direct, &ops) {
                (Some(d), _) => d.flags,
                (None, Some(o)) => o.flags,
                (None, None) => std::ptr::null(),
            },
            sym_send_id,
            sym_recv_id,
            sym_send_off,
            sym_recv_off,
            table: ops.as_ref().map_or(std::ptr::null(), |o| o.words.as_ptr()),
            scalar_f,
            scalar_i: scalar_f as i64,
            scalar_ptr: match call.op {
                Some(Op::PreMulSumAt(at)) => at.addr() as *const u8,
                _ => std::ptr::null(),
            },
            // Set when the launch runs (`Executor::run`), from the ranks running then.
            spin: 0,
            same_gpu: b.same_gpu,
            pad: 0,
            // Set when the launch runs (`Executor::run`), for a rank with a net proxy.
            progress: None,
            progress_ctx: std::ptr::null_mut(),
            nranks: nranks as i32,
            rank: rank as i32,
            root: call.root as i32,
            nchannels: choice.nchannels as i32,
        };
        let name = call.coll.name();
        *dst = Some(Launch {
            owner: self.exec.as_owner(),
            call: KernelCall { kernel, args, nchannels: ctas, proto: choice.proto, name },
            // A point-to-point table holds its buffers.
            _keep: match ops {
                Some(o) => [Some(o), None],
                None => std::mem::take(&mut call.keep),
            },
            _direct: direct,
            _comm: comm,
        });
    }

    /// The byte ranges of `call`'s send and recv buffers, when the direct algorithms could
    /// run it if both are registered (channels within the flags area; ranks within the
    /// kernels' tables), on the host and on GPUs alike.
    fn direct_ranges(&self, call: &Call) -> Option<Ranges> {
        use jitccl_codegen::abi::{SYM_CHANNELS, SYM_MAX_RANKS};
        if self.tuner.max_channels() > SYM_CHANNELS || self.group.nranks > SYM_MAX_RANKS {
            return None;
        }
        let elem = call.dtype.size();
        let bytes = |p: *const u8, n: usize| p as usize..p as usize + n * elem;
        Some(match call.coll {
            Collective::SendRecv => return None,
            Collective::AllGather => (bytes(call.send, call.count), bytes(call.recv, call.count * self.group.nranks)),
            Collective::ReduceScatter => {
                (bytes(call.send, call.count * self.group.nranks), bytes(call.recv, call.count))
            }
            Collective::AllToAll => {
                (bytes(call.send, call.count * self.group.nranks), bytes(call.recv, call.count * self.group.nranks))
            }
            // Off the root both sides are the one used (`Call::moves`).
            Collective::Gather | Collective::Scatter => {
                let all = if self.group.rank == call.root { self.group.nranks } else { 1 };
                let (s, r) = if call.coll == Collective::Gather { (1, all) } else { (all, 1) };
                (bytes(call.send, call.count * s), bytes(call.recv, call.count * r))
            }
            _ => (bytes(call.send, call.count), bytes(call.recv, call.count)),
        })
    }
}

/// The checks of `call` that need its stream or its whole value (the others ran when it was
/// made): done before a nonblocking call is queued, so that they fail the call, not the
/// communicator.
pub(crate) fn precheck(call: &Call, device: &Device, stream: &Stream) -> Result<()> {
    let name = call.coll.name();
    if stream.device() != device {
        return invalid(format!("{name}: the stream is on {:?}, the communicator on {device:?}", stream.device()));
    }
    if let Some(d) = call.devices.iter().flatten().find(|d| *d != device) {
        return invalid(format!("{name}: a buffer is on {d:?}, the communicator on {device:?}"));
    }
    match call.op {
        Some(Op::PreMulSum(s)) if call.dtype.is_integer() && (s.fract() != 0.0 || !s.is_finite()) => {
            return invalid(format!("PreMulSum scalar {s} is not a whole number, as {} needs", call.dtype));
        }
        Some(Op::PreMulSumAt(at)) if at.addr() == 0 || at.addr() % call.dtype.size() != 0 => {
            return invalid(format!("PreMulSum scalar at {:#x}: not an aligned {} address", at.addr(), call.dtype));
        }
        _ => {}
    }
    Ok(())
}
