//! A C program on `libnccl.so.2` across two hosts of one machine (network namespaces joined
//! through a bridge, `tests/common/hosts.rs`), every byte between them through a network
//! plugin: the project's libfabric plugin over libfabric's `tcp` provider, loaded as NCCL
//! loads one (`NCCL_NET_PLUGIN`, `NCCL_NET`). `collectives.c` checks every collective
//! against its own reference on each rank. `shrink.c`: every rank of one host dies
//! (SIGKILL), and the other host's ranks shrink past them with `NCCL_SHRINK_ABORT` (over
//! the socket transport).

mod common;
#[path = "../../tests/common/hosts.rs"]
mod hosts;

use std::time::Duration;

use common::compile;
use hosts::Hosts;

#[test]
fn a_c_program_runs_across_hosts_over_a_network_plugin() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let exe = compile("collectives", tmp.path(), true, false);
    let hosts = Hosts::new(2).unwrap_or_else(|e| panic!("cannot create 2 test hosts (needs root and iproute2): {e}"));
    let env = [
        ("JITCCL_DEVICE", "host"),
        ("JITCCL_TIMEOUT", "60"),
        ("JITCCL_DEBUG", "INFO"),
        ("NCCL_NET_PLUGIN", jitccl_plugins::FABRIC),
        ("NCCL_NET", "Fabric"),
        ("FI_PROVIDER", "tcp"),
        ("FI_TCP_IFACE", "net0"),
    ];
    let args = ["--types", "float,int32,bfloat16", "--ops", "sum,max"];
    let ends = hosts.ranks(&Hosts::blocked(2, 2), &exe, &args, &env).finish(Duration::from_secs(120));
    for e in &ends {
        assert!(e.success(), "rank {} failed: {e}", e.rank);
        assert!(e.stderr.contains("net transport up over Fabric"), "rank {} did not use the plugin:\n{e}", e.rank);
        let passed = e.stdout.lines().find_map(|l| {
            l.strip_prefix(&format!("rank {}: ", e.rank))?.strip_suffix(" checks passed")?.trim().parse::<u64>().ok()
        });
        assert!(passed.is_some_and(|n| n >= 100), "rank {}: {passed:?} checks passed:\n{e}", e.rank);
    }
}

#[test]
fn the_ranks_of_a_host_that_dies_shrink_past_it() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let exe = compile("shrink", tmp.path(), true, false);
    let hosts = Hosts::new(2).unwrap_or_else(|e| panic!("cannot create 2 test hosts (needs root and iproute2): {e}"));
    let env = [("JITCCL_DEVICE", "host"), ("JITCCL_TIMEOUT", "60")];
    let ends = hosts.ranks(&Hosts::blocked(2, 2), &exe, &["--dead", "2,3"], &env).finish(Duration::from_secs(120));
    for e in &ends[2..] {
        assert!(e.code.is_none() && e.stdout.contains("dying"), "rank {} should die of SIGKILL: {e}", e.rank);
    }
    for e in &ends[..2] {
        assert!(e.success(), "rank {} failed: {e}", e.rank);
        let passed = e.stdout.lines().find_map(|l| {
            l.strip_prefix(&format!("rank {}: ", e.rank))?.strip_suffix(" checks passed")?.trim().parse::<u64>().ok()
        });
        assert!(passed.is_some_and(|n| n >= 9), "rank {}: {passed:?} checks passed:\n{e}", e.rank);
    }
}
