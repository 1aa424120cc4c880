//! Memory: ncclMemAlloc / ncclMemFree (on the host, blocks of the process's host arena,
//! which peer processes map, so the direct algorithms can run on them), buffer
//! registration (ncclCommRegister: local, as NCCL's) and windows (ncclCommWindowRegister:
//! collective, onto jitccl's registration, which lets the direct algorithms run).

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};

use jitccl::{Device, DeviceBuffer};

use crate::handle::{current_device, last_error, CommHandle, Live, Registered};
use crate::status::{guard, Outcome};
use crate::types::*;

/// What ncclMemAlloc handed out, by address.
static ALLOCATED: LazyLock<Mutex<HashMap<usize, DeviceBuffer<u8>>>> = LazyLock::new(Mutex::default);

/// Registration handles and windows are tokens (never addresses): a stale or foreign one
/// is found out, not followed.
static NEXT_TOKEN: AtomicUsize = AtomicUsize::new(1);

export! {
    ncclMemAlloc / pncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> NcclResult {
        guard("ncclMemAlloc", None, || {
            if ptr.is_null() || size == 0 {
                return Err(fail(INVALID_ARGUMENT, format!("{size} bytes into {ptr:?}: need a pointer and a size")));
            }
            let device = match current_device(0)? {
                Device::Host { .. } => Device::host(0),
                d => d,
            };
            let b = device.alloc::<u8>(size)?;
            let p = b.address() as *mut c_void;
            ALLOCATED.lock().unwrap_or_else(|e| e.into_inner()).insert(p as usize, b);
            *ptr = p;
            Ok(SUCCESS)
        })
    }
}

export! {
    ncclMemFree / pncclMemFree(ptr: *mut c_void) -> NcclResult {
        guard("ncclMemFree", None, || {
            match ALLOCATED.lock().unwrap_or_else(|e| e.into_inner()).remove(&(ptr as usize)) {
                Some(_) => Ok(SUCCESS),
                None => Err(fail(INVALID_ARGUMENT, format!("{ptr:?} was not allocated by ncclMemAlloc"))),
            }
        })
    }
}

fn token() -> usize {
    NEXT_TOKEN.fetch_add(1, Ordering::Relaxed)
}

unsafe fn remember(live: &Live, r: Registered, out: *mut *mut c_void) -> Outcome {
    let t = token();
    live.registrations.lock().unwrap_or_else(|e| e.into_inner()).insert(t, r);
    *out = t as *mut c_void;
    Ok(SUCCESS)
}

unsafe fn forget(live: &Live, handle: *mut c_void) -> Outcome {
    match live.registrations.lock().unwrap_or_else(|e| e.into_inner()).remove(&(handle as usize)) {
        Some(_) => Ok(SUCCESS),
        None => Err(fail(INVALID_ARGUMENT, format!("{handle:?} is not a registration of this communicator"))),
    }
}

export! {
    /// Local, as NCCL's: the buffer is noted for this communicator; jitccl's direct
    /// algorithms need every rank's buffers, which windows (collective) give.
    ncclCommRegister / pncclCommRegister(comm: *mut CommHandle, buff: *mut c_void, size: usize, handle: *mut *mut c_void) -> NcclResult {
        guard("ncclCommRegister", last_error(comm), || {
            let live = CommHandle::live(comm)?;
            if handle.is_null() || (buff.is_null() && size > 0) {
                return Err(fail(INVALID_ARGUMENT, "buffer or handle pointer is NULL"));
            }
            remember(&live, Registered { ptr: buff as usize, registration: None }, handle)
        })
    }
}

export! {
    ncclCommDeregister / pncclCommDeregister(comm: *mut CommHandle, handle: *mut c_void) -> NcclResult {
        guard("ncclCommDeregister", last_error(comm), || forget(&*CommHandle::live(comm)?, handle))
    }
}

export! {
    /// Collective: every rank registers a buffer of the same size, in the same order. On
    /// the host, ranks in other processes need buffers from ncclMemAlloc (the host arena);
    /// elsewhere it fails with ncclInvalidUsage on every rank.
    ncclCommWindowRegister / pncclCommWindowRegister(
        comm: *mut CommHandle, buff: *mut c_void, size: usize, win: *mut *mut c_void, flags: c_int,
    ) -> NcclResult {
        guard("ncclCommWindowRegister", last_error(comm), || {
            let live = CommHandle::live(comm)?;
            if win.is_null() || (buff.is_null() && size > 0) {
                return Err(fail(INVALID_ARGUMENT, "buffer or window pointer is NULL"));
            }
            if flags & !0x3 != 0 {
                return Err(fail(INVALID_ARGUMENT, format!("window flags {flags:#x}: NCCL_WIN_* only")));
            }
            let b = DeviceBuffer::<u8>::from_raw(live.comm.device(), buff.cast(), size)?;
            let reg = live.comm.register(&b).map_err(|e| match e {
                // The runtime's advice names its Rust call; C callers have ncclMemAlloc.
                jitccl::Error::Unsupported(_) => fail(
                    INVALID_USAGE,
                    format!("rank {}: ranks in other processes share windows only of buffers from ncclMemAlloc ({e})", live.comm.rank()),
                ),
                e => e.into(),
            })?;
            remember(&live, Registered { ptr: buff as usize, registration: Some(reg) }, win)
        })
    }
}

export! {
    ncclCommWindowDeregister / pncclCommWindowDeregister(comm: *mut CommHandle, win: *mut c_void) -> NcclResult {
        guard("ncclCommWindowDeregister", last_error(comm), || forget(&*CommHandle::live(comm)?, win))
    }
}

export! {
    ncclWinGetUserPtr / pncclWinGetUserPtr(comm: *mut CommHandle, win: *mut c_void, out: *mut *mut c_void) -> NcclResult {
        guard("ncclWinGetUserPtr", last_error(comm), || {
            let live = CommHandle::live(comm)?;
            if out.is_null() {
                return Err(fail(INVALID_ARGUMENT, "the output pointer is NULL"));
            }
            let ptr = live
                .registrations
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&(win as usize))
                .filter(|r| r.registration.is_some())
                .map(|r| r.ptr);
            match ptr {
                Some(p) => {
                    *out = p as *mut c_void;
                    Ok(SUCCESS)
                }
                None => Err(fail(INVALID_ARGUMENT, format!("{win:?} is not a window of this communicator"))),
            }
        })
    }
}
