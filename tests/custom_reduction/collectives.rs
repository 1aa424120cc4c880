//! The ops through every reducing collective against the Rust reference, and
//! non-commutative ops combined in ring order or refused.

use super::*;

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
