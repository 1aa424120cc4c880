//! Scenarios shared by the failure tests of several transports.

use std::time::{Duration, Instant};

use jitccl::{Comm, Error};

/// Rank 2 of `comms` (3 ranks) is alive but never joins: rank 0 times out receiving from
/// it; rank 1, which waits on rank 0 only (a receive posted half a timeout later), learns
/// of the failure from rank 0 before its own wait could time out, and names rank 2.
pub fn failure_reaches_a_rank_that_does_not_wait_on_the_culprit(comms: &[Comm], timeout: Duration) {
    let streams: Vec<_> = comms.iter().map(|c| c.device().stream().unwrap()).collect();
    let b: Vec<_> = comms.iter().map(|c| c.device().alloc_from(&[1i32; 64]).unwrap()).collect();
    comms[0].recv(&b[0], 64, 2, &streams[0]).unwrap();
    comms[0].send(&b[0], 64, 1, &streams[0]).unwrap();
    std::thread::sleep(timeout / 2);
    let posted = Instant::now();
    comms[1].recv(&b[1], 64, 0, &streams[1]).unwrap();
    let e1 = streams[1].synchronize().unwrap_err();
    let waited = posted.elapsed();
    let e0 = streams[0].synchronize().unwrap_err();
    assert!(matches!(e0, Error::Timeout { rank: 0, peer: 2, .. }), "{e0}");
    match &e1 {
        Error::PeerFailed { rank: 1, peer: 0, culprit: 2, how, .. } => {
            assert!(how.contains("reported by rank 0"), "{e1}")
        }
        other => panic!("rank 1 should hear of rank 2's failure from rank 0, got {other}"),
    }
    assert!(waited < timeout * 9 / 10, "rank 1 waited {waited:?}: it did not hear of the failure");
}
