//! The `jitccl` command line as a user runs it: kernel listing, source, compiling (with the
//! disk cache reused by a second process), the perf table, errors on bad input, and the port
//! `jitccl launch` holds for rank 0.

mod limits;
mod master_port;
mod perf;
mod procs;

use std::process::{Command, Output};

use jitccl::codegen::KernelSpec;

fn jitccl(args: &[&str], cache: &std::path::Path) -> Output {
    jitccl_with(args, cache, &[])
}

/// `jitccl` with more environment variables.
fn jitccl_with(args: &[&str], cache: &std::path::Path, vars: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_jitccl"))
        .args(args)
        .env("JITCCL_CACHE_DIR", cache)
        .envs(vars.iter().copied())
        .output()
        .expect("run jitccl")
}

/// The run's kernel cache (`JITCCL_CACHE_DIR`, which scripts/test.sh names), else a new
/// one. Tests that are not about the cache use it, so they share the
/// kernels that the other tests of the run compile instead of compiling their own.
struct RunCache {
    path: std::path::PathBuf,
    _own: Option<tempfile::TempDir>,
}

impl RunCache {
    fn new() -> Self {
        match std::env::var_os("JITCCL_CACHE_DIR") {
            Some(dir) => RunCache { path: dir.into(), _own: None },
            None => {
                let own = tempfile::tempdir().unwrap();
                RunCache { path: own.path().to_path_buf(), _own: Some(own) }
            }
        }
    }

    fn path(&self) -> &std::path::Path {
        &self.path
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn kernels_list_and_show() {
    let cache = tempfile::tempdir().unwrap();
    let out = jitccl(&["kernels", "list"], cache.path());
    assert!(out.status.success());
    let listed: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    let all: Vec<String> = KernelSpec::all().iter().map(|s| s.to_string()).collect();
    assert_eq!(listed, all);
    // fp8 needs sm_89: an sm_80 listing leaves it out.
    let sm80 = text(&jitccl(&["kernels", "list", "--target", "cuda", "--arch", "sm_80"], cache.path()).stdout);
    assert!(!sm80.contains("f8e4m3") && sm80.contains("all_reduce.tree.ll128.bf16.avg"));

    let out = jitccl(&["kernels", "show", "all_reduce.tree.ll.bf16.max"], cache.path());
    let src = text(&out.stdout);
    assert!(out.status.success());
    assert!(src.contains("jitccl_all_reduce_tree_ll_bf16_max") && src.contains("jc_f32_to_bf16"), "{src}");
    let cuda =
        text(&jitccl(&["kernels", "show", "all_reduce.tree.ll.bf16.max", "--target", "cuda"], cache.path()).stdout);
    assert!(cuda.contains("__global__") && cuda.contains("cvt.rn.bf16.f32"));

    for (bad, why) in [
        ("all_reduce.ring.ll.f32.xx", "unknown reduction op 'xx'"),
        ("broadcast.tree.ll.u8", "no tree algorithm"),
        ("all_gather.ring.simple.f32", "only moves bytes"),
    ] {
        let out = jitccl(&["kernels", "show", bad], cache.path());
        assert!(!out.status.success());
        assert!(text(&out.stderr).contains(why), "{bad}: {}", text(&out.stderr));
    }
}

/// The summary line `compiled N, failed F, cached C in T s` as (N, F, C).
fn summary(out: &Output) -> (usize, usize, usize) {
    match summary_of(out, "compiled ")[..] {
        [n, f, c, ..] => (n, f, c),
        _ => panic!("bad summary: {}", text(&out.stdout)),
    }
}

/// The whole numbers of the last line of stdout, which starts with `word` (the summary),
/// at least two (done and failed).
fn summary_of(out: &Output, word: &str) -> Vec<usize> {
    let stdout = text(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let nums: Vec<usize> =
        line.split(|c: char| !c.is_ascii_digit() && c != '.').filter_map(|w| w.parse().ok()).collect();
    assert!(line.starts_with(word) && nums.len() >= 2, "bad summary: {stdout}");
    nums
}

#[test]
fn compile_uses_the_disk_cache_across_processes() {
    let cache = tempfile::tempdir().unwrap();
    let specs = ["all_reduce.ring.ll.f32.sum", "reduce_scatter.ring.simple.f16.avg", "sendrecv.ring.ll128.u8"];
    let mut args = vec!["kernels", "compile", "--target", "host"];
    args.extend(specs);
    let first = jitccl(&args, cache.path());
    assert!(first.status.success(), "{}", text(&first.stdout));
    assert_eq!(summary(&first), (3, 0, 0));
    let second = jitccl(&args, cache.path());
    assert_eq!(summary(&second), (0, 0, 3), "the second process must hit the disk cache");

    // CUDA too, when NVRTC is installed (required in CI).
    let cuda = jitccl(&["kernels", "compile", "--target", "cuda", "--arch", "sm_90", specs[0]], cache.path());
    if !cuda.status.success() && std::env::var("JITCCL_REQUIRE_NVRTC").as_deref() != Ok("1") {
        eprintln!("skipping the CUDA part: {}", text(&cuda.stdout));
        return;
    }
    assert_eq!(summary(&cuda), (1, 0, 0), "{}", text(&cuda.stdout));
    let again = jitccl(&["kernels", "compile", "--target", "cuda", "--arch", "sm_90", specs[0]], cache.path());
    assert_eq!(summary(&again), (0, 0, 1));
}

#[test]
fn compile_reports_a_failure_with_nonzero_exit() {
    let cache = tempfile::tempdir().unwrap();
    // A compiler that always fails stands in for a broken toolchain.
    let out = Command::new(env!("CARGO_BIN_EXE_jitccl"))
        .args(["kernels", "compile", "--target", "host", "reduce.ring.ll.i8.min"])
        .env("JITCCL_CACHE_DIR", cache.path())
        .env("CC", "false")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out.stdout).contains("FAILED reduce.ring.ll.i8.min"), "{}", text(&out.stdout));
    assert_eq!(summary(&out), (0, 1, 0));
    // The log names the command, its exit status, and says that it printed nothing.
    let log = text(&out.stdout);
    assert!(log.contains("false -O3") && log.contains("kernel.c"), "{log}");
    assert!(log.contains("exit status: 1") && log.contains("(no output)"), "{log}");

    // A compiler that cannot be started is named with the reason.
    let out = jitccl_with(
        &["kernels", "compile", "--target", "host", "reduce.ring.ll.i8.min"],
        cache.path(),
        &[("CC", "/nonexistent/cc")],
    );
    let log = text(&out.stdout);
    assert!(log.contains("/nonexistent/cc") && log.contains("No such file"), "{log}");
    assert_eq!(summary(&out), (0, 1, 0));
}

#[test]
fn corrupt_cache_entries_are_recompiled_with_a_warning() {
    let cache = tempfile::tempdir().unwrap();
    let perf = ["perf", "all_reduce", "--threads", "-N", "2", "-b", "64", "-e", "64", "-w", "0", "-n", "1"];
    let first = jitccl(&perf, cache.path());
    assert!(first.status.success(), "{}", text(&first.stderr));
    let objects: Vec<_> = std::fs::read_dir(cache.path().join("host"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "so"))
        .collect();
    assert!(!objects.is_empty());
    // Truncated (a mapped object would raise SIGBUS), emptied, one byte changed.
    let damages: [fn(&mut Vec<u8>); 3] = [
        |b| b.truncate(b.len() / 2),
        |b| b.clear(),
        |b| {
            let m = b.len() / 2;
            b[m] ^= 0xff
        },
    ];
    for damage in damages {
        for so in &objects {
            let mut bytes = std::fs::read(so).unwrap();
            damage(&mut bytes);
            std::fs::write(so, bytes).unwrap();
        }
        let out = jitccl(&perf, cache.path());
        let err = text(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(err.contains("WARN") && err.contains("recompiling"), "{err}");
        assert!(err.contains(&objects[0].display().to_string()), "{err}");
        assert!(text(&out.stdout).contains("# Out of bounds values : 0 OK"));
    }
    // The entries were replaced: no more warnings.
    let out = jitccl(&perf, cache.path());
    assert!(out.status.success() && !text(&out.stderr).contains("WARN"), "{}", text(&out.stderr));
}

#[test]
fn perf_prints_a_checked_table() {
    let cache = RunCache::new();
    let kernels = ["all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "sendrecv"];
    for coll in kernels.into_iter().chain(["all_to_all", "gather", "scatter"]) {
        let out = jitccl(
            &[
                "perf", coll, "-N", "3", "-b", "1K", "-e", "64K", "-f", "8", "-d", "bfloat16", "-o", "max", "-w", "1",
                "-n", "2",
            ],
            cache.path(),
        );
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{coll}: {stdout}\n{}", text(&out.stderr));
        let rows: Vec<&str> = stdout.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(rows.len(), 3, "{coll}: sizes 1K, 8K, 64K:\n{stdout}");
        for row in &rows {
            let cols: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(cols[2], "bfloat16", "{row}");
            assert_eq!(cols[8], "0", "{coll}: wrong elements: {row}");
        }
        assert!(stdout.contains("# Avg bus bandwidth"), "{stdout}");
        assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
    }
}

#[test]
fn perf_rejects_bad_input() {
    let cache = tempfile::tempdir().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["perf", "all_reduce", "-d", "float7"], "unknown datatype 'float7'"),
        (&["perf", "all_reduce", "-b", "1X"], "bad size '1X'"),
        (&["perf", "allgatherv"], "unknown collective 'allgatherv'"),
        (&["perf", "reduce", "-N", "2", "-r", "2"], "root 2 is not one of the 2 ranks"),
        (&["perf", "all_reduce", "-b", "1M", "-e", "1K"], "larger than maxbytes"),
    ];
    for (args, why) in cases {
        let out = jitccl(args, cache.path());
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(text(&out.stderr).contains(why), "{args:?}: {}", text(&out.stderr));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_jitccl"))
        .args(["perf", "all_reduce", "-e", "1K"])
        .env("JITCCL_CACHE_DIR", cache.path())
        .env("JITCCL_PROTO", "ll64")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("JITCCL_PROTO='ll64'"), "{}", text(&out.stderr));
}

/// Every spec's source passes the host compiler's checks (`kernels check`, which builds
/// nothing); the collective sweeps build and run a sample of them that meets every shape,
/// datatype and op. A broken compiler fails the check, naming the kernel and the command.
#[test]
fn every_spec_checks_for_the_host_and_a_broken_compiler_fails_it() {
    // Every spec, through the run's cache: what an earlier run checked with this compiler
    // is remembered.
    let run = RunCache::new();
    let out = jitccl(&["kernels", "check", "--target", "host", "--all"], run.path());
    let nums = summary_of(&out, "checked ");
    assert!(out.status.success() && nums[1] == 0, "{}", text(&out.stdout));
    assert_eq!(nums[0] + nums[2], KernelSpec::all().len(), "{}", text(&out.stdout));

    // A pass is remembered (nothing else is kept), for this compiler only.
    let cache = tempfile::tempdir().unwrap();
    let spec = "reduce.ring.ll.i8.min";
    for expected in [[1, 0, 0], [0, 0, 1]] {
        let out = jitccl(&["kernels", "check", spec], cache.path());
        assert_eq!(summary_of(&out, "checked ")[..3], expected, "{}", text(&out.stdout));
    }
    let kept: Vec<_> = walk(cache.path());
    assert!(kept.len() == 1 && kept[0].extension().is_some_and(|e| e == "checked"), "{kept:?}");
    assert_eq!(std::fs::metadata(&kept[0]).unwrap().len(), 0, "a marker, not a build");
    let out = jitccl_with(&["kernels", "check", spec], cache.path(), &[("CC", "false")]);
    assert!(!out.status.success());
    let log = text(&out.stdout);
    assert!(log.contains(&format!("FAILED {spec}")) && log.contains("-fsyntax-only"), "{log}");
    assert_eq!(summary_of(&out, "checked ")[..3], [0, 1, 0]);

    // CUDA: NVRTC without optimization (required in CI).
    let cuda = jitccl(
        &["kernels", "check", "--target", "cuda", "--arch", "sm_90", "all_reduce.ring.ll.f32.sum"],
        cache.path(),
    );
    if !cuda.status.success() && std::env::var("JITCCL_REQUIRE_NVRTC").as_deref() != Ok("1") {
        eprintln!("skipping the CUDA part: {}", text(&cuda.stdout));
        return;
    }
    assert_eq!(summary_of(&cuda, "checked ")[..3], [1, 0, 0], "{}", text(&cuda.stdout));
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[test]
fn cuda_arch_defaults_to_the_device_else_sm_90_and_ptx_is_its_own_target() {
    let cache = tempfile::tempdir().unwrap();
    let spec = "all_reduce.ring.ll.f32.sum";
    let out = jitccl(&["kernels", "compile", "--target", "cuda", spec], cache.path());
    if !out.status.success() && std::env::var("JITCCL_REQUIRE_NVRTC").as_deref() != Ok("1") {
        eprintln!("skipping: {}", text(&out.stdout));
        return;
    }
    assert_eq!(summary(&out), (1, 0, 0), "{}", text(&out.stdout));
    let (stderr, arch) = (text(&out.stderr), "sm_90");
    match jitccl::cuda_device_count() {
        Ok(_) => assert!(stderr.contains("CUDA device 0's arch"), "{stderr}"),
        Err(_) => assert!(stderr.contains("no --arch and no CUDA device") && stderr.contains(arch), "{stderr}"),
    }
    let ptx = jitccl(&["kernels", "compile", "--target", "cuda", "--arch", "sm_90", "--ptx", spec], cache.path());
    assert_eq!(summary(&ptx), (1, 0, 0), "PTX is not the CUBIN's cache entry: {}", text(&ptx.stdout));
    assert!(text(&ptx.stderr).contains("for cuda:sm_90:ptx"), "{}", text(&ptx.stderr));
    assert!(cache.path().join("cuda-sm_90-ptx").is_dir());
}

#[test]
fn nvrtc_folder_without_the_library_names_what_was_looked_for() {
    let (cache, empty) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let out = jitccl_with(
        &["kernels", "compile", "--target", "cuda", "--arch", "sm_80", "all_reduce.ring.ll.f32.sum"],
        cache.path(),
        &[("JITCCL_NVRTC_PATH", &empty.path().display().to_string())],
    );
    let stdout = text(&out.stdout);
    assert!(!out.status.success());
    assert!(stdout.contains(&empty.path().display().to_string()), "{stdout}");
    assert!(stdout.contains("libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so"), "{stdout}");
    assert!(!text(&out.stderr).contains("panicked"), "{}", text(&out.stderr));
}

#[test]
fn missing_nvrtc_is_a_clear_error() {
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_jitccl"))
        .args(["kernels", "compile", "--target", "cuda", "all_reduce.ring.ll.f32.sum"])
        .env("JITCCL_CACHE_DIR", cache.path())
        .env("JITCCL_NVRTC_PATH", "/nonexistent/nvrtc")
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(!out.status.success());
    assert!(stdout.contains("nvrtc is not available") && stdout.contains("/nonexistent/nvrtc"), "{stdout}");
    assert!(!text(&out.stderr).contains("panicked"), "{}", text(&out.stderr));
    assert_eq!(summary(&out), (0, 1, 0));
    // The host target does not need NVRTC.
    let host = Command::new(env!("CARGO_BIN_EXE_jitccl"))
        .args(["perf", "all_reduce", "-N", "2", "-b", "64", "-e", "64", "-n", "1", "-w", "0"])
        .env("JITCCL_CACHE_DIR", cache.path())
        .env("JITCCL_NVRTC_PATH", "/nonexistent/nvrtc")
        .output()
        .unwrap();
    assert!(host.status.success(), "{}", text(&host.stderr));
    assert!(text(&host.stdout).contains("on the host target ("), "{}", text(&host.stdout));
}

#[test]
fn store_serve_answers_a_client() {
    use jitccl::store::{Store, TcpStore};
    use std::io::{BufRead, BufReader};

    let mut server = Command::new(env!("CARGO_BIN_EXE_jitccl"))
        .args(["store", "serve", "--host", "127.0.0.1", "--port", "0"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().to_string();
    let result = std::panic::catch_unwind(|| {
        let a = TcpStore::connect(&addr, std::time::Duration::from_secs(10)).unwrap();
        let b = TcpStore::connect(&addr, std::time::Duration::from_secs(10)).unwrap();
        a.set("k", b"v").unwrap();
        assert_eq!(b.get("k").unwrap(), b"v");
        assert_eq!(a.add("n", 5).unwrap(), 5);
        assert_eq!(b.add("n", -2).unwrap(), 3);
    });
    server.kill().unwrap();
    let _ = server.wait();
    result.unwrap();
}

#[test]
fn env_prints_every_setting_with_its_value_and_source() {
    let cache = RunCache::new();
    let vars = [("JITCCL_NCHANNELS", "3"), ("NCCL_BUFFSIZE", "2M"), ("JITCCL_ALGO", "ring"), ("NCCL_ALGO", "tree")];
    let out = Command::new(env!("CARGO_BIN_EXE_jitccl"))
        .arg("env")
        .env("JITCCL_CACHE_DIR", cache.path())
        .env_remove("JITCCL_TIMEOUT")
        .env_remove("JITCCL_DEBUG")
        .env_remove("NCCL_DEBUG")
        .envs(vars)
        .output()
        .expect("run jitccl");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let row = |name: &str| {
        let line = stdout.lines().find(|l| l.split_whitespace().next() == Some(name));
        line.unwrap_or_else(|| panic!("no {name} in {stdout}")).split_whitespace().skip(1).collect::<Vec<_>>().join(" ")
    };
    assert_eq!(row("JITCCL_NCHANNELS"), "3 [JITCCL_NCHANNELS]");
    assert_eq!(row("JITCCL_BUFFSIZE"), "2M [NCCL_BUFFSIZE (NCCL's name)]");
    assert_eq!(row("JITCCL_ALGO"), "ring [JITCCL_ALGO]", "the JITCCL_ name wins");
    assert_eq!(row("JITCCL_TIMEOUT"), "300 s [default]");
    assert_eq!(row("JITCCL_DEBUG"), "WARN [default]");
    assert!(!stdout.contains("JITCCL_TEST_DIE_AT"), "test hooks only with --all");
    assert!(text(&jitccl_with(&["env", "--all"], cache.path(), &[]).stdout).contains("JITCCL_TEST_DIE_AT"));

    let bad = jitccl_with(&["env"], cache.path(), &[("JITCCL_TIMEOUT", "soon"), ("NCCL_NSOCKS_PERTHREAD", "99")]);
    let err = text(&bad.stderr);
    assert!(!bad.status.success(), "{err}");
    assert!(err.contains("JITCCL_TIMEOUT: expected seconds, more than 0 and at most 1e9"), "{err}");
    assert!(err.contains("JITCCL_NSOCKS_PERTHREAD: expected 1..=16"), "{err}");

    // The same as JSON, for programs: refused values are rows with a problem, not a failure.
    let json = jitccl_with(&["env", "--json"], cache.path(), &[("JITCCL_NCHANNELS", "3"), ("JITCCL_TIMEOUT", "soon")]);
    assert!(json.status.success(), "{}", text(&json.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&json.stdout).expect("env --json prints JSON");
    let row = |name: &str| rows.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("no {name}")).clone();
    let channels = row("JITCCL_NCHANNELS");
    assert_eq!(
        (&channels["value"], &channels["given"], &channels["source"]),
        (&"3".into(), &true.into(), &"JITCCL_NCHANNELS".into())
    );
    assert_eq!(row("JITCCL_TIMEOUT")["problem"], "expected seconds, more than 0 and at most 1e9");
    assert_eq!(row("JITCCL_BUFFSIZE")["nccl"], "NCCL_BUFFSIZE");
    assert_eq!(rows.len(), text(&jitccl_with(&["env"], cache.path(), &[]).stdout).lines().count(), "one row a setting");
}
