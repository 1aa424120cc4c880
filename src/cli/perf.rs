//! `jitccl perf`: a size sweep of one collective in the nccl-tests layout (time, algbw,
//! busbw, #wrong for out-of-place and in-place), checked against the reference. Without a
//! GPU it runs on the host target; it also measures this machine's single-thread memcpy
//! bandwidth so the host figures have a yardstick.
//!
//! Ranks are separate processes by default: `jitccl perf` relaunches itself as N ranks
//! (torchrun's environment), which join through `Comm::init_from_env`; rank 0 prints.
//! `--threads` runs all ranks as threads of this process instead.

use std::process::ExitCode;
use std::time::Instant;

use jitccl::codegen::BuiltinOp;
use jitccl::reference::{count_wrong, inputs, op_for_rank, reduced, RefElement};
use jitccl::{with_element_type, Algorithm, Collective, Comm, Config, DataType, DeviceBuffer, Op, Protocol, Stream};

use super::at_least;
use super::ranks::parse_nranks;
use super::size::{parse_size, sweep_sizes};

#[derive(clap::Args)]
pub struct PerfArgs {
    /// all_reduce, broadcast, reduce, all_gather, reduce_scatter or sendrecv.
    coll: Collective,
    /// Number of ranks (at most max(1024, 4 x CPUs)).
    #[arg(short = 'n', long, default_value_t = 2, value_parser = parse_nranks)]
    nranks: usize,
    /// Smallest size in bytes (K/M/G suffixes).
    #[arg(short = 'b', long = "minbytes", default_value = "8", value_parser = parse_size)]
    min_bytes: usize,
    /// Largest size in bytes (K/M/G suffixes).
    #[arg(short = 'e', long = "maxbytes", default_value = "32M", value_parser = parse_size)]
    max_bytes: usize,
    /// Multiply the size by this factor (at least 2) each step.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2, value_parser = at_least::<2>)]
    factor: usize,
    /// Datatype (nccl-tests names: int8 uint8 int32 uint32 int64 uint64 half float double
    /// bfloat16 f8e4m3 f8e5m2).
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    dtype: DataType,
    /// Reduction op: sum prod min max avg premulsum.
    #[arg(short = 'o', long = "op", default_value = "sum")]
    op: BuiltinOp,
    /// Root rank of broadcast and reduce.
    #[arg(short = 'r', long, default_value_t = 0)]
    root: usize,
    /// Force the algorithm (ring, tree, oneshot).
    #[arg(long)]
    algo: Option<Algorithm>,
    /// Force the protocol (simple, ll, ll128).
    #[arg(long)]
    proto: Option<Protocol>,
    /// Channels per rank.
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=jitccl::MAX_CHANNELS as u64))]
    channels: Option<usize>,
    /// Check results against the reference this many times per size (0: no check).
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    check: usize,
    /// Untimed iterations before timing.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    warmup: usize,
    /// Timed iterations (at least 1).
    #[arg(short = 'i', long = "iters", default_value_t = 20, value_parser = at_least::<1>)]
    iters: usize,
    /// Run the ranks as threads of this process instead of separate processes.
    #[arg(long)]
    threads: bool,
}

/// Per-size outcome of one placement.
struct Timing {
    us: f64,
    wrong: usize,
}

impl PerfArgs {
    pub fn run(self) -> Result<ExitCode, String> {
        sweep_sizes(self.min_bytes, self.max_bytes, self.factor)?;
        if self.root >= self.nranks {
            return Err(format!("root {} is not one of the {} ranks", self.root, self.nranks));
        }
        let cfg = Config { nchannels: self.channels, algo: self.algo, proto: self.proto, ..Config::default() };
        let in_rank_process = std::env::var_os("RANK").is_some() && std::env::var_os("WORLD_SIZE").is_some();
        if self.threads {
            let comms = Comm::init_all(self.nranks, &cfg).map_err(|e| e.to_string())?;
            let streams =
                comms.iter().map(|c| c.device().stream()).collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())?;
            with_element_type!(self.dtype, sweep(&self, &comms, &streams))
        } else if in_rank_process {
            let comm = Comm::init_from_env(&cfg).map_err(|e| e.to_string())?;
            if comm.nranks() != self.nranks {
                return Err(format!("WORLD_SIZE is {}, but -n asks for {} ranks", comm.nranks(), self.nranks));
            }
            let stream = comm.device().stream().map_err(|e| e.to_string())?;
            with_element_type!(self.dtype, sweep(&self, std::slice::from_ref(&comm), std::slice::from_ref(&stream)))
        } else {
            let exe = std::env::current_exe().map_err(|e| format!("finding this program: {e}"))?;
            let mut command = vec![exe.to_string_lossy().into_owned()];
            command.extend(std::env::args().skip(1));
            super::ranks::run_ranks(self.nranks, None, &command, None, false)
        }
    }

    fn op(&self) -> Option<Op> {
        if !self.coll.reduces() {
            return None;
        }
        Some(match self.op {
            BuiltinOp::Sum => Op::Sum,
            BuiltinOp::Prod => Op::Prod,
            BuiltinOp::Min => Op::Min,
            BuiltinOp::Max => Op::Max,
            BuiltinOp::Avg => Op::Avg,
            BuiltinOp::PreMulSum => Op::PreMulSum(0.0),
        })
    }

    /// (elements per rank, bytes in the size column) for a requested size, as nccl-tests
    /// counts them: all_gather and reduce_scatter report the whole n-block buffer.
    fn shape(&self, bytes: usize, esize: usize) -> (usize, usize) {
        let n = self.nranks;
        match self.coll {
            Collective::AllGather | Collective::ReduceScatter => {
                let per = bytes / esize / n;
                (per, per * esize * n)
            }
            _ => (bytes / esize, bytes / esize * esize),
        }
    }

    fn bus_factor(&self) -> f64 {
        let n = self.nranks as f64;
        match self.coll {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather | Collective::ReduceScatter => (n - 1.0) / n,
            _ => 1.0,
        }
    }
}

/// Buffers of one rank, sized for the largest step.
struct RankBufs<T: jitccl::Element> {
    send: DeviceBuffer<T>,
    recv: DeviceBuffer<T>,
}

fn sweep<T: RefElement>(a: &PerfArgs, comms: &[Comm], streams: &[Stream]) -> Result<ExitCode, String> {
    let n = a.nranks;
    let esize = size_of::<T>();
    let (max_count, _) = a.shape(a.max_bytes, esize);
    let big = matches!(a.coll, Collective::AllGather | Collective::ReduceScatter);
    let full = if big { max_count * n } else { max_count };
    let bufs = comms
        .iter()
        .map(|c| {
            let dev = c.device();
            Ok(RankBufs { send: dev.alloc::<T>(full.max(1))?, recv: dev.alloc::<T>(full.max(1))? })
        })
        .collect::<Result<Vec<_>, jitccl::Error>>()
        .map_err(|e| e.to_string())?;

    // Only rank 0 prints (with threads, this process holds rank 0).
    let printer = comms.iter().any(|c| c.rank() == 0);
    let say = |line: String| {
        if printer {
            println!("{line}");
        }
    };
    // Collectives run on the host target; say why when there is a GPU too.
    let why_host = match jitccl::cuda_device_count() {
        Ok(g) => format!("{g} CUDA device(s) present, but this build launches collectives on the host target only"),
        Err(e) => e,
    };
    let how = if comms.len() == n { "ranks as threads of one process" } else { "rank processes" };
    say(format!(
        "# jitccl perf: {} on the host target ({why_host}), {n} {how}, {} warmup + {} timed iterations, check {}",
        a.coll, a.warmup, a.iters, a.check
    ));
    say("#".into());
    say(format!("# {:>66}{:>34}", "out-of-place", "in-place"));
    say(format!(
        "# {:>10} {:>12} {:>9} {:>7} {:>6} {:>8} {:>7} {:>7} {:>6} {:>8} {:>7} {:>7} {:>6}",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong"
    ));
    say(format!(
        "# {:>10} {:>12} {:>9} {:>7} {:>6} {:>8} {:>7} {:>7} {:>6} {:>8} {:>7} {:>7} {:>6}",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""
    ));
    let (mut bus_sum, mut rows, mut wrong_total) = (0.0, 0usize, 0usize);
    // busbw of the largest size, out of place and in place.
    let mut last_bus = [0.0f64; 2];
    for bytes in sweep_sizes(a.min_bytes, a.max_bytes, a.factor)? {
        let (count, size) = a.shape(bytes, esize);
        let root = if matches!(a.coll, Collective::Broadcast | Collective::Reduce) { a.root as i64 } else { -1 };
        let redop = a.op().map_or("none".to_string(), |_| a.op.to_string());
        let mut line = format!(
            "  {:>10} {:>12} {:>9} {:>7} {:>6}",
            size,
            if big { count * n } else { count },
            a.dtype.nccl_name(),
            redop,
            root
        );
        for in_place in [false, true] {
            if in_place && a.coll == Collective::SendRecv {
                line.push_str(&format!(" {:>8} {:>7} {:>7} {:>6}", "N/A", "N/A", "N/A", "N/A"));
                continue;
            }
            let t = measure(a, comms, streams, &bufs, count, in_place).map_err(|e| format!("size {size}: {e}"))?;
            let algbw = size as f64 / t.us / 1e3;
            let busbw = algbw * a.bus_factor();
            bus_sum += busbw;
            rows += 1;
            last_bus[in_place as usize] = busbw;
            wrong_total += t.wrong;
            let wrong = if a.check > 0 { t.wrong.to_string() } else { "N/A".into() };
            line.push_str(&format!(" {:>8.2} {:>7.2} {:>7.2} {:>6}", t.us, algbw, busbw, wrong));
        }
        say(line);
    }
    say(format!("# Out of bounds values : {wrong_total} {}", if wrong_total == 0 { "OK" } else { "FAILED" }));
    say(format!("# Avg bus bandwidth    : {:.4}", bus_sum / rows.max(1) as f64));
    if !printer {
        return Ok(if wrong_total == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    // At least 64 MiB, so that the copy runs from memory, not from the last-level cache.
    let memcpy = memcpy_gbps(a.max_bytes.clamp(64 << 20, 256 << 20));
    say(format!(
        "# Single-thread memcpy bandwidth on this machine: {memcpy:.2} GB/s; busbw of the last size is {:.0}% of it out of place, {:.0}% in place",
        100.0 * last_bus[0] / memcpy,
        100.0 * last_bus[1] / memcpy
    ));
    Ok(if wrong_total == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The buffers one rank passes for one call.
fn views<T: jitccl::Element>(
    a: &PerfArgs, b: &RankBufs<T>, rank: usize, count: usize, in_place: bool,
) -> jitccl::Result<(DeviceBuffer<T>, DeviceBuffer<T>)> {
    let n = a.nranks;
    Ok(match (a.coll, in_place) {
        (Collective::AllGather, false) => (b.send.slice(0..count)?, b.recv.slice(0..count * n)?),
        (Collective::AllGather, true) => (b.recv.slice(rank * count..(rank + 1) * count)?, b.recv.slice(0..count * n)?),
        (Collective::ReduceScatter, false) => (b.send.slice(0..count * n)?, b.recv.slice(0..count)?),
        (Collective::ReduceScatter, true) => {
            (b.send.slice(0..count * n)?, b.send.slice(rank * count..(rank + 1) * count)?)
        }
        (_, false) => (b.send.slice(0..count)?, b.recv.slice(0..count)?),
        (_, true) => (b.send.slice(0..count)?, b.send.slice(0..count)?),
    })
}

fn launch_all<T: jitccl::Element>(
    a: &PerfArgs, comms: &[Comm], streams: &[Stream], views: &[(DeviceBuffer<T>, DeviceBuffer<T>)], count: usize,
) -> jitccl::Result<()> {
    let n = a.nranks;
    for ((c, s), (send, recv)) in comms.iter().zip(streams).zip(views) {
        let r = c.rank();
        let op = a.op().map(|o| op_for_rank(o, r));
        match a.coll {
            Collective::AllReduce => c.all_reduce(send, recv, count, op.expect("reduces"), s)?,
            Collective::Broadcast => c.broadcast(send, recv, count, a.root, s)?,
            Collective::Reduce => c.reduce(send, recv, count, op.expect("reduces"), a.root, s)?,
            Collective::AllGather => c.all_gather(send, recv, count, s)?,
            Collective::ReduceScatter => c.reduce_scatter(send, recv, count, op.expect("reduces"), s)?,
            Collective::SendRecv => c.sendrecv(send, count, (r + 1) % n, recv, count, (r + n - 1) % n, s)?,
        }
    }
    Ok(())
}

fn sync_all(streams: &[Stream]) -> jitccl::Result<()> {
    streams.iter().try_for_each(|s| s.synchronize())
}

fn measure<T: RefElement>(
    a: &PerfArgs, comms: &[Comm], streams: &[Stream], bufs: &[RankBufs<T>], count: usize, in_place: bool,
) -> jitccl::Result<Timing> {
    let v = comms
        .iter()
        .zip(bufs)
        .map(|(c, b)| views(a, b, c.rank(), count, in_place))
        .collect::<jitccl::Result<Vec<_>>>()?;
    for _ in 0..a.warmup {
        launch_all(a, comms, streams, &v, count)?;
    }
    sync_all(streams)?;
    let t0 = Instant::now();
    for _ in 0..a.iters {
        launch_all(a, comms, streams, &v, count)?;
    }
    sync_all(streams)?;
    let us = t0.elapsed().as_secs_f64() * 1e6 / a.iters.max(1) as f64;
    let mut wrong = 0;
    for _ in 0..a.check {
        wrong += check(a, comms, streams, &v, count)?;
    }
    // A collective takes as long as its slowest rank; wrong elements add up.
    let us = over_ranks(a, comms, streams, us, Op::Max)?;
    let wrong = over_ranks(a, comms, streams, wrong as f64, Op::Sum)? as usize;
    Ok(Timing { us, wrong })
}

/// Combines one value of every rank process (with threads, `local` already covers all).
fn over_ranks(a: &PerfArgs, comms: &[Comm], streams: &[Stream], local: f64, op: Op) -> jitccl::Result<f64> {
    if comms.len() == a.nranks {
        return Ok(local);
    }
    let buf = comms[0].device().alloc_from(&[local])?;
    comms[0].all_reduce(&buf, &buf, 1, op, &streams[0])?;
    streams[0].synchronize()?;
    Ok(buf.to_vec()[0])
}

/// Runs the collective once on reference inputs and counts wrong elements on all ranks.
fn check<T: RefElement>(
    a: &PerfArgs, comms: &[Comm], streams: &[Stream], v: &[(DeviceBuffer<T>, DeviceBuffer<T>)], count: usize,
) -> jitccl::Result<usize> {
    let n = a.nranks;
    let op = a.op();
    for (c, (send, _)) in comms.iter().zip(v) {
        send.copy_from_host(&inputs::<T>(op, c.rank(), send.len()))?;
    }
    launch_all(a, comms, streams, v, count)?;
    sync_all(streams)?;
    let mut wrong = 0;
    for (c, (_, recv)) in comms.iter().zip(v) {
        let r = c.rank();
        let want: Vec<T> = match a.coll {
            Collective::AllReduce => (0..count).map(|i| reduced(op.expect("reduces"), n, i)).collect(),
            Collective::Reduce if r != a.root => continue,
            Collective::Reduce => (0..count).map(|i| reduced(op.expect("reduces"), n, i)).collect(),
            Collective::Broadcast => inputs(op, a.root, count),
            Collective::AllGather => (0..n).flat_map(|q| inputs::<T>(op, q, count)).collect(),
            Collective::ReduceScatter => (0..count).map(|i| reduced(op.expect("reduces"), n, r * count + i)).collect(),
            Collective::SendRecv => inputs(op, (r + n - 1) % n, count),
        };
        wrong += count_wrong(&recv.to_vec(), &want, op, n);
    }
    Ok(wrong)
}

/// Single-thread memcpy bandwidth (bytes copied per second) over `bytes`-sized buffers.
fn memcpy_gbps(bytes: usize) -> f64 {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&src);
    let reps = (1usize << 30).div_ceil(bytes).clamp(3, 64);
    let t0 = Instant::now();
    for _ in 0..reps {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    }
    (bytes * reps) as f64 / t0.elapsed().as_secs_f64() / 1e9
}
