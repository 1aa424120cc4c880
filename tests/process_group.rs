//! `ProcessGroup` (c10d style): every collective through `Work` handles with reference
//! checks, ordering, `wait` timeouts, the watchdog, subgroups, dropping with pending work.
//! Ranks are threads, each joining through a TCP store as processes do.

use std::time::{Duration, Instant};

use jitccl::store::{Server, TcpStore};
use jitccl::{Config, DeviceBuffer, Element, Error, Op, ProcessGroup, Work};

const LONG: Duration = Duration::from_secs(60);

fn config(timeout: Duration) -> Config {
    Config { nchannels: Some(1), timeout: Some(timeout), ..Config::default() }
}

/// Runs `f(group)` for `n` ranks (threads), each joining through one store with `timeout`.
fn ranks<T: Send>(n: usize, timeout: Duration, f: impl Fn(ProcessGroup) -> T + Sync) -> Vec<T> {
    let server = Server::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr();
    std::thread::scope(|s| {
        let f = &f;
        let hs: Vec<_> = (0..n)
            .map(|r| {
                s.spawn(move || {
                    let store = TcpStore::connect(addr, Duration::from_secs(30)).unwrap();
                    let pg = ProcessGroup::with_config(&store, r, n, timeout, &config(timeout)).unwrap();
                    f(pg)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
    })
}

fn wait_all(works: &[Work]) {
    for w in works {
        w.wait(LONG).unwrap_or_else(|e| panic!("{w:?}: {e}"));
        assert!(w.is_completed() && w.is_success() && w.error().is_none(), "{w:?}");
    }
}

fn v<T: Element + From<i8>>(xs: impl IntoIterator<Item = i64>) -> Vec<T> {
    xs.into_iter().map(|x| T::from(x as i8)).collect()
}

/// Every collective queued at once on every rank, then checked against plain references.
/// Values stay small so that every dtype holds them exactly.
fn every_collective<T: Element + From<i8>>(n: usize) {
    let out = ranks(n, LONG, |pg| {
        let (r, d) = (pg.rank() as i64, pg.comm().device().clone());
        let buf = |xs: Vec<T>| d.alloc_from(&xs).unwrap();
        let ar = buf(v([r, 1, -r]));
        let bc = buf(v([r + 10, r]));
        let rd = buf(v([r, 2]));
        let ag_in = buf(v([r, -r]));
        let ag = d.alloc::<T>(2 * n).unwrap();
        let rs_in = buf(v((0..2 * n as i64).map(|i| i + r)));
        let rs = d.alloc::<T>(2).unwrap();
        let a2a_in = buf(v((0..n as i64).map(|q| 10 * r + q)));
        let a2a = d.alloc::<T>(n).unwrap();
        let p2p = buf(v([r, r]));
        let (next, prev) = ((pg.rank() + 1) % n, (pg.rank() + n - 1) % n);
        // Ring exchange in two halves so that no send waits on a receive queued behind it.
        let mut works = vec![
            pg.all_reduce(&ar, Op::Sum),
            pg.broadcast(&bc, n - 1),
            pg.reduce(&rd, Op::Max, 0),
            pg.all_gather(&ag, &ag_in),
            pg.reduce_scatter(&rs, &rs_in, Op::Sum),
            pg.all_to_all(&a2a, &a2a_in),
        ];
        let got = d.alloc::<T>(2).unwrap();
        if pg.rank() % 2 == 0 {
            works.push(pg.send(&p2p, next));
            works.push(pg.recv(&got, prev));
        } else {
            works.push(pg.recv(&got, prev));
            works.push(pg.send(&p2p, next));
        }
        works.push(pg.barrier());
        wait_all(&works);
        let seqs: Vec<u64> = works.iter().map(Work::seq).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "sequence numbers grow: {seqs:?}");
        [ar, bc, rd, ag, rs, a2a, got].map(|b: DeviceBuffer<T>| b.to_vec())
    });
    let ni = n as i64;
    let sum: i64 = (0..ni).sum();
    for (r, [ar, bc, rd, ag, rs, a2a, p2p]) in out.into_iter().enumerate() {
        let r = r as i64;
        assert_eq!(ar, v::<T>([sum, ni, -sum]), "rank {r}: all_reduce");
        assert_eq!(bc, v::<T>([ni - 1 + 10, ni - 1]), "rank {r}: broadcast");
        assert_eq!(rd, if r == 0 { v::<T>([ni - 1, 2]) } else { v::<T>([r, 2]) }, "rank {r}: reduce");
        assert_eq!(ag, v::<T>((0..ni).flat_map(|q| [q, -q])), "rank {r}: all_gather");
        assert_eq!(rs, v::<T>((2 * r..2 * r + 2).map(|i| ni * i + sum)), "rank {r}: reduce_scatter");
        assert_eq!(a2a, v::<T>((0..ni).map(|q| 10 * q + r)), "rank {r}: all_to_all");
        let prev = (r + ni - 1) % ni;
        assert_eq!(p2p, v::<T>([prev, prev]), "rank {r}: send/recv");
    }
}

#[test]
fn every_collective_2_ranks_f32() {
    every_collective::<f32>(2);
}

#[test]
fn every_collective_3_ranks_i64_and_4_ranks_i32() {
    every_collective::<i64>(3);
    every_collective::<i32>(4);
}

/// 36 operations queued at once (all_reduce, reduce to a moving root, broadcast from
/// another): the result depends on their order, which is checked against a sequential
/// reference, and each completes only after those before it.
#[test]
fn many_queued_works_complete_in_order() {
    let n = 3;
    let kinds = |i: usize| (i % 3, (i / 3) % n, (i / 3 + 1) % n);
    let out = ranks(n, LONG, |pg| {
        let b = pg.comm().device().alloc_from(&[pg.rank() as i64 + 1]).unwrap();
        let works: Vec<Work> = (0..36)
            .map(|i| match kinds(i) {
                (0, _, _) => pg.all_reduce(&b, Op::Sum),
                (1, root, _) => pg.reduce(&b, Op::Sum, root),
                (_, _, root) => pg.broadcast(&b, root),
            })
            .collect();
        works.last().unwrap().wait(LONG).unwrap();
        assert!(works.iter().all(Work::is_success), "every earlier work completed: {works:?}");
        wait_all(&works);
        b.to_vec()[0]
    });
    let mut vals: Vec<i64> = (1..=n as i64).collect();
    for i in 0..36 {
        let sum: i64 = vals.iter().sum();
        match kinds(i) {
            (0, _, _) => vals.iter_mut().for_each(|x| *x = sum),
            (1, root, _) => vals[root] = sum,
            (_, _, root) => vals = vec![vals[root]; n],
        }
    }
    assert_eq!(out, vals);
}

/// A peer that comes late: `wait` gives up with "still pending" and the buffer untouched;
/// the operation then completes with the right result.
#[test]
fn wait_times_out_without_a_wrong_result() {
    let out = ranks(2, LONG, |pg| {
        let b = pg.comm().device().alloc_from(&[pg.rank() as i32 + 5; 4]).unwrap();
        if pg.rank() == 1 {
            std::thread::sleep(Duration::from_millis(1500));
            return (pg.all_reduce(&b, Op::Sum).wait(LONG).map(|()| b.to_vec()).unwrap(), None);
        }
        let w = pg.all_reduce(&b, Op::Sum);
        let t0 = Instant::now();
        let e = w.wait(Duration::from_millis(300)).unwrap_err();
        let gave_up = t0.elapsed();
        assert!(matches!(&e, Error::Work { op, seq: 1, .. } if op == "all_reduce"), "{e}");
        assert!(e.to_string().contains("still pending"), "{e}");
        assert!(!w.is_completed() && !w.is_success() && w.error().is_none());
        assert_eq!(b.to_vec(), vec![5; 4], "no partial result before the peer came");
        w.wait(LONG).unwrap();
        (b.to_vec(), Some(gave_up))
    });
    assert_eq!(out[0].0, vec![11; 4]);
    assert_eq!(out[1].0, vec![11; 4]);
    let gave_up = out[0].1.unwrap();
    assert!(gave_up >= Duration::from_millis(300) && gave_up < Duration::from_millis(1200), "{gave_up:?}");
}
