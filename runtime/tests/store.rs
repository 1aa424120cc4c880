//! The rendezvous store: every command through the client, the exact wire bytes of
//! PyTorch's TCPStore protocol over raw sockets, many concurrent clients, multi-key waits,
//! timeouts and cancellation, and malformed input that must only ever cost the sender its
//! own connection. Every socket read has a timeout, so no test can hang.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use jitccl_runtime::store::{PrefixStore, Server, Store, StoreError, TcpStore};

const TIMEOUT: Duration = Duration::from_secs(10);
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// VALIDATE and the magic 0x3C85F7CE, little-endian.
const VALIDATE: [u8; 5] = [0x00, 0xCE, 0xF7, 0x85, 0x3C];

/// Sends the store's log lines to each test's captured output, shown when it fails.
fn capture_logs() {
    let _ = tracing_subscriber::fmt().with_test_writer().with_env_filter("warn,jitccl_runtime=debug").try_init();
}

fn server() -> Server {
    capture_logs();
    Server::bind("127.0.0.1:0").unwrap()
}

fn client(server: &Server) -> TcpStore {
    TcpStore::connect(server.local_addr(), TIMEOUT).unwrap()
}

/// A raw connection that has not sent anything yet.
fn raw(server: &Server) -> TcpStream {
    let stream = TcpStream::connect(server.local_addr()).unwrap();
    stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// A raw connection that has sent VALIDATE.
fn validated(server: &Server) -> TcpStream {
    let mut stream = raw(server);
    stream.write_all(&VALIDATE).unwrap();
    stream
}

/// A key or value on the wire: u64 little-endian length, then the bytes.
fn lp(bytes: &[u8]) -> Vec<u8> {
    let mut out = (bytes.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(bytes);
    out
}

fn msg(command: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut out = vec![command];
    for part in parts {
        out.extend_from_slice(part);
    }
    out
}

fn read_n(stream: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0; n];
    stream.read_exact(&mut buf).unwrap();
    buf
}

/// Sends PING and checks the echo, which also proves no stray reply bytes were pending.
fn ping(stream: &mut TcpStream, nonce: u32) {
    stream.write_all(&msg(13, &[&nonce.to_le_bytes()])).unwrap();
    assert_eq!(read_n(stream, 4), nonce.to_le_bytes(), "PING echo");
}

/// Nothing arrives within `wait`.
fn assert_silent(stream: &mut TcpStream, wait: Duration) {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut byte = [0];
    match stream.read(&mut byte) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("expected no reply, got {other:?} {byte:?}"),
    }
    stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
}

/// The server closes the connection (EOF, or a reset when it had unread input).
fn assert_closed(stream: &mut TcpStream, what: &str) {
    let mut buf = [0; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return,
            Err(e) => panic!("{what}: the server did not close the connection: {e}"),
        }
    }
}

fn assert_timeout(err: StoreError, want_op: &str, want_keys: &[&str], want_after: Duration) {
    match err {
        StoreError::Timeout { op, keys, after } => {
            assert_eq!(op, want_op);
            assert_eq!(keys, want_keys);
            assert_eq!(after, want_after);
        }
        other => panic!("expected a timeout, got {other}"),
    }
}

#[test]
fn every_command_through_the_client() {
    let s = server();
    let c = client(&s);

    c.set("a", b"1").unwrap();
    assert_eq!(c.get("a").unwrap(), b"1");
    c.set("a", b"").unwrap();
    assert_eq!(c.get("a").unwrap(), b"");

    assert_eq!(c.add("n", 5).unwrap(), 5);
    assert_eq!(c.add("n", -7).unwrap(), -2);
    assert_eq!(c.get("n").unwrap(), b"-2", "counters are stored as ASCII decimal");

    // compare_set, PyTorch's four cases.
    assert_eq!(c.compare_set("cs", b"", b"x").unwrap(), b"x", "missing key, empty expected: set");
    assert_eq!(c.get("cs").unwrap(), b"x");
    assert_eq!(c.compare_set("cs2", b"e", b"d").unwrap(), b"e", "missing key, non-empty expected");
    assert!(!c.check(&["cs2"]).unwrap(), "nothing set");
    assert_eq!(c.compare_set("cs", b"x", b"y").unwrap(), b"y", "match: swapped");
    assert_eq!(c.compare_set("cs", b"zz", b"w").unwrap(), b"y", "mismatch: current value");
    assert_eq!(c.get("cs").unwrap(), b"y");

    assert!(c.check(&["a", "n"]).unwrap());
    assert!(!c.check(&["a", "nope"]).unwrap());
    assert!(c.check(&[]).unwrap());
    c.wait(&["a", "n"], Duration::from_secs(1)).unwrap();
    c.wait(&[], Duration::from_secs(1)).unwrap();

    assert!(c.delete("a").unwrap());
    assert!(!c.delete("a").unwrap());
    assert!(!c.check(&["a"]).unwrap());

    c.append("log", b"ab").unwrap();
    c.append("log", b"cd").unwrap();
    assert_eq!(c.get("log").unwrap(), b"abcd");

    c.multi_set(&[("m1", b"v1"), ("m2", b"")]).unwrap();
    assert_eq!(c.multi_get(&["m1", "m2", "n"]).unwrap(), vec![b"v1".to_vec(), vec![], b"-2".to_vec()]);
    assert_eq!(c.multi_get(&[]).unwrap(), Vec::<Vec<u8>>::new());

    // n, cs, log, m1, m2.
    assert_eq!(c.num_keys().unwrap(), 5);
    c.ping().unwrap();

    // ADD to a value that is not a number: the server refuses by closing the connection,
    // and the client's next call reconnects.
    c.set("text", b"abc").unwrap();
    assert!(matches!(c.add("text", 1), Err(StoreError::Closed { op: "add" })));
    assert_eq!(c.get("text").unwrap(), b"abc", "unchanged, and the client reconnected");
    assert_eq!(c.add("n", 2).unwrap(), 0);
}

#[test]
fn wire_bytes_match_pytorch_tcpstore() {
    let s = server();
    let mut r = validated(&s);

    // SET "/k" = "v1": no reply.
    #[rustfmt::skip]
    r.write_all(&[
        0x01,
        0x02, 0, 0, 0, 0, 0, 0, 0, b'/', b'k',
        0x02, 0, 0, 0, 0, 0, 0, 0, b'v', b'1',
    ]).unwrap();
    // GET "/k": the value, length-prefixed.
    r.write_all(&[0x03, 0x02, 0, 0, 0, 0, 0, 0, 0, b'/', b'k']).unwrap();
    assert_eq!(read_n(&mut r, 10), [0x02, 0, 0, 0, 0, 0, 0, 0, b'v', b'1']);

    // ADD "c" +5 then -7: i64 replies.
    r.write_all(&msg(4, &[&lp(b"c"), &5i64.to_le_bytes()])).unwrap();
    assert_eq!(read_n(&mut r, 8), [0x05, 0, 0, 0, 0, 0, 0, 0]);
    r.write_all(&msg(4, &[&lp(b"c"), &(-7i64).to_le_bytes()])).unwrap();
    assert_eq!(read_n(&mut r, 8), [0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]);
    r.write_all(&msg(3, &[&lp(b"c")])).unwrap();
    assert_eq!(read_n(&mut r, 10), lp(b"-2"), "ASCII decimal");

    // CHECK: READY = 0, NOT_READY = 1.
    r.write_all(&msg(5, &[&2u64.to_le_bytes(), &lp(b"/k"), &lp(b"c")])).unwrap();
    assert_eq!(read_n(&mut r, 1), [0]);
    r.write_all(&msg(5, &[&1u64.to_le_bytes(), &lp(b"zz")])).unwrap();
    assert_eq!(read_n(&mut r, 1), [1]);

    // WAIT on existing keys: STOP_WAITING = 0 at once.
    r.write_all(&msg(6, &[&1u64.to_le_bytes(), &lp(b"/k")])).unwrap();
    assert_eq!(read_n(&mut r, 1), [0]);

    // GETNUMKEYS: i64.
    r.write_all(&[0x07]).unwrap();
    assert_eq!(read_n(&mut r, 8), 2i64.to_le_bytes());

    // COMPARE_SET "c" "-2" -> "9": the new value.
    r.write_all(&msg(2, &[&lp(b"c"), &lp(b"-2"), &lp(b"9")])).unwrap();
    assert_eq!(read_n(&mut r, 9), lp(b"9"));

    // DELETE_KEY: i64 count deleted.
    r.write_all(&msg(8, &[&lp(b"c")])).unwrap();
    assert_eq!(read_n(&mut r, 8), 1i64.to_le_bytes());
    r.write_all(&msg(8, &[&lp(b"c")])).unwrap();
    assert_eq!(read_n(&mut r, 8), 0i64.to_le_bytes());

    // APPEND twice, MULTI_SET one pair (no replies), then MULTI_GET three keys, one missing.
    r.write_all(&msg(9, &[&lp(b"ap"), &lp(b"x")])).unwrap();
    r.write_all(&msg(9, &[&lp(b"ap"), &lp(b"y")])).unwrap();
    r.write_all(&msg(11, &[&1u64.to_le_bytes(), &lp(b"ms"), &lp(b"val")])).unwrap();
    r.write_all(&msg(10, &[&3u64.to_le_bytes(), &lp(b"ap"), &lp(b"nothing"), &lp(b"ms")])).unwrap();
    assert_eq!(read_n(&mut r, 10 + 8 + 11), [lp(b"xy"), lp(b""), lp(b"val")].concat());

    // PING echoes the u32; CANCEL_WAIT with nothing parked still answers WAIT_CANCELED = 1.
    #[rustfmt::skip]
    r.write_all(&[0x0D, 0xEF, 0xBE, 0xAD, 0xDE]).unwrap();
    assert_eq!(read_n(&mut r, 4), [0xEF, 0xBE, 0xAD, 0xDE]);
    r.write_all(&[0x0C]).unwrap();
    assert_eq!(read_n(&mut r, 1), [1]);

    // The client sends keys as "/" + key, like PyTorch's TCPStore client: both see one key space.
    let c = client(&s);
    assert_eq!(c.get("k").unwrap(), b"v1");
    c.set("from-client", b"hello").unwrap();
    r.write_all(&msg(3, &[&lp(b"/from-client")])).unwrap();
    assert_eq!(read_n(&mut r, 13), lp(b"hello"));
    ping(&mut r, 7);
}

#[test]
fn frames_may_arrive_in_pieces() {
    let s = server();
    let mut r = raw(&s);
    let mut stream = VALIDATE.to_vec();
    stream.extend(msg(1, &[&lp(b"/piece"), &lp(b"by-byte")]));
    stream.extend(msg(3, &[&lp(b"/piece")]));
    for (i, byte) in stream.iter().enumerate() {
        r.write_all(&[*byte]).unwrap();
        if i % 8 == 0 {
            thread::sleep(Duration::from_millis(1));
        }
    }
    assert_eq!(read_n(&mut r, 15), lp(b"by-byte"));
    // Several requests in one write are all answered, in order.
    let mut batch = Vec::new();
    for nonce in 0..50u32 {
        batch.extend(msg(13, &[&nonce.to_le_bytes()]));
    }
    r.write_all(&batch).unwrap();
    for nonce in 0..50u32 {
        assert_eq!(read_n(&mut r, 4), nonce.to_le_bytes());
    }
}

#[test]
fn hundreds_of_concurrent_clients() {
    const CLIENTS: usize = 300;
    let s = server();
    let addr = s.local_addr();
    let all_connected = Arc::new(Barrier::new(CLIENTS));
    let all_added = Arc::new(Barrier::new(CLIENTS));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (all_connected, all_added) = (Arc::clone(&all_connected), Arc::clone(&all_added));
            thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || {
                    let c = TcpStore::connect(addr, Duration::from_secs(20)).unwrap();
                    // Every connection is open at once.
                    all_connected.wait();
                    let key = format!("client/{i}");
                    c.set(&key, i.to_string().as_bytes()).unwrap();
                    c.add("counter", 1).unwrap();
                    assert_eq!(c.get(&key).unwrap(), i.to_string().as_bytes());
                    all_added.wait();
                    assert_eq!(c.get("counter").unwrap(), CLIENTS.to_string().as_bytes());
                })
                .unwrap()
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(client(&s).num_keys().unwrap(), CLIENTS as u64 + 1);
}

#[test]
fn multi_key_wait_is_released_by_later_sets() {
    let s = server();
    let waiter = client(&s);
    let getter = client(&s);
    let setter = client(&s);
    let start = Instant::now();
    let waiting = thread::spawn(move || waiter.wait(&["x", "y", "z"], TIMEOUT).map(|()| start.elapsed()));
    let getting = thread::spawn(move || getter.multi_get(&["x", "y", "z"]));

    thread::sleep(Duration::from_millis(100));
    setter.set("x", b"1").unwrap();
    setter.add("y", 2).unwrap();
    thread::sleep(Duration::from_millis(200));
    assert!(!waiting.is_finished() && !getting.is_finished(), "released before every key existed");
    setter.append("z", b"3").unwrap();

    let waited = waiting.join().unwrap().unwrap();
    assert!(waited >= Duration::from_millis(300), "released after {waited:?}");
    assert_eq!(getting.join().unwrap().unwrap(), vec![b"1".to_vec(), b"2".to_vec(), b"3".to_vec()]);
}

#[test]
fn wait_timeout_leaves_the_connection_usable() {
    let s = server();
    let c = client(&s);
    let start = Instant::now();
    let err = c.wait(&["never", "nor-this"], Duration::from_millis(300)).unwrap_err();
    let took = start.elapsed();
    let text = err.to_string();
    assert!(text.contains("never") && text.contains("nor-this") && text.contains("after 0.3 s"), "{text}");
    assert_timeout(err, "wait", &["never", "nor-this"], Duration::from_millis(300));
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(3), "took {took:?}");

    c.set("after", b"1").unwrap();
    assert_eq!(c.get("after").unwrap(), b"1");
    // The cancelled WAIT must not answer later, when its keys appear.
    let other = client(&s);
    other.multi_set(&[("never", b""), ("nor-this", b"")]).unwrap();
    assert_eq!(c.add("count", 2).unwrap(), 2);
    assert_eq!(c.get("after").unwrap(), b"1");

    // get waits up to the client's timeout.
    let short = TcpStore::connect(s.local_addr(), Duration::from_millis(200)).unwrap();
    assert_timeout(short.get("missing").unwrap_err(), "get", &["missing"], Duration::from_millis(200));
    assert_eq!(short.get("after").unwrap(), b"1");
}

/// A server that answers STOP_WAITING only after the client has given up: the client must
/// read both STOP_WAITING and WAIT_CANCELED and stay in step on the same connection.
#[test]
fn late_stop_waiting_is_drained_after_cancel() {
    capture_logs();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let fake = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        assert_eq!(read_n(&mut s, 5), VALIDATE);
        let ping = read_n(&mut s, 5);
        assert_eq!(ping[0], 13);
        s.write_all(&ping[1..]).unwrap();
        assert_eq!(read_n(&mut s, 19), msg(6, &[&1u64.to_le_bytes(), &lp(b"/k")]));
        assert_eq!(read_n(&mut s, 1), [12], "CANCEL_WAIT after the timeout");
        s.write_all(&[0, 1]).unwrap();
        let ping = read_n(&mut s, 5);
        s.write_all(&ping[1..]).unwrap();
        // Only one connection is ever accepted: a reconnect would fail the client's ping.
    });
    let c = TcpStore::connect(addr, Duration::from_secs(5)).unwrap();
    assert_timeout(c.wait(&["k"], Duration::from_millis(200)).unwrap_err(), "wait", &["k"], Duration::from_millis(200));
    c.ping().unwrap();
    fake.join().unwrap();
}

#[test]
fn cancel_wait_over_raw_socket() {
    let s = server();
    let c = client(&s);
    let mut r = validated(&s);
    r.write_all(&msg(6, &[&1u64.to_le_bytes(), &lp(b"/w")])).unwrap();
    assert_silent(&mut r, Duration::from_millis(200));
    // A parked connection keeps serving its other commands.
    ping(&mut r, 1);
    r.write_all(&[12]).unwrap();
    assert_eq!(read_n(&mut r, 1), [1], "WAIT_CANCELED");
    c.set("w", b"now").unwrap();
    assert_silent(&mut r, Duration::from_millis(200));
    ping(&mut r, 2);

    // Not cancelled: released by the set.
    r.write_all(&msg(6, &[&2u64.to_le_bytes(), &lp(b"/w"), &lp(b"/w2")])).unwrap();
    assert_silent(&mut r, Duration::from_millis(100));
    c.set("w2", b"").unwrap();
    assert_eq!(read_n(&mut r, 1), [0], "STOP_WAITING");
    ping(&mut r, 3);
}

/// xorshift64*: deterministic random bytes without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

#[test]
fn malformed_input_never_takes_the_server_down() {
    let s = server();
    // A client parked in a WAIT, and one that stays connected throughout.
    let parked = client(&s);
    let parked = thread::spawn(move || parked.wait(&["late"], Duration::from_secs(15)));
    let bystander = client(&s);
    bystander.set("kept", b"yes").unwrap();
    let healthy = |what: &str| {
        bystander.ping().unwrap_or_else(|e| panic!("after {what}: {e}"));
        assert_eq!(bystander.get("kept").unwrap(), b"yes", "after {what}");
        let fresh = client(&s);
        fresh.set("fresh", what.as_bytes()).unwrap();
        assert_eq!(fresh.get("fresh").unwrap(), what.as_bytes());
    };

    let closes = |bytes: &[u8], what: &str| {
        let mut r = raw(&s);
        r.write_all(bytes).unwrap();
        assert_closed(&mut r, what);
        healthy(what);
    };
    let huge = 1u64 << 62;
    let v = |cmd: u8, rest: &[u8]| [&VALIDATE[..], &[cmd], rest].concat();
    closes(&v(1, &huge.to_le_bytes()), "a 2^62-byte key length");
    closes(&v(1, &[lp(b"/a"), (1u64 << 40).to_le_bytes().to_vec()].concat()), "a 2^40-byte value length");
    closes(&v(1, &u64::MAX.to_le_bytes()), "a u64::MAX key length");
    closes(&v(6, &(1u64 << 40).to_le_bytes()), "a WAIT for 2^40 keys");
    closes(&v(11, &u64::MAX.to_le_bytes()), "a MULTI_SET of u64::MAX pairs");
    closes(&v(10, &[1u64.to_le_bytes(), huge.to_le_bytes()].concat()), "a MULTI_GET key of 2^62 bytes");
    for command in [14u8, 15, 16, 99, 255] {
        closes(&v(command, &[]), &format!("unknown command {command}"));
    }
    closes(&msg(1, &[&lp(b"/k"), &lp(b"v")]), "SET without VALIDATE");
    closes(&msg(13, &[&7u32.to_le_bytes()]), "PING without VALIDATE");
    closes(&[0x00, 0xEF, 0xBE, 0xAD, 0xDE], "a wrong VALIDATE magic");
    closes(&[VALIDATE, VALIDATE].concat(), "a second VALIDATE");
    closes(
        &[&VALIDATE[..], &msg(6, &[&1u64.to_le_bytes(), &lp(b"/p1")]), &msg(6, &[&1u64.to_le_bytes(), &lp(b"/p2")])]
            .concat(),
        "a second pending WAIT",
    );
    {
        let mut r = validated(&s);
        r.write_all(&msg(1, &[&lp(b"/word"), &lp(b"abc")])).unwrap();
        r.write_all(&msg(4, &[&lp(b"/word"), &1i64.to_le_bytes()])).unwrap();
        assert_closed(&mut r, "ADD to a non-number");
        healthy("ADD to a non-number");
    }

    // Truncated frames, then a disconnect, at several cut points of every kind of frame.
    let frames = [
        msg(1, &[&lp(b"/t"), &lp(b"value")]),
        msg(2, &[&lp(b"/t"), &lp(b"a"), &lp(b"b")]),
        msg(4, &[&lp(b"/t"), &1i64.to_le_bytes()]),
        msg(6, &[&2u64.to_le_bytes(), &lp(b"/t"), &lp(b"/u")]),
        msg(10, &[&1u64.to_le_bytes(), &lp(b"/t")]),
        msg(11, &[&1u64.to_le_bytes(), &lp(b"/t"), &lp(b"v")]),
        msg(13, &[&1u32.to_le_bytes()]),
    ];
    for frame in &frames {
        for cut in [1, frame.len() / 2, frame.len() - 1] {
            let mut r = validated(&s);
            r.write_all(&frame[..cut]).unwrap();
            drop(r);
        }
    }
    let mut r = raw(&s);
    r.write_all(&VALIDATE[..3]).unwrap();
    drop(r);
    healthy("truncated frames");

    // Random bytes, with and without VALIDATE first; either way only that connection suffers.
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for round in 0..40 {
        let len = 1 + (rng.next() % 4096) as usize;
        let mut bytes = if round % 2 == 0 { VALIDATE.to_vec() } else { Vec::new() };
        bytes.extend(rng.bytes(len));
        let mut r = raw(&s);
        // The server may close mid-write: that is fine.
        let _ = r.write_all(&bytes);
        if bytes[0] != 0 {
            assert_closed(&mut r, "random bytes without VALIDATE");
        }
    }
    healthy("random bytes");

    // Lengths within the limits but never followed by data: the server must not allocate
    // what a length field announces (40 × 60 MiB here) before the bytes arrive.
    let before = rss_bytes();
    let announced: Vec<TcpStream> = (0..40)
        .map(|_| {
            let mut r = validated(&s);
            r.write_all(&msg(1, &[&lp(b"/big"), &(60u64 << 20).to_le_bytes(), &[0; 1024]])).unwrap();
            r
        })
        .collect();
    healthy("announced large values");
    thread::sleep(Duration::from_millis(200));
    let grown = rss_bytes().saturating_sub(before);
    assert!(grown < 512 << 20, "RSS grew by {} MiB", grown >> 20);
    drop(announced);
    healthy("dropped large values");

    bystander.set("late", b"").unwrap();
    parked.join().unwrap().expect("the parked WAIT survived every bad connection");
}

#[test]
fn prefix_store_namespaces_keys() {
    let s = server();
    let c = Arc::new(client(&s));
    let a = PrefixStore::new("pg0", Arc::clone(&c));
    let b = PrefixStore::new("pg1", Arc::clone(&c));
    a.set("x", b"A").unwrap();
    b.set("x", b"B").unwrap();
    assert_eq!(a.get("x").unwrap(), b"A");
    assert_eq!(b.get("x").unwrap(), b"B");
    assert_eq!(c.get("pg0/x").unwrap(), b"A");

    let nested = PrefixStore::new("inner", PrefixStore::new("outer", Arc::clone(&c)));
    nested.set("k", b"deep").unwrap();
    assert_eq!(c.get("outer/inner/k").unwrap(), b"deep");
    assert_eq!(nested.prefix(), "inner");
    assert_eq!(nested.inner().prefix(), "outer");

    assert_eq!(a.add("n", 3).unwrap(), 3);
    assert_eq!(c.get("pg0/n").unwrap(), b"3");
    assert_eq!(a.compare_set("n", b"3", b"4").unwrap(), b"4");
    assert!(a.check(&["x", "n"]).unwrap());
    assert!(!b.check(&["n"]).unwrap());
    a.wait(&["x", "n"], Duration::from_secs(1)).unwrap();
    a.append("log", b"1").unwrap();
    a.append("log", b"2").unwrap();
    a.multi_set(&[("m", b"mv"), ("o", b"ov")]).unwrap();
    assert_eq!(a.multi_get(&["log", "m", "o"]).unwrap(), vec![b"12".to_vec(), b"mv".to_vec(), b"ov".to_vec()]);
    assert_eq!(c.get("pg0/m").unwrap(), b"mv");
    assert!(a.delete("o").unwrap());
    assert!(!c.check(&["pg0/o"]).unwrap());
    // The whole store's count, as in PyTorch: pg0/{x,n,log,m}, pg1/x, outer/inner/k.
    assert_eq!(a.num_keys().unwrap(), 6);
    assert_timeout(
        b.wait(&["never"], Duration::from_millis(100)).unwrap_err(),
        "wait",
        &["pg1/never"],
        Duration::from_millis(100),
    );
}

#[test]
fn limits_are_checked_before_sending() {
    let s = server();
    let c = client(&s);
    let long_key = "k".repeat(64 << 10);
    assert!(matches!(c.set(&long_key, b""), Err(StoreError::InvalidArgument { op: "set", .. })));
    let big = vec![0u8; (64 << 20) + 1];
    assert!(matches!(c.set("k", &big), Err(StoreError::InvalidArgument { op: "set", .. })));
    let many: Vec<String> = (0..(128 << 10) + 1).map(|i| i.to_string()).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert!(matches!(c.check(&many), Err(StoreError::InvalidArgument { op: "check", .. })));
    c.ping().unwrap();

    // Large values within the limits go through, in both directions.
    let value: Vec<u8> = (0..16 << 20).map(|i| (i % 251) as u8).collect();
    c.set("large", &value).unwrap();
    assert_eq!(c.get("large").unwrap(), value);
    assert_eq!(c.compare_set("large", &value, b"small").unwrap(), b"small");
}

#[test]
fn dropping_the_server_ends_its_connections() {
    let s = server();
    let addr = s.local_addr();
    let c = TcpStore::connect(addr, Duration::from_millis(500)).unwrap();
    c.ping().unwrap();
    let start = Instant::now();
    drop(s);
    assert!(start.elapsed() < Duration::from_secs(2), "drop took {:?}", start.elapsed());
    assert!(matches!(c.ping(), Err(StoreError::Closed { op: "ping" })));
    // Nothing left to reconnect to: the client had reached the server, so it says so at once.
    let t0 = Instant::now();
    let e = c.ping().unwrap_err();
    assert!(matches!(e, StoreError::Gone { op: "ping", .. }) && e.to_string().contains("is gone"), "{e}");
    assert!(t0.elapsed() < Duration::from_millis(400), "waited {:?} for a server that is gone", t0.elapsed());
    assert!(matches!(TcpStore::connect(addr, Duration::from_millis(200)), Err(StoreError::Connect { .. })));
}

/// A timeout too large for an `Instant` (the API takes any `Duration`) must not panic.
#[test]
fn huge_timeouts_do_not_panic() {
    let s = server();
    let c = TcpStore::connect(s.local_addr(), Duration::MAX).unwrap();
    c.set("k", b"v").unwrap();
    assert_eq!(c.get("k").unwrap(), b"v");
    c.wait(&["k"], Duration::MAX).unwrap();
}

/// A WAIT's keys are parked on the server until they exist, so their total size is
/// limited (16 MiB): the client refuses a larger one before sending, and the server closes
/// a connection that sends one as soon as the key lengths pass the limit.
#[test]
fn oversized_waits_are_refused() {
    let s = server();
    let c = client(&s);
    let key = "w".repeat(60 << 10);
    let keys = vec![key.as_str(); 300];
    assert!(matches!(c.wait(&keys, Duration::from_secs(1)), Err(StoreError::InvalidArgument { op: "wait", .. })));
    c.ping().unwrap();

    let mut r = validated(&s);
    let key = lp(&vec![b'k'; 60 << 10]);
    // Sent in pieces: the server may close before the end.
    let _ = r.write_all(&msg(6, &[&300u64.to_le_bytes()]));
    for _ in 0..300 {
        if r.write_all(&key).is_err() {
            break;
        }
    }
    assert_closed(&mut r, "a WAIT for 18 MiB of keys");
    c.ping().unwrap();
}
