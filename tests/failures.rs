//! A failure fails the communicator: once an operation ends with an error (a peer late past
//! the timeout, a failed peer), every later call on every rank returns an error at once,
//! operations queued behind it fail at once, nothing pairs with stale FIFO steps (so no
//! wrong result is ever reported as success), and every rank's error names the rank that
//! failed first.

use std::time::{Duration, Instant};

mod common;

use jitccl::{Comm, Config, Error, Op};

fn cfg(timeout: Duration) -> Config {
    Config { nchannels: Some(2), timeout: Some(timeout), ..Config::default() }
}

/// The rank an operation's error blames: the peer a timeout waited for, or the culprit a
/// failed peer reported.
fn blamed(e: &Error) -> Option<usize> {
    match e {
        Error::Timeout { peer, .. } => Some(*peer as usize),
        Error::PeerFailed { culprit, .. } => Some(*culprit),
        _ => None,
    }
}

/// Rank 3 joins an AllReduce only after the others have given up on it. Then every rank
/// tries another AllReduce: none may succeed (before the fix, all did, with wrong data).
#[test]
fn a_late_rank_fails_the_communicator_on_every_rank_and_is_named() {
    let n = 4;
    let comms = Comm::init_all(n, &cfg(Duration::from_millis(400))).unwrap();
    let streams: Vec<_> = comms.iter().map(|c| c.device().stream().unwrap()).collect();
    let count = 4096;
    let bufs: Vec<_> = comms.iter().map(|c| c.device().alloc_from(&vec![1.0f32; count]).unwrap()).collect();
    let first: Vec<Error> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|r| {
                let (c, st, b) = (&comms[r], &streams[r], &bufs[r]);
                s.spawn(move || {
                    if r == 3 {
                        std::thread::sleep(Duration::from_millis(1500));
                    }
                    c.all_reduce(b, b, count, Op::Sum, st).and_then(|()| st.synchronize())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap().expect_err("the round with a late rank must fail")).collect()
    });
    for (r, e) in first.iter().enumerate() {
        assert_eq!(blamed(e), Some(3), "rank {r} blames another rank than the late one: {e}");
    }

    // The second round: fresh inputs on every rank, all on time.
    for (r, b) in bufs.iter().enumerate() {
        b.copy_from_host(&vec![r as f32 + 1.0; count]).unwrap();
    }
    let t0 = Instant::now();
    for r in 0..n {
        let res = comms[r]
            .all_reduce(&bufs[r], &bufs[r], count, Op::Sum, &streams[r])
            .and_then(|()| streams[r].synchronize());
        let e = res.expect_err("a failed communicator reported success");
        assert_eq!(blamed(&e), Some(3), "rank {r}: {e}");
    }
    assert!(t0.elapsed() < Duration::from_millis(300), "a failed communicator waited: {:?}", t0.elapsed());
}

/// Rank 1 never calls: rank 0's first queued operation times out, and the 49 queued
/// behind it fail at once instead of each waiting out its own timeout.
#[test]
fn operations_queued_behind_a_failed_one_fail_at_once() {
    let timeout = Duration::from_millis(300);
    let comms = Comm::init_all(2, &cfg(timeout)).unwrap();
    let s = comms[0].device().stream().unwrap();
    let b = comms[0].device().alloc_from(&[1u32; 100]).unwrap();
    // The first call compiles its kernel when the cache is cold, which is no part of the
    // waiting measured here.
    comms[0].all_reduce(&b, &b, 100, Op::Sum, &s).unwrap();
    let t0 = Instant::now();
    for _ in 1..50 {
        comms[0].all_reduce(&b, &b, 100, Op::Sum, &s).unwrap();
    }
    let e = s.synchronize().unwrap_err();
    assert_eq!(blamed(&e), Some(1), "{e}");
    assert!(t0.elapsed() < timeout * 5, "50 queued operations took {:?}", t0.elapsed());
    let again = comms[0].all_reduce(&b, &b, 100, Op::Sum, &s).unwrap_err();
    assert_eq!(blamed(&again), Some(1), "a later call returns the failure: {again}");
}

/// A peer that failed tells the peers waiting on it at once (see `common`).
#[test]
fn a_failure_reaches_ranks_that_do_not_wait_on_the_culprit() {
    let timeout = Duration::from_secs(2);
    common::failure_reaches_a_rank_that_does_not_wait_on_the_culprit(
        &Comm::init_all(3, &cfg(timeout)).unwrap(),
        timeout,
    );
}
