//! A communicator's life after init: split, shrink and grow, finalize, destroy, abort and
//! revoke, its state (ncclCommGetAsyncError), what it is (count, device, rank), and the
//! error texts.

use std::ffi::{c_char, c_int};

use jitccl::{CommState, Device, Split};

use crate::group::{complete_idle, queued_on_gpu};
use crate::handle::{last_error, CommHandle};
use crate::init::{hand_out, init_rank, parse_id, NcclUniqueId};
use crate::status::{code_of, error_string, guard, Outcome, LAST};
use crate::types::*;

/// The child's configuration: NULL inherits everything (jitccl's split does).
unsafe fn child_config(config: *const NcclConfig) -> Result<jitccl::Config, Failure> {
    NcclConfig::read(config)?.config()
}

unsafe fn out_ptr(newcomm: *mut *mut CommHandle) -> Result<(), Failure> {
    if newcomm.is_null() {
        return Err(fail(INVALID_ARGUMENT, "the new communicator pointer is NULL"));
    }
    *newcomm = std::ptr::null_mut();
    Ok(())
}

export! {
    ncclCommSplit / pncclCommSplit(
        comm: *mut CommHandle, color: c_int, key: c_int, newcomm: *mut *mut CommHandle, config: *const NcclConfig,
    ) -> NcclResult {
        guard("ncclCommSplit", last_error(comm), || {
            let live = CommHandle::live(comm)?;
            out_ptr(newcomm)?;
            let color = match color {
                -1 => Split::NoColor,
                c if c >= 0 => Split::Color(c as u32),
                c => return Err(fail(INVALID_ARGUMENT, format!("color {c}: need >= 0 or NCCL_SPLIT_NOCOLOR"))),
            };
            match live.comm.split_with(color, key as i64, &child_config(config)?)? {
                Some(child) => hand_out(child, newcomm),
                None => Ok(SUCCESS),
            }
        })
    }
}

export! {
    ncclCommShrink / pncclCommShrink(
        comm: *mut CommHandle, exclude: *mut c_int, nexclude: c_int, newcomm: *mut *mut CommHandle,
        config: *const NcclConfig, flags: c_int,
    ) -> NcclResult {
        guard("ncclCommShrink", last_error(comm), || {
            let live = CommHandle::live(comm)?;
            out_ptr(newcomm)?;
            if nexclude < 0 || (nexclude > 0 && exclude.is_null()) {
                return Err(fail(INVALID_ARGUMENT, format!("{nexclude} excluded ranks at {exclude:?}")));
            }
            let list = if nexclude == 0 { &[][..] } else { std::slice::from_raw_parts(exclude, nexclude as usize) };
            let ranks = list
                .iter()
                .map(|&r| usize::try_from(r).map_err(|_| fail(INVALID_ARGUMENT, format!("excluded rank {r}"))))
                .collect::<Result<Vec<_>, _>>()?;
            let abort = match flags {
                0 => false,
                1 => true,
                f => return Err(fail(INVALID_ARGUMENT, format!("shrink flags {f}: NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT"))),
            };
            let child = live.comm.shrink(&ranks, &child_config(config)?, abort)?;
            hand_out(child, newcomm)
        })
    }
}

export! {
    ncclCommGetUniqueId / pncclCommGetUniqueId(comm: *mut CommHandle, out: *mut NcclUniqueId) -> NcclResult {
        guard("ncclCommGetUniqueId", last_error(comm), || {
            let live = CommHandle::live(comm)?;
            if out.is_null() {
                return Err(fail(INVALID_ARGUMENT, "the unique id pointer is NULL"));
            }
            (*out).internal = live.comm.grow_id()?.to_bytes();
            Ok(SUCCESS)
        })
    }
}

export! {
    /// A rank of `comm` passes rank -1 (it keeps its rank), the coordinator also the id of
    /// its ncclCommGetUniqueId; a new rank passes a NULL comm, the id and its new rank.
    ncclCommGrow / pncclCommGrow(
        comm: *mut CommHandle, nranks: c_int, id: *const NcclUniqueId, rank: c_int, newcomm: *mut *mut CommHandle,
        config: *const NcclConfig,
    ) -> NcclResult {
        guard("ncclCommGrow", last_error(comm), || {
            out_ptr(newcomm)?;
            if comm.is_null() {
                if id.is_null() {
                    return Err(fail(INVALID_ARGUMENT, "a new rank (NULL comm) needs the grow id"));
                }
                return init_rank(newcomm, nranks, &[*id], rank, config);
            }
            let live = CommHandle::live(comm)?;
            if rank != -1 {
                return Err(fail(INVALID_ARGUMENT, format!("rank {rank}: a rank of the communicator passes -1 (it keeps its rank)")));
            }
            let nranks = usize::try_from(nranks).map_err(|_| fail(INVALID_ARGUMENT, format!("{nranks} ranks")))?;
            let id = if id.is_null() { None } else { Some(parse_id(&*id)?) };
            let grown = live.comm.grow(nranks, id.as_ref(), &child_config(config)?)?;
            hand_out(grown, newcomm)
        })
    }
}

export! {
    ncclCommFinalize / pncclCommFinalize(comm: *mut CommHandle) -> NcclResult {
        guard("ncclCommFinalize", last_error(comm), || {
            let live = CommHandle::live(comm)?;
            live.comm.finalize()?;
            live.synchronize_all()?;
            Ok(SUCCESS)
        })
    }
}

export! {
    ncclCommDestroy / pncclCommDestroy(comm: *mut CommHandle) -> NcclResult {
        guard("ncclCommDestroy", last_error(comm), || {
            let live = CommHandle::end(comm)?;
            // What was queued ends first (every wait is bounded); its error was the caller's
            // to collect before. The communicator goes with the last use.
            if !live.comm.is_aborted() {
                let _ = live.synchronize_all();
            }
            Ok(SUCCESS)
        })
    }
}

export! {
    ncclCommAbort / pncclCommAbort(comm: *mut CommHandle) -> NcclResult {
        guard("ncclCommAbort", last_error(comm), || {
            // A call waiting in it from another thread ends with an error, and the
            // communicator goes with the last use.
            CommHandle::end(comm)?.comm.abort();
            Ok(SUCCESS)
        })
    }
}

export! {
    ncclCommRevoke / pncclCommRevoke(comm: *mut CommHandle, flags: c_int) -> NcclResult {
        guard("ncclCommRevoke", last_error(comm), || {
            let live = CommHandle::live(comm)?;
            if flags != 0 {
                return Err(fail(INVALID_ARGUMENT, format!("revoke flags {flags}: only NCCL_REVOKE_DEFAULT")));
            }
            live.comm.revoke()?;
            Ok(SUCCESS)
        })
    }
}

export! {
    ncclCommGetAsyncError / pncclCommGetAsyncError(comm: *mut CommHandle, out: *mut NcclResult) -> NcclResult {
        guard("ncclCommGetAsyncError", last_error(comm), || {
            let live = CommHandle::live(comm)?;
            if out.is_null() {
                return Err(fail(INVALID_ARGUMENT, "the result pointer is NULL"));
            }
            // On a GPU, calls queued on the caller's streams that have finished are looked
            // at first: a failure among them fails the communicator, and is the answer.
            let on_gpu = queued_on_gpu(&live.comm);
            if on_gpu {
                live.streams().iter().for_each(|s| {
                    let _ = s.is_idle();
                });
            }
            // The communicator's failure is the answer, not this call's.
            let state = live.comm.async_error().and_then(|s| match s {
                CommState::InProgress => Ok(false),
                // A blocking communicator's calls were complete when they returned; on a
                // GPU they are the caller's stream's to wait for.
                CommState::Ready if live.comm.is_blocking() || on_gpu => Ok(true),
                CommState::Ready => complete_idle(live.streams().iter()),
            });
            *out = match state {
                Ok(true) => SUCCESS,
                Ok(false) => IN_PROGRESS,
                Err(e) => {
                    let text = format!("ncclCommGetAsyncError: {e}");
                    LAST.set(&text);
                    (*comm).last_error.set(&text);
                    code_of(&e)
                }
            };
            Ok(SUCCESS)
        })
    }
}

unsafe fn write_int(out: *mut c_int, v: usize) -> Outcome {
    if out.is_null() {
        return Err(fail(INVALID_ARGUMENT, "the output pointer is NULL"));
    }
    *out = v as c_int;
    Ok(SUCCESS)
}

export! {
    ncclCommCount / pncclCommCount(comm: *mut CommHandle, count: *mut c_int) -> NcclResult {
        guard("ncclCommCount", last_error(comm), || write_int(count, CommHandle::live(comm)?.comm.nranks()))
    }
}

export! {
    ncclCommUserRank / pncclCommUserRank(comm: *mut CommHandle, rank: *mut c_int) -> NcclResult {
        guard("ncclCommUserRank", last_error(comm), || write_int(rank, CommHandle::live(comm)?.comm.rank()))
    }
}

export! {
    /// The CUDA device of the rank; a rank on the host has none (-1, as no device).
    ncclCommCuDevice / pncclCommCuDevice(comm: *mut CommHandle, device: *mut c_int) -> NcclResult {
        guard("ncclCommCuDevice", last_error(comm), || {
            let live = CommHandle::live(comm)?;
            if device.is_null() {
                return Err(fail(INVALID_ARGUMENT, "the output pointer is NULL"));
            }
            *device = match live.comm.device() {
                Device::Cuda { ordinal } => *ordinal as c_int,
                Device::Host { .. } => -1,
            };
            Ok(SUCCESS)
        })
    }
}

export! {
    ncclGetErrorString / pncclGetErrorString(code: NcclResult) -> *const c_char {
        error_string(code).as_ptr().cast()
    }
}

export! {
    /// The text of the last failure: `comm`'s, or the process's last with NULL.
    ncclGetLastError / pncclGetLastError(comm: *mut CommHandle) -> *const c_char {
        match last_error(comm) {
            Some(slot) => slot.as_ptr(),
            None => LAST.as_ptr(),
        }
    }
}
