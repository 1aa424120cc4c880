//! Ranks in separate processes: every collective and protocol through `jitccl perf` (which
//! runs its ranks as processes over shared memory and counts wrong elements against the
//! reference on every rank), also with several sockets per network connection, a refused
//! socket count, the launcher's fail-fast behaviour and its hiding of an outer launcher, a
//! missing rank process, a store-based init, TLS on the network transport, and a live keyed
//! job's listeners refusing clients without its key.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use jitccl::auth::{Initiator, JobKey, Refusal, Service, REPLY_LEN};
use jitccl::store::{Server, TcpStore};
use jitccl::{Comm, Config, Op};
use listeners::Fate;

#[path = "common/listeners.rs"]
mod listeners;

fn jitccl(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jitccl"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run jitccl")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs every collective with every protocol as rank processes (`env` selects the
/// transport) and fails listing the runs that did not pass their reference check.
fn every_collective_and_protocol(env: &[(&str, &str)], max_bytes: &str) {
    // (collective, ranks, datatype, op): datatypes and ops vary so that each protocol meets
    // several; every row is checked on every rank.
    let runs: &[(&str, &str, &str, &str)] = &[
        ("all_reduce", "2", "float", "sum"),
        ("all_reduce", "3", "bfloat16", "max"),
        ("all_reduce", "4", "int32", "avg"),
        ("broadcast", "3", "int8", "sum"),
        ("reduce", "4", "half", "prod"),
        ("all_gather", "3", "double", "sum"),
        ("reduce_scatter", "2", "f8e4m3", "min"),
        ("reduce_scatter", "5", "uint64", "premulsum"),
        ("sendrecv", "4", "float", "sum"),
    ];
    let mut failures = Vec::new();
    for proto in ["simple", "ll", "ll128"] {
        for (coll, n, dtype, op) in runs {
            let args = [
                "perf", coll, "-N", n, "-b", "4", "-e", max_bytes, "-f", "5", "-d", dtype, "-o", op, "--proto", proto,
                "-w", "1", "-n", "2",
            ];
            // Tiny FIFO slots: many steps and FIFO wrap-arounds even at these sizes.
            let mut vars = vec![("JITCCL_BUFFSIZE", "2048"), ("JITCCL_TIMEOUT", "60")];
            vars.extend_from_slice(env);
            let out = jitccl(&args, &vars);
            let stdout = text(&out.stdout);
            let ok = out.status.success()
                && stdout.contains("rank processes")
                && stdout.contains("# Out of bounds values : 0 OK")
                && stdout.lines().filter(|l| !l.starts_with('#')).count() > 3;
            if !ok {
                failures.push(format!("{coll} {proto} n={n} {dtype} {op}:\n{stdout}\n{}", text(&out.stderr)));
            }
        }
    }
    assert!(failures.is_empty(), "{} failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn every_collective_and_protocol_over_shared_memory() {
    every_collective_and_protocol(&[], "96K");
}

#[test]
fn every_collective_and_protocol_over_the_network() {
    // Larger slots than over shared memory: every step is a round trip through the proxies.
    every_collective_and_protocol(&[("JITCCL_TRANSPORT", "net"), ("JITCCL_BUFFSIZE", "16384")], "16K");
}

#[test]
fn every_collective_and_protocol_over_several_sockets_per_connection() {
    // Three sockets per connector take steps round-robin; slots small enough that most runs
    // keep several steps in flight, so they arrive out of order across sockets.
    every_collective_and_protocol(
        &[("JITCCL_TRANSPORT", "net"), ("JITCCL_BUFFSIZE", "8192"), ("JITCCL_NSOCKS_PERTHREAD", "3")],
        "16K",
    );
}

/// Over the network, large steps that only move bytes go from and into the callers' buffers
/// (sent by reference, landed; an AllReduce's sends of its input out of place among them):
/// every collective that moves them, at 2 and 3 ranks, several
/// sockets per connection, in place and out of place, checked on every rank, and each
/// rank's proxy says it wrote and read most of its steps there.
#[test]
fn large_moves_over_the_network_pass_through_the_callers_buffers() {
    let runs: &[(&str, &str, &str, &str)] = &[
        ("all_gather", "3", "float", "1"),
        ("broadcast", "2", "int8", "2"),
        ("all_reduce", "3", "bfloat16", "1"),
        ("all_reduce", "2", "float", "2"),
        ("sendrecv", "3", "double", "1"),
        ("all_to_all", "2", "int32", "2"),
        ("gather", "3", "uint8", "1"),
    ];
    let mut failures = Vec::new();
    for (coll, n, dtype, nsocks) in runs {
        // From steps under JC_REF_MIN (20000 B over 2 channels) to steps of hundreds of KiB.
        let args = ["perf", coll, "-N", n, "-b", "20000", "-e", "3M", "-f", "5", "-d", dtype, "-w", "1", "-n", "2"];
        let env = [
            ("JITCCL_TRANSPORT", "net"),
            ("JITCCL_NSOCKS_PERTHREAD", nsocks),
            ("JITCCL_NCHANNELS", "2"),
            ("JITCCL_DEBUG", "INFO"),
            ("JITCCL_TIMEOUT", "60"),
        ];
        let out = jitccl(&args, &env);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        // "wrote W of S steps from the callers' buffers, and read R of S' into them"
        let counts: Vec<Vec<u64>> = stderr
            .lines()
            .filter(|l| l.contains("the net proxy wrote"))
            .map(|l| {
                let tail = &l[l.find("wrote").unwrap()..];
                tail.split(|c: char| !c.is_ascii_digit())
                    .filter(|w| !w.is_empty())
                    .map(|w| w.parse().unwrap())
                    .collect()
            })
            .collect();
        let by_ref = counts.len() == n.parse::<usize>().unwrap()
            && counts.iter().map(|c| c[0]).sum::<u64>() > 0
            && counts.iter().map(|c| c[2]).sum::<u64>() > 0;
        if !(out.status.success() && stdout.contains("# Out of bounds values : 0 OK") && by_ref) {
            failures.push(format!("{coll} n={n} {dtype}: counts {counts:?}\n{stdout}\n{stderr}"));
        }
    }
    assert!(failures.is_empty(), "{} failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn a_bad_socket_count_is_refused_naming_the_variable() {
    for bad in ["0", "17", "x"] {
        let out = jitccl(
            &["perf", "all_reduce", "-N", "2", "-b", "8", "-e", "8"],
            &[("JITCCL_TRANSPORT", "net"), ("JITCCL_NSOCKS_PERTHREAD", bad)],
        );
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "JITCCL_NSOCKS_PERTHREAD={bad} was accepted");
        assert!(
            stderr.contains("invalid argument")
                && stderr.contains("JITCCL_NSOCKS_PERTHREAD")
                && stderr.contains("1..=16"),
            "JITCCL_NSOCKS_PERTHREAD={bad}: {stderr}"
        );
    }
}

#[test]
fn launch_prefixes_output_and_fails_fast() {
    let t0 = Instant::now();
    let out = jitccl(
        &[
            "launch",
            "-n",
            "3",
            "--",
            "sh",
            "-c",
            r#"echo "rank $RANK of $WORLD_SIZE"; [ "$RANK" = 1 ] && sleep 1 && exit 3; sleep 60"#,
        ],
        &[],
    );
    assert!(!out.status.success());
    let stdout = text(&out.stdout);
    for r in 0..3 {
        assert!(stdout.contains(&format!("[{r}] rank {r} of 3")), "{stdout}");
    }
    assert!(text(&out.stderr).contains("rank 1 exited"), "{}", text(&out.stderr));
    assert!(t0.elapsed() < Duration::from_secs(20), "the other ranks were not terminated");
}

/// `jitccl launch` inside another launcher's job (an salloc, an mpirun): its ranks see only
/// its own variables, so `init_from_env` finds no disagreement.
#[test]
fn launch_hides_an_outer_launchers_variables() {
    let script = r#"echo "rank $RANK slurm=${SLURM_PROCID-unset} ompi=${OMPI_COMM_WORLD_RANK-unset}""#;
    let outer = [("SLURM_PROCID", "5"), ("SLURM_NTASKS", "8"), ("OMPI_COMM_WORLD_RANK", "5")];
    let out = jitccl(&["launch", "-n", "2", "--", "sh", "-c", script], &outer);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for r in 0..2 {
        assert!(stdout.contains(&format!("[{r}] rank {r} slurm=unset ompi=unset")), "{stdout}");
    }
}

#[test]
fn a_missing_rank_process_is_named() {
    let exe = env!("CARGO_BIN_EXE_jitccl");
    // Rank 1 never joins: rank 0 must fail with an error naming it, not hang.
    let script = format!(r#"[ "$RANK" = 1 ] && exit 0; exec "{exe}" perf all_reduce -N 2 -b 8 -e 8"#);
    let t0 = Instant::now();
    let out = jitccl(&["launch", "-n", "2", "--", "sh", "-c", &script], &[("JITCCL_BOOTSTRAP_TIMEOUT", "2")]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("rank(s) 1 of 2 never connected"), "{stderr}");
    assert!(t0.elapsed() < Duration::from_secs(30));
}

#[test]
fn init_from_store_connects_ranks_over_shared_memory() {
    let server = Server::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr();
    let n = 3;
    let handles: Vec<_> = (0..n)
        .map(|rank| {
            std::thread::spawn(move || {
                let store = TcpStore::connect(addr, Duration::from_secs(30)).unwrap();
                let comm = Comm::init_from_store(&store, n, rank, &Config::default()).unwrap();
                let s = comm.device().stream().unwrap();
                let buf = comm.device().alloc_from(&[rank as i64 + 1; 1000]).unwrap();
                comm.all_reduce(&buf, &buf, 1000, Op::Sum, &s).unwrap();
                s.synchronize().unwrap();
                buf.to_vec()
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), vec![6i64; 1000]);
    }
}

/// Rank 1 is given another key than the one `jitccl launch` gives the job: it fails at once
/// saying that the keys differ (at the launcher's store, or at the root with
/// JITCCL_COMM_ID), and rank 0 names it as missing; the key itself is never printed.
#[test]
fn ranks_whose_keys_differ_fail_init_saying_so() {
    let exe = env!("CARGO_BIN_EXE_jitccl");
    let other = "a secret that is not the job's";
    let script = format!(
        r#"[ "$RANK" = 1 ] && export JITCCL_AUTH_KEY="{other}"; exec "{exe}" perf all_reduce -N 2 -b 8 -e 8 -n 1 -w 0"#
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let comm_id = format!("127.0.0.1:{port}");
    for env in [vec![], vec![("JITCCL_COMM_ID", comm_id.as_str())]] {
        let t0 = Instant::now();
        let mut vars = vec![("JITCCL_BOOTSTRAP_TIMEOUT", "3")];
        vars.extend(env.iter().copied());
        let out = jitccl(&["launch", "-n", "2", "--", "sh", "-c", &script], &vars);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{env:?}: {stderr}");
        assert!(stderr.contains("[1]") && stderr.contains("the keys differ"), "{env:?}: {stderr}");
        assert!(!stderr.contains(other), "{env:?}: the key is shown: {stderr}");
        assert!(t0.elapsed() < Duration::from_secs(20), "{env:?}: took {:?}", t0.elapsed());
    }
}

/// JITCCL_AUTH_KEY_FILE must be its owner's only: a file group or others may read is
/// refused naming it; with mode 600 the job runs, its results checked.
#[test]
fn a_key_file_must_be_its_owners_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.key");
    std::fs::write(&path, "a job secret kept in a file\n").unwrap();
    let file = path.to_str().unwrap();
    let args = ["perf", "all_reduce", "-N", "2", "-b", "8", "-e", "64", "-f", "8", "-n", "1", "-w", "0"];
    for (mode, ok) in [(0o644, false), (0o600, true)] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        let out = jitccl(&args, &[("JITCCL_AUTH_KEY_FILE", file), ("JITCCL_BOOTSTRAP_TIMEOUT", "10")]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        if ok {
            assert!(out.status.success() && stdout.contains("# Out of bounds values : 0 OK"), "{stdout}{stderr}");
        } else {
            assert!(!out.status.success(), "{stdout}{stderr}");
            assert!(stderr.contains(&format!("JITCCL_AUTH_KEY_FILE={file}: group or others may read")), "{stderr}");
        }
    }
}

/// A launcher given an empty JITCCL_AUTH_KEY makes no key: the job runs unauthenticated, as
/// before keys, over shared memory and over the network, its results checked.
#[test]
fn without_a_key_the_job_runs_as_before() {
    for transport in ["shm", "net"] {
        let args = ["perf", "all_reduce", "-N", "3", "-b", "8", "-e", "4K", "-f", "8", "-n", "1", "-w", "0"];
        let out = jitccl(&args, &[("JITCCL_AUTH_KEY", ""), ("JITCCL_TRANSPORT", transport)]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success() && stdout.contains("# Out of bounds values : 0 OK"),
            "{transport}: {stdout}{stderr}"
        );
    }
}

/// With JITCCL_TLS=1 the network transport's sockets carry TLS: a few collectives and
/// datatypes at 2 to 4 ranks (one with several sockets per connection), each run with TLS
/// on and off, every rank's results checked against the reference both times.
#[test]
fn tls_on_and_off_give_the_same_checked_results() {
    let runs: &[(&str, &str, &str, &str, &str)] = &[
        ("all_reduce", "2", "float", "sum", "1"),
        ("all_reduce", "4", "bfloat16", "max", "1"),
        ("reduce_scatter", "3", "int32", "sum", "2"),
        ("all_gather", "3", "double", "sum", "1"),
    ];
    let mut failures = Vec::new();
    for (coll, n, dtype, op, nsocks) in runs {
        for tls in ["1", "0"] {
            let args = [
                "perf", coll, "-N", n, "-b", "8", "-e", "256K", "-f", "16", "-d", dtype, "-o", op, "-w", "1", "-n", "2",
            ];
            let env = [
                ("JITCCL_TRANSPORT", "net"),
                ("JITCCL_TLS", tls),
                ("JITCCL_NSOCKS_PERTHREAD", nsocks),
                ("JITCCL_BUFFSIZE", "16384"),
                ("JITCCL_DEBUG", "INFO"),
                ("JITCCL_TIMEOUT", "60"),
            ];
            let out = jitccl(&args, &env);
            let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
            let ok = out.status.success()
                && stdout.contains("# Out of bounds values : 0 OK")
                && stderr.contains("socket(s) each, TLS") == (tls == "1");
            if !ok {
                failures.push(format!("{coll} n={n} {dtype} TLS={tls}:\n{stdout}\n{stderr}"));
            }
        }
    }
    assert!(failures.is_empty(), "{} failed:\n{}", failures.len(), failures.join("\n"));
}

/// TLS is pinned to the job's key: without one (ids every rank computes from
/// JITCCL_COMM_ID, no JITCCL_AUTH_KEY), init fails naming both settings.
#[test]
fn tls_without_a_key_is_refused() {
    let exe = env!("CARGO_BIN_EXE_jitccl");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let comm_id = format!("127.0.0.1:{port}");
    let args =
        ["launch", "-n", "2", "--", exe, "perf", "all_reduce", "-N", "2", "-b", "8", "-e", "8", "-n", "1", "-w", "0"];
    let env = [("JITCCL_COMM_ID", comm_id.as_str()), ("JITCCL_AUTH_KEY", ""), ("JITCCL_TLS", "1")];
    let out = jitccl(
        &args,
        &[("JITCCL_BOOTSTRAP_TIMEOUT", "10"), ("JITCCL_TRANSPORT", "net")].into_iter().chain(env).collect::<Vec<_>>(),
    );
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("JITCCL_TLS=1 needs the job's key") && stderr.contains("JITCCL_AUTH_KEY_FILE"), "{stderr}");
}

/// A rank with TLS on and one with it off fail init within seconds, naming the setting.
#[test]
fn ranks_that_disagree_on_tls_fail_init_saying_so() {
    let exe = env!("CARGO_BIN_EXE_jitccl");
    let script =
        format!(r#"[ "$RANK" = 1 ] && export JITCCL_TLS=1; exec "{exe}" perf all_reduce -N 2 -b 8 -e 8 -n 1 -w 0"#);
    let t0 = Instant::now();
    let vars = [("JITCCL_TRANSPORT", "net"), ("JITCCL_BOOTSTRAP_TIMEOUT", "10"), ("JITCCL_TIMEOUT", "10")];
    let out = jitccl(&["launch", "-n", "2", "--", "sh", "-c", &script], &vars);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("Config.tls (JITCCL_TLS) is false on rank(s) [0], true on rank(s) [1]"), "{stderr}");
    assert!(t0.elapsed() < Duration::from_secs(8), "took {:?}", t0.elapsed());
}

/// What one listener of a live job did with clients that know jitccl's protocol but not
/// the job's key.
#[derive(Debug)]
struct Probe {
    /// The listener's service, if a handshake with the job's key opened it.
    service: Option<Service>,
    /// A client with another key, which sent a made-up proof.
    wrong_key: Fate,
    /// A handshake recorded with the job's key, replayed on a new connection.
    replay: Option<Fate>,
}

/// Tries a client with another key at `addr`, then, where a handshake with the job's key
/// for the listener's service (found by trying each) can be recorded, one replaying it.
/// `None`: the listener answered no handshake (not accepting at the time).
fn probe(addr: std::net::SocketAddr, key: JobKey) -> Option<Probe> {
    use std::io::{Read, Write};
    let mut reply = [0u8; REPLY_LEN];
    let wrong = JobKey::from_secret("a key that is not the job's").unwrap();
    let (me, hello) = Initiator::start(&wrong, Service::Bootstrap).unwrap();
    let mut s = listeners::connect(addr)?;
    s.write_all(&hello).and_then(|()| s.read_exact(&mut reply)).ok()?;
    assert_eq!(me.finish(&reply), Err(Refusal::KeysDiffer), "{addr}: the listener proves another key");
    let _ = s.write_all(&[7u8; 32]);
    let wrong_key = listeners::fate(s);
    for service in [Service::Bootstrap, Service::Store, Service::Net] {
        let Some((recorded, s)) = listeners::handshake(addr, &key, service) else { continue };
        drop(s);
        // (A listener that stopped answering meanwhile lets nothing in either.)
        let replay = listeners::connect(addr).and_then(|mut r| {
            r.write_all(&recorded).and_then(|()| r.read_exact(&mut reply)).ok()?;
            Some(listeners::fate(r))
        });
        return Some(Probe { service: Some(service), wrong_key, replay });
    }
    Some(Probe { service: None, wrong_key, replay: None })
}

/// A keyed job of three rank processes over the network transport, held while its
/// listeners are up: rank 2 pauses before its hello to the root (the launcher's store, the
/// root and the other ranks' bootstrap listeners are up), rank 1 before it opens its
/// transport connections (every rank's transport listener is up). A client at each of
/// them with another key, and one replaying a recorded handshake, is refused or left
/// unread, never let in; the job's results are right.
#[test]
fn a_live_jobs_listeners_refuse_clients_without_its_key() {
    use std::collections::HashSet;
    use std::process::Stdio;
    let exe = env!("CARGO_BIN_EXE_jitccl");
    let secret = "the live job's secret, known to the test";
    let key = JobKey::from_secret(secret).unwrap();
    let script = format!(
        r#"case "$RANK" in 2) export JITCCL_TEST_PAUSE_AT=join+2500;; 1) export JITCCL_TEST_PAUSE_AT=transport+2500;; esac
exec "{exe}" perf all_reduce -N 3 -b 8 -e 64K -f 16 -w 1 -n 2"#
    );
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut job = Command::new(exe)
        .args(["launch", "-n", "3", "--", "sh", "-c", &script])
        .envs([
            ("JITCCL_AUTH_KEY", secret),
            ("JITCCL_TRANSPORT", "net"),
            ("JITCCL_SOCKET_IFNAME", "lo"),
            ("JITCCL_TIMEOUT", "60"),
            ("JITCCL_BOOTSTRAP_TIMEOUT", "60"),
        ])
        .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&err).unwrap()))
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let mut seen = HashSet::new();
    let mut probes = Vec::new();
    let status = loop {
        if let Some(status) = job.try_wait().unwrap() {
            break status;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            job.kill().unwrap();
            panic!("the job did not end within 60 s");
        }
        for addr in listeners::of(&listeners::tree(job.id())) {
            if seen.insert(addr) {
                probes.push(std::thread::spawn(move || probe(addr, key)));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let probes: Vec<Probe> = probes.into_iter().filter_map(|p| p.join().unwrap()).collect();
    let (stdout, stderr) = (std::fs::read_to_string(out).unwrap(), std::fs::read_to_string(err).unwrap());
    assert!(status.success() && stdout.contains("# Out of bounds values : 0 OK"), "{stdout}{stderr}");
    for p in &probes {
        assert!(p.wrong_key != Fate::Answered && p.replay != Some(Fate::Answered), "a client was let in: {p:?}");
    }
    // Each kind of listener refused both clients at least once: the store; the root (a
    // rank's bootstrap listener reads a connection only while its rank receives on it);
    // the transport listeners of the ranks that were not paused.
    let refused = |s: Service| {
        let of = |p: &&Probe| p.service == Some(s);
        (probes.iter().filter(of).filter(|p| p.wrong_key == Fate::Closed).count())
            .min(probes.iter().filter(of).filter(|p| p.replay == Some(Fate::Closed)).count())
    };
    assert!(
        refused(Service::Store) == 1 && refused(Service::Bootstrap) >= 1 && refused(Service::Net) >= 2,
        "not every kind of listener refused the clients: {probes:?}\n{stderr}"
    );
}
