//! Shrinking a communicator (NCCL's ncclCommShrink): the ranks that remain make a child
//! without the excluded ones, which need not answer (they may be dead). Only the survivors
//! take part, so the exchange is point to point over the parent's bootstrap, as a split's
//! (`split::child_id`): nothing waits on an excluded rank. (`Comm::revoke`, which ends the
//! operations a shrink follows, is the communicator's own: `lifecycle`.)

use std::sync::atomic::Ordering;

use super::split::{child_config, child_id};
use crate::comm::Comm;
use crate::config::Config;
use crate::error::{Error, Result};

/// The bootstrap tag of shrink `seq`'s unique id (apart from splits' and other tags).
fn id_tag(seq: u64) -> u64 {
    (3 << 62) | seq
}

/// The survivors of `nranks` ranks without `exclude`, in parent-rank order; `rank` must be
/// one of them.
fn survivors(rank: usize, nranks: usize, exclude: &[usize]) -> Result<Vec<usize>> {
    if let Some(q) = exclude.iter().find(|&&q| q >= nranks) {
        return Err(Error::InvalidArgument(format!("shrink on rank {rank}: excluded rank {q} is not below {nranks}")));
    }
    if exclude.contains(&rank) {
        return Err(Error::InvalidArgument(format!(
            "shrink on rank {rank}: this rank is in the exclusion list (only the remaining ranks call shrink)"
        )));
    }
    Ok((0..nranks).filter(|q| !exclude.contains(q)).collect())
}

impl Comm {
    /// A child of the ranks of this communicator that are not in `exclude` (NCCL's
    /// ncclCommShrink), ranked in their parent order; only those ranks call it, all with
    /// the same `exclude`, in the same order as their splits. The excluded ranks take no
    /// part, so they may have died. `abort_first` (NCCL_SHRINK_ABORT) first ends this
    /// communicator's running operations, as after a peer's death; without it the
    /// communicator must not have failed. `config` as in
    /// [`split_with`](Self::split_with). Process ranks only (ranks of one `init_all` return
    /// `Unsupported`).
    pub fn shrink(&self, exclude: &[usize], config: &Config, abort_first: bool) -> Result<Comm> {
        let rank = self.rank();
        let members = survivors(rank, self.nranks(), exclude)?;
        if config.device.is_some() {
            return Err(Error::InvalidArgument(format!(
                "shrink on rank {rank}: the child's configuration names a device; a child lives on its parent's"
            )));
        }
        let inner = self.inner("shrink")?;
        if abort_first {
            // The kernels end (the bootstrap stays up for the exchange below).
            inner.enq.abort().store(1, Ordering::Release);
        } else if !inner.is_aborted() {
            inner.usable("shrink")?;
        }
        let Some((bs, _)) = &inner.bootstrap else {
            return Err(Error::Unsupported(format!(
                "shrink on rank {rank}: communicators made by init_all cannot shrink (split them instead)"
            )));
        };
        let seq = inner.splits.next_shrink();
        let cfg = config.clone().or(Config { device: Some(self.device().clone()), ..child_config(&inner.enq.cfg) });
        let (id, new_rank) = child_id(bs, &members, id_tag(seq))?;
        tracing::info!("{self:?}: shrink {seq} without ranks {exclude:?} -> rank {new_rank} of {}", members.len());
        Comm::init_rank(&id, members.len(), new_rank, &cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survivors_keep_parent_order_and_refuse_bad_lists() {
        assert_eq!(survivors(0, 4, &[2]).unwrap(), vec![0, 1, 3]);
        assert_eq!(survivors(3, 4, &[0, 1, 1]).unwrap(), vec![2, 3]);
        assert!(matches!(survivors(1, 4, &[1]), Err(Error::InvalidArgument(_))));
        assert!(matches!(survivors(0, 4, &[4]), Err(Error::InvalidArgument(_))));
    }
}
