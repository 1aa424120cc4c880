//! Bad numbers on the command line: each is refused at once, with a message naming the
//! flag, instead of a panic, a hang or a runaway.

use std::time::Duration;

use crate::procs::{alive, children, finish_within, reap, run_within, start};
use crate::text;

/// Runs each case and checks that it fails quickly, without a panic, saying `why`.
fn refused(cases: &[(&[&str], &[&str])], limit: Duration) {
    let cache = tempfile::tempdir().unwrap();
    for (args, why) in cases {
        let out = run_within(args, cache.path(), limit);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        for w in *why {
            assert!(err.contains(w), "{args:?}: expected '{w}' in: {err}");
        }
    }
}

#[test]
fn numeric_flags_are_range_checked() {
    refused(
        &[
            (&["launch", "--timeout", "nan", "-n", "1", "--", "true"], &["--timeout", "seconds"]),
            (&["launch", "--timeout", "1e30", "-n", "1", "--", "true"], &["--timeout", "seconds"]),
            (&["launch", "--timeout=-1", "-n", "1", "--", "true"], &["--timeout"]),
            (&["launch", "--timeout", "0", "-n", "1", "--", "true"], &["--timeout"]),
            (&["launch", "-n", "0", "--", "true"], &["--nproc", "at least 1"]),
            (&["perf", "all_reduce", "-N", "0"], &["--nranks", "at least 1"]),
            (&["perf", "all_reduce", "--channels", "0"], &["--channels"]),
            (&["perf", "all_reduce", "--channels", "65"], &["--channels"]),
            (&["perf", "all_reduce", "-n", "0"], &["--iters", "at least 1"]),
            (&["perf", "all_reduce", "-m", "0"], &["--agg_iters", "at least 1"]),
            (&["perf", "all_reduce", "-i", "0"], &["--stepbytes", "at least 1"]),
            (&["perf", "all_reduce", "-t", "0"], &["--nthreads"]),
            (&["perf", "all_reduce", "-g", "100000"], &["--ngpus"]),
            (&["perf", "all_reduce", "-a", "4"], &["--average", "3 (max)"]),
            (&["perf", "all_reduce", "-z", "2"], &["--blocking", "0 or 1"]),
            (&["perf", "all_reduce", "--cudagraph=-1"], &["--cudagraph"]),
            (&["perf", "all_reduce", "--warmup_iters=-1"], &["--warmup_iters"]),
            (&["perf", "all_reduce", "-c", "x"], &["--check"]),
            (&["perf", "all_reduce", "--devices", "0,x", "--target", "cuda"], &["--devices"]),
            (&["kernels", "compile", "-j", "0", "all_reduce.ring.ll.f32.sum"], &["--jobs"]),
            (&["kernels", "compile", "-j", "100000000", "all_reduce.ring.ll.f32.sum"], &["--jobs"]),
            (&["store", "serve", "-p", "70000"], &["--port"]),
        ],
        Duration::from_secs(20),
    );
}

#[test]
fn perf_refuses_sweeps_that_cannot_progress() {
    refused(
        &[
            (&["perf", "all_reduce", "-b", "0", "-e", "1K"], &["--minbytes", "at least 1"]),
            (&["perf", "all_reduce", "-b", "8", "-e", "1K", "-f", "1"], &["--stepfactor", "at least 2"]),
            (&["perf", "all_reduce", "-b", "8", "-e", "1K", "-f", "0"], &["--stepfactor", "at least 2"]),
            (&["perf", "all_reduce", "-b", "1M", "-e", "1K"], &["larger than maxbytes"]),
        ],
        Duration::from_secs(20),
    );
}

#[test]
fn launch_refuses_too_many_ranks_without_starting_any() {
    refused(&[(&["launch", "-n", "100000", "--", "true"], &["--nproc", "at most"])], Duration::from_secs(5));
}

#[test]
fn perf_refuses_too_many_ranks_without_starting_any() {
    refused(&[(&["perf", "all_reduce", "-N", "100000"], &["--nranks", "at most"])], Duration::from_secs(5));
}

#[test]
fn launch_stops_starting_ranks_at_the_first_failure() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let script = format!("[ \"$RANK\" = 0 ] && exit 3; echo >> '{}'; exec sleep 60", marker.display());
    let n = 200;
    let out =
        run_within(&["launch", "-n", &n.to_string(), "--", "sh", "-c", &script], dir.path(), Duration::from_secs(60));
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("rank 0 exited with exit status: 3"), "{}", text(&out.stderr));
    let started = std::fs::read_to_string(&marker).unwrap_or_default().lines().count();
    assert!(started < n / 2, "{started} of {n} ranks started after rank 0 had failed");
}

#[test]
fn launch_forwards_output_that_is_not_utf8() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"printf 'bad \377 byte\n'; sleep 0.2; echo after"#;
    let out = run_within(&["launch", "-n", "1", "--", "sh", "-c", script], dir.path(), Duration::from_secs(30));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(out.stdout.windows(11).any(|w| w == b"[0] bad \xff b"), "{:?}", text(&out.stdout));
    assert!(text(&out.stdout).contains("[0] after"), "{}", text(&out.stdout));
}

/// Starts `launch -n 2 -- sleep 1000`, sends `sig` to the launcher, and checks that both
/// ranks are gone within a few seconds.
fn ranks_end_with_the_launcher(sig: i32) {
    let cache = tempfile::tempdir().unwrap();
    let child = start(&["launch", "-n", "2", "--", "sleep", "1000"], cache.path());
    let pid = child.id();
    let mut ranks = Vec::new();
    for _ in 0..500 {
        ranks = children(pid);
        if ranks.len() == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(ranks.len(), 2, "the launcher did not start its ranks");
    // SAFETY: a signal to the process this test started.
    unsafe { libc::kill(pid as i32, sig) };
    let out = finish_within(child, Duration::from_secs(10));
    let mut left = ranks.clone();
    for _ in 0..250 {
        left.retain(|&p| alive(p));
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for &p in &left {
        // SAFETY: cleaning up this test's own processes.
        unsafe { libc::kill(p as i32, libc::SIGKILL) };
    }
    reap(&ranks);
    assert!(left.is_empty(), "signal {sig}: ranks {left:?} outlived the launcher");
    let out = out.unwrap_or_else(|| panic!("signal {sig}: the launcher did not exit"));
    assert!(!out.status.success());
}

#[test]
fn sigterm_to_launch_ends_the_ranks() {
    ranks_end_with_the_launcher(libc::SIGTERM);
}

#[test]
fn sigint_to_launch_ends_the_ranks() {
    ranks_end_with_the_launcher(libc::SIGINT);
}

#[test]
fn ranks_die_with_a_killed_launcher() {
    ranks_end_with_the_launcher(libc::SIGKILL);
}

/// Environment values out of range are refused naming the variable (`JITCCL_TIMEOUT=1e30`
/// panicked in `Duration::from_secs_f64`; `JITCCL_BUFFSIZE=1` blamed "simple slot size 0").
#[test]
fn environment_values_are_range_checked() {
    let cache = tempfile::tempdir().unwrap();
    let perf = ["perf", "all_reduce", "-N", "2", "-b", "8", "-e", "8", "--threads"];
    for (var, value) in [
        ("JITCCL_TIMEOUT", "1e30"),
        ("JITCCL_TIMEOUT", "nan"),
        ("JITCCL_TIMEOUT", "-1"),
        ("JITCCL_BOOTSTRAP_TIMEOUT", "1e19"),
        ("JITCCL_BUFFSIZE", "1"),
        ("JITCCL_BUFFSIZE", "99999999999999"),
        ("JITCCL_NCHANNELS", "0"),
    ] {
        let mut args = perf.to_vec();
        if var == "JITCCL_BOOTSTRAP_TIMEOUT" {
            args.pop(); // ranks as processes: they bootstrap
        }
        let out = crate::jitccl_with(&args, cache.path(), &[(var, value)]);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{var}={value} should be refused: {err}");
        assert!(!err.contains("panicked"), "{var}={value}: {err}");
        assert!(err.contains(var), "{var}={value}: the error should name the variable: {err}");
    }
}

#[test]
fn launch_keep_going_lets_the_other_ranks_live_on_and_says_what_happened() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"[ "$RANK" = 1 ] && exit 7; sleep 1; echo "done $RANK""#;
    let out = run_within(
        &["launch", "--keep-going", "-n", "3", "--", "sh", "-c", script],
        dir.path(),
        Duration::from_secs(30),
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "some ranks failed, the others succeeded: {stderr}");
    assert!(stdout.contains("[0] done 0") && stdout.contains("[2] done 2"), "{stdout}\n{stderr}");
    assert!(stderr.contains("rank 1 exited with exit status: 7") && stderr.contains("rank(s) 1 failed"), "{stderr}");
    let out = run_within(
        &["launch", "--keep-going", "-n", "2", "--", "sh", "-c", "exit 5"],
        dir.path(),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(1), "every rank failed: {}", text(&out.stderr));
    assert!(text(&out.stderr).contains("every rank failed"), "{}", text(&out.stderr));
}
