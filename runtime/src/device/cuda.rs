//! The CUDA target. Today: how many devices the driver sees, without ever panicking where
//! there is no driver (cudarc panics when a library is absent, so its presence is checked
//! first). Device memory, streams, module loading and launch go here, behind the same
//! types as `host`.

/// How many CUDA devices this machine has, or why it has none usable. Never panics: the
/// driver library is looked for before cudarc touches it.
pub fn device_count() -> std::result::Result<usize, String> {
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
