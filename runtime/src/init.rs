//! Creating a communicator whose ranks are separate processes: bootstrap (from a unique id,
//! a store, JITCCL_COMM_ID or the torchrun environment), agreement on the configuration,
//! then each rank's receive segment in shared memory, mapped by every peer.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::affinity;
use crate::bootstrap::{Bootstrap, BootstrapConfig, TorchrunEnv, UniqueId};
use crate::comm::{Comm, CommInner};
use crate::config::Config;
use crate::device::{Device, Memory};
use crate::error::{invalid, Error, Result};
use crate::store::{Server, Store, TcpStore};
use crate::transport::connect::connect;
use crate::transport::layout::Layout;
use crate::transport::net::{NetListener, Proxy};
use crate::transport::shm::ShmSegment;

/// What the connectors point into: the proxy (if any peer is over the network; declared
/// first so it stops before the memory goes), every shared segment mapped here, and the
/// local shadows of net peers' FIFOs.
struct Segments {
    _proxy: Option<Proxy>,
    _shm: Vec<ShmSegment>,
    _shadows: Vec<Memory>,
}

/// How ranks on one host connect (`JITCCL_TRANSPORT`): shared memory unless `net` is forced.
fn force_net() -> Result<bool> {
    match std::env::var("JITCCL_TRANSPORT").unwrap_or_default().to_ascii_lowercase().as_str() {
        "" | "auto" | "shm" => Ok(false),
        "net" => Ok(true),
        other => invalid(format!("JITCCL_TRANSPORT='{other}': expected auto, shm or net")),
    }
}

/// What identifies this machine as seen from here: ranks with the same id share /dev/shm
/// and reach each other through memory. Hosts in separate network namespaces on one
/// kernel (test hosts) count as different machines: they talk over the network.
fn host_id() -> String {
    let netns = std::fs::read_link("/proc/self/ns/net").map(|p| p.display().to_string()).unwrap_or_default();
    format!("{}/{netns}", machine_id())
}

/// What identifies the machine itself (its CPUs), namespaces aside.
fn machine_id() -> String {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
    format!("{}/{}", read("/proc/sys/kernel/hostname"), read("/proc/sys/kernel/random/boot_id"))
}

/// Where the id of `rank`'s next store-based communicator lives. Every rank creates its
/// communicators in the same order and counts them in the store itself, so the n-th
/// communicator of every rank finds the n-th key, whether ranks are processes or threads.
fn next_store_key(store: &dyn Store, rank: usize) -> Result<String> {
    let seq = store.add(&format!("jitccl/inits/{rank}"), 1)?;
    Ok(format!("jitccl/unique_id/{seq}"))
}

impl Comm {
    /// Joins communicator `id` as `rank` of `nranks` (NCCL's ncclCommInitRank); every rank
    /// calls it, each in its own process, with the same id and configuration.
    pub fn init_rank(id: &UniqueId, nranks: usize, rank: usize, config: &Config) -> Result<Comm> {
        Self::init_rank_with(id, nranks, rank, config, None)
    }

    /// Joins a communicator through `store`: rank 0 creates the unique id (its process runs
    /// the bootstrap root) and publishes it; the others read it (waiting up to the store's
    /// timeout), as framework process groups do.
    pub fn init_from_store(store: &dyn Store, nranks: usize, rank: usize, config: &Config) -> Result<Comm> {
        let key = next_store_key(store, rank)?;
        let id = if rank == 0 {
            let id = UniqueId::new()?;
            store.set(&key, &id.to_bytes())?;
            id
        } else {
            UniqueId::from_bytes(&store.get(&key)?)?
        };
        Self::init_rank(&id, nranks, rank, config)
    }

    /// Joins the communicator the environment describes: `JITCCL_COMM_ID=host:port` (rank 0
    /// runs the root there), else torchrun's MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE
    /// (rank 0 serves a store at MASTER_ADDR:MASTER_PORT, the others connect to it).
    pub fn init_from_env(config: &Config) -> Result<Comm> {
        crate::logging::init();
        let env = TorchrunEnv::from_env()?;
        let (rank, nranks) = (env.rank, env.world_size);
        let bcfg = BootstrapConfig::from_env()?;
        if let Some(id) = UniqueId::from_env(rank == 0, &bcfg)? {
            return Self::init_rank(&id, nranks, rank, config);
        }
        let addr = env.master_socket_addr()?;
        let server = if rank == 0 { Some(Server::bind(addr)?) } else { None };
        let store = TcpStore::connect(addr, bcfg.timeout)?;
        tracing::info!("rank {rank} of {nranks}: rendezvous through the store at {addr}");
        let key = next_store_key(&store, rank)?;
        let id = if rank == 0 {
            let id = UniqueId::new()?;
            store.set(&key, &id.to_bytes())?;
            id
        } else {
            UniqueId::from_bytes(&store.get(&key)?)?
        };
        Self::init_rank_with(&id, nranks, rank, config, server)
    }

    fn init_rank_with(
        id: &UniqueId,
        nranks: usize,
        rank: usize,
        config: &Config,
        store_server: Option<Server>,
    ) -> Result<Comm> {
        crate::logging::init();
        if rank >= nranks {
            return invalid(format!("rank {rank} is not below nranks {nranks}"));
        }
        let abort = Arc::new(AtomicBool::new(false));
        let bs = Bootstrap::init(
            id,
            rank,
            nranks,
            &BootstrapConfig::from_env()?.with_abort(abort.clone()),
        )?;

        // Where every rank runs: peers on this host share memory, the others (or all, with
        // JITCCL_TRANSPORT=net) are reached over the network.
        let me = host_id();
        let hosts = bs.all_gather(me.as_bytes())?;
        // Ranks on one machine share its CPUs, whatever namespace each runs in.
        let machine = machine_id();
        let machines = bs.all_gather(machine.as_bytes())?;
        let same_machine = |q: &usize| machines[*q] == machine.as_bytes();
        let cpus = affinity::for_local_rank((0..rank).filter(same_machine).count(), (0..nranks).filter(same_machine).count());
        let forced = force_net()?;
        let net: Vec<bool> = (0..nranks).map(|q| q != rank && (forced || hosts[q] != me.as_bytes())).collect();
        // Every rank must have been given the same configuration, or their kernels would
        // not agree on channels, protocols or FIFO slots.
        let cfg = config.resolve(nranks)?;
        let mine = format!("{cfg:?}");
        for (q, theirs) in bs.all_gather(mine.as_bytes())?.iter().enumerate() {
            if theirs.as_slice() != mine.as_bytes() {
                return Err(Error::InvalidUsage(format!(
                    "rank {q} has another configuration ({}) than rank {rank} ({mine})",
                    String::from_utf8_lossy(theirs)
                )));
            }
        }

        let layout = Layout { nranks, nchannels: cfg.nchannels, slot_bytes: cfg.slot_bytes };
        let bytes = layout.segment_bytes();
        let own = ShmSegment::create(bytes)?;
        let names = bs.all_gather(own.name().as_bytes())?;
        let mut bases = vec![std::ptr::null_mut(); nranks];
        bases[rank] = own.ptr();
        let (mut shm, mut shadows) = (Vec::new(), Vec::new());
        for q in (0..nranks).filter(|&q| q != rank) {
            if net[q] {
                let shadow = Memory::zeroed(bytes)?;
                bases[q] = shadow.ptr();
                shadows.push(shadow);
            } else {
                let seg = ShmSegment::open(&String::from_utf8_lossy(&names[q]), bytes)?;
                bases[q] = seg.ptr();
                shm.push(seg);
            }
        }
        // Once everyone has mapped every segment, the names can go: nothing is left behind
        // in /dev/shm even if a process dies later.
        bs.barrier()?;
        own.unlink();
        shm.push(own);
        let conns = connect(&layout, rank, &bases);
        // Failure boards this process can write: its own and those of peers in memory.
        let boards = (0..nranks).map(|q| (!net[q]).then(|| layout.board(bases[q]))).collect();
        let proxy = if net.iter().any(|&n| n) {
            let ip = bs.peer_addr(rank).map(|a| a.ip()).ok_or_else(|| Error::Internal("no bootstrap address".into()))?;
            let listener = NetListener::bind(ip)?;
            let addrs = bs
                .all_gather(listener.addr()?.to_string().as_bytes())?
                .iter()
                .map(|a| String::from_utf8_lossy(a).parse().map_err(|e| Error::Internal(format!("bad peer address: {e}"))))
                .collect::<Result<Vec<std::net::SocketAddr>>>()?;
            let sends: Vec<_> = conns.sends.iter().copied().filter(|l| net[l.peer]).collect();
            let recvs: Vec<_> = conns.recvs.iter().copied().filter(|l| net[l.peer]).collect();
            Some(Proxy::start(&layout, rank, &sends, &recvs, &bases, listener, &addrs, &cfg)?)
        } else {
            None
        };
        let nnet = net.iter().filter(|&&n| n).count();
        tracing::info!(
            "init_rank: rank {rank} of {nranks} (pid {}), {} channel(s), {} peer(s) over shared memory, {nnet} over the network{}",
            std::process::id(),
            cfg.nchannels,
            nranks - 1 - nnet,
            if forced { " (JITCCL_TRANSPORT=net)" } else { "" }
        );
        let net = proxy.as_ref().map(Proxy::activity);
        let segments = Arc::new(Segments { _proxy: proxy, _shm: shm, _shadows: shadows });
        let inner = CommInner::new(rank, Device::host(rank), cfg, conns, boards, segments, cpus)
            .with_bootstrap(bs, abort, store_server)
            .with_net(net);
        Ok(Comm::from_inner(inner))
    }
}
