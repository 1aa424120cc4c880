//! The CUDA target. Without a GPU (this machine, CI): every CUDA entry point fails with a
//! clear error, never a panic. With one (`tools/gpu-check.sh run`): every collective x
//! algorithm x protocol over a sample of datatypes and every op, 1, 2, 4 and 8 ranks on one
//! GPU, checked against the reference; a rank that never arrives is a timeout, an abort
//! ends a waiting kernel.
//!
//! The GPU tests return early where there is no GPU unless `JITCCL_REQUIRE_GPU=1`, which
//! gpu-check sets: there a missing GPU is a failure.

#[path = "common/world.rs"]
mod world;

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use jitccl::{Algorithm, Collective, Comm, Config, DataType, Device, Error, Op, Protocol, UniqueId};
use world::{assert_past, check_cases, world_on, world_on_channels, Mem, World, OPS};

/// GPU 0 and this test's turn on it, or None (the test returns) where there is none and
/// none is required. One GPU test runs at a time: a test that frees or maps memory (a
/// world's teardown, `cuMemFree`, `cuMemFreeHost`) makes the driver wait for the whole
/// device, while another test's kernels spin for a peer whose launch waits behind that
/// driver call. On the first H100 run, 8 tests at once stalled each other until their 60 s
/// timeouts.
fn gpu(test: &str) -> Option<(Device, MutexGuard<'static, ()>)> {
    static TURN: Mutex<()> = Mutex::new(());
    match Device::cuda(0) {
        // A test that failed holding the turn leaves nothing to clean up.
        Ok(d) => Some((d, TURN.lock().unwrap_or_else(|e| e.into_inner()))),
        Err(e) if std::env::var("JITCCL_REQUIRE_GPU").as_deref() == Ok("1") => {
            panic!("JITCCL_REQUIRE_GPU=1 but {e}")
        }
        Err(e) => {
            println!("skipping {test}: {e}");
            None
        }
    }
}

#[test]
fn without_a_driver_every_cuda_entry_point_is_a_clear_error() {
    if jitccl::cuda_device_count().is_ok() {
        // A GPU machine: a device it does not have is the error to check.
        let e = Device::cuda(4096).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)) && e.to_string().contains("CUDA device 4096"), "{e}");
        return;
    }
    let e = Device::cuda(0).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Unsupported(_)), "{msg}");
    assert!(msg.contains("CUDA device 0") && (msg.contains("libcuda.so") || msg.contains("driver")), "{msg}");
    // The variant built by hand fails as clearly wherever it is used.
    let dev = Device::Cuda { ordinal: 0 };
    assert!(matches!(dev.alloc::<f32>(16), Err(Error::Unsupported(_))));
    assert!(matches!(dev.stream(), Err(Error::Unsupported(_))));
    let cfg = Config { nchannels: Some(1), ..Config::default() };
    assert!(matches!(Comm::init_all_on(&[dev.clone(), dev], &cfg), Err(Error::Unsupported(_))));
}

#[test]
fn ranks_of_one_communicator_are_on_one_target() {
    let e = Comm::init_all_on(&[Device::host(0), Device::Cuda { ordinal: 0 }], &Config::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)) && e.to_string().contains("all be on host or all on CUDA"), "{e}");
    assert!(matches!(Comm::init_all_on(&[], &Config::default()), Err(Error::InvalidArgument(_))));
}

#[test]
fn without_a_driver_a_process_rank_on_cuda_is_refused_before_any_rendezvous() {
    if jitccl::cuda_device_count().is_ok() {
        return; // a GPU machine: gpu_process_ranks_* run ranks of processes there
    }
    let cfg = Config { device: Some(Device::Cuda { ordinal: 0 }), ..Config::default() };
    let t0 = Instant::now();
    let e = Comm::init_rank(&UniqueId::new().unwrap(), 2, 1, &cfg).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Unsupported(_)), "{msg}");
    assert!(msg.contains("rank 1") && msg.contains("CUDA device 0") && msg.contains("libcuda.so"), "{msg}");
    assert!(t0.elapsed() < Duration::from_secs(5), "it must not wait for the other rank");
}

/// Ranks joined with `init_rank` on GPU 0 (threads of this process, so they reach each
/// other's device FIFOs by address; boards in page-locked shared memory), forced to
/// `algo`/`proto` with tiny FIFO slots as `world_on` does.
fn init_rank_world(dev: &Device, n: usize, algo: Algorithm, proto: Protocol) -> world::World {
    let cfg = Config {
        device: Some(dev.clone()),
        nchannels: Some(2),
        algo: Some(algo),
        proto: Some(proto),
        timeout: Some(Duration::from_secs(60)),
        slot_bytes: Some([256, 64, 256]),
        ..Config::default()
    };
    let id = UniqueId::new().unwrap();
    let comms: Vec<Comm> = std::thread::scope(|s| {
        let joins: Vec<_> = (0..n)
            .map(|r| {
                s.spawn({
                    let cfg = cfg.clone();
                    move || Comm::init_rank(&id, n, r, &cfg)
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap().expect("init_rank on a GPU")).collect()
    });
    let streams = comms.iter().map(|c| c.device().stream().expect("stream")).collect();
    world::World { comms, streams, mem: world::Mem::Plain }
}

#[test]
fn gpu_init_rank_ranks_on_one_gpu_match_the_reference() {
    let Some((dev, _turn)) = gpu("gpu_init_rank_ranks_on_one_gpu_match_the_reference") else { return };
    let (mut failures, mut runs) = (Vec::new(), 0);
    for (coll, algo, proto, n) in [
        (Collective::AllReduce, Algorithm::Ring, Protocol::Simple, 2),
        (Collective::AllReduce, Algorithm::Ring, Protocol::LL, 3),
        (Collective::AllReduce, Algorithm::Tree, Protocol::LL128, 4),
        (Collective::AllGather, Algorithm::Ring, Protocol::Simple, 3),
    ] {
        let w = init_rank_world(&dev, n, algo, proto);
        let (r, f) = check_cases(&w, coll, &samples(coll), &format!("init_rank {coll} {algo}/{proto} n={n}"));
        runs += r;
        failures.extend(f);
    }
    assert!(failures.is_empty(), "{} of {runs} runs failed:\n{}", failures.len(), failures.join("\n"));
    println!("init_rank on {dev:?}: {runs} runs passed");
}

#[test]
fn host_buffers_are_refused_by_a_cuda_communicator_and_back() {
    let comms = Comm::init_all(1, &Config { nchannels: Some(1), ..Config::default() }).unwrap();
    let s = comms[0].device().stream().unwrap();
    let Some((dev, _turn)) = gpu("host_buffers_are_refused_by_a_cuda_communicator_and_back") else { return };
    let on_gpu = dev.alloc::<f32>(8).unwrap();
    let e = comms[0].all_reduce(&on_gpu, &on_gpu, 8, Op::Sum, &s).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)) && e.to_string().contains("a buffer is on Cuda"), "{e}");
}

#[test]
fn gpu_buffers_copy_both_ways_and_slices_address_their_part() {
    let Some((dev, _turn)) = gpu("gpu_buffers_copy_both_ways_and_slices_address_their_part") else { return };
    println!("{}", dev.describe().unwrap());
    let b = dev.alloc_from(&(0..1000).collect::<Vec<i64>>()).unwrap();
    assert_eq!(b.to_vec(), (0..1000).collect::<Vec<i64>>());
    b.slice(10..20).unwrap().copy_from_host(&[-1; 10]).unwrap();
    let mut part = [0i64; 12];
    b.slice(9..21).unwrap().copy_to_host(&mut part).unwrap();
    assert_eq!(part, [9, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 20]);
    assert_eq!(dev.alloc::<f32>(0).unwrap().to_vec(), Vec::<f32>::new());
    assert!(dev.alloc::<u8>(3).unwrap().to_vec().iter().all(|&x| x == 0), "allocations are zeroed");
}

/// Reducing collectives: every op on f32 and i32, Sum and Max on the other sampled types.
fn samples(coll: Collective) -> Vec<(DataType, Option<Op>)> {
    if !coll.reduces() {
        return [DataType::U8, DataType::F16, DataType::F64].iter().map(|&d| (d, None)).collect();
    }
    let mut v: Vec<_> =
        [DataType::F32, DataType::I32].iter().flat_map(|&d| OPS.iter().map(move |&o| (d, Some(o)))).collect();
    for d in [DataType::F16, DataType::BF16, DataType::F64, DataType::U8, DataType::F8E4M3] {
        v.extend([(d, Some(Op::Sum)), (d, Some(Op::Max))]);
    }
    v
}

/// `coll` with `algo`/`proto` on `ranks` ranks of GPU 0 for every sample, count and
/// placement, the buffers allocated as `mem` says; fails listing every combination that
/// went wrong.
fn sweep(coll: Collective, algo: Algorithm, proto: Protocol, ranks: &[usize], mem: Mem) {
    let Some((dev, _turn)) = gpu(&format!("{coll} {algo}/{proto}")) else { return };
    let (mut failures, mut runs) = (Vec::new(), 0);
    for &n in ranks {
        let nchannels = 1 + n % 3;
        let w = world_on(&vec![dev.clone(); n], algo, proto, nchannels).with_mem(mem);
        let (r, f) = check_cases(&w, coll, &samples(coll), &format!("{coll} {algo}/{proto} {mem:?} n={n}"));
        runs += r;
        failures.extend(f);
    }
    assert!(failures.is_empty(), "{} of {runs} runs failed:\n{}", failures.len(), failures.join("\n"));
    println!("{coll} {algo}/{proto}: {runs} runs passed on {dev:?}");
}

macro_rules! gpu_sweeps {
    ($($name:ident: $coll:ident $algo:ident $proto:ident $ranks:expr $(, $mem:ident)?;)+) => {$(
        #[test]
        fn $name() {
            sweep(Collective::$coll, Algorithm::$algo, Protocol::$proto, &$ranks, mem!($($mem)?));
        }
    )+};
}

/// A sweep's buffers: plain unless named.
macro_rules! mem {
    () => {
        Mem::Plain
    };
    ($mem:ident) => {
        Mem::$mem
    };
}

gpu_sweeps! {
    gpu_all_reduce_ring_simple: AllReduce Ring Simple [1, 2, 4, 8];
    gpu_all_reduce_ring_ll: AllReduce Ring LL [2, 4];
    gpu_all_reduce_ring_ll128: AllReduce Ring LL128 [2, 4];
    gpu_all_reduce_tree_simple: AllReduce Tree Simple [2, 4];
    gpu_all_reduce_tree_ll: AllReduce Tree LL [4, 8];
    gpu_all_reduce_tree_ll128: AllReduce Tree LL128 [2, 4];
    gpu_all_reduce_oneshot_simple: AllReduce OneShot Simple [1, 4];
    gpu_all_reduce_oneshot_ll: AllReduce OneShot LL [2, 8];
    gpu_all_reduce_oneshot_ll128: AllReduce OneShot LL128 [4];
    gpu_all_reduce_recursive_doubling_simple: AllReduce RecursiveDoubling Simple [2, 3];
    gpu_all_reduce_recursive_doubling_ll: AllReduce RecursiveDoubling LL [4, 6];
    gpu_all_reduce_recursive_doubling_ll128: AllReduce RecursiveDoubling LL128 [8];
    gpu_reduce_ring_simple: Reduce Ring Simple [1, 4];
    gpu_reduce_ring_ll: Reduce Ring LL [2, 8];
    gpu_reduce_ring_ll128: Reduce Ring LL128 [4];
    gpu_reduce_scatter_ring_simple: ReduceScatter Ring Simple [1, 4];
    gpu_reduce_scatter_ring_ll: ReduceScatter Ring LL [2];
    gpu_reduce_scatter_ring_ll128: ReduceScatter Ring LL128 [4, 8];
    gpu_broadcast_ring_simple: Broadcast Ring Simple [1, 2, 4];
    gpu_broadcast_ring_ll: Broadcast Ring LL [4, 8];
    gpu_broadcast_ring_ll128: Broadcast Ring LL128 [2];
    gpu_all_gather_ring_simple: AllGather Ring Simple [1, 4, 8];
    gpu_all_gather_ring_ll: AllGather Ring LL [2];
    gpu_all_gather_ring_ll128: AllGather Ring LL128 [4];
    gpu_sendrecv_simple: SendRecv Ring Simple [1, 2, 4];
    gpu_sendrecv_ll: SendRecv Ring LL [4];
    gpu_sendrecv_ll128: SendRecv Ring LL128 [2, 8];
}

// The direct algorithms: ranks as threads on GPU 0 load from and store to each other's
// registered (`Comm::register`) or symmetric (`Comm::alloc_symmetric`) buffers.
gpu_sweeps! {
    gpu_direct_all_reduce_registered: AllReduce Direct Simple [2, 4, 8], Registered;
    gpu_direct_all_reduce_oneshot_registered: AllReduce DirectOneShot Simple [2, 4, 8], Registered;
    gpu_direct_all_reduce_symmetric: AllReduce Direct Simple [1, 3], Symmetric;
    gpu_direct_reduce_scatter_registered: ReduceScatter Direct Simple [2, 4, 8], Registered;
    gpu_direct_all_gather_registered: AllGather Direct Simple [2, 4, 8], Registered;
    gpu_direct_broadcast_registered: Broadcast Direct Simple [2, 4, 8], Registered;
    gpu_direct_reduce_registered: Reduce Direct Simple [2, 4, 8], Registered;
    gpu_direct_all_to_all_symmetric: AllToAll Direct Simple [2, 4], Symmetric;
    gpu_direct_gather_registered: Gather Direct Simple [3], Registered;
    gpu_direct_scatter_symmetric: Scatter Direct Simple [4], Symmetric;
}

/// Many CTAs: 16 channels (a CTA each, each its own slice and barrier line), counts just
/// past 8 MiB (many tiles per CTA), every direct kernel that reduces or copies at 2 and 4
/// ranks on GPU 0, registered buffers.
#[test]
fn gpu_direct_kernels_on_sixteen_ctas_match_the_reference() {
    let Some((dev, _turn)) = gpu("direct, 16 CTAs") else { return };
    let cases = [
        (Collective::AllReduce, Algorithm::Direct, &[DataType::F32, DataType::BF16][..]),
        (Collective::AllReduce, Algorithm::DirectOneShot, &[DataType::F32][..]),
        (Collective::ReduceScatter, Algorithm::Direct, &[DataType::I32][..]),
        (Collective::Reduce, Algorithm::Direct, &[DataType::F64][..]),
        (Collective::AllGather, Algorithm::Direct, &[DataType::U8][..]),
        (Collective::Broadcast, Algorithm::Direct, &[DataType::F16][..]),
    ];
    for n in [2, 4] {
        assert_past(&cases, 8 << 20, "x16", |_, algo| {
            world_on_channels(&vec![dev.clone(); n], algo, 16, Mem::Registered)
        });
    }
}

/// Direct kernels' failures on the GPU, every CTA leaving together (thread 0's result
/// handed to the block): three ranks, rank 2 never calls, so ranks 0 and 1 time out
/// naming it; then two ranks naming different registrations fail, not mix them.
#[test]
fn gpu_direct_a_missing_peer_is_a_timeout_and_different_registrations_fail() {
    let Some((dev, _turn)) = gpu("direct failures") else { return };
    let cfg = Config {
        nchannels: Some(4),
        algo: Some(Algorithm::DirectOneShot),
        timeout: Some(Duration::from_secs(2)),
        ..Config::default()
    };
    let comms = Comm::init_all_on(&vec![dev.clone(); 3], &cfg).unwrap();
    let w = World { comms, streams: (0..3).map(|_| dev.stream().unwrap()).collect(), mem: Mem::Symmetric };
    let bufs = w.on_all(|_, c| c.alloc_symmetric::<f32>(100_000).unwrap());
    for ((c, s), b) in w.comms.iter().zip(&w.streams).zip(&bufs).take(2) {
        c.all_reduce(b, b, 100_000, Op::Sum, s).unwrap();
    }
    let e = w.streams[0].synchronize().unwrap_err();
    assert!(matches!(&e, Error::Timeout { rank: 0, peer: 2, waiting: "the barrier of", .. }), "{e}");
    let e = w.streams[1].synchronize().unwrap_err();
    assert!(e.to_string().contains("rank 2") || e.to_string().contains("peer 2"), "rank 1: {e}");

    let cfg = Config { algo: Some(Algorithm::Direct), timeout: Some(Duration::from_secs(20)), ..cfg };
    let comms = Comm::init_all_on(&[dev.clone(), dev.clone()], &cfg).unwrap();
    let w = World { comms, streams: (0..2).map(|_| dev.stream().unwrap()).collect(), mem: Mem::Symmetric };
    let a = w.on_all(|_, c| c.alloc_symmetric::<i32>(4096).unwrap());
    let b = w.on_all(|_, c| c.alloc_symmetric::<i32>(4096).unwrap());
    w.comms[0].all_reduce(&a[0], &a[0], 4096, Op::Sum, &w.streams[0]).unwrap();
    w.comms[1].all_reduce(&b[1], &b[1], 4096, Op::Sum, &w.streams[1]).unwrap();
    for (r, s) in w.streams.iter().enumerate() {
        let e = s.synchronize().unwrap_err();
        assert!(matches!(&e, Error::InvalidUsage(m) if m.contains("buffers in other registrations")), "rank {r}: {e}");
    }
}

/// Two ranks on the GPU; rank 1 never launches: rank 0's kernel gives up after the
/// timeout with an error naming the peer, instead of hanging the GPU.
#[test]
fn gpu_a_rank_that_never_arrives_is_a_timeout() {
    let Some((dev, _turn)) = gpu("gpu_a_rank_that_never_arrives_is_a_timeout") else { return };
    let cfg = Config { nchannels: Some(1), timeout: Some(Duration::from_secs(2)), ..Config::default() };
    let comms = Comm::init_all_on(&[dev.clone(), dev.clone()], &cfg).unwrap();
    let s = dev.stream().unwrap();
    let b = dev.alloc::<f32>(1024).unwrap();
    let t0 = Instant::now();
    comms[0].recv(&b, 1024, 1, &s).unwrap();
    let e = s.synchronize().unwrap_err();
    assert!(matches!(e, Error::Timeout { rank: 0, peer: 1, channel: 0, .. }), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(20), "took {:?}", t0.elapsed());
    // The failure stays: later calls fail at once.
    assert!(comms[0].all_reduce(&b, &b, 1024, Op::Sum, &s).is_err());
}

/// An abort from another thread ends a kernel waiting on a peer that never comes.
#[test]
fn gpu_an_abort_ends_a_waiting_kernel() {
    let Some((dev, _turn)) = gpu("gpu_an_abort_ends_a_waiting_kernel") else { return };
    let cfg = Config { nchannels: Some(2), timeout: Some(Duration::from_secs(120)), ..Config::default() };
    let comms = Comm::init_all_on(&[dev.clone(), dev.clone()], &cfg).unwrap();
    let s = dev.stream().unwrap();
    let b = dev.alloc::<f32>(1 << 16).unwrap();
    comms[0].all_reduce(&b, &b, 1 << 16, Op::Sum, &s).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    comms[0].abort();
    let e = s.synchronize().unwrap_err();
    assert!(matches!(e, Error::Aborted { rank: 0, .. }), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(10), "took {:?}", t0.elapsed());
}

/// Two ranks on GPU 0 and a stream each, both driven by this thread.
fn pair(dev: &Device) -> (Vec<Comm>, Vec<jitccl::Stream>) {
    let cfg = Config { nchannels: Some(2), timeout: Some(Duration::from_secs(60)), ..Config::default() };
    let comms = Comm::init_all_on(&[dev.clone(), dev.clone()], &cfg).unwrap();
    let streams = comms.iter().map(|_| dev.stream().unwrap()).collect();
    (comms, streams)
}

/// 2 ranks, 64 in-place Sum AllReduces queued back to back on each rank's stream by one
/// thread, with no wait in between (launches are asynchronous; waited for one by one on
/// this thread, the first would wait for rank 1's, never launched), then one synchronize:
/// from 1 and 2, every element is 3 * 2^63 on both ranks, which f32 holds exactly.
#[test]
fn gpu_back_to_back_queued_calls_match_the_reference() {
    let Some((dev, _turn)) = gpu("gpu_back_to_back_queued_calls_match_the_reference") else { return };
    let (comms, streams) = pair(&dev);
    let n = 4099;
    let bufs: Vec<_> = (0..2).map(|r| dev.alloc_from(&vec![(r + 1) as f32; n]).unwrap()).collect();
    let t0 = Instant::now();
    for _ in 0..64 {
        for r in 0..2 {
            comms[r].all_reduce(&bufs[r], &bufs[r], n, Op::Sum, &streams[r]).unwrap();
        }
    }
    let queued = t0.elapsed();
    streams.iter().for_each(|s| s.synchronize().unwrap());
    let want = 3.0f32 * 2f32.powi(63);
    for (r, b) in bufs.iter().enumerate() {
        let got = b.to_vec();
        assert!(got.iter().all(|&x| x == want), "rank {r}: {:?}", &got[..4]);
    }
    println!(
        "128 calls queued in {queued:?}, all done in {:?} (JITCCL_CUDA_SYNC={})",
        t0.elapsed(),
        jitccl::cuda_sync_launches()
    );
}

/// A shift in place over 4 channels, 8 rounds queued back to back (`world::shift_in_place`):
/// on a GPU nothing of the host runs between queued launches, so the kernels clear the
/// channels' counters themselves.
#[test]
fn gpu_a_shift_in_place_over_several_channels_sends_what_was_there() {
    let Some((dev, _turn)) = gpu("gpu_a_shift_in_place_over_several_channels_sends_what_was_there") else { return };
    world::shift_in_place(&dev);
}

/// A CUDA graph of 3 in-place Sum AllReduces per rank, captured (nothing runs then),
/// replayed twice: the same as 6 eager calls; an eager call after the replays is ordered
/// after them. With JITCCL_CUDA_SYNC=1 a capture is refused, saying why.
#[test]
fn gpu_a_captured_graph_replays_collectives_as_eager_calls_do() {
    let Some((dev, _turn)) = gpu("gpu_a_captured_graph_replays_collectives_as_eager_calls_do") else { return };
    let (comms, streams) = pair(&dev);
    if jitccl::cuda_sync_launches() {
        let e = streams[0].begin_capture().unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)) && e.to_string().contains("JITCCL_CUDA_SYNC=1"), "{e}");
        return;
    }
    let n = 1001;
    let bufs: Vec<_> = (0..2).map(|r| dev.alloc_from(&vec![(r + 1) as f32; n]).unwrap()).collect();
    let all = |want: f32, what: &str| {
        for (r, b) in bufs.iter().enumerate() {
            let got = b.to_vec();
            assert!(got.iter().all(|&x| x == want), "{what}: rank {r}: {:?}, want {want}", &got[..4]);
        }
    };
    let eager = |r: usize| comms[r].all_reduce(&bufs[r], &bufs[r], n, Op::Sum, &streams[r]).unwrap();
    (0..2).for_each(eager);
    streams.iter().for_each(|s| s.synchronize().unwrap());
    all(3.0, "eager");
    streams.iter().for_each(|s| s.begin_capture().unwrap());
    for _ in 0..3 {
        (0..2).for_each(eager);
    }
    let graphs: Vec<_> = streams.iter().map(|s| s.end_capture().unwrap()).collect();
    assert!(graphs.iter().all(|g| g.len() == 3));
    streams.iter().for_each(|s| s.synchronize().unwrap());
    all(3.0, "captured, not run");
    for _ in 0..2 {
        graphs.iter().zip(&streams).for_each(|(g, s)| g.launch(s).unwrap());
    }
    (0..2).for_each(eager);
    streams.iter().for_each(|s| s.synchronize().unwrap());
    graphs.iter().for_each(|g| g.check().unwrap());
    all(3.0 * 2f32.powi(7), "two replays of three, then one eager");
}
