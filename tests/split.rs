//! Split, dup and finalize: thread ranks of one `init_all` (each rank splits from its own
//! thread, as an application would) and process-style ranks (`init_rank` from threads,
//! which bootstrap as processes do).

use std::time::Duration;

use jitccl::{Comm, Config, Error, Op, Split, UniqueId};

fn cfg() -> Config {
    Config { nchannels: Some(1), timeout: Some(Duration::from_secs(30)), ..Config::default() }
}

/// Runs `f(rank, comm)` on one thread per rank and returns the results by rank.
fn per_rank<T: Send>(comms: &[Comm], f: impl Fn(usize, &Comm) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let f = &f;
        let hs: Vec<_> = comms.iter().enumerate().map(|(r, c)| s.spawn(move || f(r, c))).collect();
        hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
    })
}

/// Runs `f(rank, comm)` for `n` ranks joined by `init_rank`, one thread each (they
/// bootstrap as processes do), and returns the results by rank.
fn process_ranks<T: Send>(n: usize, f: impl Fn(usize, Comm) -> T + Sync) -> Vec<T> {
    let id = UniqueId::new().unwrap();
    std::thread::scope(|s| {
        let (id, f) = (&id, &f);
        let hs: Vec<_> = (0..n).map(|r| s.spawn(move || f(r, Comm::init_rank(id, n, r, &cfg()).unwrap()))).collect();
        hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
    })
}

/// An all_reduce (sum) of `value` over `comm`, on a stream of its own.
fn sum(comm: &Comm, value: i64) -> Result<Vec<i64>, Error> {
    let s = comm.device().stream()?;
    let b = comm.device().alloc_from(&[value; 17])?;
    comm.all_reduce(&b, &b, 17, Op::Sum, &s)?;
    s.synchronize()?;
    Ok(b.to_vec())
}

#[test]
fn odd_even_children_are_ordered_by_key_and_reduce_concurrently() {
    let comms = Comm::init_all(6, &cfg()).unwrap();
    let out = per_rank(&comms, |r, c| {
        let child = c.split((r % 2) as u32, r as i64).unwrap().expect("a color was given");
        // Both children reduce at once, each from its ranks' threads.
        let got = sum(&child, r as i64).unwrap();
        // A child splits in turn: its rank 0 alone, the others together.
        let grand = child.split((child.rank() > 0) as u32, 0).unwrap().unwrap();
        (child.rank(), child.nranks(), got, grand.nranks())
    });
    for (r, (crank, n, got, grand)) in out.into_iter().enumerate() {
        assert_eq!((crank, n), (r / 2, 3), "parent rank {r}");
        assert_eq!(grand, if crank == 0 { 1 } else { 2 }, "parent rank {r}");
        let expect: i64 = (0..6i64).filter(|q| q % 2 == (r % 2) as i64).sum();
        assert_eq!(got, vec![expect; 17], "parent rank {r}");
    }
}

#[test]
fn reversed_keys_reverse_the_order_and_nocolor_joins_none() {
    let comms = Comm::init_all(6, &cfg()).unwrap();
    let out = per_rank(&comms, |r, c| {
        let rev = c.split(7, -(r as i64)).unwrap().unwrap();
        // Ranks 1 and 4 sit out; the others form one child ordered by parent rank.
        let color = if r == 1 || r == 4 { Split::NoColor } else { Split::Color(3) };
        let some = c.split(color, 0).unwrap();
        let some = some.map(|k| {
            let got = sum(&k, 1 << r).unwrap();
            (k.rank(), k.nranks(), got[0])
        });
        (rev.rank(), rev.nranks(), some)
    });
    let members = [0usize, 2, 3, 5];
    let expect: i64 = members.iter().map(|q| 1i64 << q).sum();
    for (r, (rev_rank, rev_n, some)) in out.into_iter().enumerate() {
        assert_eq!((rev_rank, rev_n), (5 - r, 6));
        match members.iter().position(|&q| q == r) {
            Some(i) => assert_eq!(some, Some((i, 4, expect)), "parent rank {r}"),
            None => assert_eq!(some, None, "parent rank {r}"),
        }
    }
}

#[test]
fn dup_works_independently_of_its_parent() {
    let comms = Comm::init_all(4, &cfg()).unwrap();
    let dups = per_rank(&comms, |r, c| {
        let d = c.dup().unwrap();
        assert_eq!((d.rank(), d.nranks()), (r, 4));
        let s = c.device().stream().unwrap();
        let (a, b) = (c.device().alloc_from(&[r as i32; 9]).unwrap(), c.device().alloc_from(&[10; 9]).unwrap());
        // Interleaved on one stream: parent, dup, parent, dup.
        for _ in 0..2 {
            c.all_reduce(&a, &a, 9, Op::Sum, &s).unwrap();
            d.all_reduce(&b, &b, 9, Op::Max, &s).unwrap();
        }
        s.synchronize().unwrap();
        assert_eq!(a.to_vec(), vec![4 * 6; 9]);
        assert_eq!(b.to_vec(), vec![10; 9]);
        d
    });
    // The dups outlive an abort of their parent.
    comms.iter().for_each(Comm::abort);
    let sums = per_rank(&dups, |_, d| sum(d, 1).unwrap());
    assert_eq!(sums, vec![vec![4; 17]; 4]);
}

#[test]
fn split_of_an_aborted_parent_fails_on_every_rank_without_hanging() {
    let comms = Comm::init_all(3, &cfg()).unwrap();
    comms[2].abort();
    let started = std::time::Instant::now();
    let out = per_rank(&comms, |_, c| c.split(0, 0).map(|k| k.is_some()));
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    for (r, res) in out.into_iter().enumerate() {
        let e = res.expect_err("the parent was aborted");
        assert!(e.to_string().contains("aborted"), "rank {r}: {e}");
    }
}

#[test]
fn a_rank_that_never_splits_fails_the_others_by_the_timeout() {
    let config = Config { timeout: Some(Duration::from_millis(500)), ..cfg() };
    let comms = Comm::init_all(3, &config).unwrap();
    let out = per_rank(&comms[..2], |_, c| c.split(0, 0).map(|k| k.is_some()));
    for (r, res) in out.into_iter().enumerate() {
        let e = res.expect_err("rank 2 never splits");
        assert!(matches!(&e, Error::InvalidUsage(m) if m.contains("[2]")), "rank {r}: {e}");
    }
}

#[test]
fn children_inherit_the_name() {
    let config = Config { comm_name: Some("world".into()), ..cfg() };
    let comms = Comm::init_all(2, &config).unwrap();
    let dups = per_rank(&comms, |_, c| c.dup().unwrap());
    assert_eq!(dups[1].name(), Some("world"));
    assert_eq!(format!("{:?}", dups[1]), "Comm 'world' (rank 1 of 2)");
}

#[test]
fn finalize_completes_queued_work_then_refuses_calls() {
    let comms = Comm::init_all(3, &cfg()).unwrap();
    per_rank(&comms, |r, c| {
        let s = c.device().stream().unwrap();
        let b = c.device().alloc_from(&[r as f32 + 1.0; 4099]).unwrap();
        for _ in 0..3 {
            c.all_reduce(&b, &b, 4099, Op::Sum, &s).unwrap();
        }
        c.finalize().unwrap();
        assert!(c.is_finalized());
        // Finalize waited for the queued work (read before any synchronize): 6, 18, 54.
        assert_eq!(b.to_vec(), vec![54.0; 4099]);
        for e in [c.all_reduce(&b, &b, 1, Op::Sum, &s).unwrap_err(), c.dup().unwrap_err()] {
            assert!(matches!(&e, Error::InvalidUsage(m) if m.contains("finalized")), "rank {r}: {e}");
        }
        s.synchronize().unwrap();
    });
}

#[test]
fn process_ranks_split_over_their_bootstrap() {
    let out = process_ranks(4, |r, c| {
        // Colors 0 (ranks 0, 2) and 1 (ranks 1, 3), keys reversed.
        let k = c.split((r % 2) as u32, -(r as i64)).unwrap().unwrap();
        let got = sum(&k, r as i64 + 1).unwrap();
        let none = c.split(Split::NoColor, 0).unwrap();
        let d = c.dup().unwrap();
        let all = sum(&d, 1).unwrap();
        (k.rank(), k.nranks(), got[0], none.is_none(), d.rank(), all[0])
    });
    for (r, (krank, kn, got, none, drank, all)) in out.into_iter().enumerate() {
        let expect = if r % 2 == 0 { 1 + 3 } else { 2 + 4 };
        assert_eq!((krank, kn, got), (1 - r / 2, 2, expect), "rank {r}");
        assert!(none, "rank {r}");
        assert_eq!((drank, all), (r, 4), "rank {r}");
    }
}

#[test]
fn a_finalized_process_rank_fails_every_rank_split() {
    let out = process_ranks(3, |r, c| {
        if r == 1 {
            c.finalize().unwrap();
        }
        c.split(0, 0).map(|k| k.is_some())
    });
    for (r, res) in out.into_iter().enumerate() {
        let e = res.expect_err("rank 1 was finalized");
        let want = if r == 1 { "finalized" } else { "rank 1 of the parent cannot split" };
        assert!(matches!(&e, Error::InvalidUsage(m) if m.contains(want)), "rank {r}: {e}");
    }
}

/// split_with: the child takes what the given configuration sets and inherits the rest; a
/// tuning table it names is read (a missing one fails every member's split, naming the
/// file, and leaves the parent working); a device, or members that give their child
/// different configurations, are refused.
#[test]
fn split_with_gives_the_child_its_own_configuration() {
    let comms = Comm::init_all(2, &Config { comm_name: Some("world".into()), ..cfg() }).unwrap();
    let out = per_rank(&comms, |r, c| {
        let named = Config { comm_name: Some("kid".into()), nchannels: Some(2), ..Config::default() };
        let kid = c.split_with(0, r as i64, &named).unwrap().expect("a color was given");
        let missing = Config { tuner_table: Some("/nonexistent/jitccl-table.csv".into()), ..Config::default() };
        let no_table = c.split_with(0, r as i64, &missing).map(|_| ()).unwrap_err();
        let on_device = Config { device: Some(c.device().clone()), ..Config::default() };
        let refused = c.split_with(0, r as i64, &on_device).map(|_| ()).unwrap_err();
        let odd = Config { nchannels: Some(1 + r), ..Config::default() };
        let disagree = c.split_with(0, r as i64, &odd).map(|_| ()).unwrap_err();
        (format!("{kid:?}"), sum(&kid, r as i64 + 1).unwrap(), no_table, refused, disagree, sum(c, 1).unwrap())
    });
    for (r, (kid, got, no_table, refused, disagree, parent)) in out.into_iter().enumerate() {
        assert_eq!(kid, format!("Comm 'kid' (rank {r} of 2)"));
        assert_eq!(got, vec![3; 17], "rank {r}");
        let invalid = |e: &Error, what: &str| matches!(e, Error::InvalidArgument(m) if m.contains(what));
        assert!(invalid(&no_table, "Config::tuner_table=/nonexistent/jitccl-table.csv"), "rank {r}: {no_table}");
        assert!(invalid(&refused, "names a device"), "rank {r}: {refused}");
        let differ =
            "different configurations: Config.nchannels (JITCCL_NCHANNELS) is 1 on rank(s) [0], 2 on rank(s) [1]";
        assert!(matches!(&disagree, Error::InvalidUsage(m) if m.contains(differ)), "rank {r}: {disagree}");
        assert_eq!(parent, vec![2; 17], "rank {r}");
    }
}
