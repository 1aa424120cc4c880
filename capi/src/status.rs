//! Result codes and last-error texts: jitccl's errors as NCCL's `ncclResult_t`, the text
//! of the last failure (process-wide, and per communicator for `ncclGetLastError(comm)`),
//! and the guard every export runs in, so that a panic becomes `ncclInternalError`.

use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{LazyLock, Mutex};

use jitccl::Error;

use crate::types::*;

/// NCCL's code for a jitccl error.
pub fn code_of(e: &Error) -> NcclResult {
    match e {
        Error::InvalidArgument(_) => INVALID_ARGUMENT,
        Error::InvalidUsage(_) | Error::Unsupported(_) | Error::Aborted { .. } => INVALID_USAGE,
        Error::InProgress(_) => IN_PROGRESS,
        Error::Timeout { .. } | Error::Work { timed_out: true, .. } => TIMEOUT,
        Error::PeerFailed { .. } | Error::Work { .. } | Error::Bootstrap(_) | Error::Store(_) => REMOTE_ERROR,
        Error::Device(_) => UNHANDLED_CUDA_ERROR,
        Error::System { .. } => SYSTEM_ERROR,
        _ => INTERNAL_ERROR,
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure { code: code_of(&e), text: e.to_string() }
    }
}

pub type Outcome = Result<NcclResult, Failure>;

/// A last-error slot: the text stays valid until the next failure replaces it.
#[derive(Default)]
pub struct LastError(Mutex<CString>);

impl LastError {
    pub fn set(&self, text: &str) {
        let c = CString::new(text.replace('\0', " ")).unwrap_or_default();
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = c;
    }

    /// A copy of the text.
    pub fn text(&self) -> String {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).to_string_lossy().into_owned()
    }

    /// The text, valid until the next `set` (as NCCL's, which callers copy at once).
    pub fn as_ptr(&self) -> *const c_char {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).as_ptr()
    }
}

/// The process-wide last error (what `ncclGetLastError(NULL)` gives).
pub static LAST: LazyLock<LastError> = LazyLock::new(LastError::default);

/// Runs an export's body: a failure is logged, its text kept (process-wide and in
/// `comm_last`, the communicator's slot) with the function's name, and its code returned;
/// a panic becomes `ncclInternalError`.
#[inline(always)]
pub fn guard(name: &str, comm_last: Option<&LastError>, body: impl FnOnce() -> Outcome) -> NcclResult {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(code)) => code,
        Ok(Err(f)) => report(name, comm_last, f),
        Err(_) => {
            report(name, comm_last, fail(INTERNAL_ERROR, "internal error: a panic in jitccl (a bug; please report it)"))
        }
    }
}

/// A failure's log line and last-error texts; out of line, so that the calls that succeed
/// carry none of it.
#[cold]
#[inline(never)]
fn report(name: &str, comm_last: Option<&LastError>, failure: Failure) -> NcclResult {
    let text = format!("{name}: {}", failure.text);
    tracing::warn!("{text}");
    LAST.set(&text);
    if let Some(slot) = comm_last {
        slot.set(&text);
    }
    failure.code
}

/// `ncclGetErrorString`'s texts (static, as NCCL's).
pub fn error_string(code: NcclResult) -> &'static [u8] {
    match code {
        SUCCESS => b"no error\0",
        UNHANDLED_CUDA_ERROR => b"unhandled cuda error (run with JITCCL_DEBUG=INFO for details)\0",
        SYSTEM_ERROR => b"unhandled system error (run with JITCCL_DEBUG=INFO for details)\0",
        INTERNAL_ERROR => b"internal error - please report this issue to the jitccl developers\0",
        INVALID_ARGUMENT => b"invalid argument (ncclGetLastError says which)\0",
        INVALID_USAGE => b"invalid usage (ncclGetLastError says why)\0",
        REMOTE_ERROR => b"remote process exited or there was a network error\0",
        IN_PROGRESS => b"NCCL operation in progress\0",
        TIMEOUT => b"NCCL operation timed out\0",
        _ => b"unknown result code\0",
    }
}
