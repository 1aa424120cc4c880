//! Groups (ncclGroupStart / End / SimulateEnd) and when a call is complete.
//!
//! On the host there is no stream for the caller to wait on: a call on a blocking
//! communicator is complete when it returns, and a group's calls when ncclGroupEnd returns.
//! A nonblocking communicator's call returns at once (`ncclInProgress` until it is done):
//! poll ncclCommGetAsyncError. On a GPU a call is queued on the caller's stream and
//! returns once queued, as NCCL's: the caller's stream orders it with the caller's kernels,
//! and a failure reaches the caller through ncclCommGetAsyncError and its next call. With
//! `JITCCL_CUDA_SYNC=1` it first waits for the caller's stream and returns when jitccl's
//! kernel is done, as on the host.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use jitccl::{Collective, CommState, DataType, Error, Stream};

use crate::handle::{CommHandle, Live};
use crate::status::{guard, Outcome};
use crate::types::*;

/// A call posted in the open group: its communicator and stream, and what the cost model
/// needs.
struct Posted {
    comm: *mut CommHandle,
    stream: Stream,
    coll: Collective,
    dtype: DataType,
    count: usize,
}

/// This thread's open group: its depth, what it posted, and the first call that failed in
/// it (as NCCL, the group's end then returns that error and runs nothing).
struct Open {
    depth: usize,
    posted: Vec<Posted>,
    failed: Option<(NcclResult, String)>,
}

thread_local! {
    static OPEN: RefCell<Open> = const { RefCell::new(Open { depth: 0, posted: Vec::new(), failed: None }) };
}

/// Threads with a group open: while none has, a call needs no thread-local look (a
/// function call in a shared library).
static OPEN_ANYWHERE: AtomicUsize = AtomicUsize::new(0);

/// Whether a group is open on this thread.
#[inline]
pub fn is_open() -> bool {
    // This thread's own count is seen in program order: zero means not this thread either.
    OPEN_ANYWHERE.load(Ordering::Relaxed) > 0 && OPEN.with_borrow(|g| g.depth > 0)
}

/// Notes a call made inside the open group.
pub fn post(comm: *mut CommHandle, stream: &Stream, coll: Collective, dtype: DataType, count: usize) {
    let stream = stream.clone();
    OPEN.with_borrow_mut(|g| g.posted.push(Posted { comm, stream, coll, dtype, count }));
}

/// Notes a call that failed: inside a group, the group fails with it.
pub fn note(f: &Failure) {
    if is_open() {
        OPEN.with_borrow_mut(|g| {
            g.failed.get_or_insert_with(|| (f.code, f.text.clone()));
        });
    }
}

/// Whether the work queued on `streams` is done (collecting its error if it failed).
pub fn complete_idle<'a>(streams: impl IntoIterator<Item = &'a Stream>) -> Result<bool, Error> {
    for s in streams {
        if !s.is_idle() {
            return Ok(false);
        }
        s.synchronize()?;
    }
    Ok(true)
}

/// Whether calls on `live`'s GPU are queued on the caller's stream and not waited for.
pub fn queued_on_gpu(live: &Live) -> bool {
    live.comm.device().is_cuda() && !jitccl::cuda_sync_launches()
}

/// What a call on `stream` returns once queued outside a group: on a GPU, at once (its
/// failure, once seen, fails the communicator: the next call and ncclCommGetAsyncError
/// return it); else, blocking, when it is done, and nonblocking, `ncclInProgress` until it
/// is.
pub fn complete(live: &Live, stream: &Stream) -> Outcome {
    if live.comm.is_blocking() {
        if queued_on_gpu(live) {
            return Ok(SUCCESS);
        }
        stream.synchronize()?;
        return Ok(SUCCESS);
    }
    let done = match live.comm.async_error()? {
        CommState::InProgress => false,
        // Queued on the caller's stream, it is the caller's to wait for.
        CommState::Ready if queued_on_gpu(live) => true,
        CommState::Ready => complete_idle([stream])?,
    };
    Ok(if done { SUCCESS } else { IN_PROGRESS })
}

/// Closes the innermost group; the outermost hands back what it posted, or the failure
/// of a call in it.
fn close(name: &str) -> Result<Option<Result<Vec<Posted>, Failure>>, Failure> {
    OPEN.with_borrow_mut(|g| match g.depth {
        0 => Err(fail(INVALID_USAGE, format!("{name} without ncclGroupStart"))),
        1 => {
            g.depth = 0;
            OPEN_ANYWHERE.fetch_sub(1, Ordering::Relaxed);
            let posted = std::mem::take(&mut g.posted);
            Ok(Some(match g.failed.take() {
                Some((code, text)) => Err(fail(code, format!("a call in the group failed: {text}"))),
                None => Ok(posted),
            }))
        }
        _ => {
            g.depth -= 1;
            Ok(None)
        }
    })
}

/// The distinct live communicators of `posted`.
fn comms(posted: &[Posted]) -> Vec<*mut CommHandle> {
    let mut out: Vec<*mut CommHandle> = Vec::new();
    for p in posted {
        if !out.contains(&p.comm) {
            out.push(p.comm);
        }
    }
    out
}

/// An error of a group: every communicator in it keeps the text too.
unsafe fn fail_all(comms: &[*mut CommHandle], f: Failure) -> Failure {
    for &c in comms {
        if let Some(h) = CommHandle::get(c) {
            h.last_error.set(&format!("ncclGroupEnd: {}", f.text));
        }
    }
    f
}

export! {
    ncclGroupStart / pncclGroupStart() -> NcclResult {
        guard("ncclGroupStart", None, || {
            OPEN.with_borrow_mut(|g| {
                if g.depth == 0 {
                    OPEN_ANYWHERE.fetch_add(1, Ordering::Relaxed);
                }
                g.depth += 1
            });
            jitccl::group_start();
            Ok(SUCCESS)
        })
    }
}

export! {
    ncclGroupEnd / pncclGroupEnd() -> NcclResult {
        guard("ncclGroupEnd", None, || {
            let posted = match close("ncclGroupEnd")? {
                None => return jitccl::group_end().map(|()| SUCCESS).map_err(Failure::from),
                Some(Err(f)) => {
                    // Nothing of the group runs (the runtime's part is dropped too).
                    let _ = jitccl::group_discard();
                    return Err(f);
                }
                Some(Ok(posted)) => posted,
            };
            let launched = jitccl::group_end();
            let comms = comms(&posted);
            launched.map_err(|e| fail_all(&comms, e.into()))?;
            let mut code = SUCCESS;
            // Each communicator's calls on each stream once.
            let firsts = posted.iter().enumerate().filter(|(i, p)| {
                !posted[..*i].iter().any(|q| q.comm == p.comm && q.stream.same(&p.stream))
            });
            for (_, p) in firsts {
                match CommHandle::live(p.comm).and_then(|l| complete(&l, &p.stream)) {
                    Ok(IN_PROGRESS) => code = IN_PROGRESS,
                    Ok(_) => {}
                    Err(f) => return Err(fail_all(&comms, f)),
                }
            }
            Ok(code)
        })
    }
}

export! {
    /// Closes the group as ncclGroupEnd would, but runs nothing: the cost model's time of
    /// what was posted (microseconds, summed per communicator: their calls run one after
    /// another) goes to `info->estimatedTime`.
    ncclGroupSimulateEnd / pncclGroupSimulateEnd(info: *mut SimInfo) -> NcclResult {
        guard("ncclGroupSimulateEnd", None, || {
            if !info.is_null() && (*info).magic != SIM_INFO_MAGIC {
                let _ = close("ncclGroupSimulateEnd");
                let _ = jitccl::group_discard();
                return Err(fail(INVALID_ARGUMENT, "ncclSimInfo_t magic is wrong: use NCCL_SIM_INFO_INITIALIZER"));
            }
            let closed = close("ncclGroupSimulateEnd")?;
            jitccl::group_discard()?;
            let Some(posted) = closed else { return Ok(SUCCESS) };
            let posted = posted?;
            let mut per_comm: Vec<(*mut CommHandle, f64)> = Vec::new();
            for p in &posted {
                let t = CommHandle::live(p.comm)?.comm.estimate(p.coll, p.dtype, p.count)?;
                match per_comm.iter_mut().find(|(c, _)| *c == p.comm) {
                    Some((_, sum)) => *sum += t,
                    None => per_comm.push((p.comm, t)),
                }
            }
            if !info.is_null() {
                (*info).estimated_time = per_comm.iter().map(|(_, t)| *t).fold(0.0, f64::max) as f32;
            }
            Ok(SUCCESS)
        })
    }
}
