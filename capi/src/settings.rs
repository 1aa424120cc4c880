//! jitccl's extension header `include/jitccl.h`: the settings as this library reads them,
//! for programs and bindings (the Python package) that would otherwise read the same
//! variables by name beside the table, with other defaults and other checks.

use std::ffi::c_char;

use jitccl::settings::{current, json, ALL};
use jitccl_codegen::cache::DiskCache;

use crate::status::{guard, Outcome};
use crate::types::*;

/// Copies `text` and its NUL into `buf` of `*len` bytes; `*len` becomes the bytes it takes
/// (NUL included), so a caller with too small a buffer (or none: NULL) learns the size.
pub(crate) unsafe fn give(text: &str, buf: *mut c_char, len: *mut usize) -> Outcome {
    if len.is_null() {
        return Err(fail(INVALID_ARGUMENT, "len is NULL"));
    }
    let need = text.len() + 1;
    let room = std::mem::replace(&mut *len, need);
    if buf.is_null() || room < need {
        return Err(fail(INVALID_ARGUMENT, format!("the buffer takes {room} bytes; {need} are needed")));
    }
    std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
    *buf.add(text.len()) = 0;
    Ok(SUCCESS)
}

/// `jitcclSettingsJson`: every setting with its current value, as `jitccl env --all --json`
/// prints it.
#[no_mangle]
pub unsafe extern "C" fn jitcclSettingsJson(buf: *mut c_char, len: *mut usize) -> NcclResult {
    guard("jitcclSettingsJson", None, || give(&json(&current(ALL)), buf, len))
}

/// `jitcclCacheDir`: the folder of the kernel cache this process uses (`JITCCL_CACHE_DIR`,
/// else the user's cache folder), or "" when it keeps none.
#[no_mangle]
pub unsafe extern "C" fn jitcclCacheDir(buf: *mut c_char, len: *mut usize) -> NcclResult {
    guard("jitcclCacheDir", None, || {
        let dir = DiskCache::from_env().map(|c| c.dir().to_string_lossy().into_owned()).unwrap_or_default();
        give(&dir, buf, len)
    })
}
