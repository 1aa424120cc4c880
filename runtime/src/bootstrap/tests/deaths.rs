//! A rank or a root that goes away during init: every other rank fails at once (well
//! within the timeout), naming it, through its link to the root; a rank that is only slow
//! to start still gets the whole timeout.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use super::*;
use crate::bootstrap::wire::{self, Header, Kind, HEADER_BYTES, ROOT_RANK};

/// Far above how long any of these tests may take: only a death seen at once passes.
const LONG: Duration = Duration::from_secs(30);
/// How soon every survivor must have failed.
const FAST: Duration = Duration::from_secs(2);

/// `nranks` rank threads through `init_scalable` (the root keeps watching); `f` gets each
/// rank's number and bootstrap (or init's error), and returns when that rank is done; then
/// the root's outcome.
fn watched<T: Send>(
    nranks: usize, f: impl Fn(usize, Result<Bootstrap, BootstrapError>) -> T + Sync,
) -> (Vec<T>, RootOutcome) {
    log();
    let config = cfg(LONG);
    let root = Root::start(&config).unwrap();
    let id = root.id();
    let results = thread::scope(|s| {
        let hs: Vec<_> = (0..nranks)
            .map(|r| {
                let (f, config) = (&f, &config);
                s.spawn(move || f(r, Bootstrap::init_scalable(&[id], r, nranks, config)))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    (results, root.join())
}

type RootOutcome = Result<RootReport, BootstrapError>;

fn assert_names(e: &BootstrapError, rank: usize, culprit: usize, how: &str) {
    match e {
        BootstrapError::PeerGone { rank: Some(r), culprit: c, how: h, .. } if *r == rank && *c == culprit => {
            assert!(h.contains(how), "rank {rank}: {e}")
        }
        other => panic!("rank {rank} should name rank {culprit} ({how}), got: {other}"),
    }
}

#[test]
fn a_rank_gone_during_init_fails_the_others_at_once_naming_it() {
    let t0 = Instant::now();
    let (results, root) = watched(4, |rank, b| {
        if rank == 2 {
            // As a killed process: links and ring sockets close without a word.
            drop(b.unwrap());
            return None;
        }
        let e = b.and_then(|b| b.all_gather(&[rank as u8]).and_then(|_| b.barrier())).unwrap_err();
        Some((rank, e, t0.elapsed()))
    });
    for (rank, e, took) in results.into_iter().flatten() {
        assert_names(&e, rank, 2, "is gone");
        assert!(e.to_string().contains(&format!("on rank {rank}: rank 2 is gone")), "{e}");
        assert!(took < FAST, "rank {rank} failed after {took:?}");
    }
    assert!(matches!(root, Err(BootstrapError::PeerGone { culprit: 2, .. })), "{root:?}");
}

#[test]
fn a_rank_that_fails_during_init_tells_the_others_why() {
    let t0 = Instant::now();
    let (results, _) = watched(3, |rank, b| {
        if rank == 1 {
            b.unwrap().fail_init(&"device error: out of memory");
            return None;
        }
        let e = b.and_then(|b| b.barrier()).unwrap_err();
        Some((rank, e, t0.elapsed()))
    });
    for (rank, e, took) in results.into_iter().flatten() {
        assert_names(&e, rank, 1, "failed during init: device error: out of memory");
        assert!(took < FAST, "rank {rank} failed after {took:?}");
    }
}

/// Two roots, each watching its block: rank 3 (of block 1) dies; rank 0 hears it from root
/// 1 (it follows block 1 in the ring, so it links to both roots) and tells root 0, so the
/// ranks of block 0 name rank 3 too.
#[test]
fn word_of_a_death_crosses_roots() {
    log();
    let config = cfg(LONG);
    let roots: Vec<Root> = (0..2).map(|_| Root::start(&config).unwrap()).collect();
    let ids: Vec<UniqueId> = roots.iter().map(Root::id).collect();
    let t0 = Instant::now();
    let errors: Vec<_> = thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|r| {
                let (ids, config) = (&ids, &config);
                s.spawn(move || {
                    let b = Bootstrap::init_scalable(ids, r, 4, config);
                    if r == 3 {
                        return drop(b.unwrap());
                    }
                    let e = b.and_then(|b| b.barrier()).unwrap_err();
                    assert_names(&e, r, 3, "is gone");
                    assert!(t0.elapsed() < FAST, "rank {r} failed after {:?}", t0.elapsed());
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join()).collect()
    });
    assert!(errors.iter().all(Result::is_ok), "a rank failed its checks");
    for root in roots {
        assert!(matches!(root.join(), Err(BootstrapError::PeerGone { culprit: 3, .. })));
    }
}

/// After every rank has finished init, the root lets go: a rank's death is no longer its
/// business (the survivors' later waits fail on their own, naming the closed neighbour).
#[test]
fn finished_ranks_are_left_alone() {
    let (results, root) = watched(3, |rank, b| {
        let b = b.unwrap();
        b.finish_init().unwrap();
        (rank != 0).then(|| b.all_gather(&[]).unwrap_err())
    });
    for e in results.into_iter().flatten() {
        assert!(matches!(e, BootstrapError::ConnectionClosed { .. }), "{e}");
    }
    assert_eq!(root.unwrap().nranks, 3);
}

/// Reads a rank's hello from `s` and acknowledges it, saying `host` runs the root.
fn fake_hello(s: &mut TcpStream, nonce: u64, host: Option<u32>) {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut hello = [0u8; HEADER_BYTES + wire::HELLO_BYTES];
    s.read_exact(&mut hello).unwrap();
    let ack = host.map_or(0, |h| h + 1).to_le_bytes();
    s.write_all(&wire::message(Header::new(nonce, Kind::HelloAck, ROOT_RANK, 0, 4), &ack)).unwrap();
}

/// The root's process dies while ranks 0 and 1 (of 3) wait for its reply; rank 2 comes
/// later and is refused. Rank 0 ran the root: rank 1 names it (the root said so); rank 2
/// names it from its configuration; rank 0 itself names the root's address.
#[test]
fn a_dead_root_fails_its_ranks_at_once_naming_the_rank_that_ran_it() {
    log();
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    // An id a running root made: a refused connection means the root is gone. (Without a
    // key: the fake root does not authenticate.)
    let id = UniqueId::random(fake.local_addr().unwrap()).unwrap().with_key(None);
    let t0 = Instant::now();
    let config = cfg(LONG);
    let results: Vec<_> = thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|r| {
                let config = config.clone().with_root_rank((r == 2).then_some(0));
                s.spawn(move || {
                    if r == 2 {
                        thread::sleep(Duration::from_millis(300));
                    }
                    Bootstrap::init(&id, r, 3, &config).map(drop).unwrap_err()
                })
            })
            .collect();
        let (mut a, _) = fake.accept().unwrap();
        let (mut b, _) = fake.accept().unwrap();
        fake_hello(&mut a, id.nonce(), Some(0));
        fake_hello(&mut b, id.nonce(), Some(0));
        drop((a, b, fake));
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(t0.elapsed() < FAST, "the ranks failed after {:?}", t0.elapsed());
    assert!(matches!(&results[0], BootstrapError::RootGone { rank: 0, .. }), "{}", results[0]);
    assert_names(&results[1], 1, 0, "the bootstrap root it ran at");
    assert_names(&results[2], 2, 0, "refused the connection");
    assert!(results.iter().all(|e| e.to_string().contains(&id.root_addr().to_string())), "{results:?}");
}

/// Four ranks whose links close together (a node going down) while the root still waits
/// for a sixth: the root fails the communicator once, telling the rank that remains (and,
/// till its own 2 s deadline, any that comes late).
#[test]
fn ranks_leaving_together_fail_the_communicator_once() {
    log();
    let root = Root::start(&cfg(Duration::from_secs(2))).unwrap();
    let id = root.id();
    let hello = |rank: u32, listen: &TcpListener| {
        let h = hello_of(&id, 6, listen.local_addr().unwrap());
        let mut s = connect_as_rank(id.root_addr(), &id);
        s.write_all(&wire::message(Header::new(id.nonce(), Kind::Hello, rank, 0, wire::HELLO_BYTES), &h.encode()))
            .unwrap();
        let mut ack = [0u8; HEADER_BYTES + 4];
        s.read_exact(&mut ack).unwrap();
        s
    };
    let t0 = Instant::now();
    let survivor = thread::spawn(move || Bootstrap::init(&id, 0, 6, &cfg(LONG)).map(drop).unwrap_err());
    let listeners: Vec<_> = (0..4).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let links: Vec<_> = (1..5).zip(&listeners).map(|(r, l)| hello(r, l)).collect();
    drop(links);
    let e = survivor.join().unwrap();
    assert!(matches!(e, BootstrapError::PeerGone { rank: Some(0), culprit: 1..=4, .. }), "{e}");
    assert!(t0.elapsed() < FAST, "rank 0 failed after {:?}", t0.elapsed());
    assert!(matches!(root.join(), Err(BootstrapError::PeerGone { .. })));
}

/// A rank slow to start is not taken for a dead one: it still has the whole timeout.
#[test]
fn a_rank_slow_to_start_still_joins() {
    let late = Duration::from_millis(1500);
    let (results, root) =
        run(&cfg(Duration::from_secs(5)), &all_ranks(3), &[Duration::ZERO, Duration::ZERO, late], |b| {
            b.all_gather(&[b.rank() as u8])
        });
    for r in results {
        assert_eq!(r.unwrap().unwrap(), vec![vec![0], vec![1], vec![2]]);
    }
    assert_eq!(root.unwrap().nranks, 3);
}
