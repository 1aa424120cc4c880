//! Two hosts on one machine: two network namespaces joined by a veth pair, one rank
//! process in each. To jitccl they are different machines (no shared memory between
//! them), so every collective runs over the network transport, and each rank checks its
//! results against the reference. Needs root and iproute2 (scripts/setup.sh installs it);
//! CI runs as root, and this test fails rather than skips without them.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A pair of namespaces with a veth link, removed on drop.
struct Hosts {
    ns: [String; 2],
}

const ADDR: [&str; 2] = ["10.211.0.1", "10.211.0.2"];

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("running ip (install iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

impl Hosts {
    fn create() -> Result<Hosts, String> {
        // Tests run at once: each pair gets names of its own.
        static PAIRS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let id =
            format!("{}{}", std::process::id() % 100_000, PAIRS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let hosts = Hosts { ns: [format!("jcA{id}"), format!("jcB{id}")] };
        let veth = [format!("jcva{id}"), format!("jcvb{id}")];
        for ns in &hosts.ns {
            ip(&["netns", "add", ns])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        ip(&["link", "add", &veth[0], "type", "veth", "peer", "name", &veth[1]])?;
        for i in 0..2 {
            ip(&["link", "set", &veth[i], "netns", &hosts.ns[i]])?;
            ip(&["-n", &hosts.ns[i], "addr", "add", &format!("{}/24", ADDR[i]), "dev", &veth[i]])?;
            ip(&["-n", &hosts.ns[i], "link", "set", &veth[i], "up"])?;
        }
        Ok(hosts)
    }

    /// Starts rank `rank` of 2 in its namespace, running `jitccl perf <args>`.
    fn rank(&self, rank: usize, port: u16, args: &[&str]) -> Child {
        self.rank_of(rank, 2, rank, port, args)
    }

    /// Starts rank `rank` of `world` on host `host`, running `jitccl perf <args>`; the
    /// rendezvous is on host 0.
    fn rank_of(&self, rank: usize, world: usize, host: usize, port: u16, args: &[&str]) -> Child {
        Command::new("ip")
            .args(["netns", "exec", &self.ns[host], env!("CARGO_BIN_EXE_jitccl"), "perf"])
            .args(args)
            .env("MASTER_ADDR", ADDR[0])
            .env("MASTER_PORT", port.to_string())
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", world.to_string())
            .env("JITCCL_DEBUG", "INFO")
            .env("JITCCL_TIMEOUT", "60")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start a rank")
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// Waits for a rank, killing it after `limit`; returns (success, stdout, stderr).
fn finish(mut child: Child, limit: Instant) -> (bool, String, String) {
    while Instant::now() < limit && matches!(child.try_wait(), Ok(None)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("rank output");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn collectives_between_two_hosts() {
    let hosts =
        Hosts::create().unwrap_or_else(|e| panic!("cannot create the two test hosts (needs root and iproute2): {e}"));
    let runs: &[&[&str]] = &[
        &["all_reduce", "-d", "float", "-o", "sum", "--proto", "simple"],
        &["all_reduce", "-d", "bfloat16", "-o", "max", "--proto", "ll"],
        &["broadcast", "-d", "int8", "--proto", "ll128"],
        &["reduce", "-d", "double", "-o", "prod", "--proto", "simple"],
        &["all_gather", "-d", "half", "--proto", "ll"],
        &["reduce_scatter", "-d", "int32", "-o", "avg", "--proto", "ll128"],
        &["sendrecv", "-d", "uint8", "--proto", "simple"],
    ];
    for (i, run) in runs.iter().enumerate() {
        let mut args = run.to_vec();
        args.extend(["-n", "2", "-b", "4", "-e", "1M", "-f", "16", "-w", "1", "-i", "3"]);
        let port = 29600 + i as u16;
        let limit = Instant::now() + Duration::from_secs(120);
        let ranks = [hosts.rank(0, port, &args), hosts.rank(1, port, &args)];
        let [r0, r1] = ranks.map(|c| finish(c, limit));
        assert!(r0.0 && r1.0, "{run:?} failed:\nrank 0:\n{}{}\nrank 1:\n{}{}", r0.1, r0.2, r1.1, r1.2);
        assert!(r0.1.contains("# Out of bounds values : 0 OK"), "{run:?}:\n{}", r0.1);
        // Different hosts: no shared memory, one peer over the network.
        assert!(r0.2.contains("0 peer(s) over shared memory, 1 over the network"), "{run:?}: {}", r0.2);
    }
}

/// Ranks interleaved across the hosts (0 and 2 on one, 1 and 3 on the other): the graph
/// search keeps each host's ranks together, so every channel's ring crosses between the
/// hosts exactly twice (rank order would cross four times), and the results still match.
#[test]
fn rings_cross_between_interleaved_hosts_twice() {
    let hosts =
        Hosts::create().unwrap_or_else(|e| panic!("cannot create the two test hosts (needs root and iproute2): {e}"));
    let args = ["all_reduce", "-n", "4", "-b", "4", "-e", "64K", "-f", "16", "-w", "1", "-i", "2", "--channels", "2"];
    let limit = Instant::now() + Duration::from_secs(120);
    let ranks: Vec<Child> = (0..4).map(|r| hosts.rank_of(r, 4, r % 2, 29700, &args)).collect();
    let outs: Vec<_> = ranks.into_iter().map(|c| finish(c, limit)).collect();
    for (r, o) in outs.iter().enumerate() {
        assert!(o.0, "rank {r} failed:\n{}{}", o.1, o.2);
    }
    assert!(outs[0].1.contains("# Out of bounds values : 0 OK"), "{}", outs[0].1);
    let rings: Vec<Vec<usize>> = outs[0]
        .2
        .lines()
        .filter_map(|l| l.split_once("ring [")?.1.split_once(']').map(|(r, _)| r.to_string()))
        .map(|r| r.split(", ").map(|x| x.parse().expect("a rank")).collect())
        .collect();
    assert_eq!(rings.len(), 2, "rank 0 should log one ring per channel:\n{}", outs[0].2);
    for ring in &rings {
        let crossings = (0..4).filter(|&i| ring[i] % 2 != ring[(i + 1) % 4] % 2).count();
        assert_eq!(crossings, 2, "ring {ring:?} crosses between the hosts {crossings} times");
    }
}
