//! What jitccl does not have: suspend/resume and memory stats, the device API's host calls,
//! the one-sided calls and the parameter API. Each returns `ncclInvalidUsage` with a last-error
//! text naming the function; none claims success.

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::status::{guard, LAST};
use crate::types::*;

/// Refuses `name`.
fn refuse(name: &str) -> NcclResult {
    guard(name, None, || Err(fail(INVALID_USAGE, "not supported by jitccl (see docs/guide.md, \"The C API\")")))
}

/// Exports each listed function (and its `pnccl` twin) as a refusal.
macro_rules! refused {
    ($($n:ident / $p:ident ($($a:ident : $t:ty),* $(,)?);)+) => {$(
        export! {
            $n / $p($($a: $t),*) -> NcclResult {
                $(let _ = $a;)*
                refuse(stringify!($n))
            }
        }
    )+};
}

refused! {
    ncclCommSuspend / pncclCommSuspend(comm: *mut c_void, flags: c_int);
    ncclCommResume / pncclCommResume(comm: *mut c_void);
    ncclCommMemStats / pncclCommMemStats(comm: *mut c_void, stat: c_int, value: *mut u64);
    // The device API's host calls (nccl_device/core.h): PyTorch 2.11's libtorch_cuda links
    // the first two, so a libnccl.so.2 without them cannot be preloaded under it.
    ncclDevCommCreate / pncclDevCommCreate(comm: *mut c_void, reqs: *const c_void, out: *mut c_void);
    ncclDevCommDestroy / pncclDevCommDestroy(comm: *mut c_void, dev_comm: *const c_void);
    ncclCommQueryProperties / pncclCommQueryProperties(comm: *mut c_void, props: *mut c_void);
    ncclGetLsaDevicePointer / pncclGetLsaDevicePointer(win: *mut c_void, offset: usize, lsa_rank: c_int, out: *mut c_void);
    ncclGetPeerDevicePointer / pncclGetPeerDevicePointer(win: *mut c_void, offset: usize, peer: c_int, out: *mut c_void);
    ncclGetLsaMultimemDevicePointer / pncclGetLsaMultimemDevicePointer(win: *mut c_void, offset: usize, out: *mut c_void);
    ncclPutSignal / pncclPutSignal(
        buff: *const c_void, count: usize, dt: c_int, peer: c_int, win: *mut c_void, offset: usize, sig: c_int,
        ctx: c_int, flags: c_uint, comm: *mut c_void, stream: *mut c_void,
    );
    ncclSignal / pncclSignal(peer: c_int, sig: c_int, ctx: c_int, flags: c_uint, comm: *mut c_void, stream: *mut c_void);
    ncclWaitSignal / pncclWaitSignal(n: c_int, descs: *mut c_void, comm: *mut c_void, stream: *mut c_void);
    ncclParamBind / pncclParamBind(out: *mut c_void, key: *const c_char);
    ncclParamGetI8 / pncclParamGetI8(h: *mut c_void, out: *mut c_void);
    ncclParamGetI16 / pncclParamGetI16(h: *mut c_void, out: *mut c_void);
    ncclParamGetI32 / pncclParamGetI32(h: *mut c_void, out: *mut c_void);
    ncclParamGetI64 / pncclParamGetI64(h: *mut c_void, out: *mut c_void);
    ncclParamGetU8 / pncclParamGetU8(h: *mut c_void, out: *mut c_void);
    ncclParamGetU16 / pncclParamGetU16(h: *mut c_void, out: *mut c_void);
    ncclParamGetU32 / pncclParamGetU32(h: *mut c_void, out: *mut c_void);
    ncclParamGetU64 / pncclParamGetU64(h: *mut c_void, out: *mut c_void);
    ncclParamGetStr / pncclParamGetStr(h: *mut c_void, out: *mut c_void);
    ncclParamGet / pncclParamGet(h: *mut c_void, out: *mut c_void, max_len: c_int, len: *mut c_int);
    ncclParamGetParameter / pncclParamGetParameter(key: *const c_char, value: *mut c_void, len: *mut c_int);
    ncclParamGetAllParameterKeys / pncclParamGetAllParameterKeys(table: *mut c_void, len: *mut c_int);
}

export! {
    /// Has nothing to return a refusal with: it records one as the last error.
    ncclParamDumpAll / pncclParamDumpAll() -> () {
        LAST.set("ncclParamDumpAll: not supported by jitccl (see docs/guide.md, \"The C API\")");
        tracing::warn!("ncclParamDumpAll: not supported by jitccl");
    }
}

export! {
    /// Deprecated in NCCL (and compiled out of its callers): jitccl reads JITCCL_DEBUG once.
    ncclResetDebugInit / pncclResetDebugInit() -> () {
        LAST.set("ncclResetDebugInit: not supported by jitccl (JITCCL_DEBUG is read once)");
    }
}
