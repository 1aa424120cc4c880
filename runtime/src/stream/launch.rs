//! What a stream runs: a launch, its owner (what runs it: its communicator's `Executor`)
//! and the kernel call the owner makes of it.

use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use jitccl_codegen::abi::Args;
use jitccl_codegen::Protocol;

use crate::device::{CtaPool, KernelRef};
use crate::error::{Error, Result};
use crate::stream::gpu::Completion;

/// What a launch's owner does to run it: its checks and bookkeeping around the device
/// launch. Implemented by `Executor`, at this layer (a communicator's launches), and by
/// the tests' stand-ins, which drive the ring and the GPU queue without a communicator.
pub(crate) trait Owner: Send + Sync {
    /// `call` is the queue slot's own: the owner sets in it what is only known at run time
    /// (in place: a copy of the arguments would stall on the stores that just wrote them).
    fn run(&self, call: &mut KernelCall, pool: &mut CtaPool) -> Result<()>;
    /// Whether the calling thread, not the stream's own, may run the owner's launches now
    /// (see `run`).
    fn on_caller(&self) -> OnCaller;
    /// Queues `call` on `pool`, a CUDA stream, without waiting for it (see `gpu`); or
    /// records it, where the stream is being captured into a graph. An error means nothing
    /// was queued.
    fn start(&self, _call: &mut KernelCall, _pool: &CtaPool) -> Result<Started> {
        Err(Error::Internal("this owner has no asynchronous launches".into()))
    }
    /// How a launch `start` queued ended, once finished; `hung`: it has not finished within
    /// `bound` (the owner fails and stops its kernels).
    fn finish(&self, _call: &KernelCall, _hung: bool) -> Result<()> {
        Err(Error::Internal("this owner has no asynchronous launches".into()))
    }
    /// How long a launch `start` queued may take, once the oldest in flight, before it is
    /// declared hung.
    fn bound(&self) -> Duration {
        Duration::MAX
    }
}

/// What `Owner::start` did with a launch.
pub(crate) enum Started {
    /// Queued on the GPU: finished once `done` says so.
    Queued(Box<dyn Completion>),
    /// Recorded into the CUDA graph the stream was being captured into.
    Captured,
}

/// Whether a caller's thread may run an owner's launches (`Owner::on_caller`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum OnCaller {
    /// No: the owner's rank is bound to CPUs the caller does not run on.
    Never,
    /// Yes: the rank is not bound, or bound to CPUs among which the caller runs.
    Allowed,
    /// Yes, and the rank is bound to that one CPU: the stream's thread can run a launch
    /// only while the caller does not, so a caller that would wait for launches can as
    /// well run them (`Shared::run_when_full`).
    SameCpu,
}

/// One queued kernel launch, holding everything its CTAs touch until it is released.
pub(crate) struct Launch {
    /// What runs it, borrowed (`Launch::owner`): `_comm` keeps it alive, so a launch
    /// counts one reference, not two (a blocking call's path takes and drops each).
    pub owner: NonNull<dyn Owner>,
    pub call: KernelCall,
    /// The send and recv memory (no heap allocation per launch).
    pub _keep: [Option<Arc<dyn Send + Sync>>; 2],
    /// A direct algorithm's registered regions (their peer address tables).
    pub _direct: Option<crate::registry::Direct>,
    /// The communicator, holding the owner and what the kernel borrows (its kernel table,
    /// the segments its connectors point into). Only held, never called.
    pub _comm: Arc<dyn Send + Sync>,
}

/// What a launch holds (references to its buffers, registered regions and communicator),
/// taken out of its queue slot by `Launch::take_held`.
pub(crate) struct Held {
    _keep: [Option<Arc<dyn Send + Sync>>; 2],
    _direct: Option<crate::registry::Direct>,
    _comm: Arc<dyn Send + Sync>,
}

impl Launch {
    /// What runs it.
    pub(crate) fn owner(&self) -> &dyn Owner {
        // SAFETY: `_comm` keeps the owner alive as long as the launch lives.
        unsafe { self.owner.as_ref() }
    }

    /// Its owner, and the kernel call the owner runs (and completes in place).
    pub(crate) fn parts(&mut self) -> (&dyn Owner, &mut KernelCall) {
        // SAFETY: as in `owner`.
        (unsafe { self.owner.as_ref() }, &mut self.call)
    }

    /// Empties `slot`, returning what its launch holds: only that needs dropping, so the
    /// rest (the arguments, most of its bytes) is not copied out, as taking the whole
    /// launch would (a call into the C library's memcpy for each blocking call).
    pub(crate) fn take_held(slot: &mut Option<Launch>) -> Option<Held> {
        let l = slot.as_mut()?;
        // SAFETY: each field that has drop glue is read exactly once, then the slot is
        // overwritten without dropping the launch; what remains, `call`, has no drop glue
        // (asserted below), so nothing is dropped twice or leaked.
        unsafe {
            let held = Held {
                _keep: std::ptr::read(&l._keep),
                _direct: std::ptr::read(&l._direct),
                _comm: std::ptr::read(&l._comm),
            };
            std::ptr::write(slot, None);
            Some(held)
        }
    }
}

const _: () = assert!(!std::mem::needs_drop::<KernelCall>(), "take_held would leak what a KernelCall holds");

/// What a launch runs: the kernel and its arguments.
pub(crate) struct KernelCall {
    /// Borrowed from its communicator's kernel table, which the launch keeps alive.
    pub kernel: KernelRef,
    pub args: Args,
    pub nchannels: usize,
    /// The kernel's protocol (a CUDA launch sizes its blocks by it).
    pub proto: Protocol,
    pub name: &'static str,
}

// SAFETY: the pointers in `args` and the kernel borrow stay valid while the launch lives
// (`keep` and the communicator hold what they point to), the owner is only called through
// `&self` (it synchronizes its own state), and kernels synchronize their own accesses.
unsafe impl Send for Launch {}
unsafe impl Sync for Launch {}
