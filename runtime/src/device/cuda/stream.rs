//! A CUDA stream and kernel launches on it: one CTA per channel, the launch arguments
//! passed by value (`struct jc_args`, the ABI shared with the host target). A stream is
//! jitccl's own, or one of the application's (a `cudaStream_t`), borrowed.

use std::sync::Arc;

use cudarc::driver::result as cu;
use cudarc::driver::sys;
use jitccl_codegen::abi::Args;
use jitccl_codegen::Protocol;

use super::{driver, Gpu, Kernel};
use crate::error::Result;

/// Threads per CTA by protocol, as NCCL sizes its blocks: enough threads to keep a
/// channel's copies at memory speed; a function whose registers allow fewer gets fewer.
pub(crate) fn block_threads(proto: Protocol, kernel_max: u32) -> u32 {
    let want = match proto {
        Protocol::Simple | Protocol::LL => 512,
        Protocol::LL128 => 640,
    };
    // Whole warps: the LL lines are spread over threads.
    (want.min(kernel_max) / 32 * 32).max(32)
}

/// A non-blocking stream of one GPU (no implicit ordering with the legacy default stream),
/// or the application's stream.
pub(crate) struct CudaStream {
    gpu: Arc<Gpu>,
    stream: sys::CUstream,
    /// Made here, and so destroyed here (not a borrowed one).
    owned: bool,
}

// SAFETY: a stream handle may be used from any thread with its context current.
unsafe impl Send for CudaStream {}

impl CudaStream {
    pub(crate) fn new(gpu: &Arc<Gpu>) -> Result<CudaStream> {
        gpu.bind()?;
        let stream = cu::stream::create(cu::stream::StreamKind::NonBlocking)
            .map_err(driver(format_args!("creating a stream on cuda:{}", gpu.ordinal)))?;
        Ok(CudaStream { gpu: gpu.clone(), stream, owned: true })
    }

    /// The application's stream `raw` of `gpu` (0: the legacy default stream), which the
    /// application keeps alive while jitccl uses it.
    pub(crate) fn borrowed(gpu: &Arc<Gpu>, raw: usize) -> CudaStream {
        CudaStream { gpu: gpu.clone(), stream: raw as sys::CUstream, owned: false }
    }

    pub(crate) fn raw(&self) -> sys::CUstream {
        self.stream
    }

    pub(crate) fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Whether the stream is being captured into a CUDA graph (what is queued on it then
    /// is recorded, not run).
    pub(crate) fn capturing(&self) -> Result<bool> {
        self.gpu.bind()?;
        // SAFETY: a stream of this context; asking is allowed while capturing.
        let status =
            unsafe { cu::stream::is_capturing(self.stream) }.map_err(driver("asking whether a stream is capturing"))?;
        Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// Queues `kernel` as `nchannels` CTAs of `threads` threads, without waiting for it.
    /// The caller keeps what the arguments point to alive until the launch has finished.
    pub(crate) fn queue(&self, kernel: &Kernel, args: &Args, nchannels: usize, threads: u32) -> Result<()> {
        self.gpu.bind()?;
        let mut args = *args;
        let mut params = [(&mut args as *mut Args).cast::<std::ffi::c_void>()];
        // SAFETY: a loaded function whose one parameter is `struct jc_args` (the ABI,
        // asserted in every kernel); the driver copies the arguments at the call.
        unsafe {
            cu::launch_kernel(kernel.function, (nchannels as u32, 1, 1), (threads, 1, 1), 0, self.stream, &mut params)
        }
        .map_err(driver(format_args!("launching {}", kernel.symbol)))
    }

    /// Runs `kernel` as `nchannels` CTAs of `threads` threads and waits for it. The wait
    /// ends: every wait inside the kernel is bounded (abort flag, failure board, timeout).
    pub(crate) fn run(&self, kernel: &Kernel, args: &Args, nchannels: usize, threads: u32) -> Result<()> {
        // What the arguments point to lives until the launch is released, after the wait.
        self.queue(kernel, args, nchannels, threads)?;
        // SAFETY: a stream of the current context.
        unsafe { cu::stream::synchronize(self.stream) }.map_err(driver(format_args!("running {}", kernel.symbol)))
    }
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        if self.owned && self.gpu.bind().is_ok() {
            // SAFETY: created in `new`; the dispatcher that used it has finished.
            let _ = unsafe { cu::stream::destroy(self.stream) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_whole_warps_within_the_kernel_limit() {
        assert_eq!(block_threads(Protocol::Simple, 1024), 512);
        assert_eq!(block_threads(Protocol::LL128, 1024), 640);
        assert_eq!(block_threads(Protocol::LL128, 600), 576);
        assert_eq!(block_threads(Protocol::LL, 1), 32);
    }
}
