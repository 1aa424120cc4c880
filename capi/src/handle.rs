//! What an `ncclComm_t` points to: one rank's communicator, the streams its calls run on,
//! its user-made reduction ops and registrations, and its last error. Also where a new
//! rank's device comes from: the calling thread's current CUDA device, as in NCCL, or the
//! host where there is no GPU (or `JITCCL_DEVICE=host`).
//!
//! A handle's memory is never freed: destroy and abort empty it and mark it dead, so a call
//! on an ended communicator is refused with `ncclInvalidArgument` instead of reading freed
//! memory, at the cost of a few dozen bytes per communicator ever made. The communicator
//! itself is freed once no call uses it, so an abort from another thread is safe.

use std::borrow::Cow;
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use jitccl::agreement::Agreement;
use jitccl::{Comm, DataType, Device, Error, Registration, Stream};

use crate::status::LastError;
use crate::types::*;

const LIVE: u64 = 0x6a69_7463_636c_4c56;
const DEAD: u64 = 0x6a69_7463_636c_4444;

/// An op made by ncclRedOpCreatePreMulSum: the scalar's bytes (host residence) or where
/// to read them at each call (device residence), for calls of `dtype`.
pub struct PreMul {
    pub dtype: DataType,
    pub scalar: Scalar,
}

pub enum Scalar {
    Value(f64),
    /// A pointer into memory on the rank's device, read when a call is made.
    At(usize),
}

/// The live part of a handle.
pub struct Live {
    pub comm: Comm,
    /// Where calls run on the host, and on a GPU with `JITCCL_CUDA_SYNC=1` (after the
    /// caller's stream was waited for).
    pub stream: Stream,
    /// On a GPU: a stream on each of the caller's `cudaStream_t`s used so far, where calls
    /// are queued without a wait (see `Live::stream_for`).
    caller_streams: Mutex<Vec<(usize, Stream)>>,
    /// Ops from ncclRedOpCreatePreMulSum: op `NUM_BUILTIN_OPS + i` is entry `i`.
    pub ops: Mutex<Vec<Option<PreMul>>>,
    /// Windows and registrations, by the handle given out.
    pub registrations: Mutex<HashMap<usize, Registered>>,
    /// What `jitcclAgree` all-gathers in, made at its first call.
    pub agreement: Mutex<Option<Agreement>>,
}

impl Live {
    /// The stream a call given the caller's `stream` runs on. On a GPU (unless
    /// `JITCCL_CUDA_SYNC=1`) the call is queued on the caller's stream itself, ordered with
    /// the caller's kernels there, and returns without waiting, as NCCL's; else the caller's
    /// stream is waited for (on a GPU) and the call runs on the communicator's own stream.
    #[inline]
    pub fn stream_for(&self, stream: *mut c_void) -> Result<Cow<'_, Stream>, Failure> {
        match self.comm.device() {
            // Borrowed: a host call takes no reference count.
            jitccl::Device::Host { .. } => Ok(Cow::Borrowed(&self.stream)),
            jitccl::Device::Cuda { ordinal } => self.caller_stream(*ordinal, stream as usize).map(Cow::Owned),
        }
    }

    #[cold]
    fn caller_stream(&self, ordinal: usize, raw: usize) -> Result<Stream, Failure> {
        if jitccl::cuda_sync_launches() {
            jitccl::cuda_synchronize_stream(ordinal, raw)?;
            return Ok(self.stream.clone());
        }
        let mut streams = self.caller_streams.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, s)) = streams.iter().find(|(r, _)| *r == raw) {
            return Ok(s.clone());
        }
        // SAFETY: NCCL's contract: the caller's stream is of this rank's device and outlives
        // the calls made on it (they are waited for at finalize and destroy).
        let s = unsafe { Stream::from_cuda_stream(self.comm.device(), raw)? };
        streams.push((raw, s.clone()));
        Ok(s)
    }

    /// Every stream this communicator's calls ran on.
    pub fn streams(&self) -> Vec<Stream> {
        let callers = self.caller_streams.lock().unwrap_or_else(|e| e.into_inner());
        std::iter::once(&self.stream).chain(callers.iter().map(|(_, s)| s)).cloned().collect()
    }

    /// Waits for every call queued so far, on every stream; the first failure.
    pub fn synchronize_all(&self) -> Result<(), Error> {
        self.streams().iter().map(Stream::synchronize).fold(Ok(()), Result::and)
    }
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
    /// Calls inside the handle now. Its end (destroy, abort) frees the communicator when
    /// none is, else the last of them does: an abort from another thread may come while a
    /// call waits in it.
    users: AtomicUsize,
    freed: AtomicBool,
    live: UnsafeCell<Option<Live>>,
    pub last_error: LastError,
}

// SAFETY: `live` is written once, by `free`, when no call uses it (`users`) and none can
// start (`magic` is DEAD); `freed` lets one thread do it.
unsafe impl Sync for CommHandle {}

/// A call's use of a live communicator: it stays while the use does.
pub struct Use<'a> {
    h: &'a CommHandle,
    live: &'a Live,
}

impl std::ops::Deref for Use<'_> {
    type Target = Live;
    fn deref(&self) -> &Live {
        self.live
    }
}

impl Drop for Use<'_> {
    fn drop(&mut self) {
        self.h.leave();
    }
}

impl CommHandle {
    /// A new handle for C (never freed: see the module comment).
    pub fn leak(comm: Comm) -> Result<*mut CommHandle, Failure> {
        let stream = comm.device().stream()?;
        let live = Live {
            comm,
            stream,
            caller_streams: Mutex::default(),
            ops: Mutex::default(),
            registrations: Mutex::default(),
            agreement: Mutex::default(),
        };
        let h = Box::new(CommHandle {
            magic: AtomicU64::new(LIVE),
            users: AtomicUsize::new(0),
            freed: AtomicBool::new(false),
            live: UnsafeCell::new(Some(live)),
            last_error: LastError::default(),
        });
        Ok(Box::into_raw(h))
    }

    /// The handle behind `comm`, live or ended; `None` for NULL or a pointer this library
    /// did not make.
    pub unsafe fn get<'a>(comm: *mut CommHandle) -> Option<&'a CommHandle> {
        let h = comm.as_ref()?;
        matches!(h.magic.load(Ordering::Acquire), LIVE | DEAD).then_some(h)
    }

    /// The live communicator behind `comm` for one call, or why there is none.
    pub unsafe fn live<'a>(comm: *mut CommHandle) -> Result<Use<'a>, Failure> {
        if comm.is_null() {
            return Err(fail(INVALID_ARGUMENT, "the communicator is NULL"));
        }
        let Some(h) = Self::get(comm) else {
            return Err(fail(INVALID_ARGUMENT, "not a communicator of this library"));
        };
        // SeqCst on both sides (count, then magic; magic, then count): an end either sees
        // this use, or this use sees the end.
        h.users.fetch_add(1, Ordering::SeqCst);
        if h.magic.load(Ordering::SeqCst) != LIVE {
            h.leave();
            return Err(fail(INVALID_ARGUMENT, "the communicator was destroyed or aborted"));
        }
        match (*h.live.get()).as_ref() {
            Some(live) => Ok(Use { h, live }),
            None => {
                h.leave();
                Err(fail(INVALID_ARGUMENT, "the communicator was destroyed"))
            }
        }
    }

    /// Ends the handle's life: later calls on it are refused, and the communicator is
    /// freed when the last use (this one included) is done.
    pub unsafe fn end<'a>(comm: *mut CommHandle) -> Result<Use<'a>, Failure> {
        let u = Self::live(comm)?;
        if u.h.magic.compare_exchange(LIVE, DEAD, Ordering::SeqCst, Ordering::SeqCst).is_err() {
            return Err(fail(INVALID_ARGUMENT, "the communicator was destroyed or aborted"));
        }
        Ok(u)
    }

    fn leave(&self) {
        if self.users.fetch_sub(1, Ordering::SeqCst) == 1 && self.magic.load(Ordering::SeqCst) == DEAD {
            self.free();
        }
    }

    fn free(&self) {
        if !self.freed.swap(true, Ordering::SeqCst) {
            // SAFETY: no use is left and none can start (see `users`); one thread gets here.
            drop(unsafe { (*self.live.get()).take() });
        }
    }
}

/// The last-error slot of `comm`, if it is a handle of this library.
pub unsafe fn last_error<'a>(comm: *mut CommHandle) -> Option<&'a LastError> {
    CommHandle::get(comm).map(|h| &h.last_error)
}

/// The device of a rank created on the calling thread now: the host where asked
/// (`JITCCL_DEVICE=host`) or where there is no usable GPU, else the current CUDA device.
pub fn current_device(rank: usize) -> Result<Device, Failure> {
    match jitccl::settings::DEVICE.choice(None).map_err(|e| fail(INVALID_ARGUMENT, e.to_string()))? {
        "host" => Ok(Device::host(rank)),
        "auto" => match jitccl::cuda_current_device() {
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
        other => Err(fail(INTERNAL_ERROR, format!("JITCCL_DEVICE={other}: a choice the table has and this does not"))),
    }
}
