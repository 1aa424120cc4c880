//! The "Fabric" plugin through each interface version it exports, as NCCL drives it:
//! two processes over loopback (and between two network namespaces), listen, handle
//! exchange, non-blocking connect/accept, registration, sizes 0 .. 1 MiB with data checks,
//! the 32-request limit, close with requests in flight, and a sender killed mid-receive.

mod support;

use std::time::{Duration, Instant};

use jitccl_plugins::FABRIC;
use support::{expect_ok, run_one, run_pair, start, Spec};

const VERSIONS: [u32; 5] = [8, 9, 10, 11, 12];

#[test]
fn exports_every_version_from_8_to_12() {
    let run = run_one(&Spec::loopback(FABRIC, 12), &["symbols"]);
    expect_ok(&run, "listing symbols");
    assert_eq!(run.stdout.trim(), "symbols: v8 v9 v10 v11 v12");
}

#[test]
fn devices_follow_the_pinned_interface_and_report_host_memory_only() {
    for version in VERSIONS {
        let run = run_one(&Spec::loopback(FABRIC, version), &["info"]);
        expect_ok(&run, &format!("v{version} info"));
        let out = &run.stdout;
        assert!(out.contains("name: Fabric\n") && out.contains("devices: 1\n"), "v{version}:\n{out}");
        // Loopback has no PCI device and no sysfs speed: the stated default applies.
        assert!(
            out.contains("device 0: name=lo pci=- speed=10000 ptrSupport=1 maxRecvs=1 maxComms=65536 type=0"),
            "v{version}:\n{out}"
        );
        if version >= 9 {
            assert!(out.contains("vdevs=1 maxP2pBytes=1073741824"), "v{version}:\n{out}");
        }
        if version >= 11 {
            assert!(out.contains("maxMultiRequestSize=1"), "v{version}:\n{out}");
        }
        if version == 12 {
            assert!(out.contains("railId=-1 planeId=-1"), "v{version}:\n{out}");
        }
    }
    // An interface that does not exist leaves no device (and init still succeeds).
    let run = run_one(&Spec::loopback(FABRIC, 12).with_env("FI_TCP_IFACE", "jitccl-none0"), &["info"]);
    expect_ok(&run, "info on a missing interface");
    assert!(run.stdout.contains("devices: 0\n"), "{}", run.stdout);
}

#[test]
fn data_moves_over_loopback_with_every_version() {
    for version in VERSIONS {
        let spec = Spec::loopback(FABRIC, version);
        let (recv, send) = run_pair(&spec, &spec, "data");
        for run in [&recv, &send] {
            assert!(run.stdout.ends_with("OK\n"), "v{version}: {}", run.stdout);
            assert!(run.stderr.contains("32 requests in flight ok"), "v{version}: {}", run.stderr);
            // regMr of a CUDA pointer is refused, with the reason in the log.
            assert!(run.stderr.contains("memory type 0x2 refused"), "v{version}: {}", run.stderr);
        }
    }
}

/// Kills one side (`victim`: "send" or "recv") once the other has a transfer posted, and
/// checks that the survivor's test reports an error in bounded time.
fn killed_peer_fails_the_pending_transfer(victim: &str) {
    let (survivor, scenario) = if victim == "send" { ("recv", "kill-sender") } else { ("send", "kill-receiver") };
    let dir = tempfile::tempdir().expect("temporary directory");
    let handle = dir.path().join("handle");
    let handle_arg = handle.to_str().expect("utf-8 path");
    let spec = Spec::loopback(FABRIC, 12);
    let deadline = Instant::now() + support::PROCESS_LIMIT;
    let survivor = start(&spec, &[survivor, handle_arg, scenario], dir.path(), "survivor");
    let victim = start(&spec, &[victim, handle_arg, scenario], dir.path(), "victim");
    // The survivor writes `.ready` once its transfer is posted.
    let ready = dir.path().join("handle.ready");
    let wait_until = Instant::now() + Duration::from_secs(30);
    while !ready.exists() && Instant::now() < wait_until {
        std::thread::sleep(Duration::from_millis(10));
    }
    let ready_seen = ready.exists();
    let victim = victim.kill();
    let survivor = survivor.finish(deadline);
    let both = support::describe_pair(&survivor, &victim);
    assert!(ready_seen, "the survivor never posted its transfer\n{both}");
    // It also closed its communicator with the failed transfer still posted.
    assert!(survivor.ok() && survivor.stdout.ends_with("OK\n"), "the survivor did not see the peer loss\n{both}");
    let ms: u64 = survivor
        .stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix("peer loss reported: rc ")?.split(" after ").nth(1)?.strip_suffix(" ms")?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no peer-loss line\n{both}"));
    assert!(ms < 10_000, "the peer loss took {ms} ms to surface\n{both}");
    // ncclSystemError (2) or ncclRemoteError (6).
    assert!(survivor.stdout.contains("rc 2 ") || survivor.stdout.contains("rc 6 "), "{both}");
}

#[test]
fn killed_sender_fails_the_pending_receive() {
    killed_peer_fails_the_pending_transfer("send");
}

#[test]
fn killed_receiver_fails_the_pending_send() {
    killed_peer_fails_the_pending_transfer("recv");
}

/// Two network namespaces joined by a veth pair (198.18.0.0/15), removed on drop.
struct Hosts {
    ns: [String; 2],
    veth: [String; 2],
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("running ip (install iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

impl Hosts {
    fn create() -> Result<Hosts, String> {
        let id = std::process::id() % 100_000;
        let hosts =
            Hosts { ns: [format!("jpA{id}"), format!("jpB{id}")], veth: [format!("jpva{id}"), format!("jpvb{id}")] };
        const ADDR: [&str; 2] = ["198.18.7.1/24", "198.18.7.2/24"];
        for ns in &hosts.ns {
            ip(&["netns", "add", ns])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        ip(&["link", "add", &hosts.veth[0], "type", "veth", "peer", "name", &hosts.veth[1]])?;
        for (i, addr) in ADDR.iter().enumerate() {
            ip(&["link", "set", &hosts.veth[i], "netns", &hosts.ns[i]])?;
            ip(&["-n", &hosts.ns[i], "addr", "add", addr, "dev", &hosts.veth[i]])?;
            ip(&["-n", &hosts.ns[i], "link", "set", &hosts.veth[i], "up"])?;
        }
        Ok(hosts)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

#[test]
fn data_moves_between_network_namespaces() {
    let hosts =
        Hosts::create().unwrap_or_else(|e| panic!("cannot create the test namespaces (needs root and iproute2): {e}"));
    let spec = |i: usize| Spec {
        plugin: FABRIC,
        version: 12,
        env: vec![("FI_TCP_IFACE", hosts.veth[i].clone())],
        netns: Some(&hosts.ns[i]),
    };
    let (recv, send) = run_pair(&spec(0), &spec(1), "data");
    assert!(recv.stderr.contains(&format!("device 0: {} via tcp", hosts.veth[0])), "{}", recv.stderr);
    assert!(send.stdout.ends_with("OK\n") && recv.stdout.ends_with("OK\n"));
}
