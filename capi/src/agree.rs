//! `jitcclAgree` (`include/jitccl.h`): the runtime's check that every rank makes the same
//! call (`jitccl::agreement`), for bindings that let users pass their own tensors (the
//! PyTorch backend's C++ and Python parts call it before each collective).

use std::ffi::{c_char, c_int, CStr};

use jitccl::agreement::{Agreement, Descriptor, Verdict};

use crate::group;
use crate::handle::{last_error, CommHandle};
use crate::status::guard;
use crate::types::*;
use crate::wire::CWire;

/// `jitcclCall_t`: a call as the ranks compare it (names are NUL-terminated; NULL: none).
#[repr(C)]
pub struct CCall {
    pub operation: *const c_char,
    pub type_: *const c_char,
    pub counts: *const usize,
    pub ncounts: usize,
    pub root: c_int,
    pub reduction: *const c_char,
    pub wire: *const CWire,
}

unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>, Failure> {
    if p.is_null() {
        return Ok(None);
    }
    let s =
        CStr::from_ptr(p).to_str().map_err(|_| fail(INVALID_ARGUMENT, format!("the call's {what} is not UTF-8")))?;
    Ok(Some(s))
}

/// Copies `s` and a NUL into `out` (`len` bytes), cut at a character boundary to fit.
unsafe fn copy_out(s: &str, out: *mut c_char, len: usize) {
    let mut n = s.len().min(len - 1);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    std::ptr::copy_nonoverlapping(s.as_ptr(), out.cast::<u8>(), n);
    *out.add(n) = 0;
}

#[no_mangle]
pub unsafe extern "C" fn jitcclAgree(
    call: *const CCall, refusal: *mut c_char, len: usize, comm: *mut CommHandle,
) -> NcclResult {
    guard("jitcclAgree", last_error(comm), || {
        if call.is_null() || refusal.is_null() || len == 0 {
            return Err(fail(INVALID_ARGUMENT, "call or refusal is NULL, or len is 0"));
        }
        if group::is_open() {
            return Err(fail(INVALID_USAGE, "jitcclAgree inside a group: its answer is needed before the group ends"));
        }
        let c = &*call;
        let op =
            text(c.operation, "operation")?.ok_or_else(|| fail(INVALID_ARGUMENT, "the call's operation is NULL"))?;
        let counts: Vec<u64> = match c.ncounts {
            0 => Vec::new(),
            _ if c.counts.is_null() => return Err(fail(INVALID_ARGUMENT, "ncounts is not 0 and counts is NULL")),
            n => std::slice::from_raw_parts(c.counts, n).iter().map(|&x| x as u64).collect(),
        };
        let wire = match c.wire.as_ref() {
            None => None,
            Some(w) => Some(w.wire()?),
        };
        let descriptor = Descriptor {
            op,
            dtype: text(c.type_, "type")?,
            counts: &counts,
            root: usize::try_from(c.root).ok(),
            reduction: text(c.reduction, "reduction")?,
            wire,
        };
        let live = CommHandle::live(comm)?;
        let mut agreement = live.agreement.lock().unwrap_or_else(|e| e.into_inner());
        let agreement = match &mut *agreement {
            Some(a) => a,
            // On the communicator's stream, behind its process group's pending work.
            slot => slot.insert(Agreement::on_stream(&live.comm, live.stream.clone())?),
        };
        match agreement.check(&live.comm, &descriptor)? {
            Verdict::Agreed => copy_out("", refusal, len),
            Verdict::Refused(why) => copy_out(&why, refusal, len),
        }
        Ok(SUCCESS)
    })
}
