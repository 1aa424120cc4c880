//! Ranks on several hosts of one machine (network namespaces joined through a bridge, see
//! `tests/common/hosts.rs`): to jitccl they are different machines (no shared memory between
//! them), so what crosses between hosts goes over the network transport, and each rank
//! checks its results against the reference. Needs root and iproute2 (scripts/setup.sh
//! installs it); CI runs as root, and these tests fail rather than skip without them.

use std::time::Duration;

#[path = "../../tests/common/hosts.rs"]
mod hosts;
#[path = "common/listeners.rs"]
mod listeners;

use hosts::{Hosts, RankEnd};
use jitccl::auth::{JobKey, Service};

fn hosts(h: usize) -> Hosts {
    Hosts::new(h).unwrap_or_else(|e| panic!("cannot create {h} test hosts (needs root and iproute2): {e}"))
}

/// Runs `jitccl perf <args>` as one process per rank, rank r on host `placement[r]`, each
/// with the given extra environment; every rank must succeed within two minutes.
fn perf(hosts: &Hosts, placement: &[usize], args: &[&str], env: &[(&str, &str)]) -> Vec<RankEnd> {
    let env = [&[("JITCCL_DEBUG", "INFO"), ("JITCCL_TIMEOUT", "60")][..], env].concat();
    let ranks = hosts.ranks(
        placement,
        std::path::Path::new(env!("CARGO_BIN_EXE_jitccl")),
        &[&["perf"][..], args].concat(),
        &env,
    );
    let ends = ranks.finish(Duration::from_secs(120));
    for e in &ends {
        assert!(e.success(), "{args:?} failed: {e}");
    }
    assert!(ends[0].stdout.contains("# Out of bounds values : 0 OK"), "{args:?}:\n{}", ends[0].stdout);
    ends
}

#[test]
fn collectives_between_two_hosts() {
    let hosts = hosts(2);
    let runs: &[&[&str]] = &[
        &["all_reduce", "-d", "float", "-o", "sum", "--proto", "simple"],
        &["all_reduce", "-d", "bfloat16", "-o", "max", "--proto", "ll"],
        &["broadcast", "-d", "int8", "--proto", "ll128"],
        &["reduce", "-d", "double", "-o", "prod", "--proto", "simple"],
        &["all_gather", "-d", "half", "--proto", "ll"],
        &["reduce_scatter", "-d", "int32", "-o", "avg", "--proto", "ll128"],
        &["sendrecv", "-d", "uint8", "--proto", "simple"],
    ];
    for run in runs {
        let args = [*run, &["-N", "2", "-b", "4", "-e", "1M", "-f", "16", "-w", "1", "-n", "3"][..]].concat();
        let ends = perf(&hosts, &[0, 1], &args, &[]);
        // Different hosts: no shared memory, one peer over the network.
        assert!(ends[0].stderr.contains("0 peer(s) over shared memory, 1 over the network"), "{run:?}: {}", ends[0]);
        // The network's larger FIFOs; calls that only copy keep the usual steps.
        let fifos = "Simple FIFOs of 4096 KiB, steps of 128 KiB for calls that only copy";
        assert!(ends[0].stderr.contains(fifos), "{run:?}: {}", ends[0]);
    }
}

/// With JITCCL_TLS=1 (and a job key on every rank) the sockets between the hosts carry
/// TLS, the bootstrap's ring, its links to the root and the network transport's alike, and
/// the results match.
#[test]
fn collectives_between_two_hosts_over_tls() {
    let hosts = hosts(2);
    let env = [("JITCCL_AUTH_KEY", "the two hosts' job secret"), ("JITCCL_TLS", "1")];
    for run in [&["all_reduce", "-d", "float", "-o", "sum"][..], &["reduce_scatter", "-d", "int32", "-o", "max"]] {
        let args = [run, &["-N", "2", "-b", "4", "-e", "1M", "-f", "16", "-w", "1", "-n", "2"][..]].concat();
        for e in perf(&hosts, &[0, 1], &args, &env) {
            assert!(e.stderr.contains("socket(s) each, TLS"), "{run:?}: {e}");
            assert!(e.stderr.contains("the bootstrap ring and the links to the root carry TLS"), "{run:?}: {e}");
        }
    }
}

/// A TLS job between two hosts, held while rank 0's transport listener waits for rank 1
/// (paused just before it connects): a client on rank 1's host that knows the job's key
/// and proves it, but then speaks in the clear, is refused; the job's results match.
#[test]
fn a_client_in_the_clear_is_refused_between_hosts_over_tls() {
    let hosts = hosts(2);
    let secret = "the two hosts' job secret";
    let key = JobKey::from_secret(secret).unwrap();
    let args = ["perf", "all_reduce", "-N", "2", "-b", "4", "-e", "64K", "-f", "16", "-w", "1", "-n", "2"];
    let env = |rank: usize| {
        let mut env = vec![("JITCCL_AUTH_KEY", secret), ("JITCCL_TLS", "1"), ("JITCCL_DEBUG", "INFO")];
        env.push(("JITCCL_TIMEOUT", "60"));
        if rank == 1 {
            env.push(("JITCCL_TEST_PAUSE_AT", "transport+4000"));
        }
        env
    };
    let mut ranks = hosts.ranks_each(&[0, 1], std::path::Path::new(env!("CARGO_BIN_EXE_jitccl")), &args, env);
    assert!(ranks.wait_for(1, "pausing at transport", Duration::from_secs(60)), "rank 1 never reached its pause");
    let pids = listeners::tree(ranks.pid(0));
    // Rank 0's transport listener: the one whose handshake proves the net service.
    // Each listener at once: one that does not answer (not accepting) holds only its own.
    let refused = hosts.in_host(1, || {
        std::thread::scope(|scope| {
            let tries: Vec<_> = listeners::of(&pids)
                .into_iter()
                .map(|addr| {
                    scope.spawn(move || {
                        let (_, mut s) = listeners::handshake(addr, &key, Service::Net)?;
                        // A transport hello, in the clear where TLS is due.
                        let hello = [b"JCCLNET2".as_slice(), &[0u8; 32]].concat();
                        std::io::Write::write_all(&mut s, &hello).ok()?;
                        Some((addr, listeners::fate(s)))
                    })
                })
                .collect();
            tries.into_iter().find_map(|t| t.join().unwrap())
        })
    });
    let ends = ranks.finish(Duration::from_secs(60));
    let (addr, refused) = refused.unwrap_or_else(|| panic!("rank 0's transport listener was not found: {}", ends[0]));
    assert_eq!(refused, listeners::Fate::Alerted, "a client in the clear at {addr}: {}", ends[0]);
    assert!(ends[0].stderr.contains(&format!("refused a net connection from {}", hosts.addr(1))), "{}", ends[0]);
    for e in &ends {
        assert!(e.success() && e.stderr.contains("the bootstrap ring and the links to the root carry TLS"), "{e}");
    }
    assert!(ends[0].stdout.contains("# Out of bounds values : 0 OK"), "{}", ends[0]);
}

/// Two hosts of two ranks each: a rank reaches the other rank of its host through shared
/// memory and the two of the other host over the network, and the results match.
#[test]
fn two_hosts_of_two_ranks_share_memory_inside_a_host() {
    let hosts = hosts(2);
    for run in [&["all_reduce", "-o", "sum"][..], &["all_gather"], &["reduce_scatter", "-o", "max"]] {
        let args = [run, &["-N", "4", "-b", "4", "-e", "1M", "-f", "32", "-w", "1", "-n", "2"][..]].concat();
        let ends = perf(&hosts, &Hosts::blocked(2, 2), &args, &[]);
        for e in &ends {
            assert!(e.stderr.contains("1 peer(s) over shared memory, 2 over the network"), "{run:?}: {e}");
        }
    }
}

/// The same between hosts through a network plugin (the project's libfabric plugin over
/// libfabric's `tcp` provider, pinned to the hosts' interfaces), at 2 hosts x 1 rank and
/// 2 hosts x 2 ranks (shared memory inside a host, the plugin between hosts), with the FIFOs
/// a plugin gets by default.
#[test]
fn collectives_between_hosts_over_the_fabric_plugin() {
    let hosts = hosts(2);
    let plugin = [
        ("NCCL_NET_PLUGIN", jitccl_plugins::FABRIC),
        ("NCCL_NET", "Fabric"),
        ("FI_PROVIDER", "tcp"),
        ("FI_TCP_IFACE", "net0"),
    ];
    let runs: &[(&[usize], &[&str])] = &[
        (&[0, 1], &["all_reduce", "-d", "float", "-o", "sum", "--proto", "simple"]),
        (&[0, 1], &["all_gather", "-d", "half", "--proto", "ll"]),
        (&[0, 1], &["sendrecv", "-d", "uint8", "--proto", "ll128"]),
        (&[0, 0, 1, 1], &["all_reduce", "-d", "bfloat16", "-o", "max"]),
        (&[0, 0, 1, 1], &["reduce_scatter", "-d", "int32", "-o", "sum", "--proto", "ll128"]),
        (&[0, 0, 1, 1], &["broadcast", "-d", "int8", "--proto", "simple"]),
        (&[0, 0, 1, 1], &["all_to_all", "-d", "float"]),
    ];
    for (placement, run) in runs {
        let n = placement.len().to_string();
        let args = [*run, &["-N", &n, "-b", "4", "-e", "1M", "-f", "32", "-w", "1", "-n", "2"][..]].concat();
        let ends = perf(&hosts, placement, &args, &plugin);
        for e in &ends {
            assert!(
                e.stderr.contains("net transport up over Fabric"),
                "{run:?}: rank {} did not use the plugin: {e}",
                e.rank
            );
        }
        // Host ranks over a plugin take NCCL's 4 MiB FIFOs (every rank has room here).
        let rank0 = ends.iter().find(|e| e.rank == 0).expect("rank 0");
        assert!(rank0.stderr.contains("Simple FIFOs of 4096 KiB"), "{run:?}: {rank0}");
    }
}

/// Calls of one size in `jitccl perf -w 1 -n 1 -c 1`: out of place and in place, 3 each.
const CALLS: u64 = 2 * 3;

/// The ring's bytes through each host's link against the optimum, at 2 hosts x 2 ranks
/// and 3 hosts x 2 ranks, ranks interleaved (rank r on host r mod H), so that rank order
/// would cross between hosts at every hop.
///
/// The optimum: with N = H x L ranks and each host's ranks together in every channel's
/// ring, a ring crosses each host's link exactly once each way, and every hop of a ring
/// carries the same bytes; over all channels together (each carries its share of the
/// buffer) that is, per call, with the Simple protocol (the wire carries the data alone):
/// - AllReduce of S bytes per rank (reduce-scatter then all-gather: 2(N-1) steps of S/N
///   each): 2(N-1)/N x S each way per host;
/// - AllGather and ReduceScatter of S bytes in all (S/N per rank; N-1 steps of S/N):
///   (N-1)/N x S each way per host.
///
/// Rank order over interleaved hosts sends L times that (every hop crosses). `jitccl perf`
/// runs each size out of place and in place, -w + -n + -c calls each; headers,
/// acknowledgements and the setup's exchanges come on top, which the bound's margin allows
/// for at a few MiB (docs/performance.md, "Topology search"). Rank 0's log describes each
/// channel across hosts: its ring crossing H times, its tree H - 1.
#[test]
fn ring_bytes_between_hosts_are_the_optimum() {
    for placement in [&[0, 1, 0, 1][..], &[0, 1, 2, 0, 1, 2]] {
        let nhosts = placement.iter().max().unwrap() + 1;
        let hosts = hosts(nhosts);
        let n = placement.len() as u64;
        for (coll, steps) in [("all_reduce", 2 * (n - 1)), ("all_gather", n - 1), ("reduce_scatter", n - 1)] {
            // perf rounds AllGather's and ReduceScatter's S down to whole floats per rank.
            let s = if coll == "all_reduce" { 4u64 << 20 } else { (4u64 << 20) / 4 / n * 4 * n };
            let optimum = CALLS * steps * s / n;
            let before: Vec<_> = (0..nhosts).map(|i| hosts.counters(i)).collect();
            let args = [coll, "-N", &n.to_string(), "-b", &s.to_string(), "-e", &s.to_string()];
            let tail = ["-w", "1", "-n", "1", "-c", "1", "--algo", "ring", "--proto", "simple", "--channels", "2"];
            let ends = perf(&hosts, placement, &[&args[..], &tail].concat(), &[]);
            for (i, before) in before.iter().enumerate() {
                let after = hosts.counters(i);
                for (way, bytes) in
                    [("sent", after.tx_bytes - before.tx_bytes), ("received", after.rx_bytes - before.rx_bytes)]
                {
                    let ratio = bytes as f64 / optimum as f64;
                    let what = format!("{coll} {s} B at {placement:?}: host {i} {way} {bytes} B");
                    eprintln!("{what}, {ratio:.4} x the optimum {optimum} B");
                    assert!((1.0..=1.05).contains(&ratio), "{what}, the optimum is {optimum} B");
                }
            }
            for c in 0..2 {
                let want = format!("channel {c}: ring host 0 ");
                let line = ends[0].stderr.lines().find(|l| l.contains("across hosts: ") && l.contains(&want));
                let line =
                    line.unwrap_or_else(|| panic!("rank 0 does not describe channel {c} across hosts: {}", ends[0]));
                let ring = format!("crossing between hosts {nhosts} time(s) (fewest {nhosts})");
                let tree = format!("{} edge(s) between hosts (fewest {})", nhosts - 1, nhosts - 1);
                assert!(line.contains(&ring) && line.contains(&tree), "{line}");
            }
        }
    }
}

/// A graph file with fewer channels than configured: the rank-order rings put in its place
/// still keep each host's ranks together (the bytes between hosts stay at the ring's
/// optimum, see above), where plain rank order would cross at every hop.
#[test]
fn rings_without_the_search_keep_each_host_together() {
    let hosts = hosts(2);
    let file = std::env::temp_dir().join(format!("jitccl-one-channel-{}.xml", std::process::id()));
    let one = r#"<graphs version="1"><graph id="0" pattern="4" nchannels="1"><channel><cpu numaid="0" rank="0"/><cpu numaid="0" rank="1"/></channel></graph></graphs>"#;
    std::fs::write(&file, one).unwrap();
    let (s, n): (u64, u64) = (4 << 20, 4);
    let optimum = CALLS * 2 * (n - 1) * s / n;
    let before: Vec<_> = (0..2).map(|i| hosts.counters(i)).collect();
    let args = ["all_reduce", "-N", "4", "-b", "4M", "-e", "4M", "-w", "1", "-n", "1", "-c", "1", "--algo", "ring"];
    let args = [&args[..], &["--proto", "simple", "--channels", "2"]].concat();
    let ends = perf(&hosts, &[0, 1, 0, 1], &args, &[("JITCCL_GRAPH_FILE", file.to_str().unwrap())]);
    let _ = std::fs::remove_file(&file);
    assert!(ends[0].stderr.contains("using rank-order rings, each host's ranks together"), "{}", ends[0]);
    for (i, before) in before.iter().enumerate() {
        let sent = hosts.counters(i).tx_bytes - before.tx_bytes;
        let ratio = sent as f64 / optimum as f64;
        eprintln!("without the search: host {i} sent {sent} B, {ratio:.4} x the optimum {optimum} B");
        assert!((1.0..=1.05).contains(&ratio), "host {i} sent {sent} B, the optimum is {optimum} B");
    }
}

/// A small AllReduce across hosts leaves the ring and one-shot for a path the cost model
/// finds cheaper: the tree (two network hops, up and down the hosts' tree, against the
/// ring's four and one-shot's message to each rank of the other host) or recursive doubling (one round of pairwise swaps across the hosts), and
/// its debug line says why: the estimates side by side and the network's hop and bandwidth.
#[test]
fn small_calls_across_hosts_take_the_cheaper_path() {
    let hosts = hosts(2);
    let args = ["all_reduce", "-N", "4", "-b", "8", "-e", "8", "-w", "1", "-n", "1"];
    let ends = perf(&hosts, &[0, 1, 0, 1], &args, &[("JITCCL_DEBUG", "DEBUG")]);
    let line = ends[0].stderr.lines().find(|l| l.contains("all_reduce 8 B x 4 ranks: "));
    let line = line.unwrap_or_else(|| panic!("no choice logged for 8 B: {}", ends[0]));
    let (algo, why) = line.split_once("x 4 ranks: ").unwrap().1.split_once('/').unwrap();
    let us = |after: &str| -> f64 {
        let at = why.find(after).unwrap_or_else(|| panic!("no '{after}' in: {line}")) + after.len();
        why[at..].split(' ').next().unwrap().parse().unwrap_or_else(|_| panic!("no estimate after '{after}': {line}"))
    };
    let (chosen, ring, oneshot) = (us("from the cost model ("), us("ring "), us("oneshot "));
    assert!(
        ["tree", "recursive_doubling"].contains(&algo) && chosen < ring && chosen < oneshot,
        "not a path between hosts cheaper than the ring and one-shot: {line}"
    );
    assert!(why.contains("2 hosts: ") && why.contains(" us a network hop"), "{line}");
}

/// Set in a child of [`a_wired_ring_rounds_partial_sums_only_between_hosts`]: it runs
/// [`wired_rank`].
const WIRED: &str = "JITCCL_TWO_HOSTS_WIRED";
/// Elements per rank of the wired check's AllReduce and of each rank's ReduceScatter block.
const WIRED_COUNT: usize = 4096;

/// Rank r's every input of the wired check, 2 hosts x 2 ranks (host 0: ranks 0 and 1):
/// `1, -1` on host 0 and `e, -e` on host 1, `e = 2^-10`. Over any ring that keeps each
/// host's ranks together, in either direction and from any starting rank, every partial
/// sum that crosses between hosts (`±1`, `±e`, 0) is a bf16 value and the total is 0, so
/// a ring that rounds only there gives exactly 0; a partial sum that crosses inside a host
/// may be `±1 ± e`, which bf16 rounds to `±1`, so rounding it there too leaves `±e`
/// behind.
fn wired_input(rank: usize) -> f32 {
    [1.0, -1.0, 1.0 / 1024.0, -1.0 / 1024.0][rank]
}

/// One rank of the wired check, in a child process; does nothing in a normal run. Prints
/// how many of its results a bf16 ring AllReduce and ReduceScatter left off the exact sum
/// (0) and how many encodings the communicator counts for each.
#[test]
fn wired_rank() {
    if std::env::var(WIRED).is_err() {
        return;
    }
    use jitccl::{Collective, Comm, Config, Op, Wire};
    let comm = Comm::init_from_env(&Config::default()).expect("init");
    let (n, me) = (comm.nranks(), comm.rank());
    assert_eq!(n, 4, "the check's inputs are made for 2 hosts x 2 ranks");
    let stream = comm.device().stream().expect("a stream");
    let wired = comm.wired(Wire::Bf16);
    let send = comm.device().alloc_from(&vec![wired_input(me); n * WIRED_COUNT]).expect("the input");
    let recv = comm.device().alloc::<f32>(n * WIRED_COUNT).expect("the output");
    for coll in [Collective::AllReduce, Collective::ReduceScatter] {
        let len = match coll {
            Collective::AllReduce => {
                wired.all_reduce(&send, &recv, n * WIRED_COUNT, Op::Sum, &stream).expect("the AllReduce");
                n * WIRED_COUNT
            }
            _ => {
                wired.reduce_scatter(&send, &recv, WIRED_COUNT, Op::Sum, &stream).expect("the ReduceScatter");
                WIRED_COUNT
            }
        };
        stream.synchronize().expect("the call");
        let off = recv.to_vec()[..len].iter().filter(|v| **v != 0.0).count();
        let encodings = wired.ring_encodings(coll).expect("the encodings");
        println!("{coll}: {off} of {len} off the exact sum, at most {encodings} encoding(s)");
    }
}

/// A wired ring between 2 hosts of 2 ranks rounds partial sums only on the hops between
/// hosts, and carries them as fp32 inside a host: with inputs that only a rounding inside a
/// host moves off the exact sum ([`wired_input`]) every result is exact, while with
/// `JITCCL_WIRE_LOCAL=encode` (every hop rounds) some are not. The communicator counts 3
/// encodings of 4 for the AllReduce (the 2 hops between hosts that a chunk's reduction may
/// cross, then its final sums) and 2 for the ReduceScatter, and rank 0 says that each
/// channel's ring has 2 hops of 4 through the network. `jitccl perf` then checks realistic
/// inputs against that tighter bound, every rank holding the same bits.
#[test]
fn a_wired_ring_rounds_partial_sums_only_between_hosts() {
    let hosts = hosts(2);
    let exe = std::env::current_exe().expect("the test binary");
    let args = ["--exact", "wired_rank", "--nocapture", "--test-threads=1"];
    let common = [(WIRED, "1"), ("JITCCL_ALGO", "ring"), ("JITCCL_DEBUG", "INFO"), ("JITCCL_TIMEOUT", "60")];
    let (all, blocks) = (4 * WIRED_COUNT, WIRED_COUNT);
    for (local, (ar_off, ar_enc), (rs_off, rs_enc)) in [("exact", (0, 3), (0, 2)), ("encode", (1, 4), (1, 3))] {
        let env = [&common[..], &[("JITCCL_WIRE_LOCAL", local)]].concat();
        let ranks = hosts.ranks(&Hosts::blocked(2, 2), std::path::Path::new(&exe), &args, &env);
        let ends = ranks.finish(Duration::from_secs(120));
        let count = |e: &RankEnd, coll: &str| -> (usize, usize) {
            // The test harness's "test wired_rank ... " may come first on the line.
            let line = e.stdout.lines().find_map(|l| l.find(&format!("{coll}: ")).map(|at| &l[at..]));
            let line = line.unwrap_or_else(|| panic!("rank {} gave no {coll} line: {e}", e.rank));
            let words: Vec<&str> = line.split(' ').collect();
            (words[1].parse().unwrap(), words[words.len() - 2].parse().unwrap())
        };
        let mut off = [0, 0];
        for e in &ends {
            assert!(e.success(), "wire_local={local}: {e}");
            let ((a, ae), (r, re)) = (count(e, "all_reduce"), count(e, "reduce_scatter"));
            assert_eq!((ae, re), (ar_enc, rs_enc), "wire_local={local}: the encodings rank {} counts", e.rank);
            off[0] += a;
            off[1] += r;
        }
        eprintln!("wire_local={local}: off the exact sum: {} of 4 x {all} AllReduce results, {} of 4 x {blocks} ReduceScatter results", off[0], off[1]);
        match local {
            "exact" => {
                assert_eq!(off, [ar_off, rs_off], "a partial sum was rounded inside a host");
                let hops = ends[0].stderr.lines().find(|l| l.contains("wired ring calls encode partial sums only"));
                let hops = hops.unwrap_or_else(|| panic!("rank 0 does not say which hops encode: {}", ends[0]));
                let per = hops.split_once("of 4 per ring: ").and_then(|(_, t)| t.split_once(';')).map(|(p, _)| p);
                let per = per.unwrap_or_else(|| panic!("no hops per channel: {hops}"));
                assert!(per.split(", ").all(|c| c.starts_with("channel ") && c.ends_with(" 2")), "{hops}");
            }
            _ => assert!(off[0] >= ar_off && off[1] >= rs_off, "every hop rounds, yet every result is exact"),
        }
    }
    let runs: [&[&str]; 2] =
        [&["all_reduce", "-d", "float", "--wire", "int8"], &["reduce_scatter", "-d", "bfloat16", "--wire", "fp8e4m3"]];
    for (run, encodings) in runs.into_iter().zip([3, 2]) {
        let tail = ["-N", "4", "--algo", "ring", "-b", "4", "-e", "1M", "-f", "32", "-w", "1", "-n", "2"];
        let ends = perf(&hosts, &Hosts::blocked(2, 2), &[run, &tail[..]].concat(), &[]);
        let header = format!("wire encodes what the ranks send, a result at most {encodings} time(s)");
        assert!(ends[0].stdout.contains(&header), "{run:?}: {}", ends[0].stdout);
    }
}
