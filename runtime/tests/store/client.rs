//! Every command through the client, many clients at once, prefixes, limits, and the
//! server going away.

use super::*;

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
