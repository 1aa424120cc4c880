//! New communicators from an existing one, as NCCL's ncclCommSplit / ncclCommDup. A split is collective over the parent's ranks: ranks that give the
//! same color form a child, ordered by (key, parent rank). Process ranks agree over the
//! parent's bootstrap and each child bootstraps afresh from a unique id its first rank
//! creates; thread ranks (`init_all`) meet in an in-process rendezvous. Either way a child
//! is a new communicator with the parent's resolved configuration and no state shared with
//! it, so the parent's abort, failure or drop leaves the child alone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::bootstrap::{Bootstrap, UniqueId};
use crate::comm::Comm;
use crate::config::{Config, Resolved};
use crate::error::{Error, Result};
use rendezvous::Rendezvous;

mod rendezvous;

/// Which child a rank joins in [`Comm::split`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Split {
    /// The ranks giving the same color form one child.
    Color(u32),
    /// This rank joins no child (NCCL_SPLIT_NOCOLOR): its split returns `None`.
    NoColor,
}

impl From<u32> for Split {
    fn from(color: u32) -> Split {
        Split::Color(color)
    }
}

/// The bookkeeping of a rank's splits, shrinks and grows: their counters, whether a grow id
/// is out, and the rendezvous its thread ranks' splits meet in (finalize, which waits for the queued launches, is the
/// executor's: `stream::Executor`).
#[derive(Default)]
pub(crate) struct Splits {
    /// How many splits this rank has started: ranks split in the same order, so the n-th
    /// split of every rank meets in round n.
    splits: AtomicU64,
    /// How many shrinks this rank has started: kept apart from splits, since only the
    /// remaining ranks shrink (a shared count would pair the excluded ranks' next split
    /// with another round than the others').
    shrinks: AtomicU64,
    /// Whether this rank made a grow id that no grow has used yet (NCCL allows one at a
    /// time).
    grow_id_out: AtomicBool,
    /// Set for ranks made by `init_all` (they have no bootstrap to split over).
    pub rendezvous: OnceLock<Arc<Rendezvous>>,
}

impl Splits {
    /// The sequence number of this rank's next split.
    pub(crate) fn next_split(&self) -> u64 {
        self.splits.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn next_shrink(&self) -> u64 {
        self.shrinks.fetch_add(1, Ordering::Relaxed)
    }

    /// Notes that a grow id is out; false if one already was.
    pub(crate) fn hand_out_grow_id(&self) -> bool {
        !self.grow_id_out.swap(true, Ordering::AcqRel)
    }

    /// Notes that the grow id that was out has been used (or could not be made).
    pub(crate) fn grow_id_used(&self) {
        self.grow_id_out.store(false, Ordering::Release);
    }
}

/// One rank's (color, key) in a split; `broken`: its communicator cannot split (failed or
/// finalized), so no rank may.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    color: Option<u32>,
    key: i64,
    broken: bool,
}

impl Entry {
    const BYTES: usize = 13;

    fn encode(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0] = if self.broken { 2 } else { self.color.is_some() as u8 };
        b[1..5].copy_from_slice(&self.color.unwrap_or(0).to_le_bytes());
        b[5..].copy_from_slice(&self.key.to_le_bytes());
        b
    }

    fn decode(q: usize, b: &[u8]) -> Result<Entry> {
        let bad = || Error::Internal(format!("split: rank {q} sent a malformed (color, key)"));
        if b.len() != Self::BYTES || b[0] > 2 {
            return Err(bad());
        }
        let color = u32::from_le_bytes(b[1..5].try_into().map_err(|_| bad())?);
        let key = i64::from_le_bytes(b[5..].try_into().map_err(|_| bad())?);
        Ok(Entry { color: (b[0] == 1).then_some(color), key, broken: b[0] == 2 })
    }
}

/// The children of a split: per color (in color order), its members' parent ranks in
/// child-rank order, (key, parent rank).
pub(crate) fn groups(entries: &[Entry]) -> Vec<Vec<usize>> {
    let mut colors: Vec<u32> = entries.iter().filter_map(|e| e.color).collect();
    colors.sort_unstable();
    colors.dedup();
    colors
        .into_iter()
        .map(|c| {
            let mut m: Vec<usize> = (0..entries.len()).filter(|&q| entries[q].color == Some(c)).collect();
            m.sort_by_key(|&q| (entries[q].key, q));
            m
        })
        .collect()
}

/// The parent's configuration, complete: every child of every rank gets the same one
/// (resolving afresh could differ by rank, e.g. channels from the cores per rank).
pub(crate) fn child_config(r: &Resolved) -> Config {
    Config {
        nchannels: Some(r.nchannels),
        algos: Some(r.algos.clone()),
        protos: Some(r.protos.clone()),
        timeout: Some(r.timeout),
        slot_bytes: Some(r.slot_bytes),
        nsocks: Some(r.nsocks),
        comm_name: r.comm_name.clone(),
        blocking: Some(r.blocking),
        min_ctas: Some(r.min_ctas),
        max_ctas: Some(r.max_ctas),
        net_name: r.net_name.clone(),
        split_share: Some(r.split_share),
        abort_propagates: Some(r.abort_propagates),
        tls: Some(r.tls),
        tuner_table: r.tuner_table.clone(),
        ..Config::default()
    }
}

/// The bootstrap tag of split `seq`'s unique id (high bit set: apart from other tags).
fn id_tag(seq: u64) -> u64 {
    (1 << 63) | seq
}

impl Comm {
    /// Splits this communicator (NCCL's ncclCommSplit): every rank of it calls this, in
    /// the same order as its other splits; the ranks giving the same `color` form a new
    /// communicator, ranked by (`key`, rank here). [`Split::NoColor`] joins none and
    /// returns `Ok(None)`. The child has this communicator's configuration and shares no
    /// state with it. Fails with this communicator's error if it failed, was aborted or
    /// finalized; such a rank makes the others' split fail too (at once, except an aborted
    /// process rank: its bootstrap is closed, the others fail by the bootstrap timeout).
    /// Thread ranks fail with `InvalidUsage` if some rank does not split within the
    /// communicator's timeout (process ranks: the bootstrap timeout).
    ///
    /// Nonblocking mode: the (color, key) exchange is done before this returns (the child's
    /// rank and size come from it, and `rank()`/`nranks()` are infallible); the child's own
    /// init, the costly part, is queued: poll its `async_error`. Refused with
    /// `InProgress` while this communicator's init is still running.
    pub fn split(&self, color: impl Into<Split>, key: i64) -> Result<Option<Comm>> {
        self.split_with(color, key, &Config::default())
    }

    /// [`split`](Self::split) with a configuration for the child, as NCCL's ncclCommSplit
    /// takes one: what `config` sets replaces this communicator's configuration, the rest
    /// is inherited. The members of a child must give configurations their init accepts
    /// as agreeing (else it fails naming the field). Refused (`InvalidArgument`) when it
    /// names a device: a child lives where its parent does.
    pub fn split_with(&self, color: impl Into<Split>, key: i64, config: &Config) -> Result<Option<Comm>> {
        let rank = self.rank();
        if config.device.is_some() {
            return Err(Error::InvalidArgument(format!(
                "split on rank {rank}: the child's configuration names a device; a child lives on its parent's"
            )));
        }
        let color = match color.into() {
            Split::Color(c) => Some(c),
            Split::NoColor => None,
        };
        // Not before init is done (nonblocking): the ranks' exchange needs the bootstrap.
        let inner = self.inner("split")?;
        let own = inner.usable("split");
        let entry = Entry { color, key, broken: own.is_err() };
        let seq = inner.splits.next_split();
        let cfg = config.clone().or(Config { device: Some(self.device().clone()), ..child_config(&inner.enq.cfg) });
        // A rank that cannot split still takes part, so the others fail at once; it
        // reports its own error. (An aborted process rank cannot: its bootstrap is closed,
        // and the others fail by the bootstrap timeout.)
        let child = if let Some((bs, _)) = &inner.bootstrap {
            if own.is_err() && bs.is_aborted() {
                return own.map(|()| None);
            }
            let child = split_processes(bs, seq, entry, &cfg);
            own.and(child)
        } else if let Some(rv) = inner.splits.rendezvous.get() {
            let child = rv.arrive(seq, rank, entry, &cfg, inner.enq.cfg.timeout);
            own.and(child)
        } else {
            Err(Error::Internal(format!("split on rank {rank}: no bootstrap and no rendezvous")))
        }?;
        tracing::info!(
            "{self:?}: split {seq} (color {color:?}, key {key}) -> {:?}",
            child.as_ref().map(|c| (c.rank(), c.nranks()))
        );
        Ok(child)
    }

    /// A new communicator of the same ranks in the same order (NCCL's ncclCommDup):
    /// `split(0, rank)`, collective likewise.
    pub fn dup(&self) -> Result<Comm> {
        self.split(0, self.rank() as i64)?
            .ok_or_else(|| Error::Internal(format!("dup on rank {}: no communicator came back", self.rank())))
    }

    /// Gives the ranks of one `init_all` the rendezvous their splits meet in.
    pub(crate) fn share_rendezvous(comms: Vec<Comm>) -> Vec<Comm> {
        // Freshly made by init_all: every one has its rank state.
        let ranks: Vec<_> = comms.iter().filter_map(|c| c.h.cell.get()).collect();
        let rv = Arc::new(Rendezvous::new(ranks.iter().map(|i| Arc::downgrade(i)).collect()));
        for inner in ranks {
            // Freshly made: not set yet.
            let _ = inner.splits.rendezvous.set(rv.clone());
        }
        comms
    }
}

/// A split of process ranks: (color, key) all-gathered over the parent's bootstrap; each
/// child's first rank creates its unique id (its process runs the child's root) and sends
/// it to the other members, then every member joins the child.
fn split_processes(bs: &Bootstrap, seq: u64, me: Entry, cfg: &Config) -> Result<Option<Comm>> {
    let rank = bs.rank();
    let entries = bs
        .all_gather(&me.encode())?
        .iter()
        .enumerate()
        .map(|(q, b)| Entry::decode(q, b))
        .collect::<Result<Vec<_>>>()?;
    if me.broken {
        return Ok(None);
    }
    if let Some(q) = entries.iter().position(|e| e.broken) {
        return Err(Error::InvalidUsage(format!(
            "split on rank {rank}: rank {q} of the parent cannot split (failed, aborted or finalized)"
        )));
    }
    let Some(members) = groups(&entries).into_iter().find(|m| m.contains(&rank)) else {
        return Ok(None);
    };
    let (id, new_rank) = child_id(bs, &members, id_tag(seq))?;
    Comm::init_rank(&id, members.len(), new_rank, cfg).map(Some)
}

/// The unique id of a child whose members are `members` (parent ranks, in child-rank
/// order), and this rank's rank in it: the first member creates the id (its process runs
/// the child's root) and sends it to the others with `tag`, point to point, so that no
/// other parent rank takes part.
pub(crate) fn child_id(bs: &Bootstrap, members: &[usize], tag: u64) -> Result<(UniqueId, usize)> {
    let new_rank = members.iter().position(|&q| q == bs.rank()).unwrap_or(0);
    // The child's key is the parent's, which its members know: it never travels.
    let job = bs.key();
    let id = if new_rank == 0 {
        let id = UniqueId::for_job(job)?;
        for &q in &members[1..] {
            bs.send(q, tag, &id.without_key(job))?;
        }
        id
    } else {
        UniqueId::from_bytes(&bs.recv(members[0], tag)?)?.with_job_key(job)
    };
    Ok((id, new_rank))
}
