//! Plain reference results for checking collectives (used by the tests and by `jitccl perf`
//! to count wrong elements). Inputs are small whole numbers (and powers of two for
//! products) chosen so that every datatype, fp8 included, holds every partial result
//! exactly: any reduction order gives the same bits, and a mismatch is a real error.
//! Float Avg scales by 1/n, which is inexact; it is compared within a tolerance. A result
//! carried in a wire format is compared within the wire's error bound ([`wire_bound`]).

use jitccl_runtime::{DataType, Element, Op, Wire};

/// An element type the reference can compute with.
pub trait RefElement: Element {
    /// Converts an exactly representable value.
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    /// Wraps an integer result to the type (floats: plain conversion).
    fn from_i128_wrapping(v: i128) -> Self;
    /// The exact value of an integer (floats: truncated).
    fn to_i128(self) -> i128;
    /// Relative precision, for the Avg tolerance (0 for integers).
    const EPS: f64;
}

macro_rules! int_ref {
    ($($t:ty),+) => {$(
        impl RefElement for $t {
            fn from_f64(v: f64) -> Self { v as $t }
            fn to_f64(self) -> f64 { self as f64 }
            fn from_i128_wrapping(v: i128) -> Self { v as $t }
            fn to_i128(self) -> i128 { self as i128 }
            const EPS: f64 = 0.0;
        }
    )+};
}
int_ref!(i8, u8, i32, u32, i64, u64);

macro_rules! float_ref {
    ($($t:ty: $from:expr, $to:expr, $eps:expr);+ $(;)?) => {$(
        impl RefElement for $t {
            fn from_f64(v: f64) -> Self { $from(v) }
            fn to_f64(self) -> f64 { $to(self) }
            fn from_i128_wrapping(v: i128) -> Self { $from(v as f64) }
            fn to_i128(self) -> i128 { $to(self) as i128 }
            const EPS: f64 = $eps;
        }
    )+};
}
float_ref!(
    f32: |v: f64| v as f32, |x: f32| x as f64, f32::EPSILON as f64;
    f64: |v: f64| v, |x: f64| x, f64::EPSILON;
    half::f16: half::f16::from_f64, half::f16::to_f64, 0.000977;
    half::bf16: half::bf16::from_f64, half::bf16::to_f64, 0.0079;
    float8::F8E4M3: float8::F8E4M3::from_f64, |x: float8::F8E4M3| float8::F8E4M3::to_f64(&x), 0.125;
    float8::F8E5M2: float8::F8E5M2::from_f64, |x: float8::F8E5M2| float8::F8E5M2::to_f64(&x), 0.25;
);

/// The PreMulSum scalar rank `rank` uses in checks (and puts where a `PreMulSumAt` points):
/// +-2, exact in every type.
pub fn premul_scalar(rank: usize) -> f64 {
    if rank.is_multiple_of(2) {
        2.0
    } else {
        -2.0
    }
}

/// The op rank `rank` passes in checks (PreMulSum carries that rank's scalar).
pub fn op_for_rank(op: Op, rank: usize) -> Op {
    match op {
        Op::PreMulSum(_) => Op::PreMulSum(premul_scalar(rank)),
        other => other,
    }
}

/// Input element `i` of rank `rank` for a check of `op` over `T`.
pub fn input<T: RefElement>(op: Option<Op>, rank: usize, i: usize) -> T {
    let d = T::DTYPE;
    let h = (i.wrapping_mul(7) + rank.wrapping_mul(13) + 3) as i64;
    let v = match op {
        Some(Op::Prod) => {
            // Products of up to 8 ranks stay exact (and wrap alike for integers).
            let pick: &[f64] = if d.is_float() {
                &[1.0, -1.0, 2.0, 0.5, 1.0]
            } else if d.is_signed_integer() {
                &[1.0, -1.0, 2.0, 3.0, 1.0]
            } else {
                &[1.0, 2.0, 3.0, 1.0, 1.0]
            };
            pick[(h % 5) as usize]
        }
        _ => {
            let span = match d {
                DataType::F8E5M2 => 1,
                DataType::F8E4M3 => 2,
                _ => 5,
            };
            let v = (h % (2 * span + 1)) as f64;
            if d.is_signed_integer() || d.is_float() {
                v - span as f64
            } else {
                v
            }
        }
    };
    T::from_f64(v)
}

/// Rank `rank`'s `count` inputs.
pub fn inputs<T: RefElement>(op: Option<Op>, rank: usize, count: usize) -> Vec<T> {
    (0..count).map(|i| input(op, rank, i)).collect()
}

/// The reduction of element `i` over `nranks` ranks, as the kernels define it.
pub fn reduced<T: RefElement>(op: Op, nranks: usize, i: usize) -> T {
    let xs: Vec<T> = (0..nranks).map(|r| input(Some(op), r, i)).collect();
    if T::DTYPE.is_integer() {
        let v: Vec<i128> = xs.iter().map(|x| x.to_i128()).collect();
        let wrap = |v: i128| T::from_i128_wrapping(v);
        match op {
            Op::Sum => wrap(v.iter().sum()),
            Op::Prod => wrap(v.iter().product()),
            Op::Min => wrap(*v.iter().min().expect("ranks")),
            Op::Max => wrap(*v.iter().max().expect("ranks")),
            Op::Avg => {
                // The sum wraps in T, then divides (truncating) by the rank count.
                let s = wrap(v.iter().sum()).to_i128();
                wrap(s / nranks as i128)
            }
            Op::PreMulSum(_) | Op::PreMulSumAt(_) => {
                wrap((0..nranks).map(|r| wrap(v[r] * premul_scalar(r) as i128).to_i128()).sum())
            }
            Op::Custom(c) => panic!("custom op {} has no built-in reference", c.name),
        }
    } else {
        let v: Vec<f64> = xs.iter().map(|x| x.to_f64()).collect();
        T::from_f64(match op {
            Op::Sum => v.iter().sum(),
            Op::Prod => v.iter().product(),
            Op::Min => v.iter().copied().fold(f64::INFINITY, f64::min),
            Op::Max => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            Op::Avg => v.iter().sum::<f64>() / nranks as f64,
            Op::PreMulSum(_) | Op::PreMulSumAt(_) => (0..nranks).map(|r| v[r] * premul_scalar(r)).sum(),
            Op::Custom(c) => panic!("custom op {} has no built-in reference", c.name),
        })
    }
}

/// Whether `got` is the right result `want` of `op` over `nranks` ranks.
pub fn matches<T: RefElement>(got: T, want: T, op: Option<Op>, nranks: usize) -> bool {
    if matches!(op, Some(Op::Avg)) && T::DTYPE.is_float() {
        // Each of n inputs is scaled by a rounded 1/n and each partial sum rounded.
        let tol = T::EPS * 4.0 * (nranks as f64 + 1.0) * 5.0;
        (got.to_f64() - want.to_f64()).abs() <= tol
    } else {
        got == want || (got.to_f64().is_nan() && want.to_f64().is_nan())
    }
}

/// Number of positions where `got` differs from `want`.
pub fn count_wrong<T: RefElement>(got: &[T], want: &[T], op: Option<Op>, nranks: usize) -> usize {
    got.iter().zip(want).filter(|(g, w)| !matches(**g, **w, op, nranks)).count() + got.len().abs_diff(want.len())
}

/// One encoding's error terms in `wire` (as `Wire` documents them): relative `u`,
/// block-relative `c` (of the largest finite magnitude of the value's block) and absolute `t`.
/// A codec of the user's documents none: its terms are infinite.
pub fn wire_terms(wire: Wire) -> (f64, f64, f64) {
    let p = |e: i32| 2f64.powi(e);
    match wire {
        Wire::Exact => (0.0, 0.0, 0.0),
        Wire::Bf16 => (p(-8), 0.0, p(-134)),
        Wire::Fp16 => (p(-11), 0.0, p(-25)),
        Wire::Fp8E4M3 { .. } => (p(-4), p(-17), p(-136)),
        Wire::Fp8E5M2 { .. } => (p(-3), p(-31), p(-143)),
        Wire::Int8 { .. } => (0.0, 1.0 / 250.0, p(-140)),
        Wire::Custom(_) => (f64::INFINITY, f64::INFINITY, f64::INFINITY),
    }
}

/// The most an f32 result that went through `encodings` encodings in `wire` and
/// `additions` fp32 additions may differ from the exact one (`Wire`'s bound of a sum): `m`
/// is the sum of the magnitudes of the element's inputs, `a` the largest such sum within a
/// block of it, and `2^-24` each addition's own rounding. Where every hop encodes (as
/// many additions as encodings) this is `Wire`'s `k ((u + 2^-24) m + c a + t) (1 + u)^k`.
/// Infinite for a codec of the user's, which documents no bound.
pub fn wire_bound(wire: Wire, encodings: usize, additions: usize, m: f64, a: f64) -> f64 {
    if let Wire::Custom(_) = wire {
        return f64::INFINITY;
    }
    let (u, c, t) = wire_terms(wire);
    let (k, s) = (encodings as f64, additions as f64);
    (k * (u * m + c * a + t) + s * 2f64.powi(-24) * m) * (1.0 + u).powi(encodings as i32)
}

/// `out[j]`: the largest of `m[j - reach ..= j + reach]` (clipped to `m`), in linear time
/// (van Herk / Gil-Werman: running maxima within windows of `2 reach + 1` elements).
pub fn window_max(m: &[f64], reach: usize) -> Vec<f64> {
    let (n, w) = (m.len(), 2 * reach + 1);
    let (mut from_start, mut to_end) = (m.to_vec(), m.to_vec());
    for i in 1..n {
        if i % w != 0 {
            from_start[i] = from_start[i].max(from_start[i - 1]);
        }
    }
    for i in (0..n.saturating_sub(1)).rev() {
        if (i + 1) % w != 0 {
            to_end[i] = to_end[i].max(to_end[i + 1]);
        }
    }
    // A window (at most `w` long) lies in one piece, then starting it, ending it or ending
    // `m` (it touches an edge, or is the whole piece), or in two neighbouring pieces.
    (0..n)
        .map(|j| {
            let (l, r) = (j.saturating_sub(reach), (j + reach).min(n - 1));
            match (l / w == r / w, l % w == 0) {
                (true, true) => from_start[r],
                (true, false) => to_end[l],
                (false, _) => to_end[l].max(from_start[r]),
            }
        })
        .collect()
}

/// Calls `$f::<T>($args)` with `T` the Rust type of the runtime datatype `$d`.
#[macro_export]
macro_rules! with_element_type {
    ($d:expr, $f:ident ( $($args:expr),* )) => {
        match $d {
            $crate::DataType::I8 => $f::<i8>($($args),*),
            $crate::DataType::U8 => $f::<u8>($($args),*),
            $crate::DataType::I32 => $f::<i32>($($args),*),
            $crate::DataType::U32 => $f::<u32>($($args),*),
            $crate::DataType::I64 => $f::<i64>($($args),*),
            $crate::DataType::U64 => $f::<u64>($($args),*),
            $crate::DataType::F16 => $f::<$crate::half::f16>($($args),*),
            $crate::DataType::BF16 => $f::<$crate::half::bf16>($($args),*),
            $crate::DataType::F32 => $f::<f32>($($args),*),
            $crate::DataType::F64 => $f::<f64>($($args),*),
            $crate::DataType::F8E4M3 => $f::<$crate::float8::F8E4M3>($($args),*),
            $crate::DataType::F8E5M2 => $f::<$crate::float8::F8E5M2>($($args),*),
        }
    };
}

#[cfg(test)]
mod tests {
    use super::window_max;

    #[test]
    fn window_max_is_the_largest_within_reach() {
        let m: Vec<f64> = (0..103u64).map(|i| ((i * 37 + 11) % 29) as f64).collect();
        for len in [0, 1, 2, 7, 64, 103] {
            for reach in [0, 1, 3, 31] {
                let m = &m[..len];
                let brute: Vec<f64> = (0..len)
                    .map(|j| m[j.saturating_sub(reach)..(j + reach + 1).min(len)].iter().copied().fold(0.0, f64::max))
                    .collect();
                assert_eq!(window_max(m, reach), brute, "{len} elements, reach {reach}");
            }
        }
    }
}
