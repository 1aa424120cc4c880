//! A call's plan: the tuner's choice for its shape and the kernel that runs it. Each thread
//! remembers the last plan it made for each of a few ranks, so a call that repeats the one
//! before (a loop's calls, the common case) skips the tuner's and the kernel table's locks
//! and hash lookups, and takes no lock at all: a small call's path is short enough that
//! these showed in its profile (each lock an atomic read-modify-write pair, about 13 cycles
//! on this project's x86 VM).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use jitccl_codegen::{Collective, DataType, KernelSpec, RedOp, MAX_SPECIALIZED_RANKS};

use super::Rank;
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
}

/// A rank's identity for the plans threads remember: unique in the process for good, so a
/// remembered plan is only ever used by the rank that made it, while it lives (and with it
/// the kernel table the plan's kernel is borrowed from).
pub(super) fn next_uid() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
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

thread_local! {
    static LAST: [Cell<Option<Remembered>>; SLOTS] = const { [const { Cell::new(None) }; SLOTS] };
}

impl Rank {
    /// The choice and kernel for a call of `shape` on this rank. The kernel is borrowed from
    /// this rank's table, which keeps every kernel it was given while the rank lives.
    pub(super) fn plan(&self, shape: Shape) -> Result<(Choice, KernelRef)> {
        let slot = (self.uid % SLOTS as u64) as usize;
        let last = LAST.with(|l| l[slot].get()).filter(|r| r.rank == self.uid && r.shape == shape);
        match last {
            Some(r) => Ok((r.choice, r.kernel)),
            None => self.plan_anew(shape, slot),
        }
    }

    /// A plan this thread does not remember: the tuner's choice and the kernel table's
    /// kernel, remembered. Kept out of line, so that the remembered case stays short.
    #[cold]
    #[inline(never)]
    fn plan_anew(&self, shape: Shape, slot: usize) -> Result<(Choice, KernelRef)> {
        let choice = match shape.internal {
            true => self.tuner.internal(shape.dtype.size()),
            false => {
                let commutative = !matches!(shape.op, Some(RedOp::Custom(c)) if !c.commutative);
                self.tuner.choose_for(shape.coll, shape.bytes, shape.dtype.size(), commutative, shape.direct)?
            }
        };
        let kernel = self.kernel(shape.coll, choice, shape.dtype, shape.op)?;
        LAST.with(|l| l[slot].set(Some(Remembered { rank: self.uid, shape, choice, kernel })));
        Ok((choice, kernel))
    }

    /// The kernel for one launch: from this rank's table, else validated and fetched
    /// (compiled if need be) from the generator into the table, which never lets it go.
    fn kernel(&self, coll: Collective, choice: Choice, dtype: DataType, op: Option<RedOp>) -> Result<KernelRef> {
        let nranks = self.group.nranks;
        let ranks = (self.cfg.specialize_ranks && nranks <= MAX_SPECIALIZED_RANKS).then_some(nranks as u8);
        let spec = KernelSpec { coll, algo: choice.algo, proto: choice.proto, dtype, op, ranks };
        if let Some(k) = self.kernels.lock().unwrap_or_else(|e| e.into_inner()).get(&spec) {
            return Ok(k.borrow());
        }
        let spec = KernelSpec::new(coll, choice.algo, choice.proto, dtype, op)
            .and_then(|s| if ranks.is_some() { s.specialized_for(nranks) } else { Ok(s) })
            .map_err(|e| Error::InvalidArgument(format!("{} with {dtype}: {e}", coll.name())))?;
        let kernel = Kernel::get(&self.device, &spec)?;
        let mut table = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        // Another thread may have fetched it meanwhile: the table's stays, so that every
        // borrow handed out stays valid.
        Ok(table.entry(spec).or_insert(kernel).borrow())
    }
}
