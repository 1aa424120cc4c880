//! Every collective x algorithm x protocol runs on the host target — the generated kernels
//! themselves — with every datatype and every op, and is compared with the plain reference,
//! for 1..8 ranks, counts 0, 1, primes and sizes that are not multiples of any step, in
//! place and out of place. FIFO slots are made tiny so that these counts take many steps
//! and wrap the 8-slot FIFOs many times.
//!
//! Every (datatype, op) pair runs in the ring AllReduce of each protocol; the other
//! sweeps give each datatype one op, rotating, so that each of them still meets every
//! datatype and every op. The code of a (datatype, op) is the same in every algorithm
//! (its reduce function), while a kernel per pair and shape would be some 1,100 host
//! compiles; every spec still has to compile (`jitccl kernels check --all` in the CLI tests).

#[path = "common/world.rs"]
mod world;

use jitccl::{Algorithm, Collective, DataType, Op, Protocol};
use world::{check_counts, check_past, hosts, pairs, world_on, world_on_channels, world_with, Mem, Pairs, World};

fn world(nranks: usize, algo: Algorithm, proto: Protocol, nchannels: usize) -> World {
    world_on(&hosts(nranks), algo, proto, nchannels)
}

fn sweep(coll: Collective, algo: Algorithm, proto: Protocol, ranks: &[usize], dtypes: &[DataType], which: Pairs) {
    let cases = pairs(coll, algo, proto, dtypes, which);
    world::sweep(coll, &format!("{algo}/{proto}"), ranks, &cases, |n, nch| world(n, algo, proto, nch));
}

const ALL_TYPES: &[DataType] = DataType::ALL;
/// Byte-moving collectives run as bytes whatever the type; a few element sizes suffice.
const COPY_TYPES: &[DataType] = &[DataType::U8, DataType::F16, DataType::F32, DataType::F64];

macro_rules! sweep_tests {
    ($($name:ident: $coll:ident $algo:ident $proto:ident $ranks:expr, $types:expr, $pairs:expr;)+) => {$(
        #[test]
        fn $name() {
            sweep(Collective::$coll, Algorithm::$algo, Protocol::$proto, &$ranks, $types, $pairs);
        }
    )+};
}

sweep_tests! {
    all_reduce_ring_simple: AllReduce Ring Simple [1, 2, 3, 4, 8], ALL_TYPES, Pairs::Every;
    all_reduce_ring_ll: AllReduce Ring LL [2, 3, 5, 8], ALL_TYPES, Pairs::Every;
    all_reduce_ring_ll128: AllReduce Ring LL128 [2, 3, 6, 7], ALL_TYPES, Pairs::Every;
    all_reduce_tree_simple: AllReduce Tree Simple [1, 2, 4, 7], ALL_TYPES, Pairs::Rotated;
    all_reduce_tree_ll: AllReduce Tree LL [3, 5, 8], ALL_TYPES, Pairs::Rotated;
    all_reduce_tree_ll128: AllReduce Tree LL128 [2, 6, 8], ALL_TYPES, Pairs::Rotated;
    all_reduce_oneshot_simple: AllReduce OneShot Simple [1, 2, 5], ALL_TYPES, Pairs::Rotated;
    all_reduce_oneshot_ll: AllReduce OneShot LL [2, 3, 8], ALL_TYPES, Pairs::Rotated;
    all_reduce_oneshot_ll128: AllReduce OneShot LL128 [4, 6, 7], ALL_TYPES, Pairs::Rotated;
    all_reduce_recursive_doubling_simple: AllReduce RecursiveDoubling Simple [1, 2, 3, 4], ALL_TYPES, Pairs::Rotated;
    all_reduce_recursive_doubling_ll: AllReduce RecursiveDoubling LL [5, 6, 8], ALL_TYPES, Pairs::Rotated;
    all_reduce_recursive_doubling_ll128: AllReduce RecursiveDoubling LL128 [2, 7], ALL_TYPES, Pairs::Rotated;
    reduce_ring_simple: Reduce Ring Simple [1, 2, 5], ALL_TYPES, Pairs::Rotated;
    reduce_ring_ll: Reduce Ring LL [3, 4, 8], ALL_TYPES, Pairs::Rotated;
    reduce_ring_ll128: Reduce Ring LL128 [2, 7], ALL_TYPES, Pairs::Rotated;
    reduce_scatter_ring_simple: ReduceScatter Ring Simple [1, 2, 5], ALL_TYPES, Pairs::Rotated;
    reduce_scatter_ring_ll: ReduceScatter Ring LL [3, 8], ALL_TYPES, Pairs::Rotated;
    reduce_scatter_ring_ll128: ReduceScatter Ring LL128 [2, 4, 7], ALL_TYPES, Pairs::Rotated;
    broadcast_ring_simple: Broadcast Ring Simple [1, 2, 3, 8], COPY_TYPES, Pairs::Every;
    broadcast_ring_ll: Broadcast Ring LL [2, 5, 7], COPY_TYPES, Pairs::Every;
    broadcast_ring_ll128: Broadcast Ring LL128 [3, 4, 6], COPY_TYPES, Pairs::Every;
    all_gather_ring_simple: AllGather Ring Simple [1, 2, 4, 8], COPY_TYPES, Pairs::Every;
    all_gather_ring_ll: AllGather Ring LL [3, 5, 6], COPY_TYPES, Pairs::Every;
    all_gather_ring_ll128: AllGather Ring LL128 [2, 7, 8], COPY_TYPES, Pairs::Every;
    sendrecv_simple: SendRecv Ring Simple [1, 2, 3, 8], COPY_TYPES, Pairs::Every;
    sendrecv_ll: SendRecv Ring LL [2, 4, 5], COPY_TYPES, Pairs::Every;
    sendrecv_ll128: SendRecv Ring LL128 [3, 6, 7], COPY_TYPES, Pairs::Every;
}

/// More launches than a stream's queue holds, without synchronizing: the queue wraps and
/// makes the caller wait, every launch still runs on its own buffers, and send buffers
/// whose handles are dropped right after the launch stay alive until it has run.
#[test]
fn deep_queues_wrap_and_keep_buffers_alive() {
    let (n, launches, count) = (3, 1000, 5);
    let w = world(n, Algorithm::Ring, Protocol::LL, 1);
    let input = |r: usize, k: usize, i: usize| (r * 1000 + k * 7 + i) as i64;
    let mut outs = vec![Vec::new(); n];
    for k in 0..launches {
        for (r, (c, s)) in w.comms.iter().zip(&w.streams).enumerate() {
            let send = c.device().alloc_from(&(0..count).map(|i| input(r, k, i)).collect::<Vec<_>>()).unwrap();
            let recv = c.device().alloc::<i64>(count).unwrap();
            c.all_reduce(&send, &recv, count, Op::Sum, s).unwrap();
            outs[r].push(recv);
        }
    }
    w.sync().unwrap();
    for (r, bufs) in outs.iter().enumerate() {
        for (k, b) in bufs.iter().enumerate() {
            let want: Vec<i64> = (0..count).map(|i| (0..n).map(|q| input(q, k, i)).sum()).collect();
            assert_eq!(b.to_vec(), want, "rank {r}, launch {k}");
        }
    }
}

/// Simple steps that copy 16 KiB or more, and steps that compute 4 KiB or more, are
/// streamed into the FIFO slots (cache-bypassing stores, a tile at a time when the step
/// computes). With 20 KiB slots these counts give full streamed steps, streamed steps whose
/// size is no multiple of the 64-byte store group, and short unstreamed ones of both kinds,
/// and every collective, datatype and op (the sweeps' pairs), in place and out of place,
/// still matches the reference.
#[test]
fn streamed_fifo_steps_match_the_reference() {
    use jitccl::Config;
    let counts = [1500, 12289, 40961];
    // The sweeps' pairs, so that this test shares their Simple kernels.
    let cases = [
        (Collective::AllReduce, Algorithm::Ring, ALL_TYPES, Pairs::Every),
        (Collective::AllReduce, Algorithm::Tree, ALL_TYPES, Pairs::Rotated),
        (Collective::AllReduce, Algorithm::OneShot, ALL_TYPES, Pairs::Rotated),
        (Collective::ReduceScatter, Algorithm::Ring, ALL_TYPES, Pairs::Rotated),
        (Collective::Reduce, Algorithm::Ring, ALL_TYPES, Pairs::Rotated),
        (Collective::AllGather, Algorithm::Ring, COPY_TYPES, Pairs::Every),
        (Collective::Broadcast, Algorithm::Ring, COPY_TYPES, Pairs::Every),
        (Collective::SendRecv, Algorithm::Ring, COPY_TYPES, Pairs::Every),
    ];
    let (mut runs, mut failures) = (0, Vec::new());
    for (coll, algo, dtypes, which) in cases {
        for n in [2, 3] {
            let cfg = Config {
                nchannels: Some(n - 1),
                algo: Some(algo),
                proto: Some(Protocol::Simple),
                slot_bytes: Some([20480, 64, 256]),
                ..Config::default()
            };
            let w = world_with(&hosts(n), &cfg);
            let cases = pairs(coll, algo, Protocol::Simple, dtypes, which);
            let (r, f) = check_counts(&w, coll, &cases, &counts, &format!("{coll} {algo}/simple n={n} streamed"));
            runs += r;
            failures.extend(f);
        }
    }
    assert!(failures.is_empty(), "{} of {runs} runs failed:\n{}", failures.len(), failures.join("\n"));
}

/// The most channels a rank may have (`MAX_CHANNELS`, a CTA each on a GPU): rings and trees
/// over every channel's connectors, counts that leave some channels empty and some full.
#[test]
fn the_most_channels_match_the_reference() {
    let (mut runs, mut failures) = (0, Vec::new());
    for (algo, n) in [(Algorithm::Ring, 2), (Algorithm::Ring, 3), (Algorithm::Tree, 3)] {
        let w = world_on_channels(&hosts(n), algo, jitccl::MAX_CHANNELS, Mem::Plain);
        let cases = [(DataType::F32, Some(Op::Sum)), (DataType::I64, Some(Op::Max))];
        let what = format!("all_reduce {algo} n={n} x{}", jitccl::MAX_CHANNELS);
        let (r, f) = check_counts(&w, Collective::AllReduce, &cases, &[0, 1, 4099, 70_001], &what);
        runs += r;
        failures.extend(f);
    }
    assert!(failures.is_empty(), "{} of {runs} runs failed:\n{}", failures.len(), failures.join("\n"));
}

/// Out-of-place calls of 8 MiB and more store their results with cache-bypassing stores
/// (the output outgrows the cache and no step reads it back). Counts just past the
/// threshold, odd for the 1-byte types so the last store group is partial, in both the
/// copying and the computing paths of every collective that writes an output; in place
/// (which keeps the cached stores) for comparison.
#[test]
fn large_outputs_bypassing_the_cache_match_the_reference() {
    let cases = [
        (Collective::AllReduce, &[DataType::F32, DataType::I8, DataType::BF16][..]),
        (Collective::ReduceScatter, &[DataType::F64, DataType::U8][..]),
        (Collective::Reduce, &[DataType::I32][..]),
        (Collective::AllGather, &[DataType::U8][..]),
        (Collective::Broadcast, &[DataType::F16][..]),
    ];
    let (mut runs, mut failures) = (0, Vec::new());
    for (coll, dtypes) in cases {
        for n in if coll == Collective::AllReduce { 2..=3 } else { 2..=2 } {
            let cfg = jitccl::Config {
                algo: Some(Algorithm::Ring),
                proto: Some(Protocol::Simple),
                ..jitccl::Config::default()
            };
            let w = world_with(&hosts(n), &cfg);
            let (r, f) = check_past(&w, coll, dtypes, 8 << 20, &format!("{coll} ring/simple n={n} large"));
            runs += r;
            failures.extend(f);
        }
    }
    assert!(failures.is_empty(), "{} of {runs} runs failed:\n{}", failures.len(), failures.join("\n"));
}

/// PreMulSum with each rank's multiplier read from its memory by the kernel when it runs
/// (NCCL's ncclScalarDevice), over the FIFO algorithms and protocols.
#[test]
fn premul_sum_read_by_the_kernel() {
    use Algorithm::{OneShot, RecursiveDoubling, Ring, Tree};
    use Protocol::{Simple, LL, LL128};
    for (coll, algo, proto, n) in [
        (Collective::AllReduce, Ring, Simple, 3),
        (Collective::AllReduce, Ring, LL, 2),
        (Collective::AllReduce, Tree, LL128, 4),
        (Collective::AllReduce, OneShot, LL, 3),
        (Collective::AllReduce, RecursiveDoubling, LL128, 7),
        (Collective::Reduce, Ring, LL128, 3),
        (Collective::ReduceScatter, Ring, Simple, 2),
    ] {
        let w = world(n, algo, proto, 2);
        world::check_premul_at(&w, coll, ALL_TYPES, &format!("{coll} {algo}/{proto} n={n}"));
    }
}

/// Kernels specialized for the communicator's rank count (`Config::specialize_ranks`, their
/// loops over ranks unrolled): every collective's every algorithm with a kernel of its own,
/// FIFO protocols and direct (on registered buffers), at 2 and 3 ranks, against the
/// reference; and the runtime ran the specialized kernel, which the process's generator then
/// holds in memory.
#[test]
fn kernels_specialized_for_the_rank_count_match_the_reference() {
    use jitccl::codegen::{Generator, KernelSpec, Provenance, RedOp};
    let (mut runs, mut failures) = (0, Vec::new());
    for n in [2, 3] {
        for &coll in Collective::ALL {
            for &algo in coll.algorithms().iter().filter(|&&a| coll.has_kernel(a)) {
                let protos: &[Protocol] =
                    if algo.is_direct() { &[Protocol::Simple] } else { &[Protocol::Simple, Protocol::LL] };
                for &proto in protos {
                    let cfg = jitccl::Config {
                        nchannels: Some(2),
                        algo: Some(algo),
                        proto: Some(proto),
                        slot_bytes: Some([256, 64, 256]),
                        specialize_ranks: Some(true),
                        ..jitccl::Config::default()
                    };
                    let mem = if algo.is_direct() { Mem::Registered } else { Mem::Plain };
                    let w = world_with(&hosts(n), &cfg).with_mem(mem);
                    let (dtype, op) =
                        if coll.reduces() { (DataType::F32, Some(Op::Sum)) } else { (DataType::U8, None) };
                    let what = format!("{coll} {algo}/{proto} n={n} specialized");
                    let (r, f) = check_counts(
                        &w,
                        coll,
                        &[(dtype, op), (DataType::I32, op.map(|_| Op::Max))],
                        &[0, 1, 4099],
                        &what,
                    );
                    runs += r;
                    failures.extend(f);
                    let red = coll.reduces().then_some(RedOp::Builtin(jitccl::codegen::BuiltinOp::Sum));
                    let spec = KernelSpec::new(coll, algo, proto, dtype, red).unwrap().specialized_for(n).unwrap();
                    match Generator::global().host_kernel(&spec) {
                        Ok((_, Provenance::Memory)) => {}
                        Ok((_, p)) => failures.push(format!("{what}: {spec} was not run ({p:?})")),
                        Err(e) => failures.push(format!("{what}: {spec}: {e}")),
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} of {runs} runs failed:\n{}", failures.len(), failures.join("\n"));
}
