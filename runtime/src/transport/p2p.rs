//! The in-process transport: every rank's receive segment is zeroed memory of its device
//! (host memory, or device memory that peer GPUs reach with peer access enabled), and both
//! ends of a connector use the same pointers. Failure boards are apart from the segments,
//! in memory both the host and the kernels address.

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

/// The receive segments and failure boards of all ranks of one process-local communicator.
pub(crate) struct LocalSegments {
    segments: Vec<Memory>,
    boards: Vec<Memory>,
    nranks: usize,
}

impl LocalSegments {
    /// Rank r's segment and board on `devices[r]`.
    pub(crate) fn new(layout: &Layout, devices: &[Device]) -> Result<Self> {
        let segments =
            devices.iter().map(|d| Memory::zeroed(d, layout.segment_bytes(), true)).collect::<Result<_>>()?;
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
