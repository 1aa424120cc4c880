//! The C translation bit for bit against Rust on random inputs, and no trap where Rust
//! panics.

use super::*;

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
