//! Ranks that call a collective differently (another count, datatype or op, or a
//! receive of another size than the send) get an error naming the rank that called it
//! differently, never a success with wrong data: every FIFO protocol carries the call's
//! identity with its steps and the receiver compares it with its own.

use std::time::Duration;

use jitccl::{Algorithm, Comm, Config, Error, Op, Protocol, Stream};

/// How a rank calls: its count, whether it passes i32 instead of f32, its op.
#[derive(Clone, Copy)]
struct Call {
    count: usize,
    int: bool,
    op: Op,
}

const SAME: Call = Call { count: 3000, int: false, op: Op::Sum };

fn config(algo: Algorithm, proto: Protocol, slot_bytes: Option<usize>) -> Config {
    Config {
        algo: Some(algo),
        proto: Some(proto),
        nchannels: Some(1),
        slot_bytes: slot_bytes.map(|b| [b; 3]),
        timeout: Some(Duration::from_secs(5)),
        ..Config::default()
    }
}

fn run_one<T: jitccl::Element + From<i8>>(c: &Comm, coll: &str, call: Call, st: &Stream) -> jitccl::Result<()> {
    let n = call.count;
    let send = c.device().alloc_from(&vec![T::from(1); n * c.nranks()])?;
    let recv = c.device().alloc_from(&vec![T::from(0); n * c.nranks()])?;
    match coll {
        "all_reduce" => c.all_reduce(&send, &recv, n, call.op, st)?,
        "all_gather" => c.all_gather(&send, &recv, n, st)?,
        "reduce_scatter" => c.reduce_scatter(&send, &recv, n, call.op, st)?,
        "broadcast" => c.broadcast(&send, &recv, n, 0, st)?,
        "reduce" => c.reduce(&send, &recv, n, call.op, 0, st)?,
        // Rank 1 receives `n` where rank 0 sends SAME's count; the other way they agree.
        "sendrecv" => {
            let peer = 1 - c.rank();
            let (to_peer, from_peer) = if c.rank() == 0 { (SAME.count, SAME.count) } else { (SAME.count, n) };
            c.sendrecv(&send, to_peer, peer, &recv, from_peer, peer, st)?
        }
        other => unreachable!("{other}"),
    }
    st.synchronize()
}

/// The rank that only sends in `coll` at two ranks with root 0 (and in the test's
/// sendrecv, whose send from rank 1 matches): what it sent is all its call does, so it may
/// return success.
fn only_sends(coll: &str) -> Option<usize> {
    match coll {
        "broadcast" | "sendrecv" => Some(0),
        "reduce" => Some(1),
        _ => None,
    }
}

/// Runs `coll` on two ranks, rank 0 calling as `SAME` and rank 1 as `other`, and checks
/// that every rank that receives fails, and at least one names the other rank as the one
/// that called it differently.
fn both_fail(what: &str, config: &Config, coll: &str, other: Call) {
    let comms = Comm::init_all(2, config).unwrap();
    let results: Vec<jitccl::Result<()>> = std::thread::scope(|s| {
        let runs: Vec<_> = comms
            .iter()
            .map(|c| {
                s.spawn(move || {
                    let call = if c.rank() == 0 { SAME } else { other };
                    let st = c.device().stream()?;
                    if call.int {
                        run_one::<i32>(c, coll, call, &st)
                    } else {
                        run_one::<f32>(c, coll, call, &st)
                    }
                })
            })
            .collect();
        runs.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let mut named = 0;
    for (r, res) in results.iter().enumerate() {
        match res {
            Err(Error::InvalidUsage(m)) => {
                assert!(m.contains(&format!("rank {}", 1 - r)) && m.contains("called it differently"), "{what}: {m}");
                named += 1;
            }
            // It only sent to the rank that noticed, or waited for it.
            Err(Error::PeerFailed { culprit, .. }) if *culprit == 1 - r => {}
            Ok(()) if only_sends(coll) == Some(r) => {}
            other => panic!("{what}, rank {r}: expected an error, got {other:?}"),
        }
    }
    assert!(named > 0, "{what}: no rank said the call differed");
}

/// Different counts, with every protocol and FIFO algorithm.
#[test]
fn counts_that_differ_fail_with_every_protocol() {
    for proto in [Protocol::Simple, Protocol::LL, Protocol::LL128] {
        for (algo, coll) in [
            (Algorithm::Ring, "all_reduce"),
            (Algorithm::Tree, "all_reduce"),
            (Algorithm::OneShot, "all_reduce"),
            (Algorithm::RecursiveDoubling, "all_reduce"),
            (Algorithm::Ring, "all_gather"),
            (Algorithm::Ring, "reduce_scatter"),
            (Algorithm::Ring, "broadcast"),
            (Algorithm::Ring, "reduce"),
        ] {
            for count in [SAME.count + 64, SAME.count - 2, 1] {
                let what = format!("{coll} {algo} {proto} count {count}");
                both_fail(&what, &config(algo, proto, None), coll, Call { count, ..SAME });
            }
        }
    }
}

/// Counts whose steps all have the same size: with 1 KiB slots, 3000 and 6000 floats move
/// in steps of 256 elements on either rank, so only the call's count can tell them apart.
#[test]
fn counts_with_steps_of_one_size_fail() {
    for proto in [Protocol::Simple, Protocol::LL, Protocol::LL128] {
        for coll in ["all_reduce", "all_gather", "broadcast"] {
            let what = format!("{coll} {proto} in steps of one size");
            both_fail(&what, &config(Algorithm::Ring, proto, Some(1024)), coll, Call { count: 2 * SAME.count, ..SAME });
        }
    }
}

/// The same count with another datatype or op.
#[test]
fn datatypes_and_ops_that_differ_fail() {
    for proto in [Protocol::Simple, Protocol::LL, Protocol::LL128] {
        let c = config(Algorithm::Ring, proto, None);
        both_fail(&format!("all_reduce {proto} i32 against f32"), &c, "all_reduce", Call { int: true, ..SAME });
        both_fail(&format!("all_reduce {proto} max against sum"), &c, "all_reduce", Call { op: Op::Max, ..SAME });
    }
}

/// A receive of another size than the matching send.
#[test]
fn receives_of_another_size_fail() {
    for proto in [Protocol::Simple, Protocol::LL, Protocol::LL128] {
        for count in [SAME.count + 1, SAME.count - 1] {
            let what = format!("sendrecv {proto} {count} against {}", SAME.count);
            both_fail(&what, &config(Algorithm::Ring, proto, None), "sendrecv", Call { count, ..SAME });
        }
    }
}
