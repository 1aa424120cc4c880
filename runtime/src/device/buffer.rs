//! `DeviceBuffer`: a typed view of one allocation on a device, of either target.

use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;

use super::{Device, Memory};
use crate::element::Element;
use crate::error::{invalid, Error, Result};

impl Device {
    /// A zeroed buffer of `len` elements.
    pub fn alloc<T: Element>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or_else(|| Error::InvalidArgument(format!("allocation of {len} elements overflows")))?;
        Ok(DeviceBuffer::from_memory(self, Memory::zeroed(self, bytes, false)?, len))
    }

    /// A buffer holding a copy of `data`.
    pub fn alloc_from<T: Element>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let buf = self.alloc(data.len())?;
        buf.copy_from_host(data)?;
        Ok(buf)
    }
}

impl<T: Element> DeviceBuffer<T> {
    /// A view of `len` elements at `ptr`, memory the caller allocated on `device` (host
    /// memory for a host device, device memory of that GPU for a CUDA one), as a C caller
    /// hands NCCL a pointer. Nothing is copied and nothing freed: the memory stays the
    /// caller's.
    ///
    /// # Safety
    /// `ptr` addresses `len` elements on `device` that stay allocated, and are not used
    /// otherwise, while any operation queued on this view (or a clone) runs.
    ///
    /// Inlined, its errors out of line: a C API call makes two views, and a view returned
    /// through memory stalls the loads that copy it on (measured with perf).
    #[inline(always)]
    pub unsafe fn from_raw(device: &Device, ptr: *mut T, len: usize) -> Result<DeviceBuffer<T>> {
        match len.checked_mul(size_of::<T>()) {
            Some(bytes) if bytes == 0 || !ptr.is_null() => {}
            _ => return Err(raw_error(len, ptr.is_null())),
        }
        // Offsets into the caller's region are addresses (it is based at 0).
        let mem = Backing::Callers(Memory::callers(device)?);
        let offset = ptr as usize;
        let addr = address(mem.get(), offset);
        Ok(DeviceBuffer { mem, offset, addr, len, device: device.clone(), _t: PhantomData })
    }

    /// A buffer of `len` elements over `mem` (host memory allocated elsewhere, e.g. mapped
    /// shared memory).
    pub(crate) fn from_memory(device: &Device, mem: Memory, len: usize) -> DeviceBuffer<T> {
        let addr = address(&mem, 0);
        DeviceBuffer {
            mem: Backing::Owned(Arc::new(mem)),
            offset: 0,
            addr,
            len,
            device: device.clone(),
            _t: PhantomData,
        }
    }
}

/// Why `DeviceBuffer::from_raw` refused a pointer.
#[cold]
fn raw_error(len: usize, null: bool) -> Error {
    match null {
        true => Error::InvalidArgument(format!("a NULL buffer of {len} elements")),
        false => Error::InvalidArgument(format!("a buffer of {len} elements overflows")),
    }
}

/// What a view's memory is: an allocation the views share (freed with the last), or the
/// caller's memory, which jitccl neither frees nor counts (views of it copy no counter).
#[derive(Clone)]
enum Backing {
    Owned(Arc<Memory>),
    Callers(&'static Memory),
}

impl Backing {
    fn get(&self) -> &Memory {
        match self {
            Backing::Owned(m) => m,
            Backing::Callers(m) => m,
        }
    }
}

/// A typed view of device memory: `len` elements of `T`. Cloning and slicing share the
/// memory (like a device pointer); the memory lives while any view or queued operation
/// uses it. As with GPU memory, kernels write it asynchronously: synchronize the stream
/// before reading results.
pub struct DeviceBuffer<T: Element> {
    mem: Backing,
    /// In bytes.
    offset: usize,
    /// The address kernels use (`address`), kept: every call reads it several times.
    addr: usize,
    len: usize,
    device: Device,
    _t: PhantomData<T>,
}

impl<T: Element> Clone for DeviceBuffer<T> {
    fn clone(&self) -> Self {
        DeviceBuffer {
            mem: self.mem.clone(),
            offset: self.offset,
            addr: self.addr,
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

/// The address kernels use at byte `offset` of `mem`: a dangling, aligned one for an empty
/// allocation.
fn address(mem: &Memory, offset: usize) -> usize {
    match mem.ptr() {
        // (The caller's region is based at 0: there an offset is an address.)
        p if p.is_null() && offset == 0 => std::ptr::NonNull::<u64>::dangling().as_ptr() as usize,
        // The address arithmetic stays within the allocation (offset is checked by `slice`).
        p => p.wrapping_add(offset) as usize,
    }
}

/// The bytes of plain-data elements.
fn bytes_of<T: Element>(data: &[T]) -> &[u8] {
    // SAFETY: T is plain data; the view covers exactly the slice.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast(), std::mem::size_of_val(data)) }
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
        let offset = self.offset + range.start * size_of::<T>();
        let addr = address(self.mem.get(), offset);
        Ok(DeviceBuffer { offset, addr, len: range.end - range.start, ..self.clone() })
    }

    /// Copies `data` to the start of the buffer (synchronously, not ordered with streams).
    pub fn copy_from_host(&self, data: &[T]) -> Result<()> {
        if data.len() > self.len {
            return invalid(format!("copying {} elements into a buffer of {}", data.len(), self.len));
        }
        self.mem.get().write(self.offset, bytes_of(data))
    }

    /// Copies the start of the buffer into `out` (synchronously; synchronize the stream
    /// that writes the buffer first).
    pub fn copy_to_host(&self, out: &mut [T]) -> Result<()> {
        if out.len() > self.len {
            return invalid(format!("copying {} elements out of a buffer of {}", out.len(), self.len));
        }
        // SAFETY: T is plain data with no invalid bit patterns; the view covers `out`.
        let dst = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast(), std::mem::size_of_val(out)) };
        self.mem.get().read(self.offset, dst)
    }

    /// The buffer's contents (synchronously; synchronize the stream that writes it first).
    ///
    /// # Panics
    /// If a CUDA device cannot copy (its context failed); `copy_to_host` returns that error.
    pub fn to_vec(&self) -> Vec<T> {
        // SAFETY: T has no invalid bit patterns (the Element contract): zero is a value.
        let mut out = vec![unsafe { std::mem::zeroed::<T>() }; self.len];
        if let Err(e) = self.copy_to_host(&mut out) {
            panic!("DeviceBuffer::to_vec on {:?}: {e}", self.device);
        }
        out
    }

    /// The address of the first element, as kernels use it (a device address on a GPU).
    pub fn address(&self) -> usize {
        self.addr
    }

    /// The address kernels use.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.addr as *mut u8
    }

    /// The address kernels use for element `at` (at most `len`): that of `slice(at..)`,
    /// without making the view.
    pub(crate) fn ptr_at(&self, at: usize) -> *mut u8 {
        address(self.mem.get(), self.offset + at * size_of::<T>()) as *mut u8
    }

    /// Keeps the memory alive while an operation is queued (`None`: the caller's memory,
    /// which the caller keeps).
    pub(crate) fn keep_alive(&self) -> Option<Arc<dyn Send + Sync>> {
        match &self.mem {
            Backing::Owned(m) => Some(m.clone()),
            Backing::Callers(_) => None,
        }
    }

    /// Keeps the memory of `self` and of `other` alive while an operation is queued: one
    /// reference when they share it (an in-place call), since each costs an atomic
    /// read-modify-write to take and one to drop.
    pub(crate) fn keep_alive_with<U: Element>(&self, other: &DeviceBuffer<U>) -> [Option<Arc<dyn Send + Sync>>; 2] {
        let shared = matches!((&self.mem, &other.mem), (Backing::Owned(a), Backing::Owned(b)) if Arc::ptr_eq(a, b));
        [self.keep_alive(), if shared { None } else { other.keep_alive() }]
    }

    /// Byte range this view covers, for overlap checks.
    pub(crate) fn byte_range(&self) -> Range<usize> {
        let start = self.as_ptr() as usize;
        start..start + self.len * size_of::<T>()
    }
}
