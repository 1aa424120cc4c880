//! A rank process that dies during init (issue 42): every surviving rank fails within 5 s
//! (not at the 30 s bootstrap timeout) with an error that names the dead rank, whichever
//! rank died (rank 0, which serves the store and runs the bootstrap root; a middle rank;
//! the last rank) and wherever init was: before the store is up, while the ranks join,
//! during the ring, during transport setup; over shared memory and over TCP; blocking and
//! nonblocking; and in the exchanges of a split or shrink after init. No /dev/shm segment
//! is left behind.
//!
//! The ranks are this test binary re-run as children, one process each, with torchrun's
//! variables (not `jitccl launch`, which ends every rank when one dies); a child dies at a
//! point of init through the test-only `JITCCL_TEST_DIE_AT` (SIGKILL, as a crash or the OOM
//! killer), or pauses through `JITCCL_TEST_PAUSE_AT` (runtime/src/bootstrap/test_hook.rs).

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use jitccl::{Comm, Config};

const NRANKS: usize = 4;
/// Set in a child: it is one rank.
const CHILD_VAR: &str = "JITCCL_INIT_DEATHS_RANK";
/// Set in a child: once init has ended, it does this (`split`, `shrink`) or, with `die`,
/// dies.
const AFTER_VAR: &str = "JITCCL_INIT_DEATHS_AFTER";
/// How soon after the death every survivor must have failed.
const FAST: Duration = Duration::from_secs(5);
/// A child still running past this is killed (and the test fails): nothing hangs.
const LIMIT: Duration = Duration::from_secs(40);
/// The bootstrap timeout, far above `FAST`: only a death that is noticed passes.
const TIMEOUT: &str = "30";

/// One rank, in a child process; does nothing in a normal run.
#[test]
fn rank_process() {
    if std::env::var(CHILD_VAR).is_err() {
        return;
    }
    // Nonblocking (JITCCL_COMM_BLOCKING=0), init goes on in the background and its
    // failure becomes the communicator's error, which `wait_ready` returns.
    let comm = match Comm::init_from_env(&Config::default()).and_then(|c| c.wait_ready(LIMIT).map(|_| c)) {
        Ok(comm) => comm,
        Err(e) => return println!("INIT FAILED: {e}"),
    };
    let Ok(after) = std::env::var(AFTER_VAR) else { return println!("INIT ENDED") };
    let done = match after.as_str() {
        "die" => {
            // SAFETY: raising a signal on this process (SIGKILL: it does not return).
            unsafe { libc::raise(libc::SIGKILL) };
            return;
        }
        "split" => comm.split(0, comm.rank() as i64).map(drop),
        "shrink" => comm.shrink(&[], &Config::default(), false).map(drop),
        other => panic!("{AFTER_VAR}={other}?"),
    };
    match done {
        Ok(()) => println!("{after} ENDED"),
        Err(e) => println!("{after} FAILED: {e}"),
    }
}

/// How one scenario ends for a rank.
struct Ended {
    status: ExitStatus,
    at: Instant,
    out: String,
}

/// Starts the ranks, `victim` dying as `dies` says (a variable and its value) and `pause` =
/// (rank, `point+ms`) pausing; `env` for every rank. Returns how each rank ended.
fn run(victim: usize, dies: (&str, &str), pause: Option<(usize, &str)>, env: &[(&str, &str)]) -> Vec<Ended> {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let mut children: Vec<_> = (0..NRANKS)
        .map(|r| {
            let mut cmd = Command::new(std::env::current_exe().unwrap());
            cmd.args(["--exact", "rank_process", "--nocapture", "--test-threads=1"])
                .env(CHILD_VAR, "1")
                .env_remove("JITCCL_COMM_ID")
                .envs([("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", &port), ("WORLD_SIZE", "4")])
                .envs([("RANK", r.to_string()), ("JITCCL_SOCKET_IFNAME", "lo".into())])
                .env("JITCCL_BOOTSTRAP_TIMEOUT", TIMEOUT)
                .envs(env.iter().copied())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if r == victim {
                cmd.env(dies.0, dies.1);
            }
            if let Some((_, at)) = pause.filter(|(p, _)| *p == r) {
                cmd.env("JITCCL_TEST_PAUSE_AT", at);
            }
            let mut child = cmd.spawn().expect("start a rank");
            let pipes = [read_all(child.stdout.take().unwrap()), read_all(child.stderr.take().unwrap())];
            (child, pipes, None)
        })
        .collect();
    let t0 = Instant::now();
    while children.iter().any(|(_, _, end)| end.is_none()) && t0.elapsed() < LIMIT {
        for (child, _, end) in children.iter_mut().filter(|(_, _, end)| end.is_none()) {
            *end = child.try_wait().unwrap().map(|status| (status, Instant::now()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let pids: Vec<u32> = children.iter().map(|(c, _, _)| c.id()).collect();
    let ended: Vec<Ended> = children
        .into_iter()
        .enumerate()
        .map(|(r, (mut child, pipes, end))| {
            if end.is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
            let out = pipes.map(|p| p.join().unwrap()).join("");
            let (status, at) = end.unwrap_or_else(|| panic!("rank {r} still ran after {LIMIT:?}:\n{out}"));
            Ended { status, at, out }
        })
        .collect();
    for pid in pids {
        let left: Vec<_> = std::fs::read_dir("/dev/shm")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| name.starts_with(&format!("jitccl-{pid}-")))
            .collect();
        assert!(left.is_empty(), "process {pid} left {left:?} in /dev/shm");
    }
    ended
}

fn read_all(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    })
}

/// `victim` died at `die_at` of init: every other rank failed within [`FAST`] of its death,
/// with an error that says `named`. Returns how long each survivor took.
fn survivors_fail(
    victim: usize, die_at: &str, pause: Option<(usize, &str)>, env: &[(&str, &str)], named: &str,
) -> Vec<Duration> {
    let ended = run(victim, ("JITCCL_TEST_DIE_AT", die_at), pause, env);
    survivors_failed(victim, die_at, &ended, "INIT", env, named)
}

/// `victim` died as `how` says; every other rank's `what` failed within [`FAST`] of its
/// death, saying `named`.
fn survivors_failed(
    victim: usize, how: &str, ended: &[Ended], what: &str, env: &[(&str, &str)], named: &str,
) -> Vec<Duration> {
    let all = || ended.iter().enumerate().map(|(r, e)| format!("--- rank {r}:\n{}", e.out)).collect::<String>();
    let dead = &ended[victim];
    assert_eq!(dead.status.signal(), Some(libc::SIGKILL), "rank {victim} did not die ({how}):\n{}", all());
    let mut took = Vec::new();
    let failed = format!("{what} FAILED: ");
    for (r, e) in ended.iter().enumerate().filter(|(r, _)| *r != victim) {
        let error = e.out.lines().find_map(|l| l.split_once(failed.as_str()).map(|(_, e)| e));
        let error = error.unwrap_or_else(|| panic!("rank {r} did not fail ({}):\n{}", e.status, all()));
        assert!(error.contains(named), "rank {r} should name rank {victim} ({named:?}): {error}\n{}", all());
        assert!(error.contains(&format!("rank {r}")), "rank {r}'s error should name it: {error}");
        took.push(e.at.saturating_duration_since(dead.at));
    }
    eprintln!("rank {victim} dead ({how}) {env:?}: the others' {what} failed {took:?} later");
    assert!(took.iter().all(|t| *t < FAST), "too slow: {took:?}\n{}", all());
    took
}

fn gone(victim: usize) -> String {
    format!("rank {victim} is gone")
}

/// Nothing can tell a rank that died before it reached the store from one slow to start:
/// the others wait the whole bootstrap timeout (2 s here), then name it.
#[test]
fn dying_before_the_store_is_up() {
    let short = [("JITCCL_BOOTSTRAP_TIMEOUT", "2")];
    survivors_fail(0, "store", None, &short, "the store that rank 0 serves");
    for victim in [1, 3] {
        survivors_fail(victim, "store", None, &short, &format!("rank(s) {victim} of 4 never connected"));
    }
}

/// The victim dies a second after its hello, while another rank is paused before its own
/// (it has the unique id): the ranks that joined hear it from the root (or see the root's
/// process go), the late one when it says hello: the root tells it (the late rank is
/// rank 0, which runs the root and so outlives its verdict), or refuses it (the root's
/// process died: rank 0 is named). A rank that arrives after rank 0's process has ended
/// can only say so: nothing left knows who died first.
#[test]
fn dying_while_ranks_join() {
    for victim in [0, 1, 3] {
        let late = if victim == 0 { 3 } else { 0 };
        survivors_fail(victim, "hello+1000", Some((late, "join+2000")), &[], &gone(victim));
    }
}

/// The victim dies with its segment created and its name still in /dev/shm: the survivors
/// remove the name (`run` checks that nothing is left).
#[test]
fn dying_with_a_segment_not_yet_unlinked() {
    for victim in [0, 2] {
        survivors_fail(victim, "segment", None, &[], &gone(victim));
    }
}

#[test]
fn dying_during_the_ring() {
    for victim in [0, 1, 3] {
        survivors_fail(victim, "ring", None, &[], &gone(victim));
    }
}

#[test]
fn dying_during_transport_setup_over_shared_memory() {
    for victim in [0, 1, 3] {
        survivors_fail(victim, "transport", None, &[], &gone(victim));
    }
}

/// Over TCP the survivors wait in the transport's own connection setup, which the root's
/// word ends.
#[test]
fn dying_during_transport_setup_over_tcp() {
    for victim in [0, 1, 3] {
        survivors_fail(victim, "transport", None, &[("JITCCL_TRANSPORT", "net")], &gone(victim));
    }
    survivors_fail(1, "ring", None, &[("JITCCL_TRANSPORT", "net")], &gone(1));
}

#[test]
fn a_nonblocking_init_fails_with_the_death() {
    let nonblocking = [("JITCCL_COMM_BLOCKING", "0")];
    survivors_fail(1, "ring", None, &nonblocking, &gone(1));
    survivors_fail(0, "transport", None, &nonblocking, &gone(0));
}

/// After init, exchanges over the parent's bootstrap: a split (every rank takes part) and a
/// shrink that does not exclude the dead rank 0 (which would make the child's unique id:
/// the others wait to receive it).
#[test]
fn dying_before_a_split_or_shrink() {
    for (victim, what, env) in
        [(3, "split", &[][..]), (1, "split", &[("JITCCL_TRANSPORT", "net")][..]), (0, "shrink", &[][..])]
    {
        let ended = run(victim, (AFTER_VAR, "die"), None, &[&[(AFTER_VAR, what)], env].concat());
        survivors_failed(victim, "after init", &ended, what, env, &gone(victim));
    }
}
