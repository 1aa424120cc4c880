//! `--wire`: the check of a run whose elements travel in a wire format. Its results are not
//! the exact ones, so each element must lie within the wire's error bound
//! ([`wire_bound`]) of the exact result of the reference inputs; and where every rank ends
//! with the same values (AllReduce, AllGather, Broadcast) every rank must hold the same
//! bits, which ranks in other processes compare through an exact AllReduce (max) of them.
//! With `--algo ring` the bound counts the encodings the communicator's ring makes
//! (`Wired::ring_encodings`: fewer where hops in memory carry partial sums as fp32).

use jitccl::reference::{input, window_max, wire_bound, RefElement};
use jitccl::{Algorithm, Collective, Comm, Op, Stream};

use super::{alloc, op, sync_all, Views};
use crate::perf::coll::PerfColl::*;
use crate::perf::flags::{Layout, PerfArgs};

/// Per rank of `comms`: its elements outside the bound, plus those whose bits are not
/// what another rank holds.
pub(super) fn wrong<T: RefElement>(
    a: &PerfArgs, lay: &Layout, comms: &[Comm], streams: &[Stream], v: &Views<T>, count: usize,
) -> jitccl::Result<Vec<usize>> {
    let outs: Vec<Vec<T>> = v.iter().map(|(_, recv)| recv.to_vec()).collect();
    let encodings = match comms.first() {
        Some(c) => encodings(a, c, lay.nranks)?,
        None => 0,
    };
    let mut wrong: Vec<usize> =
        comms.iter().zip(&outs).map(|(c, out)| outside_bound(a, lay.nranks, encodings, c.rank(), count, out)).collect();
    if a.coll.same_everywhere() {
        for (w, k) in wrong.iter_mut().zip(not_the_same(a, comms, streams, &outs)?) {
            *w += k;
        }
    }
    Ok(wrong)
}

/// The most encodings on an element's path over `n` ranks of `c`: over the ring (forced),
/// those its hops make; else a sum's once per hop, n in all, and what is only moved once.
pub(super) fn encodings(a: &PerfArgs, c: &Comm, n: usize) -> jitccl::Result<usize> {
    let coll = match a.coll {
        AllReduce => Collective::AllReduce,
        ReduceScatter => Collective::ReduceScatter,
        Reduce => Collective::Reduce,
        _ => return Ok(1),
    };
    match a.algo {
        Some(Algorithm::Ring) => c.wired(a.wire).ring_encodings(coll),
        _ => Ok(n),
    }
}

/// How many of rank `r`'s results `out` are further from the exact result than the wire's
/// bound of `encodings` encodings allows (or not finite).
fn outside_bound<T: RefElement>(a: &PerfArgs, n: usize, encodings: usize, r: usize, count: usize, out: &[T]) -> usize {
    if a.coll == Reduce && r != a.root {
        return 0;
    }
    let op = op(a);
    // Avg scales each input by 1/n rounded to f32 before the sum, as the kernels do.
    let scale = if op == Some(Op::Avg) { (1.0 / n as f32) as f64 } else { 1.0 };
    let x = |q: usize, i: usize| input::<T>(op, q, i).to_f64() * scale;
    // (exact result, sum of the inputs' magnitudes) of output element k.
    let sum = |i: usize| (0..n).fold((0.0, 0.0), |(s, m), q| (s + x(q, i), m + x(q, i).abs()));
    let one = |q: usize, i: usize| (x(q, i), x(q, i).abs());
    let (exact, m): (Vec<f64>, Vec<f64>) = (0..out.len())
        .map(|k| match a.coll {
            AllReduce | Reduce => sum(k),
            ReduceScatter => sum(r * count + k),
            AllGather => one(k / count, k % count),
            Broadcast => one(a.root, k),
            _ => one((r + n - 1) % n, k),
        })
        .collect();
    let additions = if a.coll.reduces() { n } else { 1 };
    let block = a.wire.block().map_or(1, usize::from);
    let largest = window_max(&m, block - 1);
    // 16-bit elements round the decoded f32 result once more, by half their epsilon.
    let last = if size_of::<T>() < 4 { T::EPS / 2.0 } else { 0.0 };
    (0..out.len())
        .filter(|&k| {
            let b = wire_bound(a.wire, encodings, additions, m[k], largest[k]);
            let b = b + last * (exact[k].abs() + b);
            let off = (out[k].to_f64() - exact[k]).abs();
            off.is_nan() || off > b
        })
        .count()
}

/// Per rank of `comms`: its results whose bits are not the largest any rank holds there
/// (so that every element where ranks differ is counted by one rank at least).
fn not_the_same<T: RefElement>(
    a: &PerfArgs, comms: &[Comm], streams: &[Stream], outs: &[Vec<T>],
) -> jitccl::Result<Vec<usize>> {
    let len = outs.first().map_or(0, Vec::len);
    if len == 0 {
        return Ok(vec![0; comms.len()]);
    }
    // Allocated as perf's buffers are, so that a forced direct algorithm runs here too.
    let (bufs, _regs) = alloc::<i32>(a.register, comms, len)?;
    let bits: Vec<Vec<i32>> =
        outs.iter().map(|o| o.iter().map(|x| (x.to_f64() as f32).to_bits() as i32).collect()).collect();
    for ((c, s), ((send, recv), b)) in comms.iter().zip(streams).zip(bufs.iter().zip(&bits)) {
        send.copy_from_host(b)?;
        c.all_reduce(send, recv, len, Op::Max, s)?;
    }
    sync_all(streams)?;
    Ok(bufs
        .iter()
        .zip(&bits)
        .map(|((_, most), b)| most.to_vec().iter().zip(b).filter(|(m, b)| m != b).count())
        .collect())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Perf {
        #[command(flatten)]
        a: PerfArgs,
    }

    fn args(line: &[&str]) -> PerfArgs {
        Perf::try_parse_from(["perf"].iter().chain(line)).expect("flags").a
    }

    /// The exact results, give or take `off`, of rank `r`'s block of `count` elements
    /// from `first`.
    fn near_exact(n: usize, first: usize, count: usize, off: f32) -> Vec<f32> {
        (first..first + count).map(|i| (0..n).map(|q| input::<f32>(Some(Op::Sum), q, i)).sum::<f32>() + off).collect()
    }

    #[test]
    fn results_beyond_the_bound_or_of_another_block_are_wrong() {
        let (n, count) = (3, 300);
        let a = args(&["reduce_scatter", "--wire", "int8", "-N", "3"]);
        // The int8 wire errs by up to a block's largest magnitude (here at least 5) / 250
        // per hop, three hops.
        assert_eq!(outside_bound(&a, n, n, 1, count, &near_exact(n, count, count, 0.05)), 0);
        let mut out = near_exact(n, count, count, 0.0);
        out[7] += 0.5;
        out[8] = f32::NAN;
        assert_eq!(outside_bound(&a, n, n, 1, count, &out), 2);
        // Rank 0's block where rank 1's is due.
        assert!(outside_bound(&a, n, n, 1, count, &near_exact(n, 0, count, 0.0)) > count / 2);
    }
}
