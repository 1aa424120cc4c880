//! A rank process killed in the middle of a 64 MiB AllReduce at 4 ranks: every other rank's
//! operation fails fast (not at the 60 s timeout), naming the dead rank, over shared memory
//! (its process exit is watched) and over TCP (its connections close); no process and no
//! /dev/shm file is left behind; also in a direct kernel on symmetric memory (`-R 2`), and
//! in the direct AlltoAll and Gather on plain buffers (the host arenas).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Perf's arguments: a 64 MiB AllReduce, looping.
const LOOP: &[&str] = &["all_reduce", "-N", "4", "-b", "64M", "-e", "64M", "-w", "1", "-n", "100000", "-c", "0"];

/// Starts rank `rank` of 4 as its own process (torchrun's variables), looping on the
/// collective of perf's `args`.
fn rank(rank: usize, port: u16, env: &[(&str, &str)], args: &[&str]) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jitccl"));
    cmd.arg("perf")
        .args(args)
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", "4")
        .env("JITCCL_TIMEOUT", "60")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("start a rank")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Kills rank 2 once the ranks are busy; returns how long each other rank took to fail.
fn kill_one(env: &[(&str, &str)], args: &[&str]) -> Vec<Duration> {
    let port = free_port();
    let mut ranks: Vec<Child> = (0..4).map(|r| rank(r, port, env, args)).collect();
    std::thread::sleep(Duration::from_secs(4));
    for (r, c) in ranks.iter_mut().enumerate() {
        assert!(matches!(c.try_wait(), Ok(None)), "rank {r} ended before the kill");
    }
    let pids: Vec<u32> = ranks.iter().map(Child::id).collect();
    ranks[2].kill().unwrap();
    let killed = Instant::now();
    ranks[2].wait().unwrap();
    let mut took = Vec::new();
    for r in [0, 1, 3] {
        let c = &mut ranks[r];
        while matches!(c.try_wait(), Ok(None)) && killed.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(5));
        }
        took.push(killed.elapsed());
        let _ = c.kill();
    }
    let outs: Vec<_> = ranks.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
    for r in [0, 1, 3] {
        let err = String::from_utf8_lossy(&outs[r].stderr);
        assert!(!outs[r].status.success(), "rank {r} succeeded after rank 2 died");
        assert!(
            err.contains("rank 2 failed first") && err.contains("gone"),
            "rank {r} should name dead rank 2:\n{err}\n{}",
            outs.iter().map(|o| String::from_utf8_lossy(&o.stderr).into_owned()).collect::<Vec<_>>().join("\n=====\n")
        );
    }
    for pid in pids {
        let left = std::fs::read_dir("/dev/shm")
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().starts_with(&format!("jitccl-{pid}-")));
        assert!(!left, "process {pid} left a /dev/shm segment");
    }
    took
}

#[test]
fn a_killed_rank_fails_its_peers_fast_over_shared_memory_and_tcp() {
    for (name, env) in [("shm", vec![]), ("net", vec![("JITCCL_TRANSPORT", "net")])] {
        let took = kill_one(&env, LOOP);
        eprintln!("{name}: the surviving ranks failed {took:?} after the kill");
        assert!(took.iter().all(|t| *t < Duration::from_secs(5)), "{name}: too slow: {took:?}");
    }
}

#[test]
fn a_rank_killed_in_a_direct_kernel_fails_its_peers_fast() {
    let loop_on =
        |coll| [coll, "-N", "4", "-b", "4M", "-e", "4M", "-w", "1", "-n", "1000000", "-c", "0", "--algo", "direct"];
    for (name, args) in [
        ("all_reduce -R 2", [&loop_on("all_reduce")[..], &["-R", "2"]].concat()),
        ("all_to_all, plain buffers", loop_on("all_to_all").to_vec()),
        // Ranks off the root wait for the root alone, which waits for the dead rank.
        ("gather, plain buffers", loop_on("gather").to_vec()),
    ] {
        let took = kill_one(&[], &args);
        eprintln!("{name}: the surviving ranks failed {took:?} after the kill");
        assert!(took.iter().all(|t| *t < Duration::from_secs(5)), "{name}: too slow: {took:?}");
    }
}
