//! Faults of whole hosts (see `common/hosts.rs`): a host whose ranks are all killed in the
//! middle of a collective fails every other rank within 2 s, naming them, and the
//! survivors shrink to a communicator whose collectives are right; a host whose ranks
//! stall (SIGSTOP) for longer than the link timeout but less than the operation timeout
//! costs only time: its link still answers, and the call completes with right results.
//! Needs root and iproute2.
//!
//! The ranks are this test binary re-run as children (`rank_process`), one process each,
//! with torchrun's variables; the harness places them on the hosts.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[path = "common/hosts.rs"]
mod hosts;

use hosts::{Hosts, Ranks};
use jitccl::{Comm, Config, Op};

/// Set in a child: its part (`member`).
const ROLE: &str = "JITCCL_HOST_FAULTS_ROLE";
/// Set in a child: the ranks the survivors shrink without (`2,3`).
const EXCLUDE: &str = "JITCCL_HOST_FAULTS_EXCLUDE";
/// Elements of each checked AllReduce: large enough that a rank spends most of its time
/// inside one.
const COUNT: usize = 1 << 18;
/// How soon after a host's ranks are killed every other rank must have failed.
const FAST: Duration = Duration::from_secs(2);

/// Milliseconds of the wall clock, which the test and its children share.
fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("a clock after 1970").as_millis()
}

/// Rank `rank`'s `i`-th input element in round `salt`: small whole numbers, whose sums a
/// float holds exactly.
fn value(rank: usize, salt: usize, i: usize) -> f32 {
    ((rank * 7 + i + salt) % 61) as f32
}

/// A sum AllReduce on `comm`, whose rank k was rank `members[k]` of the job, checked
/// against the plain sum; a wrong element panics, a failed call is returned.
fn checked_all_reduce(comm: &Comm, members: &[usize], salt: usize) -> jitccl::Result<()> {
    let me = members[comm.rank()];
    let data: Vec<f32> = (0..COUNT).map(|i| value(me, salt, i)).collect();
    let buf = comm.device().alloc_from(&data)?;
    let stream = comm.device().stream()?;
    comm.all_reduce(&buf, &buf, COUNT, Op::Sum, &stream)?;
    stream.synchronize()?;
    for (i, got) in buf.to_vec().into_iter().enumerate() {
        let want: f32 = members.iter().map(|&m| value(m, salt, i)).sum();
        assert_eq!(got, want, "rank {me}, round {salt}, element {i} of an AllReduce over ranks {members:?}");
    }
    Ok(())
}

/// The ranks listed in variable `var` (`2,3`).
fn ranks_in(var: &str) -> Vec<usize> {
    let list = std::env::var(var).unwrap_or_default();
    list.split(',').filter(|s| !s.is_empty()).map(|s| s.parse().expect("a rank")).collect()
}

/// One rank, in a child process; does nothing in a normal run.
#[test]
fn rank_process() {
    let Ok(role) = std::env::var(ROLE) else { return };
    match role.as_str() {
        "member" => member(),
        other => panic!("{ROLE}={other}?"),
    }
}

/// A rank of the job: AllReduces until one fails (a host died), then shrinks without the
/// ranks of [`EXCLUDE`] and checks the shrunk communicator.
fn member() {
    let comm = Comm::init_from_env(&Config::default()).expect("init");
    let world: Vec<usize> = (0..comm.nranks()).collect();
    let mut round = 0;
    let err = loop {
        if let Err(e) = checked_all_reduce(&comm, &world, round) {
            break e;
        }
        if round == 2 {
            println!("RUNNING");
        }
        round += 1;
    };
    println!("FAILED at {} ms: {err}", now_ms());
    let exclude = ranks_in(EXCLUDE);
    let shrunk = comm.shrink(&exclude, &Config::default(), true).expect("shrink");
    let survivors: Vec<usize> = world.iter().copied().filter(|r| !exclude.contains(r)).collect();
    assert_eq!((shrunk.nranks(), survivors[shrunk.rank()]), (survivors.len(), world[comm.rank()]));
    for salt in [1000, 1001] {
        checked_all_reduce(&shrunk, &survivors, salt).expect("an AllReduce of the shrunk communicator");
    }
    println!("SHRUNK to {} ranks", shrunk.nranks());
}

fn hosts(h: usize) -> Hosts {
    Hosts::new(h).unwrap_or_else(|e| panic!("cannot create {h} test hosts (needs root and iproute2): {e}"))
}

/// Starts `h` hosts × `l` ranks of [`rank_process`] as `role`, with `env`; returns once
/// every rank runs its collectives.
fn start<'h>(hosts: &'h Hosts, l: usize, role: &str, env: &[(&str, &str)]) -> Ranks<'h> {
    let exe = std::env::current_exe().expect("the test binary");
    let args = ["--exact", "rank_process", "--nocapture", "--test-threads=1"];
    // The operation and link timeouts are far beyond FAST: only a death that is noticed
    // as such passes.
    let common = [(ROLE, role), ("JITCCL_TIMEOUT", "60"), ("JITCCL_LINK_TIMEOUT", "30")];
    let placement = Hosts::blocked(hosts.len(), l);
    let mut ranks = hosts.ranks(&placement, Path::new(&exe), &args, &[&common[..], env].concat());
    for r in 0..placement.len() {
        assert!(ranks.wait_for(r, "RUNNING", Duration::from_secs(60)), "rank {r} did not get going");
    }
    ranks
}

/// Kills every rank of host `host` (`l` ranks a host) with SIGKILL; the wall clock just
/// before.
fn kill_host(ranks: &Ranks, host: usize, l: usize) -> u128 {
    let at = now_ms();
    for r in host * l..(host + 1) * l {
        // SAFETY: signalling a child we started (and have not yet waited for).
        assert_eq!(unsafe { libc::kill(ranks.pid(r) as i32, libc::SIGKILL) }, 0, "killing rank {r}");
    }
    at
}

#[test]
fn a_killed_host_fails_the_others_at_once_and_they_shrink_without_it() {
    let (h, l, dead) = (3, 2, 1);
    let hosts = hosts(h);
    let gone: Vec<usize> = (dead * l..(dead + 1) * l).collect();
    let list = gone.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    let ranks = start(&hosts, l, "member", &[(EXCLUDE, &list)]);
    let killed = kill_host(&ranks, dead, l);
    let ends = ranks.finish(Duration::from_secs(60));
    for e in ends.iter().filter(|e| !gone.contains(&e.rank)) {
        assert!(e.success() && e.stdout.contains(&format!("SHRUNK to {} ranks", h * l - l)), "{e}");
        let line = e.stdout.lines().find(|l| l.starts_with("FAILED at ")).unwrap_or_else(|| panic!("{e}"));
        let at: u128 = line["FAILED at ".len()..].split(' ').next().and_then(|t| t.parse().ok()).expect("a time");
        let after = Duration::from_millis((at - killed) as u64);
        eprintln!("rank {} failed {after:?} after host {dead} was killed: {line}", e.rank);
        assert!(after < FAST, "rank {} failed only {after:?} after the kill: {e}", e.rank);
        assert!(gone.iter().any(|g| line.contains(&format!("rank {g} "))), "rank {} does not name a dead rank: {e}", e.rank);
    }
}

/// Sends `sig` to every rank of host `host` (`l` ranks a host).
fn signal_host(ranks: &Ranks, host: usize, l: usize, sig: i32) {
    for r in host * l..(host + 1) * l {
        // SAFETY: signalling a child we started (and have not yet waited for).
        assert_eq!(unsafe { libc::kill(ranks.pid(r) as i32, sig) }, 0, "signal {sig} to rank {r}");
    }
}

#[test]
fn a_host_that_stalls_for_less_than_the_timeout_costs_only_time() {
    let (l, stall) = (2, Duration::from_secs(4));
    let hosts = hosts(2);
    let args = ["perf", "all_reduce", "-N", "4", "-b", "64K", "-e", "256K", "-w", "1", "-n", "40"];
    // A link timeout shorter than the stall: a stopped process's kernel still answers for
    // its connections, so the link is not lost; the operation timeout is far longer.
    let env = [("JITCCL_LINK_TIMEOUT", "2"), ("JITCCL_TIMEOUT", "60")];
    let exe = Path::new(env!("CARGO_BIN_EXE_jitccl"));
    let mut ranks = hosts.ranks(&Hosts::blocked(2, l), exe, &args, &env);
    assert!(ranks.wait_for(0, " 65536 ", Duration::from_secs(90)), "the sweep did not get going");
    signal_host(&ranks, 1, l, libc::SIGSTOP);
    std::thread::sleep(stall);
    let during = ranks.exited();
    signal_host(&ranks, 1, l, libc::SIGCONT);
    let ends = ranks.finish(Duration::from_secs(90));
    for e in &ends {
        assert!(e.success(), "a {stall:?} stall of host 1 failed the job: {e}");
    }
    assert!(during.is_empty(), "rank(s) {during:?} ended during the stall");
    assert!(ends[0].stdout.contains("# Out of bounds values : 0 OK"), "{}", ends[0]);
}
