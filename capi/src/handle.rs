//! What an `ncclComm_t` points to: one rank's communicator, the stream its calls run on,
//! its user-made reduction ops and registrations, and its last error. Also where a new
//! rank's device comes from: the calling thread's current CUDA device, as in NCCL, or the
//! host where there is no GPU (or `JITCCL_DEVICE=host`).
//!
//! A handle's memory is never freed: destroy empties it and marks it dead, so a call on a
//! destroyed communicator is refused with `ncclInvalidArgument` instead of reading freed
//! memory, at the cost of a few dozen bytes per communicator ever made. The check is one
//! load, so it costs small calls nothing measurable.

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use jitccl::{Comm, Device, Registration, Stream};

use crate::status::{fail, Failure, LastError};
use crate::types::*;

const LIVE: u64 = 0x6a69_7463_636c_4c56;
const DEAD: u64 = 0x6a69_7463_636c_4444;

/// An op made by ncclRedOpCreatePreMulSum: the scalar's bytes (host residence) or where
/// to read them at each call (device residence), for calls of `dtype`.
pub struct PreMul {
    pub dtype: c_dtype,
    pub scalar: Scalar,
}

#[allow(non_camel_case_types)]
pub type c_dtype = std::ffi::c_int;

pub enum Scalar {
    Value(f64),
    /// A pointer into memory on the rank's device, read when a call is made.
    At(usize),
}

/// The live part of a handle.
pub struct Live {
    pub comm: Comm,
    pub stream: Stream,
    /// Ops from ncclRedOpCreatePreMulSum: op `NUM_BUILTIN_OPS + i` is entry `i`.
    pub ops: Mutex<Vec<Option<PreMul>>>,
    /// Windows and registrations, by the handle given out.
    pub registrations: Mutex<HashMap<usize, Registered>>,
}

/// A buffer registered with ncclCommRegister (kept locally) or ncclCommWindowRegister
/// (collectively, with jitccl's registration).
pub struct Registered {
    pub ptr: usize,
    /// jitccl's registration of a window (`None`: a local registration).
    pub registration: Option<Registration>,
}

pub struct CommHandle {
    magic: AtomicU64,
    live: UnsafeCell<Option<Live>>,
    pub last_error: LastError,
}

// SAFETY: `live` is written only by destroy/abort, which NCCL's contract orders after every
// other use of the handle (no call may race a destroy of its communicator).
unsafe impl Sync for CommHandle {}

impl CommHandle {
    /// A new handle for C (never freed: see the module comment).
    pub fn leak(comm: Comm) -> Result<*mut CommHandle, Failure> {
        let stream = comm.device().stream()?;
        let live = Live { comm, stream, ops: Mutex::default(), registrations: Mutex::default() };
        let h = Box::new(CommHandle {
            magic: AtomicU64::new(LIVE),
            live: UnsafeCell::new(Some(live)),
            last_error: LastError::default(),
        });
        Ok(Box::into_raw(h))
    }

    /// The handle behind `comm`, live or destroyed; `None` for NULL or a pointer this
    /// library did not make.
    pub unsafe fn get<'a>(comm: *mut CommHandle) -> Option<&'a CommHandle> {
        let h = comm.as_ref()?;
        matches!(h.magic.load(Ordering::Acquire), LIVE | DEAD).then_some(h)
    }

    /// The live communicator behind `comm`, or why there is none.
    pub unsafe fn live<'a>(comm: *mut CommHandle) -> Result<&'a Live, Failure> {
        if comm.is_null() {
            return Err(fail(INVALID_ARGUMENT, "the communicator is NULL"));
        }
        match Self::get(comm) {
            Some(h) if h.magic.load(Ordering::Acquire) == LIVE => {
                (*h.live.get()).as_ref().ok_or_else(|| fail(INVALID_ARGUMENT, "the communicator was destroyed"))
            }
            Some(_) => Err(fail(INVALID_ARGUMENT, "the communicator was destroyed or aborted")),
            None => Err(fail(INVALID_ARGUMENT, "not a communicator of this library")),
        }
    }

    /// Ends the handle's life: later calls on it are refused.
    pub unsafe fn take(comm: *mut CommHandle) -> Result<Live, Failure> {
        Self::live(comm)?;
        let h = &*comm;
        h.magic.store(DEAD, Ordering::Release);
        (*h.live.get()).take().ok_or_else(|| fail(INVALID_ARGUMENT, "the communicator was destroyed"))
    }
}

/// The last-error slot of `comm`, if it is a handle of this library.
pub unsafe fn last_error<'a>(comm: *mut CommHandle) -> Option<&'a LastError> {
    CommHandle::get(comm).map(|h| &h.last_error)
}

/// The device of a rank created on the calling thread now: the host where asked
/// (`JITCCL_DEVICE=host`) or where there is no usable GPU, else the current CUDA device.
pub fn current_device(rank: usize) -> Result<Device, Failure> {
    match std::env::var("JITCCL_DEVICE").unwrap_or_default().to_ascii_lowercase().as_str() {
        "host" => Ok(Device::host(rank)),
        "" | "auto" => match jitccl::cuda_current_device() {
            Ok(ordinal) => Ok(Device::cuda(ordinal)?),
            Err(why) => {
                tracing::info!("rank {rank}: no CUDA device ({why}): the communicator lives on the host");
                Ok(Device::host(rank))
            }
        },
        "cuda" => {
            let ordinal = jitccl::cuda_current_device().map_err(|why| fail(INVALID_USAGE, why))?;
            Ok(Device::cuda(ordinal)?)
        }
        other => Err(fail(INVALID_ARGUMENT, format!("JITCCL_DEVICE={other}: expected host, cuda or auto"))),
    }
}
