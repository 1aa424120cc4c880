//! `jitccl perf` with nccl-tests' flags: AlltoAll, Gather and Scatter checked against the
//! reference with nccl-tests' bus bandwidth factors, ranks spread over processes, threads
//! and ranks per thread (-N, -t, -g), aggregation, blocking, averaging and fixed steps,
//! and the refusals (-G, --target cuda without a GPU, bad combinations); `--compare`;
//! `--wire`.

use jitccl::tune::{Row, Table};
use jitccl::{Algorithm, Collective, Protocol, Wire};

use crate::{jitccl, jitccl_with, text, RunCache};

/// The table's rows, each split into columns.
fn rows(stdout: &str) -> Vec<Vec<String>> {
    stdout.lines().filter(|l| !l.starts_with('#')).map(|l| l.split_whitespace().map(str::to_string).collect()).collect()
}

/// Runs perf, asserts it passed its reference check, and returns its rows.
fn checked(args: &[&str]) -> Vec<Vec<String>> {
    let cache = RunCache::new();
    let out = jitccl(args, cache.path());
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{args:?}: {stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{args:?}: {stdout}");
    let rows = rows(&stdout);
    assert!(!rows.is_empty(), "{args:?}: no rows: {stdout}");
    for r in &rows {
        assert_eq!(r.len(), 13, "{args:?}: {r:?}");
        assert_eq!(r[8], "0", "{args:?}: wrong elements out of place: {r:?}");
    }
    rows
}

#[test]
fn all_to_all_gather_and_scatter_run_and_check() {
    for (coll, n, how, root, in_place) in [
        ("all_to_all", "2", "--threads", "0", false),
        ("all_to_all", "3", "-t1", "0", false),
        ("alltoall", "3", "--threads", "0", false),
        ("gather", "2", "-t1", "1", true),
        ("gather", "3", "--threads", "2", true),
        ("scatter", "2", "--threads", "1", true),
        ("scatter", "3", "-t1", "0", true),
    ] {
        let args = [
            "perf", coll, "-N", n, how, "-r", root, "-b", "1K", "-e", "1M", "-f", "32", "-d", "int32", "-w", "1", "-n",
            "3",
        ];
        let rows = checked(&args);
        let nr: usize = n.parse().unwrap();
        assert_eq!(rows.len(), 3, "{args:?}: sizes 1K, 32K, 1M: {rows:?}");
        for r in &rows {
            let (size, count): (usize, usize) = (r[0].parse().unwrap(), r[1].parse().unwrap());
            // The size column is the whole n-block buffer, as nccl-tests counts it.
            assert_eq!(size, count * 4, "{r:?}");
            assert_eq!(count % nr, 0, "{r:?}");
            assert_eq!(r[3], "none", "{r:?}");
            assert_eq!(r[4], if coll.contains("all") { "-1" } else { root }, "{r:?}");
            if in_place {
                assert_eq!(r[12], "0", "{args:?}: wrong elements in place: {r:?}");
            } else {
                assert!(r[9..].iter().all(|c| c == "N/A"), "AlltoAll has no in-place form: {r:?}");
            }
            // busbw = algbw x (n-1)/n (nccl-tests' PERFORMANCE.md), within the rounding
            // of two decimals.
            let (alg, bus): (f64, f64) = (r[6].parse().unwrap(), r[7].parse().unwrap());
            if alg >= 0.5 {
                let want = alg * (nr - 1) as f64 / nr as f64;
                assert!((bus - want).abs() <= 0.011, "{args:?}: busbw {bus} for algbw {alg}: {r:?}");
            }
        }
    }
}

/// -N ranks as -N/(t x g) processes of -t threads of -g ranks, including several ranks per
/// process across processes (they meet through a store).
#[test]
fn ranks_spread_over_processes_threads_and_ranks_per_thread() {
    for (layout, says) in [
        (&["-N", "4", "-t", "2", "-g", "2"][..], "ranks as threads of one process (2 thread(s) x 2 rank(s))"),
        (&["-N", "4", "-g", "2"][..], "rank processes (2 x 1 thread(s) x 2 rank(s))"),
        (&["-N", "3", "-t", "3"][..], "ranks as threads of one process (3 thread(s) x 1 rank(s))"),
    ] {
        for coll in ["all_reduce", "all_to_all"] {
            let mut args = vec!["perf", coll, "-b", "64", "-e", "4K", "-f", "8", "-w", "1", "-n", "2"];
            args.extend(layout);
            let cache = RunCache::new();
            let out = jitccl(&args, cache.path());
            let stdout = text(&out.stdout);
            assert!(out.status.success(), "{args:?}: {stdout}\n{}", text(&out.stderr));
            assert!(stdout.contains(says), "{args:?}: {stdout}");
            assert!(stdout.contains("# Out of bounds values : 0 OK"), "{args:?}: {stdout}");
            assert_eq!(rows(&stdout).len(), 3, "{args:?}: {stdout}");
        }
    }
}

/// nccl-tests' -i (fixed step), -m (aggregation), -z (blocking) and -a (averaging).
#[test]
fn nccl_tests_timing_flags_work() {
    let rows =
        checked(&["perf", "reduce_scatter", "-N", "2", "--threads", "-b", "1K", "-e", "3K", "-i", "1K", "-n", "2"]);
    let sizes: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(sizes, ["1024", "2048", "3072"]);
    for extra in [&["-m", "3", "-z", "1", "-a", "0"][..], &["-m", "2", "-a", "2"], &["-z", "0", "-a", "3"]] {
        let mut args = vec!["perf", "broadcast", "-N", "2", "-b", "8", "-e", "64", "-f", "8", "-w", "1", "-n", "2"];
        args.extend(extra);
        checked(&args);
    }
}

#[test]
fn cuda_target_without_a_gpu_fails_clearly() {
    if jitccl::cuda_device_count().is_ok() {
        return; // a GPU machine: gpu-check runs perf on it
    }
    let cache = tempfile::tempdir().unwrap();
    for args in [
        &["perf", "all_reduce", "--target", "cuda"][..],
        &["perf", "gather", "--target", "cuda", "--devices", "0,0", "-g", "2"],
        // Rank processes (CUDA IPC): refused before any process starts.
        &["perf", "all_reduce", "--target", "cuda", "-N", "2", "--devices", "0,0"],
    ] {
        let out = jitccl(args, cache.path());
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {}", text(&out.stdout));
        assert!(err.contains("--target cuda: no usable GPU") && !err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn perf_refuses_wrong_flag_combinations() {
    let cache = tempfile::tempdir().unwrap();
    let cases: &[(&[&str], &[&str])] = &[
        (&["perf", "all_to_all", "-G", "1"], &["-G/--cudagraph", "not supported on the host target"]),
        (&["perf", "all_reduce", "--target", "cuda", "-G", "2", "-z", "1"], &["-G/--cudagraph 2 with -z 1", "-z 0"]),
        (&["perf", "gather", "-N", "3", "-r", "3"], &["root 3 is not one of the 3 ranks"]),
        (&["perf", "scatter", "-N", "3", "-t", "2"], &["-N 3", "-t 2"]),
        (&["perf", "all_to_all", "--devices", "0,0"], &["--devices", "--target cuda"]),
        (&["perf", "all_to_all", "--target", "cuda", "--devices", "0"], &["--devices", "-N 2"]),
        (&["perf", "all_reduce", "-i", "1K", "-f", "4"], &["--stepbytes", "--stepfactor"]),
        (&["perf", "all_reduce", "-b", "1", "-e", "1M", "-i", "1"], &["--stepbytes", "at most 10000"]),
        (&["perf", "all_reduce", "--threads", "-t", "2"], &["--threads", "--nthreads"]),
        (&["perf", "gather", "--target", "tpu"], &["--target", "tpu"]),
        (&["perf", "all_reduce", "--compare", "a=t.csv"], &["--compare needs two setups"]),
        (&["perf", "all_reduce", "--compare", "a=t.csv", "--compare", "a=u.csv"], &["label a is given twice"]),
        (
            &["perf", "all_reduce", "--compare", "a=/nonexistent/t.csv", "--compare", "b=u.csv"],
            &["--compare a:", "/nonexistent/t.csv"],
        ),
        (&["perf", "all_reduce", "--compare", "a b=t.csv"], &["label \"a b\""]),
        (&["perf", "all_reduce", "--compare", "a=t.csv@0"], &["channels 0 must be 1 to"]),
        (
            &["perf", "all_reduce", "--compare", "a=t.csv", "--compare", "b=u.csv", "--algo", "ring"],
            &["--algo", "every setup"],
        ),
        (&["perf", "all_reduce", "--compare", "a=t.csv", "--compare", "b=u.csv", "-R", "2"], &["plain buffers"]),
        (&["perf", "all_reduce", "--reps", "3"], &["--compare"]),
        (&["perf", "all_to_all", "--wire", "bf16"], &["--wire bf16", "all_to_all has no wire path"]),
        (&["perf", "all_reduce", "--wire", "int8", "-d", "int32"], &["--wire int8b64", "not i32"]),
        (&["perf", "all_reduce", "--wire", "fp16", "-d", "half"], &["--wire fp16", "no narrower than f16"]),
        (&["perf", "all_reduce", "--wire", "int8", "-o", "max"], &["sum or avg only", "-o max"]),
        (&["perf", "all_reduce", "--wire", "int8b48"], &["--wire", "block of 48"]),
    ];
    for (args, why) in cases {
        let out = jitccl(args, cache.path());
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        for w in *why {
            assert!(err.contains(w), "{args:?}: expected '{w}' in: {err}");
        }
    }
}

/// --wire: the collectives that carry a wire, checked within its bound and for the same
/// bits on every rank, with the wire named in the header; busbw on the datatype's bytes
/// (the size column is the same as an exact run's). One host: JITCCL_WIRE_LOCAL=encode runs
/// the wires' kernels; without it the header says the calls run exactly.
#[test]
fn wires_run_and_check_within_their_bound() {
    let all = ["perf", "all_reduce", "--wire", "bf16", "-b", "1K", "-e", "1K", "-w", "0", "-n", "1", "-N", "2"];
    let cache = RunCache::new();
    let out = jitccl(&all, cache.path());
    let stdout = text(&out.stdout);
    assert!(out.status.success() && stdout.contains("every hop is in memory"), "{stdout}\n{}", text(&out.stderr));
    for (args, wire) in [
        (&["all_reduce", "-N", "3", "--threads", "-o", "avg"][..], "int8b64"),
        (&["reduce_scatter", "-N", "2", "-d", "bfloat16"], "fp8e4m3b32"),
        (&["all_gather", "-N", "2", "-t", "2"], "bf16"),
        (&["broadcast", "-N", "3", "-r", "1", "--threads"], "fp8e5m2b64"),
        (&["sendrecv", "-N", "2", "--threads", "-d", "half"], "int8b32"),
    ] {
        let mut all = vec!["perf", "--wire", wire, "-b", "1K", "-e", "32K", "-f", "32", "-w", "1", "-n", "2"];
        all.extend(args);
        let cache = RunCache::new();
        let out = jitccl_with(&all, cache.path(), &[("JITCCL_WIRE_LOCAL", "encode")]);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{all:?}: {stdout}\n{}", text(&out.stderr));
        assert!(stdout.contains(&format!("in the {wire} wire")), "{all:?}: {stdout}");
        assert!(stdout.contains(&format!("The {wire} wire encodes")), "{all:?}: {stdout}");
        assert!(stdout.contains("# Out of bounds values : 0 OK"), "{all:?}: {stdout}");
        let rows = rows(&stdout);
        assert_eq!(rows.len(), 2, "{all:?}: sizes 1K and 32K: {stdout}");
        assert!(rows.iter().all(|r| r[8] == "0"), "{all:?}: {stdout}");
    }
}

/// A one-row table forcing `algo`/`proto` on every all_reduce size.
fn forcing(path: &std::path::Path, algo: Algorithm, proto: Protocol) {
    let row = Row { channels: Some(1), ..Row::every_size(Collective::AllReduce, algo, proto, Wire::Exact) };
    Table { rows: vec![row], ..Table::default() }.write(path).unwrap();
}

/// --compare: two setups, each a table forcing another (algorithm, protocol), timed side
/// by side in the same rank processes: every size has a checked row per setup, exactly
/// one of them the best, and each setup's choice came from its own table.
#[test]
fn compare_times_setups_side_by_side_each_with_its_table() {
    let (cache, tables) = (RunCache::new(), tempfile::tempdir().unwrap());
    let (ring, tree) = (tables.path().join("ring.csv"), tables.path().join("tree.csv"));
    forcing(&ring, Algorithm::Ring, Protocol::Simple);
    forcing(&tree, Algorithm::Tree, Protocol::LL);
    let (a, b) = (format!("ring={}", ring.display()), format!("tree={}@2", tree.display()));
    let args =
        ["perf", "all_reduce", "-N", "2", "-b", "1K", "-e", "64K", "-f", "8", "-w", "1", "-n", "3", "--reps", "3"];
    let args: Vec<&str> = args.iter().copied().chain(["--compare", &a, "--compare", &b]).collect();
    let out = jitccl_with(&args, cache.path(), &[("JITCCL_DEBUG", "DEBUG")]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
    let rows = rows(&stdout);
    for size in ["1024", "8192", "65536"] {
        let at: Vec<&Vec<String>> = rows.iter().filter(|r| r[0] == size).collect();
        let labels: Vec<&str> = at.iter().map(|r| r[1].as_str()).collect();
        assert_eq!(labels, ["ring", "tree"], "{size}: {stdout}");
        for r in &at {
            assert_eq!(r.len(), 8, "{r:?}");
            let t: Vec<f64> = r[2..5].iter().map(|v| v.parse().unwrap()).collect();
            assert!(t[1] > 0.0 && t[1] <= t[0] && t[0] <= t[2], "median within min..max: {r:?}");
            assert_eq!(r[7], "0", "wrong elements: {r:?}");
        }
        let gaps: Vec<f64> = at.iter().map(|r| r[6].trim_end_matches('%').parse().unwrap()).collect();
        assert!(gaps.iter().all(|&g| g >= 0.0) && gaps.contains(&0.0), "gaps to the best at {size}: {stdout}");
        for pick in ["ring/simple, 1 channel(s)", "tree/ll, 1 channel(s)"] {
            let logged = format!("all_reduce {size} B x 2 ranks: {pick}");
            assert!(
                stderr.lines().any(|l| l.contains(&logged) && l.contains("from the tuning table")),
                "no '{logged}' from the table in: {stderr}"
            );
        }
    }
    assert!(stdout.contains("# ring: worst gap to the best setup") && stdout.contains("# tree: worst gap"), "{stdout}");
}
