//! The eager paths on the host target: the direct AlltoAll's, Gather's and Scatter's (a
//! rank's blocks within SYM_EAGER_BYTES: staged in the flags area, one barrier, no exit
//! barrier; `templates/common/eager.h`) and the direct AlltoAllv's (a block within
//! SYM_P2P_EAGER_BYTES: staged in the sender's eager slot, no wait for the receiver;
//! `templates/algo/sendrecv_direct.h`). Ranks as threads that run ahead of each other:
//! calls back to back that rewrite the send buffer as soon as a call returns, eager and
//! other calls (and blocks) interleaved, each result compared with the plain reference;
//! and ranks that call with other counts fail, naming a rank that called differently
//! (AlltoAllv's: `tests/p2p_direct.rs`). The reference sweeps over every datatype and odd
//! and zero counts (`tests/alltoall.rs`) take both paths too.

use std::time::Duration;

use jitccl::reference::{inputs, RefElement};
use jitccl::{with_element_type, Algorithm, Comm, Config, DataType, Error, Stream};
use jitccl_codegen::abi::{SYM_EAGER_BYTES, SYM_P2P_EAGER_BYTES};

/// The most elements of a block that still take the eager path: of an AlltoAll (`v`
/// false), of an AlltoAllv.
fn eager_max(v: bool, d: DataType, n: usize) -> usize {
    if v {
        SYM_P2P_EAGER_BYTES / d.size()
    } else {
        SYM_EAGER_BYTES / d.size() / n
    }
}

/// The elements rank `src` sends rank `dst` in a call of `count`: `count` in an AlltoAll;
/// in an AlltoAllv (`v`) half, all or one and a half of it, by the pair.
fn size(v: bool, count: usize, src: usize, dst: usize) -> usize {
    if v {
        count * (1 + (src + 2 * dst) % 3) / 2
    } else {
        count
    }
}

/// Where blocks of `counts` lie, packed in rank order.
fn displs(counts: &[usize]) -> Vec<usize> {
    counts.iter().scan(0, |at, &c| Some(std::mem::replace(at, *at + c))).collect()
}

fn comms(n: usize, algo: Option<Algorithm>) -> Vec<Comm> {
    let cfg = Config { timeout: Some(Duration::from_secs(60)), algo, ..Config::default() };
    Comm::init_all(n, &cfg).expect("init_all")
}

/// What rank `src` sends rank `dst` in call `call`: another value in every call, so that a
/// block staged by an earlier call shows.
fn block<T: RefElement>(call: usize, src: usize, dst: usize, count: usize) -> Vec<T> {
    inputs(None, call * 4096 + src * 64 + dst, count)
}

/// Rank `r`'s calls: AlltoAll (AlltoAllv where `v`) of the counts of `plan` in turn, on one
/// send and one recv buffer, each call waited for and checked, the send buffer rewritten
/// for the next call at once.
fn calls<T: RefElement>(c: &Comm, st: &Stream, plan: &[usize], v: bool) -> Result<(), String> {
    let (n, r) = (c.nranks(), c.rank());
    let most = plan.iter().max().copied().unwrap_or(0) * 2 * n;
    let (send, recv) = (c.device().alloc::<T>(most).unwrap(), c.device().alloc::<T>(most).unwrap());
    for (k, &count) in plan.iter().enumerate() {
        let sends: Vec<usize> = (0..n).map(|q| size(v, count, r, q)).collect();
        let recvs: Vec<usize> = (0..n).map(|q| size(v, count, q, r)).collect();
        send.copy_from_host(&(0..n).flat_map(|q| block::<T>(k, r, q, sends[q])).collect::<Vec<_>>()).unwrap();
        let res = if v {
            c.all_to_allv(&send, &sends, &displs(&sends), &recv, &recvs, &displs(&recvs), st)
        } else {
            c.all_to_all(&send.slice(0..n * count).unwrap(), &recv.slice(0..n * count).unwrap(), count, st)
        };
        res.and_then(|()| st.synchronize()).map_err(|e| format!("call {k}: {e}"))?;
        let want: Vec<T> = (0..n).flat_map(|q| block::<T>(k, q, r, recvs[q])).collect();
        let bits = |v: &[T]| v.iter().map(|x| x.to_f64().to_bits()).collect::<Vec<_>>();
        let got = recv.to_vec();
        if let Some(i) = bits(&got).iter().zip(bits(&want)).position(|(a, b)| *a != b) {
            return Err(format!(
                "call {k} (count {count}): first wrong at {i}: got {:?}, want {:?}",
                got[i].to_f64(),
                want[i].to_f64()
            ));
        }
    }
    Ok(())
}

/// Rank `r`'s Gathers (Scatters where `scatter`) of the (count, root) pairs of `plan` in
/// turn (roots taken modulo the ranks), on one send and one recv buffer, each call waited
/// for and checked, the send buffer rewritten for the next call at once.
fn rooted_calls<T: RefElement>(c: &Comm, st: &Stream, plan: &[(usize, usize)], scatter: bool) -> Result<(), String> {
    let (n, r) = (c.nranks(), c.rank());
    let most = plan.iter().map(|p| p.0).max().unwrap_or(0) * n + 1;
    let (send, recv) = (c.device().alloc::<T>(most).unwrap(), c.device().alloc::<T>(most).unwrap());
    for (k, &(count, root)) in plan.iter().enumerate() {
        let root = root % n;
        let whole = |src: &dyn Fn(usize) -> usize, dst: &dyn Fn(usize) -> usize| -> Vec<T> {
            (0..n).flat_map(|q| block::<T>(k, src(q), dst(q), count)).collect()
        };
        let (mine, want, sends, recvs) = if scatter {
            let mine = if r == root { whole(&|_| root, &|q| q) } else { Vec::new() };
            (mine, block::<T>(k, root, r, count), n * count, count)
        } else {
            let want = if r == root { whole(&|q| q, &|_| root) } else { Vec::new() };
            (block::<T>(k, r, root, count), want, count, n * count)
        };
        send.slice(0..mine.len()).unwrap().copy_from_host(&mine).unwrap();
        let (s, d) = (send.slice(0..sends).unwrap(), recv.slice(0..recvs).unwrap());
        let res = if scatter { c.scatter(&s, &d, count, root, st) } else { c.gather(&s, &d, count, root, st) };
        res.and_then(|()| st.synchronize()).map_err(|e| format!("call {k} (count {count}, root {root}): {e}"))?;
        let got = recv.to_vec();
        let bits = |v: &[T]| v.iter().map(|x| x.to_f64().to_bits()).collect::<Vec<_>>();
        if let Some(i) = bits(&got[..want.len()]).iter().zip(bits(&want)).position(|(a, b)| *a != b) {
            return Err(format!(
                "call {k} (count {count}, root {root}): first wrong at {i}: got {:?}, want {:?}",
                got[i].to_f64(),
                want[i].to_f64()
            ));
        }
    }
    Ok(())
}

/// Runs `f` on every rank of `comms` at once (threads), each with its own stream.
fn on_every_rank<R: Send>(comms: &[Comm], f: &(dyn Fn(&Comm, &Stream) -> R + Sync)) -> Vec<R> {
    std::thread::scope(|s| {
        let handles: Vec<_> = comms.iter().map(|c| s.spawn(move || f(c, &c.device().stream().unwrap()))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// One rank's part of a sweep: its communicator, stream, the datatype and the world's size.
type RankRun<'a> = dyn Fn(&Comm, &Stream, DataType, usize) -> Result<(), String> + Sync + 'a;

/// Every rank of worlds of `ranks` ranks (each algorithm of `algos`) runs `run` for each of
/// `types` (given the world's size); every rank's failure is reported.
fn sweep_with(ranks: &[usize], algos: &[Option<Algorithm>], types: &[DataType], run: &RankRun) {
    let mut failures = Vec::new();
    for &n in ranks {
        for &algo in algos {
            let comms = comms(n, algo);
            for &d in types {
                for (r, res) in on_every_rank(&comms, &|c, st| run(c, st, d, n)).iter().enumerate() {
                    if let Err(e) = res {
                        failures.push(format!("n={n} {algo:?} {d} rank {r}: {e}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// [`sweep_with`] of `pattern`'s counts (repeated to 60 calls; `pattern` is given the largest
/// eager count) as AlltoAlls (AlltoAllvs where `v`).
fn sweep(
    v: bool, ranks: &[usize], algos: &[Option<Algorithm>], types: &[DataType],
    pattern: &(dyn Fn(usize) -> Vec<usize> + Sync),
) {
    sweep_with(ranks, algos, types, &|c, st, d, n| {
        let p = pattern(eager_max(v, d, n));
        let plan: Vec<usize> = (0..60).map(|k| p[k % p.len()]).collect();
        with_element_type!(d, calls(c, st, &plan, v))
    });
}

#[test]
fn eager_calls_back_to_back_never_corrupt_a_peer_result() {
    // Eager sizes, the largest among them, zero; many in a row (both halves of the eager
    // area reused many times).
    let types = [DataType::U8, DataType::F16, DataType::F32, DataType::F64];
    sweep(false, &[1, 2, 3, 4, 8], &[Some(Algorithm::Direct), None], &types, &|max| vec![1, max, 7, 0, max / 2 + 1]);
}

#[test]
fn eager_and_two_barrier_calls_interleave() {
    // Eager, just past it (two barriers), eager twice (the counter's parity moves by one,
    // then two), a large call, eager.
    let types = [DataType::I8, DataType::BF16, DataType::I32, DataType::U64];
    sweep(false, &[2, 3, 4, 7], &[Some(Algorithm::Direct)], &types, &|max| {
        vec![max, max + 1, 3, 1, 5000, 0, max + 17, 2]
    });
}

#[test]
fn all_to_allv_eager_blocks_back_to_back_and_among_others() {
    // Blocks of half, all and one and a half of the largest eager block in one call (eager
    // and not, to and from one peer), small and zero ones; many in a row (both slots of
    // every pair reused many times).
    let types = [DataType::U8, DataType::F16, DataType::I32, DataType::F64];
    let algos = [Some(Algorithm::Direct), None];
    sweep(true, &[1, 2, 3, 5, 8], &algos, &types, &|max| vec![max, 1, 0, 7, 2 * max / 3 + 1, 3000]);
}

#[test]
fn eager_gathers_and_scatters_back_to_back_at_every_root() {
    // Eager counts, zero, just past the bound (two barriers) and a large call, the root
    // moving from call to call; gathers, then scatters, on one communicator.
    let types = [DataType::U8, DataType::F16, DataType::F32, DataType::F64];
    sweep_with(&[2, 3, 4, 8], &[Some(Algorithm::Direct), None], &types, &|c, st, d, n| {
        let max = eager_max(false, d, n);
        let counts = [1, max, 7, 0, max + 1, 3000, max / 2 + 1, 2];
        let plan: Vec<(usize, usize)> = (0..40).map(|k| (counts[k % counts.len()], k * 3 + k / 8)).collect();
        [false, true].into_iter().try_for_each(|scatter| {
            with_element_type!(d, rooted_calls(c, st, &plan, scatter)).map_err(|e| format!("scatter={scatter}: {e}"))
        })
    });
}

/// Whether `res` fails naming rank `q` as the one that called differently (or failed first).
fn names(res: &Result<(), Error>, q: usize) -> bool {
    match res {
        Err(Error::InvalidUsage(m)) => m.contains(&format!("rank {q} called it differently")),
        Err(Error::PeerFailed { culprit, .. }) => *culprit == q,
        _ => false,
    }
}

/// Rank 2 of 3 names another root than ranks 0 and 1 in an eager Gather or Scatter: every
/// rank fails naming a rank that called differently, and none returns a result.
#[test]
fn a_mismatched_root_fails_every_eager_rooted_call() {
    for scatter in [false, true] {
        let comms = comms(3, Some(Algorithm::Direct));
        let results = on_every_rank(&comms, &|c, st| {
            let root = usize::from(c.rank() == 2);
            let (send, recv) = (c.device().alloc::<f32>(12).unwrap(), c.device().alloc::<f32>(12).unwrap());
            let res = if scatter {
                c.scatter(&send, &recv.slice(0..4).unwrap(), 4, root, st)
            } else {
                c.gather(&send.slice(0..4).unwrap(), &recv, 4, root, st)
            };
            res.and_then(|()| st.synchronize())
        });
        for (r, res) in results.iter().enumerate() {
            let ok = if r == 2 { names(res, 0) || names(res, 1) } else { names(res, 2) };
            assert!(ok, "scatter={scatter}: rank {r} should fail naming a rank with the other root: {res:?}");
        }
    }
}

/// Rank 2 of 3 calls with another count than ranks 0 and 1: both eager, or it alone past
/// the eager bound (it then takes the two-barrier path, the others the eager one). Every
/// rank fails, never returns a result: ranks 0 and 1 name rank 2, rank 2 names rank 0 or 1.
#[test]
fn a_mismatched_count_fails_every_rank_naming_the_peer() {
    let max = eager_max(false, DataType::F32, 3);
    for (same, other) in [(4, 5), (max, 3), (2, max + 1), (max + 1, 1)] {
        let comms = comms(3, Some(Algorithm::Direct));
        let results = on_every_rank(&comms, &|c, st| {
            let count = if c.rank() == 2 { other } else { same };
            let (send, recv) =
                (c.device().alloc::<f32>(3 * count).unwrap(), c.device().alloc::<f32>(3 * count).unwrap());
            c.all_to_all(&send, &recv, count, st).and_then(|()| st.synchronize())
        });
        for (r, res) in results.iter().enumerate() {
            let ok = if r == 2 { names(res, 0) || names(res, 1) } else { names(res, 2) };
            assert!(ok, "counts {same} and {other}: rank {r} should fail naming the other count's rank: {res:?}");
        }
    }
}

/// Rank 2 of 3 joins an eager AlltoAll only after the others gave up on it: their one
/// barrier is bounded, and they fail naming it. The late rank may complete its call, as
/// its peers staged their blocks before they gave up: then its result must be whole and
/// right; its next call fails either way (its peers failed).
#[test]
fn a_late_rank_fails_the_eager_call_and_is_named() {
    let cfg = Config { timeout: Some(Duration::from_millis(400)), algo: Some(Algorithm::Direct), ..Config::default() };
    let comms = Comm::init_all(3, &cfg).unwrap();
    let results = on_every_rank(&comms, &|c, st| {
        let r = c.rank();
        let send = c.device().alloc_from(&(0..3).flat_map(|q| block::<f32>(0, r, q, 2)).collect::<Vec<_>>()).unwrap();
        let recv = c.device().alloc::<f32>(6).unwrap();
        if r == 2 {
            std::thread::sleep(Duration::from_millis(1500));
        }
        let call = || c.all_to_all(&send, &recv, 2, st).and_then(|()| st.synchronize());
        let first = call().map(|()| recv.to_vec());
        (first, call())
    });
    for (r, (first, _)) in results.iter().enumerate().take(2) {
        let named = match first {
            Err(Error::Timeout { peer, .. }) => *peer == 2,
            Err(Error::PeerFailed { culprit, .. }) => *culprit == 2,
            _ => false,
        };
        assert!(named, "rank {r} should name late rank 2: {first:?}");
    }
    if let Ok(got) = &results[2].0 {
        let want: Vec<f32> = (0..3).flat_map(|q| block::<f32>(0, q, 2, 2)).collect();
        assert_eq!(got, &want, "the late rank completed with a wrong result");
    }
    for (r, (_, second)) in results.iter().enumerate() {
        assert!(second.is_err(), "rank {r}: a call after the failure succeeded");
    }
}
