//! Several roots: each serves its block, the ring still spans every rank, and ranks given
//! other ids fail with `IdsMismatch` (or a missing rank), never a hang.

use std::thread;
use std::time::{Duration, Instant};

use super::*;
use crate::bootstrap::scalable::Block;

/// What each rank and each root of a run ended with.
type Outcome<T> = (Vec<Result<T, BootstrapError>>, Vec<Result<RootReport, BootstrapError>>);

/// `nroots` roots and `nranks` rank threads; thread r gets `ids_of(r, &ids)`.
fn run_scalable<T: Send>(
    nranks: usize, nroots: usize, timeout: Duration, ids_of: impl Fn(usize, &[UniqueId]) -> Vec<UniqueId> + Sync,
    f: impl Fn(Bootstrap) -> T + Sync,
) -> Outcome<T> {
    log();
    let config = cfg(timeout);
    let roots: Vec<Root> = (0..nroots).map(|_| Root::start(&config).expect("start root")).collect();
    let ids: Vec<UniqueId> = roots.iter().map(Root::id).collect();
    let results = thread::scope(|s| {
        let hs: Vec<_> = (0..nranks)
            .map(|r| {
                let (f, ids, config) = (&f, ids_of(r, &ids), &config);
                thread::Builder::new()
                    .stack_size(256 << 10)
                    .spawn_scoped(s, move || {
                        let b = Bootstrap::init_scalable(&ids, r, nranks, config)?;
                        b.finish_init().map(|()| f(b))
                    })
                    .unwrap()
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
    });
    (results, roots.into_iter().map(Root::join).collect())
}

#[test]
fn every_root_serves_its_block_and_all_ranks_see_everyone() {
    for (nranks, nroots) in [(10, 3), (2, 2), (7, 1), (33, 33)] {
        let t0 = Instant::now();
        let (results, reports) = run_scalable(
            nranks,
            nroots,
            Duration::from_secs(20),
            |_, ids| ids.to_vec(),
            |b| {
                let got = b.all_gather(&(b.rank() as u32).to_le_bytes()).unwrap();
                assert!(got.iter().enumerate().all(|(p, g)| g == &(p as u32).to_le_bytes()));
                // Any-to-any across blocks: to the rank half the ring away.
                let (r, n) = (b.rank(), b.nranks());
                b.send((r + n / 2) % n, 5, &[r as u8]).unwrap();
                assert_eq!(b.recv((r + n - n / 2) % n, 5).unwrap(), [((r + n - n / 2) % n) as u8]);
                b.barrier().unwrap();
                (0..n).map(|p| b.peer_addr(p).unwrap()).collect::<Vec<_>>()
            },
        );
        let tables: Vec<_> = results.into_iter().map(|r| r.unwrap()).collect();
        assert!(tables.iter().all(|t| t == &tables[0]), "every rank has the same address table");
        for (k, rep) in reports.into_iter().enumerate() {
            let rep = rep.unwrap_or_else(|e| panic!("root {k}: {e}"));
            let block = Block::of_root(k, nranks, nroots);
            assert_eq!((rep.nranks, rep.first, rep.addrs.len()), (nranks, block.first, block.len), "root {k}");
            assert_eq!(rep.addrs[..], tables[0][block.first..block.first + block.len], "root {k}'s addresses");
        }
        eprintln!("{nranks} ranks on {nroots} roots: {:?}", t0.elapsed());
    }
}

#[test]
fn bad_id_lists_fail_at_once() {
    let config = cfg(Duration::from_secs(5));
    let a = UniqueId::random("127.0.0.1:9".parse().unwrap()).unwrap();
    let b = UniqueId::random("127.0.0.1:10".parse().unwrap()).unwrap();
    for (ids, n, want) in
        [(vec![], 4, "at least one"), (vec![a, b], 1, "at most one id per rank"), (vec![a, a], 4, "same root")]
    {
        let t0 = Instant::now();
        let e = Bootstrap::init_scalable(&ids, 0, n, &config).unwrap_err();
        assert!(matches!(e, BootstrapError::InvalidArgument(_)) && e.to_string().contains(want), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(1));
    }
}

/// Rank 1 is given the ids in the other order: the root it reaches sees hellos that
/// disagree and fails every rank that reached it with `IdsMismatch` (unless that root has
/// already served its block and gone: then rank 1 times out); the other root misses rank 1
/// and says so at its deadline, unless (on a loaded machine) a rank's ring accept gives up
/// on rank 1 first and says so. Every rank fails, some error names rank 1 or the
/// disagreement, and nobody hangs.
#[test]
fn ranks_with_other_ids_fail_naming_the_rank() {
    let t0 = Instant::now();
    let (results, _) = run_scalable(
        4,
        2,
        Duration::from_secs(4),
        |r, ids| if r == 1 { vec![ids[1], ids[0]] } else { ids.to_vec() },
        |_| (),
    );
    let errors: Vec<String> = results.into_iter().map(|r| r.unwrap_err().to_string()).collect();
    let named = |e: &String| {
        e.contains("(ids disagree)") || e.contains("rank(s) 1 of 4 never connected") || e.contains("waiting for rank 1")
    };
    assert!(errors.iter().any(named), "{errors:?}");
    assert!(t0.elapsed() < Duration::from_secs(12), "{:?}", t0.elapsed());
}
