//! `ProcessGroup` when things go wrong or run side by side: a rank that never calls (the
//! group's timeout fails every pending work naming op, sequence number and peer; measured),
//! the watchdog cutting short an operation the communicator would wait on far longer,
//! subgroups running concurrently, dropping a group with pending work.

use std::time::{Duration, Instant};

use jitccl::store::{Server, TcpStore};
use jitccl::{Comm, Config, Error, Op, ProcessGroup, UniqueId, Work};

const LONG: Duration = Duration::from_secs(60);

/// Runs `f(group)` for `n` ranks (threads) joined through one store, communicator timeout
/// `comm_timeout`, group timeout `timeout`.
fn ranks<T: Send>(n: usize, timeout: Duration, comm_timeout: Duration, f: impl Fn(ProcessGroup) -> T + Sync) -> Vec<T> {
    let server = Server::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr();
    let cfg = Config { nchannels: Some(1), timeout: Some(comm_timeout), ..Config::default() };
    std::thread::scope(|s| {
        let (f, cfg) = (&f, &cfg);
        let hs: Vec<_> = (0..n)
            .map(|r| {
                s.spawn(move || {
                    let store = TcpStore::connect(addr, Duration::from_secs(30)).unwrap();
                    f(ProcessGroup::with_config(&store, r, n, timeout, cfg).unwrap())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
    })
}

fn peer_of(e: &Error) -> Option<usize> {
    match e {
        Error::Work { peer, .. } => *peer,
        _ => None,
    }
}

/// Rank 2 of 3 never calls all_reduce #1. On ranks 0 and 1 that work fails after about
/// the timeout, naming the op, its sequence number and a peer (rank 0 waits for rank 2;
/// rank 1 waits for rank 0, whose failure names rank 2 as the culprit); the works queued
/// behind it fail as not run, and a later call fails at once.
#[test]
fn a_rank_that_never_calls_fails_every_pending_work() {
    let timeout = Duration::from_secs(2);
    let out = ranks(3, timeout, timeout, |pg| {
        let b = pg.comm().device().alloc_from(&[1.0f32; 8]).unwrap();
        if pg.rank() == 2 {
            // Alive, but never calls; stays until the others have failed.
            std::thread::sleep(timeout * 2);
            return None;
        }
        let t0 = Instant::now();
        let works = [pg.all_reduce(&b, Op::Sum), pg.broadcast(&b, 0), pg.barrier()];
        let e = works[0].wait(LONG).unwrap_err();
        let took = t0.elapsed();
        let msg = e.to_string();
        assert!(matches!(&e, Error::Work { op, seq: 1, .. } if op == "all_reduce"), "{msg}");
        assert!(msg.contains("all_reduce #1") && msg.contains("rank 2"), "{msg}");
        for w in &works[1..] {
            let e = w.wait(Duration::from_secs(1)).unwrap_err().to_string();
            assert!(e.contains("not run: all_reduce #1 failed first"), "{e}");
        }
        assert!(!works[0].is_success() && works[0].error().is_some());
        let t1 = Instant::now();
        assert!(pg.barrier().wait(Duration::from_secs(1)).is_err(), "a broken group fails at once");
        assert!(t1.elapsed() < Duration::from_millis(500));
        Some((took, peer_of(&e), msg))
    });
    for (r, o) in out.into_iter().enumerate().take(2) {
        let (took, peer, msg) = o.unwrap();
        eprintln!("rank {r}: all_reduce #1 failed after {took:?}: {msg}");
        assert!(took >= timeout && took < timeout + Duration::from_secs(3), "rank {r}: {took:?}");
        // Rank 1 may wait on rank 0 (which then names rank 2 as the culprit) or on rank 2.
        let expect: &[usize] = if r == 0 { &[2] } else { &[0, 2] };
        assert!(peer.is_some_and(|p| expect.contains(&p)), "rank {r}: waited for {peer:?}");
    }
}

/// The communicator would wait 60 s for a receiver that never comes; the group's watchdog
/// cuts the send short after its timeout (plus the grace), naming the op, sequence number
/// and peer, and aborts the communicator.
#[test]
fn the_watchdog_aborts_an_operation_past_the_group_timeout() {
    let timeout = Duration::from_secs(1);
    let out = ranks(2, timeout, LONG, |pg| {
        // Larger than the FIFOs: the send needs its receiver.
        let b = pg.comm().device().alloc_from(&vec![3i32; 1 << 20]).unwrap();
        let first = pg.all_reduce(&b.slice(0..4).unwrap(), Op::Max);
        if pg.rank() == 1 {
            first.wait(LONG).unwrap();
            std::thread::sleep(Duration::from_secs(4));
            return None;
        }
        let t0 = Instant::now();
        let (send, after) = (pg.send(&b, 1), pg.barrier());
        let e = send.wait(LONG).unwrap_err();
        let took = t0.elapsed();
        assert!(first.is_completed(), "{first:?}");
        assert!(matches!(&e, Error::Work { op, seq: 2, peer: Some(1), timed_out: true, .. } if op == "send"), "{e}");
        assert!(e.to_string().contains("watchdog aborted"), "{e}");
        assert!(after.wait(Duration::from_secs(1)).unwrap_err().to_string().contains("not run: send #2"));
        assert!(pg.comm().is_aborted());
        Some(took)
    });
    let took = out[0].unwrap();
    eprintln!("watchdog: send #2 failed after {took:?} (group timeout {timeout:?})");
    assert!(took >= timeout && took < timeout * 3, "{took:?}");
}

/// Rank 1 is late for the first all_reduce; this rank does not wait for it. The group is
/// dropped at once with the work pending: the drop lets it run, so it completes right.
/// (Rank 0's first op waits for rank 1, so drop must not hang or cut it short.)
#[test]
fn dropping_a_group_with_pending_work_runs_it_out() {
    let out = ranks(2, Duration::from_secs(20), Duration::from_secs(20), |pg| {
        let b = pg.comm().device().alloc_from(&[pg.rank() as i64 + 1; 3]).unwrap();
        if pg.rank() == 1 {
            std::thread::sleep(Duration::from_millis(300));
        }
        let works: Vec<Work> = (0..10).map(|_| pg.all_reduce(&b, Op::Sum)).collect();
        let t0 = Instant::now();
        drop(pg);
        let dropped = t0.elapsed();
        assert!(works.iter().all(|w| w.is_completed() && w.is_success()), "{works:?}");
        (b.to_vec(), dropped)
    });
    // 1+2 = 3, doubled by each of the nine others.
    assert_eq!(out[0].0, vec![3 << 9; 3]);
    assert_eq!(out[1].0, vec![3 << 9; 3]);
    assert!(out[0].1 < Duration::from_secs(10));
}

/// Subgroups {0, 2} and {3, 1} (given out of order: ranked 1, 3) from one group of 4,
/// and a group every rank is in; the two halves reduce at the same time. Non-members get
/// None; bad rank lists are invalid arguments.
#[test]
fn new_group_subsets_run_concurrently() {
    let id = UniqueId::new().unwrap();
    let cfg = Config { nchannels: Some(1), timeout: Some(LONG), ..Config::default() };
    let out: Vec<_> = std::thread::scope(|s| {
        let (id, cfg) = (&id, &cfg);
        let hs: Vec<_> = (0..4)
            .map(|r| {
                s.spawn(move || {
                    let pg = ProcessGroup::from_comm(Comm::init_rank(id, 4, r, cfg).unwrap(), LONG).unwrap();
                    assert!(matches!(pg.new_group(&[]), Err(Error::InvalidArgument(_))));
                    assert!(matches!(pg.new_group(&[1, 1]), Err(Error::InvalidArgument(_))));
                    assert!(matches!(pg.new_group(&[0, 4]), Err(Error::InvalidArgument(_))));
                    let even = pg.new_group(&[0, 2]).unwrap();
                    let odd = pg.new_group(&[3, 1]).unwrap();
                    assert_eq!((even.is_some(), odd.is_some()), (r % 2 == 0, r % 2 == 1), "rank {r}");
                    let sub = even.or(odd).unwrap();
                    assert_eq!((sub.rank(), sub.size()), (r / 2, 2), "rank {r}");
                    let b = sub.comm().device().alloc_from(&[1u64 << r; 16]).unwrap();
                    // Many works on each half, racing the other half.
                    let works: Vec<Work> = (0..8).map(|_| sub.all_reduce(&b, Op::Max)).collect();
                    let world = pg.barrier();
                    works.iter().for_each(|w| w.wait(LONG).unwrap());
                    world.wait(LONG).unwrap();
                    b.to_vec()[0]
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
    });
    assert_eq!(out, vec![1 << 2, 1 << 3, 1 << 2, 1 << 3]);
}

/// `abort` fails the running and queued works at once and aborts the communicator;
/// later calls fail at once.
#[test]
fn abort_fails_pending_works_at_once() {
    let out = ranks(2, LONG, LONG, |pg| {
        if pg.rank() == 1 {
            return None; // never calls: rank 0's all_reduce stays pending
        }
        let b = pg.comm().device().alloc_from(&[1u8; 64]).unwrap();
        let works = [pg.all_reduce(&b, Op::Sum), pg.barrier()];
        std::thread::sleep(Duration::from_millis(200));
        assert!(!works[0].is_completed());
        let t0 = Instant::now();
        pg.abort();
        for w in &works {
            let e = w.wait(Duration::from_secs(2)).unwrap_err().to_string();
            assert!(e.contains("aborted"), "{e}");
        }
        assert!(pg.comm().is_aborted());
        assert!(pg.all_reduce(&b, Op::Sum).error().is_some(), "a later call fails at once");
        Some(t0.elapsed())
    });
    assert!(out[0].unwrap() < Duration::from_secs(1), "{:?}", out[0]);
}
