//! One thread's part of the sweep: it drives its ranks (nccl-tests' -g) through every size,
//! out of place and in place: warm-up, timed iterations of -m operations each (with -z,
//! synchronized after every one; with -G, captured into a CUDA graph and replayed), then
//! -c reference checks. Each thread times its own
//! ranks; the time and the wrong count are combined over all ranks with a collective, so
//! threads and processes need no other channel.

use std::time::Instant;

use jitccl::codegen::BuiltinOp;
use jitccl::reference::{count_wrong, inputs, op_for_rank, RefElement};
use jitccl::{Comm, CudaGraph, DeviceBuffer, Op, Registration, Stream, Wire};

use super::flags::{Average, Layout, PerfArgs, Register};
use super::report::{Report, Timing};

mod wire;

/// The ranks one thread drives, with their streams and buffers (sized for the largest step).
pub(super) struct Ranks<'a, T: jitccl::Element> {
    pub comms: &'a [Comm],
    pub streams: &'a [Stream],
    bufs: Views<T>,
    /// Per rank, where times and wrong counts are combined over ranks: allocated like the
    /// buffers, so that a forced direct algorithm (--algo) runs there too.
    scratch: Vec<DeviceBuffer<f64>>,
    /// -R 1: the buffers' registrations, kept while they are used.
    _regs: Vec<Registration>,
}

/// One rank's (send, recv).
type Pair<T> = (DeviceBuffer<T>, DeviceBuffer<T>);
/// This thread's (send, recv) view per rank for one size and placement.
pub(super) type Views<T> = Vec<Pair<T>>;

/// Runs the sweep on `comms`; true when no element was wrong.
pub fn sweep<T: RefElement>(a: &PerfArgs, lay: &Layout, comms: &[Comm], streams: &[Stream]) -> Result<bool, String> {
    let (n, esize) = (lay.nranks, size_of::<T>());
    let ranks = prepare::<T>(a, lay, comms, streams)?;
    let mut report = Report::new(comms.iter().any(|c| c.rank() == 0));
    let (encodes, encodings) = match comms.first() {
        Some(c) => (
            c.wired(a.wire).encodes().map_err(|e| e.to_string())?,
            wire::encodings(a, c, n).map_err(|e| e.to_string())?,
        ),
        None => (false, 0),
    };
    report.header(a, lay, encodes, encodings);
    let root = if a.coll.rooted() { a.root as i64 } else { -1 };
    let redop = if a.coll.reduces() { a.op.to_string() } else { "none".into() };
    for bytes in a.sizes()? {
        let (count, size) = a.coll.shape(bytes, esize, n);
        let shown = if a.coll.blocks() { count * n } else { count };
        let mut line = Report::row_start(size, shown, a.dtype.nccl_name(), &redop, root);
        for in_place in [false, true] {
            let t = if in_place && !a.coll.in_place() {
                None
            } else {
                Some(measure(a, lay, &ranks, count, in_place).map_err(|e| format!("size {size}: {e}"))?)
            };
            report.cell(&mut line, in_place, size, a.coll.bus_factor(n), t.as_ref(), a.check > 0);
        }
        report.say(&line);
    }
    report.finish(a.max_bytes, a.target);
    Ok(report.wrong == 0)
}

/// This thread's ranks with their buffers allocated as -R says and filled.
pub(super) fn prepare<'a, T: RefElement>(
    a: &PerfArgs, lay: &Layout, comms: &'a [Comm], streams: &'a [Stream],
) -> Result<Ranks<'a, T>, String> {
    let (n, esize) = (lay.nranks, size_of::<T>());
    let (max_count, _) = a.coll.shape(a.max_bytes, esize, n);
    let full = if a.coll.blocks() { max_count * n } else { max_count };
    let (bufs, regs) = alloc(a.register, comms, full.max(1)).map_err(|e| e.to_string())?;
    // Data in every page before anything is timed, as nccl-tests initializes its buffers:
    // a never-written buffer reads the kernel's one shared zero page, which flattered large
    // sizes several-fold, and only until a -c check first wrote it.
    for (c, (send, recv)) in comms.iter().zip(&bufs) {
        let data = inputs::<T>(op(a), c.rank(), send.len());
        send.copy_from_host(&data).and_then(|()| recv.copy_from_host(&data)).map_err(|e| e.to_string())?;
    }
    let (scratch, scratch_regs) = alloc::<f64>(a.register, comms, 1).map_err(|e| e.to_string())?;
    let scratch = scratch.into_iter().map(|(b, _)| b).collect();
    Ok(Ranks { comms, streams, bufs, scratch, _regs: regs.into_iter().chain(scratch_regs).collect() })
}

/// Each rank's (send, recv) buffers of `len` elements as -R says, and the registrations to
/// keep. Registering and symmetric allocation are collective: this thread's ranks take part
/// at once, each on a thread of its own.
pub(super) fn alloc<T: jitccl::Element>(
    how: Register, comms: &[Comm], len: usize,
) -> jitccl::Result<(Views<T>, Vec<Registration>)> {
    let one = |c: &Comm| -> jitccl::Result<(Pair<T>, Vec<Registration>)> {
        match how {
            Register::None => Ok(((c.device().alloc(len)?, c.device().alloc(len)?), Vec::new())),
            Register::Local => {
                let (send, recv) = (c.device().alloc(len)?, c.device().alloc(len)?);
                let regs = vec![c.register(&send)?, c.register(&recv)?];
                Ok(((send, recv), regs))
            }
            Register::Symmetric => Ok(((c.alloc_symmetric(len)?, c.alloc_symmetric(len)?), Vec::new())),
        }
    };
    let each: Vec<_> = if how == Register::None { comms.iter().map(one).collect() } else { at_once(comms, one) };
    let (mut bufs, mut regs) = (Vec::new(), Vec::new());
    for r in each {
        let (b, g) = r?;
        bufs.push(b);
        regs.extend(g);
    }
    Ok((bufs, regs))
}

/// `f` on each of this thread's ranks, each on a thread of its own when there are several:
/// for collective calls (registration, split), which every rank must make at once.
pub(super) fn at_once<R: Send>(comms: &[Comm], f: impl Fn(&Comm) -> R + Sync) -> Vec<R> {
    if comms.len() == 1 {
        return comms.iter().map(f).collect();
    }
    std::thread::scope(|s| {
        let f = &f;
        let hs: Vec<_> = comms.iter().map(|c| s.spawn(move || f(c))).collect();
        hs.into_iter().map(|h| h.join().expect("rank thread panicked")).collect()
    })
}

/// The reduction op perf passes (None for collectives that do not reduce).
pub(super) fn op(a: &PerfArgs) -> Option<Op> {
    if !a.coll.reduces() {
        return None;
    }
    Some(match a.op {
        BuiltinOp::Sum => Op::Sum,
        BuiltinOp::Prod => Op::Prod,
        BuiltinOp::Min => Op::Min,
        BuiltinOp::Max => Op::Max,
        BuiltinOp::Avg => Op::Avg,
        BuiltinOp::PreMulSum => Op::PreMulSum(0.0),
    })
}

/// One operation on every rank of this thread (`comms`: theirs, or --compare's children).
fn launch_all<T: jitccl::Element>(
    a: &PerfArgs, comms: &[Comm], streams: &[Stream], v: &Views<T>, count: usize,
) -> jitccl::Result<()> {
    for ((c, s), (send, recv)) in comms.iter().zip(streams).zip(v) {
        let op = op(a).map(|o| op_for_rank(o, c.rank()));
        a.coll.launch(c, s, send, recv, count, op, a.root, a.wire)?;
    }
    Ok(())
}

pub(super) fn sync_all(streams: &[Stream]) -> jitccl::Result<()> {
    streams.iter().try_for_each(|s| s.synchronize())
}

/// -G: `iters` iterations of -m operations each, captured once into a CUDA graph per rank
/// (recorded, not run), the graphs then replayed -G times, as nccl-tests does. The time
/// per operation in microseconds, as this thread saw it; a failure of a replayed
/// operation is an error.
fn graph_iterate<T: jitccl::Element>(
    a: &PerfArgs, comms: &[Comm], streams: &[Stream], v: &Views<T>, count: usize, iters: usize,
) -> jitccl::Result<f64> {
    let graphs = capture(streams, || (0..iters * a.agg).try_for_each(|_| launch_all(a, comms, streams, v, count)))?;
    let t0 = Instant::now();
    for _ in 0..a.cudagraph {
        for (g, s) in graphs.iter().zip(streams) {
            g.launch(s)?;
        }
    }
    sync_all(streams)?;
    let us = t0.elapsed().as_secs_f64() * 1e6 / (a.cudagraph as usize * iters * a.agg).max(1) as f64;
    graphs.iter().try_for_each(CudaGraph::check)?;
    Ok(us)
}

/// The CUDA graph per stream of what `record` queues on `streams` (ended even when
/// `record` fails, so that no stream is left capturing).
fn capture(streams: &[Stream], record: impl FnOnce() -> jitccl::Result<()>) -> jitccl::Result<Vec<CudaGraph>> {
    streams.iter().try_for_each(Stream::begin_capture)?;
    let recorded = record();
    let graphs: jitccl::Result<Vec<CudaGraph>> = streams.iter().map(Stream::end_capture).collect();
    recorded.and(graphs)
}

/// `iters` iterations of -m operations each; -z synchronizes after every operation. The
/// time per operation in microseconds, as this thread saw it.
pub(super) fn iterate<T: jitccl::Element>(
    a: &PerfArgs, comms: &[Comm], streams: &[Stream], v: &Views<T>, count: usize, iters: usize,
) -> jitccl::Result<f64> {
    let t0 = Instant::now();
    for _ in 0..iters {
        for _ in 0..a.agg {
            launch_all(a, comms, streams, v, count)?;
            if a.blocking {
                sync_all(streams)?;
            }
        }
    }
    sync_all(streams)?;
    Ok(t0.elapsed().as_secs_f64() * 1e6 / (iters * a.agg).max(1) as f64)
}

/// This thread's (send, recv) views of `count` elements, out of place or in place.
pub(super) fn views<T: jitccl::Element>(
    a: &PerfArgs, lay: &Layout, r: &Ranks<T>, count: usize, in_place: bool,
) -> jitccl::Result<Views<T>> {
    r.comms
        .iter()
        .zip(&r.bufs)
        .map(|(c, (send, recv))| a.coll.views(send, recv, c.rank(), count, lay.nranks, in_place))
        .collect()
}

fn measure<T: RefElement>(
    a: &PerfArgs, lay: &Layout, r: &Ranks<T>, count: usize, in_place: bool,
) -> jitccl::Result<Timing> {
    let v = views(a, lay, r, count, in_place)?;
    iterate(a, r.comms, r.streams, &v, count, a.warmup)?;
    let us = match a.cudagraph {
        0 => iterate(a, r.comms, r.streams, &v, count, a.iters)?,
        _ => graph_iterate(a, r.comms, r.streams, &v, count, a.iters)?,
    };
    let wrong = wrong(a, lay, r, r.comms, &v, count)?;
    Ok(Timing { us: over_ranks_time(a, lay, r, us)?, wrong })
}

/// -c checks of `comms` (this thread's ranks or --compare's children of them): the wrong
/// elements over all ranks.
pub(super) fn wrong<T: RefElement>(
    a: &PerfArgs, lay: &Layout, r: &Ranks<T>, comms: &[Comm], v: &Views<T>, count: usize,
) -> jitccl::Result<usize> {
    let mut wrong = vec![0.0; r.comms.len()];
    for _ in 0..a.check {
        for (w, k) in wrong.iter_mut().zip(check(a, lay, comms, r.streams, v, count)?) {
            *w += k as f64;
        }
    }
    Ok(over_ranks(r, &wrong, Op::Sum)? as usize)
}

/// This thread's time per operation combined over all ranks as nccl-tests' -a says: rank
/// 0's, or the mean, min or max.
pub(super) fn over_ranks_time<T: jitccl::Element>(
    a: &PerfArgs, lay: &Layout, r: &Ranks<T>, us: f64,
) -> jitccl::Result<f64> {
    let (times, how): (Vec<f64>, _) = match a.average {
        Average::Rank0 => (r.comms.iter().map(|c| if c.rank() == 0 { us } else { 0.0 }).collect(), Op::Sum),
        Average::Mean => (vec![us / lay.nranks as f64; r.comms.len()], Op::Sum),
        Average::Min => (vec![us; r.comms.len()], Op::Min),
        Average::Max => (vec![us; r.comms.len()], Op::Max),
    };
    over_ranks(r, &times, how)
}

/// Combines one value per rank of every thread and process (all take part).
fn over_ranks<T: jitccl::Element>(r: &Ranks<T>, values: &[f64], op: Op) -> jitccl::Result<f64> {
    for ((c, s), (b, v)) in r.comms.iter().zip(r.streams).zip(r.scratch.iter().zip(values)) {
        b.copy_from_host(&[*v])?;
        c.all_reduce(b, b, 1, op, s)?;
    }
    sync_all(r.streams)?;
    Ok(r.scratch[0].to_vec()[0])
}

/// Runs the operation once on reference inputs; the wrong elements of each of this
/// thread's ranks.
fn check<T: RefElement>(
    a: &PerfArgs, lay: &Layout, comms: &[Comm], streams: &[Stream], v: &Views<T>, count: usize,
) -> jitccl::Result<Vec<usize>> {
    let (n, op) = (lay.nranks, op(a));
    for (c, (send, _)) in comms.iter().zip(v) {
        send.copy_from_host(&inputs::<T>(op, c.rank(), send.len()))?;
    }
    // With -G the checked operation is a graph's replay: captured ones must give what
    // eager ones give.
    if a.cudagraph > 0 {
        let graphs = capture(streams, || launch_all(a, comms, streams, v, count))?;
        graphs.iter().zip(streams).try_for_each(|(g, s)| g.launch(s))?;
        sync_all(streams)?;
        graphs.iter().try_for_each(CudaGraph::check)?;
    } else {
        launch_all(a, comms, streams, v, count)?;
        sync_all(streams)?;
    }
    if a.wire != Wire::Exact {
        return wire::wrong(a, lay, comms, streams, v, count);
    }
    Ok(comms
        .iter()
        .zip(v)
        .map(|(c, (_, recv))| match a.coll.expected::<T>(op, n, a.root, c.rank(), count) {
            Some(want) => count_wrong(&recv.to_vec(), &want, op, n),
            None => 0,
        })
        .collect())
}
