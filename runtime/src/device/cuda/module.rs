//! A compiled image (CUBIN or PTX) loaded into a GPU's context, and its one kernel.

use std::ffi::CString;

use cudarc::driver::result as cu;
use cudarc::driver::sys;

use super::driver;
use crate::error::{Error, Result};

/// One kernel function of a loaded module; the module lives as long as it.
pub(crate) struct Kernel {
    module: sys::CUmodule,
    pub(crate) function: sys::CUfunction,
    /// The most threads a block of this function may have (its registers permitting).
    pub(crate) max_threads: u32,
    pub(crate) symbol: String,
}

// SAFETY: module and function handles may be used from any thread of the process.
unsafe impl Send for Kernel {}
unsafe impl Sync for Kernel {}

impl Kernel {
    /// Loads `image` into the current context and finds `symbol`. The function is loaded
    /// now, not at its first launch (CUDA's lazy loading): a load while a peer's kernel
    /// spins on this GPU waiting for this rank could wait for that kernel.
    pub(crate) fn load(image: &[u8], symbol: &str) -> Result<Kernel> {
        // cuModuleLoadData reads PTX up to its NUL; a CUBIN carries its own size.
        let mut owned;
        let image = if image.starts_with(b"\x7fELF") || image.ends_with(&[0]) {
            image
        } else {
            owned = image.to_vec();
            owned.push(0);
            &owned[..]
        };
        // SAFETY: a well-formed image (from NVRTC) that outlives the call.
        let module = unsafe { cu::module::load_data(image.as_ptr().cast()) }
            .map_err(driver(format_args!("loading the module of {symbol}")))?;
        let found = (|| {
            let name = CString::new(symbol).map_err(|_| Error::Internal(format!("kernel symbol {symbol:?}")))?;
            // SAFETY: a loaded module.
            let function =
                unsafe { cu::module::get_function(module, name) }.map_err(driver(format_args!("finding {symbol}")))?;
            let attr = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK;
            // SAFETY: a function of a loaded module; asking an attribute loads it.
            let max_threads = unsafe { cu::function::get_function_attribute(function, attr) }
                .map_err(driver(format_args!("loading {symbol}")))?;
            Ok((function, max_threads.max(1) as u32))
        })();
        match found {
            Ok((function, max_threads)) => Ok(Kernel { module, function, max_threads, symbol: symbol.to_string() }),
            Err(e) => {
                // SAFETY: loaded above, used by nothing.
                let _ = unsafe { cu::module::unload(module) };
                Err(e)
            }
        }
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        // SAFETY: loaded in `load`; no launch of it is pending (launches hold the kernel).
        if let Err(e) = unsafe { cu::module::unload(self.module) } {
            tracing::warn!("unloading {}: {e}", self.symbol);
        }
    }
}
