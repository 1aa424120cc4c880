//! Send/Recv on the host target both ways, against a plain reference: through the FIFOs
//! (the ring) and as the direct single copy (the receiver copies from the sender's
//! buffer in its host arena or registration: `enqueue::p2p`), forced and as the tuner
//! picks; every datatype, odd and zero counts, 1-8 ranks. A group's sends and
//! receives, several between one pair in any posted order, run as one launch; sizes that
//! differ between a sender and its receiver fail on both, naming the peer, well before
//! the timeout (an AlltoAllv's eager sender by its next call at the latest); a rank that
//! never comes is named. AlltoAllv: `tests/alltoall.rs`; rank
//! processes: `cli/tests/symmetric_processes.rs`.

#[allow(dead_code)] // this binary uses part of it
#[path = "common/world.rs"]
mod world;

use std::time::{Duration, Instant};

use jitccl::reference::{inputs, RefElement};
use jitccl::{group, with_element_type, Algorithm, Comm, Config, DataType, Device, DeviceBuffer, Error};
use world::{world_with, Mem, World};

const COUNTS: &[usize] = &[0, 1, 7, 1001];
/// Every datatype: transfers move bytes, but each type has its own element size.
const TYPES: &[DataType] = DataType::ALL;
/// The FIFO, the direct copy, and the tuner's pick.
const WAYS: &[Option<Algorithm>] = &[Some(Algorithm::Ring), Some(Algorithm::Direct), None];

/// `n` ranks as threads with small FIFO slots (1001 elements wrap the FIFOs).
fn world(n: usize, algo: Option<Algorithm>, mem: Mem) -> World {
    let devices: Vec<Device> = (0..n).map(Device::host).collect();
    world_with(&devices, &Config { slot_bytes: Some([256, 64, 256]), algo, ..Config::default() }).with_mem(mem)
}

/// What rank `src` sends rank `dst` as its `j`-th transfer to it.
fn payload<T: RefElement>(src: usize, dst: usize, j: usize, count: usize) -> Vec<T> {
    inputs(None, (src * 64 + dst) * 8 + j, count)
}

fn compare<T: RefElement>(what: &str, got: &[T], want: &[T]) -> Result<(), String> {
    // As bits: transfers move bytes, and NaN != NaN.
    let bits = |v: &[T]| v.iter().map(|x| x.to_f64().to_bits()).collect::<Vec<_>>();
    match bits(got).iter().zip(&bits(want)).position(|(a, b)| a != b) {
        _ if got.len() != want.len() => Err(format!("{what}: {} elements, want {}", got.len(), want.len())),
        Some(i) => Err(format!("{what}: first wrong at {i}: got {:?}, want {:?}", got[i].to_f64(), want[i].to_f64())),
        None => Ok(()),
    }
}

/// Every rank sends `count` elements to `rank + shift` and receives from `rank - shift` in
/// one sendrecv (shift 0: to itself); the send buffer is the world's kind of memory, the
/// receive buffer plain.
fn shift<T: RefElement>(w: &World, count: usize, shift: usize) -> Result<(), String> {
    let n = w.n();
    let mut regs = Vec::new();
    let sends = w.alloc::<T>(count.max(1), &mut regs);
    let outs = w.on_all(|r, c| {
        let s = &w.streams[r];
        sends[r].slice(0..count).unwrap().copy_from_host(&payload::<T>(r, (r + shift) % n, 0, count)).unwrap();
        let recv = c.device().alloc_from(&vec![T::from_f64(3.0); count + 1]).unwrap();
        let (to, from) = ((r + shift) % n, (r + n - shift) % n);
        c.sendrecv(&sends[r], count, to, &recv, count, from, s).map_err(|e| format!("rank {r}: {e}"))?;
        s.synchronize().map_err(|e| format!("rank {r}: {e}"))?;
        Ok::<Vec<T>, String>(recv.to_vec())
    });
    for (r, out) in outs.into_iter().enumerate() {
        let mut want = payload::<T>((r + n - shift) % n, r, 0, count);
        want.push(T::from_f64(3.0));
        compare(&format!("rank {r}"), &out?, &want)?;
    }
    Ok(())
}

#[test]
fn sendrecv_matches_the_reference() {
    let mut failures = Vec::new();
    for &algo in WAYS {
        for n in [1, 2, 3, 4, 5, 8] {
            let w = world(n, algo, Mem::Plain);
            for &d in TYPES {
                for &count in COUNTS {
                    for k in [0, 1, n - 1] {
                        if let Err(e) = with_element_type!(d, shift(&w, count, k)) {
                            failures.push(format!("{algo:?} n={n} {d} count={count} shift={k}: {e}"));
                        }
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} failed:\n{}", failures.len(), failures.join("\n"));
}

/// The sender's buffer registered or symmetric (another region than the receiver's plain
/// buffer, which the receiver finds by its id), and a call past the cache-bypassing size.
#[test]
fn registered_and_large_buffers_go_direct() {
    let mut failures = Vec::new();
    for mem in [Mem::Symmetric, Mem::Registered] {
        for n in [2, 3] {
            let w = world(n, Some(Algorithm::Direct), mem);
            for (d, count) in [(DataType::F32, 1001), (DataType::U8, 9 << 20)] {
                if let Err(e) = with_element_type!(d, shift(&w, count, 1)) {
                    failures.push(format!("{mem:?} n={n} {d} count={count}: {e}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Rank r posts, in one group, `m(r, q)` sends to every rank q (itself included) of sizes
/// `size(r, q, j)` (zeros among them) and the matching receives, in an order of its own:
/// sends first, receives first, or alternating, peers forward or backward.
fn grouped<T: RefElement>(w: &World, count: usize) -> Result<(), String> {
    let n = w.n();
    let m = |src: usize, dst: usize| 1 + (src + 2 * dst) % 3;
    let size = |src: usize, dst: usize, j: usize| (src + dst + j) % 4 * count / 2;
    let outs = w.on_all(|r, c| {
        let s = &w.streams[r];
        let dev = c.device();
        let mut sends = Vec::new();
        let mut recvs = Vec::new();
        for q in 0..n {
            for j in 0..m(r, q) {
                sends.push((q, j, dev.alloc_from(&payload::<T>(r, q, j, size(r, q, j))).unwrap()));
            }
            for j in 0..m(q, r) {
                recvs.push((q, j, dev.alloc_from(&vec![T::from_f64(3.0); size(q, r, j)]).unwrap()));
            }
        }
        if r % 2 == 1 {
            sends.reverse();
            recvs.reverse();
            // Within a peer, transfers stay in posted order: restore it.
            sends.sort_by_key(|(q, j, _)| (n - q, *j));
            recvs.sort_by_key(|(q, j, _)| (n - q, *j));
        }
        group(|| {
            let send = |(q, _, b): &(usize, usize, DeviceBuffer<T>)| c.send(b, b.len(), *q, s);
            let recv = |(q, _, b): &(usize, usize, DeviceBuffer<T>)| c.recv(b, b.len(), *q, s);
            match r % 3 {
                0 => sends.iter().try_for_each(send).and_then(|()| recvs.iter().try_for_each(recv)),
                1 => recvs.iter().try_for_each(recv).and_then(|()| sends.iter().try_for_each(send)),
                _ => (0..sends.len().max(recvs.len())).try_for_each(|i| {
                    sends.get(i).map_or(Ok(()), send)?;
                    recvs.get(i).map_or(Ok(()), recv)
                }),
            }
        })
        .map_err(|e| format!("rank {r}: {e}"))?;
        s.synchronize().map_err(|e| format!("rank {r}: {e}"))?;
        Ok::<Vec<(usize, usize, Vec<T>)>, String>(recvs.into_iter().map(|(q, j, b)| (q, j, b.to_vec())).collect())
    });
    for (r, out) in outs.into_iter().enumerate() {
        for (q, j, got) in out? {
            compare(&format!("rank {r} from {q} #{j}"), &got, &payload::<T>(q, r, j, size(q, r, j)))?;
        }
    }
    Ok(())
}

#[test]
fn grouped_sends_and_receives_in_any_order_match_the_reference() {
    let mut failures = Vec::new();
    for &algo in WAYS {
        for n in [1, 2, 3, 4, 6] {
            let w = world(n, algo, Mem::Plain);
            for d in [DataType::I8, DataType::BF16, DataType::F64] {
                for count in [0, 7, 1001] {
                    if let Err(e) = with_element_type!(d, grouped(&w, count)) {
                        failures.push(format!("{algo:?} n={n} {d} count={count}: {e}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} failed:\n{}", failures.len(), failures.join("\n"));
}

/// Each rank's result of one call on two ranks made by `call(rank, comm)`, and how long it
/// took, with a long timeout.
fn two(call: impl Fn(usize, &Comm) -> jitccl::Result<()> + Sync) -> (Vec<jitccl::Result<()>>, Duration) {
    let cfg = Config { timeout: Some(Duration::from_secs(30)), algo: Some(Algorithm::Direct), ..Config::default() };
    let comms = Comm::init_all(2, &cfg).unwrap();
    let t = Instant::now();
    let res = std::thread::scope(|s| {
        let call = &call;
        let hs: Vec<_> = comms.iter().enumerate().map(|(r, c)| s.spawn(move || call(r, c))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    (res, t.elapsed())
}

fn names_the_peer(r: usize, e: &Error) -> bool {
    e.to_string().contains(&format!("rank {} called it differently", 1 - r))
}

#[test]
fn sizes_that_differ_fail_on_both_ranks_naming_the_peer() {
    // Rank 0 sends 100 elements, rank 1 expects 120.
    let (res, took) = two(|r, c| {
        let s = c.device().stream()?;
        let b = c.device().alloc::<f32>(120)?;
        if r == 0 {
            c.send(&b, 100, 1, &s)?;
        } else {
            c.recv(&b, 120, 0, &s)?;
        }
        s.synchronize()
    });
    for (r, e) in res.iter().enumerate() {
        let e = e.as_ref().expect_err("a transfer whose sizes differ succeeded");
        assert!(names_the_peer(r, e), "rank {r}: {e}");
    }
    assert!(took < Duration::from_secs(10), "the mismatch took {took:?}: found by a timeout, not the sizes");
}

/// An AlltoAllv on three ranks in which rank 1 expects another size from rank 0 than rank
/// 0 sends, called twice on each rank. Rank 1 fails naming rank 0. Rank 0's small block went
/// eager (staged, no wait for the receiver): its call fails naming rank 1 or, where it
/// returned before rank 1 refused the block, its next call does; never a result taken.
/// (Rank 2, whose blocks match, may see either call fail or not.)
fn all_to_allv_refused(send_to_1: usize, recv_from_0: usize) {
    let cfg = Config { timeout: Some(Duration::from_secs(30)), algo: Some(Algorithm::Direct), ..Config::default() };
    let comms = Comm::init_all(3, &cfg).unwrap();
    let t = Instant::now();
    let res: Vec<jitccl::Result<()>> = std::thread::scope(|sc| {
        let hs: Vec<_> = comms
            .iter()
            .enumerate()
            .map(|(r, c)| {
                sc.spawn(move || {
                    let s = c.device().stream()?;
                    let (send, recv) = (c.device().alloc::<i32>(24)?, c.device().alloc::<i32>(24)?);
                    let sends = if r == 0 { [4, send_to_1, 4] } else { [4; 3] };
                    let recvs = if r == 1 { [recv_from_0, 4, 4] } else { [4; 3] };
                    let call = || {
                        c.all_to_allv(&send, &sends, &[0, 8, 16], &recv, &recvs, &[0, 8, 16], &s)
                            .and_then(|()| s.synchronize())
                    };
                    let first = call();
                    first.and(call())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let names = |r: usize, e: &Error| match e {
        Error::PeerFailed { culprit, .. } => *culprit == 1 - r,
        e => names_the_peer(r, e),
    };
    for (r, e) in res.iter().enumerate().take(2) {
        let e = e.as_ref().expect_err("a block of another size went unnoticed");
        assert!(names(r, e), "rank {r}: {e}");
    }
    let took = t.elapsed();
    assert!(took < Duration::from_secs(10), "the mismatch took {took:?}: found by a timeout, not the sizes");
}

#[test]
fn all_to_allv_counts_that_differ_fail_naming_the_peer() {
    // Rank 1 expects 5 elements from rank 0, which sends it 4.
    all_to_allv_refused(4, 5);
}

#[test]
fn an_all_to_allv_block_one_side_counts_as_empty_fails_naming_the_peer() {
    // Rank 1 expects 3 elements from rank 0, which sends it none.
    all_to_allv_refused(0, 3);
}

/// A group that sends a buffer to one rank and receives into it from another at once (a
/// ring shift in place; NCCL leaves it undefined): the FIFOs move it chunk by chunk, in
/// order; the direct copy, where a peer may still read the buffer being received into,
/// refuses it at the group's end instead of returning a wrong result as success.
#[test]
fn an_in_place_shift_in_a_group_is_right_or_refused() {
    for algo in [Algorithm::Ring, Algorithm::Direct] {
        let w = world(3, Some(algo), Mem::Plain);
        let res = w.on_all(|r, c| {
            let s = &w.streams[r];
            let b = c.device().alloc_from(&payload::<f32>(r, (r + 1) % 3, 0, 5000)).unwrap();
            group(|| {
                c.send(&b, 5000, (r + 1) % 3, s)?;
                c.recv(&b, 5000, (r + 2) % 3, s)
            })
            .and_then(|()| s.synchronize())
            .map(|()| b.to_vec())
        });
        for (r, got) in res.into_iter().enumerate() {
            match (algo, got) {
                (Algorithm::Ring, Ok(got)) => {
                    compare(&format!("rank {r}"), &got, &payload((r + 2) % 3, r, 0, 5000)).unwrap()
                }
                (Algorithm::Direct, Err(Error::InvalidArgument(e))) => assert!(e.contains("overlaps"), "{e}"),
                (_, other) => panic!("{algo}: rank {r}: {:?}", other.map(|v| v.len())),
            }
        }
    }
}

/// Rank 1 of 2 never posts its receive: rank 0's direct send fails within its timeout,
/// naming rank 1, and so does its next call.
#[test]
fn a_receiver_that_never_comes_is_named() {
    let cfg = Config { timeout: Some(Duration::from_millis(400)), algo: Some(Algorithm::Direct), ..Config::default() };
    let comms = Comm::init_all(2, &cfg).unwrap();
    let s = comms[0].device().stream().unwrap();
    let b = comms[0].device().alloc::<u64>(64).unwrap();
    comms[0].send(&b, 64, 1, &s).unwrap();
    let e = s.synchronize().unwrap_err();
    assert!(matches!(e, Error::Timeout { rank: 0, peer: 1, .. }), "{e}");
    let again = comms[0].send(&b, 64, 1, &s).and_then(|()| s.synchronize());
    assert!(again.is_err(), "a send on a failed communicator succeeded");
}

/// One thread drives both ranks, each call outside a group, the send's stream synchronized
/// first: the receive runs on its own stream's dispatcher meanwhile; and the same through
/// nonblocking communicators, whose calls leave from their progress threads.
#[test]
fn one_thread_driving_both_ranks_and_nonblocking_communicators() {
    for blocking in [true, false] {
        let cfg = Config {
            timeout: Some(Duration::from_secs(20)),
            algo: Some(Algorithm::Direct),
            blocking: Some(blocking),
            ..Config::default()
        };
        let comms = Comm::init_all(2, &cfg).unwrap();
        let s: Vec<_> = comms.iter().map(|c| c.device().stream().unwrap()).collect();
        let want = payload::<f64>(0, 1, 0, 777);
        let send = comms[0].device().alloc_from(&want).unwrap();
        let recv = comms[1].device().alloc::<f64>(777).unwrap();
        comms[0].send(&send, 777, 1, &s[0]).unwrap();
        comms[1].recv(&recv, 777, 0, &s[1]).unwrap();
        s[0].synchronize().unwrap();
        s[1].synchronize().unwrap();
        compare(&format!("blocking={blocking}"), &recv.to_vec(), &want).unwrap();
    }
}
