//! Link faults between hosts (see `tests/common/hosts.rs`): a link cut shorter than the link
//! timeout (`JITCCL_LINK_TIMEOUT`) in the middle of a collective is survived, the call
//! completing with correct results once the link is back; a longer cut fails every rank
//! within the link timeout (not the far longer operation timeout), naming the peer it can
//! no longer reach and the operation; so does a cut during init, over the bootstrap's
//! connections. Needs root and iproute2.

use std::path::Path;
use std::time::Duration;

#[path = "../../tests/common/hosts.rs"]
mod hosts;

use hosts::{Hosts, Ranks};

/// Two hosts of one rank each running a long AllReduce sweep; returns once both are in its
/// second size (the first one's line is out), so that a cut now falls inside a collective.
fn sweep_across<'h>(hosts: &'h Hosts, link_timeout: &str) -> Ranks<'h> {
    let args = ["perf", "all_reduce", "-N", "2", "-b", "64K", "-e", "128K", "-w", "1", "-n", "50"];
    // The operation timeout is far beyond the link timeout: only the link may end a wait.
    let env = [("JITCCL_LINK_TIMEOUT", link_timeout), ("JITCCL_TIMEOUT", "120"), ("JITCCL_DEBUG", "WARN")];
    let mut ranks = hosts.ranks(&[0, 1], Path::new(env!("CARGO_BIN_EXE_jitccl")), &args, &env);
    assert!(ranks.wait_for(0, " 65536 ", Duration::from_secs(90)), "the sweep did not get going");
    ranks
}

fn hosts(h: usize) -> Hosts {
    Hosts::new(h).unwrap_or_else(|e| panic!("cannot create {h} test hosts (needs root and iproute2): {e}"))
}

#[test]
fn a_link_cut_shorter_than_the_link_timeout_is_survived() {
    let hosts = hosts(2);
    let mut ranks = sweep_across(&hosts, "10");
    hosts.cut(1).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let during = ranks.exited();
    hosts.restore(1).unwrap();
    let back = ranks.elapsed();
    let ends = ranks.finish(Duration::from_secs(90));
    for e in &ends {
        eprintln!("rank {} finished {:?} after the link came back", e.rank, e.after.map(|t| t.saturating_sub(back)));
    }
    for e in &ends {
        assert!(e.success(), "a 3 s cut failed the job: {e}");
    }
    assert!(during.is_empty(), "rank(s) {during:?} finished before the link came back: the cut missed the collective");
    assert!(ends[0].stdout.contains("# Out of bounds values : 0 OK"), "{}", ends[0]);
}

#[test]
fn a_link_cut_longer_than_the_link_timeout_fails_every_rank_within_it_naming_the_peer() {
    let hosts = hosts(2);
    let window = Duration::from_secs(5);
    let ranks = sweep_across(&hosts, "5");
    // From just before the cut: the link cannot go earlier.
    let cut = ranks.elapsed();
    hosts.cut(1).unwrap();
    let ends = ranks.finish(window + Duration::from_secs(20));
    for e in &ends {
        let peer = 1 - e.rank;
        assert!(!e.success() && e.code.is_some(), "rank {} should fail on its own: {e}", e.rank);
        let after = e.after.expect("ended") - cut;
        eprintln!("rank {} failed {after:?} after the cut", e.rank);
        // Not before the window (a shorter cut is survived; the window counts from the
        // oldest unacknowledged segment, which may precede the cut by a delayed
        // acknowledgement), and well before the operation timeout.
        assert!(after > window - Duration::from_secs(1), "rank {} failed {after:?} after the cut: {e}", e.rank);
        assert!(after < window + Duration::from_secs(5), "rank {} failed only {after:?} after the cut: {e}", e.rank);
        let unreachable = format!("rank {peer} is unreachable");
        assert!(e.stderr.contains(&unreachable), "rank {} does not name rank {peer} as unreachable: {e}", e.rank);
        assert!(e.stderr.contains("all_reduce on rank"), "rank {} does not name the operation: {e}", e.rank);
    }
}

/// A cut during init, while rank 0 waits on rank 1 over the bootstrap (rank 1 pauses
/// after joining): rank 0 fails within the link timeout, not the bootstrap's far longer
/// one, naming rank 1; rank 1, resuming later, fails as well.
#[test]
fn a_link_cut_during_init_fails_within_the_link_timeout() {
    let hosts = hosts(2);
    let window = Duration::from_secs(3);
    let args = ["perf", "all_reduce", "-N", "2", "-b", "8", "-e", "8", "-w", "0", "-n", "1"];
    let common = [("JITCCL_LINK_TIMEOUT", "3"), ("JITCCL_BOOTSTRAP_TIMEOUT", "120"), ("JITCCL_TIMEOUT", "120")];
    let bin = Path::new(env!("CARGO_BIN_EXE_jitccl"));
    let mut ranks = hosts.ranks_each(&[0, 1], bin, &args, |rank| {
        let mut env = common.to_vec();
        if rank == 1 {
            env.push(("JITCCL_TEST_PAUSE_AT", "segment+8000"));
        }
        env
    });
    assert!(ranks.wait_for(1, "pausing at segment", Duration::from_secs(60)), "rank 1 did not reach its pause");
    let cut = ranks.elapsed();
    hosts.cut(1).unwrap();
    let ends = ranks.finish(Duration::from_secs(30));
    for e in &ends {
        assert!(!e.success() && e.code.is_some(), "rank {} should fail on its own: {e}", e.rank);
        assert!(e.stderr.contains("unreachable"), "rank {} does not say whom it cannot reach: {e}", e.rank);
    }
    let after = ends[0].after.expect("ended") - cut;
    eprintln!("rank 0 failed {after:?} after the cut");
    assert!(after > window - Duration::from_secs(1) && after < window + Duration::from_secs(5), "{}", ends[0]);
    assert!(ends[0].stderr.contains("rank 1 is unreachable"), "{}", ends[0]);
}
