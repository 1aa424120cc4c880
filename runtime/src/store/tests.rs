//! The server's resource limits, with small limits so the tests stay cheap: the connection
//! cap, the validation deadline, the buffered-bytes budget, memory released when clients
//! leave, and rate-limited warnings.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::limits::Limits;
use super::{Server, Store, TcpStore};

const VALIDATE: [u8; 5] = [0x00, 0xCE, 0xF7, 0x85, 0x3C];

fn small() -> Limits {
    Limits { max_conns: 8, max_buffered: 4 << 20, validate_timeout: Duration::from_secs(1) }
}

fn serve(limits: Limits) -> Server {
    Server::bind_with("127.0.0.1:0", limits, None).unwrap()
}

fn raw(s: &Server) -> TcpStream {
    let r = TcpStream::connect(s.local_addr()).unwrap();
    r.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    r
}

fn validated(s: &Server) -> TcpStream {
    let mut r = raw(s);
    r.write_all(&VALIDATE).unwrap();
    r
}

fn eventually(what: &str, f: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(5), "not within 5 s: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The server closes the connection (EOF, or a reset when it had unread input).
fn assert_closed(r: &mut TcpStream, what: &str) {
    let mut buf = [0; 4096];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return,
            Err(e) => panic!("{what}: the server did not close the connection: {e}"),
        }
    }
}

fn works(c: &TcpStore) {
    c.set("k", b"v").unwrap();
    assert_eq!(c.get("k").unwrap(), b"v");
}

/// A SET frame announcing a `len`-byte value; the value is sent separately.
fn set_header(len: usize) -> Vec<u8> {
    let mut f = vec![1u8];
    f.extend_from_slice(&2u64.to_le_bytes());
    f.extend_from_slice(b"/k");
    f.extend_from_slice(&(len as u64).to_le_bytes());
    f
}

#[test]
fn silent_flood_at_the_connection_cap_keeps_serving() {
    let s = serve(small());
    let _silent: Vec<TcpStream> = (0..20).map(|_| raw(&s)).collect();
    let c = TcpStore::connect(s.local_addr(), Duration::from_secs(5)).unwrap();
    works(&c);
    assert!(s.stats().conns() <= 8, "{} connections", s.stats().conns());
}

#[test]
fn validated_clients_past_the_cap_are_refused_at_once() {
    let s = serve(small());
    let clients: Vec<TcpStore> =
        (0..8).map(|_| TcpStore::connect(s.local_addr(), Duration::from_secs(5)).unwrap()).collect();
    let t0 = Instant::now();
    let Err(e) = TcpStore::connect(s.local_addr(), Duration::from_secs(5)) else { panic!("a 9th client connected") };
    assert!(t0.elapsed() < Duration::from_secs(2), "refused after {:?}", t0.elapsed());
    assert!(e.to_string().contains("connection limit"), "{e}");
    works(&clients[0]);
    drop(clients);
    eventually("the closed clients are forgotten", || s.stats().conns() == 0);
    works(&TcpStore::connect(s.local_addr(), Duration::from_secs(5)).unwrap());
}

#[test]
fn unvalidated_connections_are_dropped_after_the_deadline() {
    let s = serve(small());
    let mut silent: Vec<TcpStream> = (0..5).map(|_| raw(&s)).collect();
    for r in &mut silent {
        assert_closed(r, "a connection that never sent VALIDATE");
    }
    eventually("no connection left", || s.stats().conns() == 0);
}

#[test]
fn total_buffered_bytes_are_bounded() {
    let s = serve(small());
    let value = vec![7u8; 3 << 20];
    let mut a = validated(&s);
    a.write_all(&set_header(value.len())).unwrap();
    a.write_all(&value[..2 << 20]).unwrap();
    eventually("a's bytes are buffered", || s.stats().buffered() >= 2 << 20);
    let mut b = validated(&s);
    let _ = b.write_all(&set_header(value.len()));
    let _ = b.write_all(&value);
    assert_closed(&mut b, "a connection past the server's buffer budget");
    a.write_all(&value[2 << 20..]).unwrap();
    let c = TcpStore::connect(s.local_addr(), Duration::from_secs(5)).unwrap();
    assert_eq!(c.get("k").unwrap(), value, "a's SET went through");
    drop(a);
    drop(c);
    eventually("every buffer released", || s.stats().buffered() == 0);
}

#[test]
fn parked_waits_are_released_when_clients_leave() {
    let s = serve(Limits { max_buffered: 256 << 20, ..small() });
    let key = [&(60u64 << 10).to_le_bytes()[..], &[b'w'; 60 << 10]].concat();
    let waiters: Vec<TcpStream> = (0..4u8)
        .map(|i| {
            let mut r = validated(&s);
            let mut frame = vec![6u8];
            frame.extend_from_slice(&100u64.to_le_bytes());
            for j in 0..100u8 {
                let mut k = key.clone();
                k[8] = i;
                k[9] = j;
                frame.extend_from_slice(&k);
            }
            r.write_all(&frame).unwrap();
            r
        })
        .collect();
    eventually("4 parked WAITs of 6 MiB of keys", || s.stats().buffered() >= 4 * 100 * (60 << 10));
    drop(waiters);
    eventually("the parked keys are released", || s.stats().buffered() == 0);
}

#[test]
fn malformed_frames_warn_at_most_once_a_second() {
    let s = serve(Limits { max_conns: 1024, ..small() });
    let t0 = Instant::now();
    for _ in 0..100 {
        let mut r = raw(&s);
        r.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        assert_closed(&mut r, "garbage");
    }
    let seconds = t0.elapsed().as_secs() + 1;
    let warnings = s.stats().warnings();
    assert!(warnings >= 1 && warnings <= seconds + 1, "{warnings} warning lines in {seconds} s");
}
