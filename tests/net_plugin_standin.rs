//! Over the project's stand-in for a hardware plugin, `EdgeStandIn` (forwarding to the
//! libfabric plugin on loopback), which reports the eight NICs of the H100 topology fixture
//! by their PCI paths, and aborts the process when a receive comm closes with a receive
//! still posted, as hardware plugins do that cannot take one back:
//! - jitccl's connectors end with a close message that completes each peer's last posted
//!   receive, so destroying and aborting communicators closes every comm cleanly, and a
//!   communicator destroyed on a thread leaves another of that thread working;
//! - each rank's channels use the devices nearest to it in the fixture (its NUMA domain's
//!   four), the host's ranks spread over them.
//!
//! Ranks are threads of one child process per test (`JITCCL_TRANSPORT=net`), whose
//! environment names the plugin and the topology.

use std::collections::BTreeSet;
use std::time::Duration;

use jitccl::{Comm, Config, Op, UniqueId};

const NRANKS: usize = 2;
const COUNT: usize = 4099;

/// The fixture's NICs' PCI functions, in the order the plugin lists them: a3, ad, b7 and c1
/// hang under NUMA domain 0 (devices 1, 3, 5, 7), the others under NUMA domain 1.
const NICS: [&str; 8] = ["e9", "a3", "cb", "ad", "d5", "b7", "df", "c1"];
const NEAR: [usize; 4] = [1, 3, 5, 7];

/// Runs the test `name` in a child process over the plugin, its NICs and the topology
/// fixture, with a fresh trace file (removed after): the plugin and jitccl read these from
/// the environment, which is set on the child, not in this process beside the other test.
fn over_standin(name: &str, body: impl FnOnce()) {
    let trace = tempfile::NamedTempFile::new().expect("a trace file");
    let paths: Vec<String> =
        NICS.iter().map(|b| format!("/sys/devices/pci0000:00/0000:00:01.0/0000:{b}:00.0")).collect();
    let paths = paths.join(",");
    let vars = [
        ("JITCCL_TRANSPORT", Some("net")),
        ("NCCL_NET_PLUGIN", Some(jitccl_plugins::EDGE_STANDIN)),
        ("JITCCL_EDGE_INNER", Some(jitccl_plugins::FABRIC)),
        ("FI_PROVIDER", Some("tcp")),
        ("FI_TCP_IFACE", Some("lo")),
        ("JITCCL_EDGE_PCI_PATHS", Some(paths.as_str())),
        (TRACE, Some(trace.path().to_str().expect("a UTF-8 temporary path"))),
        ("JITCCL_TOPO_FILE", Some(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/topo/hgx-h100-8gpu-8nic.xml"))),
    ];
    jitccl_plugins::in_child(module_path!(), name, &vars, body);
}

/// The variable naming the file the plugin appends each listen's and connect's device to.
const TRACE: &str = "JITCCL_EDGE_TRACE";

/// One AllReduce of `round + rank` on every rank's `comm`, checked against the sum.
fn all_reduce(comm: &Comm, round: usize) {
    let rank = comm.rank();
    let stream = comm.device().stream().unwrap();
    let buf = comm.device().alloc_from(&vec![(round + rank) as f32; COUNT]).unwrap();
    comm.all_reduce(&buf, &buf, COUNT, Op::Sum, &stream).and_then(|()| stream.synchronize()).unwrap_or_else(|e| {
        panic!("rank {rank}: AllReduce {round} failed: {e}");
    });
    let want = (0..NRANKS).map(|r| (round + r) as f32).sum::<f32>();
    assert!(buf.to_vec().iter().all(|&v| v == want), "rank {rank}: AllReduce {round} gave wrong data");
}

#[test]
fn destroyed_and_aborted_communicators_close_every_plugin_comm_cleanly() {
    over_standin("destroyed_and_aborted_communicators_close_every_plugin_comm_cleanly", || {
        let cfg = Config {
            net_name: Some("EdgeStandIn".into()),
            nchannels: Some(1),
            timeout: Some(Duration::from_secs(30)),
            ..Config::default()
        };
        let ids: Vec<UniqueId> = (0..3).map(|_| UniqueId::new().unwrap()).collect();
        std::thread::scope(|s| {
            for r in 0..NRANKS {
                let (ids, cfg) = (&ids, &cfg);
                s.spawn(move || {
                    let init = |i: usize| Comm::init_rank(&ids[i], NRANKS, r, cfg).expect("init over EdgeStandIn");
                    let (a, b) = (init(0), init(1));
                    all_reduce(&a, 0);
                    all_reduce(&b, 1);
                    // A destroyed while B, on the same thread and plugin, lives on.
                    drop(a);
                    all_reduce(&b, 2);
                    let c = init(2);
                    all_reduce(&c, 3);
                    c.abort();
                    drop(c);
                    all_reduce(&b, 4);
                    b.abort();
                });
            }
        });
    });
}

/// The devices the plugin saw listened and connected on, in this process so far.
fn traced_devices() -> BTreeSet<usize> {
    let path = std::env::var(TRACE).expect("the trace file, given to this child");
    let text = std::fs::read_to_string(path).expect("the plugin's trace");
    text.lines().map(|l| l.rsplit(' ').next().and_then(|d| d.parse().ok()).expect("'call device'")).collect()
}

#[test]
fn each_rank_takes_the_devices_nearest_to_it_spread_over_the_host() {
    over_standin("each_rank_takes_the_devices_nearest_to_it_spread_over_the_host", || {
        let cfg = Config {
            net_name: Some("EdgeStandIn".into()),
            nchannels: Some(2),
            timeout: Some(Duration::from_secs(30)),
            ..Config::default()
        };
        let id = UniqueId::new().unwrap();
        std::thread::scope(|s| {
            for r in 0..NRANKS {
                let (id, cfg) = (&id, &cfg);
                s.spawn(move || {
                    let comm = Comm::init_rank(id, NRANKS, r, cfg).expect("init over EdgeStandIn");
                    all_reduce(&comm, 0);
                });
            }
        });
        // Two ranks of NUMA domain 0, two channels each: its four devices, one per channel,
        // none of NUMA domain 1's.
        assert_eq!(traced_devices().into_iter().collect::<Vec<_>>(), NEAR);
    });
}
