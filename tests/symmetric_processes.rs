//! The direct algorithms with ranks as processes: every collective that has one, through
//! `jitccl perf -R 2` (symmetric buffers in shared memory; perf checks every rank's result
//! against the reference), forced and as the tuner picks them; and `-R 1` (registering
//! process memory), which processes cannot share, failing with the reason.

use std::process::{Command, Output};

fn perf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_jitccl"))
        .arg("perf")
        .args(args)
        .env("JITCCL_TIMEOUT", "60")
        .output()
        .expect("run jitccl")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn every_direct_collective_as_rank_processes() {
    // (collective, algorithm, ranks, datatype, op): sizes 4 B to 62.5 KB by 5x, so odd counts
    // and several tiles, out of place and in place.
    let runs: &[(&str, &str, &str, &str, &str)] = &[
        ("all_reduce", "direct", "2", "float", "sum"),
        ("all_reduce", "direct", "3", "bfloat16", "max"),
        ("all_reduce", "direct_oneshot", "4", "int32", "avg"),
        ("all_reduce", "direct_oneshot", "2", "double", "premulsum"),
        ("reduce_scatter", "direct", "3", "half", "prod"),
        ("reduce", "direct", "4", "uint64", "min"),
        ("broadcast", "direct", "3", "int8", "sum"),
        ("all_gather", "direct", "4", "double", "sum"),
        // The tuner's own choice on symmetric buffers.
        ("all_reduce", "", "3", "float", "sum"),
    ];
    let mut failures = Vec::new();
    for (coll, algo, n, dtype, op) in runs {
        let mut args = vec![
            *coll, "-N", n, "-b", "4", "-e", "64K", "-f", "5", "-d", dtype, "-o", op, "-w", "1", "-n", "2", "-R", "2",
        ];
        if !algo.is_empty() {
            args.extend(["--algo", algo]);
        }
        let out = perf(&args);
        let stdout = text(&out.stdout);
        let ok = out.status.success()
            && stdout.contains("rank processes")
            && stdout.contains("symmetric buffers")
            && stdout.contains("# Out of bounds values : 0 OK")
            && stdout.lines().filter(|l| !l.starts_with('#')).count() > 3;
        if !ok {
            failures.push(format!("{coll} {algo} n={n} {dtype} {op}:\n{stdout}\n{}", text(&out.stderr)));
        }
    }
    assert!(failures.is_empty(), "{} failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn registering_process_memory_across_processes_is_refused_with_the_reason() {
    let out = perf(&["all_reduce", "-N", "2", "-b", "8", "-e", "8", "-R", "1"]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(err.contains("another process") && err.contains("alloc_symmetric"), "{err}");
    // One process: any buffer can be registered.
    let out = perf(&["all_reduce", "-N", "3", "--threads", "-b", "8", "-e", "64K", "-f", "8", "-R", "1"]);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("# Out of bounds values : 0 OK"), "{}", text(&out.stdout));
}
