//! `jitccl tune`: a quick run writes a table that parses, covers the sizes and is then used
//! (the DEBUG log says "from the tuning table"); a run resumes from its partial file; and
//! ranks given different tables follow rank 0's.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use jitccl::tune::Table;
use jitccl::Collective;

const EXE: &str = env!("CARGO_BIN_EXE_jitccl");

/// `jitccl <args>` with no tuning variables from the caller's environment.
fn jitccl(args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(EXE);
    cmd.args(args);
    for v in ["JITCCL_TUNER_CONFIG_FILE", "JITCCL_ALGO", "JITCCL_PROTO", "JITCCL_NCHANNELS", "JITCCL_DEBUG"] {
        cmd.env_remove(v);
    }
    cmd.envs(vars.iter().copied()).output().unwrap()
}

fn ok(o: &Output) -> (String, String) {
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned());
    assert!(o.status.success(), "exit {}\n{out}\n{err}", o.status);
    (out, err)
}

fn quick(table: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["tune", "--quick", "-N", "2", "-b", "8", "-e", "4K", "-o", table.to_str().unwrap()];
    args.extend(extra);
    jitccl(&args, &[])
}

#[test]
fn quick_tune_writes_a_table_that_perf_then_uses() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.csv");
    let (out, _) = ok(&quick(&path, &["--verify", "1"]));
    // One line per size (8, 128, 2048): the model's pick, the best and the gap.
    for size in ["8", "128", "2048"] {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(size))
            .unwrap_or_else(|| panic!("no {size} B line:\n{out}"));
        assert!(line.contains('%') && line.contains("ch"), "{line}");
    }
    assert!(!dir.path().join("t.csv.partial").exists(), "the partial file outlived a finished run");

    let table = Table::read(&path).unwrap();
    assert_eq!(table.nranks, Some(2));
    assert!(table.fingerprint.is_some());
    for size in [8u64, 100, 128, 2048] {
        let rows = table
            .rows
            .iter()
            .filter(|r| r.coll == Collective::AllReduce && (r.min_bytes..=r.max_bytes).contains(&size));
        assert_eq!(rows.count(), 1, "{size} B is not covered by exactly one row:\n{}", table.to_csv());
    }

    // The verification ran perf with the table: its pick at each size is the row's.
    let (_, verification) = out.split_once("verification").unwrap_or_else(|| panic!("no verification:\n{out}"));
    for size in [8u64, 128, 2048] {
        let row = table.rows.iter().find(|r| (r.min_bytes..=r.max_bytes).contains(&size)).unwrap();
        let want = format!("{}/{}/{}ch", row.algo, row.proto, row.channels.unwrap());
        let line = verification.lines().find(|l| l.split_whitespace().next() == Some(&size.to_string()));
        let line = line.unwrap_or_else(|| panic!("no {size} B verification line:\n{verification}"));
        assert_eq!(line.split_whitespace().nth(1), Some(want.as_str()), "{line}");
        // "same" says whether auto ran the best fixed candidate itself.
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f[6], if f[1] == f[3] { "yes" } else { "no" }, "{line}");
    }
    assert!(verification.contains("# worst gap to the best fixed candidate: auto "), "{verification}");
    let same = verification
        .lines()
        .filter(|l| l.split_whitespace().next().is_some_and(|w| w.parse::<u64>().is_ok()))
        .filter(|l| l.split_whitespace().nth(6) == Some("yes"))
        .count();
    let summary = format!("# auto runs the best fixed candidate itself at {same} of 3 sizes");
    assert!(verification.contains(&summary), "{summary}:\n{verification}");

    let o = jitccl(
        &["perf", "all_reduce", "-N", "2", "-b", "8", "-e", "4K", "-f", "16", "-w", "1", "-n", "2"],
        &[("JITCCL_TUNER_CONFIG_FILE", path.to_str().unwrap()), ("JITCCL_DEBUG", "DEBUG")],
    );
    let (_, err) = ok(&o);
    assert!(err.contains("all_reduce 128 B x 2 ranks") && err.contains("from the tuning table"), "{err}");
}

/// A rebuild that replaces the program's file during a tune (cargo's relink) does not take
/// it from under the measuring runs the tune starts later: they run the tune's own program.
#[test]
fn a_tune_outlives_its_program_file_being_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let (exe, table) = (dir.path().join("jitccl"), dir.path().join("t.csv"));
    std::fs::copy(EXE, &exe).unwrap();
    let args = ["tune", "--quick", "-N", "2", "-b", "8", "-e", "8", "--verify", "1", "-o", table.to_str().unwrap()];
    let mut child = Command::new(&exe).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    std::fs::remove_file(&exe).unwrap();
    std::fs::write(&exe, b"#!/bin/sh\nexit 3\n").unwrap();
    let end = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            panic!("the tune did not end within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (out, _) = ok(&child.wait_with_output().unwrap());
    assert!(out.contains("verification"), "{out}");
}

#[test]
fn an_interrupted_tune_resumes_from_its_partial_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.csv");
    let args = ["tune", "--quick", "-N", "2", "-b", "8", "-e", "1M", "-o", path.to_str().unwrap()];
    // Of the three bands (8 B to 2 KiB, 32 KiB, and 512 KiB), the first finished for the
    // model and every candidate, tree/ll/2ch implausibly fast, so that keeping it shows in
    // the table.
    let header = "# jitccl tune partial: nranks=2 sizes=8..524288x16 warmup=2 iters=10 reps=2 side by side\n";
    let times = |t: f64| [8, 128, 2048].map(|s| format!("{s}={t}=?")).join(";");
    let mut partial = format!("{header}all_reduce\tmodel@8\tok\t{}\n", times(5.0));
    for algo in ["ring", "tree", "oneshot", "recursive_doubling"] {
        for proto in ["simple", "ll", "ll128"] {
            for ch in [1, 2] {
                let t = if (algo, proto, ch) == ("tree", "ll", 2) { 0.001 } else { 5.0 };
                partial += &format!("all_reduce\t{algo}/{proto}/{ch}/-1@8\tok\t{}\n", times(t));
            }
        }
    }
    // The direct algorithms run with Simple only.
    for algo in ["direct", "direct_oneshot"] {
        for ch in [1, 2] {
            partial += &format!("all_reduce\t{algo}/simple/{ch}/-1@8\tok\t{}\n", times(5.0));
        }
    }
    std::fs::write(dir.path().join("t.csv.partial"), &partial).unwrap();
    let (out, err) = ok(&jitccl(&args, &[]));
    assert!(err.contains("resuming: 29 measurement(s) kept"), "{err}");
    assert!(out.contains("(2 to do)"), "{out}");
    let table = Table::read(&path).unwrap();
    for size in [8u64, 128, 2048] {
        let row = table.rows.iter().find(|r| (r.min_bytes..=r.max_bytes).contains(&size)).unwrap();
        assert_eq!((row.algo.to_string(), row.proto.to_string(), row.channels), ("tree".into(), "ll".into(), Some(2)));
    }

    // A partial file from other parameters is started over, not mixed in.
    std::fs::write(dir.path().join("t.csv.partial"), partial.replace("nranks=2", "nranks=3")).unwrap();
    let (out, err) = ok(&jitccl(&args, &[]));
    assert!(err.contains("starting over") && out.contains("(3 to do)"), "{err}\n{out}");
}

#[test]
fn ranks_given_different_tables_follow_rank_0s() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.csv"), dir.path().join("b.csv"));
    std::fs::write(&a, "allreduce,0,4096,oneshot,ll,1,-1,-1\n").unwrap();
    std::fs::write(&b, "allreduce,0,4096,ring,simple,1,-1,-1\n").unwrap();
    let script = format!(
        "if [ \"$RANK\" = 0 ]; then t={}; else t={}; fi; JITCCL_TUNER_CONFIG_FILE=$t exec \"$0\" perf all_reduce -N 2 -b 8 -e 8 -w 0 -n 1",
        a.display(),
        b.display()
    );
    let o =
        jitccl(&["launch", "-n", "2", "--timeout", "60", "--", "sh", "-c", &script, EXE], &[("JITCCL_DEBUG", "DEBUG")]);
    let (_, err) = ok(&o);
    for rank in ["[0]", "[1]"] {
        let chose = err.lines().any(|l| {
            l.starts_with(rank) && l.contains("all_reduce 8 B x 2 ranks: oneshot/ll") && l.contains("tuning table")
        });
        assert!(chose, "{rank} did not take rank 0's row:\n{err}");
    }
    assert!(!err.contains("ring/simple"), "a rank followed its own table:\n{err}");
}

#[test]
fn tune_on_gpus_checks_them_first_and_refuses_devices_without_the_target() {
    let dir = std::env::temp_dir().join(format!("jitccl-tune-gpus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let table = dir.join("t.csv");
    let t = table.to_str().unwrap();
    let no_target = jitccl(&["tune", "--quick", "-N", "2", "--devices", "0,0", "-o", t], &[]);
    let err = String::from_utf8_lossy(&no_target.stderr);
    assert!(!no_target.status.success() && err.contains("--target cuda"), "{err}");
    let short = jitccl(&["tune", "--quick", "-N", "2", "--target", "cuda", "--devices", "0", "-o", t], &[]);
    assert!(String::from_utf8_lossy(&short.stderr).contains("one GPU per rank"));
    if jitccl::Device::cuda(0).is_err() {
        // No GPU here (CI): the run stops before measuring anything, naming the rank and GPU.
        let out = jitccl(&["tune", "--quick", "-N", "2", "--target", "cuda", "--devices", "0,0", "-o", t], &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("rank 0 on GPU 0") && !err.contains("panicked"), "{err}");
    }
    assert!(!table.exists() && !dir.join("t.csv.partial").exists(), "nothing written");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tune_skips_what_the_model_puts_far_behind_at_large_sizes_unless_told_all() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.csv");
    let t = path.to_str().unwrap();
    let args = ["tune", "--quick", "-N", "2", "-b", "2M", "-e", "2M", "-w", "1", "-n", "1", "--reps", "1", "-o", t];
    let (out, _) = ok(&jitccl(&args, &[]));
    // At 2 MiB one LL channel is several times behind the best in the model and takes
    // milliseconds a call: skipped; what remains is measured and the table covers the size.
    let line = out.lines().find(|l| l.starts_with("# skipped")).unwrap_or_else(|| panic!("no skip line:\n{out}"));
    let (skipped, of) = line
        .split_once("all_reduce 2097152..2097152 B: ")
        .and_then(|(_, n)| n.split_once(" of "))
        .unwrap_or_else(|| panic!("{line}"));
    let (skipped, of): (usize, usize) = (skipped.parse().unwrap(), of.trim().parse().unwrap());
    assert!(skipped > 0 && skipped < of, "{line}");
    let best = out.lines().find(|l| l.split_whitespace().next() == Some("2097152")).unwrap();
    assert!(!best.contains("/ll/1ch"), "the best is a candidate that was measured: {best}");
    assert!(Table::read(&path).unwrap().rows.iter().any(|r| r.max_bytes >= 2 << 20));

    // --all measures every candidate.
    let all: Vec<&str> = args.iter().copied().chain(["--all"]).collect();
    let (out, _) = ok(&jitccl(&all, &[]));
    assert!(!out.contains("# skipped") && out.contains("(1 to do)"), "{out}");
}

/// `tune --wire`: the wire is one more dimension. Its candidates (the algorithms whose
/// kernels carry the wire, with Simple) run the wire's kernels, checked within its error
/// bound; the rows are written as that wire's, which a wired call then picks from while an
/// exact call, finding no plain row, keeps the model.
#[test]
fn a_wired_tune_writes_rows_that_wired_calls_pick() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.csv");
    let (out, _) = ok(&quick(&path, &["--wire", "int8"]));
    assert!(out.contains("# the int8b64 wire: busbw counts the uncompressed bytes"), "{out}");
    let table = Table::read(&path).unwrap();
    assert!(!table.rows.is_empty(), "{}", table.to_csv());
    for r in &table.rows {
        let carried = jitccl::Wire::algorithms(r.coll).contains(&r.algo);
        assert!(r.wire == "int8".parse().unwrap() && carried && r.proto == jitccl::Protocol::Simple, "{r:?}");
    }
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.lines().filter(|l| !l.starts_with('#')).all(|l| l.trim().is_empty()), "a plain row:\n{text}");

    let perf = ["perf", "all_reduce", "-N", "2", "-b", "128", "-e", "128", "-w", "1", "-n", "2"];
    let vars = [("JITCCL_TUNER_CONFIG_FILE", path.to_str().unwrap()), ("JITCCL_DEBUG", "DEBUG")];
    let wired = [&perf[..], &["--wire", "int8"]].concat();
    let (out, err) = ok(&jitccl(&wired, &[&vars[..], &[("JITCCL_WIRE_LOCAL", "encode")]].concat()));
    assert!(out.contains("# Out of bounds values : 0 OK"), "{out}");
    let line = err.lines().find(|l| l.contains("all_reduce 128 B x 2 ranks in the int8b64 wire: "));
    assert!(line.is_some_and(|l| l.contains("from the tuning table")), "{err}");
    let (_, err) = ok(&jitccl(&perf, &vars));
    let line = err.lines().find(|l| l.contains("all_reduce 128 B x 2 ranks: "));
    assert!(line.is_some_and(|l| !l.contains("from the tuning table")), "an exact call took a wired row: {err}");
}
