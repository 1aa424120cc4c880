//! The host target's software float conversions (f16, bf16, fp8 e4m3/e5m2), checked on
//! every bit pattern against the `half` and `float8` crates: a one-rank PreMulSum computes
//! round(x * s) through the kernel's to-float and from-float paths, so scalars 1, 0.5 and
//! 3 cover the round trip, ties and subnormals, and overflow (inf, or fp8's saturation).

use jitccl::reference::RefElement;
use jitccl::{Comm, Config, Element, Op};

fn check_all_patterns<T: RefElement>(bits: impl Iterator<Item = T>, reference: impl Fn(T, f32) -> T) {
    let comms = Comm::init_all(1, &Config::default()).unwrap();
    let (c, s) = (&comms[0], comms[0].device().stream().unwrap());
    let xs: Vec<T> = bits.collect();
    let input = c.device().alloc_from(&xs).unwrap();
    let out = c.device().alloc::<T>(xs.len()).unwrap();
    for scalar in [1.0f32, 0.5, 3.0] {
        c.all_reduce(&input, &out, xs.len(), Op::PreMulSum(scalar as f64), &s).unwrap();
        s.synchronize().unwrap();
        let got = out.to_vec();
        let mut wrong = Vec::new();
        for (x, g) in xs.iter().zip(&got) {
            let want = reference(*x, scalar);
            let both_nan = g.to_f64().is_nan() && want.to_f64().is_nan();
            if *g != want && !both_nan {
                wrong.push(format!("{x:?} * {scalar}: got {g:?}, want {want:?}"));
            }
        }
        assert!(
            wrong.is_empty(),
            "{}: {} of {} wrong: {:?}",
            T::DTYPE,
            wrong.len(),
            xs.len(),
            &wrong[..wrong.len().min(8)]
        );
    }
}

#[test]
fn f16_matches_half() {
    use jitccl::half::f16;
    check_all_patterns((0..=u16::MAX).map(f16::from_bits), |x, s| f16::from_f32(x.to_f32() * s));
}

#[test]
fn bf16_matches_half() {
    use jitccl::half::bf16;
    check_all_patterns((0..=u16::MAX).map(bf16::from_bits), |x, s| bf16::from_f32(x.to_f32() * s));
}

#[test]
fn fp8_matches_float8() {
    use jitccl::float8::{F8E4M3, F8E5M2};
    check_all_patterns((0..=u8::MAX).map(F8E4M3::from_bits), |x, s| F8E4M3::from_f32(x.to_f32() * s));
    check_all_patterns((0..=u8::MAX).map(F8E5M2::from_bits), |x, s| F8E5M2::from_f32(x.to_f32() * s));
}

#[test]
fn element_types_match_datatypes() {
    assert_eq!(<jitccl::half::f16 as Element>::DTYPE, jitccl::DataType::F16);
    assert_eq!(<jitccl::float8::F8E5M2 as Element>::DTYPE, jitccl::DataType::F8E5M2);
}
