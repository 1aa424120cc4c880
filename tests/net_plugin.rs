//! The network transport over a network plugin: the project's libfabric plugin (`Fabric`,
//! libfabric's `tcp` provider on loopback) carries every byte between ranks
//! (`JITCCL_TRANSPORT=net`, ranks as threads of one child process per test, each with its
//! own proxy and plugin comms), and every collective, protocol and algorithm is checked against the
//! reference with FIFO slots tiny enough that the counts take many steps; plus the loader's
//! edges: a plugin exporting only v8, one whose init fails, one with no device, a missing
//! name first in the list; and host ranks over a plugin that reaches GPU memory.

#[path = "common/world.rs"]
mod world;

use std::time::Duration;

use jitccl::{Algorithm, Collective, Comm, Config, DataType, Op, Protocol, UniqueId};
use world::{check_cases, check_counts, World};

/// Runs the test `name` in a child process over the network through the plugins named
/// below (a missing one first, which is skipped), pinned to loopback: the plugins read
/// their settings from the environment, which is set on the child, not in this process
/// where other tests read it.
fn over_plugins(name: &str, body: impl FnOnce()) {
    let list = [
        "no-such-plugin",
        jitccl_plugins::EDGE_INITFAIL,
        jitccl_plugins::EDGE_NODEV,
        jitccl_plugins::FABRIC,
        jitccl_plugins::EDGE_V8ONLY,
        jitccl_plugins::EDGE_GPU,
    ]
    .join(",");
    let counts = format!("{}/edge-gpu-counts-{}-{name}", env!("CARGO_TARGET_TMPDIR"), std::process::id());
    let vars = [
        ("JITCCL_TRANSPORT", Some("net")),
        ("NCCL_NET_PLUGIN", Some(list.as_str())),
        (EDGE_COUNTS, Some(counts.as_str())),
        // What would send a GPU rank's connectors direct and flush them: host ranks ignore it.
        ("JITCCL_NET_GDR_LEVEL", Some("SYS")),
        ("JITCCL_NET_FORCE_FLUSH", Some("1")),
        ("FI_PROVIDER", Some("tcp")),
        ("FI_TCP_IFACE", Some("lo")),
    ];
    jitccl_plugins::in_child(module_path!(), name, &vars, body);
}

/// The variable naming the file the plugin `EdgeGpu` writes its counts to.
const EDGE_COUNTS: &str = "JITCCL_EDGE_COUNTS";

/// `n` ranks over the network named `net` (None: the default choice), each init on a
/// thread of its own (each blocks until all have joined).
fn comms(n: usize, net: Option<&str>, cfg: &Config) -> Vec<Comm> {
    let id = UniqueId::new().unwrap();
    let cfg = Config { net_name: net.map(str::to_string), timeout: Some(Duration::from_secs(60)), ..cfg.clone() };
    std::thread::scope(|s| {
        let (id, cfg) = (&id, &cfg);
        let hs: Vec<_> = (0..n).map(|r| s.spawn(move || Comm::init_rank(id, n, r, cfg))).collect();
        hs.into_iter().map(|h| h.join().unwrap().expect("init over the plugin")).collect()
    })
}

fn world(n: usize, net: Option<&str>, algo: Algorithm, proto: Protocol) -> World {
    let cfg = Config {
        nchannels: Some(2),
        algo: Some(algo),
        proto: Some(proto),
        // Simple: 64 f32 per step; LL: 4 lines; LL128: 2 lines.
        slot_bytes: Some([256, 64, 256]),
        ..Config::default()
    };
    let comms = comms(n, net, &cfg);
    let streams = comms.iter().map(|c| c.device().stream().unwrap()).collect();
    World { comms, streams, mem: world::Mem::Plain }
}

const COUNTS: &[usize] = &[0, 1, 4099];

fn reductions(dtypes: &[DataType]) -> Vec<(DataType, Option<Op>)> {
    dtypes.iter().flat_map(|&d| [Op::Sum, Op::Max].map(|o| (d, Some(o)))).collect()
}

#[test]
fn every_collective_over_the_fabric_plugin_matches_the_reference() {
    over_plugins("every_collective_over_the_fabric_plugin_matches_the_reference", || {
        let (mut runs, mut failures) = (0, Vec::new());
        for proto in [Protocol::Simple, Protocol::LL, Protocol::LL128] {
            for (algo, n) in [(Algorithm::Ring, 3), (Algorithm::Tree, 3)] {
                let t = std::time::Instant::now();
                let w = world(n, Some("fabric"), algo, proto);
                for coll in Collective::ALL.iter().copied().filter(|c| c.algorithms().contains(&algo)) {
                    let cases = if coll.reduces() {
                        reductions(&[DataType::F32, DataType::BF16])
                    } else {
                        vec![(DataType::U8, None), (DataType::F64, None)]
                    };
                    let (r, f) = check_counts(&w, coll, &cases, COUNTS, &format!("{coll} {algo}/{proto} n={n}"));
                    runs += r;
                    failures.extend(f);
                }
                drop(w);
                eprintln!("{algo}/{proto}: {:?}", t.elapsed());
            }
        }
        assert!(failures.is_empty(), "{} of {runs} runs failed:\n{}", failures.len(), failures.join("\n"));
        eprintln!("over the fabric plugin: {runs} runs passed");
    });
}

#[test]
fn steps_larger_than_the_staging_cross_whole() {
    over_plugins("steps_larger_than_the_staging_cross_whole", || {
        // Default FIFO slots: Simple steps of 128 KiB, straight from slot to slot.
        let cfg = Config { nchannels: Some(1), proto: Some(Protocol::Simple), ..Config::default() };
        let comms = comms(2, Some("Fabric"), &cfg);
        let streams: Vec<_> = comms.iter().map(|c| c.device().stream().unwrap()).collect();
        let w = World { comms, streams, mem: world::Mem::Plain };
        let (runs, failures) =
            check_counts(&w, Collective::AllReduce, &[(DataType::F32, Some(Op::Sum))], &[3 << 20], "large");
        assert!(failures.is_empty(), "{} of {runs} runs failed:\n{}", failures.len(), failures.join("\n"));
    });
}

/// Without a name, the first plugin that initializes with a device is chosen: the list's
/// missing library, failing init and empty plugin are skipped, and Fabric comes next.
#[test]
fn the_first_plugin_with_a_device_is_chosen_by_default() {
    over_plugins("the_first_plugin_with_a_device_is_chosen_by_default", || {
        let w = world(2, None, Algorithm::Ring, Protocol::Simple);
        let (runs, failures) = check_cases(&w, Collective::AllReduce, &reductions(&[DataType::F32]), "default");
        assert!(failures.is_empty(), "{} of {runs} runs failed:\n{}", failures.len(), failures.join("\n"));
    });
}

/// A plugin that exports only `ncclNetPlugin_v8` is driven through the v8 table.
#[test]
fn a_plugin_of_version_8_moves_the_data() {
    over_plugins("a_plugin_of_version_8_moves_the_data", || {
        let w = world(2, Some("EdgeV8"), Algorithm::Ring, Protocol::LL128);
        let (runs, failures) = check_cases(&w, Collective::AllGather, &[(DataType::F32, None)], "v8");
        assert!(failures.is_empty(), "{} of {runs} runs failed:\n{}", failures.len(), failures.join("\n"));
    });
}

/// Asking for a network that was skipped fails init, saying why; an unknown name lists
/// the networks there are.
#[test]
fn a_skipped_or_unknown_network_fails_init_saying_why() {
    over_plugins("a_skipped_or_unknown_network_fails_init_saying_why", || {
        for (name, expect) in [("EdgeInitFail", "init"), ("EdgeNoDev", "no device"), ("Nope", "Socket")] {
            let id = UniqueId::new().unwrap();
            let cfg =
                Config { net_name: Some(name.into()), timeout: Some(Duration::from_secs(20)), ..Config::default() };
            let errs: Vec<String> = std::thread::scope(|s| {
                let (id, cfg) = (&id, &cfg);
                let hs: Vec<_> = (0..2).map(|r| s.spawn(move || Comm::init_rank(id, 2, r, cfg))).collect();
                hs.into_iter().map(|h| h.join().unwrap().err().map(|e| e.to_string()).unwrap_or_default()).collect()
            });
            for e in &errs {
                assert!(e.contains(name) && e.contains(expect), "asking for {name}: {e:?}");
            }
        }
    });
}

/// `EdgeGpu` reports `NCCL_PTR_HOST | NCCL_PTR_CUDA` and `forceFlush`, and refuses a
/// registration whose type is not the memory's kind: host ranks register their FIFOs as host
/// memory all the same, flush nothing, and match the reference.
#[test]
fn host_ranks_keep_host_memory_over_a_plugin_that_reaches_gpus() {
    over_plugins("host_ranks_keep_host_memory_over_a_plugin_that_reaches_gpus", || {
        let w = world(3, Some("EdgeGpu"), Algorithm::Ring, Protocol::Simple);
        let cases = [(DataType::F32, Some(Op::Sum))];
        let (mut runs, mut failures) = check_counts(&w, Collective::AllReduce, &cases, COUNTS, "EdgeGpu AllReduce");
        let (r, f) = check_counts(&w, Collective::AllGather, &[(DataType::U8, None)], COUNTS, "EdgeGpu AllGather");
        runs += r;
        failures.extend(f);
        assert!(failures.is_empty(), "{} of {runs} runs failed:\n{}", failures.len(), failures.join("\n"));
        // Every rank's finalize has run once its comm is dropped.
        drop(w);
        // Each finalize appends the process's counts so far: the most of each.
        let path = std::env::var(EDGE_COUNTS).expect("the counts file, given to this child");
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let most = |name: &str| {
            let of = |line: &str| {
                let words: Vec<&str> = line.split_whitespace().collect();
                words.windows(2).find(|w| w[0] == name).and_then(|w| w[1].parse::<i64>().ok())
            };
            text.lines().filter_map(of).max().unwrap_or(-1)
        };
        assert!(most("regmr_host") > 0, "the FIFOs and staging registered as host memory: {text:?}");
        assert_eq!(most("regmr_cuda"), 0, "a host rank registered GPU memory: {text}");
        assert_eq!(most("iflush"), 0, "a host rank flushed: {text}");
        assert_eq!((most("gpu_bytes_out"), most("gpu_bytes_in")), (0, 0), "{text}");
    });
}
