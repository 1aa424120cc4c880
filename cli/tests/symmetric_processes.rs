//! The direct algorithms with ranks as processes: every collective that has one (AlltoAll,
//! Gather and Scatter, and Send/Recv and AlltoAllv's direct point-to-point, on plain
//! buffers), through
//! `jitccl perf -R 2` (symmetric buffers in shared memory; perf checks every rank's result
//! against the reference), forced and as the tuner picks them; on plain buffers (every
//! process's host arena, which the others map), and with one rank's arena off, which turns
//! them off for all; and `-R 1` (registering plain buffers), which needs the arenas and
//! fails with the reason without them.

use std::process::{Command, Output};

fn perf(args: &[&str]) -> Output {
    perf_with(args, &[])
}

fn perf_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_jitccl"))
        .arg("perf")
        .args(args)
        .env("JITCCL_TIMEOUT", "60")
        .envs(env.iter().copied())
        .output()
        .expect("run jitccl")
}

/// Whether a perf run passed its reference check on every rank, with rows.
fn checked(out: &Output) -> bool {
    let stdout = text(&out.stdout);
    out.status.success()
        && stdout.contains("# Out of bounds values : 0 OK")
        && stdout.lines().filter(|l| !l.starts_with('#')).count() > 3
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A perf run per row (collective, algorithm or "" for the tuner's, ranks, datatype, op),
/// sizes 4 B to `max` by 5x (odd counts, several tiles, out of place and in place), with
/// `extra` arguments and DEBUG logs; `ok` judges each run. Fails listing the runs that did not pass.
fn each_run(rows: &[(&str, &str, &str, &str, &str)], max: &str, extra: &[&str], ok: impl Fn(&str, &Output) -> bool) {
    let mut failures = Vec::new();
    for (coll, algo, n, dtype, op) in rows {
        let mut args =
            vec![*coll, "-N", n, "-b", "4", "-e", max, "-f", "5", "-d", dtype, "-o", op, "-w", "1", "-n", "2"];
        args.extend(extra);
        if !algo.is_empty() {
            args.extend(["--algo", algo]);
        }
        let out = perf_with(&args, &[("JITCCL_DEBUG", "DEBUG")]);
        if !checked(&out) || !ok(n, &out) {
            failures.push(format!("{coll} {algo} n={n} {dtype} {op}:\n{}\n{}", text(&out.stdout), text(&out.stderr)));
        }
    }
    assert!(failures.is_empty(), "{} failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn every_direct_collective_as_rank_processes() {
    let rows = [
        ("all_reduce", "direct", "2", "float", "sum"),
        ("all_reduce", "direct", "3", "bfloat16", "max"),
        ("all_reduce", "direct_oneshot", "4", "int32", "avg"),
        ("all_reduce", "direct_oneshot", "2", "double", "premulsum"),
        ("reduce_scatter", "direct", "3", "half", "prod"),
        ("reduce", "direct", "4", "uint64", "min"),
        ("broadcast", "direct", "3", "int8", "sum"),
        ("all_gather", "direct", "4", "double", "sum"),
        ("all_to_all", "direct", "2", "float", "sum"),
        ("gather", "direct", "3", "int32", "sum"),
        ("scatter", "direct", "4", "uint8", "sum"),
        // The tuner's own choice on symmetric buffers.
        ("all_reduce", "", "3", "float", "sum"),
    ];
    each_run(&rows, "64K", &["-R", "2"], |_, out| {
        let stdout = text(&out.stdout);
        stdout.contains("rank processes") && stdout.contains("symmetric buffers")
    });
}

/// Symmetric buffers of rank processes are blocks of the host arenas where every rank maps
/// every arena (faster at large sizes), and shared-memory segments of their own without the
/// arenas: the direct kernels run on both, checked against the reference.
#[test]
fn symmetric_buffers_live_in_the_arenas_else_in_segments() {
    for (arena, says) in [("1", "in the host arena"), ("0", "in a shared-memory segment")] {
        let args = ["all_reduce", "-N", "3", "-b", "4", "-e", "64K", "-f", "16", "-R", "2", "--algo", "direct"];
        let out = perf_with(&args, &[("JITCCL_DEBUG", "DEBUG"), ("JITCCL_HOST_ARENA", arena)]);
        let stderr = text(&out.stderr);
        assert!(checked(&out), "JITCCL_HOST_ARENA={arena}: {}\n{stderr}", text(&out.stdout));
        for r in 0..3 {
            let line = format!("rank {r}: symmetric buffer of 65536 B {says}");
            assert!(stderr.contains(&line), "JITCCL_HOST_ARENA={arena}: no '{line}' in:\n{stderr}");
        }
        assert!(stderr.lines().any(|l| l.contains("B x 3 ranks: direct")), "{stderr}");
    }
}

#[test]
fn registering_plain_buffers_across_processes_needs_the_arenas() {
    // Plain buffers live in the host arenas, which every rank maps: they register.
    let out = perf(&["all_reduce", "-N", "3", "-b", "8", "-e", "64K", "-f", "8", "-R", "1", "--algo", "direct"]);
    assert!(checked(&out), "{}\n{}", text(&out.stdout), text(&out.stderr));
    // Without them, process memory cannot be shared: refused with the reason.
    let out = perf_with(&["all_reduce", "-N", "2", "-b", "8", "-e", "8", "-R", "1"], &[("JITCCL_HOST_ARENA", "0")]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(err.contains("another process") && err.contains("alloc_symmetric"), "{err}");
    // One process: any buffer can be registered.
    let out = perf(&["all_reduce", "-N", "3", "--threads", "-b", "8", "-e", "64K", "-f", "8", "-R", "1"]);
    assert!(checked(&out), "{}\n{}", text(&out.stdout), text(&out.stderr));
}

#[test]
fn plain_buffers_of_rank_processes_run_the_direct_algorithms() {
    // Forced, and as the tuner picks them (from a few KiB at these rank counts), with the
    // DEBUG logs saying what each call ran.
    let rows = [
        ("all_reduce", "direct", "3", "float", "sum"),
        ("all_reduce", "direct_oneshot", "2", "int8", "max"),
        ("reduce_scatter", "direct", "2", "bfloat16", "sum"),
        ("all_gather", "direct", "3", "half", "sum"),
        ("broadcast", "", "2", "double", "sum"),
        ("all_reduce", "", "4", "float", "sum"),
        ("all_to_all", "direct", "3", "int8", "sum"),
        ("gather", "direct", "4", "half", "sum"),
        ("scatter", "direct", "3", "uint64", "sum"),
        ("all_to_all", "", "4", "float", "sum"),
        ("gather", "", "2", "bfloat16", "sum"),
        ("scatter", "", "4", "double", "sum"),
        // Point-to-point: the receiver's single copy, one launch per call.
        ("sendrecv", "direct", "3", "float", "sum"),
        ("sendrecv", "", "4", "int8", "sum"),
        ("all_to_allv", "direct", "3", "half", "sum"),
        ("all_to_allv", "", "4", "double", "sum"),
    ];
    each_run(&rows, "320K", &[], |n, out| {
        let stderr = text(&out.stderr);
        stderr.contains("plain buffers may run the direct algorithms")
            && stderr.lines().any(|l| l.contains(&format!(" B x {n} ranks: direct")))
    });
}

#[test]
fn one_rank_without_an_arena_keeps_every_rank_on_the_fifo_algorithms() {
    // Rank 1 allocates from the heap: no rank may run a direct kernel (the others would
    // wait for it), so every rank logs why and all calls, checked, take the FIFOs.
    let exe = env!("CARGO_BIN_EXE_jitccl");
    for coll in ["all_reduce", "sendrecv", "all_to_allv"] {
        let script = format!(
            r#"[ "$RANK" = 1 ] && export JITCCL_HOST_ARENA=0; exec "{exe}" perf {coll} -N 3 -b 4 -e 1M -f 8 -w 1 -n 2"#
        );
        let out = Command::new(exe)
            .args(["launch", "-n", "3", "--", "sh", "-c", &script])
            .env("JITCCL_TIMEOUT", "60")
            .env("JITCCL_DEBUG", "DEBUG")
            .output()
            .expect("run jitccl launch");
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success() && stdout.contains("# Out of bounds values : 0 OK"), "{coll}: {stdout}\n{stderr}");
        let all = format!("{stdout}{stderr}");
        for r in 0..3 {
            let line = format!("rank {r}: plain buffers take the FIFO algorithms only (rank 1 has no host arena");
            assert!(all.contains(&line), "{coll}: {all}");
        }
        assert!(!all.contains("ranks: direct"), "{coll}: a direct kernel ran:\n{all}");
    }
    // Forcing a direct algorithm there is refused, not left waiting for the peers.
    let out = perf_with(
        &["all_reduce", "-N", "2", "-b", "64", "-e", "64", "--algo", "direct"],
        &[("JITCCL_HOST_ARENA", "0")],
    );
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("registered"), "{}", text(&out.stderr));
}
