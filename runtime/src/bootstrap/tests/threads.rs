//! Ranks as threads of this process: all_gather, barrier and any-to-any send/recv at
//! several sizes, concurrent receivers, JITCCL_COMM_ID-style starts (IPv4 and IPv6).

use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use super::*;

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
