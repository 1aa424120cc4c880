//! Wire formats of the user's (`#[jitccl::wire_codec]`, `Wire::Custom`) on the host target,
//! against a reference that applies the codec's own Rust functions: every collective the
//! built-in wires run in, at 1 to 4 ranks, zero and odd counts, ±Inf and NaN as the codecs
//! define them, every rank's bits alike; and two codecs of one name but other code never
//! sharing a kernel.
//!
//! The references are exact where the order of the kernels' operations cannot matter: with
//! one rank's input non-zero per element, every partial sum is that input or a decoding of
//! it, and these codecs decode an encoding to a value that encodes to itself; the scaled
//! codec's inputs keep every block's scale 1 (magnitudes in [1, 2)). On the ring, with every
//! rank's input non-zero, the result is the codec's sum in some rotation of the ring.
//! FIFO slots are tiny (64 f32 a step), so that the counts take many steps. The example's
//! codec (examples/log8_wire.rs) and these compile with NVRTC for the CUDA target.

use jitccl::codegen::compile::nvrtc::nvrtc;
use jitccl::codegen::{BuiltinOp, CudaArch, Generator, KernelSpec, RedOp, Target};
use jitccl::{Algorithm, Collective, Config, DataType, Op, Protocol, Wire, WireLocal};

#[allow(dead_code)] // this binary uses part of it
#[path = "common/world.rs"]
mod world;
use world::{hosts, World};

#[allow(dead_code, reason = "only its codec is used here; tests/examples.rs runs it")]
#[path = "../examples/log8_wire.rs"]
mod log8_wire;

/// Sixteenths in [-126/16, 126/16], saturating (±Inf too); NaN is 0x80.
#[jitccl::wire_codec]
mod sixteenths {
    pub fn encode(value: f32) -> u8 {
        if value.to_bits() & 0x7fff_ffff > 0x7f80_0000 {
            0x80
        } else {
            let half = if value < 0.0 { -0.5 } else { 0.5 };
            ((value * 16.0 + half) as i32).clamp(-126, 126) as u8
        }
    }

    pub fn decode(code: u8) -> f32 {
        if code == 0x80 {
            f32::from_bits(0x7fc0_0000)
        } else {
            (code as i8) as f32 / 16.0
        }
    }
}

/// 64ths of a power-of-two scale per block, ±Inf as ±127, NaN as 0x80.
#[jitccl::wire_codec(block = 32)]
mod pow2 {
    pub fn scale(amax: f32) -> f32 {
        f32::from_bits(amax.to_bits() & 0x7f80_0000)
    }

    pub fn encode(value: f32, scale: f32) -> u8 {
        let mag = value.to_bits() & 0x7fff_ffff;
        if mag > 0x7f80_0000 {
            0x80
        } else if mag == 0x7f80_0000 {
            if value > 0.0 {
                127
            } else {
                129
            }
        } else if scale == 0.0 {
            0
        } else {
            let half = if value < 0.0 { -0.5 } else { 0.5 };
            ((value / scale * 64.0 + half) as i32).clamp(-126, 126) as u8
        }
    }

    pub fn decode(code: u8, scale: f32) -> f32 {
        let q = code as i8;
        if code == 0x80 {
            f32::from_bits(0x7fc0_0000)
        } else if q == 127 {
            f32::from_bits(0x7f80_0000)
        } else if q == -127 {
            f32::from_bits(0xff80_0000)
        } else {
            q as f32 / 64.0 * scale
        }
    }
}

/// Two codecs named alike: eighths and quarters.
#[jitccl::wire_codec(name = "twin")]
mod eighths {
    pub fn encode(value: f32) -> u8 {
        ((value * 8.0) as i32).clamp(-127, 127) as u8
    }
    pub fn decode(code: u8) -> f32 {
        (code as i8) as f32 / 8.0
    }
}

#[jitccl::wire_codec(name = "twin")]
mod quarters {
    pub fn encode(value: f32) -> u8 {
        ((value * 4.0) as i32).clamp(-127, 127) as u8
    }
    pub fn decode(code: u8) -> f32 {
        (code as i8) as f32 / 4.0
    }
}

/// One encoding and decoding by the codec's Rust functions, at scale 1.
fn round_trip(wire: Wire, v: f32) -> f32 {
    match wire {
        Wire::Custom(c) if std::ptr::eq(c, &SIXTEENTHS) => sixteenths::decode(sixteenths::encode(v)),
        Wire::Custom(c) if std::ptr::eq(c, &POW2) => pow2::decode(pow2::encode(v, 1.0), 1.0),
        Wire::Custom(c) if std::ptr::eq(c, &EIGHTHS) => eighths::decode(eighths::encode(v)),
        Wire::Custom(c) if std::ptr::eq(c, &QUARTERS) => quarters::decode(quarters::encode(v)),
        w => panic!("no reference for {w}"),
    }
}

const COUNTS: &[usize] = &[0, 1, 61, 389];
const WIRES: [Wire; 2] = [Wire::Custom(&SIXTEENTHS), Wire::Custom(&POW2)];

fn world(n: usize, algo: Option<Algorithm>) -> World {
    let cfg = Config {
        algo,
        nchannels: Some(2),
        slot_bytes: Some([256, 64, 256]),
        wire_local: Some(WireLocal::Encode),
        ..Config::default()
    };
    world::world_with(&hosts(n), &cfg)
}

/// Element `j` of the world's `n` ranks' inputs: non-zero on rank `j % n` only, with a
/// magnitude in [1, 2), ±Inf and NaN at fixed places.
fn sparse(r: usize, n: usize, count: usize) -> Vec<f32> {
    (0..count)
        .map(|j| match (j % n == r, j % 37) {
            (false, _) => 0.0,
            (true, 7) => f32::INFINITY,
            (true, 8) => f32::NEG_INFINITY,
            (true, 9) => f32::NAN,
            (true, _) => (1.0 + (j * 7919 % 1000) as f32 / 1000.0) * if j.is_multiple_of(3) { -1.0 } else { 1.0 },
        })
        .collect()
}

/// Rank `r`'s inputs, all non-zero (magnitudes in [1, 2)) but the specials.
fn dense(r: usize, count: usize) -> Vec<f32> {
    (0..count)
        .map(|j| match j % 37 {
            7 => f32::INFINITY,
            8 => f32::NEG_INFINITY,
            9 => f32::NAN,
            _ => {
                (1.0 + ((j + 31 * r) * 7919 % 1000) as f32 / 1000.0)
                    * if (j + r).is_multiple_of(3) { -1.0 } else { 1.0 }
            }
        })
        .collect()
}

/// Where `got` and `want` differ (NaN matching NaN), or `None`.
fn differs(got: &[f32], want: &[f32]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{} elements, {} due", got.len(), want.len()));
    }
    got.iter()
        .zip(want)
        .position(|(g, w)| !(g.to_bits() == w.to_bits() || g.is_nan() && w.is_nan()))
        .map(|j| format!("element {j}: {}, the reference gives {}", got[j], want[j]))
}

fn sum(xs: &[Vec<f32>], j: usize) -> f32 {
    xs.iter().map(|x| x[j]).sum()
}

/// AllReduce on the ring, the tree and the direct algorithm: each element the codec's
/// round trip of its one input (exactly it, at one rank), on every rank.
#[test]
fn all_reduce_gives_the_codecs_round_trip_on_every_rank() {
    let mut failures = Vec::new();
    for (algo, sizes) in
        [(Algorithm::Ring, &[1, 2, 3, 4][..]), (Algorithm::Tree, &[3, 4]), (Algorithm::Direct, &[2, 4])]
    {
        for &n in sizes {
            let w = world(n, Some(algo));
            for wire in WIRES {
                for &count in COUNTS {
                    let xs: Vec<Vec<f32>> = (0..n).map(|r| sparse(r, n, count)).collect();
                    let want: Vec<f32> =
                        (0..count).map(|j| if n == 1 { xs[0][j] } else { round_trip(wire, sum(&xs, j)) }).collect();
                    let (send, recv) = if algo == Algorithm::Direct {
                        // Symmetric buffers, which every rank allocates at once.
                        let sym = || w.on_all(|_, c| c.alloc_symmetric::<f32>(count).unwrap());
                        let (send, recv) = (sym(), sym());
                        send.iter().zip(&xs).for_each(|(b, x)| b.copy_from_host(x).unwrap());
                        (send, recv)
                    } else {
                        (w.alloc_from(&xs), w.alloc::<f32>(count, &mut Vec::new()))
                    };
                    w.run(|r, c, s| c.wired(wire).all_reduce(&send[r], &recv[r], count, Op::Sum, s));
                    for (r, b) in recv.iter().enumerate() {
                        if let Some(p) = differs(&b.to_vec(), &want) {
                            failures.push(format!("{algo}, {n} ranks, {wire}, {count} elements, rank {r}: {p}"));
                        }
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// With every rank's input non-zero, the ring's result is the codec's sum in the ring's
/// order from the rank that starts the element's chunk, in one direction or the other:
/// each hop decodes, adds in fp32 and encodes; the last sum is encoded once for all ranks.
#[test]
fn the_ring_sums_in_the_codecs_arithmetic() {
    let wire = Wire::Custom(&SIXTEENTHS);
    let enc = |v: f32| sixteenths::decode(sixteenths::encode(v));
    let mut failures = Vec::new();
    for n in [2, 3, 4] {
        let w = world(n, Some(Algorithm::Ring));
        let count = 389;
        let xs: Vec<Vec<f32>> =
            (0..n).map(|r| (0..count).map(|j| ((j * 31 + r * 17) % 97) as f32 / 41.0 - 1.1).collect()).collect();
        let (send, recv) = (w.alloc_from(&xs), w.alloc::<f32>(count, &mut Vec::new()));
        w.run(|r, c, s| c.wired(wire).all_reduce(&send[r], &recv[r], count, Op::Sum, s));
        let outs: Vec<Vec<f32>> = recv.iter().map(|b| b.to_vec()).collect();
        for j in 0..count {
            let in_order = |start: usize, step: usize| {
                let acc = (1..n).fold(xs[start][j], |acc, i| enc(acc) + xs[(start + i * step) % n][j]);
                enc(acc)
            };
            let candidates: Vec<f32> = (0..n).flat_map(|s| [in_order(s, 1), in_order(s, n - 1)]).collect();
            if !candidates.contains(&outs[0][j]) {
                failures.push(format!("{n} ranks, element {j}: {}, the ring's orders give {candidates:?}", outs[0][j]));
            }
            if let Some(r) = outs.iter().position(|o| o[j].to_bits() != outs[0][j].to_bits()) {
                failures.push(format!("{n} ranks, element {j}: rank {r} differs from rank 0"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// ReduceScatter (the owner's own input added to the decoded partial sum, unencoded),
/// AllGather and Broadcast (each value encoded once, the root and the owner keeping the
/// decoding too; one rank sends nothing), AlltoAll and Send/Recv (each block encoded once by
/// its sender, the own block and a single rank's too).
#[test]
fn the_other_collectives_carry_the_codec() {
    let mut failures = Vec::new();
    for n in [1, 2, 3, 4] {
        let w = world(n, None);
        for wire in WIRES {
            let rt = |v: f32| if n == 1 { v } else { round_trip(wire, v) };
            for &count in COUNTS {
                let what = format!("{n} ranks, {wire}, {count} elements");
                let mut check = |coll: &str, r: usize, got: Vec<f32>, want: &[f32]| {
                    failures.extend(differs(&got, want).map(|p| format!("{coll}, {what}, rank {r}: {p}")));
                };
                // ReduceScatter: block r of the sums lands on rank r.
                let xs: Vec<Vec<f32>> = (0..n).map(|r| sparse(r, n, count * n)).collect();
                let (send, recv) = (w.alloc_from(&xs), w.alloc::<f32>(count, &mut Vec::new()));
                w.run(|r, c, s| c.wired(wire).reduce_scatter(&send[r], &recv[r], count, Op::Sum, s));
                for (r, b) in recv.iter().enumerate() {
                    let want: Vec<f32> = (r * count..(r + 1) * count)
                        .map(|j| if xs[r][j] != 0.0 { xs[r][j] } else { rt(sum(&xs, j)) })
                        .collect();
                    check("reduce_scatter", r, b.to_vec(), &want);
                }
                // AllGather.
                let xs: Vec<Vec<f32>> = (0..n).map(|r| dense(r, count)).collect();
                let (send, all) = (w.alloc_from(&xs), w.alloc::<f32>(count * n, &mut Vec::new()));
                w.run(|r, c, s| c.wired(wire).all_gather(&send[r], &all[r], count, s));
                let want: Vec<f32> = xs.concat().into_iter().map(rt).collect();
                for (r, b) in all.iter().enumerate() {
                    check("all_gather", r, b.to_vec(), &want);
                }
                // Broadcast from the last rank, in place.
                let root = n - 1;
                let bufs = w.alloc_from(&xs);
                w.run(|r, c, s| c.wired(wire).broadcast(&bufs[r], &bufs[r], count, root, s));
                let want: Vec<f32> = xs[root].iter().map(|&v| rt(v)).collect();
                for (r, b) in bufs.iter().enumerate() {
                    check("broadcast", r, b.to_vec(), &want);
                }
                // AlltoAll: block q of rank r's input to rank q, the own block encoded too.
                let xs: Vec<Vec<f32>> = (0..n).map(|r| dense(r, count * n)).collect();
                let (send, recv) = (w.alloc_from(&xs), w.alloc::<f32>(count * n, &mut Vec::new()));
                w.run(|r, c, s| c.wired(wire).all_to_all(&send[r], &recv[r], count, s));
                for (q, b) in recv.iter().enumerate() {
                    let want: Vec<f32> = xs
                        .iter()
                        .flat_map(|x| x[q * count..(q + 1) * count].iter().map(|&v| round_trip(wire, v)))
                        .collect();
                    check("all_to_all", q, b.to_vec(), &want);
                }
                // Send/Recv around the ring.
                let xs: Vec<Vec<f32>> = (0..n).map(|r| dense(r, count)).collect();
                let (send, recv) = (w.alloc_from(&xs), w.alloc::<f32>(count, &mut Vec::new()));
                w.run(|r, c, s| {
                    c.wired(wire).sendrecv(&send[r], count, (r + 1) % n, &recv[r], count, (r + n - 1) % n, s)
                });
                for (r, b) in recv.iter().enumerate() {
                    let want: Vec<f32> = xs[(r + n - 1) % n].iter().map(|&v| round_trip(wire, v)).collect();
                    check("send/recv", r, b.to_vec(), &want);
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Two codecs named alike but of other code are two kernels: each call gives its own
/// codec's results, in either order, on one communicator.
#[test]
fn codecs_of_one_name_but_other_code_do_not_share_a_kernel() {
    let (n, count) = (2, 61);
    let w = world(n, Some(Algorithm::Ring));
    let xs: Vec<Vec<f32>> = (0..n).map(|r| sparse(r, n, count)).collect();
    let send = w.alloc_from(&xs);
    assert_eq!(EIGHTHS.name, QUARTERS.name);
    for wire in [Wire::Custom(&EIGHTHS), Wire::Custom(&QUARTERS), Wire::Custom(&EIGHTHS)] {
        let recv = w.alloc::<f32>(count, &mut Vec::new());
        w.run(|r, c, s| c.wired(wire).all_reduce(&send[r], &recv[r], count, Op::Sum, s));
        let want: Vec<f32> = (0..count).map(|j| round_trip(wire, sum(&xs, j))).collect();
        assert_eq!(differs(&recv[0].to_vec(), &want), None, "{wire:?}");
    }
}

/// Every kernel the codecs run in (each collective's wired algorithms; AllReduce over bf16
/// too) assembles to CUBIN for sm_90 and, the codecs' code being plain C, sm_80. Needs
/// NVRTC (scripts/setup-nvrtc.sh), not a GPU; skipped without it unless
/// JITCCL_REQUIRE_NVRTC=1.
#[test]
fn codec_kernels_compile_with_nvrtc() {
    if let Err(e) = nvrtc() {
        assert!(std::env::var("JITCCL_REQUIRE_NVRTC").as_deref() != Ok("1"), "JITCCL_REQUIRE_NVRTC=1 but {e}");
        eprintln!("skipping the NVRTC check: {e}");
        return;
    }
    let mut specs = Vec::new();
    for &coll in Collective::ALL {
        for &algo in Wire::algorithms(coll) {
            let op = coll.reduces().then_some(RedOp::Builtin(BuiltinOp::Sum));
            let wire = Wire::Custom(&log8_wire::LOG8);
            let spec = KernelSpec { coll, algo, proto: Protocol::Simple, dtype: DataType::F32, op, ranks: None, wire };
            // Collectives that run as rounds of point to point have no kernel of their own.
            if spec.validate().is_ok() {
                specs.push(spec);
            }
        }
    }
    let bf16 = KernelSpec::new(
        Collective::AllReduce,
        Algorithm::Ring,
        Protocol::Simple,
        DataType::BF16,
        Some(RedOp::Builtin(BuiltinOp::Sum)),
    )
    .unwrap();
    for wire in [Wire::Custom(&log8_wire::LOG8), Wire::Custom(&SIXTEENTHS), Wire::Custom(&POW2)] {
        specs.push(bf16.with_wire(wire).unwrap());
    }
    let names: Vec<String> = specs.iter().map(|s| s.to_string()).collect();
    assert!(names.len() >= 10, "{names:?}");
    let mut failed = Vec::new();
    for spec in &specs {
        for arch in [CudaArch(90), CudaArch(80)] {
            if let Err(e) = Generator::global().check(spec, Target::cubin(arch)) {
                failed.push(format!("{spec} for {arch}: {e}"));
            }
        }
    }
    assert!(failed.is_empty(), "{} failed:\n{}", failed.len(), failed.join("\n"));
    eprintln!("{} codec kernels compiled with NVRTC for sm_90 and sm_80", specs.len());
}
