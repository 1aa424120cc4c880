//! jitccl.h's process group: the runtime's `ProcessGroup` (c10d's design: work queued in
//! order on the caller's thread, `Work` handles, a watchdog that fails work past the
//! group's timeout and aborts the communicator) over a communicator of this library, for
//! C, C++ and Python callers (the PyTorch backend runs its calls through it).
//!
//! An operation is a job: a function of the caller's that makes NCCL calls on the group's
//! communicator (any of them, in a group or not, on the caller's own pointers), run at once
//! on the calling thread. Its calls return once queued on the communicator's stream rather
//! than when done (`group::queuing_on`), and its work completes when the stream has run
//! them. A job rather than one function per collective: the callers keep NCCL's calls,
//! types, ops, groups and wire formats as they are, with their own memory, and a binding's
//! operation that is several calls (PyTorch's list collectives, its bitwise reductions by
//! all-gather) is one work.
//!
//! Handles are numbers looked up in a table (never reused), not pointers: a released work
//! or a destroyed group is refused, never read.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use jitccl::{Error, ProcessGroup, Work};

use crate::group;
use crate::handle::{last_error, CommHandle};
use crate::settings::give;
use crate::status::guard;
use crate::types::*;

/// `jitcclProcessGroup_t` and `jitcclWork_t`: opaque to C, a number of `Handles`.
pub enum PgHandle {}
pub enum WorkHandle {}

/// `jitcclJob_t`: one operation's calls; its result code says whether they were queued.
pub type Job = Option<unsafe extern "C" fn(arg: *mut c_void) -> NcclResult>;

/// What a group handle names: the runtime's group and the communicator handle its jobs
/// call on (the table is shared between threads; the handle's address is only compared
/// and looked up through `CommHandle`).
struct Group {
    pg: ProcessGroup,
    comm: usize,
}

/// Live handles by number. Numbers start at 1 and are never given twice.
struct Handles<T> {
    items: Mutex<HashMap<usize, T>>,
    next: AtomicUsize,
    what: &'static str,
}

impl<T: Clone> Handles<T> {
    fn new(what: &'static str) -> Handles<T> {
        Handles { items: Mutex::default(), next: AtomicUsize::new(1), what }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<usize, T>> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, item: T) -> usize {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, item);
        id
    }

    fn missing(&self, id: usize) -> Failure {
        match id {
            0 => fail(INVALID_ARGUMENT, format!("the {} is NULL", self.what)),
            _ => fail(
                INVALID_ARGUMENT,
                format!("not a live {} of this library (released, destroyed, or never made)", self.what),
            ),
        }
    }

    fn get(&self, id: usize) -> Result<T, Failure> {
        self.lock().get(&id).cloned().ok_or_else(|| self.missing(id))
    }

    fn remove(&self, id: usize) -> Result<T, Failure> {
        self.lock().remove(&id).ok_or_else(|| self.missing(id))
    }
}

static GROUPS: LazyLock<Handles<std::sync::Arc<Group>>> = LazyLock::new(|| Handles::new("process group"));
static WORKS: LazyLock<Handles<Work>> = LazyLock::new(|| Handles::new("work"));

/// The error a job's failed call becomes: of the same result code (`status::code_of`),
/// naming the operation and the rank, with the call's text.
fn job_error(code: NcclResult, op: &str, comm: &jitccl::Comm, text: String) -> Error {
    let rank = comm.rank();
    let context = format!("{op} on rank {rank}: the job's call failed");
    match code {
        INVALID_ARGUMENT => return Error::InvalidArgument(format!("{context}: {text}")),
        INVALID_USAGE => return Error::InvalidUsage(format!("{context}: {text}")),
        _ => {}
    }
    // A failed communicator's own error names the peer and the operation.
    if let Err(e) = comm.async_error() {
        return e;
    }
    match code {
        UNHANDLED_CUDA_ERROR => Error::Device(format!("{context}: {text}")),
        SYSTEM_ERROR => Error::System { context, source: std::io::Error::other(text) },
        // A call on another communicator that lost a peer or timed out: as an operation of
        // the group that did (which breaks the group; the group gives it its number).
        REMOTE_ERROR | TIMEOUT => {
            let (reason, timed_out) = (format!("{context}: {text}"), code == TIMEOUT);
            Error::Work { op: op.to_string().into(), seq: 0, rank, peer: None, reason, timed_out }
        }
        _ => Error::Internal(format!("{context}: {text}")),
    }
}

/// A group over `comm` (a blocking communicator of this library on the host) whose
/// watchdog fails work running longer than `timeout` seconds and aborts the communicator.
#[no_mangle]
pub unsafe extern "C" fn jitcclProcessGroupCreate(
    comm: *mut CommHandle, timeout: f64, group: *mut *mut PgHandle,
) -> NcclResult {
    guard("jitcclProcessGroupCreate", last_error(comm), || {
        if group.is_null() {
            return Err(fail(INVALID_ARGUMENT, "group is NULL"));
        }
        if !(timeout.is_finite() && timeout > 0.0 && timeout < 1e9) {
            return Err(fail(INVALID_ARGUMENT, format!("timeout {timeout} s: expected more than 0 and less than 1e9")));
        }
        let live = CommHandle::live(comm)?;
        if live.comm.device().is_cuda() {
            return Err(fail(
                INVALID_USAGE,
                "a process group over a communicator on a GPU is not supported yet (its calls are queued on the \
                 caller's CUDA stream, which the group does not follow): use a communicator on the host",
            ));
        }
        let pg = ProcessGroup::on_stream(live.comm.clone(), live.stream.clone(), Duration::from_secs_f64(timeout))?;
        let id = GROUPS.add(std::sync::Arc::new(Group { pg, comm: comm as usize }));
        *group = id as *mut PgHandle;
        Ok(SUCCESS)
    })
}

/// Runs `job(arg)` now, on this thread, as the group's next operation, named `operation`
/// (`peer`: the rank it exchanges with, else -1), and gives its work.
#[no_mangle]
pub unsafe extern "C" fn jitcclProcessGroupSubmit(
    group: *mut PgHandle, operation: *const c_char, peer: c_int, job: Job, arg: *mut c_void, work: *mut *mut WorkHandle,
) -> NcclResult {
    guard("jitcclProcessGroupSubmit", None, || {
        if work.is_null() {
            return Err(fail(INVALID_ARGUMENT, "work is NULL"));
        }
        let Some(job) = job else { return Err(fail(INVALID_ARGUMENT, "job is NULL")) };
        if operation.is_null() {
            return Err(fail(INVALID_ARGUMENT, "operation is NULL"));
        }
        let name = CStr::from_ptr(operation)
            .to_str()
            .map_err(|_| fail(INVALID_ARGUMENT, "operation is not UTF-8"))?
            .to_string();
        let g = GROUPS.get(group as usize)?;
        if group::is_open() || group::in_job() {
            return Err(fail(
                INVALID_USAGE,
                "jitcclProcessGroupSubmit inside ncclGroupStart/End or inside a job: a job is an operation of its own",
            ));
        }
        let live = CommHandle::live(g.comm as *mut CommHandle)
            .map_err(|f| fail(f.code, format!("the group's communicator: {}", f.text)))?;
        let slot = &CommHandle::get(g.comm as *mut CommHandle).expect("a live handle").last_error;
        let label = name.clone();
        let w = g.pg.submit(name, usize::try_from(peer).ok(), |comm, stream| {
            match group::queuing_on(stream, || job(arg)) {
                SUCCESS | IN_PROGRESS => Ok(()),
                code => Err(job_error(code, &label, comm, slot.text())),
            }
        });
        drop(live);
        *work = WORKS.add(w) as *mut WorkHandle;
        Ok(SUCCESS)
    })
}

/// Waits up to `timeout_ms` (negative: until it ends, which the group's watchdog bounds):
/// ncclSuccess once done, the work's error code if it failed, ncclInProgress if the time
/// ran out first.
#[no_mangle]
pub unsafe extern "C" fn jitcclWorkWait(work: *mut WorkHandle, timeout_ms: i64) -> NcclResult {
    guard("jitcclWorkWait", None, || {
        let w = WORKS.get(work as usize)?;
        let timeout = u64::try_from(timeout_ms).map_or(Duration::MAX, Duration::from_millis);
        match w.wait(timeout) {
            Ok(()) => Ok(SUCCESS),
            Err(_) if !w.is_completed() => Ok(IN_PROGRESS),
            Err(e) => Err(e.into()),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn jitcclWorkIsCompleted(work: *mut WorkHandle, completed: *mut c_int) -> NcclResult {
    guard("jitcclWorkIsCompleted", None, || {
        if completed.is_null() {
            return Err(fail(INVALID_ARGUMENT, "completed is NULL"));
        }
        *completed = c_int::from(WORKS.get(work as usize)?.is_completed());
        Ok(SUCCESS)
    })
}

/// The work's error text ("" while pending or after a success), as `jitcclSettingsJson`
/// gives text, except that a NULL `buf` asks for the size only: a binding reads a failed
/// work's text with two calls, and the first must neither warn nor replace the last error.
#[no_mangle]
pub unsafe extern "C" fn jitcclWorkError(work: *mut WorkHandle, buf: *mut c_char, len: *mut usize) -> NcclResult {
    guard("jitcclWorkError", None, || {
        let text = WORKS.get(work as usize)?.error().map(|e| e.to_string()).unwrap_or_default();
        if buf.is_null() && !len.is_null() {
            *len = text.len() + 1;
            return Ok(SUCCESS);
        }
        give(&text, buf, len)
    })
}

/// Lets go of the handle; the operation itself goes on if pending.
#[no_mangle]
pub unsafe extern "C" fn jitcclWorkRelease(work: *mut WorkHandle) -> NcclResult {
    guard("jitcclWorkRelease", None, || WORKS.remove(work as usize).map(|_| SUCCESS))
}

/// Fails every pending work and aborts the communicator.
#[no_mangle]
pub unsafe extern "C" fn jitcclProcessGroupAbort(group: *mut PgHandle) -> NcclResult {
    guard("jitcclProcessGroupAbort", None, || {
        GROUPS.get(group as usize)?.pg.abort();
        Ok(SUCCESS)
    })
}

/// Ends the group once its pending work has ended (bounded by its timeout); the
/// communicator stays the caller's.
#[no_mangle]
pub unsafe extern "C" fn jitcclProcessGroupDestroy(group: *mut PgHandle) -> NcclResult {
    guard("jitcclProcessGroupDestroy", None, || GROUPS.remove(group as usize).map(|_| SUCCESS))
}
