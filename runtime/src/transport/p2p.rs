//! The in-process transport: every rank's receive segment is plain zeroed memory of this
//! process, and both ends of a connector use the same pointers.

use crate::device::Memory;
use crate::error::{Error, Result};
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

/// The receive segments of all ranks of one process-local communicator.
pub(crate) struct LocalSegments {
    segments: Vec<Memory>,
}

impl LocalSegments {
    pub(crate) fn new(layout: &Layout) -> Result<Self> {
        let segments = (0..layout.nranks).map(|_| Memory::zeroed(layout.segment_bytes())).collect::<Result<_>>()?;
        Ok(LocalSegments { segments })
    }

    pub(crate) fn bases(&self) -> Vec<*mut u8> {
        self.segments.iter().map(|m| m.ptr()).collect()
    }
}
