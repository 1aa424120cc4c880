//! Growing a communicator (NCCL 2.29's ncclCommGrow): its ranks and new ones make a larger
//! communicator. One rank (the coordinator) makes a grow id ([`Comm::grow_id`], NCCL's
//! ncclCommGetUniqueId) and hands it to the new ranks out of band; every rank of the
//! communicator calls [`Comm::grow`], the coordinator with the id, and keeps its rank; the
//! new ranks join with [`Comm::init_rank`] under that id, with the ranks from the old size
//! on. The other ranks learn the id from the coordinator over this communicator's
//! bootstrap, so the id travels only to the new ranks.

use crate::bootstrap::UniqueId;
use crate::comm::Comm;
use crate::config::Config;
use crate::error::{Error, Result};

impl Comm {
    /// A unique id for growing this communicator (NCCL's ncclCommGetUniqueId): one rank,
    /// the coordinator, makes it (its process runs the grown communicator's root) and
    /// gives it to the new ranks, then passes it to its [`grow`](Self::grow). One at a
    /// time: a second before that grow is `InvalidUsage`. It carries the job's key, if there
    /// is one (the new ranks need it), so hand it only to them.
    pub fn grow_id(&self) -> Result<UniqueId> {
        let rank = self.rank();
        let inner = self.inner("grow_id")?;
        inner.usable("grow_id")?;
        let Some((bs, _)) = &inner.bootstrap else {
            return Err(Error::Unsupported(format!(
                "grow_id on rank {rank}: communicators made by init_all cannot grow"
            )));
        };
        if !inner.splits.hand_out_grow_id() {
            return Err(Error::InvalidUsage(format!(
                "grow_id on rank {rank}: the previous grow id has not been used by a grow yet"
            )));
        }
        UniqueId::for_job(bs.key()).map_err(|e| {
            inner.splits.grow_id_used();
            e.into()
        })
    }

    /// The grown communicator of `nranks` ranks (NCCL's ncclCommGrow, for the ranks of this
    /// one): every rank of this communicator calls it, in the same order as its splits and
    /// grows; exactly one, the coordinator, passes the id of its [`grow_id`](Self::grow_id).
    /// Each keeps its rank; the new ranks, `self.nranks()..nranks`, join with
    /// [`Comm::init_rank`] under the same id. `config` as in
    /// [`split_with`](Self::split_with), but what it leaves unset is resolved afresh, as the
    /// new ranks resolve theirs (a parent's resolution, made at its size, could disagree with
    /// theirs). This communicator stays usable.
    pub fn grow(&self, nranks: usize, id: Option<&UniqueId>, config: &Config) -> Result<Comm> {
        let rank = self.rank();
        if nranks <= self.nranks() {
            return Err(Error::InvalidArgument(format!(
                "grow on rank {rank}: {nranks} ranks is not more than the communicator's {}",
                self.nranks()
            )));
        }
        if config.device.is_some() {
            return Err(Error::InvalidArgument(format!(
                "grow on rank {rank}: the configuration names a device; a grown communicator lives on its parent's"
            )));
        }
        let inner = self.inner("grow")?;
        inner.usable("grow")?;
        let Some((bs, _)) = &inner.bootstrap else {
            return Err(Error::Unsupported(format!("grow on rank {rank}: communicators made by init_all cannot grow")));
        };
        let job = bs.key();
        let offered = bs.all_gather(&id.map(|id| id.without_key(job).to_vec()).unwrap_or_default())?;
        let holders: Vec<usize> = (0..offered.len()).filter(|&q| !offered[q].is_empty()).collect();
        let [coordinator] = holders[..] else {
            return Err(Error::InvalidUsage(format!(
                "grow on rank {rank}: exactly one rank (the coordinator) passes the grow id; ranks {holders:?} did"
            )));
        };
        if coordinator == rank {
            inner.splits.grow_id_used();
        }
        let id = UniqueId::from_bytes(&offered[coordinator])?.with_job_key(job);
        let cfg = Config { device: Some(self.device().clone()), ..config.clone() };
        tracing::info!("{self:?}: grow to {nranks} ranks (coordinator rank {coordinator})");
        Comm::init_rank(&id, nranks, rank, &cfg)
    }
}
