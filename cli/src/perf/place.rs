//! Where perf's ranks live: which process and thread holds which rank, and on which device.
//!
//! One process (`-N` = `-t` x `-g`) creates all its ranks with `Comm::init_all`. Several
//! processes are started by perf itself (torchrun's variables) or by an outside launcher;
//! a process of one rank joins through `Comm::init_from_env` (every launcher it knows),
//! one of several ranks through a store at MASTER_ADDR:MASTER_PORT, which process 0 serves.
//!
//! `--target cuda` is checked here (a GPU must be present and every `--devices` entry must
//! exist); [`cuda_comms`] is the one place that creates ranks on GPUs.

use std::time::Duration;

use jitccl::store::{Server, TcpStore};
use jitccl::{Comm, Config};

use super::flags::{Layout, PerfArgs, Target};

/// How long a process waits for the store of process 0 (which may start later).
const STORE_TIMEOUT: Duration = Duration::from_secs(120);

/// What this process does.
pub enum Role {
    /// Start `Layout::procs` copies of this command as rank processes.
    Launch,
    /// Hold ranks `first..first + Layout::per_process()`.
    Ranks { first: usize },
}

/// This process's ranks (in rank order) and what must outlive them.
pub struct Local {
    pub comms: Vec<Comm>,
    /// Process 0's store server, kept until the end.
    _server: Option<Server>,
}

/// Checks `--target` before anything starts: for CUDA, that a GPU is present and every
/// `--devices` entry names one.
pub fn check_target(a: &PerfArgs) -> Result<(), String> {
    if a.target == Target::Host {
        return Ok(());
    }
    let count = jitccl::cuda_device_count().map_err(|e| format!("--target cuda: no usable GPU: {e}"))?;
    if let Some(d) = a.devices.iter().find(|&&d| d >= count) {
        return Err(format!("--devices: GPU {d} does not exist (this machine has {count})"));
    }
    Ok(())
}

/// Whether this process is a rank process of an outside or perf's own launch.
pub fn role(lay: &Layout) -> Result<Role, String> {
    // A one-process run needs no launcher, and ignores one (as `--threads` always did).
    if lay.procs == 1 {
        return Ok(Role::Ranks { first: 0 });
    }
    let var = |v: &str| std::env::var(v).ok();
    let (Some(rank), Some(world)) = (var("RANK"), var("WORLD_SIZE")) else {
        return Ok(Role::Launch);
    };
    let parse = |v: &str, s: String| s.trim().parse::<usize>().map_err(|_| format!("{v}='{s}' is not a number"));
    let (p, world) = (parse("RANK", rank)?, parse("WORLD_SIZE", world)?);
    if world != lay.procs {
        return Err(format!(
            "WORLD_SIZE is {world}, but -N {} with -t {} x -g {} ranks per process asks for {} processes",
            lay.nranks, lay.threads, lay.per_thread, lay.procs
        ));
    }
    if p >= world {
        return Err(format!("RANK {p} is not below WORLD_SIZE {world}"));
    }
    Ok(Role::Ranks { first: p * lay.per_process() })
}

/// Creates this process's ranks `first..first + per_process`.
pub fn open(a: &PerfArgs, lay: &Layout, first: usize, cfg: &Config) -> Result<Local, String> {
    let k = lay.per_process();
    if a.target == Target::Cuda {
        let devices: Vec<usize> = (first..first + k).map(|r| a.devices.get(r).copied().unwrap_or(r)).collect();
        return Ok(Local { comms: cuda_comms(lay, first, &devices, cfg)?, _server: None });
    }
    let err = |e: jitccl::Error| e.to_string();
    if lay.procs == 1 {
        return Ok(Local { comms: Comm::init_all(lay.nranks, cfg).map_err(err)?, _server: None });
    }
    if k == 1 {
        let comm = Comm::init_from_env(cfg).map_err(err)?;
        if comm.nranks() != lay.nranks {
            return Err(format!("the launcher started {} ranks, but -N asks for {}", comm.nranks(), lay.nranks));
        }
        return Ok(Local { comms: vec![comm], _server: None });
    }
    // Several ranks per process: each joins on a thread of its own, as init blocks until
    // all ranks of the communicator have joined.
    let addr = format!(
        "{}:{}",
        std::env::var("MASTER_ADDR").map_err(|_| "-t/-g above 1 across processes needs MASTER_ADDR (torchrun's)")?,
        std::env::var("MASTER_PORT").map_err(|_| "-t/-g above 1 across processes needs MASTER_PORT (torchrun's)")?
    );
    // The launcher's key, if it gave one, opens the store as it opens the bootstrap.
    let key = jitccl::auth::JobKey::from_env().map_err(|e| e.to_string())?;
    let server = if first == 0 {
        Some(Server::bind_master(&addr, key).map_err(|e| format!("serving {addr}: {e}"))?)
    } else {
        None
    };
    // A connection per rank: a client holds its connection through a waiting get, which
    // would keep rank 0 of this process from publishing what the others wait for.
    let join = |r: usize| -> Result<Comm, String> {
        let store =
            TcpStore::connect_keyed(&addr, STORE_TIMEOUT, key).map_err(|e| format!("connecting to {addr}: {e}"))?;
        Comm::init_from_store(&store, lay.nranks, r, cfg).map_err(err)
    };
    let comms = std::thread::scope(|s| {
        let joins: Vec<_> = (first..first + k).map(|r| s.spawn(move || join(r))).collect();
        joins.into_iter().map(|j| j.join().expect("init thread panicked")).collect::<Result<Vec<_>, _>>()
    })?;
    Ok(Local { comms, _server: server })
}

/// Ranks `first..` of `lay` on the CUDA devices `devices` (one per rank): all in this
/// process (`init_all_on`, direct pointers), or one rank per process joining through the
/// launcher's environment (CUDA IPC between processes of one machine).
fn cuda_comms(lay: &Layout, first: usize, devices: &[usize], cfg: &Config) -> Result<Vec<Comm>, String> {
    if lay.procs != 1 && lay.per_process() != 1 {
        return Err(format!(
            "--target cuda: rank processes hold one GPU rank each (-t 1 -g 1), or one process holds all {} ranks (-g {})",
            lay.nranks, lay.nranks
        ));
    }
    let on = devices.iter().map(|&d| jitccl::Device::cuda(d)).collect::<jitccl::Result<Vec<_>>>();
    let on = on.map_err(|e| format!("--target cuda: {e}"))?;
    if lay.procs != 1 {
        let cfg = Config { device: on.first().cloned(), ..cfg.clone() };
        let comm =
            Comm::init_from_env(&cfg).map_err(|e| format!("--target cuda: rank {first} on GPU {devices:?}: {e}"))?;
        return Ok(vec![comm]);
    }
    debug_assert_eq!(first, 0);
    Comm::init_all_on(&on, cfg).map_err(|e| format!("--target cuda: ranks on GPU(s) {devices:?}: {e}"))
}
