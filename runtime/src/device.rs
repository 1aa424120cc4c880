//! Devices and their memory. The host device is this process's memory: a "device buffer"
//! is an aligned, zeroed allocation that kernels address by pointer, like GPU memory.
//! CUDA devices are detected (never panicking without a driver) but not yet driven.

use std::alloc::Layout;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;

use crate::element::Element;
use crate::error::{invalid, Error, Result};
use crate::stream::Stream;

/// How many CUDA devices this machine has, or why it has none usable. Never panics: the
/// driver library is looked for before cudarc touches it.
pub fn cuda_device_count() -> std::result::Result<usize, String> {
    // SAFETY: only tries to open the library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("no CUDA driver library (libcuda.so) on this machine".into());
    }
    cudarc::driver::result::init().map_err(|e| format!("the CUDA driver did not initialize: {e}"))?;
    match cudarc::driver::result::device::get_count() {
        Ok(0) => Err("the CUDA driver reports no device".into()),
        Ok(n) => Ok(n as usize),
        Err(e) => Err(format!("cannot count CUDA devices: {e}")),
    }
}

/// Buffers are aligned like GPU allocations (and cache lines).
const ALIGN: usize = 256;

/// Where a communicator's rank lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Device {
    /// Host memory and CPU threads; `index` tells ranks of one process apart in logs.
    Host { index: usize },
}

impl Device {
    pub fn host(index: usize) -> Device {
        Device::Host { index }
    }

    /// A new stream on this device.
    pub fn stream(&self) -> Result<Stream> {
        Stream::new(self.clone())
    }

    /// A zeroed buffer of `len` elements.
    pub fn alloc<T: Element>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or_else(|| Error::InvalidArgument(format!("allocation of {len} elements overflows")))?;
        Ok(DeviceBuffer { mem: Arc::new(Memory::zeroed(bytes)?), offset: 0, len, device: self.clone(), _t: PhantomData })
    }

    /// A buffer holding a copy of `data`.
    pub fn alloc_from<T: Element>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let buf = self.alloc(data.len())?;
        buf.copy_from_host(data)?;
        Ok(buf)
    }
}

/// One allocation.
pub(crate) struct Memory {
    ptr: *mut u8,
    bytes: usize,
}

// SAFETY: the allocation is plain memory; concurrent access is arranged by stream order,
// as for device memory.
unsafe impl Send for Memory {}
unsafe impl Sync for Memory {}

impl Memory {
    pub(crate) fn zeroed(bytes: usize) -> Result<Memory> {
        if bytes == 0 {
            return Ok(Memory { ptr: std::ptr::null_mut(), bytes });
        }
        let layout = Layout::from_size_align(bytes, ALIGN)
            .map_err(|_| Error::InvalidArgument(format!("allocation of {bytes} bytes is too large")))?;
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::System {
                context: format!("allocating {bytes} bytes"),
                source: std::io::ErrorKind::OutOfMemory.into(),
            });
        }
        Ok(Memory { ptr, bytes })
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: allocated in `zeroed` with this layout.
            unsafe { std::alloc::dealloc(self.ptr, Layout::from_size_align_unchecked(self.bytes, ALIGN)) };
        }
    }
}

/// A typed view of device memory: `len` elements of `T`. Cloning and slicing share the
/// memory (like a device pointer); the memory lives while any view or queued operation
/// uses it. As with GPU memory, kernels write it asynchronously: synchronize the stream
/// before reading results.
pub struct DeviceBuffer<T: Element> {
    mem: Arc<Memory>,
    offset: usize,
    len: usize,
    device: Device,
    _t: PhantomData<T>,
}

impl<T: Element> Clone for DeviceBuffer<T> {
    fn clone(&self) -> Self {
        DeviceBuffer { mem: self.mem.clone(), offset: self.offset, len: self.len, device: self.device.clone(), _t: PhantomData }
    }
}

impl<T: Element> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer<{}>[{}] on {:?}", T::DTYPE, self.len, self.device)
    }
}

impl<T: Element> DeviceBuffer<T> {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// A view of elements `range` of this buffer.
    pub fn slice(&self, range: Range<usize>) -> Result<DeviceBuffer<T>> {
        if range.start > range.end || range.end > self.len {
            return invalid(format!("slice {range:?} out of bounds of a buffer of {} elements", self.len));
        }
        Ok(DeviceBuffer { offset: self.offset + range.start, len: range.end - range.start, ..self.clone() })
    }

    /// Copies `data` to the start of the buffer (synchronously, not ordered with streams).
    pub fn copy_from_host(&self, data: &[T]) -> Result<()> {
        if data.len() > self.len {
            return invalid(format!("copying {} elements into a buffer of {}", data.len(), self.len));
        }
        // SAFETY: in bounds; T is plain data.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.as_ptr() as *mut T, data.len()) };
        Ok(())
    }

    /// The buffer's contents (synchronously; synchronize the stream that writes it first).
    pub fn to_vec(&self) -> Vec<T> {
        let mut out = Vec::with_capacity(self.len);
        // SAFETY: in bounds; T is plain data with no invalid bit patterns.
        unsafe {
            std::ptr::copy_nonoverlapping(self.as_ptr() as *const T, out.as_mut_ptr(), self.len);
            out.set_len(self.len);
        }
        out
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        if self.mem.ptr().is_null() {
            return std::ptr::NonNull::<u64>::dangling().as_ptr() as *mut u8;
        }
        // SAFETY: offset is within the allocation.
        unsafe { self.mem.ptr().add(self.offset * size_of::<T>()) }
    }

    /// Keeps the memory alive while an operation is queued.
    pub(crate) fn keep_alive(&self) -> Arc<dyn Send + Sync> {
        self.mem.clone()
    }

    /// Byte range this view covers, for overlap checks.
    pub(crate) fn byte_range(&self) -> Range<usize> {
        let start = self.as_ptr() as usize;
        start..start + self.len * size_of::<T>()
    }
}
