//! Custom reductions made by `#[jitccl::reduction]`: run through all_reduce, reduce and
//! reduce_scatter on the host target with several ranks and compared with the Rust
//! function itself; the C translation checked bit for bit against Rust on random inputs
//! (NaN, infinities and huge values included); non-commutative ops in ring order and
//! refused by the tree algorithm; a changed body compiling to another kernel; and every
//! op's kernels compiled by NVRTC for sm_90.

use std::time::Duration;

use jitccl::codegen::compile::nvrtc::{nvrtc, CudaOutput};
use jitccl::codegen::{check_cuda, CudaArch, Generator, KernelSpec, Provenance, RedOp};
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

// ---- collectives against the Rust reference ----

#[test]
fn absmax_through_every_reducing_collective() {
    use half::{bf16, f16};
    for (proto, n) in [(Protocol::LL, 3), (Protocol::Simple, 4), (Protocol::LL128, 5)] {
        let w = world(n, Some(Algorithm::Ring), Some(proto));
        check_all::<f32>(&w, ALL, &ABSMAX, absmax, &signed);
    }
    let w = world(4, Some(Algorithm::Ring), Some(Protocol::LL));
    check_all::<f64>(&w, &[Collective::AllReduce], &ABSMAX_ANY, absmax_any, &signed);
    check_all::<f16>(&w, ALL, &ABSMAX_ANY, absmax_any, &signed);
    check_all::<bf16>(&w, &[Collective::ReduceScatter], &ABSMAX_ANY, absmax_any, &signed);
    let tree = world(5, Some(Algorithm::Tree), Some(Protocol::Simple));
    check_all::<f32>(&tree, &[Collective::AllReduce], &ABSMAX, absmax, &signed);
}

#[test]
fn clamped_sum_saturates_in_every_type() {
    use half::{bf16, f16};
    // Five ranks of values up to 5: partial sums pass 20.
    let w = world(5, None, Some(Protocol::LL));
    let tree = world(5, Some(Algorithm::Tree), Some(Protocol::LL128));
    check_all::<i8>(&w, ALL, &CLAMPED_SUM, clamped_sum, &unsigned);
    check_all::<u8>(&w, &[Collective::ReduceScatter], &CLAMPED_SUM, clamped_sum, &unsigned);
    check_all::<i32>(&tree, &[Collective::AllReduce], &CLAMPED_SUM, clamped_sum, &unsigned);
    check_all::<u64>(&w, &[Collective::Reduce], &CLAMPED_SUM, clamped_sum, &unsigned);
    check_all::<f32>(&tree, &[Collective::AllReduce], &CLAMPED_SUM, clamped_sum, &unsigned);
    check_all::<f64>(&w, &[Collective::ReduceScatter], &CLAMPED_SUM, clamped_sum, &unsigned);
    check_all::<f16>(&w, &[Collective::AllReduce], &CLAMPED_SUM, clamped_sum, &unsigned);
    check_all::<bf16>(&w, &[Collective::Reduce], &CLAMPED_SUM, clamped_sum, &unsigned);
    assert_eq!(clamped_sum(15u8, 9), 20);
    let got = run(&w, Collective::AllReduce, Op::custom(&CLAMPED_SUM), 1, 0, &|_, _| 5i32).unwrap();
    assert!(got.iter().all(|v| v == &[20]), "5 ranks x 5, clamped: {got:?}");
}

// ---- non-commutative ops: ring order ----

/// Rank r's digit for element i (1..=9).
fn digit<T: RefElement>(r: usize, i: usize) -> T {
    T::from_f64(((r + 2 * i) % 9 + 1) as f64)
}

fn check_ring_order<T: RefElement>(w: &World, f: fn(T, T) -> T) {
    let n = w.comms.len();
    let op = Op::custom(&DIGITS);
    // Reduce: a chain that starts after the root and ends at it.
    for root in [0, n - 1] {
        let count = 45;
        let got = run(w, Collective::Reduce, op, count, root, &digit::<T>).unwrap();
        let want: Vec<T> = (0..count).map(|i| fold(f, (1..=n).map(|k| (root + k) % n), |q| digit(q, i))).collect();
        assert_eq!(got[root], want, "reduce to root {root} on {n} ranks ({})", T::DTYPE);
    }
    // ReduceScatter: block q starts at rank q + 1 and ends at rank q.
    let count = 23;
    let got = run(w, Collective::ReduceScatter, op, count, 0, &digit::<T>).unwrap();
    for (q, block) in got.iter().enumerate() {
        let want: Vec<T> =
            (0..count).map(|i| fold(f, (1..=n).map(|k| (q + k) % n), |r| digit(r, q * count + i))).collect();
        assert_eq!(block, &want, "reduce_scatter block {q} on {n} ranks ({})", T::DTYPE);
    }
    // AllReduce: chunk c of a step is combined starting at rank c; with one element per
    // rank, element i starts at rank i. Larger counts: some rotation of the rank order,
    // the same on every rank.
    let got = run(w, Collective::AllReduce, op, n, 0, &digit::<T>).unwrap();
    let want: Vec<T> = (0..n).map(|i| fold(f, (0..n).map(|k| (i + k) % n), |r| digit(r, i))).collect();
    assert!(got.iter().all(|g| g == &want), "all_reduce of {n} elements: {got:?}, want {want:?}");
    let count = 200;
    let got = run(w, Collective::AllReduce, op, count, 0, &digit::<T>).unwrap();
    assert!(got.iter().all(|g| g == &got[0]), "ranks disagree");
    for (i, v) in got[0].iter().enumerate() {
        let ok = (0..n).any(|s| *v == fold(f, (0..n).map(|k| (s + k) % n), |r| digit(r, i)));
        assert!(ok, "all_reduce element {i} = {v:?} is no ring-order fold");
    }
}

#[test]
fn non_commutative_ops_combine_in_ring_order() {
    for (proto, n) in [(Protocol::Simple, 4), (Protocol::LL, 3), (Protocol::LL128, 5)] {
        let w = world(n, Some(Algorithm::Ring), Some(proto));
        check_ring_order::<i32>(&w, digits);
        if proto == Protocol::Simple {
            check_ring_order::<f64>(&w, digits);
        }
    }
    // A worked example: ranks 0..4 hold 1, 2, 3, 4; reduce to rank 0 combines 2, 3, 4, 1.
    let w = world(4, Some(Algorithm::Ring), None);
    let got = run(&w, Collective::Reduce, Op::custom(&DIGITS), 1, 0, &|r, _| r as i32 + 1).unwrap();
    assert_eq!(got[0], vec![2341]);
}

#[test]
fn the_tuner_gives_non_commutative_ops_the_ring() {
    // 4 ranks and 16 bytes: a commutative op would get the one-shot algorithm here.
    let w = world(4, None, None);
    let got = run(&w, Collective::AllReduce, Op::custom(&DIGITS), 4, 0, &digit::<i32>).unwrap();
    let want: Vec<i32> = (0..4).map(|i| fold(digits, (0..4).map(|k| (i + k) % 4), |r| digit(r, i))).collect();
    assert!(got.iter().all(|g| g == &want), "{got:?}, want {want:?}");
}

#[test]
fn tree_and_oneshot_refuse_non_commutative_ops() {
    let oneshot = world(3, Some(Algorithm::OneShot), None);
    let buf = oneshot.comms[1].device().alloc_from(&[7i32; 8]).unwrap();
    let e = oneshot.comms[1].all_reduce(&buf, &buf, 8, Op::custom(&DIGITS), &oneshot.streams[1]).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("'digits' is not commutative") && m.contains("oneshot")),
        "{e}"
    );
    oneshot.streams[1].synchronize().unwrap();
    assert_eq!(buf.to_vec(), vec![7; 8], "a refused call changed the buffer");

    let w = world(4, Some(Algorithm::Tree), None);
    let c = &w.comms[0];
    let buf = c.device().alloc_from(&[7i32; 8]).unwrap();
    let e = c.all_reduce(&buf, &buf, 8, Op::custom(&DIGITS), &w.streams[0]).unwrap_err();
    match &e {
        Error::InvalidArgument(m) => {
            assert!(m.contains("'digits' is not commutative") && m.contains("ring"), "unclear reason: {m}")
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    w.streams[0].synchronize().unwrap();
    assert_eq!(buf.to_vec(), vec![7; 8], "a refused call changed the buffer");
    // The spec says the same.
    let spec = KernelSpec::new(
        Collective::AllReduce,
        Algorithm::Tree,
        Protocol::LL,
        DataType::I32,
        Some(RedOp::Custom(&DIGITS)),
    );
    assert!(spec.unwrap_err().0.contains("not commutative"));
    // A type the op is not defined for is refused too.
    let f = c.device().alloc_from(&[1.0f32]).unwrap();
    let e = c.all_reduce(&f, &f, 1, Op::custom(&DIGITS), &w.streams[0]).unwrap_err();
    assert!(e.to_string().contains("not defined for f32"), "{e}");
}

// ---- the translation, bit for bit ----

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Equality that tells zeros apart and takes any NaN for any NaN.
trait Same: Copy + std::fmt::Debug {
    fn same(self, other: Self) -> bool;
    fn random(rng: &mut Rng) -> Self;
    fn is_inf(self) -> bool {
        false
    }
}
macro_rules! same_int {
    ($($t:ty),+) => {$(impl Same for $t {
        fn same(self, o: Self) -> bool { self == o }
        fn random(rng: &mut Rng) -> Self {
            // Mostly small values (where the arithmetic differs in interesting ways), some full-range.
            let v = rng.next();
            if v % 4 == 0 { v as $t } else { (((v >> 8) % 41) as i64 - 20) as $t }
        }
    })+};
}
same_int!(i8, u8, i32, u32, i64, u64);
macro_rules! same_float {
    ($($t:ty, $bits:ty);+) => {$(impl Same for $t {
        fn same(self, o: Self) -> bool { self.to_bits() == o.to_bits() || (self.is_nan() && o.is_nan()) }
        fn is_inf(self) -> bool { RefElement::to_f64(self).is_infinite() }
        fn random(rng: &mut Rng) -> Self {
            let v = rng.next();
            match v % 4 {
                // Any bit pattern: NaN, infinities, subnormals, huge values.
                0 => <$t>::from_bits(v as $bits),
                // Small whole and fractional values.
                1 => <$t as RefElement>::from_f64((v >> 8) as f64 % 41.0 - 20.0),
                _ => <$t as RefElement>::from_f64(((v >> 8) % 100000) as f64 / 1024.0 - 40.0),
            }
        }
    })+};
}
same_float!(f32, u32; f64, u64; half::f16, u16; half::bf16, u16; float8::F8E4M3, u8; float8::F8E5M2, u8);

/// Reduce over two ranks to rank 0 computes `f(x1, x0)` for every element: the kernel's
/// combine function on arbitrary inputs, against the Rust function.
fn check_bits<T: Element + Same>(w: &World, op: &'static CustomOp, f: fn(T, T) -> T, seed: u64) {
    assert_eq!(w.comms.len(), 2);
    let count = 4000;
    let mut rng = Rng(seed);
    // Not e5m2's infinities: a rank's own input is stored back through the saturating
    // conversion before it is sent (inf arrives as 57344), which the reference does not model.
    let mut value = || loop {
        let v = T::random(&mut rng);
        if !(T::DTYPE == DataType::F8E5M2 && v.is_inf()) {
            break v;
        }
    };
    let xs: Vec<Vec<T>> = (0..2).map(|_| (0..count).map(|_| value()).collect()).collect();
    let got = run(w, Collective::Reduce, Op::custom(op), count, 0, &|r, i| xs[r][i]).unwrap();
    let mut wrong = Vec::new();
    for i in 0..count {
        let want = f(xs[1][i], xs[0][i]);
        if !got[0][i].same(want) {
            wrong.push(format!("f({:?}, {:?}) = {:?}, kernel {:?}", xs[1][i], xs[0][i], want, got[0][i]));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} ({}): {} of {count} differ:\n{}",
        op.name,
        T::DTYPE,
        wrong.len(),
        wrong[..wrong.len().min(10)].join("\n")
    );
}

#[test]
fn kernels_compute_what_rust_computes() {
    use half::{bf16, f16};
    let w = world(2, Some(Algorithm::Ring), Some(Protocol::Simple));
    check_bits::<f32>(&w, &FLOAT_MIX, float_mix, 1);
    check_bits::<f64>(&w, &FLOAT_MIX, float_mix, 2);
    check_bits::<f16>(&w, &FLOAT_MIX, float_mix, 3);
    check_bits::<bf16>(&w, &FLOAT_MIX, float_mix, 4);
    check_bits::<float8::F8E4M3>(&w, &FLOAT_MIX, float_mix, 12);
    check_bits::<float8::F8E5M2>(&w, &FLOAT_MIX, float_mix, 13);
    check_bits::<i8>(&w, &INT_MIX, int_mix, 5);
    check_bits::<u8>(&w, &INT_MIX, int_mix, 6);
    check_bits::<i32>(&w, &INT_MIX, int_mix, 7);
    check_bits::<u32>(&w, &INT_MIX, int_mix, 8);
    check_bits::<i64>(&w, &INT_MIX, int_mix, 9);
    check_bits::<u64>(&w, &INT_MIX, int_mix, 10);
    check_bits::<f32>(&w, &ABSMAX, absmax, 11);
}

#[test]
fn kernels_do_not_trap_where_rust_panics() {
    // wrapping(a, b) = (a + b) / b + a % b with a received from rank 1, b rank 0's.
    let w = world(2, Some(Algorithm::Ring), Some(Protocol::LL));
    let cases: [(i32, i32, i32); 4] = [
        (i32::MAX, 1, i32::MIN),      // the sum wraps
        (5, 0, 0),                    // division and remainder by zero give 0
        (i32::MIN + 1, -1, i32::MIN), // MIN / -1 wraps to MIN; MIN % -1 is 0
        (7, 2, 4 + 1),                // and ordinary values are ordinary
    ];
    let got = run(&w, Collective::Reduce, Op::custom(&WRAPPING), cases.len(), 0, &|r, i| {
        if r == 1 {
            cases[i].0
        } else {
            cases[i].1
        }
    })
    .unwrap();
    let want: Vec<i32> = cases.iter().map(|c| c.2).collect();
    assert_eq!(got[0], want);
    assert_eq!(wrapping(7, 2), 5);
}

// ---- the kernel cache keys on the op's source ----

#[test]
fn a_changed_body_is_another_kernel() {
    assert_eq!(PICK_FIRST.name, PICK_SECOND.name);
    assert_eq!((pick_first(1, 2), pick_second(1, 2)), (1, 2));
    assert_ne!(PICK_FIRST.body, PICK_SECOND.body);
    let w = world(2, Some(Algorithm::Ring), Some(Protocol::LL));
    let x = |r: usize, i: usize| (10 * r + i) as i32;
    let first = run(&w, Collective::Reduce, Op::custom(&PICK_FIRST), 3, 0, &x).unwrap();
    let second = run(&w, Collective::Reduce, Op::custom(&PICK_SECOND), 3, 0, &x).unwrap();
    assert_eq!(first[0], vec![10, 11, 12], "pick_first keeps what rank 1 sent");
    assert_eq!(second[0], vec![0, 1, 2], "pick_second keeps rank 0's own");

    let dir = tempfile::tempdir().unwrap();
    let g = Generator::new(Some(jitccl::codegen::cache::DiskCache::new(dir.path())));
    let spec = |op: &'static CustomOp| {
        KernelSpec::new(Collective::Reduce, Algorithm::Ring, Protocol::LL, DataType::I32, Some(RedOp::Custom(op)))
            .unwrap()
    };
    assert_eq!(spec(&PICK_FIRST).to_string(), spec(&PICK_SECOND).to_string());
    assert_eq!(g.host_kernel(&spec(&PICK_FIRST)).unwrap().1, Provenance::Compiled);
    assert_eq!(g.host_kernel(&spec(&PICK_SECOND)).unwrap().1, Provenance::Compiled);
    assert_eq!(g.host_kernel(&spec(&PICK_FIRST)).unwrap().1, Provenance::Memory);
    let src = |op| jitccl::codegen::render(&spec(op), jitccl::codegen::Target::Host).unwrap();
    assert_ne!(src(&PICK_FIRST), src(&PICK_SECOND));
}

// ---- what the macro emits ----

#[test]
fn emitted_constants_describe_the_op() {
    assert_eq!(ABSMAX.name, "absmax");
    assert_eq!(ABSMAX.identity, "0.0f");
    assert!(ABSMAX.commutative);
    assert_eq!(ABSMAX.dtypes, &[DataType::F32]);
    assert_eq!(ABSMAX_ANY.dtypes, &[DataType::F32, DataType::F64, DataType::F16, DataType::BF16]);
    assert!(!DIGITS.commutative);
    assert_eq!(DIGITS.identity, "0");
    assert_eq!(CLAMPED_SUM.dtypes.len(), 8);
    assert_eq!(PICK_FIRST.name, "pick");
    // The references are the functions themselves (narrow floats computed in f32).
    assert_eq!(absmax(-3.0, 2.0), 3.0);
    assert_eq!(absmax_any(half::f16::from_f32(-1.5), half::f16::from_f32(1.0)), half::f16::from_f32(1.5));
    assert_eq!(digits(12, 3), 123);
    assert_eq!(digits(1.0f64, 2.0), 12.0);
}

// ---- NVRTC: the same specs for CUDA ----

fn cuda_specs() -> Vec<KernelSpec> {
    let ops: [&'static CustomOp; 9] =
        [&ABSMAX, &ABSMAX_ANY, &CLAMPED_SUM, &DIGITS, &FLOAT_MIX, &INT_MIX, &WRAPPING, &PICK_FIRST, &PICK_SECOND];
    let mut specs = Vec::new();
    for op in ops {
        for &dtype in op.dtypes {
            let s = KernelSpec::new(
                Collective::AllReduce,
                Algorithm::Ring,
                Protocol::Simple,
                dtype,
                Some(RedOp::Custom(op)),
            );
            specs.push(s.unwrap());
        }
    }
    // Every collective, algorithm and protocol for one op.
    for &coll in [Collective::AllReduce, Collective::Reduce, Collective::ReduceScatter].iter() {
        for &algo in coll.algorithms() {
            // Direct algorithms have the Simple protocol only.
            for &proto in Protocol::ALL.iter().filter(|&&p| !algo.is_direct() || p == Protocol::Simple) {
                let s = KernelSpec::new(coll, algo, proto, DataType::F16, Some(RedOp::Custom(&ABSMAX_ANY))).unwrap();
                if !specs.contains(&s) {
                    specs.push(s);
                }
            }
        }
    }
    specs
}

#[test]
fn specs_compile_with_nvrtc_for_sm90() {
    let required = std::env::var("JITCCL_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    if let Err(e) = nvrtc() {
        assert!(!required, "JITCCL_REQUIRE_NVRTC=1 but {e}");
        eprintln!("skipping the NVRTC check: {e}");
        return;
    }
    let specs = cuda_specs();
    let mut failed = Vec::new();
    for spec in &specs {
        // A check (no optimizations): every C++ and inline-PTX error still fails.
        if let Err(e) = check_cuda(spec, CudaArch(90), CudaOutput::Cubin) {
            failed.push(format!("{spec}: {e}"));
        }
    }
    assert!(failed.is_empty(), "{} of {} failed:\n{}", failed.len(), specs.len(), failed.join("\n"));
    eprintln!("{} custom-op kernels compiled with NVRTC for sm_90", specs.len());
}
