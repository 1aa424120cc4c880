//! Memory on a GPU and host memory mapped into it.
//!
//! User buffers come from the device's stream-ordered pool and are freed on the GPU's
//! memory stream: a plain `cuMemFree` may wait for the whole device, and a rank that frees
//! a buffer while a peer's kernel on the same GPU waits for that rank's next launch would
//! stall them both until the timeout. FIFO segments are plain `cuMemAlloc` memory, which
//! peers on other devices reach once peer access is enabled. Host-mapped memory is what
//! both sides poll: statuses, abort flags, failure boards.

use std::sync::Arc;

use cudarc::driver::result as cu;
use cudarc::driver::sys;

use super::{driver, Gpu};
use crate::error::{Error, Result};

/// How a device allocation was made, and so how it is freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pool {
    /// The device's stream-ordered pool (user buffers).
    Ordered,
    /// `cuMemAlloc`: reachable by peer devices (FIFO segments, kernel tables).
    Plain,
}

/// Zeroed device memory, freed on drop.
pub(crate) struct DeviceMemory {
    gpu: Arc<Gpu>,
    ptr: sys::CUdeviceptr,
    bytes: usize,
    /// How to free it; `None`: the caller's memory (a C caller's buffer), never freed here.
    pool: Option<Pool>,
    /// What keeps borrowed memory allocated, dropped with this (`kept`).
    _owner: Option<Box<dyn Send + Sync>>,
}

impl DeviceMemory {
    pub(crate) fn zeroed(gpu: &Arc<Gpu>, bytes: usize, pool: Pool) -> Result<DeviceMemory> {
        if bytes == 0 {
            return Ok(DeviceMemory { gpu: gpu.clone(), ptr: 0, bytes, pool: Some(pool), _owner: None });
        }
        gpu.bind()?;
        let what = || format!("allocating {bytes} B on cuda:{}", gpu.ordinal);
        // SAFETY: the context is current; the memory is zeroed before anyone reads it.
        let ptr = unsafe {
            match pool {
                Pool::Ordered => cu::malloc_async(gpu.mem_stream, bytes),
                Pool::Plain => cu::malloc_sync(bytes),
            }
        }
        .map_err(driver(what()))?;
        let mem = DeviceMemory { gpu: gpu.clone(), ptr, bytes, pool: Some(pool), _owner: None };
        // SAFETY: `bytes` bytes at `ptr` were just allocated.
        unsafe { cu::memset_d8_async(ptr, 0, bytes, gpu.mem_stream) }.map_err(driver(what()))?;
        gpu.sync_mem_stream()?;
        Ok(mem)
    }

    /// `bytes` of the caller's device memory at `ptr`, which it keeps allocated.
    pub(crate) fn borrowed(gpu: &Arc<Gpu>, ptr: *mut u8, bytes: usize) -> DeviceMemory {
        DeviceMemory { gpu: gpu.clone(), ptr: ptr as sys::CUdeviceptr, bytes, pool: None, _owner: None }
    }

    /// `bytes` of device memory at `ptr`, which `owner` keeps allocated until this is dropped.
    pub(crate) fn kept(gpu: &Arc<Gpu>, ptr: *mut u8, bytes: usize, owner: Box<dyn Send + Sync>) -> DeviceMemory {
        DeviceMemory { gpu: gpu.clone(), ptr: ptr as sys::CUdeviceptr, bytes, pool: None, _owner: Some(owner) }
    }

    /// The device address (0 for an empty allocation).
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }

    pub(crate) fn len(&self) -> usize {
        self.bytes
    }

    pub(crate) fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Copies `src` to byte `offset` (synchronously).
    pub(crate) fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check(offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.gpu.bind()?;
        // SAFETY: in bounds (checked); `src` outlives the copy, which is waited for below.
        unsafe { cu::memcpy_htod_async(self.ptr + offset as u64, src, self.gpu.mem_stream) }
            .map_err(driver("copying to the device"))?;
        self.gpu.sync_mem_stream()
    }

    /// Copies byte `offset..offset + dst.len()` into `dst` (synchronously).
    pub(crate) fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check(offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.gpu.bind()?;
        // SAFETY: in bounds (checked); `dst` outlives the copy, which is waited for below.
        unsafe { cu::memcpy_dtoh_async(dst, self.ptr + offset as u64, self.gpu.mem_stream) }
            .map_err(driver("copying from the device"))?;
        self.gpu.sync_mem_stream()
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.bytes => Ok(()),
            _ => {
                Err(Error::Internal(format!("a copy of {len} B at {offset} out of an allocation of {} B", self.bytes)))
            }
        }
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        let Some(pool) = self.pool else { return };
        if self.ptr == 0 || self.gpu.bind().is_err() {
            return;
        }
        // SAFETY: allocated in `zeroed` as `pool` says; nothing queued uses it any more (the
        // queues hold their memory until their launches finished).
        let res = unsafe {
            match pool {
                Pool::Ordered => cu::free_async(self.ptr, self.gpu.mem_stream),
                Pool::Plain => cu::free_sync(self.ptr),
            }
        };
        if let Err(e) = res {
            tracing::warn!("cuda:{}: freeing {} B: {e}", self.gpu.ordinal, self.bytes);
        }
    }
}

/// Zeroed page-locked host memory mapped into every device at the same address.
pub(crate) struct MappedMemory {
    ptr: *mut u8,
    bytes: usize,
}

// SAFETY: plain memory; concurrent access is arranged by the kernels' and the host's
// atomics, as for any memory both sides poll.
unsafe impl Send for MappedMemory {}
unsafe impl Sync for MappedMemory {}

impl MappedMemory {
    pub(crate) fn zeroed(gpu: &Gpu, bytes: usize) -> Result<MappedMemory> {
        gpu.bind()?;
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: the context is current; the memory is zeroed below.
        let ptr = unsafe { cu::malloc_host(bytes.max(1), flags) }
            .map_err(driver(format_args!("allocating {bytes} B of mapped host memory")))? as *mut u8;
        let mem = MappedMemory { ptr, bytes };
        // SAFETY: `bytes` bytes at `ptr` were just allocated.
        unsafe { std::ptr::write_bytes(ptr, 0, bytes) };
        same_address(gpu, ptr)?;
        Ok(mem)
    }

    /// The address, the same on the host and on every device.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for MappedMemory {
    fn drop(&mut self) {
        // SAFETY: allocated by `malloc_host`; the kernels that used it have finished.
        if let Err(e) = unsafe { cu::free_host(self.ptr.cast()) } {
            tracing::warn!("freeing {} B of mapped host memory: {e}", self.bytes);
        }
    }
}

/// Checks that kernels on `gpu` address the mapped host memory at `ptr` by the host's own
/// address: the tables kernels read hold host pointers.
fn same_address(gpu: &Gpu, ptr: *mut u8) -> Result<()> {
    let mut dev: sys::CUdeviceptr = 0;
    // SAFETY: `ptr` is mapped host memory; an out-parameter.
    unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, ptr.cast(), 0) }
        .result()
        .map_err(driver("mapping host memory into the device"))?;
    if dev as usize != ptr as usize {
        return Err(Error::Unsupported(format!(
            "cuda:{}: mapped host memory has another address on the device",
            gpu.ordinal
        )));
    }
    Ok(())
}

/// Host memory allocated elsewhere (a shared-memory segment that other processes map),
/// page-locked and mapped into every device at its host address until dropped: the host
/// (a proxy, a peer process) and the kernels both address it.
pub(crate) struct Registered {
    ptr: *mut u8,
    bytes: usize,
}

// SAFETY: as for `MappedMemory`.
unsafe impl Send for Registered {}
unsafe impl Sync for Registered {}

impl Registered {
    /// Registers `bytes` bytes at `ptr`, which must stay mapped while this lives.
    pub(crate) fn new(gpu: &Gpu, ptr: *mut u8, bytes: usize) -> Result<Registered> {
        gpu.bind()?;
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
        // SAFETY: the caller keeps `bytes` bytes at `ptr` mapped while this lives.
        unsafe { sys::cuMemHostRegister_v2(ptr.cast(), bytes, flags) }
            .result()
            .map_err(driver(format_args!("page-locking {bytes} B of shared memory for cuda:{}", gpu.ordinal)))?;
        let reg = Registered { ptr, bytes };
        same_address(gpu, ptr)?;
        Ok(reg)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        // SAFETY: registered in `new`; the kernels that used it have finished.
        if let Err(e) = unsafe { sys::cuMemHostUnregister(self.ptr.cast()) }.result() {
            tracing::warn!("unlocking {} B of shared memory: {e}", self.bytes);
        }
    }
}
