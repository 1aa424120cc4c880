//! Ranks as separate processes: this test binary re-run as children, given the unique id
//! as hex or the torchrun environment with JITCCL_COMM_ID.

use std::io::Read;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::*;
use crate::bootstrap::LaunchEnv;

/// Selects a child role when this binary is re-run by `across_processes_*`.
const CHILD_VAR: &str = crate::settings::BOOTSTRAP_TEST_CHILD.name;

fn spawn_child(role: &str, envs: &[(&str, String)]) -> Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    // The test's path in this (unit test) binary, without the crate name.
    let child_test = format!("{}::bootstrap_child_process", module_path!().split_once("::").unwrap().1);
    c.args(["--exact", &child_test, "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, role)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for var in crate::settings::COMM_ID.names() {
        c.env_remove(var);
    }
    for (k, v) in envs {
        c.env(k, v);
    }
    c.spawn().expect("spawn child")
}

/// Waits for each child (at most `limit` in all); kills and fails on a hang.
fn wait_children(children: Vec<(usize, Child)>, limit: Duration) {
    let end = Instant::now() + limit;
    for (rank, mut child) in children {
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let mut out = String::new();
                child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
                let mut err = String::new();
                child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
                assert!(status.success(), "child rank {rank} failed ({status}):\n{out}\n{err}");
                assert!(out.contains(&format!("child rank {rank} ok")), "child rank {rank}:\n{out}\n{err}");
                break;
            }
            if Instant::now() > end {
                let _ = child.kill();
                let _ = child.wait();
                panic!("child rank {rank} hung");
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

/// What every rank does, in a thread or a child process: gather (rank, pid), pass a
/// message around the ring, barrier.
fn rank_work(b: &Bootstrap) -> Result<(), BootstrapError> {
    let (r, n) = (b.rank(), b.nranks());
    let mine = format!("{r}:{}", std::process::id());
    let all = b.all_gather(mine.as_bytes())?;
    for (p, g) in all.iter().enumerate() {
        let s = String::from_utf8(g.clone()).unwrap();
        assert!(s.starts_with(&format!("{p}:")), "block {p}: {s}");
    }
    b.send((r + 1) % n, 42, mine.as_bytes())?;
    let from_prev = b.recv((r + n - 1) % n, 42)?;
    assert_eq!(from_prev, all[(r + n - 1) % n]);
    b.barrier()
}

/// The child side of the `across_processes_*` tests; does nothing in a normal run.
#[test]
fn bootstrap_child_process() {
    let Ok(role) = std::env::var(CHILD_VAR) else { return };
    log();
    let (rank, boot) = if role == "env" {
        // torchrun convention for rank/size, JITCCL_COMM_ID for the root, the
        // JITCCL_* variables for the config.
        let tr = LaunchEnv::from_env().unwrap();
        let config = BootstrapConfig::from_env().unwrap();
        assert_eq!(config.ifname.as_deref(), Some("lo"));
        let id = UniqueId::from_env(tr.rank == 0, &config).unwrap().expect("JITCCL_COMM_ID is set");
        assert_eq!(id.root_addr(), tr.master_socket_addr().unwrap());
        (tr.rank, Bootstrap::init(&id, tr.rank, tr.world_size, &config))
    } else {
        // "<hex id>,<rank>,<nranks>"
        let parts: Vec<&str> = role.split(',').collect();
        let id = UniqueId::from_hex(parts[0]).unwrap();
        let (rank, nranks) = (parts[1].parse().unwrap(), parts[2].parse().unwrap());
        (rank, Bootstrap::init(&id, rank, nranks, &cfg(Duration::from_secs(20))))
    };
    let boot = boot.unwrap_or_else(|e| panic!("child rank {rank}: {e}"));
    rank_work(&boot).unwrap_or_else(|e| panic!("child rank {rank}: {e}"));
    println!("child rank {rank} ok");
}

/// Rank 0 in this process (with the root, from `Root::start`), ranks 1..4 in child
/// processes given the id as hex.
#[test]
fn across_processes_with_unique_id() {
    log();
    let n = 4;
    let config = cfg(Duration::from_secs(20));
    let root = Root::start(&config).unwrap();
    let id = root.id();
    let children: Vec<_> = (1..n).map(|r| (r, spawn_child(&format!("{},{r},{n}", id.to_hex()), &[]))).collect();
    let b = Bootstrap::init(&id, 0, n, &config).unwrap();
    rank_work(&b).unwrap();
    wait_children(children, Duration::from_secs(30));
    assert_eq!(root.join().unwrap().nranks, n);
}

/// Three child processes started the torchrun way (MASTER_ADDR, MASTER_PORT, RANK,
/// WORLD_SIZE, LOCAL_RANK) with JITCCL_COMM_ID: rank 0's process runs the root.
#[test]
fn across_processes_with_comm_id_env() {
    let n = 3;
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let children: Vec<_> = (0..n)
        .map(|r| {
            let envs = [
                ("JITCCL_COMM_ID", format!("127.0.0.1:{port}")),
                ("JITCCL_SOCKET_IFNAME", "lo".to_string()),
                ("JITCCL_BOOTSTRAP_TIMEOUT", "20".to_string()),
                ("MASTER_ADDR", "127.0.0.1".to_string()),
                ("MASTER_PORT", port.to_string()),
                ("RANK", r.to_string()),
                ("WORLD_SIZE", n.to_string()),
                ("LOCAL_RANK", r.to_string()),
            ];
            (r, spawn_child("env", &envs))
        })
        .collect();
    wait_children(children, Duration::from_secs(30));
}
