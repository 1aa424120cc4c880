//! Wire formats (`Comm::wired`, `Config::wire`) on the host target: every format's results
//! within its documented bound of the exact sum (computed in f64) at 1 to 8 ranks, on
//! random and adversarial data (an outlier in a block, zeros, f32 denormals, ±Inf and NaN,
//! which must come out as the exact path's would), every rank's result bit-identical; the
//! bf16 wire beats summing in bf16 (PyTorch's bf16_compress_hook) at 8 ranks; the tree and
//! direct AllReduce; the other ring collectives, point to point and AlltoAll(v); shared
//! memory and the network transport; the communicator's default
//! (`Config::wire`, `JITCCL_WIRE`); the calls a wire refuses, refused before anything is
//! queued; within one host, the calls run exactly unless `Config::wire_local` says encode,
//! which every other test sets, so that they test the wires' kernels.
//!
//! FIFO slots are tiny (64 f32 a step), so that the counts take many steps; one kernel per
//! (collective, wire) is compiled, shared by every rank count.

use half::bf16;
use jitccl::reference::{window_max, wire_bound, wire_terms};
use jitccl::{Algorithm, Comm, Config, Device, DeviceBuffer, Error, Op, Protocol, Wire, WireLocal};

#[allow(dead_code)] // this binary uses part of it
#[path = "common/world.rs"]
mod world;
use world::{hosts, World};

/// Counts: zero, one, a prime, one that is no multiple of a block or a step.
const COUNTS: &[usize] = &[0, 1, 61, 1031];
const WIRES: &[Wire] = &[
    Wire::Bf16,
    Wire::Fp16,
    Wire::Fp8E4M3 { block: 64 },
    Wire::Fp8E5M2 { block: 32 },
    Wire::Int8 { block: 64 },
    Wire::Int8 { block: 128 },
];

/// `n` ranks as threads with `cfg`, encoding within the host unless `cfg` says otherwise.
fn world_with(n: usize, cfg: Config) -> World {
    world_as(n, Config { wire_local: cfg.wire_local.or(Some(WireLocal::Encode)), ..cfg })
}

fn world_as(n: usize, cfg: Config) -> World {
    world::world_with(&hosts(n), &Config { nchannels: Some(2), slot_bytes: Some([256, 64, 256]), ..cfg })
}

fn world(n: usize) -> World {
    world_with(n, Config::default())
}

/// SplitMix64: reproducible inputs.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// Rank `r`'s `count` inputs: random values whose magnitude changes from block to block,
/// and at fixed places an outlier, zeros, denormals, and (with `specials`) ±Inf and NaN.
fn inputs(r: usize, count: usize, specials: bool) -> Vec<f32> {
    let mut rng = Rng(0x5eed ^ (r as u64) << 32 ^ count as u64);
    (0..count)
        .map(|i| match i % 97 {
            13 => 300.0 * rng.unit(),
            20..=23 => 0.0,
            30 => 1e-40 * rng.unit(),
            41 if specials && r == 1 => f32::INFINITY,
            42 if specials && r == 0 => f32::NEG_INFINITY,
            43 if specials && r == 2 => f32::NAN,
            44 if specials => [f32::INFINITY, f32::NEG_INFINITY][r % 2],
            _ => rng.unit() * [1.0, 1e-3, 20.0][(i / 64) % 3],
        })
        .collect()
}

/// Where `got` is not the exact result `want` of `xs` (each rank's inputs) within the bound
/// of `encodings` encodings per element (the fp32 additions' own rounding added), or where
/// a non-finite `want` does not come out as itself. `None` when all is well.
fn outside_bound(wire: Wire, encodings: usize, xs: &[Vec<f32>], got: &[f32], want: &[f64]) -> Option<String> {
    let block = wire.block().unwrap_or(1) as usize;
    let m: Vec<f64> =
        (0..got.len()).map(|j| xs.iter().map(|x| (x[j] as f64).abs()).filter(|v| v.is_finite()).sum()).collect();
    let largest = window_max(&m, block - 1);
    for j in 0..got.len() {
        let (g, w) = (got[j] as f64, want[j]);
        if !w.is_finite() {
            if !(w.is_nan() && g.is_nan() || w == g) {
                return Some(format!("element {j}: {g}, the exact path gives {w}"));
            }
            continue;
        }
        let bound = wire_bound(wire, encodings, encodings, m[j], largest[j]);
        // NaN, where a finite value was due, fails too.
        if (g - w).abs().partial_cmp(&bound).is_none_or(|o| o == std::cmp::Ordering::Greater) {
            return Some(format!("element {j}: {g}, exact {w}: error {:e} over the bound {bound:e}", (g - w).abs()));
        }
    }
    None
}

fn exact_sum(xs: &[Vec<f32>], count: usize) -> Vec<f64> {
    (0..count).map(|j| xs.iter().map(|x| x[j] as f64).sum()).collect()
}

fn read(bufs: &[DeviceBuffer<f32>]) -> Vec<Vec<f32>> {
    bufs.iter().map(|b| b.to_vec()).collect()
}

/// Every rank's output the same bits.
fn identical(outs: &[Vec<f32>]) -> Option<String> {
    let bits = |v: &Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    outs.iter().position(|o| bits(o) != bits(&outs[0])).map(|r| format!("rank {r}'s result differs from rank 0's"))
}

#[test]
fn all_reduce_is_within_each_wires_bound_and_bit_identical_at_1_to_8_ranks() {
    let mut failures = Vec::new();
    for n in [1, 2, 3, 5, 8] {
        let w = world(n);
        for &wire in WIRES {
            for &count in COUNTS {
                let xs: Vec<Vec<f32>> = (0..n).map(|r| inputs(r, count, true)).collect();
                let send: Vec<_> = w.alloc_from(&xs);
                let recv: Vec<_> = w.comms.iter().map(|c| c.device().alloc::<f32>(count).unwrap()).collect();
                w.run(|r, c, s| c.wired(wire).all_reduce(&send[r], &recv[r], count, Op::Sum, s));
                let outs = read(&recv);
                let what = format!("{n} ranks, {wire}, {count} elements");
                let problem =
                    outside_bound(wire, n, &xs, &outs[0], &exact_sum(&xs, count)).or_else(|| identical(&outs));
                failures.extend(problem.map(|p| format!("{what}: {p}")));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The tree (each partial sum encoded once per edge, the root's sums once for the way down)
/// and the direct two-shot (each peer's input and each sum encoded once): within the ring's
/// bound and every rank's bits alike, at 1 to 8 ranks (the tree's inner nodes fan out to
/// several children from 3 ranks on).
#[test]
fn all_reduce_on_the_tree_and_direct() {
    let mut failures = Vec::new();
    for (algo, ranks) in [(Algorithm::Tree, &[1, 2, 5, 8][..]), (Algorithm::Direct, &[1, 3, 8][..])] {
        for &n in ranks {
            let w = world_with(n, Config { algo: Some(algo), ..Config::default() });
            for wire in [Wire::Bf16, Wire::Fp8E4M3 { block: 64 }, Wire::Int8 { block: 32 }] {
                for &count in COUNTS {
                    let xs: Vec<Vec<f32>> = (0..n).map(|r| inputs(r, count, true)).collect();
                    // The direct algorithm's buffers: symmetric, every rank's mapped by all.
                    let [send, recv] = [(); 2].map(|_| w.on_all(|_, c| c.alloc_symmetric::<f32>(count).unwrap()));
                    send.iter().zip(&xs).for_each(|(b, x)| b.copy_from_host(x).unwrap());
                    w.run(|r, c, s| c.wired(wire).all_reduce(&send[r], &recv[r], count, Op::Sum, s));
                    let outs = read(&recv);
                    let problem =
                        outside_bound(wire, n, &xs, &outs[0], &exact_sum(&xs, count)).or_else(|| identical(&outs));
                    failures.extend(problem.map(|p| format!("{algo}, {n} ranks, {wire}, {count} elements: {p}")));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// In place, and with avg: still every rank's bits alike, and avg the sum's `1/n`-scaled
/// inputs' within the bound.
#[test]
fn all_reduce_in_place_and_avg() {
    let (n, count, wire) = (4, 1031, Wire::Int8 { block: 64 });
    let w = world(n);
    let xs: Vec<Vec<f32>> = (0..n).map(|r| inputs(r, count, false)).collect();
    let bufs: Vec<_> = w.alloc_from(&xs);
    w.run(|r, c, s| c.wired(wire).all_reduce(&bufs[r], &bufs[r], count, Op::Avg, s));
    let outs = read(&bufs);
    assert_eq!(identical(&outs), None);
    let scaled: Vec<Vec<f32>> = xs.iter().map(|x| x.iter().map(|v| v * (1.0 / n as f32)).collect()).collect();
    assert_eq!(outside_bound(wire, n, &scaled, &outs[0], &exact_sum(&scaled, count)), None);
}

/// At 8 ranks the bf16 wire (fp32 sums, one rounding per hop) errs less than summing in
/// bf16, as PyTorch's bf16_compress_hook does (inputs cast to bf16, then a bf16 AllReduce
/// on the ring, which rounds each hop's sum to bf16 as NCCL's does).
#[test]
fn the_bf16_wire_beats_summing_in_bf16_at_8_ranks() {
    let (n, count) = (8, 4099);
    let w = world_with(n, Config { algo: Some(Algorithm::Ring), proto: Some(Protocol::Simple), ..Config::default() });
    let xs: Vec<Vec<f32>> = (0..n).map(|r| inputs(r, count, false)).collect();
    let want = exact_sum(&xs, count);
    let send: Vec<_> = w.alloc_from(&xs);
    let recv: Vec<_> = w.comms.iter().map(|c| c.device().alloc::<f32>(count).unwrap()).collect();
    w.run(|r, c, s| c.wired(Wire::Bf16).all_reduce(&send[r], &recv[r], count, Op::Sum, s));
    let wired = recv[0].to_vec();
    let cast: Vec<Vec<bf16>> = xs.iter().map(|x| x.iter().map(|&v| bf16::from_f32(v)).collect()).collect();
    let hsend: Vec<_> = w.comms.iter().zip(&cast).map(|(c, x)| c.device().alloc_from(x).unwrap()).collect();
    let hrecv: Vec<_> = w.comms.iter().map(|c| c.device().alloc::<bf16>(count).unwrap()).collect();
    w.run(|r, c, s| c.all_reduce(&hsend[r], &hrecv[r], count, Op::Sum, s));
    let hook = hrecv[0].to_vec();
    let err = |got: &mut dyn Iterator<Item = f64>| got.zip(&want).map(|(g, w)| (g - w).abs()).sum::<f64>();
    let (e_wire, e_hook) = (err(&mut wired.iter().map(|&v| v as f64)), err(&mut hook.iter().map(|v| v.to_f64())));
    assert!(e_wire < e_hook, "total error: bf16 wire {e_wire:e}, summing in bf16 {e_hook:e}");
}

/// ReduceScatter, Reduce (sums: one encoding per hop), AllGather and Broadcast (each value
/// encoded once), with a scaled and an unscaled wire; every rank holding a value holds the
/// same bits.
#[test]
fn the_other_ring_collectives_carry_wires() {
    let mut failures = Vec::new();
    for n in [1, 3, 8] {
        let w = world(n);
        for wire in [Wire::Bf16, Wire::Fp8E4M3 { block: 64 }, Wire::Int8 { block: 32 }] {
            for &count in COUNTS {
                let what = format!("{n} ranks, {wire}, {count} elements");
                let mut fail =
                    |coll: &str, p: Option<String>| failures.extend(p.map(|p| format!("{coll}, {what}: {p}")));
                // ReduceScatter: block r of the sums lands on rank r.
                let xs: Vec<Vec<f32>> = (0..n).map(|r| inputs(r, count * n, true)).collect();
                let send: Vec<_> = w.alloc_from(&xs);
                let recv: Vec<_> = w.comms.iter().map(|c| c.device().alloc::<f32>(count).unwrap()).collect();
                w.run(|r, c, s| c.wired(wire).reduce_scatter(&send[r], &recv[r], count, Op::Sum, s));
                let sums = exact_sum(&xs, count * n);
                for (r, out) in read(&recv).iter().enumerate() {
                    let part: Vec<Vec<f32>> = xs.iter().map(|x| x[r * count..(r + 1) * count].to_vec()).collect();
                    fail("reduce_scatter", outside_bound(wire, n, &part, out, &sums[r * count..(r + 1) * count]));
                }
                // Reduce to the last rank.
                let xs: Vec<Vec<f32>> = (0..n).map(|r| inputs(r, count, true)).collect();
                let send: Vec<_> = w.alloc_from(&xs);
                let recv: Vec<_> = w.comms.iter().map(|c| c.device().alloc::<f32>(count).unwrap()).collect();
                w.run(|r, c, s| c.wired(wire).reduce(&send[r], &recv[r], count, Op::Sum, n - 1, s));
                fail("reduce", outside_bound(wire, n, &xs, &recv[n - 1].to_vec(), &exact_sum(&xs, count)));
                // AllGather: each rank's block encoded once, the same bits everywhere.
                let all: Vec<_> = w.comms.iter().map(|c| c.device().alloc::<f32>(count * n).unwrap()).collect();
                w.run(|r, c, s| c.wired(wire).all_gather(&send[r], &all[r], count, s));
                let outs = read(&all);
                let whole: Vec<f32> = xs.concat();
                let once = |got: &[f32], x: &[f32]| {
                    outside_bound(wire, 1, &[x.to_vec()], got, &x.iter().map(|&v| v as f64).collect::<Vec<_>>())
                };
                fail("all_gather", once(&outs[0], &whole).or_else(|| identical(&outs)));
                // Broadcast from rank 1 (or 0), in place on every rank: the root keeps the
                // decoding too.
                let root = 1 % n;
                let bufs: Vec<_> = w.alloc_from(&xs);
                w.run(|r, c, s| c.wired(wire).broadcast(&bufs[r], &bufs[r], count, root, s));
                let outs = read(&bufs);
                fail("broadcast", once(&outs[0], &xs[root]).or_else(|| identical(&outs)));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// bf16 elements in the int8 wire: the bound of the wire plus the final rounding to bf16.
#[test]
fn bf16_elements_travel_in_int8() {
    let (n, count, wire) = (3, 1031, Wire::Int8 { block: 64 });
    let w = world(n);
    let xs: Vec<Vec<f32>> = (0..n).map(|r| inputs(r, count, true)).collect();
    let cast: Vec<Vec<bf16>> = xs.iter().map(|x| x.iter().map(|&v| bf16::from_f32(v)).collect()).collect();
    let exact: Vec<Vec<f32>> = cast.iter().map(|x| x.iter().map(|v| v.to_f32()).collect()).collect();
    let send: Vec<_> = w.comms.iter().zip(&cast).map(|(c, x)| c.device().alloc_from(x).unwrap()).collect();
    let recv: Vec<_> = w.comms.iter().map(|c| c.device().alloc::<bf16>(count).unwrap()).collect();
    w.run(|r, c, s| c.wired(wire).all_reduce(&send[r], &recv[r], count, Op::Sum, s));
    let outs: Vec<Vec<f32>> = recv.iter().map(|b| b.to_vec().iter().map(|v| v.to_f32()).collect()).collect();
    assert_eq!(identical(&outs), None);
    // The final rounding to bf16 adds 2^-8 of the result: counted as one more encoding.
    let want = exact_sum(&exact, count);
    let (u, c, t) = wire_terms(wire);
    for j in 0..count {
        let (g, w) = (outs[0][j] as f64, want[j]);
        if !w.is_finite() {
            assert!(w.is_nan() && g.is_nan() || w == g, "element {j}: {g}, exact {w}");
            continue;
        }
        let m: f64 = exact.iter().map(|x| (x[j] as f64).abs()).filter(|v| v.is_finite()).sum();
        let a = (j.saturating_sub(63)..(j + 64).min(count))
            .map(|k| exact.iter().map(|x| (x[k] as f64).abs()).filter(|v| v.is_finite()).sum::<f64>())
            .fold(0.0, f64::max);
        let bound = n as f64 * ((u + 2f64.powi(-24)) * m + c * a + t) + 2f64.powi(-8) * (w.abs() + n as f64 * c * a);
        assert!((g - w).abs() <= bound, "element {j}: {g}, exact {w}, bound {bound:e}");
    }
}

/// The communicator's default applies where it fits (f32 sums) and leaves the rest exact
/// (integers); `Wire::Exact` per call overrides it.
#[test]
fn the_communicators_default_applies_where_it_fits() {
    let (n, count) = (3, 61);
    let w = world_with(n, Config { wire: Some(Wire::Bf16), ..Config::default() });
    let xs: Vec<Vec<f32>> = (0..n).map(|r| inputs(r, count, false)).collect();
    let send: Vec<_> = w.alloc_from(&xs);
    let [by_default, asked, exact] =
        [(); 3].map(|_| w.comms.iter().map(|c| c.device().alloc::<f32>(count).unwrap()).collect::<Vec<_>>());
    w.run(|r, c, s| c.all_reduce(&send[r], &by_default[r], count, Op::Sum, s));
    w.run(|r, c, s| c.wired(Wire::Bf16).all_reduce(&send[r], &asked[r], count, Op::Sum, s));
    w.run(|r, c, s| c.wired(Wire::Exact).all_reduce(&send[r], &exact[r], count, Op::Sum, s));
    let bits = |b: &DeviceBuffer<f32>| b.to_vec().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&by_default[0]), bits(&asked[0]), "the default is the bf16 wire");
    assert_ne!(bits(&exact[0]), bits(&asked[0]), "Wire::Exact overrides the default");
    assert_eq!(outside_bound(Wire::Exact, n, &xs, &exact[0].to_vec(), &exact_sum(&xs, count)), None);
    let ints: Vec<_> =
        w.comms.iter().enumerate().map(|(r, c)| c.device().alloc_from(&[r as i32 + 1; 5]).unwrap()).collect();
    w.run(|r, c, s| c.all_reduce(&ints[r], &ints[r], 5, Op::Max, s));
    assert_eq!(ints[0].to_vec(), vec![n as i32; 5], "an integer max stays exact");
}

/// What a wire cannot carry fails at the call, naming why, and queues nothing: the
/// communicator then runs the next call.
#[test]
fn calls_a_wire_cannot_carry_are_refused() {
    static FIRST: jitccl::CustomOp = jitccl::CustomOp {
        name: "first",
        body: "return a;",
        identity: "0.0f",
        commutative: true,
        dtypes: &[jitccl::DataType::F32],
    };
    let w = world_with(2, Config { algo: Some(Algorithm::Tree), proto: Some(Protocol::LL), ..Config::default() });
    let (c, s) = (&w.comms[0], &w.streams[0]);
    let f = c.device().alloc::<f32>(8).unwrap();
    let b = c.device().alloc::<bf16>(8).unwrap();
    let i = c.device().alloc::<i32>(8).unwrap();
    let refused = |r: jitccl::Result<()>, why: &str| match r {
        Err(Error::InvalidArgument(m)) if m.contains(why) => {}
        other => panic!("expected a refusal saying '{why}', got {other:?}"),
    };
    refused(c.wired(Wire::Bf16).all_reduce(&i, &i, 8, Op::Sum, s), "carries f32, f16 or bf16 elements, not i32");
    refused(c.wired(Wire::Bf16).all_reduce(&b, &b, 8, Op::Sum, s), "no narrower than bf16");
    refused(c.wired(Wire::Int8 { block: 64 }).all_reduce(&f, &f, 8, Op::Max, s), "sum or avg only");
    refused(c.wired(Wire::Int8 { block: 64 }).all_reduce(&f, &f, 8, Op::PreMulSum(2.0), s), "sum or avg only");
    refused(c.wired(Wire::Fp16).all_reduce(&f, &f, 8, Op::Custom(&FIRST), s), "sum or avg only");
    s.synchronize().unwrap();
    // Tree and LL forced: the wire still runs, on the tree with Simple.
    let xs: Vec<Vec<f32>> = (0..2).map(|r| inputs(r, 61, false)).collect();
    let bufs: Vec<_> = w.alloc_from(&xs);
    w.run(|r, c, s| c.wired(Wire::Fp16).all_reduce(&bufs[r], &bufs[r], 61, Op::Sum, s));
    assert_eq!(outside_bound(Wire::Fp16, 2, &xs, &bufs[1].to_vec(), &exact_sum(&xs, 61)), None);
}

/// Ranks that reach each other through their transports (init from a store: shared
/// memory, or the network with JITCCL_TRANSPORT=net, which `over_the_network` sets for a
/// run of this test in a child process): int8 AllReduce and fp8 AllGather, within bound and
/// the same bits on every rank.
#[test]
fn over_shared_memory() {
    use jitccl::store::{Server, TcpStore};
    let (n, count) = (3, 1031);
    let server = Server::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr();
    let xs: Vec<Vec<f32>> = (0..n).map(|r| inputs(r, count, true)).collect();
    let (sum_wire, gather_wire) = (Wire::Int8 { block: 64 }, Wire::Fp8E4M3 { block: 32 });
    let outs: Vec<(Vec<f32>, Vec<f32>)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|rank| {
                let x = &xs[rank];
                s.spawn(move || {
                    let store = TcpStore::connect(addr, std::time::Duration::from_secs(30)).unwrap();
                    let cfg = Config {
                        slot_bytes: Some([256, 64, 256]),
                        wire_local: Some(WireLocal::Encode),
                        ..Config::default()
                    };
                    let comm = Comm::init_from_store(&store, n, rank, &cfg).unwrap();
                    assert!(comm.wired(sum_wire).encodes().unwrap());
                    let st = comm.device().stream().unwrap();
                    let send = comm.device().alloc_from(x).unwrap();
                    let (sum, all) =
                        (comm.device().alloc::<f32>(count).unwrap(), comm.device().alloc::<f32>(count * n).unwrap());
                    comm.wired(sum_wire).all_reduce(&send, &sum, count, Op::Sum, &st).unwrap();
                    comm.wired(gather_wire).all_gather(&send, &all, count, &st).unwrap();
                    st.synchronize().unwrap();
                    (sum.to_vec(), all.to_vec())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (sums, alls): (Vec<_>, Vec<_>) = outs.into_iter().unzip();
    assert_eq!(identical(&sums), None);
    assert_eq!(identical(&alls), None);
    assert_eq!(outside_bound(sum_wire, n, &xs, &sums[0], &exact_sum(&xs, count)), None);
    let whole = xs.concat();
    let want = exact_sum(std::slice::from_ref(&whole), count * n);
    assert_eq!(outside_bound(gather_wire, 1, std::slice::from_ref(&whole), &alls[0], &want), None);
}

#[test]
fn over_the_network() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "over_shared_memory", "--test-threads", "1"])
        .env("JITCCL_TRANSPORT", "net")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("1 passed"), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
}

/// Within one host a wired call runs exactly (the exact call's bits, on every rank) and
/// says so (`Wired::encodes`); `Config::wire_local` set to encode runs the wire's kernels.
#[test]
fn within_one_host_wired_calls_run_exactly_unless_asked_to_encode() {
    let (n, count, wire) = (3, 1031, Wire::Int8 { block: 64 });
    let xs: Vec<Vec<f32>> = (0..n).map(|r| inputs(r, count, false)).collect();
    let bits = |b: &DeviceBuffer<f32>| b.to_vec().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for local in [None, Some(WireLocal::Encode)] {
        let w = world_as(n, Config { algo: Some(Algorithm::Ring), wire_local: local, ..Config::default() });
        let send: Vec<_> = w.alloc_from(&xs);
        let [exact, wired] =
            [(); 2].map(|_| w.comms.iter().map(|c| c.device().alloc::<f32>(count).unwrap()).collect::<Vec<_>>());
        w.run(|r, c, s| c.all_reduce(&send[r], &exact[r], count, Op::Sum, s));
        w.run(|r, c, s| c.wired(wire).all_reduce(&send[r], &wired[r], count, Op::Sum, s));
        let encodes = local.is_some();
        assert!(w.comms.iter().all(|c| c.wired(wire).encodes().unwrap() == encodes), "{local:?}");
        let outs: Vec<Vec<f32>> = read(&wired);
        assert_eq!(identical(&outs), None, "{local:?}");
        assert_eq!(bits(&wired[0]) == bits(&exact[0]), !encodes, "{local:?}: exact unless encoding");
        assert_eq!(outside_bound(wire, n, &xs, &outs[0], &exact_sum(&xs, count)), None, "{local:?}");
    }
}

/// `JITCCL_WIRE` gives the communicator's default, and a name no wire has fails init
/// naming the variable (`default_from_the_environment`, run in a child process with each).
#[test]
fn jitccl_wire_sets_the_default() {
    for value in ["bf16", "int8b32", "exact", "int4"] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "default_from_the_environment", "--test-threads", "1"])
            .env("JITCCL_WIRE", value)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && stdout.contains("1 passed"), "{value}: {stdout}");
    }
}

/// The default f32 AllReduce gives the bits of `Comm::wired` with the wire JITCCL_WIRE
/// names (exact where unset); a name that is no wire's fails init, naming the variable.
#[test]
fn default_from_the_environment() {
    let wire = match std::env::var("JITCCL_WIRE").map(|v| v.parse::<Wire>()) {
        Err(_) => Wire::Exact,
        Ok(Ok(w)) => w,
        Ok(Err(why)) => {
            let e = Comm::init_all_on(&[Device::host(0)], &Config::default()).unwrap_err().to_string();
            assert!(e.contains("JITCCL_WIRE") && e.contains(&why.0), "{e}");
            return;
        }
    };
    let (n, count) = (2, 61);
    let w = world(n);
    let xs: Vec<Vec<f32>> = (0..n).map(|r| inputs(r, count, false)).collect();
    let send: Vec<_> = w.alloc_from(&xs);
    let [by_default, asked] =
        [(); 2].map(|_| w.comms.iter().map(|c| c.device().alloc::<f32>(count).unwrap()).collect::<Vec<_>>());
    w.run(|r, c, s| c.all_reduce(&send[r], &by_default[r], count, Op::Sum, s));
    w.run(|r, c, s| c.wired(wire).all_reduce(&send[r], &asked[r], count, Op::Sum, s));
    let bits = |b: &DeviceBuffer<f32>| b.to_vec().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&by_default[0]), bits(&asked[0]), "the default is {wire}");
}

/// Point to point in a wire: a ring of sends, each value encoded once and decoded on
/// arrival (as the sender's own decoding would give); inside a group, refused.
#[test]
fn point_to_point_carries_a_wire() {
    let mut failures = Vec::new();
    for n in [1, 3] {
        let w = world(n);
        for wire in [Wire::Bf16, Wire::Int8 { block: 32 }] {
            for &count in COUNTS {
                let xs: Vec<Vec<f32>> = (0..n).map(|r| inputs(r, count, true)).collect();
                let send: Vec<_> = w.alloc_from(&xs);
                let recv: Vec<_> = w.comms.iter().map(|c| c.device().alloc::<f32>(count).unwrap()).collect();
                w.run(|r, c, s| {
                    c.wired(wire).sendrecv(&send[r], count, (r + 1) % n, &recv[r], count, (r + n - 1) % n, s)
                });
                for (r, out) in read(&recv).iter().enumerate() {
                    let x = &xs[(r + n - 1) % n];
                    let want: Vec<f64> = x.iter().map(|&v| v as f64).collect();
                    let problem = outside_bound(wire, 1, std::slice::from_ref(x), out, &want);
                    failures.extend(problem.map(|p| format!("{n} ranks, {wire}, {count} elements, rank {r}: {p}")));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let w = world(2);
    let buf = w.comms[0].device().alloc::<f32>(8).unwrap();
    jitccl::group_start();
    let e = w.comms[0].wired(Wire::Bf16).send(&buf, 8, 1, &w.streams[0]).unwrap_err();
    assert!(e.to_string().contains("inside a group"), "{e}");
    assert!(jitccl::group_end().is_err(), "the refusal fails the group");
}

/// AlltoAll and AlltoAllv in a wire: each block encoded once by its sender (the own block
/// too) and decoded on arrival, within one encoding's bound; AlltoAllv's uneven blocks,
/// zero ones among them; inside a group, refused.
#[test]
fn all_to_all_carries_a_wire() {
    let mut failures = Vec::new();
    for n in [1, 3, 5] {
        let w = world(n);
        for wire in [Wire::Fp16, Wire::Int8 { block: 32 }] {
            let mut fail = |what: String, p: Option<String>| failures.extend(p.map(|p| format!("{what}: {p}")));
            let once = |x: &[f32], got: &[f32]| {
                outside_bound(wire, 1, &[x.to_vec()], got, &x.iter().map(|&v| v as f64).collect::<Vec<_>>())
            };
            for &count in COUNTS {
                let xs: Vec<Vec<f32>> = (0..n).map(|r| inputs(r, count * n, true)).collect();
                let send: Vec<_> = w.alloc_from(&xs);
                let recv: Vec<_> = w.comms.iter().map(|c| c.device().alloc::<f32>(count * n).unwrap()).collect();
                w.run(|r, c, s| c.wired(wire).all_to_all(&send[r], &recv[r], count, s));
                for (r, out) in read(&recv).iter().enumerate() {
                    for q in 0..n {
                        let (got, x) = (&out[q * count..(q + 1) * count], &xs[q][r * count..(r + 1) * count]);
                        fail(
                            format!("all_to_all, {n} ranks, {wire}, {count} elements, rank {r} from {q}"),
                            once(x, got),
                        );
                    }
                }
            }
            // AlltoAllv: rank r sends (r + q) % 3 * 37 elements to rank q, packed in order.
            let size = |from: usize, to: usize| (from + to) % 3 * 37;
            let displs =
                |sizes: &[usize]| sizes.iter().scan(0, |at, &c| Some(std::mem::replace(at, *at + c))).collect();
            let plan: Vec<(Vec<usize>, Vec<usize>)> =
                (0..n).map(|r| ((0..n).map(|q| size(r, q)).collect(), (0..n).map(|q| size(q, r)).collect())).collect();
            let xs: Vec<Vec<f32>> = (0..n).map(|r| inputs(r, plan[r].0.iter().sum(), true)).collect();
            let send: Vec<_> = w.alloc_from(&xs);
            let recv: Vec<_> =
                w.comms.iter().zip(&plan).map(|(c, p)| c.device().alloc::<f32>(p.1.iter().sum()).unwrap()).collect();
            w.run(|r, c, s| {
                let (sc, rc) = &plan[r];
                let (sd, rd): (Vec<usize>, Vec<usize>) = (displs(sc), displs(rc));
                c.wired(wire).all_to_allv(&send[r], sc, &sd, &recv[r], rc, &rd, s)
            });
            for (r, out) in read(&recv).iter().enumerate() {
                let mut at = 0;
                for (q, x) in xs.iter().enumerate() {
                    let from: usize = (0..r).map(|k| size(q, k)).sum();
                    let len = size(q, r);
                    let what = format!("all_to_allv, {n} ranks, {wire}, rank {r} from {q}");
                    fail(what, once(&x[from..from + len], &out[at..at + len]));
                    at += len;
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let w = world(2);
    let buf = w.comms[0].device().alloc::<f32>(8).unwrap();
    jitccl::group_start();
    let e = w.comms[0].wired(Wire::Bf16).all_to_all(&buf, &buf, 4, &w.streams[0]).unwrap_err();
    assert!(e.to_string().contains("inside a group"), "{e}");
    assert!(jitccl::group_end().is_err(), "the refusal fails the group");
}

/// Ranks that ask for different wires fail the call, naming the mismatch, instead of
/// decoding each other's steps wrongly.
#[test]
fn ranks_with_different_wires_fail_the_call() {
    let (n, count) = (2, 61);
    let w = world(n);
    let bufs: Vec<_> = w.comms.iter().map(|c| c.device().alloc::<f32>(count).unwrap()).collect();
    let wires = [Wire::Bf16, Wire::Int8 { block: 64 }];
    std::thread::scope(|s| {
        for (r, (c, st)) in w.comms.iter().zip(&w.streams).enumerate() {
            let b = &bufs[r];
            s.spawn(move || {
                c.wired(wires[r]).all_reduce(b, b, count, Op::Sum, st).unwrap();
                let e = st.synchronize().unwrap_err().to_string();
                assert!(e.contains("called it differently") && e.contains("wire format"), "rank {r}: {e}");
            });
        }
    });
}
