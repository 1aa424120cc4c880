//! Groups: sends and receives posted in any order inside a group never deadlock, even when
//! each exceeds the FIFO; an error inside a group comes back from its end, launches nothing
//! and leaves the communicators usable; groups nest; collectives and transfers mix; a group's
//! send and receive complete beside a peer that posts them as separate calls; a receive that
//! lands on the group's own send buffer (a shift in place) never overwrites unsent data.

#[path = "common/world.rs"]
mod world;

use std::time::Duration;

use jitccl::{group, group_end, group_start, Algorithm, Comm, Config, Device, DeviceBuffer, Error, Op, UniqueId};

/// Tiny FIFOs (8 slots of 256 B for Simple): every message below is many FIFOs long, so a
/// send that were launched alone before its partner's receive would wait forever.
fn cfg() -> Config {
    Config {
        nchannels: Some(1),
        timeout: Some(Duration::from_secs(30)),
        slot_bytes: Some([256, 64, 256]),
        ..Config::default()
    }
}

const N: usize = 20_000;

/// What rank `from` sends to rank `to`: distinct per pair and element.
fn payload(from: usize, to: usize) -> Vec<i32> {
    (0..N).map(|i| (from * 1000 + to * 100) as i32 + i as i32 * 7).collect()
}

fn per_rank<T: Send>(comms: &[Comm], f: impl Fn(usize, &Comm) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let f = &f;
        let hs: Vec<_> = comms.iter().enumerate().map(|(r, c)| s.spawn(move || f(r, c))).collect();
        hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
    })
}

/// Every rank sends to and receives from every other rank inside one group; `order`
/// decides, per rank, whether it posts its sends before its receives and in which peer
/// order.
fn exchange(n: usize, sends_first: impl Fn(usize) -> bool + Sync, reversed: impl Fn(usize) -> bool + Sync) {
    let comms = Comm::init_all(n, &cfg()).unwrap();
    let got = per_rank(&comms, |r, c| {
        let s = c.device().stream().unwrap();
        let send: Vec<DeviceBuffer<i32>> = (0..n).map(|q| c.device().alloc_from(&payload(r, q)).unwrap()).collect();
        let recv: Vec<DeviceBuffer<i32>> = (0..n).map(|_| c.device().alloc::<i32>(N).unwrap()).collect();
        let mut peers: Vec<usize> = (0..n).filter(|&q| q != r).collect();
        if reversed(r) {
            peers.reverse();
        }
        group(|| {
            let post_sends = || peers.iter().try_for_each(|&q| c.send(&send[q], N, q, &s));
            let post_recvs = || peers.iter().try_for_each(|&q| c.recv(&recv[q], N, q, &s));
            if sends_first(r) {
                post_sends()?;
                post_recvs()
            } else {
                post_recvs()?;
                post_sends()
            }
        })
        .unwrap();
        s.synchronize().unwrap();
        recv.iter().map(|b| b.to_vec()).collect::<Vec<_>>()
    });
    for (r, bufs) in got.iter().enumerate() {
        for (q, b) in bufs.iter().enumerate().filter(|&(q, _)| q != r) {
            assert!(b == &payload(q, r), "{n} ranks: rank {r} got the wrong data from rank {q}");
        }
    }
}

#[test]
fn two_ranks_both_sending_first_do_not_deadlock() {
    exchange(2, |_| true, |_| false);
}

#[test]
fn three_and_four_ranks_in_mixed_orders_do_not_deadlock() {
    exchange(3, |r| r % 2 == 0, |r| r == 1);
    exchange(4, |r| r != 2, |r| r >= 2);
}

/// Rank 0 sends and receives in one group; rank 1 posts the same two transfers as separate
/// calls, its receive first or its send first. Each message is many FIFOs long, so a group
/// that moved its two directions in lockstep would wait for rank 1 forever (rank 1 takes no
/// step of the other direction before its first call ends); NCCL completes it.
fn grouped_beside_separate_calls(comms: &[Comm], peer_sends_first: bool) {
    let got = per_rank(comms, |r, c| {
        let s = c.device().stream().unwrap();
        let q = 1 - r;
        let send = c.device().alloc_from(&payload(r, q)).unwrap();
        let recv = c.device().alloc::<i32>(N).unwrap();
        if r == 0 {
            group(|| {
                c.send(&send, N, q, &s)?;
                c.recv(&recv, N, q, &s)
            })
            .unwrap();
        } else if peer_sends_first {
            c.send(&send, N, q, &s).unwrap();
            c.recv(&recv, N, q, &s).unwrap();
        } else {
            c.recv(&recv, N, q, &s).unwrap();
            c.send(&send, N, q, &s).unwrap();
        }
        s.synchronize().map(|()| recv.to_vec())
    });
    for (r, b) in got.into_iter().enumerate() {
        let b = b.unwrap_or_else(|e| panic!("peer sends first: {peer_sends_first}: rank {r}: {e}"));
        assert!(b == payload(1 - r, r), "peer sends first: {peer_sends_first}: rank {r} got the wrong data");
    }
}

#[test]
fn a_group_completes_beside_a_peer_that_posts_its_transfers_as_separate_calls() {
    let comms = Comm::init_all(2, &cfg()).unwrap();
    grouped_beside_separate_calls(&comms, false);
    grouped_beside_separate_calls(&comms, true);
}

/// The same over the network transport (each rank its own proxy and sockets), in a child
/// process where `JITCCL_TRANSPORT=net` is set, so that no other test here reads it.
#[test]
fn a_group_completes_beside_a_peer_that_posts_its_transfers_as_separate_calls_over_the_network() {
    let name = "a_group_completes_beside_a_peer_that_posts_its_transfers_as_separate_calls_over_the_network";
    jitccl_plugins::in_child(module_path!(), name, &[("JITCCL_TRANSPORT", Some("net"))], || {
        let id = UniqueId::new().unwrap();
        let comms: Vec<Comm> = std::thread::scope(|s| {
            let id = &id;
            let hs: Vec<_> = (0..2).map(|r| s.spawn(move || Comm::init_rank(id, 2, r, &cfg()))).collect();
            hs.into_iter().map(|h| h.join().unwrap().expect("init over the network")).collect()
        });
        grouped_beside_separate_calls(&comms, false);
        grouped_beside_separate_calls(&comms, true);
    });
}

/// Over the network, steps of 8 KiB and more leave from and land in the callers' buffers:
/// a group's large transfers along a ring of 3 ranks (2 channels, several steps each), where
/// rank 0 shifts its buffer in place (a receive landing on what it sends, which must go
/// from a copy, also where another channel sends it) beside ranks 1 and 2 (one batch each),
/// and every rank gets what was sent, in rounds queued back to back (a channel's receive
/// overwrote another's unsent part in some of them; `world::shift_in_place_rounds`).
#[test]
fn large_transfers_over_the_network_including_a_shift_in_place_arrive_whole() {
    let name = "large_transfers_over_the_network_including_a_shift_in_place_arrive_whole";
    jitccl_plugins::in_child(module_path!(), name, &[("JITCCL_TRANSPORT", Some("net"))], || {
        let id = UniqueId::new().unwrap();
        let config = Config { nchannels: Some(2), timeout: Some(Duration::from_secs(60)), ..Config::default() };
        let comms: Vec<Comm> = std::thread::scope(|s| {
            let (id, config) = (&id, &config);
            let hs: Vec<_> = (0..3).map(|r| s.spawn(move || Comm::init_rank(id, 3, r, config))).collect();
            hs.into_iter().map(|h| h.join().unwrap().expect("init over the network")).collect()
        });
        world::shift_in_place_rounds(&comms);
    });
}

/// The same between ranks that share memory, over 4 channels, 8 rounds queued back to back:
/// where each channel waited for its own sends only, a receive overwrote another channel's
/// unsent part in every run.
#[test]
fn a_shift_in_place_over_several_channels_sends_what_was_there() {
    world::shift_in_place(&Device::host(0));
}

/// Over the FIFOs (the ring's algorithm, 2 channels of tiny slots), a group's transfers run
/// as one batch launch, or as rounds where a receive lands on a send of the group: rank 0
/// shifts its buffer in place (rounds) beside ranks 1 and 2 (a batch each). Every rank also
/// sends a second, smaller block along the ring, which pairs in posted order, and a block
/// to itself.
#[test]
fn a_batch_over_the_fifos_pairs_with_a_peer_in_rounds() {
    let cfg = Config { algo: Some(Algorithm::Ring), nchannels: Some(2), ..cfg() };
    let comms = Comm::init_all(3, &cfg).unwrap();
    let out = per_rank(&comms, |r, c| {
        let s = c.device().stream().unwrap();
        let (next, prev) = ((r + 1) % 3, (r + 2) % 3);
        let big = c.device().alloc_from(&payload(r, next)).unwrap();
        let got = if r == 0 { big.clone() } else { c.device().alloc::<i32>(N).unwrap() };
        let small = c.device().alloc_from(&[r as f32 + 0.5; 3]).unwrap();
        let small_got = c.device().alloc::<f32>(3).unwrap();
        let own = c.device().alloc_from(&[r as i64 * 7 - 1; 5]).unwrap();
        let own_got = c.device().alloc::<i64>(5).unwrap();
        group(|| {
            c.send(&big, N, next, &s)?;
            c.send(&small, 3, next, &s)?;
            c.recv(&own_got, 5, r, &s)?;
            c.recv(&got, N, prev, &s)?;
            c.recv(&small_got, 3, prev, &s)?;
            c.send(&own, 5, r, &s)
        })
        .unwrap();
        s.synchronize().unwrap();
        (got.to_vec(), small_got.to_vec(), own_got.to_vec())
    });
    for (r, (got, small, own)) in out.into_iter().enumerate() {
        let prev = (r + 2) % 3;
        assert!(got == payload(prev, r), "rank {r}: wrong data from rank {prev}");
        assert_eq!(small, vec![prev as f32 + 0.5; 3], "rank {r}");
        assert_eq!(own, vec![r as i64 * 7 - 1; 5], "rank {r}");
    }
}

#[test]
fn several_transfers_to_one_peer_pair_in_posted_order_and_mix_with_collectives() {
    let comms = Comm::init_all(2, &cfg()).unwrap();
    let out = per_rank(&comms, |r, c| {
        let s = c.device().stream().unwrap();
        let peer = 1 - r;
        let a = c.device().alloc_from(&vec![r as i64 * 10 + 1; N]).unwrap();
        let b = c.device().alloc_from(&[r as f32 + 0.5; 3]).unwrap();
        let (ra, rb) = (c.device().alloc::<i64>(N).unwrap(), c.device().alloc::<f32>(3).unwrap());
        let sum = c.device().alloc_from(&[r as i32 + 1; 5]).unwrap();
        group_start();
        // Nested: the inner end launches nothing.
        group_start();
        c.send(&a, N, peer, &s).unwrap();
        group_end().unwrap();
        c.all_reduce(&sum, &sum, 5, Op::Sum, &s).unwrap();
        c.send(&b, 3, peer, &s).unwrap();
        // Receives posted in the other order on rank 1: pairs still match by posting order
        // per peer and direction.
        c.recv(&ra, N, peer, &s).unwrap();
        c.recv(&rb, 3, peer, &s).unwrap();
        group_end().unwrap();
        s.synchronize().unwrap();
        (ra.to_vec(), rb.to_vec(), sum.to_vec())
    });
    for (r, (ra, rb, sum)) in out.into_iter().enumerate() {
        let peer = 1 - r;
        assert_eq!(ra, vec![peer as i64 * 10 + 1; N]);
        assert_eq!(rb, vec![peer as f32 + 0.5; 3]);
        assert_eq!(sum, vec![3; 5]);
    }
}

#[test]
fn a_bad_argument_fails_the_group_launches_nothing_and_leaves_the_comm_usable() {
    let comms = Comm::init_all(2, &cfg()).unwrap();
    let out = per_rank(&comms, |r, c| {
        let s = c.device().stream().unwrap();
        let buf = c.device().alloc_from(&[r as i32; 8]).unwrap();
        let small = c.device().alloc::<i32>(2).unwrap();
        let e = group(|| {
            c.send(&buf, 8, 1 - r, &s)?;
            // Too small: the call fails, and so does the group.
            c.recv(&small, 8, 1 - r, &s)
        })
        .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        // The error stays the group's even when the caller ignores the call's result.
        group_start();
        let _ = c.all_reduce(&buf, &buf, 8, Op::Sum, &s);
        let _ = c.all_reduce(&buf, &buf, 100, Op::Sum, &s);
        let e2 = group_end().unwrap_err();
        assert!(matches!(e2, Error::InvalidArgument(_)), "{e2}");
        s.synchronize().unwrap();
        assert_eq!(buf.to_vec(), vec![r as i32; 8], "nothing of the failed groups ran");
        assert!(c.async_error().is_ok());
        // Usable: a good group runs.
        let got = c.device().alloc::<i32>(8).unwrap();
        group(|| {
            c.send(&buf, 8, 1 - r, &s)?;
            c.recv(&got, 8, 1 - r, &s)
        })
        .unwrap();
        s.synchronize().unwrap();
        got.to_vec()
    });
    assert_eq!(out, vec![vec![1; 8], vec![0; 8]]);
}

#[test]
fn group_end_without_start_and_two_streams_are_refused() {
    assert!(matches!(group_end(), Err(Error::InvalidUsage(_))));
    let comms = Comm::init_all(1, &cfg()).unwrap();
    let c = &comms[0];
    let (s1, s2) = (c.device().stream().unwrap(), c.device().stream().unwrap());
    let b = c.device().alloc_from(&[1i32; 4]).unwrap();
    let e = group(|| {
        c.all_reduce(&b, &b, 4, Op::Sum, &s1)?;
        c.all_reduce(&b, &b, 4, Op::Sum, &s2)
    })
    .unwrap_err();
    assert!(e.to_string().contains("one stream per communicator"), "{e}");
    // A single thread drives both ranks of a communicator, as with several GPUs per thread.
    let comms = Comm::init_all(2, &cfg()).unwrap();
    let streams: Vec<_> = comms.iter().map(|c| c.device().stream().unwrap()).collect();
    let bufs: Vec<_> = (0..2).map(|r| comms[r].device().alloc_from(&[r as u8 + 1; 300]).unwrap()).collect();
    group(|| (0..2).try_for_each(|r| comms[r].all_reduce(&bufs[r], &bufs[r], 300, Op::Sum, &streams[r]))).unwrap();
    streams.iter().for_each(|s| s.synchronize().unwrap());
    assert!(bufs.iter().all(|b| b.to_vec() == vec![3u8; 300]));
}

#[test]
fn depth_launched_streams_and_the_simulated_end_are_told_to_bindings() {
    use jitccl::{group_depth, group_discard, group_end_launched, group_simulate_end};
    let comms = Comm::init_all(1, &cfg()).unwrap();
    let c = &comms[0];
    let s = c.device().stream().unwrap();
    let b = c.device().alloc_from(&[1i32; 1 << 18]).unwrap();
    assert_eq!(group_depth(), 0);
    // Simulated: the model's time of the collective, transfers count nothing, nothing runs.
    group_start();
    group_start();
    assert_eq!(group_depth(), 2);
    c.all_reduce(&b, &b, 1 << 18, Op::Sum, &s).unwrap();
    assert_eq!(group_simulate_end().unwrap(), None, "an inner group has no estimate");
    let with_reduce = group_simulate_end().unwrap().expect("the outermost's estimate");
    assert!(with_reduce > 0.0 && with_reduce.is_finite(), "{with_reduce}");
    assert_eq!(group_depth(), 0);
    group_start();
    c.send(&b, 4, 0, &s).unwrap();
    c.recv(&b, 4, 0, &s).unwrap();
    assert_eq!(group_simulate_end().unwrap(), Some(0.0), "point to point counts nothing");
    s.synchronize().unwrap();
    assert_eq!(b.to_vec(), vec![1i32; 1 << 18], "a simulated group runs nothing");
    assert!(matches!(group_simulate_end(), Err(Error::InvalidUsage(_))));
    // Ended: each communicator once, with the stream its calls went to.
    group_start();
    c.all_reduce(&b, &b, 4, Op::Sum, &s).unwrap();
    c.all_reduce(&b, &b, 4, Op::Sum, &s).unwrap();
    let launched = group_end_launched().unwrap();
    assert_eq!(launched.len(), 1);
    assert!(launched[0].1.same(&s));
    s.synchronize().unwrap();
    assert_eq!(b.to_vec()[..4], [1i32; 4], "one rank's sums");
    group_start();
    assert!(group_discard().is_ok());
    assert_eq!(group_depth(), 0);
}
