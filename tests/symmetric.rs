//! The direct algorithms on symmetric (`Comm::alloc_symmetric`), registered
//! (`Comm::register`) and plain (host arena) buffers, ranks as threads: every collective
//! with a direct algorithm, every datatype and op (every pair in the direct AllReduce, each
//! datatype once in the others: `world::Pairs`), counts 0, 1, primes and several tiles,
//! in place and out of place, against the plain reference; the tuner's use of them; and
//! the misuses that must fail.
//! Ranks as processes: `cli/tests/symmetric_processes.rs`.

#[path = "common/world.rs"]
mod world;

use std::time::Duration;

use jitccl::{Algorithm, Collective, Comm, Config, DataType, Device, Error, Op, Protocol};
use world::{assert_past, check, check_cases, check_counts, pairs, world_on, world_on_channels, Mem, Pairs, World};

fn world(nranks: usize, algo: Algorithm, nchannels: usize, mem: Mem) -> World {
    let devices: Vec<Device> = (0..nranks).map(Device::host).collect();
    world_on(&devices, algo, Protocol::Simple, nchannels).with_mem(mem)
}

fn sweep(coll: Collective, algo: Algorithm, ranks: &[usize], dtypes: &[DataType], which: Pairs, mem: Mem) {
    let cases = pairs(coll, algo, Protocol::Simple, dtypes, which);
    world::sweep(coll, &format!("{algo} {mem:?}"), ranks, &cases, |n, nch| world(n, algo, nch, mem));
}

const ALL_TYPES: &[DataType] = DataType::ALL;
const COPY_TYPES: &[DataType] = &[DataType::U8, DataType::F16, DataType::F32, DataType::F64];
const SOME_TYPES: &[DataType] = &[DataType::I8, DataType::BF16, DataType::F32, DataType::U64];

macro_rules! sweep_tests {
    ($($name:ident: $coll:ident $algo:ident $ranks:expr, $types:expr, $pairs:ident, $mem:ident;)+) => {$(
        #[test]
        fn $name() {
            sweep(Collective::$coll, Algorithm::$algo, &$ranks, $types, Pairs::$pairs, Mem::$mem);
        }
    )+};
}

sweep_tests! {
    all_reduce_direct_symmetric: AllReduce Direct [1, 2, 3, 4], ALL_TYPES, Every, Symmetric;
    all_reduce_direct_oneshot_symmetric: AllReduce DirectOneShot [1, 2, 3, 4], ALL_TYPES, Rotated, Symmetric;
    all_reduce_direct_registered: AllReduce Direct [2, 3], SOME_TYPES, Rotated, Registered;
    all_reduce_direct_oneshot_registered: AllReduce DirectOneShot [4], SOME_TYPES, Rotated, Registered;
    reduce_scatter_direct_symmetric: ReduceScatter Direct [1, 2, 3, 4], ALL_TYPES, Rotated, Symmetric;
    reduce_direct_symmetric: Reduce Direct [1, 2, 3, 4], ALL_TYPES, Rotated, Symmetric;
    all_gather_direct_symmetric: AllGather Direct [1, 2, 3, 4], COPY_TYPES, Every, Symmetric;
    broadcast_direct_symmetric: Broadcast Direct [1, 2, 3, 4], COPY_TYPES, Every, Symmetric;
    all_gather_direct_registered: AllGather Direct [3], COPY_TYPES, Every, Registered;
    all_reduce_direct_oneshot_plain: AllReduce DirectOneShot [3], SOME_TYPES, Rotated, Plain;
    reduce_scatter_direct_plain: ReduceScatter Direct [2], SOME_TYPES, Rotated, Plain;
    all_to_all_direct_symmetric: AllToAll Direct [1, 2, 3, 4], COPY_TYPES, Every, Symmetric;
    gather_direct_symmetric: Gather Direct [1, 2, 3, 4], COPY_TYPES, Every, Symmetric;
    scatter_direct_symmetric: Scatter Direct [1, 2, 3, 4], COPY_TYPES, Every, Symmetric;
    all_to_all_direct_registered: AllToAll Direct [3], SOME_TYPES, Every, Registered;
    gather_direct_registered: Gather Direct [2], SOME_TYPES, Every, Registered;
    scatter_direct_registered: Scatter Direct [3], SOME_TYPES, Every, Registered;
    sendrecv_direct_symmetric: SendRecv Direct [1, 2, 3, 4], COPY_TYPES, Every, Symmetric;
    sendrecv_direct_registered: SendRecv Direct [3], SOME_TYPES, Every, Registered;
}

/// Out-of-place calls of 8 MiB and more store their outputs bypassing the cache. Counts just
/// past that, odd for the 1-byte types (a partial last store group), for every direct
/// kernel; in place (cached stores) beside them.
#[test]
fn large_direct_outputs_bypassing_the_cache_match_the_reference() {
    let cases = [
        (Collective::AllReduce, Algorithm::Direct, &[DataType::F32, DataType::I8][..]),
        (Collective::AllReduce, Algorithm::DirectOneShot, &[DataType::BF16][..]),
        (Collective::ReduceScatter, Algorithm::Direct, &[DataType::U8][..]),
        (Collective::Reduce, Algorithm::Direct, &[DataType::F64][..]),
        (Collective::AllGather, Algorithm::Direct, &[DataType::U8][..]),
        (Collective::Broadcast, Algorithm::Direct, &[DataType::F16][..]),
        (Collective::AllToAll, Algorithm::Direct, &[DataType::U8][..]),
        (Collective::Gather, Algorithm::Direct, &[DataType::F16][..]),
        (Collective::Scatter, Algorithm::Direct, &[DataType::U8][..]),
    ];
    assert_past(&cases, 8 << 20, "large", |coll, algo| {
        world(if coll == Collective::AllReduce { 3 } else { 2 }, algo, 1, Mem::Symmetric)
    });
}

/// Many channels (CTAs, each its own slice and barrier line, as the CUDA kernels' many
/// CTAs): 16 of them at 2 ranks, every count (fewer elements than channels too, which
/// leaves channels empty), every direct kernel that reduces or copies.
#[test]
fn direct_kernels_on_sixteen_channels_match_the_reference() {
    let cases = [
        (Collective::AllReduce, Algorithm::Direct, DataType::F32),
        (Collective::AllReduce, Algorithm::DirectOneShot, DataType::I32),
        (Collective::ReduceScatter, Algorithm::Direct, DataType::BF16),
        (Collective::Reduce, Algorithm::Direct, DataType::F64),
        (Collective::AllGather, Algorithm::Direct, DataType::U8),
        (Collective::Broadcast, Algorithm::Direct, DataType::F16),
    ];
    let (mut runs, mut failures) = (0, Vec::new());
    for (coll, algo, dtype) in cases {
        let w = world_on_channels(&[Device::host(0), Device::host(1)], algo, 16, Mem::Registered);
        let ops = if coll.reduces() { vec![Some(Op::Sum), Some(Op::Max)] } else { vec![None] };
        let samples: Vec<_> = ops.into_iter().map(|o| (dtype, o)).collect();
        let (r, f) = check_cases(&w, coll, &samples, &format!("{coll} {algo} x16"));
        runs += r;
        failures.extend(f);
    }
    assert!(failures.is_empty(), "{} of {runs} runs failed:\n{}", failures.len(), failures.join("\n"));
}

/// The most channels a rank may have (`MAX_CHANNELS`): every channel's line of the flags
/// area, past the 32 there were before, on registered and symmetric buffers.
#[test]
fn direct_kernels_on_the_most_channels_match_the_reference() {
    let cases = [
        (Collective::AllReduce, Algorithm::Direct, DataType::F32, Mem::Registered),
        (Collective::AllReduce, Algorithm::DirectOneShot, DataType::I32, Mem::Symmetric),
        (Collective::AllGather, Algorithm::Direct, DataType::U8, Mem::Symmetric),
    ];
    let (mut runs, mut failures) = (0, Vec::new());
    for (coll, algo, dtype, mem) in cases {
        let w = world_on_channels(&[Device::host(0), Device::host(1)], algo, jitccl::MAX_CHANNELS, mem);
        let op = coll.reduces().then_some(Op::Sum);
        let (r, f) = check_counts(&w, coll, &[(dtype, op)], &[0, 1, 4099, 70_001], &format!("{coll} {algo} x64"));
        runs += r;
        failures.extend(f);
    }
    assert!(failures.is_empty(), "{} of {runs} runs failed:\n{}", failures.len(), failures.join("\n"));
}

/// Ranks with a short timeout and no forced algorithm.
fn plain_world(n: usize, timeout: Duration, algo: Option<Algorithm>) -> World {
    let cfg = Config { timeout: Some(timeout), algo, ..Config::default() };
    let comms = Comm::init_all(n, &cfg).unwrap();
    let streams = comms.iter().map(|c| c.device().stream().unwrap()).collect();
    World { comms, streams, mem: Mem::Symmetric }
}

#[test]
fn the_tuner_runs_registered_buffers_directly_and_results_match() {
    // No forced algorithm: the model picks the direct ones for registered buffers (large
    // sizes); results are checked like every sweep.
    let w = plain_world(3, Duration::from_secs(60), None);
    for coll in [Collective::AllReduce, Collective::ReduceScatter, Collective::AllGather, Collective::Broadcast] {
        for count in [1, 100_003] {
            let op = coll.reduces().then_some(Op::Sum);
            check::<f32>(&w, coll, op, count, false).unwrap();
            check::<f32>(&w, coll, op, count, true).unwrap();
        }
    }
}

#[test]
fn plain_and_registered_calls_of_one_shape_alternate_on_one_communicator() {
    // Each call is planned for its own buffers: a plain call right after a direct one of
    // the same collective, type and size must not reuse its plan, which names peers'
    // registrations that plain buffers do not have (and the other way round).
    let mut w = plain_world(3, Duration::from_secs(60), None);
    for mem in [Mem::Symmetric, Mem::Plain, Mem::Registered, Mem::Plain, Mem::Symmetric] {
        w.mem = mem;
        for in_place in [false, true] {
            check::<f32>(&w, Collective::AllReduce, Some(Op::Sum), 100_003, in_place)
                .unwrap_or_else(|e| panic!("{mem:?} in place {in_place}: {e}"));
        }
    }
}

#[test]
fn allocations_that_differ_across_ranks_fail_on_every_rank() {
    let w = plain_world(3, Duration::from_secs(20), None);
    let res = w.on_all(|r, c| c.alloc_symmetric::<f32>(if r == 1 { 10 } else { 12 }).map(|_| ()));
    for (r, e) in res.into_iter().enumerate() {
        let e = e.unwrap_err();
        assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("same allocations")), "rank {r}: {e}");
    }
    // The communicator is still usable, and the next allocations agree.
    let bufs = w.alloc::<f32>(4, &mut Vec::new());
    assert_eq!(bufs.len(), 3);
}

#[test]
fn a_forced_direct_algorithm_runs_on_plain_buffers_which_live_in_the_arena() {
    // Every rank's plain buffers are in the host arena, which all ranks address: a forced
    // direct algorithm runs on them, and on plain and symmetric buffers mixed.
    // (A forced direct algorithm refuses buffers the peers cannot address: see
    // `cli/tests/symmetric_processes.rs`, where one process has no arena.)
    let mut w = plain_world(2, Duration::from_secs(20), Some(Algorithm::Direct));
    w.mem = Mem::Plain;
    for in_place in [false, true] {
        check::<f32>(&w, Collective::AllReduce, Some(Op::Sum), 1001, in_place).unwrap();
    }
    let sym = w.on_all(|_, c| c.alloc_symmetric::<f32>(8).unwrap());
    let plain = w.on_all(|r, c| c.device().alloc_from(&[r as f32 + 1.0; 8]).unwrap());
    for (r, (c, s)) in w.comms.iter().zip(&w.streams).enumerate() {
        c.all_reduce(&plain[r], &sym[r], 8, Op::Sum, s).unwrap();
    }
    for (r, s) in w.streams.iter().enumerate() {
        s.synchronize().unwrap();
        assert_eq!(sym[r].to_vec(), vec![3.0; 8], "rank {r}");
    }
}

#[test]
fn ranks_naming_different_registrations_fail_not_mix_them() {
    let w = plain_world(2, Duration::from_secs(20), Some(Algorithm::Direct));
    let a = w.on_all(|_, c| c.alloc_symmetric::<i32>(64).unwrap());
    let b = w.on_all(|_, c| c.alloc_symmetric::<i32>(64).unwrap());
    // Rank 0 reduces in a, rank 1 in b.
    w.comms[0].all_reduce(&a[0], &a[0], 64, Op::Sum, &w.streams[0]).unwrap();
    w.comms[1].all_reduce(&b[1], &b[1], 64, Op::Sum, &w.streams[1]).unwrap();
    for (r, s) in w.streams.iter().enumerate() {
        let e = s.synchronize().unwrap_err();
        assert!(matches!(&e, Error::InvalidUsage(m) if m.contains("buffers in other registrations")), "rank {r}: {e}");
    }
}

#[test]
fn a_peer_that_never_joins_a_direct_call_is_a_timeout_naming_it() {
    let w = plain_world(3, Duration::from_secs(2), Some(Algorithm::DirectOneShot));
    let bufs = w.on_all(|_, c| c.alloc_symmetric::<f32>(1000).unwrap());
    // Ranks 0 and 1 call; rank 2 never does.
    for ((c, s), b) in w.comms.iter().zip(&w.streams).zip(&bufs).take(2) {
        c.all_reduce(b, b, 1000, Op::Sum, s).unwrap();
    }
    let e = w.streams[0].synchronize().unwrap_err();
    assert!(
        matches!(&e, Error::Timeout { rank: 0, peer: 2, waiting: "the barrier of", .. }),
        "rank 0 should time out waiting for rank 2: {e}"
    );
    let e = w.streams[1].synchronize().unwrap_err();
    assert!(e.to_string().contains("rank 2") || e.to_string().contains("peer 2"), "rank 1: {e}");
}

#[test]
fn an_aborted_rank_ends_its_direct_kernel() {
    let w = plain_world(2, Duration::from_secs(60), Some(Algorithm::Direct));
    let bufs = w.on_all(|_, c| c.alloc_symmetric::<f32>(100).unwrap());
    w.comms[0].all_reduce(&bufs[0], &bufs[0], 100, Op::Sum, &w.streams[0]).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    w.comms[0].abort();
    let e = w.streams[0].synchronize().unwrap_err();
    assert!(matches!(&e, Error::Aborted { rank: 0, .. }), "{e}");
}

/// PreMulSum with each rank's multiplier read from its memory by the kernel when it runs:
/// the direct kernels apply every rank's own, as it published it.
#[test]
fn premul_sum_read_by_the_direct_kernels() {
    for (coll, algo, n) in [
        (Collective::AllReduce, Algorithm::Direct, 3),
        (Collective::AllReduce, Algorithm::DirectOneShot, 2),
        (Collective::ReduceScatter, Algorithm::Direct, 3),
        (Collective::Reduce, Algorithm::Direct, 2),
    ] {
        let w = world(n, algo, 2, Mem::Symmetric);
        world::check_premul_at(&w, coll, ALL_TYPES, &format!("{coll} {algo} n={n}"));
    }
}
