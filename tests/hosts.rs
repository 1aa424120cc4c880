//! The several-hosts harness itself (`common/hosts.rs`): hosts reach each other through
//! the bridge and nothing else; a cut link is unreachable and comes back; a rate limit
//! slows a transfer to its rate; the loss rule drops what it says; nothing is left behind,
//! even after a panic or by a process that was killed. Needs root, iproute2 and nftables.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "common/hosts.rs"]
mod hosts;

use hosts::Hosts;

fn hosts(h: usize) -> Hosts {
    Hosts::new(h).unwrap_or_else(|e| panic!("cannot create {h} test hosts (needs root, iproute2, nftables): {e}"))
}

/// A listener on host `i`'s address.
fn listen(hosts: &Hosts, i: usize) -> TcpListener {
    let addr = SocketAddr::new(hosts.addr(i).into(), 0);
    hosts.in_host(i, || TcpListener::bind(addr)).expect("a listener")
}

/// Whether a connection from host `from` to `to` opens within `limit`.
fn reaches(hosts: &Hosts, from: usize, to: &TcpListener, limit: Duration) -> bool {
    let addr = to.local_addr().unwrap();
    hosts.in_host(from, || TcpStream::connect_timeout(&addr, limit)).is_ok()
}

/// Like [`reaches`], trying again for up to `limit` (a restored link may need a moment for
/// its neighbour entries).
fn reaches_again(hosts: &Hosts, from: usize, to: &TcpListener, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if reaches(hosts, from, to, Duration::from_millis(300)) {
            return true;
        }
    }
    false
}

fn namespaces() -> String {
    String::from_utf8_lossy(&Command::new("ip").args(["netns", "list"]).output().expect("ip netns list").stdout).into()
}

#[test]
fn three_hosts_reach_each_other_only_and_a_cut_link_comes_back() {
    let hosts = hosts(3);
    let listeners: Vec<_> = (0..3).map(|i| listen(&hosts, i)).collect();
    let short = Duration::from_millis(500);
    for from in 0..3 {
        for (to, l) in listeners.iter().enumerate() {
            assert!(reaches(&hosts, from, l, short), "host {from} cannot reach host {to}");
        }
        // Loopback of the machine itself is another namespace's: not there.
        let outside = listen_outside();
        let addr = outside.local_addr().unwrap();
        assert!(
            hosts.in_host(from, || TcpStream::connect_timeout(&addr, short)).is_err(),
            "host {from} reached {addr}"
        );
    }
    hosts.cut(1).unwrap();
    assert!(!reaches(&hosts, 0, &listeners[1], short), "host 0 reached host 1 over a cut link");
    assert!(!reaches(&hosts, 1, &listeners[2], short), "host 1 reached host 2 over a cut link");
    assert!(reaches(&hosts, 0, &listeners[2], short), "cutting host 1 cut hosts 0 and 2 apart");
    hosts.restore(1).unwrap();
    assert!(reaches_again(&hosts, 0, &listeners[1], Duration::from_secs(5)), "host 1 did not come back");
    assert!(reaches_again(&hosts, 1, &listeners[2], Duration::from_secs(5)), "host 1 did not come back");
}

/// A listener on the machine's own loopback.
fn listen_outside() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").unwrap()
}

/// Sends `bytes` from host 0 to host 1; how long until all arrived.
fn transfer(hosts: &Hosts, bytes: usize) -> Duration {
    let listener = listen(hosts, 1);
    let addr = listener.local_addr().unwrap();
    let limit = Duration::from_secs(20);
    let mut out = hosts.in_host(0, || TcpStream::connect_timeout(&addr, limit)).expect("connecting");
    out.set_write_timeout(Some(limit)).unwrap();
    let t0 = Instant::now();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(limit)).unwrap();
        let (mut got, mut buf) = (0, vec![0u8; 1 << 16]);
        while got < bytes {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        got
    });
    out.write_all(&vec![7u8; bytes]).expect("sending");
    let got = reader.join().unwrap();
    assert_eq!(got, bytes, "the transfer ended early");
    t0.elapsed()
}

#[test]
fn a_rate_limit_slows_a_transfer_to_its_rate() {
    let hosts = hosts(2);
    let bytes = 3 << 19;
    let before = hosts.counters(0);
    let free = transfer(&hosts, bytes);
    let rate = 20_000_000u64;
    hosts.limit_rate(0, rate).unwrap();
    let q = hosts.qdiscs(0).unwrap();
    assert!(q.contains("tbf") && q.contains("rate 20Mbit"), "{q}");
    let limited = transfer(&hosts, bytes);
    // The bucket's burst may pass at once; the rest cannot go faster than the rate.
    let floor = Duration::from_secs_f64((bytes - 25_000) as f64 * 8.0 / rate as f64);
    assert!(limited >= floor, "{bytes} bytes took {limited:?} at {rate} bit/s (at least {floor:?})");
    assert!(free < limited / 2, "unlimited {free:?}, limited {limited:?}");
    hosts.limit_rate(0, 0).unwrap();
    assert!(!hosts.qdiscs(0).unwrap().contains("tbf"));
    let after = hosts.counters(0);
    assert!(after.tx_bytes - before.tx_bytes >= 2 * bytes as u64, "{before:?} -> {after:?}");
    eprintln!("{bytes} bytes: {free:?} unlimited, {limited:?} at {rate} bit/s");
}

#[test]
fn the_loss_rule_drops_its_share() {
    let hosts = hosts(2);
    let listener = listen(&hosts, 1);
    let short = Duration::from_millis(500);
    hosts.drop_share(1, 100).unwrap();
    let rules = hosts.rules(1).unwrap();
    assert!(rules.contains("iifname \"net0\" drop") && rules.contains("oifname \"net0\" drop"), "{rules}");
    assert!(!reaches(&hosts, 0, &listener, short), "reached a host that drops everything");
    hosts.drop_share(1, 3).unwrap();
    let rules = hosts.rules(1).unwrap();
    assert!(rules.contains("numgen random mod 100 < 3 drop"), "{rules}");
    hosts.drop_share(1, 0).unwrap();
    assert!(!hosts.rules(1).unwrap().contains("drop"));
    assert!(reaches_again(&hosts, 0, &listener, Duration::from_secs(5)));
}

#[test]
fn nothing_is_left_behind_even_after_a_panic_or_a_killed_run() {
    let hosts = hosts(2);
    let names = hosts.namespaces();
    assert_eq!(names.len(), 3, "{names:?}");
    drop(hosts);
    let left = namespaces();
    assert!(names.iter().all(|n| !left.contains(n.as_str())), "{names:?} left in:\n{left}");

    let (tx, rx) = std::sync::mpsc::channel();
    let panicked = std::thread::spawn(move || {
        let hosts = Hosts::new(2).unwrap();
        tx.send(hosts.namespaces()).unwrap();
        panic!("a test failing with its hosts up");
    })
    .join();
    assert!(panicked.is_err());
    let names = rx.recv().unwrap();
    let left = namespaces();
    assert!(names.iter().all(|n| !left.contains(n.as_str())), "{names:?} left in:\n{left}");

    // What a killed run left (no process has that id) goes with the next instance.
    let stale = "jitccl-h4999999-0-br";
    let made = Command::new("ip").args(["netns", "add", stale]).status().unwrap();
    assert!(made.success());
    let hosts = self::hosts(1);
    let left = namespaces();
    drop(hosts);
    assert!(!left.contains(stale), "{stale} is still there");
}
