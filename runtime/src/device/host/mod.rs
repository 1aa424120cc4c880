//! The host target: device memory is this process's memory, and a CTA is a CPU thread.
//! A launch runs CTA 0 on the calling thread (the stream's dispatcher) and CTA i > 0 on
//! persistent worker i of the stream's pool, so no thread is spawned per launch.

use std::alloc::Layout;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};

use jitccl_codegen::abi::Args;
use jitccl_codegen::compile::host::HostKernel;

mod arena;

use crate::affinity::{self, CpuSet};
use crate::error::{Error, Result};
pub(crate) use arena::{Arena, ArenaId, PeerArena};

/// Buffers are aligned like GPU allocations (and cache lines).
const ALIGN: usize = 256;

/// One allocation: from the arena (or the heap, where there is none), or memory that an
/// owner keeps mapped (a shared-memory segment peers map too).
pub(crate) struct Memory {
    ptr: *mut u8,
    bytes: usize,
    source: Source,
}

enum Source {
    Heap,
    /// Block (offset, length) of the arena.
    Arena(Arc<Arena>, usize, usize),
    Owned {
        _owner: Box<dyn Send + Sync>,
    },
}

// SAFETY: the allocation is plain memory; concurrent access is arranged by stream order,
// as for device memory.
unsafe impl Send for Memory {}
unsafe impl Sync for Memory {}

impl Memory {
    pub(crate) fn zeroed(bytes: usize) -> Result<Memory> {
        if bytes == 0 {
            return Ok(Memory { ptr: std::ptr::null_mut(), bytes, source: Source::Heap });
        }
        if let Some(arena) = Arena::get() {
            let (off, len) = arena.alloc(bytes)?;
            // SAFETY (of the address arithmetic): the block is inside the arena.
            let ptr = arena.base().wrapping_add(off);
            return Ok(Memory { ptr, bytes, source: Source::Arena(arena, off, len) });
        }
        let layout = Layout::from_size_align(bytes, ALIGN)
            .map_err(|_| Error::InvalidArgument(format!("allocation of {bytes} bytes is too large")))?;
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::System {
                context: format!("allocating {bytes} bytes"),
                source: std::io::ErrorKind::OutOfMemory.into(),
            });
        }
        Ok(Memory { ptr, bytes, source: Source::Heap })
    }

    /// The `bytes` at `ptr`, which `owner` keeps valid (and zeroed) until it is dropped.
    pub(crate) fn mapped(ptr: *mut u8, bytes: usize, owner: Box<dyn Send + Sync>) -> Memory {
        Memory { ptr, bytes, source: Source::Owned { _owner: owner } }
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        match &self.source {
            Source::Heap if !self.ptr.is_null() => {
                // SAFETY: allocated in `zeroed` with this layout.
                unsafe { std::alloc::dealloc(self.ptr, Layout::from_size_align_unchecked(self.bytes, ALIGN)) };
            }
            Source::Arena(arena, off, len) => arena.free(*off, *len),
            _ => {}
        }
    }
}

/// A CTA body borrowed for one `CtaPool::run`, which does not return before every worker
/// is done with it.
#[derive(Clone, Copy)]
struct CtaRef(*const (dyn Fn(usize) -> i32 + Sync));
// SAFETY: the body is Sync, and `run` keeps it alive until every worker has finished.
unsafe impl Send for CtaRef {}

struct Latch {
    left: Mutex<(usize, Vec<i32>)>,
    done: Condvar,
}

/// Status of a CTA that panicked.
const PANICKED: i32 = -1;

struct Worker {
    tx: mpsc::Sender<(CtaRef, usize, Arc<Latch>)>,
}

/// A stream's CTA worker threads, grown on demand.
#[derive(Default)]
pub(crate) struct CtaPool {
    workers: Vec<Worker>,
}

impl CtaPool {
    /// Runs `ncta` CTAs concurrently, CTA 0 on the calling thread; returns the first CTA
    /// that returned a nonzero code. One CTA runs without any allocation or handoff.
    /// Inlined, so that a one-CTA launch (every small call) calls its kernel directly.
    #[inline]
    pub(crate) fn run(&mut self, ncta: usize, cta: &(impl Fn(usize) -> i32 + Sync)) -> Result<Option<usize>> {
        if ncta <= 1 {
            return Ok((ncta == 1 && cta(0) != 0).then_some(0));
        }
        self.run_many(ncta, cta)
    }

    fn run_many(&mut self, ncta: usize, cta: &(dyn Fn(usize) -> i32 + Sync)) -> Result<Option<usize>> {
        while self.workers.len() + 1 < ncta {
            let (tx, rx) = mpsc::channel::<(CtaRef, usize, Arc<Latch>)>();
            std::thread::Builder::new()
                .name(format!("jitccl-cta{}", self.workers.len() + 1))
                .spawn(move || {
                    affinity::mark_kernel_thread();
                    for (f, i, latch) in rx {
                        // SAFETY: `run` waits on the latch below before `f` can go away.
                        let code = catch_unwind(AssertUnwindSafe(|| unsafe { (*f.0)(i) })).unwrap_or(PANICKED);
                        let mut l = latch.left.lock().unwrap_or_else(|e| e.into_inner());
                        l.1[i] = code;
                        l.0 -= 1;
                        latch.done.notify_all();
                    }
                })
                .map_err(|e| Error::System { context: "starting a CTA thread".into(), source: e })?;
            self.workers.push(Worker { tx });
        }
        // SAFETY (of the lifetime erasure): every worker given `f` reports on the latch, and
        // this function waits for all of them, panics included, before returning.
        let f = CtaRef(unsafe {
            std::mem::transmute::<*const (dyn Fn(usize) -> i32 + Sync + '_), *const (dyn Fn(usize) -> i32 + Sync)>(cta)
        });
        let latch = Arc::new(Latch { left: Mutex::new((0, vec![0; ncta])), done: Condvar::new() });
        let mut sent = Ok(());
        for i in 1..ncta {
            latch.left.lock().unwrap_or_else(|e| e.into_inner()).0 += 1;
            if self.workers[i - 1].tx.send((f, i, latch.clone())).is_err() {
                latch.left.lock().unwrap_or_else(|e| e.into_inner()).0 -= 1;
                sent = Err(Error::Internal("CTA worker is gone".into()));
                break;
            }
        }
        let first = if sent.is_ok() { catch_unwind(AssertUnwindSafe(|| cta(0))).unwrap_or(PANICKED) } else { 0 };
        let mut l = latch.left.lock().unwrap_or_else(|e| e.into_inner());
        while l.0 > 0 {
            l = latch.done.wait(l).unwrap_or_else(|e| e.into_inner());
        }
        sent?;
        l.1[0] = first;
        Ok(l.1.iter().position(|&c| c != 0))
    }
}

/// Runs `kernel` with `args` as `nchannels` CTAs on `pool`, each bound to `cpus` if given;
/// returns the first channel that failed (its status says why).
#[inline]
pub(crate) fn launch(
    kernel: &HostKernel, args: &Args, nchannels: usize, pool: &mut CtaPool, cpus: Option<&CpuSet>,
) -> Result<Option<usize>> {
    let args = SharedArgs(args);
    pool.run(nchannels, &|c| {
        if let Some(set) = cpus {
            affinity::bind_current(set);
        }
        // SAFETY: the caller keeps every buffer and connector `args` points to alive until
        // this returns; each channel runs on exactly one thread.
        unsafe { kernel.run(args.get(), c as i32) }
    })
}

/// Launch arguments shared by a launch's CTA threads.
struct SharedArgs<'a>(&'a Args);

// SAFETY: the CTAs only read the arguments; what they point to, kernels synchronize.
unsafe impl Sync for SharedArgs<'_> {}

impl SharedArgs<'_> {
    /// The arguments (a method, so that closures capture the wrapper, not its field).
    fn get(&self) -> &Args {
        self.0
    }
}
