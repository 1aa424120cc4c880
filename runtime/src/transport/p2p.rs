//! The in-process transport: every rank's receive segment is zeroed memory of its device
//! (host memory, or device memory that peer GPUs reach with peer access enabled), and both
//! ends of a connector use the same pointers. Where two GPUs cannot reach each other's
//! memory (or `JITCCL_P2P_DISABLE=1`), every segment is staged in page-locked host memory
//! mapped into all GPUs instead: slower, but every pair connects. Failure boards are apart
//! from the segments, in memory both the host and the kernels address.

use crate::device::{Device, Memory};
use crate::error::{Error, Result};
use crate::fault::Board;
use crate::transport::layout::Layout;
use crate::transport::{AttachCtx, Attached, Endpoint, Transport};

/// Ranks created together in this process: the peer's segment is memory of this process.
pub(crate) struct P2p;

impl Transport for P2p {
    fn name(&self) -> &'static str {
        "p2p"
    }

    fn can_connect(&self, me: &Endpoint, peer: &Endpoint) -> Option<&'static str> {
        (me.group.is_some() && me.group == peer.group).then_some("same process: direct pointers")
    }

    fn attach(&self, ctx: &AttachCtx, peer: usize) -> Result<Attached> {
        let base = ctx.local.and_then(|b| b.get(peer).copied());
        base.map(|b| (b, None)).ok_or_else(|| Error::Internal(format!("no local segment for rank {peer}")))
    }
}

/// Whether the segments of ranks on the GPUs `gpus` (ordinals) must be staged in host
/// memory, and why: `forced` (`JITCCL_P2P_DISABLE=1`), or two distinct GPUs, at indices i
/// and j, where `can(i, j)` says that i cannot reach j's memory. None: direct pointers
/// (also without GPUs).
pub(crate) fn staging(
    gpus: &[usize], forced: bool, can: impl Fn(usize, usize) -> Result<bool>,
) -> Result<Option<String>> {
    if gpus.is_empty() {
        return Ok(None);
    }
    if forced {
        return Ok(Some("JITCCL_P2P_DISABLE=1".into()));
    }
    for (i, &a) in gpus.iter().enumerate() {
        for (j, &b) in gpus.iter().enumerate().filter(|&(_, &b)| b != a) {
            if !can(i, j)? {
                return Ok(Some(format!("cuda:{a} cannot reach cuda:{b}'s memory (no peer access)")));
            }
        }
    }
    Ok(None)
}

/// `JITCCL_P2P_DISABLE=1`: stage the FIFOs of GPU ranks of one process in host memory even
/// where peer access is possible (NCCL's NCCL_P2P_DISABLE), e.g. to test that path.
pub(crate) fn staging_forced() -> bool {
    crate::settings::P2P_DISABLE.flag_or_warn()
}

/// The receive segments and failure boards of all ranks of one process-local communicator.
pub(crate) struct LocalSegments {
    segments: Vec<Memory>,
    boards: Vec<Memory>,
    nranks: usize,
}

impl LocalSegments {
    /// Rank r's segment and board on `devices[r]`; `staged`: the segments in host memory
    /// mapped into the devices (see [`staging`]).
    pub(crate) fn new(layout: &Layout, devices: &[Device], staged: bool) -> Result<Self> {
        let bytes = layout.segment_bytes();
        let segment = |d| if staged { Memory::mapped(d, bytes) } else { Memory::zeroed(d, bytes, true) };
        let segments = devices.iter().map(segment).collect::<Result<_>>()?;
        let boards =
            devices.iter().map(|d| Memory::mapped(d, layout.nranks * size_of::<i32>())).collect::<Result<_>>()?;
        Ok(LocalSegments { segments, boards, nranks: layout.nranks })
    }

    pub(crate) fn bases(&self) -> Vec<*mut u8> {
        self.segments.iter().map(|m| m.ptr()).collect()
    }

    /// Every rank's failure board.
    pub(crate) fn boards(&self) -> Vec<Board> {
        self.boards.iter().map(|m| Board::new(m.ptr().cast(), self.nranks)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_staged_when_forced_or_when_any_pair_of_gpus_lacks_peer_access() {
        let all = |_: usize, _: usize| Ok(true);
        assert_eq!(staging(&[0, 1, 2], false, all).unwrap(), None);
        assert_eq!(staging(&[0, 0, 0], false, |_, _| Ok(false)).unwrap(), None, "one GPU needs no peer access");
        assert_eq!(staging(&[0, 1], true, all).unwrap().as_deref(), Some("JITCCL_P2P_DISABLE=1"));
        let why = staging(&[4, 5, 6], false, |i, j| Ok(!(i == 2 && j == 1))).unwrap().expect("staged");
        assert!(why.contains("cuda:6 cannot reach cuda:5"), "{why}");
        assert_eq!(staging(&[], true, all).unwrap(), None, "host ranks are never staged");
        let e = staging(&[0, 1], false, |_, _| Err(Error::Device("probe".into()))).unwrap_err();
        assert!(e.to_string().contains("probe"));
    }
}
