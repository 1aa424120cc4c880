//! Bootstrap: ranks as threads (1, 2, 5, 17, 130), as separate processes (this test binary
//! re-run as children), and every error the root or a rank must report. Loopback only.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use jitccl_runtime::bootstrap::wire::{self, Header, Hello, Kind, RootReply, HEADER_BYTES, ROOT_RANK};
use jitccl_runtime::bootstrap::{Bootstrap, BootstrapConfig, BootstrapError, Root, RootReport, TorchrunEnv, UniqueId};

/// Selects a child role when this binary is re-run by `across_processes_*`.
const CHILD_VAR: &str = "JITCCL_BOOTSTRAP_TEST_CHILD";

fn log() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

fn cfg(timeout: Duration) -> BootstrapConfig {
    BootstrapConfig::default().with_timeout(timeout).with_ifname("lo")
}

/// Starts a root and `ranks.len()` rank threads (`ranks[i]` = (rank, nranks) claimed by
/// thread i, started `delays[i]` after the root), each running `f` on its bootstrap.
fn run<T: Send>(
    config: &BootstrapConfig,
    ranks: &[(usize, usize)],
    delays: &[Duration],
    f: impl Fn(Bootstrap) -> T + Sync,
) -> (Vec<Result<T, BootstrapError>>, Result<RootReport, BootstrapError>) {
    log();
    let root = Root::start(config).expect("start root");
    let id = root.id();
    assert!(id.root_addr().ip().is_loopback(), "tests stay on loopback: {id:?}");
    let results = thread::scope(|s| {
        let hs: Vec<_> = ranks
            .iter()
            .enumerate()
            .map(|(i, &(rank, nranks))| {
                let f = &f;
                let delay = delays.get(i).copied().unwrap_or_default();
                thread::Builder::new()
                    .stack_size(256 << 10)
                    .spawn_scoped(s, move || {
                        thread::sleep(delay);
                        Bootstrap::init(&id, rank, nranks, config).map(f)
                    })
                    .unwrap()
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
    });
    (results, root.join())
}

fn all_ranks(n: usize) -> Vec<(usize, usize)> {
    (0..n).map(|r| (r, n)).collect()
}

fn payload(rank: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + rank * 7) as u8).collect()
}

/// all_gather (uneven sizes, then a large one), every pair send/recv with tags received in
/// the opposite order of sending, send to self, barrier.
fn exercise(n: usize) {
    let t0 = Instant::now();
    let big = if n <= 5 { 300_000 } else { 0 };
    let (results, root) = run(&cfg(Duration::from_secs(20)), &all_ranks(n), &[], |b| {
        let (r, n) = (b.rank(), b.nranks());
        // Uneven contributions: rank r gives r * 3 + 1 bytes.
        let got = b.all_gather(&payload(r, r * 3 + 1)).unwrap();
        assert_eq!(got.len(), n);
        for (p, g) in got.iter().enumerate() {
            assert_eq!(g, &payload(p, p * 3 + 1), "rank {r}: block of rank {p}");
        }
        if big > 0 {
            let got = b.all_gather(&payload(r, big)).unwrap();
            assert!(got.iter().enumerate().all(|(p, g)| g == &payload(p, big)), "rank {r}: large all_gather");
        }
        // Any-to-any: tag 1 then tag 2 to everyone (self included) ...
        for p in 0..n {
            b.send(p, 1, format!("{r}->{p} tag 1").as_bytes()).unwrap();
            b.send(p, 2, format!("{r}->{p} tag 2").as_bytes()).unwrap();
        }
        // ... received tag 2 first, from the peers in reverse order.
        for p in (0..n).rev() {
            assert_eq!(b.recv(p, 2).unwrap(), format!("{p}->{r} tag 2").as_bytes());
            assert_eq!(b.recv(p, 1).unwrap(), format!("{p}->{r} tag 1").as_bytes());
        }
        // Two messages with the same tag arrive in order.
        let next = (r + 1) % n;
        let prev = (r + n - 1) % n;
        b.send(next, 9, b"first").unwrap();
        b.send(next, 9, b"second").unwrap();
        assert_eq!(b.recv(prev, 9).unwrap(), b"first");
        assert_eq!(b.recv(prev, 9).unwrap(), b"second");
        b.barrier().unwrap();
        let again = b.all_gather(&[r as u8]).unwrap();
        assert_eq!(again, (0..n).map(|p| vec![p as u8]).collect::<Vec<_>>());
        b.barrier().unwrap();
        r
    });
    for (i, r) in results.into_iter().enumerate() {
        assert_eq!(r.unwrap_or_else(|e| panic!("rank {i}: {e}")), i);
    }
    let root = root.expect("root");
    assert_eq!(root.nranks, n);
    assert_eq!(root.rejected, 0);
    eprintln!("{n} ranks: {:?}", t0.elapsed());
}

#[test]
fn ranks_1() {
    exercise(1);
}

#[test]
fn ranks_2() {
    exercise(2);
}

#[test]
fn ranks_5() {
    exercise(5);
}

#[test]
fn ranks_17() {
    exercise(17);
}

/// Above 128 ranks the connections to the root are staggered.
#[test]
fn ranks_130_all_gather() {
    let t0 = Instant::now();
    let n = 130;
    let (results, root) = run(&cfg(Duration::from_secs(30)), &all_ranks(n), &[], |b| {
        let got = b.all_gather(&(b.rank() as u32).to_le_bytes()).unwrap();
        assert!(got.iter().enumerate().all(|(p, g)| g == &(p as u32).to_le_bytes()));
        b.rank()
    });
    for (i, r) in results.into_iter().enumerate() {
        assert_eq!(r.unwrap_or_else(|e| panic!("rank {i}: {e}")), i);
    }
    assert_eq!(root.unwrap().nranks, n);
    // The last rank waited ~129 ms before contacting the root.
    assert!(t0.elapsed() >= Duration::from_millis(120));
    eprintln!("130 ranks: {:?}", t0.elapsed());
}

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
        let mut b = [0u8; 76];
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
fn comm_id_start() {
    log();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let spec = format!("127.0.0.1:{port}");
    let config = cfg(Duration::from_secs(10));
    let results: Vec<_> = thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|r| {
                let (spec, config) = (&spec, &config);
                s.spawn(move || {
                    if r != 0 {
                        thread::sleep(Duration::from_millis(50)); // ranks may come before the root
                    }
                    let id = UniqueId::from_comm_id(spec, r == 0, config)?;
                    Bootstrap::init(&id, r, 3, config)?.all_gather(&[r as u8 * 2])
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in results {
        assert_eq!(r.unwrap(), vec![vec![0], vec![2], vec![4]]);
    }
    assert!(UniqueId::from_comm_id("127.0.0.1", false, &config).is_err());
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

/// IPv6: a root on [::1] given as JITCCL_COMM_ID; with no interface filter the ranks pick
/// the loopback interface (the root is on loopback) with the root's address family.
#[test]
fn ipv6_loopback() {
    let Ok(l) = TcpListener::bind("[::1]:0") else {
        eprintln!("no IPv6 loopback here: skipped");
        return;
    };
    let port = l.local_addr().unwrap().port();
    drop(l);
    let spec = format!("[::1]:{port}");
    let config = BootstrapConfig::default().with_timeout(Duration::from_secs(10));
    let results: Vec<_> = thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let (spec, config) = (&spec, &config);
                s.spawn(move || {
                    let id = UniqueId::from_comm_id(spec, r == 0, config)?;
                    let b = Bootstrap::init(&id, r, 2, config)?;
                    assert!(b.peer_addr(r).unwrap().is_ipv6(), "{b:?}");
                    b.all_gather(&[r as u8])
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in results {
        assert_eq!(r.unwrap(), vec![vec![0], vec![1]]);
    }
}

/// Several threads of one rank receive at once, each its own tag, while messages arrive in
/// another order.
#[test]
fn concurrent_receivers() {
    let (results, _) = run(&cfg(Duration::from_secs(20)), &all_ranks(2), &[], |b| {
        if b.rank() == 1 {
            for tag in (0..8u64).rev() {
                b.send(0, tag, &tag.to_le_bytes()).unwrap();
            }
            b.barrier().unwrap();
            return;
        }
        thread::scope(|s| {
            for tag in 0..8u64 {
                let b = &b;
                s.spawn(move || assert_eq!(b.recv(1, tag).unwrap(), tag.to_le_bytes()));
            }
        });
        b.barrier().unwrap();
    });
    for r in results {
        r.unwrap();
    }
}

// ---- across processes ----------------------------------------------------------------

fn spawn_child(role: &str, envs: &[(&str, String)]) -> Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", "bootstrap_child_process", "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, role)
        .env_remove("JITCCL_COMM_ID")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        c.env(k, v);
    }
    c.spawn().expect("spawn child")
}

/// Waits for each child (at most `limit` in all); kills and fails on a hang.
fn wait_children(children: Vec<(usize, Child)>, limit: Duration) {
    let end = Instant::now() + limit;
    for (rank, mut child) in children {
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let mut out = String::new();
                child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
                let mut err = String::new();
                child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
                assert!(status.success(), "child rank {rank} failed ({status}):\n{out}\n{err}");
                assert!(out.contains(&format!("child rank {rank} ok")), "child rank {rank}:\n{out}\n{err}");
                break;
            }
            if Instant::now() > end {
                let _ = child.kill();
                let _ = child.wait();
                panic!("child rank {rank} hung");
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

/// What every rank does, in a thread or a child process: gather (rank, pid), pass a
/// message around the ring, barrier.
fn rank_work(b: &Bootstrap) -> Result<(), BootstrapError> {
    let (r, n) = (b.rank(), b.nranks());
    let mine = format!("{r}:{}", std::process::id());
    let all = b.all_gather(mine.as_bytes())?;
    for (p, g) in all.iter().enumerate() {
        let s = String::from_utf8(g.clone()).unwrap();
        assert!(s.starts_with(&format!("{p}:")), "block {p}: {s}");
    }
    b.send((r + 1) % n, 42, mine.as_bytes())?;
    let from_prev = b.recv((r + n - 1) % n, 42)?;
    assert_eq!(from_prev, all[(r + n - 1) % n]);
    b.barrier()
}

/// The child side of the `across_processes_*` tests; does nothing in a normal run.
#[test]
fn bootstrap_child_process() {
    let Ok(role) = std::env::var(CHILD_VAR) else { return };
    log();
    let (rank, boot) = if role == "env" {
        // torchrun convention for rank/size, JITCCL_COMM_ID for the root, the
        // JITCCL_* variables for the config.
        let tr = TorchrunEnv::from_env().unwrap();
        let config = BootstrapConfig::from_env().unwrap();
        assert_eq!(config.ifname.as_deref(), Some("lo"));
        let id = UniqueId::from_env(tr.rank == 0, &config).unwrap().expect("JITCCL_COMM_ID is set");
        assert_eq!(id.root_addr(), tr.master_socket_addr().unwrap());
        (tr.rank, Bootstrap::init(&id, tr.rank, tr.world_size, &config))
    } else {
        // "<hex id>,<rank>,<nranks>"
        let parts: Vec<&str> = role.split(',').collect();
        let id = UniqueId::from_hex(parts[0]).unwrap();
        let (rank, nranks) = (parts[1].parse().unwrap(), parts[2].parse().unwrap());
        (rank, Bootstrap::init(&id, rank, nranks, &cfg(Duration::from_secs(20))))
    };
    let boot = boot.unwrap_or_else(|e| panic!("child rank {rank}: {e}"));
    rank_work(&boot).unwrap_or_else(|e| panic!("child rank {rank}: {e}"));
    println!("child rank {rank} ok");
}

/// Rank 0 in this process (with the root, from `Root::start`), ranks 1..4 in child
/// processes given the id as hex.
#[test]
fn across_processes_with_unique_id() {
    log();
    let n = 4;
    let config = cfg(Duration::from_secs(20));
    let root = Root::start(&config).unwrap();
    let id = root.id();
    let children: Vec<_> = (1..n).map(|r| (r, spawn_child(&format!("{},{r},{n}", id.to_hex()), &[]))).collect();
    let b = Bootstrap::init(&id, 0, n, &config).unwrap();
    rank_work(&b).unwrap();
    wait_children(children, Duration::from_secs(30));
    assert_eq!(root.join().unwrap().nranks, n);
}

/// Three child processes started the torchrun way (MASTER_ADDR, MASTER_PORT, RANK,
/// WORLD_SIZE, LOCAL_RANK) with JITCCL_COMM_ID: rank 0's process runs the root.
#[test]
fn across_processes_with_comm_id_env() {
    let n = 3;
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let children: Vec<_> = (0..n)
        .map(|r| {
            let envs = [
                ("JITCCL_COMM_ID", format!("127.0.0.1:{port}")),
                ("JITCCL_SOCKET_IFNAME", "lo".to_string()),
                ("JITCCL_BOOTSTRAP_TIMEOUT", "20".to_string()),
                ("MASTER_ADDR", "127.0.0.1".to_string()),
                ("MASTER_PORT", port.to_string()),
                ("RANK", r.to_string()),
                ("WORLD_SIZE", n.to_string()),
                ("LOCAL_RANK", r.to_string()),
            ];
            (r, spawn_child("env", &envs))
        })
        .collect();
    wait_children(children, Duration::from_secs(30));
}

#[test]
fn abort_flag_shared_arc() {
    // The config's flag is the caller's Arc: setting it before init fails at once.
    let flag = Arc::new(AtomicBool::new(true));
    let c = cfg(Duration::from_secs(5)).with_abort(flag);
    let id = UniqueId::for_address("127.0.0.1:9".parse().unwrap());
    assert!(matches!(Bootstrap::init(&id, 0, 2, &c), Err(BootstrapError::Aborted { .. })));
}

/// A timeout too large for an `Instant` (the API takes any `Duration`) must not panic:
/// every deadline saturates.
#[test]
fn huge_timeout_does_not_panic() {
    let (results, report) = run(&cfg(Duration::MAX), &all_ranks(2), &[], |b| b.all_gather(&[b.rank() as u8]));
    for r in results {
        assert_eq!(r.unwrap().unwrap(), vec![vec![0], vec![1]]);
    }
    assert_eq!(report.unwrap().nranks, 2);
}

/// Opens `n` connections to `addr` that never send anything.
fn silent_connections(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n).map(|_| TcpStream::connect(addr).unwrap()).collect()
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
    let mut hello = [0u8; HEADER_BYTES + 36];
    s.read_exact(&mut hello).unwrap();
    let listen = Hello::decode(&hello[HEADER_BYTES..]).unwrap().listen;
    s.write_all(&Header::new(nonce, Kind::HelloAck, ROOT_RANK, 0, 0).encode()).unwrap();

    let _silent = silent_connections(listen, 200);
    let reply = RootReply { nranks: 1, next: listen }.encode();
    let mut r = TcpStream::connect(listen).unwrap();
    r.write_all(&wire::message(Header::new(nonce, Kind::RootReply, ROOT_RANK, 0, reply.len()), &reply)).unwrap();
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
