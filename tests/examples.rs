//! The examples under `examples/`, run as tests: each is compiled into this test binary
//! (no `cargo run` per test) and its `run()` checked against the values it must give.

use std::time::Duration;

#[path = "../examples/split.rs"]
mod split;

#[path = "../examples/nonblocking_init.rs"]
mod nonblocking_init;

#[path = "../examples/group.rs"]
mod group;

#[path = "../examples/abort.rs"]
mod abort;

#[path = "../examples/log8_wire.rs"]
mod log8_wire;

#[test]
fn split_example_sums_each_half() {
    let out = split::run().unwrap();
    assert_eq!(out, vec![(0, 2, 2), (0, 2, 4), (1, 2, 2), (1, 2, 4)]);
}

#[test]
fn nonblocking_init_example_becomes_ready_and_reduces() {
    let out = nonblocking_init::run(3).unwrap();
    assert!(out.iter().all(|&(_, sum)| sum == 6.0), "{out:?}");
}

#[test]
fn group_example_exchanges_every_pair() {
    for n in [2, 4] {
        let out = group::run(n).unwrap();
        for (r, got) in out.iter().enumerate() {
            for (q, &v) in got.iter().enumerate().filter(|&(q, _)| q != r) {
                assert_eq!(v, (q * 1000 + r) as u32, "{n} ranks: rank {r} from {q}");
            }
        }
    }
}

#[test]
fn abort_example_ends_the_wait_within_1s() {
    let (e, after) = abort::run().unwrap();
    assert!(matches!(e, jitccl::Error::Aborted { rank: 0, .. }), "{e}");
    assert!(after < Duration::from_secs(1), "{after:?}");
}

#[test]
fn log8_wire_example_is_within_its_bound_and_alike_on_every_rank() {
    for n in [2, 4] {
        let outs = log8_wire::run(n, 1031).unwrap();
        assert_eq!(log8_wire::check(n, &outs), None, "{n} ranks");
    }
}
