//! Multi-key waits: released by later sets, timed out, cancelled, and refused when too large.

use super::*;

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
