//! PyTorch's TCPStore protocol byte for byte over raw sockets, and malformed input that may
//! only ever cost the sender its own connection.

use super::*;

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
