//! Devices: where a rank's memory lives and its kernels run. Every target provides, in a
//! folder of its own side by side with the others, the same set of things:
//!
//! - memory: one allocation kernels address by pointer (zeroed, aligned like GPU memory),
//!   freed on drop, and memory both the host and the kernels address (what the host polls);
//! - a CTA pool: what runs a launch's CTAs (one per channel) to completion and says which,
//!   if any, failed (`host`: persistent threads; `cuda`: a CUDA stream);
//! - a kernel: what a launch runs (a loaded shared object, a loaded CUDA module).
//!
//! This module joins them into target-independent types (`Memory`, `CtaPool`, `Kernel`,
//! `launch`); the public types (`Device`, `DeviceBuffer`) name no target-specific type.

mod buffer;
mod cuda;
mod host;
mod sharing;

use std::sync::{Arc, LazyLock, Mutex};

use jitccl_codegen::abi::{Args, Status};
use jitccl_codegen::compile::host::HostKernel;
use jitccl_codegen::Protocol;

use crate::affinity::CpuSet;
use crate::error::{Error, Result};
pub use buffer::DeviceBuffer;
pub(crate) use cuda::pci_devices as cuda_pci_devices;
pub use cuda::sync_launches as cuda_sync_launches;
pub use cuda::{
    compute_capability as cuda_compute_capability, current_device as cuda_current_device,
    device_count as cuda_device_count, synchronize_stream as cuda_synchronize_stream,
};
pub(crate) use cuda::{Event as CudaEvent, Gpu, Graph as CudaGraph, LaunchOrder};
pub(crate) use cuda::{IpcHandle, IpcMapping, Registered as HostRegistration};
pub(crate) use host::Memory as HostMemory;
pub(crate) use host::{Arena, ArenaId, PeerArena};
pub(crate) use sharing::{cta_budget, log_sharing, sharing};

/// Whether this process allocates host buffers in its arena, which peer processes map (off
/// with `JITCCL_HOST_ARENA=0`, or where it could not be made): then plain buffers may run
/// the direct algorithms.
pub fn host_arena_available() -> bool {
    Arena::get().is_some()
}

/// Where a communicator's rank lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Device {
    /// Host memory and CPU threads; `index` tells ranks of one process apart in logs.
    Host { index: usize },
    /// CUDA device `ordinal` of this process (its primary context).
    Cuda { ordinal: usize },
}

impl Device {
    pub fn host(index: usize) -> Device {
        Device::Host { index }
    }

    /// CUDA device `ordinal`, checked now: an error (never a panic) names what is missing
    /// when there is no driver library, no such device or no usable context.
    pub fn cuda(ordinal: usize) -> Result<Device> {
        Gpu::get(ordinal)?;
        Ok(Device::Cuda { ordinal })
    }

    /// What this device is, for logs and reports: `host:0`, or for a GPU its name, compute
    /// capability and SM count.
    pub fn describe(&self) -> Result<String> {
        Ok(match self.gpu()? {
            None => format!(
                "host:{}",
                match self {
                    Device::Host { index } | Device::Cuda { ordinal: index } => index,
                }
            ),
            Some(g) => format!("{g:?}"),
        })
    }

    pub fn is_cuda(&self) -> bool {
        matches!(self, Device::Cuda { .. })
    }

    /// The GPU of a CUDA device.
    pub(crate) fn gpu(&self) -> Result<Option<Arc<Gpu>>> {
        match self {
            Device::Host { .. } => Ok(None),
            Device::Cuda { ordinal } => Gpu::get(*ordinal).map(Some),
        }
    }
}

/// One allocation, of whichever target.
pub(crate) enum Memory {
    Host(HostMemory),
    Cuda(cuda::DeviceMemory),
    Mapped(cuda::MappedMemory),
}

impl Memory {
    /// Zeroed memory on `device` for user data (`shared`: false) or for what peers on
    /// other devices reach (`shared`: FIFO segments, kernel tables).
    pub(crate) fn zeroed(device: &Device, bytes: usize, shared: bool) -> Result<Memory> {
        match device.gpu()? {
            None => HostMemory::zeroed(bytes).map(Memory::Host),
            Some(g) => {
                let pool = if shared { cuda::Pool::Plain } else { cuda::Pool::Ordered };
                cuda::DeviceMemory::zeroed(&g, bytes, pool).map(Memory::Cuda)
            }
        }
    }

    /// Zeroed memory that the host and the kernels on `device` both address, at one
    /// address (statuses, abort flags, failure boards).
    pub(crate) fn mapped(device: &Device, bytes: usize) -> Result<Memory> {
        match device.gpu()? {
            None => HostMemory::zeroed(bytes).map(Memory::Host),
            Some(g) => cuda::MappedMemory::zeroed(&g, bytes).map(Memory::Mapped),
        }
    }

    /// The `bytes` at `ptr` in memory of `device`, which `owner` keeps valid until this is
    /// dropped.
    pub(crate) fn kept(device: &Device, ptr: *mut u8, bytes: usize, owner: Box<dyn Send + Sync>) -> Result<Memory> {
        Ok(match device.gpu()? {
            None => Memory::Host(HostMemory::mapped(ptr, bytes, owner)),
            Some(g) => Memory::Cuda(cuda::DeviceMemory::kept(&g, ptr, bytes, owner)),
        })
    }

    /// The whole address space of `device` as one region based at address 0, never freed:
    /// what every view of a caller's memory (`DeviceBuffer::from_raw`) shares, so that
    /// making one (each C API call makes two) allocates nothing.
    #[inline]
    pub(crate) fn callers(device: &Device) -> Result<&'static Memory> {
        static HOST: LazyLock<Memory> =
            LazyLock::new(|| Memory::Host(HostMemory::mapped(std::ptr::null_mut(), usize::MAX, Box::new(()))));
        match device {
            Device::Host { .. } => Ok(&HOST),
            Device::Cuda { .. } => Self::callers_on_gpu(device),
        }
    }

    #[cold]
    fn callers_on_gpu(device: &Device) -> Result<&'static Memory> {
        static GPUS: Mutex<Vec<(usize, &'static Memory)>> = Mutex::new(Vec::new());
        let g = device.gpu()?.ok_or_else(|| Error::Internal("a CUDA device without a GPU".into()))?;
        let mut gpus = GPUS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, m)) = gpus.iter().find(|(o, _)| *o == g.ordinal) {
            return Ok(m);
        }
        // One per GPU for the life of the process.
        let m: &'static Memory =
            Box::leak(Box::new(Memory::Cuda(cuda::DeviceMemory::borrowed(&g, std::ptr::null_mut(), usize::MAX))));
        gpus.push((g.ordinal, m));
        Ok(m)
    }

    /// The handle other processes of this machine open device memory by (CUDA IPC).
    pub(crate) fn ipc_handle(&self) -> Result<IpcHandle> {
        match self {
            Memory::Cuda(m) => m.ipc_handle(),
            _ => Err(Error::Internal("only device memory is shared through CUDA IPC handles".into())),
        }
    }

    /// The address kernels use (null or 0 for an empty allocation).
    pub(crate) fn ptr(&self) -> *mut u8 {
        match self {
            Memory::Host(m) => m.ptr(),
            Memory::Cuda(m) => m.ptr(),
            Memory::Mapped(m) => m.ptr(),
        }
    }

    /// The address the host uses, where the host can address it directly.
    pub(crate) fn host_ptr(&self) -> Option<*mut u8> {
        match self {
            Memory::Host(m) => Some(m.ptr()),
            Memory::Cuda(_) => None,
            Memory::Mapped(m) => Some(m.ptr()),
        }
    }

    /// Copies `src` to byte `offset`; the caller keeps it in bounds.
    pub(crate) fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        match (self, self.host_ptr()) {
            (Memory::Cuda(m), _) => m.write(offset, src),
            (_, Some(p)) if !src.is_empty() => {
                // SAFETY: the caller keeps offset + len within the allocation.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p.wrapping_add(offset), src.len()) };
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Copies byte `offset..` into `dst`; the caller keeps it in bounds.
    pub(crate) fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        match (self, self.host_ptr()) {
            (Memory::Cuda(m), _) => m.read(offset, dst),
            (_, Some(p)) if !dst.is_empty() => {
                // SAFETY: the caller keeps offset + len within the allocation.
                unsafe { std::ptr::copy_nonoverlapping(p.wrapping_add(offset), dst.as_mut_ptr(), dst.len()) };
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// What runs a stream's launches: CPU threads, or a CUDA stream.
pub(crate) enum CtaPool {
    Host(host::CtaPool),
    Cuda(cuda::CudaStream),
}

impl CtaPool {
    pub(crate) fn new(device: &Device) -> Result<CtaPool> {
        match device.gpu()? {
            None => Ok(CtaPool::Host(host::CtaPool::default())),
            Some(g) => cuda::CudaStream::new(&g).map(CtaPool::Cuda),
        }
    }

    /// The application's CUDA stream `raw` (a `cudaStream_t`; 0 is the legacy default
    /// stream) of `device`, which the application keeps alive while jitccl uses it.
    pub(crate) fn borrowed(device: &Device, raw: usize) -> Result<CtaPool> {
        match device.gpu()? {
            None => Err(Error::InvalidArgument(format!("{device:?}: a CUDA stream is for CUDA devices only"))),
            Some(g) => Ok(CtaPool::Cuda(cuda::CudaStream::borrowed(&g, raw))),
        }
    }

    /// Whether this pool's CUDA stream is being captured into a graph (never on the host).
    pub(crate) fn capturing(&self) -> Result<bool> {
        match self {
            CtaPool::Cuda(s) => s.capturing(),
            CtaPool::Host(_) => Ok(false),
        }
    }

    /// The CUDA stream of this pool.
    pub(crate) fn cuda(&self) -> Result<&cuda::CudaStream> {
        match self {
            CtaPool::Cuda(s) => Ok(s),
            CtaPool::Host(_) => Err(Error::Unsupported("CUDA graphs and events need a CUDA stream".into())),
        }
    }
}

/// A compiled, loaded kernel of one spec.
#[derive(Clone)]
pub(crate) enum Kernel {
    Host(Arc<HostKernel>),
    Cuda(Arc<cuda::Kernel>),
}

impl Kernel {
    /// The kernel of `spec` for `device`, compiled if need be (CUDA: a CUBIN for the
    /// device's exact arch, PTX where NVRTC does not know it) and loaded.
    pub(crate) fn get(device: &Device, spec: &jitccl_codegen::KernelSpec) -> Result<Kernel> {
        let generator = jitccl_codegen::Generator::global();
        match device.gpu()? {
            None => Ok(Kernel::Host(generator.host_kernel(spec)?.0)),
            Some(g) => {
                let (arch, output) = cuda::image_target(g.arch)?;
                let target = jitccl_codegen::Target::Cuda { arch, output };
                spec.validate_for(target).map_err(|e| Error::InvalidArgument(format!("{g:?}: {e}")))?;
                let image = generator.cuda_image(spec, arch, output)?.0;
                g.kernel(spec, &image.bytes).map(Kernel::Cuda)
            }
        }
    }
}

/// A kernel borrowed from the table that holds it for good (a rank's): what a launch
/// keeps instead of a counted reference, which would cost an atomic read-modify-write to
/// take and one to drop on every call. Valid while that table lives (`launch`).
#[derive(Clone, Copy)]
pub(crate) enum KernelRef {
    Host(*const HostKernel),
    Cuda(*const cuda::Kernel),
}

impl Kernel {
    /// A borrow of this kernel, valid while this `Kernel` (or a clone of it) lives.
    pub(crate) fn borrow(&self) -> KernelRef {
        match self {
            Kernel::Host(k) => KernelRef::Host(Arc::as_ptr(k)),
            Kernel::Cuda(k) => KernelRef::Cuda(Arc::as_ptr(k)),
        }
    }
}

/// Runs `kernel` with `args` as `nchannels` CTAs on `pool` (host CTAs bound to `cpus` if
/// given); returns the first channel that failed (its status says why). A CUDA launch
/// reads the statuses from mapped memory, where `args.status` points.
///
/// # Safety
/// `kernel`'s table (see `KernelRef`) lives until this returns.
#[inline]
pub(crate) unsafe fn launch(
    kernel: KernelRef, args: &Args, nchannels: usize, proto: Protocol, pool: &mut CtaPool, cpus: Option<&CpuSet>,
) -> Result<Option<usize>> {
    match (kernel, pool) {
        // SAFETY: the caller keeps the kernel's table alive.
        (KernelRef::Host(k), CtaPool::Host(p)) => host::launch(unsafe { &*k }, args, nchannels, p, cpus),
        (KernelRef::Cuda(k), CtaPool::Cuda(s)) => {
            // SAFETY: as above.
            let k = unsafe { &*k };
            s.run(k, args, nchannels, cuda::block_threads(proto, k.max_threads))?;
            // SAFETY: `status` is mapped memory of nchannels entries, and the kernel is done.
            let statuses = unsafe { std::slice::from_raw_parts(args.status as *const Status, nchannels) };
            Ok(statuses.iter().position(|s| s.code != 0))
        }
        _ => Err(Error::Internal("a kernel launched on a stream of another target".into())),
    }
}

/// Queues `kernel` with `args` as `nchannels` CTAs on `pool`, a CUDA stream (being captured
/// into a graph: `capturing`), without waiting for it, after its communicator's earlier
/// launches (`order`). Returns an event recorded after it, or None when the stream was
/// being captured: the launch went into a CUDA graph and runs at its replays.
///
/// # Safety
/// `kernel`'s table (see `KernelRef`), and whatever `args` points to, live until the launch
/// has finished (or, captured, as long as the graph is replayed).
pub(crate) unsafe fn queue(
    kernel: KernelRef, args: &Args, nchannels: usize, proto: Protocol, pool: &CtaPool, capturing: bool,
    order: &mut LaunchOrder,
) -> Result<Option<Arc<CudaEvent>>> {
    let (KernelRef::Cuda(k), CtaPool::Cuda(s)) = (kernel, pool) else {
        return Err(Error::Internal("an asynchronous launch off a CUDA stream".into()));
    };
    // SAFETY: the caller keeps the kernel's table alive.
    let k = unsafe { &*k };
    order.before(s, capturing)?;
    s.queue(k, args, nchannels, cuda::block_threads(proto, k.max_threads))?;
    if capturing {
        return Ok(None);
    }
    let done = Arc::new(CudaEvent::new(s.gpu())?);
    done.record(s)?;
    order.after(s, done.clone());
    Ok(Some(done))
}
