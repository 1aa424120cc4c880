//! Faults of whole hosts (see `tests/common/hosts.rs`): a host whose ranks are all killed in the
//! middle of a collective fails every other rank within 2 s, naming them (at least one); the
//! survivors shrink to a communicator whose collectives are right, and new ranks started
//! on that host join it again (`grow`); after a link cut has failed and aborted a
//! communicator, a new one between the same hosts works once the link is back; a host whose ranks
//! stall (SIGSTOP) for longer than the link timeout but less than the operation timeout
//! costs only time: its link still answers, and the call completes with right results.
//! Needs root and iproute2.
//!
//! The ranks are this test binary re-run as children (`rank_process`), one process each,
//! with torchrun's variables; the harness places them on the hosts.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[path = "../../tests/common/hosts.rs"]
mod hosts;

use hosts::{Hosts, RankEnd, Ranks};
use jitccl::store::{Server, Store, TcpStore};
use jitccl::{Comm, Config, Op, UniqueId};

/// Set in a child: its part (`member`: a rank of the job; `joiner`: a new rank that joins
/// the shrunk communicator).
const ROLE: &str = "JITCCL_HOST_FAULTS_ROLE";
/// Set in a member: the ranks the survivors shrink without (`2,3`); unset, a member whose
/// communicator failed aborts it and makes a new one.
const EXCLUDE: &str = "JITCCL_HOST_FAULTS_EXCLUDE";
/// Set in a child: the size the shrunk communicator grows to with the joiners.
const GROW_TO: &str = "JITCCL_HOST_FAULTS_GROW_TO";
/// Set in a child: `host:port` of the job's own store, which rank 0 serves (the grow id
/// and the new communicator's id go through it).
const SIDE: &str = "JITCCL_HOST_FAULTS_STORE";
/// The port of that store on rank 0's host.
const SIDE_PORT: u16 = hosts::MASTER_PORT + 1;
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
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let side: std::net::SocketAddr = var(SIDE).parse().expect("an address");
    let _server = (role == "member" && var("RANK") == "0").then(|| Server::bind(side).expect("serving the store"));
    let store = TcpStore::connect(side, Duration::from_secs(60)).expect("connecting to the store");
    match role.as_str() {
        "member" => member(&store),
        "joiner" => {
            let grown: usize = var(GROW_TO).parse().expect("a size");
            let rank = grown - var("WORLD_SIZE").parse::<usize>().expect("a size")
                + var("RANK").parse::<usize>().expect("a rank");
            let id = UniqueId::from_bytes(&store.get("grow_id").expect("the grow id")).expect("a unique id");
            let comm = Comm::init_rank(&id, grown, rank, &Config::default()).expect("joining the grown communicator");
            grown_checks(&comm);
        }
        other => panic!("{ROLE}={other}?"),
    }
}

/// AllReduces on a grown communicator (every rank's inputs made with its rank there).
fn grown_checks(comm: &Comm) {
    let all: Vec<usize> = (0..comm.nranks()).collect();
    for salt in [2000, 2001] {
        checked_all_reduce(comm, &all, salt).expect("an AllReduce of the grown communicator");
    }
    println!("GROWN to {} ranks", comm.nranks());
}

/// A rank of the job: AllReduces until one fails (a host died, a link was cut); then
/// shrinks without the ranks of [`EXCLUDE`], checks the shrunk communicator and grows it
/// back to [`GROW_TO`] ranks; or, without EXCLUDE, aborts the communicator and checks a new
/// one made through `store`.
fn member(store: &TcpStore) {
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
    if std::env::var(EXCLUDE).is_err() {
        comm.abort();
        let fresh =
            Comm::init_from_store(store, world.len(), comm.rank(), &Config::default()).expect("a new communicator");
        for salt in [3000, 3001] {
            checked_all_reduce(&fresh, &world, salt).expect("an AllReduce of the new communicator");
        }
        return println!("RENEWED");
    }
    let exclude = ranks_in(EXCLUDE);
    let shrunk = comm.shrink(&exclude, &Config::default(), true).expect("shrink");
    let survivors: Vec<usize> = world.iter().copied().filter(|r| !exclude.contains(r)).collect();
    assert_eq!((shrunk.nranks(), survivors[shrunk.rank()]), (survivors.len(), world[comm.rank()]));
    for salt in [1000, 1001] {
        checked_all_reduce(&shrunk, &survivors, salt).expect("an AllReduce of the shrunk communicator");
    }
    println!("SHRUNK to {} ranks", shrunk.nranks());
    let grown: usize = std::env::var(GROW_TO).expect("GROW_TO").parse().expect("a size");
    let id = (shrunk.rank() == 0).then(|| {
        let id = shrunk.grow_id().expect("a grow id");
        store.set("grow_id", &id.to_bytes()).expect("publishing the grow id");
        id
    });
    grown_checks(&shrunk.grow(grown, id.as_ref(), &Config::default()).expect("grow"));
}

fn hosts(h: usize) -> Hosts {
    Hosts::new(h).unwrap_or_else(|e| panic!("cannot create {h} test hosts (needs root and iproute2): {e}"))
}

/// The test binary's arguments that run [`rank_process`] alone.
const RANK_ARGS: [&str; 4] = ["--exact", "rank_process", "--nocapture", "--test-threads=1"];

/// Starts `h` hosts × `l` ranks of [`rank_process`] as members, with `env`; returns once
/// every rank runs its collectives.
fn start<'h>(hosts: &'h Hosts, l: usize, env: &[(&str, &str)]) -> Ranks<'h> {
    let exe = std::env::current_exe().expect("the test binary");
    // The operation and link timeouts are far beyond FAST: only a death that is noticed
    // as such passes.
    let side = side_store(hosts);
    let common = [(ROLE, "member"), (SIDE, &side), ("JITCCL_TIMEOUT", "60"), ("JITCCL_LINK_TIMEOUT", "30")];
    let placement = Hosts::blocked(hosts.len(), l);
    let mut ranks = hosts.ranks(&placement, Path::new(&exe), &RANK_ARGS, &[&common[..], env].concat());
    for r in 0..placement.len() {
        assert!(ranks.wait_for(r, "RUNNING", Duration::from_secs(60)), "rank {r} did not get going");
    }
    ranks
}

/// Where rank 0 serves the job's own store.
fn side_store(hosts: &Hosts) -> String {
    format!("{}:{SIDE_PORT}", hosts.addr(0))
}

/// Sends `sig` to every rank of host `host` (`l` ranks a host).
fn signal_host(ranks: &Ranks, host: usize, l: usize, sig: i32) {
    for r in host * l..(host + 1) * l {
        // SAFETY: signalling a child we started (and have not yet waited for).
        assert_eq!(unsafe { libc::kill(ranks.pid(r) as i32, sig) }, 0, "signal {sig} to rank {r}");
    }
}

/// The line in which a rank said how its communicator failed.
fn failure_line(e: &RankEnd) -> &str {
    e.stdout.lines().find(|l| l.starts_with("FAILED at ")).unwrap_or_else(|| panic!("no failure: {e}"))
}

#[test]
fn a_killed_host_fails_the_others_at_once_they_shrink_without_it_and_it_joins_again() {
    let (h, l, dead) = (3, 2, 1);
    let hosts = hosts(h);
    let gone: Vec<usize> = (dead * l..(dead + 1) * l).collect();
    let list = gone.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    let size = (h * l).to_string();
    let ranks = start(&hosts, l, &[(EXCLUDE, &list), (GROW_TO, &size)]);
    let killed = now_ms();
    signal_host(&ranks, dead, l, libc::SIGKILL);
    // The host comes back: new ranks on it join the shrunk communicator.
    let exe = std::env::current_exe().expect("the test binary");
    let side = side_store(&hosts);
    let env = [(ROLE, "joiner"), (SIDE, &side), (GROW_TO, &size), ("JITCCL_TIMEOUT", "60")];
    let joiners = hosts.ranks(&vec![dead; l], Path::new(&exe), &RANK_ARGS, &env);
    let ends = ranks.finish(Duration::from_secs(60));
    let grown = format!("GROWN to {} ranks", h * l);
    for e in ends.iter().filter(|e| !gone.contains(&e.rank)) {
        assert!(e.success() && e.stdout.contains(&format!("SHRUNK to {} ranks", h * l - l)), "{e}");
        assert!(e.stdout.contains(&grown), "{e}");
        let line = failure_line(e);
        let at: u128 = line["FAILED at ".len()..].split(' ').next().and_then(|t| t.parse().ok()).expect("a time");
        let after = Duration::from_millis((at - killed) as u64);
        eprintln!("rank {} failed {after:?} after host {dead} was killed: {line}", e.rank);
        assert!(after < FAST, "rank {} failed only {after:?} after the kill: {e}", e.rank);
        assert!(
            gone.iter().any(|g| line.contains(&format!("rank {g} "))),
            "rank {} does not name a dead rank: {e}",
            e.rank
        );
    }
    for e in joiners.finish(Duration::from_secs(30)) {
        assert!(e.success() && e.stdout.contains(&grown), "joiner {e}");
    }
}

/// A link cut longer than the link timeout fails both ranks; each aborts its communicator,
/// and once the link is back a new communicator between the same hosts gives right results.
#[test]
fn after_an_abort_a_new_communicator_works_once_the_link_is_back() {
    let hosts = hosts(2);
    let mut ranks = start(&hosts, 1, &[("JITCCL_LINK_TIMEOUT", "3")]);
    hosts.cut(1).unwrap();
    for r in 0..2 {
        assert!(ranks.wait_for(r, "FAILED at", Duration::from_secs(20)), "rank {r} did not fail on the cut");
    }
    hosts.restore(1).unwrap();
    for e in ranks.finish(Duration::from_secs(60)) {
        assert!(e.success() && e.stdout.contains("RENEWED"), "{e}");
        assert!(
            failure_line(&e).contains(&format!("rank {}", 1 - e.rank)),
            "rank {} does not name its peer: {e}",
            e.rank
        );
    }
}

#[test]
fn a_host_that_stalls_for_less_than_the_timeout_costs_only_time() {
    let (l, stall) = (2, Duration::from_secs(4));
    let hosts = hosts(2);
    let args = ["perf", "all_reduce", "-N", "4", "-b", "64K", "-e", "1M", "-w", "1", "-n", "40"];
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

/// 1% of one host's packets dropped, each way: the results stay right (TCP resends what is
/// lost). The sweep's table with and without the loss is printed, for the slowdown
/// docs/performance.md reports (`-- --nocapture`).
#[test]
fn one_percent_packet_loss_keeps_results_right() {
    let hosts = hosts(2);
    let args = ["perf", "all_reduce", "-N", "2", "-b", "64K", "-e", "4M", "-f", "8", "-w", "1", "-n", "8"];
    let exe = Path::new(env!("CARGO_BIN_EXE_jitccl"));
    for percent in [0, 1] {
        hosts.drop_share(1, percent).unwrap();
        let ends = hosts.ranks(&[0, 1], exe, &args, &[("JITCCL_TIMEOUT", "60")]).finish(Duration::from_secs(120));
        for e in &ends {
            assert!(e.success(), "{percent}% loss: {e}");
        }
        assert!(ends[0].stdout.contains("# Out of bounds values : 0 OK"), "{percent}% loss: {}", ends[0]);
        let table: Vec<&str> = ends[0].stdout.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).collect();
        eprintln!("{percent}% loss:\n{}", table.join("\n"));
    }
}
