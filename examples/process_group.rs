//! A process group across processes, as PyTorch's `init_process_group("nccl")` with a
//! TCPStore: run with a world size, this program serves a store and starts that many
//! copies of itself as the ranks (torchrun's RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT);
//! each rank joins a `ProcessGroup` through the store, queues collectives that return
//! `Work` handles at once, waits for them, checks every result against a plain
//! reference, makes an even-ranks subgroup and prints `rank R ok`.
//!
//! ```sh
//! cargo run --release --example process_group -- 3
//! ```

use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use jitccl::store::{Server, TcpStore};
use jitccl::{Op, ProcessGroup, Work};

const TIMEOUT: Duration = Duration::from_secs(30);

/// One rank: every check, or what went wrong.
fn rank(rank: usize, size: usize, master: &str) -> Result<(), String> {
    let store = TcpStore::connect(master, TIMEOUT).map_err(|e| format!("store at {master}: {e}"))?;
    let pg = ProcessGroup::new(&store, rank, size, TIMEOUT).map_err(|e| format!("process group: {e}"))?;
    let dev = pg.comm().device().clone();
    let fail = |e: jitccl::Error| format!("rank {rank}: {e}");
    let r = rank as f32;

    // Queued at once, in order, on the group's stream; the stream runs them.
    let grads = dev.alloc_from(&[r + 1.0; 1000]).map_err(fail)?;
    let params = dev.alloc_from(&[if rank == 0 { 42.0f32 } else { 0.0 }; 10]).map_err(fail)?;
    let mine = dev.alloc_from(&[rank as i64 * 100; 3]).map_err(fail)?;
    let gathered = dev.alloc::<i64>(3 * size).map_err(fail)?;
    let works: Vec<Work> =
        vec![pg.all_reduce(&grads, Op::Sum), pg.broadcast(&params, 0), pg.all_gather(&gathered, &mine), pg.barrier()];
    for w in &works {
        w.wait(TIMEOUT).map_err(fail)?;
    }
    let sum = (size * (size + 1) / 2) as f32;
    check("all_reduce", grads.to_vec().iter().all(|&x| x == sum))?;
    check("broadcast", params.to_vec().iter().all(|&x| x == 42.0))?;
    let want: Vec<i64> = (0..size as i64).flat_map(|q| [q * 100; 3]).collect();
    check("all_gather", gathered.to_vec() == want)?;

    // A subgroup of the even ranks; the others get None.
    let evens: Vec<usize> = (0..size).step_by(2).collect();
    if let Some(sub) = pg.new_group(&evens).map_err(fail)? {
        let x = dev.alloc_from(&[rank as i32]).map_err(fail)?;
        sub.all_reduce(&x, Op::Max).wait(TIMEOUT).map_err(fail)?;
        check("subgroup all_reduce", x.to_vec() == [*evens.last().unwrap_or(&0) as i32])?;
    }
    pg.barrier().wait(TIMEOUT).map_err(fail)?;
    Ok(())
}

fn check(what: &str, ok: bool) -> Result<(), String> {
    ok.then_some(()).ok_or_else(|| format!("{what}: wrong result"))
}

/// Serves the store, starts `size` ranks and waits for them (killing them past a limit).
fn launch(size: usize) -> Result<(), String> {
    let server = Server::bind("127.0.0.1:0").map_err(|e| format!("store server: {e}"))?;
    let addr = server.local_addr();
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let mut children: Vec<Child> = Vec::new();
    for r in 0..size {
        let child = Command::new(&exe)
            .env("RANK", r.to_string())
            .env("WORLD_SIZE", size.to_string())
            .env("MASTER_ADDR", addr.ip().to_string())
            .env("MASTER_PORT", addr.port().to_string())
            .spawn()
            .map_err(|e| format!("starting rank {r}: {e}"))?;
        children.push(child);
    }
    let end = Instant::now() + TIMEOUT * 2;
    let mut failed = Vec::new();
    for (r, c) in children.iter_mut().enumerate() {
        let status = loop {
            match c.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    let _ = c.kill();
                    let _ = c.wait();
                    break None;
                }
            }
        };
        if !status.is_some_and(|s| s.success()) {
            failed.push(format!("rank {r}: {status:?}"));
        }
    }
    match failed.is_empty() {
        true => Ok(()),
        false => Err(format!("ranks failed: {}", failed.join(", "))),
    }
}

fn main() -> ExitCode {
    let var = |k: &str| std::env::var(k).ok();
    let res = match (var("RANK"), var("WORLD_SIZE"), var("MASTER_ADDR"), var("MASTER_PORT")) {
        (Some(r), Some(n), Some(a), Some(p)) => match (r.parse(), n.parse()) {
            (Ok(r), Ok(n)) => rank(r, n, &format!("{a}:{p}")).map(|()| println!("rank {r} ok")),
            _ => Err(format!("RANK={r} WORLD_SIZE={n}: not numbers")),
        },
        _ => match std::env::args().nth(1).unwrap_or_else(|| "2".into()).parse::<usize>() {
            Ok(n) if n > 0 => launch(n),
            _ => Err("usage: process_group [WORLD_SIZE]".into()),
        },
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("process_group: {e}");
            ExitCode::FAILURE
        }
    }
}
