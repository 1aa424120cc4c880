//! Unique ids and communicator creation: ncclGetVersion, ncclGetUniqueId,
//! ncclCommInitRank(Config), ncclCommInitAll, ncclCommInitRankScalable.
//!
//! `JITCCL_COMM_ID` (or NCCL's `NCCL_COMM_ID`) = `host:port` fixes the root: then every
//! process's ncclGetUniqueId gives the same id, and rank 0's init starts the root there,
//! as NCCL does. In nonblocking mode (`config->blocking = 0`) init returns
//! `ncclInProgress` at once; poll ncclCommGetAsyncError.

use std::ffi::c_int;

use jitccl::{Comm, CommState, Config, Device, UniqueId, UNIQUE_ID_BYTES};

use crate::handle::{current_device, CommHandle};
use crate::status::{guard, Outcome};
use crate::types::*;

/// `ncclUniqueId`: 128 opaque bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NcclUniqueId {
    pub internal: [u8; UNIQUE_ID_BYTES],
}

/// The root address the environment fixes, if any (a value that is not UTF-8 fixes none:
/// the bootstrap then refuses it by name).
fn comm_id_var() -> Option<String> {
    jitccl::settings::COMM_ID.text().ok().flatten()
}

pub(crate) fn parse_id(id: &NcclUniqueId) -> Result<UniqueId, Failure> {
    UniqueId::from_bytes(&id.internal).map_err(|e| fail(INVALID_ARGUMENT, format!("the unique id: {e}")))
}

fn check_rank(nranks: c_int, rank: c_int) -> Result<(usize, usize), Failure> {
    if nranks < 1 || rank < 0 || rank >= nranks {
        return Err(fail(INVALID_ARGUMENT, format!("rank {rank} of {nranks}: need 0 <= rank < nranks")));
    }
    Ok((nranks as usize, rank as usize))
}

/// The configuration for a rank made on this thread now, with its device.
unsafe fn config_for(config: *const NcclConfig, rank: usize) -> Result<Config, Failure> {
    let mut cfg = NcclConfig::read(config)?.config()?;
    cfg.device = Some(current_device(rank)?);
    Ok(cfg)
}

/// Writes a new handle for `comm` to `out`: `ncclInProgress` while a nonblocking init runs.
pub unsafe fn hand_out(comm: Comm, out: *mut *mut CommHandle) -> Outcome {
    let pending = matches!(comm.async_error(), Ok(CommState::InProgress));
    *out = CommHandle::leak(comm)?;
    Ok(if pending { IN_PROGRESS } else { SUCCESS })
}

pub(crate) unsafe fn init_rank(
    out: *mut *mut CommHandle, nranks: c_int, ids: &[NcclUniqueId], rank: c_int, config: *const NcclConfig,
) -> Outcome {
    if out.is_null() {
        return Err(fail(INVALID_ARGUMENT, "the communicator pointer is NULL"));
    }
    *out = std::ptr::null_mut();
    let (nranks, rank) = check_rank(nranks, rank)?;
    let ids = ids.iter().map(parse_id).collect::<Result<Vec<_>, _>>()?;
    let cfg = config_for(config, rank)?;
    // Rank 0 of a communicator whose id the environment fixed serves its root.
    if let (0, Some(spec), [id]) = (rank, comm_id_var(), ids.as_slice()) {
        if UniqueId::at_address(&spec, false).is_ok_and(|env| env == *id) {
            UniqueId::at_address(&spec, true).map_err(jitccl::Error::from)?;
        }
    }
    let comm = match ids.as_slice() {
        [id] => Comm::init_rank(id, nranks, rank, &cfg)?,
        _ => Comm::init_rank_scalable(&ids, nranks, rank, &cfg)?,
    };
    hand_out(comm, out)
}

export! {
    ncclGetVersion / pncclGetVersion(version: *mut c_int) -> NcclResult {
        guard("ncclGetVersion", None, || {
            if version.is_null() {
                return Err(fail(INVALID_ARGUMENT, "version is NULL"));
            }
            *version = VERSION_CODE;
            Ok(SUCCESS)
        })
    }
}

export! {
    ncclGetUniqueId / pncclGetUniqueId(out: *mut NcclUniqueId) -> NcclResult {
        guard("ncclGetUniqueId", None, || {
            if out.is_null() {
                return Err(fail(INVALID_ARGUMENT, "the unique id pointer is NULL"));
            }
            let id = match comm_id_var() {
                Some(spec) => UniqueId::at_address(&spec, false).map_err(jitccl::Error::from)?,
                None => UniqueId::new().map_err(jitccl::Error::from)?,
            };
            (*out).internal = id.to_bytes();
            Ok(SUCCESS)
        })
    }
}

export! {
    ncclCommInitRank / pncclCommInitRank(out: *mut *mut CommHandle, nranks: c_int, id: NcclUniqueId, rank: c_int) -> NcclResult {
        guard("ncclCommInitRank", None, || init_rank(out, nranks, &[id], rank, std::ptr::null()))
    }
}

export! {
    ncclCommInitRankConfig / pncclCommInitRankConfig(
        out: *mut *mut CommHandle, nranks: c_int, id: NcclUniqueId, rank: c_int, config: *const NcclConfig,
    ) -> NcclResult {
        guard("ncclCommInitRankConfig", None, || init_rank(out, nranks, &[id], rank, config))
    }
}

export! {
    ncclCommInitRankScalable / pncclCommInitRankScalable(
        out: *mut *mut CommHandle, nranks: c_int, rank: c_int, nids: c_int, ids: *const NcclUniqueId,
        config: *const NcclConfig,
    ) -> NcclResult {
        guard("ncclCommInitRankScalable", None, || {
            if nids < 1 || ids.is_null() {
                return Err(fail(INVALID_ARGUMENT, format!("{nids} unique ids at {ids:?}: need at least one")));
            }
            init_rank(out, nranks, std::slice::from_raw_parts(ids, nids as usize), rank, config)
        })
    }
}

export! {
    ncclCommInitAll / pncclCommInitAll(comms: *mut *mut CommHandle, ndev: c_int, devlist: *const c_int) -> NcclResult {
        guard("ncclCommInitAll", None, || {
            if comms.is_null() || ndev < 1 {
                return Err(fail(INVALID_ARGUMENT, format!("{ndev} devices into {comms:?}: need at least one")));
            }
            let n = ndev as usize;
            let out = std::slice::from_raw_parts_mut(comms, n);
            out.fill(std::ptr::null_mut());
            let made = match current_device(0)? {
                Device::Host { .. } => Comm::init_all(n, &Config::default())?,
                Device::Cuda { .. } => {
                    let ordinals: Vec<c_int> = match devlist.is_null() {
                        true => (0..ndev).collect(),
                        false => std::slice::from_raw_parts(devlist, n).to_vec(),
                    };
                    let devices = ordinals
                        .iter()
                        .map(|&d| match usize::try_from(d) {
                            Ok(d) => Device::cuda(d).map_err(Failure::from),
                            Err(_) => Err(fail(INVALID_ARGUMENT, format!("device {d} in devlist"))),
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    Comm::init_all_on(&devices, &Config::default())?
                }
            };
            for (slot, comm) in out.iter_mut().zip(made) {
                *slot = CommHandle::leak(comm)?;
            }
            Ok(SUCCESS)
        })
    }
}
