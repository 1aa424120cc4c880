//! `Comm::init_rank_scalable`: several unique ids, each root serving a block of ranks
//! (NCCL's ncclCommInitRankScalable), at 256 ranks as threads; bad id lists.

use std::time::{Duration, Instant};

use jitccl::{Comm, Config, Error, Op, UniqueId};

/// One channel and the smallest FIFOs: 256 ranks' segments then hold ~110 MiB.
fn small() -> Config {
    Config {
        nchannels: Some(1),
        slot_bytes: Some([64, 32, 128]),
        timeout: Some(Duration::from_secs(120)),
        ..Config::default()
    }
}

/// This process's segment names in /dev/shm.
fn my_segments() -> Vec<String> {
    let prefix = format!("jitccl-{}-", std::process::id());
    std::fs::read_dir("/dev/shm")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

/// `n` ranks on `nroots` roots, one thread each: init, then an all_reduce (sum) of
/// `rank + i` over 5 elements and an all_gather of the ranks, both checked.
fn reduce_over_scalable_init(n: usize, nroots: usize) {
    // One at a time: the /dev/shm check below sees every segment of this process, and
    // another test's init holds its own until its peers have mapped them.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ids: Vec<UniqueId> = (0..nroots).map(|_| UniqueId::new().unwrap()).collect();
    let t0 = Instant::now();
    type PerRank = (Duration, (Vec<i32>, Vec<i32>));
    let out: Vec<PerRank> = std::thread::scope(|s| {
        let ids = &ids;
        let hs: Vec<_> = (0..n)
            .map(|r| {
                std::thread::Builder::new()
                    .stack_size(512 << 10)
                    .spawn_scoped(s, move || {
                        let c =
                            Comm::init_rank_scalable(ids, n, r, &small()).unwrap_or_else(|e| panic!("rank {r}: {e}"));
                        let took = t0.elapsed();
                        assert_eq!((c.rank(), c.nranks()), (r, n));
                        let st = c.device().stream().unwrap();
                        let sum =
                            c.device().alloc_from(&[r as i32, r as i32 + 1, r as i32 + 2, 7, -(r as i32)]).unwrap();
                        c.all_reduce(&sum, &sum, 5, Op::Sum, &st).unwrap();
                        let mine = c.device().alloc_from(&[r as i32]).unwrap();
                        let all = c.device().alloc::<i32>(n).unwrap();
                        c.all_gather(&mine, &all, 1, &st).unwrap();
                        st.synchronize().unwrap_or_else(|e| panic!("rank {r}: {e}"));
                        (took, (sum.to_vec(), all.to_vec()))
                    })
                    .unwrap()
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
    });
    let total = t0.elapsed();
    let s: i32 = (0..n as i32).sum();
    let want_sum = vec![s, s + n as i32, s + 2 * n as i32, 7 * n as i32, -s];
    let want_all: Vec<i32> = (0..n as i32).collect();
    let slowest = out.iter().map(|o| o.0).max().unwrap_or_default();
    for (r, (_, (sum, all))) in out.into_iter().enumerate() {
        assert_eq!(sum, want_sum, "rank {r}: all_reduce");
        assert_eq!(all, want_all, "rank {r}: all_gather");
    }
    eprintln!("{n} ranks on {nroots} roots: slowest init {slowest:?}, init + all_reduce + all_gather {total:?}");
    assert!(my_segments().is_empty(), "segments left in /dev/shm: {:?}", my_segments());
}

#[test]
fn scalable_init_256_ranks_on_8_roots() {
    reduce_over_scalable_init(256, 8);
}

#[test]
fn scalable_init_5_ranks_on_3_roots_and_one_root_each() {
    reduce_over_scalable_init(5, 3);
    reduce_over_scalable_init(3, 3);
}

#[test]
fn bad_id_lists_are_invalid_arguments() {
    let a = UniqueId::new().unwrap();
    let b = UniqueId::new().unwrap();
    for (ids, n) in [(vec![], 2), (vec![a, b], 1), (vec![a, a], 3)] {
        match Comm::init_rank_scalable(&ids, n, 0, &small()) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("id"), "{m}"),
            other => panic!("{} ids for {n} ranks: expected an invalid argument, got {other:?}", ids.len()),
        }
    }
}
