//! Every error the root or a rank must report, and what must not disturb them: stray and
//! silent connections, wrong magic, duplicate ranks, nranks mismatch, missing ranks, no
//! root, aborts, a dead peer.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::*;
use crate::bootstrap::wire::{self, Header, Hello, Kind, RootReply, HEADER_BYTES, ROOT_RANK};

/// Raw stray connections to the root: garbage (wrong magic), the right magic with another
/// communicator's nonce, and one that sends nothing. All are dropped; the real ranks finish.
#[test]
fn wrong_magic_is_rejected_and_real_ranks_complete() {
    log();
    let config = cfg(Duration::from_secs(20));
    let root = Root::start(&config).unwrap();
    let id = root.id();
    let addr = id.root_addr();

    let mut garbage = TcpStream::connect(addr).unwrap();
    garbage.write_all(&[0xab; 40]).unwrap();
    let mut other_comm = TcpStream::connect(addr).unwrap();
    other_comm.write_all(&Header::new(id_nonce_other(), Kind::Hello, 0, 0, 36).encode()).unwrap();
    let _silent = TcpStream::connect(addr).unwrap();
    // The root closes the rejected connections.
    for (what, s) in [("wrong magic", &mut garbage), ("wrong nonce", &mut other_comm)] {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 8];
        match s.read(&mut b) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("{what}: root did not close the connection: {other:?}"),
        }
    }

    let n = 3;
    let results: Vec<_> = thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let config = &config;
                s.spawn(move || {
                    let b = Bootstrap::init(&id, r, n, config)?;
                    // A stray connection to rank 0's own listener is ignored too.
                    if r == 1 {
                        let mut stray = TcpStream::connect(b.peer_addr(0).unwrap()).unwrap();
                        stray.write_all(b"GET / HTTP/1.0\r\n\r\n0123456789012345678901").unwrap();
                        b.send(0, 5, b"after the stray").unwrap();
                    }
                    if r == 0 {
                        assert_eq!(b.recv(1, 5).unwrap(), b"after the stray");
                    }
                    b.all_gather(&[r as u8])
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (r, res) in results.into_iter().enumerate() {
        assert_eq!(res.unwrap_or_else(|e| panic!("rank {r}: {e}")), vec![vec![0], vec![1], vec![2]]);
    }
    let report = root.join().unwrap();
    assert_eq!(report.nranks, 3);
    assert_eq!(report.rejected, 2, "garbage and other-communicator connections");

    // A unique id with a wrong magic is refused as such.
    let mut bytes = id.to_bytes();
    bytes[0] ^= 0x55;
    let e = UniqueId::from_bytes(&bytes).unwrap_err();
    assert!(matches!(e, BootstrapError::WrongMagic { .. }), "{e}");
    assert!(e.to_string().contains("wrong magic"), "{e}");
    assert_eq!(UniqueId::from_bytes(&id.to_bytes()).unwrap(), id);
}

/// JITCCL_COMM_ID pointing at something that is not a jitccl root: the rank says so at
/// once instead of waiting for its timeout.
#[test]
fn not_a_root_is_wrong_magic() {
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = fake.local_addr().unwrap();
    let server = thread::spawn(move || {
        let (mut s, _) = fake.accept().unwrap();
        let mut b = [0u8; HEADER_BYTES + wire::HELLO_BYTES];
        let _ = s.read_exact(&mut b);
        s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n").unwrap();
    });
    let t0 = Instant::now();
    let id = UniqueId::from_comm_id(&addr.to_string(), false, &cfg(Duration::from_secs(20))).unwrap();
    let e = Bootstrap::init(&id, 0, 2, &cfg(Duration::from_secs(20))).unwrap_err();
    assert!(matches!(e, BootstrapError::WrongMagic { .. }), "{e}");
    assert!(
        e.to_string()
            .contains(&format!("wrong magic 0x{:016x} from the peer at {addr}", u64::from_le_bytes(*b"HTTP/1.1"))),
        "{e}"
    );
    assert!(t0.elapsed() < Duration::from_secs(2));
    server.join().unwrap();
}

fn id_nonce_other() -> u64 {
    0x1234_5678_9abc_def0
}

#[test]
fn duplicate_rank() {
    let config = cfg(Duration::from_secs(10));
    let t0 = Instant::now();
    let (results, root) = run(&config, &[(0, 3), (1, 3), (1, 3)], &[], |_| ());
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Err(BootstrapError::DuplicateRank { rank: 1 }) => {}
            other => panic!("thread {i}: expected DuplicateRank {{ rank: 1 }}, got {other:?}"),
        }
    }
    let e = root.unwrap_err();
    assert!(matches!(e, BootstrapError::DuplicateRank { rank: 1 }), "{e}");
    assert!(e.to_string().contains("duplicate rank"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(5), "reported at once, not at the timeout");
}

#[test]
fn nranks_mismatch() {
    let config = cfg(Duration::from_secs(10));
    let t0 = Instant::now();
    // Rank 0 arrives first, so the communicator has 3 ranks; rank 2 says 4.
    let delays = [Duration::ZERO, Duration::from_millis(200), Duration::from_millis(200)];
    let (results, root) = run(&config, &[(0, 3), (1, 3), (2, 4)], &delays, |_| ());
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Err(BootstrapError::NranksMismatch { expected: 3, got: 4, rank: 2 }) => {}
            other => panic!("thread {i}: expected NranksMismatch, got {other:?}"),
        }
    }
    let e = root.unwrap_err();
    assert!(e.to_string().contains("rank 2 says nranks = 4"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn missing_rank_times_out_naming_it() {
    let timeout = Duration::from_millis(1500);
    let t0 = Instant::now();
    let (results, root) = run(&cfg(timeout), &[(0, 4), (1, 4), (3, 4)], &[], |_| ());
    for (i, r) in results.into_iter().enumerate() {
        let e = r.expect_err("rank 2 never came");
        assert!(e.is_timeout(), "{e}");
        match &e {
            BootstrapError::MissingRanks { missing, nranks: 4, .. } if missing == &[2] => {}
            other => panic!("thread {i}: expected MissingRanks [2], got {other:?}"),
        }
        assert!(e.to_string().contains("rank(s) 2 of 4 never connected"), "{e}");
    }
    assert!(matches!(root, Err(BootstrapError::MissingRanks { .. })));
    let took = t0.elapsed();
    assert!(took >= timeout && took < timeout + Duration::from_secs(3), "{took:?}");
}

#[test]
fn no_root_times_out() {
    // Nothing listens on this port (bound then closed).
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let id = UniqueId::for_address(SocketAddr::from(([127, 0, 0, 1], port)));
    let t0 = Instant::now();
    let e = Bootstrap::init(&id, 0, 2, &cfg(Duration::from_millis(400))).unwrap_err();
    assert!(matches!(e, BootstrapError::Timeout { op: "connect to the root", .. }), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(2));
}

#[test]
fn invalid_arguments() {
    let id = UniqueId::for_address("127.0.0.1:9".parse().unwrap());
    let c = cfg(Duration::from_secs(1));
    assert!(matches!(Bootstrap::init(&id, 2, 2, &c), Err(BootstrapError::InvalidRank { rank: 2, nranks: 2 })));
    assert!(matches!(Bootstrap::init(&id, 0, 0, &c), Err(BootstrapError::InvalidRank { .. })));
    let bad_if = BootstrapConfig::default().with_ifname("=no-such-interface0");
    assert!(matches!(Root::start(&bad_if), Err(BootstrapError::NoInterface { .. })));
}

#[test]
fn abort_while_waiting() {
    log();
    // Rank 0 of 2 waits for the root's reply (rank 1 never comes); the abort flag ends it.
    let root_cfg = cfg(Duration::from_secs(30));
    let root = Root::start(&root_cfg).unwrap();
    let rank_cfg = cfg(Duration::from_secs(30));
    let flag = rank_cfg.abort.clone();
    let setter = thread::spawn(move || {
        thread::sleep(Duration::from_millis(200));
        flag.store(true, Ordering::Release);
    });
    let t0 = Instant::now();
    let e = Bootstrap::init(&root.id(), 0, 2, &rank_cfg).unwrap_err();
    let took = t0.elapsed();
    assert!(matches!(e, BootstrapError::Aborted { .. }), "{e}");
    assert!(took < Duration::from_secs(1), "abort took {took:?}");
    setter.join().unwrap();
    // Aborting the root tells the ranks that reached it, and ends the root.
    root_cfg.abort.store(true, Ordering::Release);
    assert!(matches!(root.join(), Err(BootstrapError::Aborted { .. })));

    // After a successful init: recv with no sender, then Bootstrap::abort from another thread.
    let config = cfg(Duration::from_secs(30));
    let (results, _) = run(&config, &all_ranks(2), &[], |b| {
        if b.rank() == 1 {
            return Ok(());
        }
        thread::scope(|s| {
            s.spawn(|| {
                thread::sleep(Duration::from_millis(200));
                b.abort();
            });
            let t0 = Instant::now();
            let e = b.recv(1, 77).unwrap_err();
            assert!(t0.elapsed() < Duration::from_secs(1));
            assert!(b.is_aborted());
            Err(e)
        })
    });
    let e = results.into_iter().next().unwrap().unwrap().unwrap_err();
    assert!(matches!(e, BootstrapError::Aborted { op: "recv" }), "{e}");
}

#[test]
fn abort_flag_shared_arc() {
    // The config's flag is the caller's Arc: setting it before init fails at once.
    let flag = Arc::new(AtomicBool::new(true));
    let c = cfg(Duration::from_secs(5)).with_abort(flag);
    let id = UniqueId::for_address("127.0.0.1:9".parse().unwrap());
    assert!(matches!(Bootstrap::init(&id, 0, 2, &c), Err(BootstrapError::Aborted { .. })));
}

/// A rank that goes away mid-collective makes its ring neighbour fail at once (not at the
/// timeout); a send to it fails too.
#[test]
fn dead_peer_fails_fast() {
    let config = cfg(Duration::from_secs(20));
    let t0 = Instant::now();
    let (results, _) = run(&config, &all_ranks(2), &[], |b| {
        b.barrier().unwrap();
        if b.rank() == 1 {
            drop(b);
            return None;
        }
        thread::sleep(Duration::from_millis(100));
        Some((b.all_gather(b"x").unwrap_err(), b.send(1, 0, b"y").unwrap_err()))
    });
    let (gather, send) = results.into_iter().next().unwrap().unwrap().unwrap();
    assert!(matches!(gather, BootstrapError::ConnectionClosed { op: "all_gather", peer: Some(1) }), "{gather}");
    assert!(send.to_string().contains("connect to rank 1"), "{send}");
    assert!(t0.elapsed() < Duration::from_secs(5));
}

/// A stranger's silent connections to a rank's listener, made while the rank waits for the
/// root's reply, must not delay its init (they were accepted one at a time with a 2 s
/// header timeout each). The test plays the root, so it knows the rank's listen address.
#[test]
fn silent_connections_do_not_stall_init() {
    log();
    let fake_root = TcpListener::bind("127.0.0.1:0").unwrap();
    let id = UniqueId::for_address(fake_root.local_addr().unwrap());
    let nonce = u64::from_le_bytes(id.to_bytes()[8..16].try_into().unwrap());
    let rank = thread::spawn(move || {
        let t0 = Instant::now();
        let b = Bootstrap::init(&id, 0, 1, &cfg(Duration::from_secs(10)));
        (b, t0.elapsed())
    });
    let (mut s, _) = fake_root.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut hello = [0u8; HEADER_BYTES + wire::HELLO_BYTES];
    s.read_exact(&mut hello).unwrap();
    let listen = Hello::decode(&hello[HEADER_BYTES..]).unwrap().listen;
    let root_says =
        |kind, payload: &[u8]| wire::message(Header::new(nonce, kind, ROOT_RANK, 0, payload.len()), payload);
    s.write_all(&root_says(Kind::HelloAck, &0u32.to_le_bytes())).unwrap();

    let _silent = silent_connections(listen, 200);
    s.write_all(&root_says(Kind::RootReply, &RootReply { nranks: 1, next: listen }.encode())).unwrap();
    // The rank is done: it says so, and the root lets it go.
    let mut done = [0u8; HEADER_BYTES];
    s.read_exact(&mut done).unwrap();
    assert_eq!(Header::decode(&done, nonce, &|| "the rank".into()).unwrap().kind, Kind::Done);
    s.write_all(&root_says(Kind::AllDone, &[])).unwrap();
    let (b, took) = rank.join().unwrap();
    b.unwrap_or_else(|e| panic!("init failed after {took:?} despite the root's reply: {e}"));
    eprintln!("init with 200 silent connections: {took:?}");
    assert!(took < Duration::from_secs(5), "init took {took:?} with 200 silent connections");
}

/// The same after init: silent connections to a rank's listener do not delay its `recv`.
#[test]
fn silent_connections_do_not_stall_recv() {
    let (results, report) = run(&cfg(Duration::from_secs(10)), &all_ranks(2), &[], |b| {
        b.barrier()?;
        let _silent = (b.rank() == 1).then(|| silent_connections(b.peer_addr(0).unwrap(), 50));
        b.barrier()?;
        let t0 = Instant::now();
        match b.rank() {
            0 => assert_eq!(b.recv(1, 7)?, b"through"),
            _ => b.send(0, 7, b"through")?,
        }
        let took = t0.elapsed();
        b.barrier()?;
        Ok::<_, BootstrapError>(took)
    });
    for r in results {
        let took = r.unwrap().unwrap();
        eprintln!("send/recv with 50 silent connections: {took:?}");
        assert!(took < Duration::from_secs(5), "send/recv took {took:?} with 50 silent connections");
    }
    report.unwrap();
}
