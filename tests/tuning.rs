//! Tuning through the public API: overrides in NCCL's grammar (typed and from
//! JITCCL_ALGO), and tables from JITCCL_TUNER_CONFIG_FILE. One test: the variables are
//! process-wide, and each scenario must see only its own.

use jitccl::tune::{Row, Table};
use jitccl::{Algorithm, Collective, Comm, Config, Error, Op, Protocol, Wire};

fn world(n: usize, cfg: &Config) -> jitccl::Result<Vec<(Comm, jitccl::Stream)>> {
    Comm::init_all(n, cfg)?
        .into_iter()
        .map(|c| {
            let s = c.device().stream()?;
            Ok((c, s))
        })
        .collect()
}

/// AllReduce of rank+1 over every rank; the sum, or the first rank's error.
fn all_reduce(w: &[(Comm, jitccl::Stream)], count: usize) -> jitccl::Result<Vec<f32>> {
    let bufs: Vec<_> = w
        .iter()
        .enumerate()
        .map(|(r, (c, _))| c.device().alloc_from(&vec![r as f32 + 1.0; count]))
        .collect::<Result<_, _>>()?;
    for ((c, s), b) in w.iter().zip(&bufs) {
        c.all_reduce(b, b, count, Op::Sum, s)?;
    }
    for (_, s) in w {
        s.synchronize()?;
    }
    Ok(bufs[0].to_vec())
}

fn expect_invalid<T: std::fmt::Debug>(r: jitccl::Result<T>, parts: &[&str]) {
    match r {
        Err(Error::InvalidArgument(m)) => assert!(parts.iter().all(|p| m.contains(p)), "'{m}' lacks one of {parts:?}"),
        other => panic!("expected InvalidArgument with {parts:?}, got {other:?}"),
    }
}

#[test]
fn overrides_and_tables_steer_the_choice() {
    std::env::remove_var("JITCCL_ALGO");
    std::env::remove_var("JITCCL_PROTO");
    std::env::remove_var("JITCCL_TUNER_CONFIG_FILE");

    // An override that leaves AllReduce nothing: refused, naming the variable; nothing
    // written; other collectives unaffected.
    let cfg = Config {
        nchannels: Some(1),
        algos: Some("allreduce:^ring,tree,oneshot,direct,direct_oneshot,recursive_doubling".parse().unwrap()),
        ..Config::default()
    };
    let w = world(2, &cfg).unwrap();
    let (c, s) = &w[0];
    let buf = c.device().alloc_from(&[7.0f32; 4]).unwrap();
    expect_invalid(c.all_reduce(&buf, &buf, 4, Op::Sum, s), &["JITCCL_ALGO", "all_reduce"]);
    s.synchronize().unwrap();
    assert_eq!(buf.to_vec(), vec![7.0; 4], "a refused call changed the buffer");
    let out = c.device().alloc_from(&[0u8; 4]).unwrap();
    let ins: Vec<_> = w.iter().map(|(c, _)| c.device().alloc_from(&[1u8, 2, 3, 4]).unwrap()).collect();
    for ((c, s), b) in w.iter().zip(&ins) {
        c.broadcast(b, if c.rank() == 0 { &out } else { b }, 4, 1, s).unwrap();
    }
    w.iter().for_each(|(_, s)| s.synchronize().unwrap());
    assert_eq!(out.to_vec(), vec![1, 2, 3, 4]);
    drop(w);

    // Per-collective entries through the variable; an unknown name fails init naming it.
    std::env::set_var("JITCCL_ALGO", "ring;allreduce:tree");
    std::env::set_var("JITCCL_PROTO", "^ll128");
    assert_eq!(
        all_reduce(&world(3, &Config { nchannels: Some(1), ..Config::default() }).unwrap(), 100).unwrap(),
        vec![6.0; 100]
    );
    std::env::set_var("JITCCL_ALGO", "ring,nvls");
    expect_invalid(world(2, &Config::default()).map(|_| ()), &["JITCCL_ALGO='ring,nvls'", "'nvls'"]);
    std::env::remove_var("JITCCL_ALGO");
    std::env::remove_var("JITCCL_PROTO");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tuner.conf");
    std::env::set_var("JITCCL_TUNER_CONFIG_FILE", &path);

    // A table naming LL one-shot for 4 ranks is followed (and computes right).
    let table = Table {
        nranks: Some(4),
        rows: vec![Row {
            coll: Collective::AllReduce,
            min_bytes: 0,
            max_bytes: 1 << 20,
            algo: Algorithm::OneShot,
            proto: Protocol::LL,
            channels: Some(1),
            nnodes: Some(1),
            nranks: Some(4),
            pipe_ops: None,
            reg_buff: None,
            chunk_bytes: Some(64),
            wire: Wire::Exact,
        }],
        ..Table::default()
    };
    table.write(&path).unwrap();
    assert_eq!(
        all_reduce(&world(4, &Config { nchannels: Some(1), ..Config::default() }).unwrap(), 1000).unwrap(),
        vec![10.0; 1000]
    );
    // The same table at 5 ranks is ignored (with a warning): the model runs.
    assert_eq!(
        all_reduce(&world(5, &Config { nchannels: Some(1), ..Config::default() }).unwrap(), 10).unwrap(),
        vec![15.0; 10]
    );

    // A malformed table is refused with its file and line, when the communicator is made.
    std::fs::write(
        &path,
        "# fingerprint: 0\nallreduce,0,100,ring,simple,-1,-1,-1\nallreduce,0,100,ring,fast,-1,-1,-1\n",
    )
    .unwrap();
    let w = world(2, &Config { nchannels: Some(2), ..Config::default() });
    expect_invalid(w.map(|_| ()), &[&format!("{}:3:", path.display()), "'fast'"]);
    // A missing named file is an error too, naming the variable.
    std::env::set_var("JITCCL_TUNER_CONFIG_FILE", dir.path().join("missing.conf"));
    let w = world(3, &Config { nchannels: Some(2), ..Config::default() });
    expect_invalid(w.map(|_| ()), &["JITCCL_TUNER_CONFIG_FILE=", "missing.conf"]);
    std::env::remove_var("JITCCL_TUNER_CONFIG_FILE");
}
