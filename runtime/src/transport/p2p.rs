//! The in-process transport: every rank's receive segment is plain zeroed memory of this
//! process, and both ends of a connector use the same pointers.

use crate::device::Memory;
use crate::error::Result;
use crate::transport::layout::Layout;

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
