//! With a key (every id a root makes carries a fresh one), only connections that prove that
//! they know it get in: at the root and at a rank's listener; a stranger that speaks the
//! protocol, one with another key and one replaying a recorded handshake or message are
//! refused, and the real ranks' results are right. A rank with another key, or none, fails
//! at once. With TLS started, the ring's all-gathers come out right, and a neighbour in the
//! clear is refused.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use super::*;
use crate::auth::{seal, Failure, Initiator, JobKey, Refusal, Tls, REPLY_LEN, SEAL_LEN};
use crate::bootstrap::wire::{self, Header, Kind};

/// The connection is closed by the other side (within 5 s).
fn closed(mut s: TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 128];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) => return e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

/// A handshake as an eavesdropper records it: the hello and proof of a real one at `addr`.
fn record(addr: SocketAddr, key: &JobKey) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    let (me, hello) = Initiator::start(key, Service::Bootstrap).unwrap();
    s.write_all(&hello).unwrap();
    let mut reply = [0u8; REPLY_LEN];
    s.read_exact(&mut reply).unwrap();
    let proof = me.finish(&reply).unwrap();
    s.write_all(&proof).unwrap();
    [hello.as_slice(), &proof].concat()
}

/// What a stranger that knows the id's nonce (not its key) sends: a well-formed message.
fn forged(id: &UniqueId, kind: Kind, rank: u32, tag: u64, payload: &[u8]) -> Vec<u8> {
    wire::message(Header::new(id.nonce(), kind, rank, tag, payload.len()), payload)
}

#[test]
fn strangers_are_refused_at_the_root_and_at_a_rank_and_results_stay_right() {
    log();
    let config = cfg(Duration::from_secs(20));
    let root = Root::start(&config).unwrap();
    let id = root.id();
    let key = id.key().expect("a root's id carries a key");
    let other = JobKey::random().unwrap();
    let addr = id.root_addr();
    let decoy = TcpListener::bind("127.0.0.1:0").unwrap();
    let hello = hello_of(&id, 2, decoy.local_addr().unwrap());
    // Each claims rank 1: one let in would make the real rank 1 a duplicate.
    let claim = forged(&id, Kind::Hello, 1, 0, &hello.encode());
    let mut plain = TcpStream::connect(addr).unwrap();
    plain.write_all(&claim).unwrap();
    assert!(closed(plain), "a hello without the handshake is refused");
    let mut wrong = TcpStream::connect(addr).unwrap();
    wrong.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert!(matches!(initiate(&mut wrong, &other, Service::Bootstrap), Err(Failure::Refused(Refusal::KeysDiffer))));
    drop(wrong);
    let recorded = record(addr, &key);
    let mut replay = TcpStream::connect(addr).unwrap();
    replay.write_all(&recorded).unwrap();
    replay.write_all(&claim).unwrap();
    assert!(closed(replay), "a replayed handshake is refused");

    let results: Vec<_> = thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let config = &config;
                s.spawn(move || {
                    let b = Bootstrap::init(&id, r, 2, config)?;
                    if r == 1 {
                        // Messages forged as rank 1's: without the key (a made-up seal),
                        // after a replayed handshake, and a recorded one sent again.
                        let listener = b.peer_addr(0).unwrap();
                        let send = |bytes: &[u8]| {
                            let mut s = TcpStream::connect(listener).unwrap();
                            s.write_all(bytes).unwrap();
                            s
                        };
                        let plain = send(&[forged(&id, Kind::P2p, 1, 7, b"forged"), vec![0; SEAL_LEN]].concat());
                        let replay = send(&[record(listener, &key), forged(&id, Kind::P2p, 1, 7, b"forged")].concat());
                        let message = forged(&id, Kind::P2p, 1, 7, b"recorded");
                        let header = &message[..wire::HEADER_BYTES];
                        let sealed = seal(&key, &b.sessions[0], 1000, &[header, b"recorded"]);
                        let recorded = [message.as_slice(), &sealed].concat();
                        drop(send(&recorded));
                        assert!(closed(plain) && closed(replay), "strangers at a rank's listener are refused");
                        assert!(closed(send(&recorded)), "a recorded message is taken once");
                        b.send(0, 7, b"rank 1's own")?;
                    }
                    let got = if r == 0 { [b.recv(1, 7)?, b.recv(1, 7)?].concat() } else { Vec::new() };
                    Ok::<_, BootstrapError>((got, b.all_gather(&[r as u8 + 10])?))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (r, res) in results.into_iter().enumerate() {
        let (got, all) = res.unwrap_or_else(|e| panic!("rank {r}: {e}"));
        assert_eq!(all, vec![vec![10], vec![11]]);
        if r == 0 {
            assert_eq!(got, b"recordedrank 1's own");
        }
    }
    let report = root.join().unwrap();
    assert_eq!(report.addrs.len(), 2);
    assert!(!report.addrs.contains(&decoy.local_addr().unwrap()), "no stranger took a rank's place");
    // The plain hello, the other key (closed before its proof), the replay; the recording
    // itself closed after a good handshake and is not counted.
    assert_eq!(report.rejected, 3);
}

#[test]
fn ranks_with_another_key_or_none_fail_at_once_saying_so() {
    log();
    let config = cfg(Duration::from_secs(2));
    let root = Root::start(&config).unwrap();
    let id = root.id();
    let other = JobKey::from_secret("a key that is not the job's").unwrap();
    let t0 = Instant::now();
    let ids = [id, id.with_key(Some(other)), id.with_key(None)];
    let results: Vec<_> = thread::scope(|s| {
        let hs: Vec<_> = ids
            .iter()
            .enumerate()
            .map(|(r, id)| {
                let config = &config;
                s.spawn(move || (Bootstrap::init(id, r, 3, config).map(drop).unwrap_err(), t0.elapsed()))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (e, took) = &results[1];
    assert!(matches!(e, BootstrapError::Auth { rank: 1, why: Refusal::KeysDiffer, .. }), "{e}");
    assert!(e.to_string().contains("keys differ") && e.to_string().contains(&id.root_addr().to_string()), "{e}");
    assert!(*took < Duration::from_secs(1), "rank 1 failed after {took:?}");
    let (e, took) = &results[2];
    assert!(e.to_string().contains("this rank has none"), "{e}");
    assert!(*took < Duration::from_secs(1), "rank 2 failed after {took:?}");
    let (e, _) = &results[0];
    assert!(matches!(e, BootstrapError::MissingRanks { missing, .. } if *missing == [1, 2]), "{e}");
    let hex = id.to_hex();
    for (e, _) in &results {
        assert!(!e.to_string().contains(&hex[80..144]), "no error shows the key: {e}");
    }
    assert!(root.join().is_err());
}

/// TLS on the ring, started by every rank once init is done: blocks far larger than a TLS
/// record and than the session's buffer, tiny ones and a barrier all come out right.
/// Then a rank that stays in the clear while its neighbours start TLS: both fail, and at
/// least one names it.
#[test]
fn the_ring_carries_tls_and_its_neighbours_refuse_a_rank_in_the_clear() {
    let config = cfg(Duration::from_secs(20));
    let block = |r: usize| -> Vec<u8> { (0..3_000_000usize).map(|i| (i * 7 + r) as u8).collect() };
    let (results, root) = run(&config, &all_ranks(3), &[], |b| {
        b.start_tls(&Tls::new(&b.key().unwrap()).unwrap())?;
        let big = b.all_gather(&block(b.rank))?;
        b.barrier()?;
        Ok::<_, BootstrapError>((big, b.all_gather(&[b.rank as u8])?))
    });
    assert_eq!(root.unwrap().addrs.len(), 3);
    for (r, res) in results.into_iter().enumerate() {
        let (big, small) = res.unwrap().unwrap_or_else(|e| panic!("rank {r}: {e}"));
        assert!(big.iter().enumerate().all(|(q, b)| *b == block(q)), "rank {r}: a block came out wrong");
        assert_eq!(small, vec![vec![0], vec![1], vec![2]], "rank {r}");
    }

    let (results, _) = run(&config, &all_ranks(3), &[], |b| {
        if b.rank != 1 {
            b.start_tls(&Tls::new(&b.key().unwrap()).unwrap())?;
        }
        b.all_gather(&[b.rank as u8])
    });
    // Each neighbour fails its session. The one that reads rank 1's clear bytes first names
    // rank 1; the other may instead see that neighbour give up first and name it: whichever
    // closes first is a race, but both cannot be second.
    let mut named_rank_1 = 0;
    for r in [0, 2] {
        match &results[r] {
            Ok(Err(e @ BootstrapError::Tls { rank, peer, .. })) if *rank == r && *peer != r => {
                assert!(e.to_string().contains(&format!("TLS with rank {peer}")), "{e}");
                named_rank_1 += usize::from(*peer == 1);
            }
            other => panic!("rank {r} must fail its TLS session: {other:?}"),
        }
    }
    assert!(named_rank_1 >= 1, "a neighbour of rank 1 must name it: {results:?}");
    assert!(matches!(results[1], Ok(Err(_))), "rank 1 in the clear must fail: {:?}", results[1]);
}

/// TLS on the links to the root, started before init is finished (as a communicator does
/// it): every rank's `Done` and the root's `AllDone` go through the sessions.
#[test]
fn the_links_to_the_root_carry_tls() {
    log();
    let config = cfg(Duration::from_secs(20));
    let root = Root::start(&config).unwrap();
    let id = root.id();
    let results: Vec<_> = thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let config = &config;
                s.spawn(move || {
                    let b = Bootstrap::init_scalable(&[id], r, 2, config)?;
                    b.start_tls(&Tls::new(&b.key().unwrap()).unwrap())?;
                    let all = b.all_gather(&[r as u8])?;
                    b.finish_init().map(|()| all)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (r, res) in results.into_iter().enumerate() {
        assert_eq!(res.unwrap_or_else(|e: BootstrapError| panic!("rank {r}: {e}")), vec![vec![0], vec![1]]);
    }
    assert_eq!(root.join().unwrap().addrs.len(), 1 + 1);
}

/// The one rank of a communicator, written out: it asks its root for TLS, and after the
/// root's answer says `Done` in a session (`tls`) or in the clear; what it hears back.
fn lone_rank_says_done(tls: bool) -> (Result<RootReport, BootstrapError>, std::io::Result<Kind>) {
    log();
    let root = Root::start(&cfg(Duration::from_secs(20))).unwrap();
    let id = root.id();
    let mut s = connect_as_rank(id.root_addr(), &id);
    let listen = TcpListener::bind("127.0.0.1:0").unwrap();
    let hello = hello_of(&id, 1, listen.local_addr().unwrap());
    let read = |s: &mut dyn Read| -> std::io::Result<Kind> {
        let mut h = [0u8; wire::HEADER_BYTES];
        s.read_exact(&mut h)?;
        let h = Header::decode(&h, id.nonce(), &|| "the root".into()).map_err(std::io::Error::other)?;
        s.read_exact(&mut vec![0; h.len as usize])?;
        Ok(h.kind)
    };
    s.write_all(&forged(&id, Kind::Hello, 0, 0, &hello.encode())).unwrap();
    assert_eq!(read(&mut s).unwrap(), Kind::HelloAck);
    assert_eq!(read(&mut s).unwrap(), Kind::RootReply);
    s.write_all(&forged(&id, Kind::StartTls, 0, 0, &[])).unwrap();
    assert_eq!(read(&mut s).unwrap(), Kind::StartTls, "the root answers in the clear");
    let done = forged(&id, Kind::Done, 0, 0, &[]);
    let heard = if tls {
        let session = Tls::new(&id.key().unwrap()).unwrap().connect(&mut s).unwrap();
        let rustls::Connection::Client(mut session) = session else { panic!("a client's session") };
        let mut io = rustls::Stream::new(&mut session, &mut s);
        io.write_all(&done).and_then(|()| read(&mut io))
    } else {
        s.write_all(&done).unwrap();
        read(&mut s)
    };
    (root.join(), heard)
}

/// After the root's answer to `StartTls`, a rank's link is TLS only: a `Done` in a session
/// gets `AllDone` back in it; one in the clear is refused, and the root fails the
/// communicator naming the rank.
#[test]
fn a_rank_in_the_clear_after_asking_for_tls_is_refused_by_its_root_naming_it() {
    let (report, heard) = lone_rank_says_done(true);
    assert_eq!(report.unwrap().addrs.len(), 1);
    assert_eq!(heard.unwrap(), Kind::AllDone);

    let (report, heard) = lone_rank_says_done(false);
    match report {
        Err(e @ BootstrapError::PeerGone { culprit: 0, .. }) => {
            assert!(e.to_string().contains("rank 0") && e.to_string().contains("TLS"), "{e}")
        }
        other => panic!("the root must refuse rank 0 in the clear: {other:?}"),
    }
    assert!(heard.is_err(), "the root tells a rank in the clear nothing in the clear: {heard:?}");
}
