//! Errors: invalid arguments are refused with InvalidArgument and change nothing (the
//! communicator keeps working); a peer that never joins ends the wait with a timeout that
//! names it; abort ends a waiting operation and refuses new ones.

use std::time::{Duration, Instant};

use jitccl::{Algorithm, Comm, Config, Error, Op, Protocol};

fn cfg(timeout: Duration) -> Config {
    Config { nchannels: Some(2), timeout: Some(timeout), ..Config::default() }
}

#[test]
fn invalid_arguments_change_nothing() {
    let comms = Comm::init_all(2, &cfg(Duration::from_secs(30))).unwrap();
    let streams: Vec<_> = comms.iter().map(|c| c.device().stream().unwrap()).collect();
    let dev = comms[0].device();
    let send = dev.alloc_from(&[1i32, 2, 3, 4]).unwrap();
    let recv = dev.alloc_from(&[7i32; 4]).unwrap();
    let (c, s) = (&comms[0], &streams[0]);
    let expect_invalid = |r: jitccl::Result<()>, what: &str| match r {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains(what), "message '{msg}' lacks '{what}'"),
        other => panic!("expected InvalidArgument({what}), got {other:?}"),
    };
    expect_invalid(c.all_reduce(&send, &recv, 5, Op::Sum, s), "holds 4 elements, 5 are needed");
    expect_invalid(c.broadcast(&send, &recv, 4, 2, s), "root 2 is not a rank");
    expect_invalid(c.reduce(&send, &recv, 4, Op::Max, 9, s), "root 9");
    expect_invalid(c.send(&send, 4, 3, s), "peer 3 is not a rank");
    expect_invalid(c.all_gather(&send, &recv, 3, s), "holds 4 elements, 6 are needed");
    expect_invalid(c.reduce_scatter(&send, &recv, 3, Op::Sum, s), "holds 4 elements, 6 are needed");
    expect_invalid(c.all_reduce(&send, &recv, 4, Op::PreMulSum(0.5), s), "not a whole number");
    let overlapping = send.slice(1..4).unwrap();
    expect_invalid(c.all_reduce(&send, &overlapping, 3, Op::Sum, s), "overlap");
    let other = comms[1].device().stream().unwrap();
    expect_invalid(c.all_reduce(&send, &recv, 4, Op::Sum, &other), "stream is on");
    s.synchronize().unwrap();
    assert_eq!(recv.to_vec(), vec![7; 4], "a refused call wrote the output");
    assert_eq!(send.to_vec(), vec![1, 2, 3, 4], "a refused call wrote the input");

    // The communicator is intact: a real all_reduce still gives the right answer.
    let bufs: Vec<_> = comms.iter().map(|c| c.device().alloc_from(&[c.rank() as i32 + 1; 3]).unwrap()).collect();
    for r in 0..2 {
        comms[r].all_reduce(&bufs[r], &bufs[r], 3, Op::Sum, &streams[r]).unwrap();
    }
    for r in 0..2 {
        streams[r].synchronize().unwrap();
        assert_eq!(bufs[r].to_vec(), vec![3; 3]);
    }
}

#[test]
fn zero_count_is_a_no_op() {
    let comms = Comm::init_all(3, &cfg(Duration::from_secs(30))).unwrap();
    let s = comms[0].device().stream().unwrap();
    let b = comms[0].device().alloc_from(&[5u8; 4]).unwrap();
    // Only rank 0 calls: with nothing to move, nothing waits for the others.
    comms[0].all_reduce(&b, &b, 0, Op::Sum, &s).unwrap();
    comms[0].broadcast(&b, &b, 0, 1, &s).unwrap();
    comms[0].all_gather(&b.slice(0..0).unwrap(), &b, 0, &s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(b.to_vec(), vec![5; 4]);
}

#[test]
fn bad_configuration_is_refused() {
    let bad = Config { nchannels: Some(0), ..Config::default() };
    assert!(matches!(Comm::init_all(2, &bad), Err(Error::InvalidArgument(m)) if m.contains("nchannels")));
    let bad = Config { slot_bytes: Some([100, 64, 256]), ..Config::default() };
    assert!(matches!(Comm::init_all(2, &bad), Err(Error::InvalidArgument(m)) if m.contains("multiple of 64")));
    for nsocks in [0, 17] {
        let bad = Config { nsocks: Some(nsocks), ..Config::default() };
        assert!(
            matches!(Comm::init_all(2, &bad), Err(Error::InvalidArgument(m)) if m.contains("JITCCL_NSOCKS_PERTHREAD"))
        );
    }
    assert!(matches!(Comm::init_all(0, &Config::default()), Err(Error::InvalidArgument(_))));
}

#[test]
fn missing_peer_times_out_naming_it() {
    for proto in [Protocol::Simple, Protocol::LL, Protocol::LL128] {
        let config = Config { proto: Some(proto), algo: Some(Algorithm::Ring), ..cfg(Duration::from_millis(300)) };
        let comms = Comm::init_all(3, &config).unwrap();
        let s = comms[0].device().stream().unwrap();
        let b = comms[0].device().alloc_from(&vec![1.0f32; 1000]).unwrap();
        let t0 = Instant::now();
        // Ranks 1 and 2 never join: rank 0 sends, then waits for rank 2 (its ring predecessor).
        comms[0].all_reduce(&b, &b, 1000, Op::Sum, &s).unwrap();
        let err = s.synchronize().unwrap_err();
        let waited = t0.elapsed();
        match &err {
            Error::Timeout { op, rank, peer, .. } => {
                assert_eq!((op.as_str(), *rank), ("all_reduce", 0));
                assert!(*peer == 1 || *peer == 2, "{err}");
            }
            other => panic!("{proto}: expected a timeout, got {other}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("rank 0") && msg.contains("waiting for"), "{msg}");
        assert!(waited < Duration::from_secs(10), "{proto}: timed out only after {waited:?}");
    }
}

#[test]
fn abort_ends_a_waiting_operation() {
    let comms = Comm::init_all(2, &cfg(Duration::from_secs(60))).unwrap();
    let s = comms[0].device().stream().unwrap();
    let b = comms[0].device().alloc_from(&[1u64; 64]).unwrap();
    comms[0].all_reduce(&b, &b, 64, Op::Sum, &s).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(!s.is_idle(), "rank 0 should be waiting for rank 1");
    let t0 = Instant::now();
    comms[0].abort();
    let err = s.synchronize().unwrap_err();
    assert!(matches!(err, Error::Aborted { rank: 0, .. }), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    let again = comms[0].all_reduce(&b, &b, 64, Op::Sum, &s);
    assert!(matches!(again, Err(Error::InvalidUsage(m)) if m.contains("aborted")));
}
