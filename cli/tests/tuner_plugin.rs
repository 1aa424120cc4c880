//! NCCL tuner plugins, as a user loads them: the project's CSV tuner (plugins/tuner-csv)
//! steers AllReduce as its file says, every result checked against the reference by
//! `jitccl perf`; what jitccl cannot run is ignored with a log line; a plugin that does not
//! load warns and the run goes on; `none` disables it; the v2-only build works too; with no
//! tuner library of its own, the network plugin's library's tuner is taken, as NCCL does. A
//! process loads its plugin once, so each case is a `jitccl perf` process of its own.

use std::path::Path;
use std::process::Command;

use jitccl_plugins::{FABRIC_CSV, TUNER_CSV, TUNER_CSV_V2};

/// Sizes 1 KiB, 16 KiB and 256 KiB of AllReduce on f32 over two ranks with two channels.
const SWEEP: &[&str] = &["-N", "2", "--channels", "2", "-b", "1K", "-e", "256K", "-f", "16", "-w", "1", "-n", "2"];

/// All-reduces to 64 KiB on Tree/LL with one channel, larger ones on Ring/LL128 in 16 KiB
/// chunks (neither is the model's pick on this machine).
const STEER: &str = "# collective,min,max,algorithm,protocol,channels,nNodes,nRanks,pipeOps,regBuff,chunk\n\
                     allreduce,0,65536,tree,ll,1,-1,-1\n\
                     allreduce,65537,1073741824,ring,ll128,-1,-1,2,-1,-1,16384\n";

/// Rows for what jitccl has no algorithm for.
const FOREIGN: &str =
    "allreduce,0,1073741824,nvls,simple,-1,-1,-1\nallreduce,0,1073741824,collnet_direct,simple,-1,1,-1\n";

struct Run {
    log: String,
}

impl Run {
    /// The DEBUG choice line of AllReduce over `bytes`.
    fn choice(&self, bytes: usize) -> &str {
        let head = format!("all_reduce {bytes} B x 2 ranks: ");
        self.log.lines().find(|l| l.contains(&head)).unwrap_or_else(|| panic!("no choice for {bytes} B:\n{}", self.log))
    }

    fn has(&self, text: &str) -> bool {
        self.log.contains(text)
    }
}

/// `jitccl perf all_reduce` with `how` (`--threads`, or nothing: rank processes) and the
/// tuner settings `vars`, at DEBUG; asserts it ran and its results checked.
fn perf(how: &[&str], vars: &[(&str, &str)], cache: &Path) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jitccl"));
    cmd.args(["perf", "all_reduce"]).args(how).args(SWEEP);
    for v in [
        "NCCL_TUNER_PLUGIN",
        "JITCCL_TUNER_PLUGIN",
        "NCCL_NET_PLUGIN",
        "JITCCL_NET_PLUGIN",
        "NCCL_TUNER_CONFIG_FILE",
        "JITCCL_TUNER_CONFIG_FILE",
        "NCCL_ALGO",
        "JITCCL_ALGO",
        "NCCL_PROTO",
        "JITCCL_PROTO",
    ] {
        cmd.env_remove(v);
    }
    let out = cmd.env("JITCCL_DEBUG", "DEBUG").env("JITCCL_CACHE_DIR", cache).envs(vars.iter().copied()).output();
    let out = out.expect("run jitccl perf");
    let (stdout, log) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "{vars:?}: {stdout}\n{log}");
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{vars:?}: {stdout}");
    Run { log }
}

/// The run's kernel cache (`JITCCL_CACHE_DIR`, which scripts/test.sh makes fresh for each
/// run, so no tuning table is cached there), else a new one.
fn cache() -> (std::path::PathBuf, Option<tempfile::TempDir>) {
    match std::env::var_os("JITCCL_CACHE_DIR") {
        Some(dir) => (dir.into(), None),
        None => {
            let own = tempfile::tempdir().unwrap();
            (own.path().to_path_buf(), Some(own))
        }
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn the_csv_tuner_steers_the_choice_as_its_file_says() {
    let (cache, _own) = cache();
    let dir = tempfile::tempdir().unwrap();
    let steer = write(dir.path(), "steer.csv", STEER);
    for how in [&["--threads"][..], &[]] {
        let run = perf(how, &[("NCCL_TUNER_PLUGIN", TUNER_CSV), ("NCCL_TUNER_CONFIG_FILE", &steer)], &cache);
        assert!(run.has("tuner plugin 'csv' (v6) from"), "{how:?}: {}", run.log);
        // The plugin's own log, through the logger jitccl hands it.
        assert!(run.has("TUNER/csv: 2 row(s) from"), "{}", run.log);
        // jitccl's table does not read the plugin's file.
        assert!(run.has("NCCL_TUNER_CONFIG_FILE=") && run.has("is left to tuner plugin 'csv' (v6)"), "{}", run.log);
        for bytes in [1024, 16384] {
            let line = run.choice(bytes);
            assert!(line.contains(": tree/ll, 1 channel(s),") && line.contains("from the tuner plugin"), "{line}");
            assert!(
                run.has(&format!(
                    "tuner plugin 'csv' (v6): all_reduce {bytes} B: chose Tree/LL (0.00); runs tree/ll, 1 channel(s)"
                )),
                "{}",
                run.log
            );
        }
        let line = run.choice(262144);
        assert!(
            line.contains(": ring/ll128, ") && line.contains(" 4096 elements/step, from the tuner plugin"),
            "{line}"
        );
        assert!(line.contains("16384 B chunks from the plugin"), "{line}");
        // The kernels that ran are the plugin's choices.
        for kernel in ["all_reduce.tree.ll.f32.sum", "all_reduce.ring.ll128.f32.sum"] {
            assert!(run.has(&format!("kernel={kernel}")), "{how:?}: {kernel} did not run: {}", run.log);
        }
    }
}

#[test]
fn what_jitccl_cannot_run_is_ignored_and_the_model_decides() {
    let (cache, _own) = cache();
    let dir = tempfile::tempdir().unwrap();
    let foreign = write(dir.path(), "foreign.csv", FOREIGN);
    // v6: the plugin sees those entries unavailable (-1) and says so.
    let run = perf(&["--threads"], &[("NCCL_TUNER_PLUGIN", TUNER_CSV), ("NCCL_TUNER_CONFIG_FILE", &foreign)], &cache);
    assert!(
        run.has("TUNER/csv: allreduce 1024 B: line 1 asks for nvls/simple, unavailable here: skipped"),
        "{}",
        run.log
    );
    assert!(run.has("line 2 asks for collnet_direct/simple"), "{}", run.log);
    assert!(run.choice(1024).contains("from the cost model"), "{}", run.choice(1024));
    // v2 names its choice: jitccl says why it cannot run it.
    let run =
        perf(&["--threads"], &[("NCCL_TUNER_PLUGIN", TUNER_CSV_V2), ("NCCL_TUNER_CONFIG_FILE", &foreign)], &cache);
    assert!(run.has("tuner plugin 'csv' (v2) from"), "{}", run.log);
    assert!(run.has("chose NVLS/Simple (0.00); NVLS/Simple ignored: jitccl has no NVLS algorithm"), "{}", run.log);
    for bytes in [1024, 16384, 262144] {
        assert!(run.choice(bytes).contains("from the cost model"), "{}", run.choice(bytes));
    }
}

#[test]
fn the_v2_build_steers_too() {
    let (cache, _own) = cache();
    let dir = tempfile::tempdir().unwrap();
    let steer = write(dir.path(), "steer.csv", STEER);
    let run = perf(&["--threads"], &[("NCCL_TUNER_PLUGIN", TUNER_CSV_V2), ("NCCL_TUNER_CONFIG_FILE", &steer)], &cache);
    assert!(run.has("tuner plugin 'csv' (v2) from"), "{}", run.log);
    let line = run.choice(1024);
    assert!(line.contains(": tree/ll, 1 channel(s),") && line.contains("from the tuner plugin"), "{line}");
    // v2 has no chunk sizes: the protocol's own.
    let line = run.choice(262144);
    assert!(line.contains(": ring/ll128, ") && !line.contains("B chunks from the plugin"), "{line}");
    assert!(run.has("kernel=all_reduce.tree.ll.f32.sum"), "{}", run.log);
}

#[test]
fn a_plugin_that_does_not_load_warns_and_none_disables() {
    let (cache, _own) = cache();
    let dir = tempfile::tempdir().unwrap();
    let steer = write(dir.path(), "steer.csv", STEER);
    let run = perf(&["--threads"], &[("NCCL_TUNER_PLUGIN", "nosuch")], &cache);
    assert!(run.has("WARN") && run.has("tuner plugin 'nosuch' did not load: libnccl-tuner-nosuch.so: "), "{}", run.log);
    assert!(run.has("no tuner plugin of NCCL_TUNER_PLUGIN=nosuch could be used"), "{}", run.log);
    assert!(!run.has("from the tuner plugin"), "{}", run.log);
    // A list: the missing name first, then the plugin.
    let list = format!("nosuch,{TUNER_CSV}");
    let run = perf(&["--threads"], &[("JITCCL_TUNER_PLUGIN", &list), ("NCCL_TUNER_CONFIG_FILE", &steer)], &cache);
    assert!(run.has("did not load") && run.choice(1024).contains("from the tuner plugin"), "{}", run.log);
    // A file it cannot read: its init fails, the run goes on without it.
    let missing = dir.path().join("missing.csv").display().to_string();
    let run = perf(&["--threads"], &[("NCCL_TUNER_PLUGIN", TUNER_CSV), ("NCCL_TUNER_CONFIG_FILE", &missing)], &cache);
    assert!(run.has("TUNER/csv: cannot read") && run.has("failed to start (init returned 2)"), "{}", run.log);
    assert!(!run.has("from the tuner plugin"), "{}", run.log);
    // none: no plugin; the NCCL name of the file is then jitccl's own table again.
    let run = perf(&["--threads"], &[("NCCL_TUNER_PLUGIN", "none"), ("NCCL_TUNER_CONFIG_FILE", &steer)], &cache);
    assert!(run.has("tuner plugin: none (NCCL_TUNER_PLUGIN=none)"), "{}", run.log);
    assert!(!run.has("from the tuner plugin") && run.choice(1024).contains("from the tuning table"), "{}", run.log);
}

#[test]
fn the_network_plugin_library_carries_the_tuner_when_none_is_named() {
    let (cache, _own) = cache();
    let dir = tempfile::tempdir().unwrap();
    let steer = write(dir.path(), "steer.csv", STEER);
    let vars = [("NCCL_NET_PLUGIN", FABRIC_CSV), ("NCCL_TUNER_CONFIG_FILE", &steer)];
    let run = perf(&["--threads"], &vars, &cache);
    let from = format!(
        "tuner plugin 'csv' (v6) from {FABRIC_CSV}, the network plugin's library (JITCCL_TUNER_PLUGIN is unset)"
    );
    assert!(run.has(&from), "{}", run.log);
    let line = run.choice(1024);
    assert!(line.contains(": tree/ll, 1 channel(s),") && line.contains("from the tuner plugin"), "{line}");
    assert!(run.has("kernel=all_reduce.tree.ll.f32.sum"), "{}", run.log);
    // A tuner library of its own that loads comes first; one that does not leaves the
    // network plugin's.
    let run = perf(&["--threads"], &[vars[0], vars[1], ("NCCL_TUNER_PLUGIN", TUNER_CSV_V2)], &cache);
    assert!(run.has("tuner plugin 'csv' (v2) from") && !run.has("the network plugin's library"), "{}", run.log);
    let run = perf(&["--threads"], &[vars[0], vars[1], ("NCCL_TUNER_PLUGIN", "nosuch")], &cache);
    assert!(run.has("the network plugin's library (no library of NCCL_TUNER_PLUGIN=nosuch loads)"), "{}", run.log);
}
