//! How one rank of a group of processes joins: from unique ids, a store, JITCCL_COMM_ID
//! or the launcher's environment (whose store rank 0 serves). Where the rank that runs
//! the root is known (the rank that made the id), it is given to the bootstrap, to be
//! named if the root's process dies.

use std::net::SocketAddr;

use crate::auth::JobKey;
use crate::bootstrap::{test_hook, BootstrapConfig, BootstrapError, LaunchEnv, UniqueId};
use crate::comm::Comm;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::store::{Server, Store, StoreError, TcpStore};

/// Where the id of `rank`'s next store-based communicator lives. Every rank creates its
/// communicators in the same order and counts them in the store itself, so the n-th
/// communicator of every rank finds the n-th key, whether ranks are processes or threads.
fn next_store_key(store: &dyn Store, rank: usize) -> Result<String> {
    let seq = store.add(&format!("jitccl/inits/{rank}"), 1)?;
    Ok(format!("jitccl/unique_id/{seq}"))
}

/// The unique id of `rank`'s next store-based communicator: rank 0 creates it (its process
/// runs the bootstrap root) and publishes it; the others read it (waiting up to the
/// store's timeout), as framework process groups do. With a job key (`JITCCL_AUTH_KEY` or
/// its file), the id carries it and the store does not: whoever reads the store, or its
/// connections, does not learn it.
fn id_from_store(store: &dyn Store, rank: usize) -> Result<UniqueId> {
    id_through_store(store, rank, JobKey::from_env().map_err(BootstrapError::from)?)
}

/// [`id_from_store`] for the job key `job`.
fn id_through_store(store: &dyn Store, rank: usize, job: Option<JobKey>) -> Result<UniqueId> {
    let key = next_store_key(store, rank)?;
    if rank == 0 {
        let id = UniqueId::for_job(job)?;
        store.set(&key, &id.without_key(job))?;
        Ok(id)
    } else {
        Ok(UniqueId::from_bytes(&store.get(&key)?)?.with_job_key(job))
    }
}

/// A failure of the launcher's store, which rank 0 serves at `addr`, during `rank`'s `op`:
/// a closed or refused connection means rank 0 is gone.
fn store_failed(op: &'static str, rank: usize, addr: SocketAddr, e: StoreError) -> Error {
    let gone = matches!(e, StoreError::Closed { .. } | StoreError::Gone { .. });
    let detail = if gone { format!("{e}: rank 0 is gone") } else { e.to_string() };
    Error::Bootstrap(BootstrapError::Store { op, rank, server: 0, addr: addr.to_string(), detail })
}

impl Comm {
    /// Joins communicator `id` as `rank` of `nranks` (NCCL's ncclCommInitRank); every rank
    /// calls it, each in its own process, with the same id and configuration.
    pub fn init_rank(id: &UniqueId, nranks: usize, rank: usize, config: &Config) -> Result<Comm> {
        Self::start_rank(vec![*id], nranks, rank, config, None, None)
    }

    /// As [`init_rank`](Self::init_rank) with several unique ids, NCCL's
    /// ncclCommInitRankScalable: `ids[k]`'s root (started where that id was created)
    /// serves the k-th contiguous block of ranks, so no root is hit by every rank at scale.
    /// Every rank passes the same ids in the same order; an empty list, more ids than
    /// ranks or two ids of one root is an `InvalidArgument`, ranks given other ids fail
    /// with a bootstrap `IdsMismatch`.
    pub fn init_rank_scalable(ids: &[UniqueId], nranks: usize, rank: usize, config: &Config) -> Result<Comm> {
        let (ids, cfg) = (ids.to_vec(), config.clone());
        Self::start_init(config, rank, nranks, move |abort| {
            Self::init_rank_with(&ids, nranks, rank, &cfg, None, abort, None).map_err(|e| match e {
                Error::Bootstrap(BootstrapError::InvalidArgument(m)) => Error::InvalidArgument(m),
                e => e,
            })
        })
    }

    /// Joins a communicator through `store`: rank 0 creates the unique id (its process runs
    /// the bootstrap root) and publishes it; the others read it (waiting up to the store's
    /// timeout), as framework process groups do. In nonblocking mode the id is read before
    /// it returns (the store is borrowed; rank 0 publishes it at once), the rest is queued.
    pub fn init_from_store(store: &dyn Store, nranks: usize, rank: usize, config: &Config) -> Result<Comm> {
        Self::start_rank(vec![id_from_store(store, rank)?], nranks, rank, config, None, Some(0))
    }

    /// Joins the communicator the environment describes. Rank and size come from the
    /// launcher: torchrun (RANK, WORLD_SIZE), mpirun (OMPI_COMM_WORLD_RANK / _SIZE), PMI
    /// (PMI_RANK, PMI_SIZE) or srun (SLURM_PROCID, SLURM_NTASKS); several must agree. The
    /// rendezvous is `JITCCL_COMM_ID=host:port` (rank 0 runs the root there), else
    /// MASTER_ADDR:MASTER_PORT (rank 0 serves a store there, the others connect to it);
    /// only torchrun sets the latter, so under mpirun or srun pass one of them. An error
    /// of the store names rank 0, which serves it. With `JITCCL_AUTH_KEY` (or its file),
    /// the root's or the store's connections prove that they know it.
    pub fn init_from_env(config: &Config) -> Result<Comm> {
        crate::logging::init();
        let env = LaunchEnv::from_env()?;
        let (rank, nranks) = (env.rank, env.world_size);
        let bcfg = BootstrapConfig::from_env()?;
        if let Some(id) = UniqueId::from_env(rank == 0, &bcfg)? {
            return Self::start_rank(vec![id], nranks, rank, config, None, Some(0));
        }
        let addr = env.master_socket_addr()?;
        // Both ends are jitccl's: with a key, the store's connections authenticate too.
        let key = JobKey::from_env().map_err(BootstrapError::from)?;
        test_hook::at("store");
        let server = if rank == 0 { Some(Server::bind_master(addr, key)?) } else { None };
        let store = TcpStore::connect_keyed(addr, bcfg.timeout, key)
            .map_err(|e| store_failed("connect to the store", rank, addr, e))?;
        tracing::info!("rank {rank} of {nranks}: rendezvous through the store at {addr}");
        let id = id_from_store(&store, rank).map_err(|e| match e {
            Error::Store(e) => store_failed("read the unique id from the store", rank, addr, e),
            e => e,
        })?;
        Self::start_rank(vec![id], nranks, rank, config, server, Some(0))
    }

    /// Creates rank `rank` of the communicator of `ids` (see [`Comm::start_init`]);
    /// `root_rank` runs the root, if known.
    fn start_rank(
        ids: Vec<UniqueId>, nranks: usize, rank: usize, config: &Config, server: Option<Server>,
        root_rank: Option<usize>,
    ) -> Result<Comm> {
        let cfg = config.clone();
        Self::start_init(config, rank, nranks, move |abort| {
            Self::init_rank_with(&ids, nranks, rank, &cfg, server, abort, root_rank)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// With a job key, the id rank 0 publishes in the store carries no key (a fresh one
    /// there would let whoever reads the store join), and the rank that reads it ends with
    /// rank 0's id, the job's key in it.
    #[test]
    fn a_job_keyed_id_goes_through_the_store_without_a_key() {
        let server = Server::bind("127.0.0.1:0").unwrap();
        let store = TcpStore::connect(server.local_addr(), Duration::from_secs(5)).unwrap();
        let job = JobKey::random().unwrap();
        let made = id_through_store(&store, 0, Some(job)).unwrap();
        assert_eq!(made.key(), Some(job));
        let published = UniqueId::from_bytes(&store.get("jitccl/unique_id/1").unwrap()).unwrap();
        assert_eq!(published.key(), None, "the store holds a key");
        assert_eq!(id_through_store(&store, 1, Some(job)).unwrap(), made);
    }
}
