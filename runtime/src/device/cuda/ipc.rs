//! Sharing device memory between processes of one machine (CUDA IPC): the owner exports
//! an allocation as a 64-byte handle (`cuIpcGetMemHandle`), which travels as text over the
//! bootstrap; a peer process opens it in its own context (`cuIpcOpenMemHandle`) and closes
//! it when dropped. The handle's wire form is plain hex, checked on the way in, so a
//! truncated or garbled handle is an error naming what was wrong, never a driver crash.

use std::sync::Arc;

use cudarc::driver::sys;

use super::memory::DeviceMemory;
use super::{driver, Gpu};
use crate::error::Result;

/// Bytes of a CUDA IPC memory handle (`CU_IPC_HANDLE_SIZE`).
pub(crate) const HANDLE_BYTES: usize = sys::CU_IPC_HANDLE_SIZE as usize;

/// An exported device allocation, as the driver names it to other processes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct IpcHandle([u8; HANDLE_BYTES]);

impl std::fmt::Debug for IpcHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IpcHandle({}..)", &self.encode()[..16])
    }
}

impl IpcHandle {
    /// The wire form: 128 lowercase hex digits.
    pub(crate) fn encode(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Reads the wire form, or says what is wrong with it.
    pub(crate) fn decode(s: &str) -> std::result::Result<IpcHandle, String> {
        if s.len() != 2 * HANDLE_BYTES {
            return Err(format!("a CUDA IPC handle of {} hex digits, {} expected", s.len(), 2 * HANDLE_BYTES));
        }
        let mut bytes = [0u8; HANDLE_BYTES];
        for (i, b) in bytes.iter_mut().enumerate() {
            let digits = s.get(2 * i..2 * i + 2).unwrap_or("");
            *b = u8::from_str_radix(digits, 16)
                .map_err(|_| format!("a CUDA IPC handle with '{digits}' at byte {i}, not hex"))?;
        }
        Ok(IpcHandle(bytes))
    }

    fn raw(&self) -> sys::CUipcMemHandle {
        sys::CUipcMemHandle { reserved: self.0.map(|b| b as std::ffi::c_char) }
    }
}

impl DeviceMemory {
    /// The handle other processes open this allocation by (a whole `cuMemAlloc` block).
    pub(crate) fn ipc_handle(&self) -> Result<IpcHandle> {
        self.gpu().bind()?;
        let mut raw = sys::CUipcMemHandle { reserved: [0; HANDLE_BYTES] };
        // SAFETY: a live allocation of this context, which is current; an out-parameter.
        unsafe { sys::cuIpcGetMemHandle(&mut raw, self.ptr() as sys::CUdeviceptr) }.result().map_err(driver(
            format_args!("exporting {} B of cuda:{} (cuIpcGetMemHandle)", self.len(), self.gpu().ordinal),
        ))?;
        Ok(IpcHandle(raw.reserved.map(|c| c as u8)))
    }
}

/// A peer process's allocation opened in this process, closed on drop.
pub(crate) struct IpcMapping {
    gpu: Arc<Gpu>,
    ptr: sys::CUdeviceptr,
}

// SAFETY: a device address; the kernels that use it synchronize through the FIFO counters.
unsafe impl Send for IpcMapping {}
unsafe impl Sync for IpcMapping {}

impl IpcMapping {
    /// Opens `handle` (`what` it is, for errors) in `gpu`'s context. A handle of another
    /// GPU is reached through peer access, which the driver enables for this mapping (it
    /// fails where there is none).
    pub(crate) fn open(gpu: &Arc<Gpu>, handle: &IpcHandle, what: &str) -> Result<IpcMapping> {
        gpu.bind()?;
        let mut ptr: sys::CUdeviceptr = 0;
        let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as std::ffi::c_uint;
        // SAFETY: the context is current; an out-parameter; the driver checks the handle.
        unsafe { sys::cuIpcOpenMemHandle_v2(&mut ptr, handle.raw(), flags) }
            .result()
            .map_err(driver(format_args!("opening {what} on cuda:{} (cuIpcOpenMemHandle)", gpu.ordinal)))?;
        Ok(IpcMapping { gpu: gpu.clone(), ptr })
    }

    /// The device address of the peer's allocation in this process.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        if self.gpu.bind().is_err() {
            return;
        }
        // SAFETY: opened in `open`; the kernels that used it have finished.
        if let Err(e) = unsafe { sys::cuIpcCloseMemHandle(self.ptr) }.result() {
            tracing::warn!("cuda:{}: closing a peer process's memory: {e}", self.gpu.ordinal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_round_trips_and_a_bad_one_is_refused_saying_why() {
        let mut bytes = [0u8; HANDLE_BYTES];
        bytes.iter_mut().enumerate().for_each(|(i, b)| *b = (i * 37 % 256) as u8);
        let h = IpcHandle(bytes);
        let wire = h.encode();
        assert_eq!(wire.len(), 128);
        assert_eq!(IpcHandle::decode(&wire), Ok(h));
        assert_eq!(h.raw().reserved.map(|c| c as u8), bytes, "the driver sees the same 64 bytes");
        let short = IpcHandle::decode(&wire[..126]).unwrap_err();
        assert!(short.contains("126 hex digits, 128 expected"), "{short}");
        assert!(IpcHandle::decode("").unwrap_err().contains("0 hex digits"));
        let garbled = format!("zz{}", &wire[2..]);
        assert!(IpcHandle::decode(&garbled).unwrap_err().contains("'zz' at byte 0, not hex"));
        // A multi-byte character must not split the reading of digit pairs.
        let odd = format!("é{}", &wire[2..]);
        assert!(IpcHandle::decode(&odd).is_err());
    }
}
