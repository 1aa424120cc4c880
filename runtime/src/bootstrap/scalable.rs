//! Several roots for one communicator (NCCL's `ncclCommInitRankScalable`): with `nroots`
//! unique ids, root `k` serves a contiguous block of ranks, NCCL's blocks exactly (the
//! first `nranks % nroots` roots get one rank more). The first rank of block `k + 1` also
//! says hello to root `k`, so that root can tell its block's last rank its ring successor;
//! roots never talk to each other. The ring all-gather that follows gives every rank the
//! whole address table.

use super::error::{BootstrapError, Result};
use super::id::UniqueId;
use crate::auth::JobKey;

/// The ranks root `iroot` of `nroots` serves among `nranks`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub first: usize,
    pub len: usize,
}

impl Block {
    pub fn of_root(iroot: usize, nranks: usize, nroots: usize) -> Block {
        let (per, extra) = (nranks / nroots, nranks % nroots);
        Block { first: iroot * per + iroot.min(extra), len: per + usize::from(iroot < extra) }
    }

    pub fn contains(&self, rank: usize) -> bool {
        (self.first..self.first + self.len).contains(&rank)
    }
}

/// The root that serves `rank` (NCCL's `rootIdFromRank`).
pub fn root_of(rank: usize, nranks: usize, nroots: usize) -> usize {
    let (per, extra) = (nranks / nroots, nranks % nroots);
    let big = extra * (per + 1);
    if rank < big {
        rank / (per + 1)
    } else {
        (rank - big) / per + extra
    }
}

/// The rank besides its own block that root `iroot` hears from: the first rank of the next
/// block (`None` with one root).
pub fn neighbour_of(iroot: usize, nranks: usize, nroots: usize) -> Option<usize> {
    (nroots > 1).then(|| Block::of_root((iroot + 1) % nroots, nranks, nroots).first)
}

/// The key of the communicator of `ids`, which its ranks' connections to each other prove
/// that they know (each root's own are to its id's): the one id's, or one standing for
/// every id's; `None` when no id has one.
pub fn comm_key(ids: &[UniqueId]) -> Result<Option<JobKey>> {
    let keys: Vec<JobKey> = ids.iter().filter_map(UniqueId::key).collect();
    match keys.len() {
        0 => Ok(None),
        n if n == ids.len() => Ok(Some(JobKey::combine(&keys))),
        _ => Err(BootstrapError::InvalidArgument(
            "some of the unique ids carry a job key and some do not: make them all by ncclGetUniqueId, or all \
             from addresses with the same JITCCL_AUTH_KEY"
                .into(),
        )),
    }
}

/// Checks a list of ids for `nranks` ranks and returns the communicator's session number:
/// the one id's nonce, or a digest of every id (so ranks given other lists never mix).
pub fn comm_nonce(ids: &[UniqueId], nranks: usize) -> Result<u64> {
    let bad = |m: String| Err(BootstrapError::InvalidArgument(m));
    match ids {
        [] => return bad("init_rank_scalable needs at least one unique id".into()),
        [one] => return Ok(one.nonce()),
        _ if ids.len() > nranks => {
            return bad(format!("{} unique ids for {nranks} ranks: at most one id per rank", ids.len()))
        }
        _ => {}
    }
    for (i, a) in ids.iter().enumerate() {
        if let Some(j) = ids[..i].iter().position(|b| b.root_addr() == a.root_addr()) {
            return bad(format!(
                "unique ids {j} and {i} name the same root {}: each root serves one block",
                a.root_addr()
            ));
        }
    }
    Ok(ids.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, id| {
        id.to_bytes().iter().fold(h, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_every_rank_once_and_match_root_of() {
        for nranks in [1, 2, 7, 10, 256, 1000] {
            for nroots in (1..=nranks.min(9)).chain([nranks]) {
                let mut next = 0;
                for k in 0..nroots {
                    let b = Block::of_root(k, nranks, nroots);
                    assert_eq!(b.first, next, "{nranks} ranks, {nroots} roots, root {k}");
                    assert!(b.len >= nranks / nroots && b.len <= nranks / nroots + 1);
                    (b.first..b.first + b.len).for_each(|r| assert_eq!(root_of(r, nranks, nroots), k));
                    next += b.len;
                }
                assert_eq!(next, nranks);
            }
        }
        // NCCL's example: 10 ranks on 3 roots are 4 + 3 + 3.
        assert_eq!(Block::of_root(1, 10, 3), Block { first: 4, len: 3 });
        assert_eq!(neighbour_of(2, 10, 3), Some(0));
        assert_eq!(neighbour_of(0, 10, 1), None);
    }

    #[test]
    fn bad_id_lists_are_refused() {
        let a = UniqueId::random("127.0.0.1:1000".parse().unwrap()).unwrap();
        let b = UniqueId::random("127.0.0.1:1001".parse().unwrap()).unwrap();
        assert!(comm_nonce(&[], 4).unwrap_err().to_string().contains("at least one"));
        assert!(comm_nonce(&[a, b], 1).unwrap_err().to_string().contains("at most one id per rank"));
        assert!(comm_nonce(&[a, a], 4).unwrap_err().to_string().contains("same root"));
        assert_eq!(comm_nonce(&[a], 4).unwrap(), a.nonce());
        assert_ne!(comm_nonce(&[a, b], 4).unwrap(), comm_nonce(&[b, a], 4).unwrap());
    }
}
