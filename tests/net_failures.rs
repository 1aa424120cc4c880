//! Failures over the network transport (JITCCL_TRANSPORT=net, ranks as threads of one child
//! process per test, each with its own proxy and TCP connections): a closed connection fails the
//! operations waiting on that peer at once, naming it, and a rank's failure reaches its
//! net peers as a fault frame that names the rank that failed first.

use std::time::{Duration, Instant};

mod common;

use jitccl::{Comm, Config, Error, Op, UniqueId};

/// Runs the test `name` in a child process with `JITCCL_TRANSPORT=net`: every test of this
/// file runs over the network, and setting it in this process would race other tests' reads
/// of the environment.
fn over_net(name: &str, body: impl FnOnce()) {
    jitccl_plugins::in_child(module_path!(), name, &[("JITCCL_TRANSPORT", Some("net"))], body);
}

/// `n` ranks over TCP, created together (each init blocks until all have joined).
fn net_comms(n: usize, timeout: Duration) -> Vec<Comm> {
    let id = UniqueId::new().unwrap();
    let config = Config { nchannels: Some(1), timeout: Some(timeout), ..Config::default() };
    std::thread::scope(|s| {
        let (id, config) = (&id, &config);
        let hs: Vec<_> = (0..n).map(|r| s.spawn(move || Comm::init_rank(id, n, r, config))).collect();
        hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
    })
}

#[test]
fn a_closed_connection_fails_the_operation_waiting_on_that_peer_at_once() {
    over_net("a_closed_connection_fails_the_operation_waiting_on_that_peer_at_once", || {
        let timeout = Duration::from_secs(60);
        let mut comms = net_comms(2, timeout);
        let streams: Vec<_> = comms.iter().map(|c| c.device().stream().unwrap()).collect();
        let bufs: Vec<_> = comms.iter().map(|c| c.device().alloc_from(&[1.0f64; 256]).unwrap()).collect();
        for r in 0..2 {
            comms[r].all_reduce(&bufs[r], &bufs[r], 256, Op::Sum, &streams[r]).unwrap();
        }
        for r in 0..2 {
            streams[r].synchronize().unwrap();
            assert_eq!(bufs[r].to_vec(), vec![2.0; 256]);
        }
        // Rank 1 goes away: its proxy closes its connections.
        drop(comms.pop());
        let t0 = Instant::now();
        comms[0].all_reduce(&bufs[0], &bufs[0], 256, Op::Sum, &streams[0]).unwrap();
        let e = streams[0].synchronize().unwrap_err();
        match &e {
            Error::PeerFailed { rank: 0, peer: 1, culprit: 1, how, .. } => assert!(how.contains("closed"), "{e}"),
            other => panic!("expected the closed connection to rank 1 to fail the operation, got {other}"),
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "noticed only after {:?}", t0.elapsed());
    });
}

/// A rank's failure reaches its net peers as a fault frame (see `common`).
#[test]
fn a_failure_reaches_net_peers_naming_the_rank_that_failed_first() {
    over_net("a_failure_reaches_net_peers_naming_the_rank_that_failed_first", || {
        let timeout = Duration::from_secs(2);
        common::failure_reaches_a_rank_that_does_not_wait_on_the_culprit(&net_comms(3, timeout), timeout);
    });
}

/// With `abort_propagates`, an abort reaches a net peer as a fault frame: the peer's
/// operation waiting on the aborted rank fails within 1 s, naming it.
#[test]
fn an_abort_propagates_over_the_network() {
    over_net("an_abort_propagates_over_the_network", || {
        let id = UniqueId::new().unwrap();
        let config = Config {
            nchannels: Some(1),
            timeout: Some(Duration::from_secs(60)),
            abort_propagates: Some(true),
            ..Config::default()
        };
        let comms: Vec<Comm> = std::thread::scope(|s| {
            let (id, config) = (&id, &config);
            let hs: Vec<_> = (0..2).map(|r| s.spawn(move || Comm::init_rank(id, 2, r, config))).collect();
            hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
        });
        let s = comms[0].device().stream().unwrap();
        let b = comms[0].device().alloc_from(&[1i64; 4096]).unwrap();
        comms[0].all_reduce(&b, &b, 4096, Op::Sum, &s).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let t0 = Instant::now();
        comms[1].abort();
        let e = s.synchronize().unwrap_err();
        eprintln!("abort propagated over the network after {:?}", t0.elapsed());
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        assert!(matches!(e, Error::PeerFailed { rank: 0, culprit: 1, .. }), "{e}");
    });
}

/// A large Broadcast passes its steps by reference (the proxy writes them from the caller's
/// buffer). When it fails (its receiver never calls), the caller has its buffer back and
/// overwrites it; the peer's call then fails too, naming rank 0, and every element that
/// reached it is one the call sent. (That the proxy copies what it still holds before the
/// call returns is checked where it lives, `transport::net::proxy`.)
#[test]
fn a_failed_call_leaves_its_buffer_to_the_caller() {
    over_net("a_failed_call_leaves_its_buffer_to_the_caller", || {
        // One socket a connector: the steps still queued when the call failed come before
        // the fault frame.
        let id = UniqueId::new().unwrap();
        let config =
            Config { nchannels: Some(1), nsocks: Some(1), timeout: Some(Duration::from_secs(2)), ..Config::default() };
        let comms: Vec<Comm> = std::thread::scope(|s| {
            let (id, config) = (&id, &config);
            let hs: Vec<_> = (0..2).map(|r| s.spawn(move || Comm::init_rank(id, 2, r, config))).collect();
            hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
        });
        let streams: Vec<_> = comms.iter().map(|c| c.device().stream().unwrap()).collect();
        let n = 16 << 20;
        let sent: Vec<i32> = (1..=n as i32).collect();
        let bufs =
            [comms[0].device().alloc_from(&sent).unwrap(), comms[1].device().alloc_from(&vec![0i32; n]).unwrap()];
        comms[0].broadcast(&bufs[0], &bufs[0], n, 0, &streams[0]).unwrap();
        let e = streams[0].synchronize().unwrap_err();
        assert!(matches!(e, Error::Timeout { rank: 0, peer: 1, .. }), "{e}");
        bufs[0].copy_from_host(&vec![-1i32; n]).unwrap();
        comms[1].broadcast(&bufs[1], &bufs[1], n, 0, &streams[1]).unwrap();
        let e = streams[1].synchronize().unwrap_err();
        assert!(matches!(e, Error::PeerFailed { rank: 1, peer: 0, .. }), "{e}");
        let got = bufs[1].to_vec();
        let arrived = got.iter().filter(|&&v| v != 0).count();
        assert!(arrived > 0, "nothing arrived before the fault");
        let wrong = got.iter().zip(&sent).filter(|&(&g, &s)| g != 0 && g != s).count();
        assert_eq!(wrong, 0, "{wrong} of {arrived} elements that arrived are not what the call sent");
    });
}
