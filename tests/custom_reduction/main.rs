//! Custom reductions made by `#[jitccl::reduction]`: run through all_reduce, reduce and
//! reduce_scatter on the host target with several ranks and compared with the Rust
//! function itself; the C translation checked bit for bit against Rust on random inputs
//! (NaN, infinities and huge values included); non-commutative ops in ring order and
//! refused by the tree algorithm; a changed body compiling to another kernel; and every
//! op's kernels compiled by NVRTC for sm_90.

use std::time::Duration;

use jitccl::codegen::compile::nvrtc::nvrtc;
use jitccl::codegen::{CudaArch, Generator, KernelSpec, Provenance, RedOp, Target};
use jitccl::reference::RefElement;
use jitccl::{Algorithm, Collective, Comm, Config, CustomOp, DataType, Element, Error, Op, Protocol, Stream};

// ---- the ops under test ----

/// The example, as written there.
#[jitccl::reduction(identity = 0.0)]
fn absmax(a: f32, b: f32) -> f32 {
    let x = a.abs();
    let y = b.abs();
    if x > y {
        x
    } else {
        y
    }
}

/// The same, generic.
#[jitccl::reduction(identity = 0.0, types(f32, f64, f16, bf16))]
fn absmax_any<T>(a: T, b: T) -> T {
    let x = a.abs();
    let y = b.abs();
    if x > y {
        x
    } else {
        y
    }
}

/// A sum clamped to [0, 20]: associative for non-negative inputs, so every algorithm gives
/// the rank-order result.
#[jitccl::reduction(identity = 0, types(i8, u8, i32, u64, f32, f64, f16, bf16))]
fn clamped_sum<T>(a: T, b: T) -> T {
    (a + b).clamp(0 as T, 20 as T)
}

/// Appends `b`'s digit to `a`: the result spells the order the ranks were combined in.
#[jitccl::reduction(identity = 0, commutative = false, types(i32, f64))]
fn digits<T>(a: T, b: T) -> T {
    a * (10 as T) + b
}

/// Float features, checked bit for bit against Rust on random inputs.
#[jitccl::reduction(identity = 0.0, commutative = false, types(f32, f64, f16, bf16, F8E4M3, F8E5M2))]
fn float_mix<T>(a: T, b: T) -> T {
    let p = a.mul_add(b, 0.5 as T);
    let q = (a - b).abs().sqrt();
    let m = a.max(b).min(q);
    let small = -a < 1e-3 as T && !(b >= 2.0 as T) || a == b;
    let r = if p > m && small {
        let c = p.clamp(-1000.0 as T, 1000.0 as T);
        c * c - (q / (b + 0.25 as T))
    } else if a != a {
        b
    } else {
        m / (b - 3.0 as T)
    };
    // float -> int saturates (NaN gives 0), int -> float rounds, f64 <-> f32.
    let i = (a * (1e6 as T)) as i32;
    let u = b as u8;
    let w = (r as f64 * 1e300) as i64;
    let f = (i as f32 + u as f32) as f64 + (w as f64) / 1e18;
    if r > 1e30 as T {
        f as T
    } else {
        r + (f as f32) as T
    }
}

/// Integer features, checked against Rust on random inputs (computed where Rust cannot
/// overflow: the reference runs with overflow checks).
#[jitccl::reduction(identity = 0, commutative = false, types(i8, u8, i32, u32, i64, u64))]
fn int_mix<T>(a: T, b: T) -> T {
    let x = a as u8 as i64;
    let y = b as i8 as i64;
    let d = if y != 0 { x * 1000 / y } else { x % 7 };
    let m = (x - y).abs().min(d.max(-50)).clamp(-100, 100);
    let bits = (a ^ b) & !(a | (3 as T));
    let sat = ((x - y) as f64 * 1e17) as i32;
    let neg = (-(y as f32) * 3.5) as u32;
    let big = (a as u64 as f32) as u64;
    let v = m + (sat / 1000000) as i64 + neg as i64 + (big % 1000) as i64 - (y % 3) + (x / 5);
    if v > 50 || (x == 0 && y < 0) {
        (v as T) ^ bits
    } else {
        a.max(b).min(bits) ^ (v as T)
    }
}

/// Rust panics on these; the kernels document what they do instead.
#[jitccl::reduction(identity = 0, commutative = false)]
fn wrapping(a: i32, b: i32) -> i32 {
    let s = a + b;
    s / b + a % b
}

/// The same name, two bodies: two kernels.
#[allow(unused_variables)]
#[jitccl::reduction(identity = 0, commutative = false, name = "pick")]
fn pick_first(a: i32, b: i32) -> i32 {
    a
}

#[allow(unused_variables)]
#[jitccl::reduction(identity = 0, commutative = false, name = "pick")]
fn pick_second(a: i32, b: i32) -> i32 {
    b
}

/// Ops whose functions are not called here: the op is their use, so no warning (denied
/// here) says the function is never used.
#[deny(dead_code)]
mod only_the_ops {
    #[jitccl::reduction(identity = 0.0)]
    fn absmin(a: f32, b: f32) -> f32 {
        a.abs().min(b.abs())
    }

    #[jitccl::reduction(identity = 0, types(i32, u8, f16))]
    fn bigger<T>(a: T, b: T) -> T {
        a.max(b)
    }

    pub(crate) fn names() -> [&'static str; 2] {
        [ABSMIN.name, BIGGER.name]
    }
}

#[test]
fn an_op_is_a_use_of_its_function() {
    assert_eq!(only_the_ops::names(), ["absmin", "bigger"]);
}

// ---- harness ----

struct World {
    comms: Vec<Comm>,
    streams: Vec<Stream>,
}

fn world(nranks: usize, algo: Option<Algorithm>, proto: Option<Protocol>) -> World {
    let cfg = Config {
        nchannels: Some(1),
        algo,
        proto,
        timeout: Some(Duration::from_secs(60)),
        // Tiny slots: the counts below take many FIFO steps.
        slot_bytes: Some([256, 64, 256]),
        ..Config::default()
    };
    let comms = Comm::init_all(nranks, &cfg).expect("init_all");
    let streams = comms.iter().map(|c| c.device().stream().expect("stream")).collect();
    World { comms, streams }
}

/// Every rank's output of `coll` with `op` on inputs `x(rank, i)`; for reduce, only the
/// root's (the others are empty).
fn run<T: Element>(
    w: &World, coll: Collective, op: Op, count: usize, root: usize, x: &dyn Fn(usize, usize) -> T,
) -> Result<Vec<Vec<T>>, Error> {
    let n = w.comms.len();
    let mut outs = Vec::new();
    for (r, (c, s)) in w.comms.iter().zip(&w.streams).enumerate() {
        let dev = c.device();
        let len = if coll == Collective::ReduceScatter { count * n } else { count };
        let send = dev.alloc_from(&(0..len).map(|i| x(r, i)).collect::<Vec<T>>())?;
        let recv = dev.alloc::<T>(count)?;
        match coll {
            Collective::AllReduce => c.all_reduce(&send, &recv, count, op, s)?,
            Collective::Reduce => c.reduce(&send, &recv, count, op, root, s)?,
            Collective::ReduceScatter => c.reduce_scatter(&send, &recv, count, op, s)?,
            other => panic!("{other} does not reduce"),
        }
        outs.push((r, recv));
    }
    for s in &w.streams {
        s.synchronize()?;
    }
    Ok(outs
        .into_iter()
        .map(|(r, b)| if coll == Collective::Reduce && r != root { Vec::new() } else { b.to_vec() })
        .collect())
}

/// `f` folded over ranks in `order`: `f(f(x[o0], x[o1]), x[o2])...`.
fn fold<T: Copy>(f: fn(T, T) -> T, order: impl IntoIterator<Item = usize>, x: impl Fn(usize) -> T) -> T {
    let mut it = order.into_iter();
    let first = x(it.next().expect("a rank"));
    it.fold(first, |acc, r| f(acc, x(r)))
}

/// Checks all_reduce, reduce and reduce_scatter of an op whose result on the inputs does
/// not depend on the combination order, against `f` folded in rank order.
fn check_all<T: RefElement>(
    w: &World, colls: &[Collective], op: &'static CustomOp, f: fn(T, T) -> T, x: &dyn Fn(usize, usize) -> T,
) {
    let n = w.comms.len();
    for &coll in colls {
        for count in [1, 37, 1000] {
            let root = count % n;
            let outs =
                run(w, coll, Op::custom(op), count, root, x).unwrap_or_else(|e| panic!("{coll} {}: {e}", op.name));
            for (r, got) in outs.iter().enumerate() {
                if coll == Collective::Reduce && r != root {
                    continue;
                }
                let base = if coll == Collective::ReduceScatter { r * count } else { 0 };
                let want: Vec<T> = (0..count).map(|i| fold(f, 0..n, |q| x(q, base + i))).collect();
                assert_eq!(got, &want, "{coll} {} on {} ranks, count {count}, rank {r}", op.name, T::DTYPE);
            }
        }
    }
}

/// Small signed values, exact in every float type.
fn signed<T: RefElement>(r: usize, i: usize) -> T {
    T::from_f64(((i * 7 + r * 13 + 3) % 11) as f64 - 5.0)
}

/// Small non-negative values.
fn unsigned<T: RefElement>(r: usize, i: usize) -> T {
    T::from_f64(((i * 7 + r * 13 + 3) % 6) as f64)
}

const ALL: &[Collective] = &[Collective::AllReduce, Collective::Reduce, Collective::ReduceScatter];

mod collectives;
mod kernels;
mod translation;
