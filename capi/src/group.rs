//! Groups (ncclGroupStart / End / SimulateEnd) as the runtime's groups (`jitccl::group_start`
//! and its kin keep the depth, what was posted, the launch at the outermost end and the cost
//! model's estimate), and when a call is complete.
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

use jitccl::{Comm, CommState, Error, Stream};

use crate::handle::CommHandle;
use crate::status::{guard, Outcome};
use crate::types::*;

/// What the C API keeps of this thread's open group beside the runtime's (which holds the
/// depth, what was posted and the launch): the handles its calls used, whose last errors
/// get the group's, and the first call that failed in it with its result code (as NCCL,
/// the group's end then returns that error and runs nothing).
struct Open {
    handles: Vec<*mut CommHandle>,
    failed: Option<(NcclResult, String)>,
}

thread_local! {
    static OPEN: RefCell<Open> = const { RefCell::new(Open { handles: Vec::new(), failed: None }) };
    /// The stream of the process-group job running on this thread (`queuing_on`).
    static JOB: RefCell<Option<Stream>> = const { RefCell::new(None) };
}

/// Threads running a process-group job: while none does, a call needs no look at its
/// thread's job (a thread-local access is a function call in a shared library).
static JOBS_ANYWHERE: AtomicUsize = AtomicUsize::new(0);

/// Runs `f`, a process-group job, on this thread: the calls it makes on `stream` return
/// once queued there (the group follows them on the stream), not when done.
pub fn queuing_on<R>(stream: &Stream, f: impl FnOnce() -> R) -> R {
    struct Ends;
    impl Drop for Ends {
        fn drop(&mut self) {
            JOB.set(None);
            JOBS_ANYWHERE.fetch_sub(1, Ordering::SeqCst);
        }
    }
    JOBS_ANYWHERE.fetch_add(1, Ordering::SeqCst);
    JOB.set(Some(stream.clone()));
    let _ends = Ends;
    f()
}

/// Whether a process-group job runs on this thread.
pub fn in_job() -> bool {
    JOBS_ANYWHERE.load(Ordering::Relaxed) > 0 && JOB.with_borrow(Option::is_some)
}

/// Whether a call queued on `stream` belongs to the job running on this thread.
#[inline]
fn job_queues_on(stream: &Stream) -> bool {
    JOBS_ANYWHERE.load(Ordering::Relaxed) > 0 && JOB.with_borrow(|j| j.as_ref().is_some_and(|s| s.same(stream)))
}

/// Whether a group is open on this thread.
#[inline]
pub fn is_open() -> bool {
    jitccl::group_depth() > 0
}

/// Notes a call of `comm` made inside the open group (the runtime posted it).
pub fn posted(comm: *mut CommHandle) {
    OPEN.with_borrow_mut(|g| {
        if !g.handles.contains(&comm) {
            g.handles.push(comm)
        }
    });
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

/// Whether calls on `comm`'s GPU are queued on the caller's stream and not waited for.
pub fn queued_on_gpu(comm: &Comm) -> bool {
    comm.device().is_cuda() && !jitccl::cuda_sync_launches()
}

/// What a call on `stream` returns once queued outside a group: on a GPU, at once (its
/// failure, once seen, fails the communicator: the next call and ncclCommGetAsyncError
/// return it); in a process-group job on the group's stream, at once (the group's work
/// completes when it is done); else, blocking, when it is done, and nonblocking,
/// `ncclInProgress` until it is.
pub fn complete(comm: &Comm, stream: &Stream) -> Outcome {
    if comm.is_blocking() {
        if queued_on_gpu(comm) || job_queues_on(stream) {
            return Ok(SUCCESS);
        }
        stream.synchronize()?;
        return Ok(SUCCESS);
    }
    let done = match comm.async_error()? {
        CommState::InProgress => false,
        // Queued on the caller's stream, it is the caller's to wait for.
        CommState::Ready if queued_on_gpu(comm) => true,
        CommState::Ready => complete_idle([stream])?,
    };
    Ok(if done { SUCCESS } else { IN_PROGRESS })
}

/// Before closing a group as `name`: without one open, the error; for the outermost, what
/// the C API kept of it (then forgotten); `None` for an inner one.
fn closing(name: &str) -> Result<Option<Open>, Failure> {
    match jitccl::group_depth() {
        0 => Err(fail(INVALID_USAGE, format!("{name} without ncclGroupStart"))),
        1 => Ok(Some(
            OPEN.with_borrow_mut(|g| Open { handles: std::mem::take(&mut g.handles), failed: g.failed.take() }),
        )),
        _ => Ok(None),
    }
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
            jitccl::group_start();
            Ok(SUCCESS)
        })
    }
}

export! {
    ncclGroupEnd / pncclGroupEnd() -> NcclResult {
        guard("ncclGroupEnd", None, || {
            let Some(open) = closing("ncclGroupEnd")? else {
                return jitccl::group_end().map(|()| SUCCESS).map_err(Failure::from);
            };
            if let Some((code, text)) = open.failed {
                // Nothing of the group runs.
                let _ = jitccl::group_discard();
                return Err(fail(code, format!("a call in the group failed: {text}")));
            }
            let launched = jitccl::group_end_launched().map_err(|e| fail_all(&open.handles, e.into()))?;
            let mut code = SUCCESS;
            for (comm, stream) in &launched {
                match complete(comm, stream) {
                    Ok(IN_PROGRESS) => code = IN_PROGRESS,
                    Ok(_) => {}
                    Err(f) => return Err(fail_all(&open.handles, f)),
                }
            }
            Ok(code)
        })
    }
}

export! {
    /// Closes the group as ncclGroupEnd would, but runs nothing: the cost model's time of
    /// what was posted (the runtime's `group_simulate_end`) goes to `info->estimatedTime`.
    ncclGroupSimulateEnd / pncclGroupSimulateEnd(info: *mut SimInfo) -> NcclResult {
        guard("ncclGroupSimulateEnd", None, || {
            if !info.is_null() && (*info).magic != SIM_INFO_MAGIC {
                let _ = closing("ncclGroupSimulateEnd");
                let _ = jitccl::group_discard();
                return Err(fail(INVALID_ARGUMENT, "ncclSimInfo_t magic is wrong: use NCCL_SIM_INFO_INITIALIZER"));
            }
            let open = closing("ncclGroupSimulateEnd")?;
            if let Some((code, text)) = open.and_then(|o| o.failed) {
                let _ = jitccl::group_discard();
                return Err(fail(code, format!("a call in the group failed: {text}")));
            }
            let estimate = jitccl::group_simulate_end()?;
            if let (Some(t), false) = (estimate, info.is_null()) {
                (*info).estimated_time = t as f32;
            }
            Ok(SUCCESS)
        })
    }
}
