//! Tuning through the public API: overrides in NCCL's grammar (typed and from
//! JITCCL_ALGO), and tables from JITCCL_TUNER_CONFIG_FILE. Each test runs in a child
//! process that sees only its own variables (`with_tuning`).

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

/// The variables these tests steer tuning with.
const ALGO: &str = "JITCCL_ALGO";
const PROTO: &str = "JITCCL_PROTO";
const TABLE: &str = "JITCCL_TUNER_CONFIG_FILE";

/// Runs the test `name` in a child process where, of [`ALGO`], [`PROTO`] and [`TABLE`], only
/// those in `given` are set: jitccl reads them from the environment, which is set on the
/// child, not in this process beside the other tests.
fn with_tuning(name: &str, given: &[(&str, &str)], body: impl FnOnce()) {
    let vars: Vec<(&str, Option<&str>)> =
        [ALGO, PROTO, TABLE].map(|v| (v, given.iter().find(|(g, _)| *g == v).map(|(_, x)| *x))).into();
    jitccl_plugins::in_child(module_path!(), name, &vars, body);
}

/// [`with_tuning`] with [`TABLE`] alone, naming the file `file` (not made) in a fresh
/// folder, removed after.
fn with_table_file(name: &str, file: &str, body: impl FnOnce()) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file);
    with_tuning(name, &[(TABLE, path.to_str().expect("a UTF-8 temporary path"))], body);
}

/// An override that leaves AllReduce nothing: refused, naming the variable; nothing
/// written; other collectives unaffected.
#[test]
fn an_override_that_leaves_a_collective_nothing_refuses_only_its_calls() {
    with_tuning("an_override_that_leaves_a_collective_nothing_refuses_only_its_calls", &[], || {
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
    });
}

/// Per-collective entries through the variables are followed.
#[test]
fn per_collective_entries_of_the_variables_are_followed() {
    let given = [(ALGO, "ring;allreduce:tree"), (PROTO, "^ll128")];
    with_tuning("per_collective_entries_of_the_variables_are_followed", &given, || {
        assert_eq!(
            all_reduce(&world(3, &Config { nchannels: Some(1), ..Config::default() }).unwrap(), 100).unwrap(),
            vec![6.0; 100]
        );
    });
}

/// An unknown name in the variable fails init, naming it.
#[test]
fn an_unknown_name_in_the_variable_fails_init_naming_it() {
    let given = [(ALGO, "ring,nvls"), (PROTO, "^ll128")];
    with_tuning("an_unknown_name_in_the_variable_fails_init_naming_it", &given, || {
        expect_invalid(world(2, &Config::default()).map(|_| ()), &["JITCCL_ALGO='ring,nvls'", "'nvls'"]);
    });
}

/// A table naming LL one-shot for 4 ranks is followed (and computes right), ignored at 5
/// ranks, and refused when malformed, with its file and line.
#[test]
fn a_tuner_table_is_followed_where_it_fits_and_refused_when_malformed() {
    with_table_file("a_tuner_table_is_followed_where_it_fits_and_refused_when_malformed", "tuner.conf", || {
        let path = std::path::PathBuf::from(std::env::var_os(TABLE).expect("the table's path, given to this child"));
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
    });
}

/// A missing named table file is an error, naming the variable.
#[test]
fn a_missing_tuner_table_fails_init_naming_the_variable() {
    with_table_file("a_missing_tuner_table_fails_init_naming_the_variable", "missing.conf", || {
        let w = world(3, &Config { nchannels: Some(2), ..Config::default() });
        expect_invalid(w.map(|_| ()), &["JITCCL_TUNER_CONFIG_FILE=", "missing.conf"]);
    });
}
