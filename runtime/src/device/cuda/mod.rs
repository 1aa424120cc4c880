//! The CUDA target, on cudarc's driver API loaded at run time: the driver library is looked
//! for before cudarc touches it (cudarc panics when a library is absent), so a machine
//! without a driver or a GPU gets an error, never a panic.
//!
//! - this module: the process-wide `Gpu` of each ordinal (its primary context, compute
//!   capability, SM count), made current on whichever thread calls into the driver;
//! - `memory`: device memory (user buffers, FIFO segments, kernel tables) and host memory
//!   mapped into the device (what the host polls: statuses, abort flags, failure boards);
//! - `ipc`: device memory shared with other processes of the machine (CUDA IPC handles);
//! - `module`: a compiled image loaded into a context, one function per spec;
//! - `stream`: a CUDA stream and the launch of a kernel on it, one CTA per channel;
//! - `event`: events (a launch's completion), one communicator's order across streams,
//!   CUDA graphs.

mod event;
mod ipc;
mod memory;
mod module;
mod stream;

use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::result as cu;
use cudarc::driver::sys;
use jitccl_codegen::compile::nvrtc::nvrtc;
use jitccl_codegen::{CudaArch, CudaOutput, KernelSpec};

use crate::error::{Error, Result};
pub(crate) use event::{Event, Graph, LaunchOrder};
pub(crate) use ipc::{IpcHandle, IpcMapping};
pub(crate) use memory::{DeviceMemory, MappedMemory, Pool, Registered};
pub(crate) use module::Kernel;
pub(crate) use stream::{block_threads, CudaStream};

/// What `Device::cuda` looked for when there is no usable driver.
const LOOKED_FOR: &str = "libcuda.so (the NVIDIA driver library) on the loader path";

/// A failed driver call, named by what it did.
pub(crate) fn driver(what: impl std::fmt::Display) -> impl FnOnce(cu::DriverError) -> Error {
    move |e| Error::Device(format!("CUDA: {what}: {e}"))
}

/// Whether every CUDA launch is waited for before the next one is queued, as before
/// launches became asynchronous (`JITCCL_CUDA_SYNC=1`): to compare, and to fall back on.
/// Read once per process.
pub fn sync_launches() -> bool {
    static SYNC: OnceLock<bool> = OnceLock::new();
    *SYNC.get_or_init(|| {
        let on = crate::settings::CUDA_SYNC.flag_or_warn();
        if on {
            tracing::info!("JITCCL_CUDA_SYNC=1: every CUDA launch is waited for before the call returns");
        }
        on
    })
}

/// Initializes the driver once per process, or says why it cannot be used.
fn init() -> std::result::Result<(), String> {
    static INIT: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    INIT.get_or_init(|| {
        // SAFETY: only tries to open the library.
        if !unsafe { sys::is_culib_present() } {
            return Err(format!("no CUDA driver: looked for {LOOKED_FOR}"));
        }
        cu::init().map_err(|e| format!("the CUDA driver did not initialize: {e}"))
    })
    .clone()
}

/// How many CUDA devices this machine has, or why it has none usable. Never panics.
pub fn device_count() -> std::result::Result<usize, String> {
    init()?;
    match cu::device::get_count() {
        Ok(0) => Err("the CUDA driver reports no device".into()),
        Ok(n) => Ok(n as usize),
        Err(e) => Err(format!("cannot count CUDA devices: {e}")),
    }
}

/// The device of the CUDA context current on the calling thread (as NCCL takes a rank's
/// device from the caller's `cudaSetDevice`), device 0 where none is current; an error
/// says why there is no usable device (no driver, no device).
pub fn current_device() -> std::result::Result<usize, String> {
    let count = device_count()?;
    let ordinal = match cu::ctx::get_current().map_err(|e| format!("reading the current CUDA context: {e}"))? {
        None => 0,
        Some(_) => {
            let mut dev: sys::CUdevice = 0;
            // SAFETY: a context is current; the driver writes one device handle.
            unsafe { sys::cuCtxGetDevice(&mut dev) }
                .result()
                .map_err(|e| format!("reading the current context's device: {e}"))?;
            dev as usize
        }
    };
    if ordinal >= count {
        return Err(format!("the current CUDA device {ordinal} is not below the device count {count}"));
    }
    Ok(ordinal)
}

/// Waits for the work queued so far on `stream`, a stream of the caller's on device
/// `ordinal` (a `cudaStream_t` as a C caller passes it; 0 is the legacy default stream):
/// what jitccl runs next then reads what the caller's kernels wrote.
pub fn synchronize_stream(ordinal: usize, stream: usize) -> Result<()> {
    let gpu = Gpu::get(ordinal)?;
    gpu.bind()?;
    let stream = stream as sys::CUstream;
    // (The C API's path with JITCCL_CUDA_SYNC=1.) A stream being captured into a CUDA graph
    // cannot be waited for, and jitccl's launch would not be captured: refused, saying so,
    // before anything is queued.
    // SAFETY: as below.
    let capture = unsafe { cu::stream::is_capturing(stream) }
        .map_err(driver("asking whether the caller's stream is capturing"))?;
    if capture != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
        return Err(Error::Unsupported(format!(
            "cuda:{ordinal}: the caller's stream is being captured into a CUDA graph ({capture:?}); with \
             JITCCL_CUDA_SYNC=1 jitccl's collectives cannot be captured: unset it, or run them outside the capture"
        )));
    }
    // SAFETY: the caller names a stream of this device's context (or the default stream).
    unsafe { cu::stream::synchronize(stream) }.map_err(driver("waiting for the caller's stream"))
}

/// A CUDA device as the driver numbers it, for topology detection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PciDevice {
    pub ordinal: u32,
    /// "0000:17:00.0", as `/sys` and NCCL's topology files write it.
    pub busid: String,
    /// Compute capability as `major * 10 + minor`.
    pub arch: u32,
}

/// Every device the driver shows (after `CUDA_VISIBLE_DEVICES`), with its PCI position and
/// compute capability; read from device attributes, without creating a context. Why
/// there are none when there is no driver.
pub(crate) fn pci_devices() -> std::result::Result<Vec<PciDevice>, String> {
    let count = device_count()?;
    let mut out = Vec::with_capacity(count);
    for ordinal in 0..count {
        let dev = cu::device::get(ordinal as i32).map_err(|e| format!("device {ordinal}: {e}"))?;
        let attr = |a| {
            // SAFETY: a valid device handle and attribute.
            unsafe { cu::device::get_attribute(dev, a) }.map_err(|e| format!("device {ordinal}: {a:?}: {e}"))
        };
        use sys::CUdevice_attribute::*;
        let (major, minor) =
            (attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?, attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?);
        out.push(PciDevice {
            ordinal: ordinal as u32,
            busid: busid(dev).map_err(|e| format!("device {ordinal}: {e}"))?,
            arch: (major * 10 + minor).max(0) as u32,
        });
    }
    Ok(out)
}

/// Device `dev`'s PCI address, "0000:17:00.0": the same in every process of the machine,
/// whatever each one's CUDA_VISIBLE_DEVICES.
fn busid(dev: sys::CUdevice) -> std::result::Result<String, cu::DriverError> {
    // SAFETY: a valid device handle and attributes.
    let attr = |a| unsafe { cu::device::get_attribute(dev, a) };
    use sys::CUdevice_attribute::*;
    let (domain, bus, slot) = (
        attr(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
        attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
        attr(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
    );
    Ok(format!("{domain:04x}:{bus:02x}:{slot:02x}.0"))
}

/// CUDA device `ordinal`'s compute capability as `major * 10 + minor`, or why it cannot
/// be read (no driver, no such device). Never panics.
pub fn compute_capability(ordinal: usize) -> std::result::Result<u32, String> {
    let devices = pci_devices()?;
    devices.get(ordinal).map(|d| d.arch).ok_or_else(|| format!("no CUDA device {ordinal} ({} present)", devices.len()))
}

/// One GPU of this process: its primary context, shared by every rank and stream on it.
pub(crate) struct Gpu {
    pub ordinal: usize,
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    /// Compute capability as `major * 10 + minor` (90 for an H100).
    pub arch: u32,
    pub sms: u32,
    pub name: String,
    /// Its PCI address (see `busid`).
    pub busid: String,
    /// Where allocations, frees and copies are ordered (see `memory`).
    mem_stream: sys::CUstream,
    /// Kernels loaded into this context: ranks on one GPU share them. By spec, not by
    /// symbol: custom ops of one name may differ in body.
    kernels: Mutex<rustc_hash::FxHashMap<KernelSpec, Arc<Kernel>>>,
    /// Events no longer used, for reuse (see `event::Event`).
    spare_events: Mutex<Vec<usize>>,
}

// SAFETY: a context handle may be used from any thread (it is made current per call).
unsafe impl Send for Gpu {}
unsafe impl Sync for Gpu {}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cuda:{} ({}, sm_{}, {} SMs)", self.ordinal, self.name, self.arch, self.sms)
    }
}

impl Gpu {
    /// The GPU of `ordinal`, its primary context retained on first use.
    pub(crate) fn get(ordinal: usize) -> Result<Arc<Gpu>> {
        static GPUS: Mutex<Vec<Option<Arc<Gpu>>>> = Mutex::new(Vec::new());
        init().map_err(|e| Error::Unsupported(format!("CUDA device {ordinal}: {e}")))?;
        let mut gpus = GPUS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(Some(g)) = gpus.get(ordinal) {
            return Ok(g.clone());
        }
        let count = device_count().map_err(|e| Error::Unsupported(format!("CUDA device {ordinal}: {e}")))?;
        if ordinal >= count {
            return Err(Error::InvalidArgument(format!("CUDA device {ordinal}: this machine has {count} device(s)")));
        }
        let gpu = Arc::new(Gpu::open(ordinal)?);
        tracing::info!("{gpu:?}: primary context retained");
        if gpus.len() <= ordinal {
            gpus.resize(ordinal + 1, None);
        }
        gpus[ordinal] = Some(gpu.clone());
        Ok(gpu)
    }

    fn open(ordinal: usize) -> Result<Gpu> {
        let dev = cu::device::get(ordinal as i32).map_err(driver(format_args!("device {ordinal}")))?;
        // SAFETY: a valid device handle.
        let ctx = unsafe { cu::primary_ctx::retain(dev) }.map_err(driver("retaining the primary context"))?;
        let attr = |a| {
            // SAFETY: a valid device handle and attribute.
            unsafe { cu::device::get_attribute(dev, a) }.map_err(driver(format_args!("reading {a:?}")))
        };
        use sys::CUdevice_attribute::*;
        let (major, minor) =
            (attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?, attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?);
        let sms = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        // Host memory is mapped into the device at the same address: kernel tables point
        // into it with host pointers.
        if attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)? == 0 {
            return Err(Error::Unsupported(format!("CUDA device {ordinal} has no unified addressing")));
        }
        let name = cu::device::get_name(dev).unwrap_or_else(|_| "unknown GPU".into());
        let busid = busid(dev).map_err(driver("reading the PCI address"))?;
        // SAFETY: a retained context.
        unsafe { cu::ctx::set_current(ctx) }.map_err(driver("making the context current"))?;
        let mem_stream =
            cu::stream::create(cu::stream::StreamKind::NonBlocking).map_err(driver("creating the memory stream"))?;
        Ok(Gpu {
            ordinal,
            dev,
            ctx,
            arch: (major * 10 + minor) as u32,
            sms: sms as u32,
            name,
            busid,
            mem_stream,
            kernels: Mutex::default(),
            spare_events: Mutex::default(),
        })
    }

    /// Makes this GPU's context current on the calling thread (every driver call needs it).
    pub(crate) fn bind(&self) -> Result<()> {
        // SAFETY: a retained context.
        unsafe { cu::ctx::set_current(self.ctx) }.map_err(driver("making the context current"))
    }

    /// Waits for the allocations, frees and copies queued on the memory stream.
    fn sync_mem_stream(&self) -> Result<()> {
        // SAFETY: a stream of this context, which is current (callers bind first).
        unsafe { cu::stream::synchronize(self.mem_stream) }.map_err(driver("waiting for a copy"))
    }

    /// Whether kernels on this GPU can reach `peer`'s memory directly (peer access).
    pub(crate) fn can_access_peer(&self, peer: &Gpu) -> Result<bool> {
        if peer.ordinal == self.ordinal {
            return Ok(true);
        }
        let mut can = 0;
        // SAFETY: valid device handles and an out-parameter.
        unsafe { sys::cuDeviceCanAccessPeer(&mut can, self.dev, peer.dev) }
            .result()
            .map_err(driver(format_args!("asking whether cuda:{} can reach cuda:{}", self.ordinal, peer.ordinal)))?;
        Ok(can != 0)
    }

    /// Lets kernels on this GPU reach memory of `peer` (direct pointers), once per pair.
    pub(crate) fn enable_peer_access(&self, peer: &Gpu) -> Result<()> {
        if peer.ordinal == self.ordinal {
            return Ok(());
        }
        if !self.can_access_peer(peer)? {
            return Err(Error::Unsupported(format!(
                "cuda:{} cannot access cuda:{}'s memory (no peer access): ranks in one process need it",
                self.ordinal, peer.ordinal
            )));
        }
        self.bind()?;
        // SAFETY: a retained context of another device.
        match unsafe { sys::cuCtxEnablePeerAccess(peer.ctx, 0) } {
            sys::CUresult::CUDA_SUCCESS => {
                tracing::info!("cuda:{} -> cuda:{}: peer access enabled", self.ordinal, peer.ordinal)
            }
            sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {}
            e => return e.result().map_err(driver("enabling peer access")),
        }
        Ok(())
    }

    /// The kernel of `spec` from `image`, loaded into this context once.
    pub(crate) fn kernel(&self, spec: &KernelSpec, image: &[u8]) -> Result<Arc<Kernel>> {
        let mut kernels = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = kernels.get(spec) {
            return Ok(k.clone());
        }
        self.bind()?;
        let k = Arc::new(Kernel::load(image, &spec.symbol())?);
        kernels.insert(*spec, k.clone());
        Ok(k)
    }
}

/// What to compile for a device of compute capability `arch`: a CUBIN for exactly it when
/// NVRTC knows it, else PTX for the newest arch below it that NVRTC knows (the driver
/// compiles PTX for newer GPUs).
pub(crate) fn image_target(arch: u32) -> Result<(CudaArch, CudaOutput)> {
    let nv = nvrtc()?;
    pick_image(arch, |a| nv.supports(CudaArch(a))).ok_or_else(|| {
        Error::Unsupported(format!("NVRTC {}.{} compiles for no arch up to sm_{arch}", nv.version().0, nv.version().1))
    })
}

fn pick_image(arch: u32, known: impl Fn(u32) -> bool) -> Option<(CudaArch, CudaOutput)> {
    if known(arch) {
        return Some((CudaArch(arch), CudaOutput::Cubin));
    }
    (CudaArch::MIN.0..arch).rev().find(|&a| known(a)).map(|a| (CudaArch(a), CudaOutput::Ptx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cubin_for_a_known_arch_else_ptx_for_the_newest_known_below() {
        let known = |a: u32| [80, 86, 89, 90].contains(&a);
        assert_eq!(pick_image(90, known), Some((CudaArch(90), CudaOutput::Cubin)));
        assert_eq!(pick_image(100, known), Some((CudaArch(90), CudaOutput::Ptx)));
        assert_eq!(pick_image(87, known), Some((CudaArch(86), CudaOutput::Ptx)));
        assert_eq!(pick_image(75, known), None);
    }

    #[test]
    fn without_a_driver_a_device_is_an_error_naming_what_was_looked_for() {
        if device_count().is_ok() {
            return; // a GPU machine: tests/cuda.rs covers it
        }
        let e = Gpu::get(0).expect_err("no GPU here").to_string();
        assert!(e.contains("CUDA device 0") && (e.contains("libcuda.so") || e.contains("driver")), "{e}");
    }
}
