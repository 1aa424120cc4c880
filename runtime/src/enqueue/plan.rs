//! A call's plan: the tuner's choice for its shape and the kernel that runs it. Each thread
//! remembers the last two plans it made for each of a few ranks, so a call that repeats one
//! of the two before it (a loop's calls, the common case, or a loop that alternates two
//! calls: a check before each call, an all-gather and a reduce-scatter per layer) skips the
//! tuner's and the kernel table's locks and hash lookups, and takes no lock at all: a small
//! call's path is short enough that these showed in its profile (each lock an atomic
//! read-modify-write pair).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use jitccl_codegen::{Collective, DataType, KernelSpec, RedOp, Wire, MAX_SPECIALIZED_RANKS};

use super::checks::Group;
use super::Rank;
use crate::config::Resolved;
use crate::device::{Kernel, KernelRef};
use crate::error::{Error, Result};
use crate::tune::Choice;

/// What a plan depends on besides its rank (whose tuner and overrides are fixed at init).
#[derive(Clone, Copy, PartialEq)]
pub(super) struct Shape {
    pub coll: Collective,
    /// Per-rank bytes, as the tuner sees them.
    pub bytes: usize,
    /// The kernel's element type (bytes for collectives that only move data).
    pub dtype: DataType,
    pub op: Option<RedOp>,
    /// Every buffer registered: the direct algorithms are candidates.
    pub direct: bool,
    /// The library's own exchange (see `Call::internal`).
    pub internal: bool,
    /// The format the elements travel in.
    pub wire: Wire,
}

/// A rank's identity for the plans threads remember: unique in the process for good, so a
/// remembered plan is only ever used by the rank that made it, while it lives (and with it
/// the kernel table the plan's kernel is borrowed from).
pub(super) fn next_uid() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The rank count a rank's kernels are specialized for (`Config::specialize_ranks`), where
/// one fits; said once per rank.
pub(super) fn specialized(group: &Group, cfg: &Resolved) -> Option<u8> {
    if !cfg.specialize_ranks {
        return None;
    }
    let (rank, n) = (group.rank, group.nranks);
    if n > MAX_SPECIALIZED_RANKS {
        tracing::warn!("rank {rank}: kernels not specialized: {n} ranks, more than the {MAX_SPECIALIZED_RANKS} a kernel may be specialized for");
        return None;
    }
    tracing::info!("rank {rank}: kernels specialized for {n} ranks (JITCCL_SPECIALIZE_RANKS)");
    u8::try_from(n).ok()
}

/// Ranks a thread remembers a plan for at once (a thread driving several ranks, as
/// nccl-tests' -g does, alternates between them); slot `uid % SLOTS`.
const SLOTS: usize = 8;

#[derive(Clone, Copy)]
struct Remembered {
    rank: u64,
    shape: Shape,
    choice: Choice,
    kernel: KernelRef,
}

/// The last two values used, the most recent first: a slot's plans.
struct Recent<T: Copy>([Cell<Option<T>>; 2]);

impl<T: Copy> Recent<T> {
    const fn empty() -> Recent<T> {
        Recent([Cell::new(None), Cell::new(None)])
    }

    /// The value `hit` accepts, which becomes the most recent.
    fn find(&self, hit: impl Fn(&T) -> bool) -> Option<T> {
        let [first, second] = &self.0;
        if let Some(v) = first.get().filter(&hit) {
            return Some(v);
        }
        let v = second.get().filter(hit)?;
        second.set(first.replace(Some(v)));
        Some(v)
    }

    /// Makes `v` the most recent, forgetting the older of the two.
    fn push(&self, v: T) {
        self.0[1].set(self.0[0].replace(Some(v)));
    }
}

thread_local! {
    static LAST: [Recent<Remembered>; SLOTS] = const { [const { Recent::empty() }; SLOTS] };
}

impl Rank {
    /// The choice and kernel for a call of `shape` on this rank. The kernel is borrowed from
    /// this rank's table, which keeps every kernel it was given while the rank lives.
    pub(super) fn plan(&self, shape: Shape) -> Result<(Choice, KernelRef)> {
        let slot = (self.uid % SLOTS as u64) as usize;
        match LAST.with(|l| l[slot].find(|r| r.rank == self.uid && r.shape == shape)) {
            Some(r) => Ok((r.choice, r.kernel)),
            None => self.plan_anew(shape, slot),
        }
    }

    /// A plan this thread does not remember: the tuner's choice and the kernel table's
    /// kernel, remembered. Kept out of line, so that the remembered case stays short.
    #[cold]
    #[inline(never)]
    fn plan_anew(&self, shape: Shape, slot: usize) -> Result<(Choice, KernelRef)> {
        let choice = match (shape.internal, shape.wire) {
            (true, _) => self.tuner.internal(shape.dtype.size()),
            (false, Wire::Exact) => {
                let commutative = !matches!(shape.op, Some(RedOp::Custom(c)) if !c.commutative);
                self.tuner.choose_for(shape.coll, shape.bytes, shape.dtype.size(), commutative, shape.direct)?
            }
            (false, wire) => self.tuner.for_wire(shape.coll, shape.bytes, shape.dtype.size(), shape.direct, wire)?,
        };
        let kernel = self.kernel(shape.coll, choice, shape.dtype, shape.op, shape.wire)?;
        let made = Remembered { rank: self.uid, shape, choice, kernel };
        LAST.with(|l| l[slot].push(made));
        Ok((choice, kernel))
    }

    /// The kernel for one launch: from this rank's table, else validated and fetched
    /// (compiled if need be) from the generator into the table, which never lets it go.
    fn kernel(
        &self, coll: Collective, choice: Choice, dtype: DataType, op: Option<RedOp>, wire: Wire,
    ) -> Result<KernelRef> {
        let ranks = self.specialized;
        let spec = KernelSpec { coll, algo: choice.algo, proto: choice.proto, dtype, op, ranks, wire };
        if let Some(k) = self.kernels.lock().unwrap_or_else(|e| e.into_inner()).get(&spec) {
            return Ok(k.borrow());
        }
        let spec = KernelSpec { ranks: None, wire: Wire::Exact, ..spec }
            .with_wire(wire)
            .and_then(|s| ranks.map_or(Ok(s), |n| s.specialized_for(n as usize)))
            .map_err(|e| Error::InvalidArgument(format!("{} with {dtype}: {e}", coll.name())))?;
        let kernel = Kernel::get(&self.device, &spec)?;
        let mut table = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        // Another thread may have fetched it meanwhile: the table's stays, so that every
        // borrow handed out stays valid.
        Ok(table.entry(spec).or_insert(kernel).borrow())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    #[test]
    fn kernels_are_specialized_where_asked_and_a_kernel_takes_the_rank_count() {
        let on = Config { specialize_ranks: Some(true), ..Config::default() };
        for (n, want) in [(1, Some(1)), (2, Some(2)), (64, Some(64)), (65, None), (1000, None)] {
            let cfg = on.resolve(n).unwrap();
            assert_eq!(specialized(&Group { rank: 0, nranks: n }, &cfg), want, "{n} ranks");
        }
        let off = Config { specialize_ranks: Some(false), ..Config::default() }.resolve(2).unwrap();
        assert_eq!(specialized(&Group { rank: 0, nranks: 2 }, &off), None);
    }

    #[test]
    fn a_slot_keeps_the_two_plans_used_last() {
        let slot = Recent::empty();
        assert_eq!(slot.find(|_| true), None);
        slot.push(1);
        slot.push(2);
        // Alternating between two hits both.
        for _ in 0..3 {
            assert_eq!(slot.find(|&v| v == 1), Some(1));
            assert_eq!(slot.find(|&v| v == 2), Some(2));
        }
        assert_eq!(slot.find(|&v| v == 1), Some(1));
        // A third forgets the one used least recently (2), not the one just found.
        slot.push(3);
        assert_eq!(slot.find(|&v| v == 2), None);
        assert_eq!(slot.find(|&v| v == 1), Some(1));
        assert_eq!(slot.find(|&v| v == 3), Some(3));
    }

    #[test]
    fn gpu_kernels_are_specialized_by_default_and_host_kernels_are_not() {
        let two = Group { rank: 0, nranks: 2 };
        let gpu = crate::device::Device::Cuda { ordinal: 0 };
        assert_eq!(specialized(&two, &Config::default().resolve_on(2, &gpu).unwrap()), Some(2));
        assert_eq!(specialized(&two, &Config::default().resolve(2).unwrap()), None);
        let off = Config { specialize_ranks: Some(false), ..Config::default() };
        assert_eq!(specialized(&two, &off.resolve_on(2, &gpu).unwrap()), None, "asked not to");
    }
}
