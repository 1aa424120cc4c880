//! The loader with real libraries: the C plugins of `jitccl-plugins` (the "Fabric" network
//! over libfabric's tcp provider, pinned to loopback, and the edge plugins), found as
//! `JITCCL_NET_PLUGIN` would name them, and driven between two threads of a child process
//! (`on_loopback`).

use std::thread;
use std::time::{Duration, Instant};

use jitccl_plugins::{EDGE_INITFAIL, EDGE_NODEV, EDGE_V8ONLY, FABRIC};

use super::super::select::{candidates, choose, plugin_of};
use super::super::table::VERSIONS;
use super::super::{MemKind, Network, RecvComm, SendComm};
use crate::plugin;

/// Every wait of these tests.
const LIMIT: Duration = Duration::from_secs(30);

/// Runs the test `name` in a child process with libfabric kept on loopback (it would
/// otherwise pick the machine's interfaces): it reads its settings from the environment.
fn on_loopback(name: &str, body: impl FnOnce()) {
    jitccl_plugins::in_child(module_path!(), name, &[("FI_TCP_IFACE", Some("lo"))], body);
}

/// The Fabric plugin's table of `version`, as a network.
fn fabric(version: u32) -> Network {
    let lib = plugin::open(FABRIC, &[FABRIC.to_string()]).expect("the Fabric plugin loads");
    let p = plugin_of(lib, Some(version)).expect("Fabric exports every version");
    let net = choose(Some("Fabric"), 0x5eed, &[p]).expect("Fabric initializes").expect("a plugin network");
    assert_eq!((net.name(), net.version(), net.library()), ("Fabric", version, FABRIC));
    assert_eq!(net.devices()[0].name, "lo");
    assert!(net.has_iflush(), "every version's table has iflush");
    net
}

/// Polls `f` until it gives a value, within [`LIMIT`].
fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + LIMIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "{what}: no progress in {LIMIT:?}");
        thread::yield_now();
    }
}

/// A connected pair: the send comm (connected from another thread) and the receive comm.
fn pair(net: &Network) -> (SendComm, RecvComm) {
    let (handle, mut listen) = net.listen(0).expect("listen");
    let sender = {
        let net = net.clone();
        thread::spawn(move || {
            let mut handle = handle;
            until("connect", || net.connect(0, &mut handle).expect("connect"))
        })
    };
    let recv = until("accept", || listen.accept().expect("accept"));
    (sender.join().expect("the connecting thread"), recv)
}

fn pattern(n: usize, seed: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 + seed * 7 + 1) as u8).collect()
}

const SIZES: [usize; 5] = [1, 0, 4096, 100_003, 1 << 20];
const TAG: i32 = 3;

#[test]
fn a_list_falls_through_missing_libraries_and_skips_plugins_that_cannot_serve() {
    on_loopback("a_list_falls_through_missing_libraries_and_skips_plugins_that_cannot_serve", || {
        let setting = format!("jitccl-no-such-plugin,{EDGE_INITFAIL},{EDGE_NODEV},{EDGE_V8ONLY},{FABRIC}");
        let found = candidates(Some(&setting));
        let seen: Vec<(&str, u32)> = found.iter().map(|p| (p.name.as_str(), p.table.version())).collect();
        assert_eq!(seen, [("EdgeInitFail", 12), ("EdgeNoDev", 12), ("EdgeV8", 8), ("Fabric", 12)]);

        let net = choose(None, 1, &found).unwrap().expect("a plugin with a device");
        assert_eq!((net.name(), net.version(), net.library()), ("EdgeV8", 8, EDGE_V8ONLY), "the first that serves");
        let net = choose(Some("fabric"), 2, &found).unwrap().expect("Fabric, by name");
        assert_eq!((net.name(), net.version()), ("Fabric", 12));
        assert!(choose(Some("socket"), 3, &found).unwrap().is_none());

        let e = choose(Some("EdgeInitFail"), 4, &found).unwrap_err().to_string();
        assert!(
            e.contains(&format!("EdgeInitFail (v12, {EDGE_INITFAIL}): init failed with 3 (ncclInternalError)")),
            "{e}"
        );
        let e = choose(Some("edgenodev"), 5, &found).unwrap_err().to_string();
        assert!(e.contains(&format!("EdgeNoDev (v12, {EDGE_NODEV}): it has no device")), "{e}");
        let e = choose(Some("IB"), 6, &found).unwrap_err().to_string();
        assert!(
            e.contains("Socket (built in), EdgeInitFail (v12,") && e.contains(&format!("Fabric (v12, {FABRIC})")),
            "{e}"
        );
        assert!(candidates(Some("none")).is_empty());
    });
}

#[test]
fn bytes_move_between_two_threads_with_every_version() {
    on_loopback("bytes_move_between_two_threads_with_every_version", || {
        for version in VERSIONS {
            let net = fabric(version);
            let (mut send, mut recv) = pair(&net);
            let mut src = vec![0u8; 1 << 20];
            let mut dst = vec![0u8; 1 << 20];
            let smr = send.reg_mr(src.as_mut_ptr(), src.len(), MemKind::Host).expect("regMr (send)");
            let rmr = recv.reg_mr(dst.as_mut_ptr(), dst.len(), MemKind::Host).expect("regMr (recv)");
            for (k, &n) in SIZES.iter().enumerate() {
                let want = pattern(n, k);
                src[..n].copy_from_slice(&want);
                dst.fill(0xee);
                let mut r = until("irecv", || recv.irecv(dst.as_mut_ptr(), dst.len(), TAG, rmr).expect("irecv"));
                let mut s = until("isend", || send.isend(src.as_ptr(), n, TAG, smr).expect("isend"));
                let (mut sent, mut got) = (None, None);
                until("the transfer", || {
                    sent = sent.or(s.test().expect("test (send)"));
                    got = got.or(r.test().expect("test (recv)"));
                    (sent.is_some() && got.is_some()).then_some(())
                });
                assert_eq!((sent, got), (Some(n), Some(n)), "v{version}, {n} bytes: the sizes");
                assert!(dst[..n] == want[..], "v{version}, {n} bytes: the data");
                assert!(dst[n..].iter().all(|&b| b == 0xee), "v{version}, {n} bytes: nothing past the message");
            }
            // A region of another comm is refused before the plugin sees it.
            let e = recv.irecv(dst.as_mut_ptr(), 1, TAG, smr).err().expect("a foreign region");
            assert_eq!((e.call, e.code), ("irecv", 5), "{e}");
            if version == 8 {
                // v8 sizes are int: a larger one is refused, not truncated.
                let e = send.isend(src.as_ptr(), i32::MAX as usize + 1, TAG, smr).err().expect("too large for v8");
                assert!(e.to_string().starts_with("Fabric: isend failed with 4 (ncclInvalidArgument: "), "{e}");
            }
            drop((send, recv));
        }
    });
}

#[test]
fn a_comm_closes_in_bounded_time_with_a_receive_in_flight() {
    on_loopback("a_comm_closes_in_bounded_time_with_a_receive_in_flight", || {
        let net = fabric(12);
        let (send, mut recv) = pair(&net);
        let mut dst = vec![0u8; 4096];
        let mr = recv.reg_mr(dst.as_mut_ptr(), dst.len(), MemKind::Host).expect("regMr");
        let mut r = until("irecv", || recv.irecv(dst.as_mut_ptr(), dst.len(), TAG, mr).expect("irecv"));
        assert_eq!(r.test().expect("test"), None, "nothing was sent");
        let start = Instant::now();
        drop(recv);
        assert!(start.elapsed() < Duration::from_secs(5), "closing took {:?}", start.elapsed());
        let e = r.test().expect_err("its comm is closed");
        assert!(e.to_string().contains("its comm is closed"), "{e}");
        drop(send);
        drop(net);
    });
}
