//! Communicator lifecycle beyond split: nonblocking init polled to completion, abort from
//! another thread while threads wait in init, a collective or synchronize (each returns
//! `Aborted` within 1 s, measured), abort propagation to the peers, the failure state, and
//! the configuration agreement at init.

use std::time::{Duration, Instant};

use jitccl::{Comm, CommState, Config, Error, Op, UniqueId};

/// The bound the issue sets on every return after an abort.
const ABORT_BOUND: Duration = Duration::from_secs(1);

fn cfg() -> Config {
    Config { nchannels: Some(1), timeout: Some(Duration::from_secs(30)), ..Config::default() }
}

fn nonblocking() -> Config {
    Config { blocking: Some(false), ..cfg() }
}

/// Polls `async_error` until it is not `InProgress` (bounded); returns it and the polls.
fn poll(c: &Comm) -> (Result<CommState, Error>, usize) {
    let end = Instant::now() + Duration::from_secs(60);
    let mut polls = 0;
    loop {
        polls += 1;
        match c.async_error() {
            Ok(CommState::InProgress) if Instant::now() < end => std::thread::sleep(Duration::from_millis(2)),
            other => return (other, polls),
        }
    }
}

#[test]
fn nonblocking_init_returns_at_once_queues_work_and_is_polled_to_completion() {
    let (id, n) = (UniqueId::new().unwrap(), 3);
    // Rank 0 starts alone: its init cannot finish before the others join, yet it returns.
    let t0 = Instant::now();
    let c0 = Comm::init_rank(&id, n, 0, &nonblocking()).unwrap();
    assert!(t0.elapsed() < Duration::from_millis(500), "init took {:?}", t0.elapsed());
    assert_eq!((c0.rank(), c0.nranks()), (0, 3));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(c0.async_error().unwrap(), CommState::InProgress);
    // A collective on the rank still initializing is queued behind its init.
    let s0 = c0.device().stream().unwrap();
    let b0 = c0.device().alloc_from(&[1.5f64; 100]).unwrap();
    c0.all_reduce(&b0, &b0, 100, Op::Sum, &s0).unwrap();
    assert!(matches!(c0.split(0, 0), Err(Error::InProgress(_))), "split needs init done");
    let others: Vec<Comm> = (1..n).map(|r| Comm::init_rank(&id, n, r, &nonblocking()).unwrap()).collect();
    let out = std::thread::scope(|s| {
        let hs: Vec<_> = others
            .iter()
            .map(|c| {
                s.spawn(move || {
                    let (state, polls) = poll(c);
                    let st = c.device().stream().unwrap();
                    let b = c.device().alloc_from(&[1.5f64 * (c.rank() + 1) as f64; 100]).unwrap();
                    c.all_reduce(&b, &b, 100, Op::Sum, &st).unwrap();
                    st.synchronize().unwrap();
                    (state.unwrap(), polls, b.to_vec())
                })
            })
            .collect();
        // Synchronize covers the call queued during init.
        s0.synchronize().unwrap();
        hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
    });
    assert_eq!(c0.wait_ready(Duration::from_secs(30)).unwrap(), CommState::Ready);
    assert_eq!(b0.to_vec(), vec![1.5 + 3.0 + 4.5; 100]);
    for (state, polls, got) in out {
        assert_eq!(state, CommState::Ready);
        assert!(polls >= 1);
        assert_eq!(got, vec![9.0; 100]);
    }
    // A nonblocking split: the child inherits the mode and is polled likewise.
    let all: Vec<&Comm> = std::iter::once(&c0).chain(&others).collect();
    let kids = std::thread::scope(|s| {
        let hs: Vec<_> = all.iter().map(|c| s.spawn(move || c.split((c.rank() % 2) as u32, 0).unwrap())).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
    });
    for k in kids.iter().flatten() {
        assert_eq!(k.wait_ready(Duration::from_secs(30)).unwrap(), CommState::Ready);
    }
    assert_eq!(kids.iter().flatten().map(|k| k.nranks()).collect::<Vec<_>>(), vec![2, 1, 2]);
}

#[test]
fn abort_ends_a_nonblocking_init_and_the_threads_waiting_on_it_within_1s() {
    // Rank 1 never comes: rank 0's init waits on the bootstrap.
    let c = Comm::init_rank(&UniqueId::new().unwrap(), 2, 0, &nonblocking()).unwrap();
    let s = c.device().stream().unwrap();
    let b = c.device().alloc_from(&[1i32; 16]).unwrap();
    c.all_reduce(&b, &b, 16, Op::Sum, &s).unwrap();
    let (ready, synced, aborted_at) = std::thread::scope(|sc| {
        let w = sc.spawn(|| (c.wait_ready(Duration::from_secs(60)), Instant::now()));
        let y = sc.spawn(|| (s.synchronize(), Instant::now()));
        std::thread::sleep(Duration::from_millis(300));
        let at = Instant::now();
        c.abort();
        (w.join().unwrap(), y.join().unwrap(), at)
    });
    let (lat_wait, lat_sync) = (ready.1 - aborted_at, synced.1 - aborted_at);
    eprintln!("abort during init: wait_ready returned after {lat_wait:?}, synchronize after {lat_sync:?}");
    assert!(matches!(ready.0, Err(Error::Aborted { .. })), "{:?}", ready.0);
    assert!(matches!(synced.0, Err(Error::Aborted { .. })), "{:?}", synced.0);
    assert!(lat_wait < ABORT_BOUND && lat_sync < ABORT_BOUND);
    // Failed for good: every call is refused with the state's error.
    assert!(matches!(c.async_error(), Err(Error::Aborted { .. })));
    assert!(c.all_reduce(&b, &b, 16, Op::Sum, &s).is_err());
    assert!(c.split(0, 0).is_err());
}

#[test]
fn abort_ends_a_running_collective_and_its_synchronize_within_1s() {
    for blocking in [true, false] {
        let comms = Comm::init_all(2, &Config { blocking: Some(blocking), ..cfg() }).unwrap();
        let c = &comms[0];
        let s = c.device().stream().unwrap();
        let b = c.device().alloc_from(&[1.0f32; 1 << 16]).unwrap();
        // Rank 1 never joins: rank 0's kernel waits on it.
        c.all_reduce(&b, &b, 1 << 16, Op::Sum, &s).unwrap();
        let (res, at) = std::thread::scope(|sc| {
            let y = sc.spawn(|| (s.synchronize(), Instant::now()));
            std::thread::sleep(Duration::from_millis(300));
            let at = Instant::now();
            c.abort();
            (y.join().unwrap(), at)
        });
        let lat = res.1 - at;
        eprintln!("abort during a collective (blocking={blocking}): synchronize returned after {lat:?}");
        assert!(matches!(res.0, Err(Error::Aborted { rank: 0, .. })), "{:?}", res.0);
        assert!(lat < ABORT_BOUND, "{lat:?}");
        assert!(matches!(c.async_error(), Err(Error::Aborted { .. })));
        assert!(comms[1].async_error().is_ok(), "a local abort leaves the peer alone");
    }
}

/// Rank 0 waits in an AllReduce on rank 1, which aborts: with propagation rank 0 fails
/// within 1 s naming rank 1; without it rank 0 is still waiting after 1 s.
#[test]
fn abort_propagation_fails_the_waiting_peers_fast_naming_the_aborted_rank() {
    for propagate in [true, false] {
        let comms = Comm::init_all(2, &Config { abort_propagates: Some(propagate), ..cfg() }).unwrap();
        let s = comms[0].device().stream().unwrap();
        let b = comms[0].device().alloc_from(&[2u32; 4096]).unwrap();
        comms[0].all_reduce(&b, &b, 4096, Op::Sum, &s).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let at = Instant::now();
        comms[1].abort();
        let done = s.synchronize_timeout(ABORT_BOUND);
        if propagate {
            let e = done.unwrap_err();
            eprintln!("abort propagated to rank 0 after {:?}", at.elapsed());
            assert!(at.elapsed() < ABORT_BOUND);
            match &e {
                Error::PeerFailed { rank: 0, culprit: 1, how, .. } => assert!(how.contains("aborted"), "{e}"),
                other => panic!("expected rank 1 named, got {other}"),
            }
            assert!(comms[0].async_error().is_err(), "rank 0's communicator failed");
        } else {
            assert!(!done.unwrap(), "without propagation rank 0 still waits");
            comms[0].abort();
            assert!(matches!(s.synchronize(), Err(Error::Aborted { .. })));
        }
    }
}

#[test]
fn a_child_outlives_its_failed_parent_and_a_parent_its_failed_child() {
    let comms = Comm::init_all(2, &cfg()).unwrap();
    let kids: Vec<Comm> = std::thread::scope(|s| {
        let hs: Vec<_> = comms.iter().map(|c| s.spawn(move || c.dup().unwrap())).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let sum = |cs: &[Comm]| {
        std::thread::scope(|s| {
            let hs: Vec<_> = cs
                .iter()
                .map(|c| {
                    s.spawn(move || {
                        let st = c.device().stream().unwrap();
                        let b = c.device().alloc_from(&[c.rank() as i64 + 1; 9]).unwrap();
                        c.all_reduce(&b, &b, 9, Op::Sum, &st)?;
                        st.synchronize()?;
                        Ok::<_, Error>(b.to_vec())
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        })
    };
    // The child fails (aborted on every rank): the parent is untouched.
    kids.iter().for_each(Comm::abort);
    assert!(sum(&kids).iter().all(|r| r.is_err()));
    assert!(sum(&comms).into_iter().all(|r| r.unwrap() == vec![3; 9]));
    // A second child, then the parent fails: the child keeps working, and the parent
    // refuses everything, split included (NCCL: only abort and destroy after an error).
    let kids: Vec<Comm> = std::thread::scope(|s| {
        let hs: Vec<_> = comms.iter().map(|c| s.spawn(move || c.dup().unwrap())).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    comms.iter().for_each(Comm::abort);
    assert!(sum(&kids).into_iter().all(|r| r.unwrap() == vec![3; 9]));
    assert!(comms.iter().all(|c| c.async_error().is_err() && c.split(0, 0).is_err()));
}

#[test]
fn a_configuration_mismatch_names_the_field_and_the_ranks() {
    let id = UniqueId::new().unwrap();
    let errs: Vec<String> = std::thread::scope(|s| {
        let id = &id;
        let hs: Vec<_> = (0..3)
            .map(|r| {
                s.spawn(move || {
                    let max_ctas = Some(if r == 2 { 2 } else { 4 });
                    Comm::init_rank(id, 3, r, &Config { max_ctas, ..cfg() }).unwrap_err().to_string()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for e in errs {
        assert!(
            e.contains("Config.max_ctas") && e.contains("4 on rank(s) [0, 1]") && e.contains("2 on rank(s) [2]"),
            "{e}"
        );
    }
    let e = Comm::init_all(2, &Config { net_name: Some("Verbs".into()), ..cfg() }).unwrap_err().to_string();
    assert!(e.contains("'Verbs'"), "{e}");
}
