//! AlltoAll, AlltoAllv, Gather and Scatter on the host target, for 1..8 ranks, every
//! listed datatype and odd and zero counts, each compared with a plain reference: the
//! block rank `src` sends rank `dst` holds `inputs(src * 64 + dst)`, so a block that lands
//! in the wrong place shows. AlltoAll, Gather and Scatter run both ways: as point-to-point
//! rounds (the ring's place) and as the direct kernel on the ranks' host arenas (one
//! launch; AlltoAllv: the direct point-to-point kernel). Bad arguments return InvalidArgument and change nothing;
//! a rank that does not join fails the direct kernels of the others, which name it.
//! Ranks as processes: `cli/tests/symmetric_processes.rs` and `cli/tests/dead_peer.rs`.

use std::time::Duration;

use jitccl::reference::{inputs, RefElement};
use jitccl::{with_element_type, Algorithm, Comm, Config, DataType, DeviceBuffer, Error, Stream};

const COUNTS: &[usize] = &[0, 1, 7, 1001];
const TYPES: &[DataType] = &[
    DataType::I8,
    DataType::U8,
    DataType::I32,
    DataType::F16,
    DataType::BF16,
    DataType::F32,
    DataType::F64,
    DataType::U64,
];

struct World {
    comms: Vec<Comm>,
    streams: Vec<Stream>,
}

/// `n` ranks as threads running `algo` (None: the tuner's choice).
fn world(n: usize, algo: Option<Algorithm>) -> World {
    // Small FIFO slots, so that 1001 elements take many steps and wrap the FIFOs.
    let cfg =
        Config { timeout: Some(Duration::from_secs(60)), slot_bytes: Some([256, 64, 256]), algo, ..Config::default() };
    let comms = Comm::init_all(n, &cfg).expect("init_all");
    let streams = comms.iter().map(|c| c.device().stream().expect("stream")).collect();
    World { comms, streams }
}

impl World {
    fn n(&self) -> usize {
        self.comms.len()
    }
    fn sync(&self) {
        for s in &self.streams {
            s.synchronize().expect("synchronize");
        }
    }
}

/// What rank `src` sends rank `dst`.
fn block<T: RefElement>(src: usize, dst: usize, count: usize) -> Vec<T> {
    inputs(None, src * 64 + dst, count)
}

fn sentinel<T: RefElement>(len: usize) -> Vec<T> {
    vec![T::from_f64(3.0); len]
}

fn all_to_all<T: RefElement>(w: &World, count: usize) -> Result<(), String> {
    let n = w.n();
    let mut outs = Vec::new();
    for (r, (c, s)) in w.comms.iter().zip(&w.streams).enumerate() {
        let send = c.device().alloc_from(&(0..n).flat_map(|q| block::<T>(r, q, count)).collect::<Vec<_>>()).unwrap();
        let recv = c.device().alloc::<T>(n * count).unwrap();
        c.all_to_all(&send, &recv, count, s).map_err(|e| format!("rank {r}: {e}"))?;
        outs.push(recv);
    }
    w.sync();
    for (r, out) in outs.iter().enumerate() {
        let want: Vec<T> = (0..n).flat_map(|q| block::<T>(q, r, count)).collect();
        compare(r, &out.to_vec(), &want)?;
    }
    Ok(())
}

/// Uneven counts, zeros included, with gaps between blocks and blocks out of rank order:
/// rank r sends `(r + q + count) % 5` elements to rank q... scaled by `count`'s size.
fn all_to_allv<T: RefElement>(w: &World, count: usize) -> Result<(), String> {
    let n = w.n();
    let size = |src: usize, dst: usize| ((src + 2 * dst + count) % 5) * count / 3;
    // Reversed placement with a gap of 2 after every block.
    let displs = |sizes: &[usize]| -> (Vec<usize>, usize) {
        let mut d = vec![0; n];
        let mut at = 0;
        for q in (0..n).rev() {
            d[q] = at;
            at += sizes[q] + 2;
        }
        (d, at)
    };
    let mut outs = Vec::new();
    for (r, (c, s)) in w.comms.iter().zip(&w.streams).enumerate() {
        let send_counts: Vec<usize> = (0..n).map(|q| size(r, q)).collect();
        let recv_counts: Vec<usize> = (0..n).map(|q| size(q, r)).collect();
        let ((send_displs, send_len), (recv_displs, recv_len)) = (displs(&send_counts), displs(&recv_counts));
        let mut host = sentinel::<T>(send_len);
        for q in 0..n {
            host[send_displs[q]..][..send_counts[q]].copy_from_slice(&block::<T>(r, q, send_counts[q]));
        }
        let send = c.device().alloc_from(&host).unwrap();
        let recv = c.device().alloc_from(&sentinel::<T>(recv_len)).unwrap();
        c.all_to_allv(&send, &send_counts, &send_displs, &recv, &recv_counts, &recv_displs, s)
            .map_err(|e| format!("rank {r}: {e}"))?;
        let mut want = sentinel::<T>(recv_len);
        for q in 0..n {
            want[recv_displs[q]..][..recv_counts[q]].copy_from_slice(&block::<T>(q, r, recv_counts[q]));
        }
        outs.push((recv, want));
    }
    w.sync();
    for (r, (out, want)) in outs.iter().enumerate() {
        compare(r, &out.to_vec(), want)?;
    }
    Ok(())
}

/// Gather (or Scatter) to (from) `root`, in place on the root when `in_place`.
fn rooted<T: RefElement>(w: &World, count: usize, root: usize, scatter: bool, in_place: bool) -> Result<(), String> {
    let n = w.n();
    let mut outs = Vec::new();
    for (r, (c, s)) in w.comms.iter().zip(&w.streams).enumerate() {
        let dev = c.device();
        let res = if scatter {
            let send = if r == root {
                dev.alloc_from(&(0..n).flat_map(|q| block::<T>(root, q, count)).collect::<Vec<_>>()).unwrap()
            } else {
                dev.alloc::<T>(0).unwrap()
            };
            let recv = if in_place && r == root {
                send.slice(r * count..(r + 1) * count).unwrap()
            } else {
                dev.alloc_from(&sentinel::<T>(count)).unwrap()
            };
            outs.push((recv.clone(), block::<T>(root, r, count)));
            c.scatter(&send, &recv, count, root, s)
        } else {
            let recv = dev.alloc_from(&sentinel::<T>(if r == root { n * count } else { 1 })).unwrap();
            let send = if in_place && r == root {
                recv.slice(r * count..(r + 1) * count).unwrap()
            } else {
                dev.alloc(count).unwrap()
            };
            send.copy_from_host(&block::<T>(r, root, count)).unwrap();
            // The recv buffer off the root is not touched.
            let want =
                if r == root { (0..n).flat_map(|q| block::<T>(q, root, count)).collect() } else { sentinel::<T>(1) };
            outs.push((recv.clone(), want));
            c.gather(&send, &recv, count, root, s)
        };
        res.map_err(|e| format!("rank {r}: {e}"))?;
    }
    w.sync();
    for (r, (out, want)) in outs.iter().enumerate() {
        compare(r, &out.to_vec(), want)?;
    }
    Ok(())
}

fn compare<T: RefElement>(r: usize, got: &[T], want: &[T]) -> Result<(), String> {
    // Compared as bits: these collectives move bytes, and NaN != NaN.
    let bits = |v: &[T]| v.iter().map(|x| x.to_f64().to_bits()).collect::<Vec<_>>();
    let (g, w) = (bits(got), bits(want));
    match g.iter().zip(&w).position(|(a, b)| a != b) {
        _ if g.len() != w.len() => Err(format!("rank {r}: {} elements, want {}", g.len(), w.len())),
        Some(i) => Err(format!("rank {r}: first wrong at {i}: got {:?}, want {:?}", got[i].to_f64(), want[i].to_f64())),
        None => Ok(()),
    }
}

/// Runs `f` for every datatype and count on worlds of each size running each of `algos`,
/// listing every failure.
fn sweep(
    ranks: &[usize], algos: &[Option<Algorithm>], what: &str, f: &dyn Fn(&World, DataType, usize) -> Result<(), String>,
) {
    let mut failures = Vec::new();
    let mut runs = 0;
    for &algo in algos {
        for &n in ranks {
            let w = world(n, algo);
            for &d in TYPES {
                for &count in COUNTS {
                    runs += 1;
                    if let Err(e) = f(&w, d, count) {
                        failures.push(format!("{what} {algo:?} n={n} {d} count={count}: {e}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} of {runs} runs failed:\n{}", failures.len(), failures.join("\n"));
}

/// The rounds, the direct kernel, and the tuner's pick.
const BOTH: &[Option<Algorithm>] = &[Some(Algorithm::Ring), Some(Algorithm::Direct), None];

#[test]
fn all_to_all_matches_the_reference() {
    sweep(&[1, 2, 3, 4, 5, 6, 7, 8], BOTH, "all_to_all", &|w, d, count| with_element_type!(d, all_to_all(w, count)));
}

#[test]
fn all_to_allv_matches_the_reference() {
    sweep(&[1, 2, 3, 5, 8], BOTH, "all_to_allv", &|w, d, count| with_element_type!(d, all_to_allv(w, count)));
}

#[test]
fn gather_and_scatter_match_the_reference_at_every_root() {
    sweep(&[1, 2, 3, 4, 7, 8], BOTH, "gather/scatter", &|w, d, count| {
        (0..w.n()).try_for_each(|root| {
            [false, true].into_iter().try_for_each(|scatter| {
                [false, true].into_iter().try_for_each(|in_place| {
                    with_element_type!(d, rooted(w, count, root, scatter, in_place))
                        .map_err(|e| format!("root {root} scatter={scatter} in_place={in_place}: {e}"))
                })
            })
        })
    });
}

/// Calls past a direct kernel's tile and the cache-bypassing size (8 MiB of output), odd
/// in bytes, on 2 and 3 ranks, both ways.
#[test]
fn large_calls_match_the_reference() {
    let mut failures = Vec::new();
    for algo in [Algorithm::Ring, Algorithm::Direct] {
        for n in [2, 3] {
            let w = world(n, Some(algo));
            for d in [DataType::U8, DataType::F16, DataType::F64] {
                let count = (9 << 20) / d.size() / n + 1;
                let res = with_element_type!(d, all_to_all(&w, count)).and_then(|()| {
                    [false, true].into_iter().try_for_each(|sc| with_element_type!(d, rooted(&w, count, 1, sc, false)))
                });
                if let Err(e) = res {
                    failures.push(format!("{algo} n={n} {d}: {e}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Rank 3 of 4 makes `call` (on f32 buffers of 4000 elements: send, recv) twice, the
/// first time only after the others' timeout; each rank's two results.
fn with_a_late_rank(
    algo: Algorithm, call: impl Fn(&Comm, &DeviceBuffer<f32>, &DeviceBuffer<f32>, &Stream) -> jitccl::Result<()> + Sync,
) -> Vec<(jitccl::Result<()>, jitccl::Result<()>)> {
    let cfg = Config { timeout: Some(Duration::from_millis(400)), algo: Some(algo), ..Config::default() };
    let comms = Comm::init_all(4, &cfg).unwrap();
    std::thread::scope(|s| {
        let call = &call;
        let handles: Vec<_> = comms
            .iter()
            .enumerate()
            .map(|(r, c)| {
                s.spawn(move || {
                    let st = c.device().stream().unwrap();
                    let (send, recv) = (c.device().alloc::<f32>(4000).unwrap(), c.device().alloc::<f32>(4000).unwrap());
                    let once = || call(c, &send, &recv, &st).and_then(|()| st.synchronize());
                    if r == 3 {
                        std::thread::sleep(Duration::from_millis(1500));
                    }
                    (once(), once())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Whether `e` blames rank 3.
fn names_rank_3(e: &Error) -> bool {
    match e {
        Error::Timeout { peer, .. } => *peer == 3,
        Error::PeerFailed { culprit, .. } => *culprit == 3,
        _ => false,
    }
}

/// Rank 3 of 4 joins a direct AlltoAll, Gather or Scatter only after the others gave up
/// on it: the call fails on every rank, the others naming rank 3, and a later call fails too.
#[test]
fn a_late_rank_fails_the_direct_kernels_and_is_named() {
    for what in ["all_to_all", "gather", "scatter"] {
        let count = 1000;
        let results = with_a_late_rank(Algorithm::Direct, |c, send, recv, st| {
            let one = send.slice(0..count).unwrap();
            match what {
                "all_to_all" => c.all_to_all(send, recv, count, st),
                "gather" => c.gather(&one, recv, count, 0, st),
                _ => c.scatter(send, &one, count, 0, st),
            }
        });
        for (r, (first, second)) in results.iter().enumerate() {
            let e = first.as_ref().expect_err("a call with a late rank succeeded");
            assert!(names_rank_3(e) || r == 3, "{what}: rank {r} should name late rank 3: {e}");
            assert!(second.is_err(), "{what}: rank {r}: a call on a failed communicator succeeded");
        }
    }
}

/// Rank 3 of 4 joins an AlltoAll over the FIFOs (one batch launch) only after the others
/// gave up on it: the others fail naming rank 3, and their next call fails too. (Rank 3
/// itself may find every block already in its FIFOs.)
#[test]
fn a_late_rank_fails_a_batch_over_the_fifos_and_is_named() {
    let results = with_a_late_rank(Algorithm::Ring, |c, send, recv, st| c.all_to_all(send, recv, 1000, st));
    for (r, (first, second)) in results.iter().enumerate().take(3) {
        let e = first.as_ref().expect_err("a call with a late rank succeeded");
        assert!(names_rank_3(e), "rank {r} should name late rank 3: {e}");
        assert!(second.is_err(), "rank {r}: a call on a failed communicator succeeded");
    }
}

/// Send and receive blocks may share one buffer where none of them overlap, even
/// interleaved (their spans meet): every rank sends block q from `4q` and receives rank q's
/// at `4q + 2`, in one buffer; the elements between stay as they were.
#[test]
fn interleaved_blocks_of_one_buffer_exchange() {
    let w = world(3, None);
    let n = w.n();
    let mut bufs = Vec::new();
    for (r, (c, s)) in w.comms.iter().zip(&w.streams).enumerate() {
        let mut host = sentinel::<i32>(4 * n);
        for q in 0..n {
            host[4 * q..][..2].copy_from_slice(&block::<i32>(r, q, 2));
        }
        let buf = c.device().alloc_from(&host).unwrap();
        let (counts, sends, recvs) = ([2; 3], [0, 4, 8], [2, 6, 10]);
        c.all_to_allv(&buf, &counts, &sends, &buf, &counts, &recvs, s).expect("disjoint interleaved blocks");
        bufs.push((buf, host));
    }
    w.sync();
    for (r, (buf, mut want)) in bufs.into_iter().enumerate() {
        for q in 0..n {
            want[4 * q + 2..][..2].copy_from_slice(&block::<i32>(q, r, 2));
        }
        compare(r, &buf.to_vec(), &want).unwrap();
    }
}

/// Every bad call fails on its own rank with InvalidArgument, before queueing anything:
/// the buffers keep their contents, and a good exchange afterwards still pairs up.
#[test]
fn invalid_arguments_change_nothing() {
    let w = world(3, None);
    let (c, s) = (&w.comms[1], &w.streams[1]);
    let dev = c.device();
    let fill = |len: usize| dev.alloc_from(&(0..len).map(|i| i as i32 + 100).collect::<Vec<_>>()).unwrap();
    let (send, recv, short) = (fill(12), fill(12), fill(11));
    let z = [0usize; 3];
    let calls: Vec<(&str, jitccl::Result<()>)> = vec![
        ("all_to_all short recv", c.all_to_all(&send, &short, 4, s)),
        ("all_to_all short send", c.all_to_all(&short, &recv, 4, s)),
        ("all_to_all in place", c.all_to_all(&send, &send, 4, s)),
        ("all_to_all overflow", c.all_to_all(&send, &recv, usize::MAX / 2, s)),
        ("all_to_allv 2 counts", c.all_to_allv(&send, &[1, 1], &[0, 1], &recv, &[1, 1, 1], &[0, 1, 2], s)),
        ("all_to_allv 4 displs", c.all_to_allv(&send, &[1, 1, 1], &[0, 1, 2], &recv, &[1, 1, 1], &[0, 1, 2, 3], s)),
        ("all_to_allv past end", c.all_to_allv(&send, &[4, 4, 4], &[0, 4, 9], &recv, &[1, 1, 1], &z, s)),
        ("all_to_allv displ overflow", c.all_to_allv(&send, &[1, 1, 1], &[0, 1, usize::MAX], &recv, &[1, 1, 1], &z, s)),
        ("all_to_allv overlap", c.all_to_allv(&send, &[2, 2, 2], &[0, 2, 4], &send, &[2, 2, 2], &[5, 7, 9], s)),
        ("gather bad root", c.gather(&send, &recv, 4, 3, s)),
        ("gather short recv at root", c.gather(&send, &short, 4, 1, s)),
        ("gather short send", c.gather(&short, &recv, 12, 0, s)),
        ("gather overlap, not in place", c.gather(&recv.slice(1..5).unwrap(), &recv, 4, 1, s)),
        ("scatter bad root", c.scatter(&send, &recv, 4, 7, s)),
        ("scatter short send at root", c.scatter(&short, &recv, 4, 1, s)),
        ("scatter short recv", c.scatter(&send, &short, 12, 2, s)),
    ];
    for (what, res) in calls {
        assert!(matches!(res, Err(Error::InvalidArgument(_))), "{what}: {res:?}");
    }
    s.synchronize().unwrap();
    assert_eq!(send.to_vec(), (100..112).collect::<Vec<_>>());
    assert_eq!(recv.to_vec(), (100..112).collect::<Vec<_>>());
    // Zero-count blocks move nothing and need no room.
    let empty = dev.alloc::<i32>(0).unwrap();
    assert!(c.all_to_allv(&empty, &z, &[5, 6, 7], &empty, &z, &z, s).is_ok(), "zero counts past the end");
    all_to_all::<i32>(&w, 5).expect("a good exchange after the bad calls");
}
