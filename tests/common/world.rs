//! A world of communicators (one per rank, all in this process) and the reference check
//! of one collective call on it, shared by the host sweep (`collectives.rs`) and the CUDA
//! one (`cuda.rs`).

use std::time::Duration;

use jitccl::reference::{count_wrong, inputs, op_for_rank, premul_scalar, reduced, RefElement};
use jitccl::{
    with_element_type, Algorithm, Collective, Comm, Config, DataType, Device, DeviceBuffer, Op, Protocol, Registration,
    ScalarAt, Stream,
};

/// Counts checked: 0, 1, primes and sizes that are not multiples of any step.
pub const COUNTS: &[usize] = &[0, 1, 7, 61, 1031, 4099];
pub const OPS: &[Op] = &[Op::Sum, Op::Prod, Op::Min, Op::Max, Op::Avg, Op::PreMulSum(0.0)];

/// How a world allocates the buffers of its calls.
#[allow(dead_code)] // each test binary uses some
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mem {
    /// `Device::alloc`.
    Plain,
    /// `Comm::alloc_symmetric`.
    Symmetric,
    /// `Device::alloc`, then `Comm::register`.
    Registered,
}

pub struct World {
    pub comms: Vec<Comm>,
    pub streams: Vec<Stream>,
    pub mem: Mem,
}

impl World {
    /// The same world, its calls' buffers allocated as `mem` says.
    #[allow(dead_code)] // each test binary uses some
    pub fn with_mem(mut self, mem: Mem) -> World {
        self.mem = mem;
        self
    }
}

/// The ranks end at once, as processes would: over a network each closing rank waits
/// (bounded) for its peers' goodbyes, so one after another each would wait out the bound.
impl Drop for World {
    fn drop(&mut self) {
        let comms = std::mem::take(&mut self.comms);
        std::thread::scope(|s| {
            for comm in comms {
                s.spawn(move || drop(comm));
            }
        });
    }
}

/// Ranks on `devices` (one each) forced to `algo`/`proto` with tiny FIFO slots, so that
/// the counts above take many steps and wrap the 8-slot FIFOs many times.
#[allow(dead_code)] // the tests whose ranks are not made by init_all build their own
pub fn world_on(devices: &[Device], algo: Algorithm, proto: Protocol, nchannels: usize) -> World {
    let cfg = Config {
        nchannels: Some(nchannels),
        algo: Some(algo),
        proto: Some(proto),
        // Simple: 64 f32 per step; LL: 4 lines (32 data bytes); LL128: 2 lines (240 bytes).
        slot_bytes: Some([256, 64, 256]),
        ..Config::default()
    };
    world_with(devices, &cfg)
}

/// `n` host devices, one per rank.
#[allow(dead_code)] // the host-only tests
pub fn hosts(n: usize) -> Vec<Device> {
    (0..n).map(Device::host).collect()
}

/// Ranks on `devices` (one each) made with `cfg` (and a 60 s timeout).
pub fn world_with(devices: &[Device], cfg: &Config) -> World {
    let cfg = Config { timeout: Some(Duration::from_secs(60)), ..cfg.clone() };
    let comms = Comm::init_all_on(devices, &cfg).expect("init_all_on");
    let streams = comms.iter().map(|c| c.device().stream().expect("stream")).collect();
    World { comms, streams, mem: Mem::Plain }
}

/// Ranks on `devices` (one each), buffers as `mem` says, running `algo` on exactly
/// `nchannels` channels for every collective that has it, at every size: a tuning table of
/// a row per collective forces the count, which the model alone lowers for small calls.
#[allow(dead_code)] // the tests of many channels
pub fn world_on_channels(devices: &[Device], algo: Algorithm, nchannels: usize, mem: Mem) -> World {
    let rows: String = Collective::ALL
        .iter()
        .filter(|c| **c != Collective::SendRecv && c.algorithms().contains(&algo))
        .map(|c| format!("{c},0,{},{algo},simple,{nchannels},-1,-1,-1,-1\n", u64::MAX >> 1))
        .collect();
    let path = std::env::temp_dir().join(format!("jitccl-channels-{}-{algo}-{nchannels}.csv", std::process::id()));
    std::fs::write(&path, rows).expect("writing the tuning table");
    let cfg = Config {
        nchannels: Some(nchannels),
        algo: Some(algo),
        proto: Some(Protocol::Simple),
        tuner_table: Some(path.clone()),
        ..Config::default()
    };
    let w = world_with(devices, &cfg).with_mem(mem);
    // Read at init.
    let _ = std::fs::remove_file(path);
    w
}

impl World {
    pub fn n(&self) -> usize {
        self.comms.len()
    }
    /// `f(rank, comm)` on every rank at once (collective calls), in rank order.
    pub fn on_all<R: Send>(&self, f: impl Fn(usize, &Comm) -> R + Sync) -> Vec<R> {
        std::thread::scope(|s| {
            let f = &f;
            let hs: Vec<_> = self.comms.iter().enumerate().map(|(r, c)| s.spawn(move || f(r, c))).collect();
            hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
        })
    }

    /// A zeroed buffer of `len` elements per rank, allocated as `self.mem` says; the
    /// registrations go to `regs`, to be kept while the buffers are used.
    pub fn alloc<T: RefElement>(&self, len: usize, regs: &mut Vec<Registration>) -> Vec<DeviceBuffer<T>> {
        let plain = || self.comms.iter().map(|c| c.device().alloc::<T>(len).unwrap()).collect::<Vec<_>>();
        match self.mem {
            Mem::Plain => plain(),
            Mem::Symmetric => self.on_all(|_, c| c.alloc_symmetric::<T>(len).unwrap()),
            Mem::Registered => {
                let bufs = plain();
                regs.extend(self.on_all(|r, c| c.register(&bufs[r]).unwrap()));
                bufs
            }
        }
    }

    /// Rank r's buffer holding `xs[r]`.
    #[allow(dead_code)] // the tests that post their own calls
    pub fn alloc_from<T: RefElement>(&self, xs: &[Vec<T>]) -> Vec<DeviceBuffer<T>> {
        self.comms.iter().zip(xs).map(|(c, x)| c.device().alloc_from(x).unwrap()).collect()
    }

    /// `f(rank, comm, stream)` on every rank at once, then every stream synchronized; any
    /// rank's error fails the test.
    #[allow(dead_code)] // the tests that post their own calls
    pub fn run(&self, f: impl Fn(usize, &Comm, &Stream) -> jitccl::Result<()> + Sync) {
        std::thread::scope(|s| {
            let f = &f;
            let hs: Vec<_> = (self.comms.iter().zip(&self.streams).enumerate())
                .map(|(r, (c, st))| s.spawn(move || f(r, c, st)))
                .collect();
            for (r, h) in hs.into_iter().enumerate() {
                h.join().expect("rank thread").unwrap_or_else(|e| panic!("rank {r}: {e}"));
            }
        });
        self.sync().unwrap_or_else(|e| panic!("{e}"));
    }

    pub fn sync(&self) -> Result<(), String> {
        for s in &self.streams {
            s.synchronize().map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// One collective call on every rank, checked against the reference. Returns a
/// description of what went wrong.
pub fn check<T: RefElement>(
    w: &World, coll: Collective, op: Option<Op>, count: usize, in_place: bool,
) -> Result<(), String> {
    let n = w.n();
    let root = count % n;
    let mut regs = Vec::new();
    // Per rank (send, recv), allocated together (symmetric allocation is collective).
    // In place, AllGather's send and ReduceScatter's recv are the rank's block of the other.
    let blocks = |bufs: &Vec<DeviceBuffer<T>>| -> Vec<DeviceBuffer<T>> {
        bufs.iter().enumerate().map(|(r, b)| b.slice(r * count..(r + 1) * count).unwrap()).collect()
    };
    let (sends, recvs): (Vec<DeviceBuffer<T>>, Vec<DeviceBuffer<T>>) = match coll {
        Collective::AllGather | Collective::Gather => {
            let recvs = w.alloc::<T>(count * n, &mut regs);
            (if in_place { blocks(&recvs) } else { w.alloc(count, &mut regs) }, recvs)
        }
        Collective::AllToAll => (w.alloc::<T>(count * n, &mut regs), w.alloc::<T>(count * n, &mut regs)),
        Collective::ReduceScatter | Collective::Scatter => {
            let sends = w.alloc::<T>(count * n, &mut regs);
            let recvs = if in_place { blocks(&sends) } else { w.alloc(count, &mut regs) };
            (sends, recvs)
        }
        _ => {
            let sends = w.alloc::<T>(count, &mut regs);
            let recvs =
                if in_place && coll != Collective::SendRecv { sends.clone() } else { w.alloc(count, &mut regs) };
            (sends, recvs)
        }
    };
    let mut outs: Vec<DeviceBuffer<T>> = Vec::new();
    let mut scalars: Vec<DeviceBuffer<T>> = Vec::new();
    for (r, (c, s)) in w.comms.iter().zip(&w.streams).enumerate() {
        let op_r = match op {
            // The address a PreMulSumAt case names is a placeholder: each rank's points at
            // memory holding that rank's scalar, which lives until the results are read.
            Some(Op::PreMulSumAt(_)) => {
                // Integers hold it as the kernels multiply by it: wrapped into the type.
                let v = if T::DTYPE.is_integer() {
                    T::from_i128_wrapping(premul_scalar(r) as i128)
                } else {
                    T::from_f64(premul_scalar(r))
                };
                let at = c.device().alloc_from(&[v]).unwrap();
                // SAFETY: one T, kept in `scalars` until after `w.sync()`.
                let op = Op::PreMulSumAt(unsafe { ScalarAt::new(at.address() as *const std::ffi::c_void) });
                scalars.push(at);
                Some(op)
            }
            o => o.map(|o| op_for_rank(o, r)),
        };
        let (send, recv) = (&sends[r], &recvs[r]);
        let res = match coll {
            Collective::AllReduce | Collective::Reduce | Collective::Broadcast => {
                send.copy_from_host(&inputs::<T>(op, r, count)).unwrap();
                match coll {
                    Collective::AllReduce => c.all_reduce(send, recv, count, op_r.unwrap(), s),
                    Collective::Reduce => c.reduce(send, recv, count, op_r.unwrap(), root, s),
                    _ => c.broadcast(send, recv, count, root, s),
                }
            }
            Collective::AllGather => {
                send.copy_from_host(&inputs::<T>(None, r, count)).unwrap();
                c.all_gather(send, recv, count, s)
            }
            Collective::ReduceScatter => {
                send.copy_from_host(&inputs::<T>(op, r, count * n)).unwrap();
                c.reduce_scatter(send, recv, count, op_r.unwrap(), s)
            }
            Collective::SendRecv => {
                // A ring exchange: send to the next rank, receive from the previous one.
                send.copy_from_host(&inputs::<T>(None, r, count)).unwrap();
                c.sendrecv(send, count, (r + 1) % n, recv, count, (r + n - 1) % n, s)
            }
            Collective::AllToAll => {
                send.copy_from_host(&inputs::<T>(None, r, count * n)).unwrap();
                c.all_to_all(send, recv, count, s)
            }
            Collective::Gather => {
                send.copy_from_host(&inputs::<T>(None, r, count)).unwrap();
                c.gather(send, recv, count, root, s)
            }
            Collective::Scatter => {
                send.copy_from_host(&inputs::<T>(None, r, count * n)).unwrap();
                c.scatter(send, recv, count, root, s)
            }
        };
        outs.push(recv.clone());
        res.map_err(|e| format!("rank {r}: launch: {e}"))?;
    }
    w.sync()?;
    for (r, out) in outs.iter().enumerate() {
        let mut got = vec![T::from_f64(0.0); out.len()];
        out.copy_to_host(&mut got).map_err(|e| format!("rank {r}: reading the result: {e}"))?;
        let want: Vec<T> = match coll {
            Collective::AllReduce => (0..count).map(|i| reduced(op.unwrap(), n, i)).collect(),
            Collective::Reduce if r != root => continue,
            Collective::Reduce => (0..count).map(|i| reduced(op.unwrap(), n, i)).collect(),
            Collective::Broadcast => inputs(op, root, count),
            Collective::AllGather => (0..n).flat_map(|q| inputs::<T>(None, q, count)).collect(),
            Collective::ReduceScatter => (0..count).map(|i| reduced(op.unwrap(), n, r * count + i)).collect(),
            Collective::SendRecv => inputs(None, (r + n - 1) % n, count),
            // Block q from rank q's send block r.
            Collective::AllToAll => {
                (0..n).flat_map(|q| inputs::<T>(None, q, count * n)[r * count..(r + 1) * count].to_vec()).collect()
            }
            Collective::Gather if r != root => continue,
            Collective::Gather => (0..n).flat_map(|q| inputs::<T>(None, q, count)).collect(),
            Collective::Scatter => inputs::<T>(None, root, count * n)[r * count..(r + 1) * count].to_vec(),
        };
        let wrong = count_wrong(&got, &want, op, n);
        if wrong > 0 {
            let first = got.iter().zip(&want).position(|(g, w)| g != w).unwrap_or(0);
            return Err(format!(
                "rank {r}: {wrong} wrong of {}; first at {first}: got {:?}, want {:?}",
                want.len(),
                got.get(first),
                want.get(first)
            ));
        }
    }
    Ok(())
}

/// Checks `coll` on `w` for every (datatype, op) of `cases`, every count and placement
/// (SendRecv and AllToAll have no in-place form); returns how many ran and, labelled with `what`, those
/// that went wrong.
pub fn check_cases(w: &World, coll: Collective, cases: &[(DataType, Option<Op>)], what: &str) -> (usize, Vec<String>) {
    check_counts(w, coll, cases, COUNTS, what)
}

/// [`check_cases`] for the given counts.
pub fn check_counts(
    w: &World, coll: Collective, cases: &[(DataType, Option<Op>)], counts: &[usize], what: &str,
) -> (usize, Vec<String>) {
    let (mut runs, mut failures) = (0, Vec::new());
    for &(d, op) in cases {
        for &count in counts {
            for in_place in [false, true] {
                if matches!(coll, Collective::SendRecv | Collective::AllToAll) && in_place {
                    continue;
                }
                runs += 1;
                if let Err(e) = with_element_type!(d, check(w, coll, op, count, in_place)) {
                    failures.push(format!("{what} {d} {op:?} count={count} in_place={in_place}: {e}"));
                }
            }
        }
    }
    (runs, failures)
}

/// [`check_counts`] for each datatype of `dtypes` at a count just past `bytes` (odd for the
/// 1-byte types, so that a last group of stores is partial), Sum and Max for reductions.
#[allow(dead_code)] // the large-output tests
pub fn check_past(w: &World, coll: Collective, dtypes: &[DataType], bytes: usize, what: &str) -> (usize, Vec<String>) {
    let ops = if coll.reduces() { vec![Some(Op::Sum), Some(Op::Max)] } else { vec![None] };
    let (mut runs, mut failures) = (0, Vec::new());
    for &d in dtypes {
        let count = bytes / d.size() + 1 + usize::from(d.size() == 1);
        let cases: Vec<_> = ops.iter().map(|&o| (d, o)).collect();
        let (r, f) = check_counts(w, coll, &cases, &[count], what);
        runs += r;
        failures.extend(f);
    }
    (runs, failures)
}

/// [`check_past`] of `bytes` for every (collective, algorithm, datatypes) of `cases`, each
/// on the world `make(coll, algo)` gives; fails listing every run that went wrong.
#[allow(dead_code)] // the large-output tests
pub fn assert_past(
    cases: &[(Collective, Algorithm, &[DataType])], bytes: usize, what: &str,
    make: impl Fn(Collective, Algorithm) -> World,
) {
    let (mut runs, mut failures) = (0, Vec::new());
    for &(coll, algo, dtypes) in cases {
        let w = make(coll, algo);
        let (r, f) = check_past(&w, coll, dtypes, bytes, &format!("{coll} {algo} n={} {what}", w.n()));
        runs += r;
        failures.extend(f);
    }
    assert!(failures.is_empty(), "{} of {runs} runs failed:\n{}", failures.len(), failures.join("\n"));
}

/// Which (datatype, op) pairs a sweep runs.
#[allow(dead_code)] // each test binary uses some
#[derive(Clone, Copy)]
pub enum Pairs {
    /// Every datatype with every op.
    Every,
    /// Each datatype once, with the ops in turn from one that the kernel's shape picks:
    /// every datatype, every op where there are as many datatypes as ops, and over the
    /// shapes many different pairs. Tests of the same shape and datatypes get the same
    /// pairs, and so share their kernels.
    Rotated,
}

#[allow(dead_code)] // not every test file sweeps
pub fn pairs(
    coll: Collective, algo: Algorithm, proto: Protocol, dtypes: &[DataType], which: Pairs,
) -> Vec<(DataType, Option<Op>)> {
    if !coll.reduces() {
        return dtypes.iter().map(|&d| (d, None)).collect();
    }
    match which {
        Pairs::Every => dtypes.iter().flat_map(|&d| OPS.iter().map(move |&o| (d, Some(o)))).collect(),
        Pairs::Rotated => {
            let first = coll as usize * 5 + algo as usize * 3 + proto as usize;
            dtypes.iter().enumerate().map(|(i, &d)| (d, Some(OPS[(first + i) % OPS.len()]))).collect()
        }
    }
}

/// Runs `coll` for every (datatype, op) of `cases`, every count and placement on the worlds
/// `make(nranks, nchannels)` gives for each size in `ranks` (1, 2 and 3 channels by size);
/// fails listing every combination that went wrong. `what` labels the runs.
#[allow(dead_code)] // the CUDA sweep has its own
pub fn sweep(
    coll: Collective, what: &str, ranks: &[usize], cases: &[(DataType, Option<Op>)],
    make: impl Fn(usize, usize) -> World,
) {
    let (mut runs, mut failures) = (0, Vec::new());
    for &n in ranks {
        let nchannels = 1 + n % 3;
        let w = make(n, nchannels);
        let (r, f) = check_cases(&w, coll, cases, &format!("{coll} {what} n={n} ch={nchannels}"));
        runs += r;
        failures.extend(f);
    }
    assert!(failures.is_empty(), "{} of {runs} runs failed:\n{}", failures.len(), failures.join("\n"));
    eprintln!("{coll} {what}: {runs} runs passed");
}

/// Checks `coll` on `w` with a PreMulSum whose multiplier each rank's kernel reads from that
/// rank's memory (`Op::PreMulSumAt`), for every datatype of `dtypes`, count and placement.
#[allow(dead_code)] // not every test file checks it
pub fn check_premul_at(w: &World, coll: Collective, dtypes: &[DataType], what: &str) {
    // SAFETY: never dereferenced: `check` gives each rank an address of its own.
    let placeholder = Op::PreMulSumAt(unsafe { ScalarAt::new(std::ptr::null()) });
    let cases: Vec<_> = dtypes.iter().map(|&d| (d, Some(placeholder))).collect();
    let (runs, failures) = check_cases(w, coll, &cases, what);
    assert!(failures.is_empty(), "{} of {runs} runs failed:\n{}", failures.len(), failures.join("\n"));
}

/// A group's send and receive where rank 0's receive lands on its own send buffer, shifted
/// (a shift in place), along a ring of 3 ranks on `dev` over the FIFOs' 4 channels: a
/// channel's receive must wait for the other channels' sends it would overwrite
/// (`shift_in_place_rounds`).
#[allow(dead_code)] // each test binary uses some
pub fn shift_in_place(dev: &Device) {
    // Over the FIFOs: the direct kernels refuse a shift in place (NCCL leaves it undefined).
    let cfg = Config {
        algo: Some(Algorithm::Ring),
        nchannels: Some(4),
        timeout: Some(Duration::from_secs(60)),
        ..Config::default()
    };
    shift_in_place_rounds(&Comm::init_all_on(&[dev.clone(), dev.clone(), dev.clone()], &cfg).unwrap());
}

/// On 3 ranks in a ring, each sends a block to the next and receives one from the previous
/// in a group; rank 0 receives into its own send buffer, shifted, ranks 1 and 2 into a buffer
/// of their own. Eight rounds queued back to back on each rank's stream, each on buffers of
/// its own, then one synchronize; every element of every round checked.
#[allow(dead_code)] // each test binary uses some
pub fn shift_in_place_rounds(comms: &[Comm]) {
    const M: usize = 300_007;
    const SHIFT: usize = 70_001;
    const ROUNDS: usize = 8;
    let sent = |r: usize, round: usize| -> Vec<f64> {
        (0..M).map(|i| r as f64 * 1e7 + round as f64 * 1e6 + i as f64 * 0.5).collect()
    };
    let got: Vec<Vec<Vec<f64>>> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .enumerate()
            .map(|(r, c)| {
                let sent = &sent;
                s.spawn(move || {
                    let dev = c.device();
                    let stream = dev.stream().unwrap();
                    let (next, prev) = ((r + 1) % 3, (r + 2) % 3);
                    let mut keep = Vec::new();
                    for round in 0..ROUNDS {
                        let mut whole = sent(r, round);
                        whole.extend(vec![-1.0; SHIFT]);
                        let buf = dev.alloc_from(&whole).unwrap();
                        let got =
                            if r == 0 { buf.slice(SHIFT..SHIFT + M).unwrap() } else { dev.alloc::<f64>(M).unwrap() };
                        jitccl::group(|| {
                            c.send(&buf.slice(0..M).unwrap(), M, next, &stream)?;
                            c.recv(&got, M, prev, &stream)
                        })
                        .unwrap();
                        keep.push((buf, got));
                    }
                    stream.synchronize().unwrap();
                    keep.iter().map(|(_, got)| got.to_vec()).collect()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
    });
    for (r, rounds) in got.iter().enumerate() {
        let prev = (r + 2) % 3;
        for (round, got) in rounds.iter().enumerate() {
            let wrong = got.iter().zip(sent(prev, round)).filter(|(g, w)| **g != *w).count();
            assert_eq!(wrong, 0, "round {round}, rank {r}: {wrong} of {M} elements from rank {prev} are wrong");
        }
    }
}
