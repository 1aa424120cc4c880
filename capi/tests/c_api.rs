//! The C API as C programs use it: the programs of `tests/c/` are compiled with the system C
//! compiler (`CC`, else `cc`; `mpicc` for the MPI one) against `include/nccl.h` and the
//! built `libnccl.so`, and run as ranks on the host (`JITCCL_DEVICE=host`):
//!
//! - `collectives.c`: every collective against a local reference, under `jitccl launch` at
//!   1 to 4 ranks, each with its own part of the type x op matrix (a cold kernel cache
//!   compiles every kernel a run needs, so the matrix is spread over the rank counts);
//!   `collectives_mpi.c`: the same checks under `mpirun`, the unique id passed with
//!   `MPI_Bcast` as NCCL's examples do;
//! - `lifecycle.c`: configs, bad arguments, nonblocking init, split, InitAll,
//!   finalize/destroy and abort from another thread; `groups.c`: groups of sends and
//!   receives, of two communicators, nested and failing ones, simulate, memory and windows,
//!   refused functions (both on `world.h`);
//! - `shrink.c`: 4 processes started here (`jitccl launch` would end them all when one
//!   dies); rank 2 kills itself, the others shrink the communicator and go on. With
//!   `--healthy` (3 ranks, none dies): a shrink that leaves the parent usable by all, and
//!   a grow of the shrunk communicator back to 3 ranks, the excluded rank joining it anew;
//! - `wire.c`: jitccl.h's wire formats (names, the five wired collectives within their
//!   bounds and alike on every rank, groups, refusals) at 3 ranks, and what `JITCCL_WIRE`
//!   does to NCCL's own calls (nothing unless set) at 2;
//! - `process_group.c`: jitccl.h's process group at 2 ranks: every function, bad handles,
//!   works of jobs in order, a refused job, a bounded wait, the watchdog and abort;
//! - `abi_layout.c`: the header's layouts and values, against `abi_layout.expected`;
//! - the library's exports (`nm -D`) against `nccl-2.30-symbols.txt` and the functions
//!   `include/jitccl.h` declares, and its soname.
//!
//! Every process has a hard time limit, so a hang fails the test instead of the suite. A C
//! compiler, binutils (`nm`, `readelf`) and Open MPI (`mpirun`, `mpicc`) are test
//! requirements (scripts/setup.sh installs them): their absence fails, not skips.

mod common;

use std::collections::BTreeSet;
use std::fs::File;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::*;

// ---- Collectives ------------------------------------------------------------------------

const ALL_TYPES: &str = "int8,uint8,int32,uint32,int64,uint64,half,float,double,bfloat16,fp8e4m3,fp8e5m2";
const ALL_OPS: &str = "sum,prod,max,min,avg,premulsum";

/// The runs of collectives.c: ranks, options, and the fewest checks each rank must pass.
/// Each compiles the kernels its types, ops and sizes need, so the type x op matrix is
/// spread over the rank counts: every type with Sum (every collective) at 2 ranks, every op
/// on float and int32 at 3, Avg and PreMulSum of the narrow floats at 2, of integers at 1,
/// and a count above a FIFO slot at 4.
const RUNS: &[(usize, &[&str], u64)] = &[
    (1, &["--types", "int8,uint32,float", "--ops", "sum,avg,premulsum"], 500),
    (2, &["--types", ALL_TYPES, "--ops", "sum"], 1300),
    (2, &["--types", "half,bfloat16,fp8e4m3,fp8e5m2", "--ops", "avg,premulsum", "--colls", "allreduce"], 100),
    (3, &["--types", "float,int32", "--ops", ALL_OPS, "--colls", "allreduce,reduce,reducescatter"], 450),
    (4, &["--types", "float,half,uint8", "--ops", "sum,avg", "--big", "300000", "--big-types", "float"], 450),
];

/// One after another (they are CPU-bound and share kernels: side by side they would compile
/// each one twice); every run is made, and the failures reported together.
#[test]
fn collectives_at_1_to_4_ranks() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let exe = compile("collectives", tmp.path(), true, false);
    let failed: Vec<String> = RUNS
        .iter()
        .enumerate()
        .filter_map(|(i, (n, args, min))| {
            launch(&exe, *n, args, tmp.path(), &format!("collectives-{i}")).check_passed(*n, *min).err()
        })
        .collect();
    assert!(failed.is_empty(), "{} of {} runs failed:\n\n{}", failed.len(), RUNS.len(), failed.join("\n\n"));
}

#[test]
fn collectives_under_mpirun_with_the_id_from_mpi_bcast() {
    let version = match Command::new("mpirun").arg("--version").output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or_default().to_string(),
        Err(e) => panic!("mpirun cannot be run ({e}): install Open MPI (scripts/setup.sh installs openmpi-bin)"),
    };
    let tmp = tempfile::tempdir().expect("temporary directory");
    let exe = compile("collectives_mpi", tmp.path(), true, true);
    let mut cmd = Command::new("mpirun");
    rank_env(&mut cmd).env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1").args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        "3",
    ]);
    for v in ["JITCCL_DEVICE", "JITCCL_TIMEOUT", "JITCCL_BOOTSTRAP_TIMEOUT"] {
        cmd.args(["-x", v]);
    }
    cmd.arg(&exe).args(["--types", "float,int8", "--ops", "sum,min"]);
    let out = run(cmd, tmp.path(), "mpirun");
    assert!(out.status.is_some(), "{version}\n{}", out.report());
    out.assert_passed(3, 300);
}

// ---- Wire formats -------------------------------------------------------------------------

#[test]
fn wire_formats_from_c_and_the_jitccl_wire_default() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let exe = compile("wire", tmp.path(), true, false);
    // The ranks share a host, where wires run exactly unless JITCCL_WIRE_LOCAL=encode.
    let encode = ("JITCCL_WIRE_LOCAL", "encode");
    launch_with(&exe, 3, &[], &[encode], tmp.path(), "wire").assert_passed(3, 100);
    // A program that cannot change: JITCCL_WIRE alone turns the wire on, and only where set.
    launch_with(&exe, 2, &["--default", "bf16"], &[("JITCCL_WIRE", "bf16"), encode], tmp.path(), "wire-env-bf16")
        .assert_passed(2, 18);
    launch_with(&exe, 2, &["--default", "exact"], &[encode], tmp.path(), "wire-env-unset").assert_passed(2, 18);
}

// ---- The process group ------------------------------------------------------------------

/// `process_group.c` at 2 ranks: jitcclProcessGroupX and jitcclWorkX (every function, bad
/// handles, works in order, a refused job, a bounded wait, the watchdog's timeout and abort).
#[test]
fn process_group_from_c_at_2_ranks() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let exe = compile("process_group", tmp.path(), true, false);
    let out = launch(&exe, 2, &[], tmp.path(), "process_group");
    // The watchdog's and abort's checks are rank 0's.
    out.assert_passed_each(&[108, 89]);
    assert!(out.stdout.contains("the watchdog ended a send"), "{}", out.report());
}

// ---- Lifecycle, groups and shrink -------------------------------------------------------

/// The fewest checks a rank of `lifecycle.c` and of `groups.c` makes (1 to 3 ranks make
/// 131-139 and 80-83).
const LIFECYCLE_CHECKS: u64 = 125;
const GROUPS_CHECKS: u64 = 75;

/// `lifecycle.c` and `groups.c` at `nranks`, each rank passing at least the checks given.
fn lifecycle(nranks: usize) {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let exe = compile("lifecycle", tmp.path(), true, false);
    let out = launch(&exe, nranks, &[], tmp.path(), "lifecycle");
    out.assert_passed(nranks, LIFECYCLE_CHECKS);
    if nranks >= 2 {
        // The abort from another thread ended the AllReduce rank 1 skipped, promptly.
        assert!(out.stdout.contains("the AllReduce rank 1 skipped returned"), "{}", out.report());
    }
    let exe = compile("groups", tmp.path(), true, false);
    launch(&exe, nranks, &[], tmp.path(), "groups").assert_passed(nranks, GROUPS_CHECKS);
}

#[test]
fn lifecycle_1_rank() {
    lifecycle(1);
}

#[test]
fn lifecycle_2_ranks() {
    lifecycle(2);
}

#[test]
fn lifecycle_3_ranks() {
    lifecycle(3);
}

/// jitccl's shared memory names: `jitccl-<pid>-…` (runtime/src/transport/shm.rs).
fn shm_of(pids: &[u32]) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/dev/shm") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok().and_then(|e| e.file_name().into_string().ok()))
        .filter(|n| pids.iter().any(|p| n.starts_with(&format!("jitccl-{p}-"))))
        .collect()
}

#[test]
fn shrink_survives_a_killed_rank() {
    const N: usize = 4;
    const DEAD: usize = 2;
    let tmp = tempfile::tempdir().expect("temporary directory");
    let exe = compile("shrink", tmp.path(), true, false);
    let comm_id = format!("127.0.0.1:{}", free_port());
    let mut children = Vec::new();
    for r in 0..N {
        let mut cmd = Command::new(&exe);
        rank_env(&mut cmd)
            // A dead peer is found by its closed connections; the timeout only bounds it.
            .env("JITCCL_TIMEOUT", "20")
            .env("NCCL_COMM_ID", &comm_id)
            .env("RANK", r.to_string())
            .env("WORLD_SIZE", N.to_string())
            .args(["--dead", &DEAD.to_string()])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(File::create(tmp.path().join(format!("{r}.stdout"))).expect("stdout file"))
            .stderr(File::create(tmp.path().join(format!("{r}.stderr"))).expect("stderr file"));
        children.push(cmd.spawn().expect("start a rank of shrink"));
    }
    let pids: Vec<u32> = children.iter().map(Child::id).collect();
    let (status, took) = wait_all(&mut children, LIMIT);
    let outcome = |r: usize| {
        let read = |s: &str| std::fs::read_to_string(tmp.path().join(format!("{r}.{s}"))).unwrap_or_default();
        Outcome {
            what: format!("shrink rank {r} of {N}"),
            status: status[r],
            stdout: read("stdout"),
            stderr: read("stderr"),
            took,
        }
    };
    for r in 0..N {
        let o = outcome(r);
        if r == DEAD {
            assert_eq!(
                o.status.and_then(|s| s.signal()),
                Some(SIGKILL),
                "rank {DEAD} should die of SIGKILL\n{}",
                o.report()
            );
            assert!(o.stdout.contains("dying"), "{}", o.report());
        } else {
            assert!(o.status.is_some_and(|s| s.success()), "{}", o.report());
            let passed = o.checks_passed(r);
            assert!(passed.len() == 1 && passed[0] >= 9, "rank {r}: checks passed {passed:?}\n{}", o.report());
        }
    }
    let left = shm_of(&pids);
    assert!(left.is_empty(), "shared memory left in /dev/shm by the ranks (pids {pids:?}): {left:?}");
    eprintln!("shrink: 4 ranks, one killed, passed in {:.1} s", took.as_secs_f64());
}

#[test]
fn shrink_of_a_healthy_comm_leaves_the_parent_usable() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let exe = compile("shrink", tmp.path(), true, false);
    let mut cmd = Command::new(&built().jitccl);
    rank_env(&mut cmd)
        // A mismatched rendezvous fails after this, not after a minute.
        .env("JITCCL_BOOTSTRAP_TIMEOUT", "15")
        .args(["launch", "-n", "3", "--timeout", &(LIMIT.as_secs() - 10).to_string(), "--"])
        .arg(&exe)
        .arg("--healthy")
        .arg(tmp.path().join("grow-id"))
        .env("NCCL_COMM_ID", format!("127.0.0.1:{}", free_port()));
    run(cmd, tmp.path(), "shrink-healthy").assert_passed(3, 3);
}

// ---- The library's interface ------------------------------------------------------------

#[test]
fn abi_layout_matches_nccl_2_30() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let exe = compile("abi_layout", tmp.path(), false, false);
    let out = run(Command::new(&exe), tmp.path(), "abi_layout");
    assert!(out.status.is_some_and(|s| s.success()), "{}", out.report());
    let expected = std::fs::read_to_string(capi_dir().join("tests/abi_layout.expected")).expect("abi_layout.expected");
    let (got, want): (Vec<&str>, Vec<&str>) = (out.stdout.lines().collect(), expected.lines().collect());
    let diff: Vec<String> = (0..got.len().max(want.len()))
        .filter(|&i| got.get(i) != want.get(i))
        .map(|i| format!("line {}: expected {:?}, got {:?}", i + 1, want.get(i), got.get(i)))
        .collect();
    assert!(diff.is_empty(), "abi_layout.c's output differs from abi_layout.expected:\n{}", diff.join("\n"));
    assert!(want.len() > 100, "abi_layout.expected has only {} lines", want.len());
}

fn tool(name: &str, args: &[&str], file: &Path) -> String {
    let out = Command::new(name)
        .args(args)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {name} ({e}): install binutils"));
    assert!(out.status.success(), "{name} {args:?} {}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

#[test]
fn exports_are_nccl_2_30s_and_the_soname_is_libnccl_so_2() {
    let lib = built().dir.join("libnccl.so");
    let want: BTreeSet<String> = std::fs::read_to_string(capi_dir().join("tests/nccl-2.30-symbols.txt"))
        .expect("nccl-2.30-symbols.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    // nccl.h's 64 pairs and 6 of the device API's host calls.
    assert!(want.len() == 140, "nccl-2.30-symbols.txt lists {} symbols, expected 140 (70 pairs)", want.len());
    // "<address> <type> <name>" for each defined dynamic symbol.
    let mut got = BTreeSet::new();
    let mut not_code = Vec::new();
    for line in tool("nm", &["-D", "--defined-only"], &lib).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (kind, name) = match f.as_slice() {
            [_, kind, name] => (*kind, *name),
            [kind, name] => (*kind, *name),
            _ => continue,
        };
        let name = name.split('@').next().unwrap_or(name).to_string();
        if kind != "T" {
            not_code.push(format!("{name} ({kind})"));
        }
        got.insert(name);
    }
    // jitccl's own functions: every one jitccl.h declares, once (no profiling twin).
    let header = std::fs::read_to_string(capi_dir().join("include/jitccl.h")).expect("include/jitccl.h");
    let own: BTreeSet<String> = header
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("jitccl") && header.contains(&format!("ncclResult_t {w}(")))
        .map(String::from)
        .collect();
    assert!(own.len() == 17, "jitccl.h declares {} functions, expected 17: {own:?}", own.len());
    let want: BTreeSet<String> = want.union(&own).cloned().collect();
    let missing: Vec<&String> = want.difference(&got).collect();
    let extra: Vec<&String> = got.difference(&want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "exports of {}: missing {missing:?}, neither NCCL's nor jitccl.h's {extra:?}",
        lib.display()
    );
    assert!(not_code.is_empty(), "exports that are not functions in .text: {not_code:?}");
    for name in want.difference(&own) {
        let twin =
            name.strip_prefix('p').filter(|n| n.starts_with("nccl")).map_or_else(|| format!("p{name}"), String::from);
        assert!(want.contains(&twin), "{name} has no {twin} in nccl-2.30-symbols.txt");
    }
    let dynamic = tool("readelf", &["-d"], &lib);
    let soname = dynamic.lines().find(|l| l.contains("(SONAME)")).unwrap_or_else(|| panic!("no SONAME in:\n{dynamic}"));
    assert!(soname.contains("[libnccl.so.2]"), "soname: {soname}");
    let link = built().dir.join("libnccl.so.2");
    assert_eq!(
        std::fs::canonicalize(&link).ok(),
        std::fs::canonicalize(&lib).ok(),
        "{} should lead to libnccl.so",
        link.display()
    );
}
