//! Devices: where a rank's memory lives and its kernels run. Every target provides, in a
//! folder of its own side by side with the others, the same set of things:
//!
//! - `Memory`: one allocation kernels address by pointer (zeroed, aligned like GPU memory),
//!   freed on drop;
//! - `CtaPool`: what runs a launch's CTAs (one per channel) to completion and says which,
//!   if any, failed;
//! - `launch`: one kernel over a pool, with the launch arguments.
//!
//! `host` is this process's memory and CPU threads (a CTA is a thread); `cuda` is where
//! the CUDA target goes (today it detects devices, never panicking without a driver). The
//! public types here (`Device`, `DeviceBuffer`) name no target-specific type.

mod cuda;
mod host;

use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;

use crate::element::Element;
use crate::error::{invalid, Error, Result};
pub use cuda::device_count as cuda_device_count;
pub(crate) use host::{launch, CtaPool, Memory};

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

    /// A zeroed buffer of `len` elements.
    pub fn alloc<T: Element>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or_else(|| Error::InvalidArgument(format!("allocation of {len} elements overflows")))?;
        Ok(DeviceBuffer {
            mem: Arc::new(Memory::zeroed(bytes)?),
            offset: 0,
            len,
            device: self.clone(),
            _t: PhantomData,
        })
    }

    /// A buffer holding a copy of `data`.
    pub fn alloc_from<T: Element>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let buf = self.alloc(data.len())?;
        buf.copy_from_host(data)?;
        Ok(buf)
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
        DeviceBuffer {
            mem: self.mem.clone(),
            offset: self.offset,
            len: self.len,
            device: self.device.clone(),
            _t: PhantomData,
        }
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
