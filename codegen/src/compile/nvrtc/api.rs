//! NVRTC's C API, bound by hand from a library file: cudarc's binding opens libnvrtc by the
//! names of the one CUDA major version it was built for (`.so.12` here) and panics on a
//! missing library or symbol, while jitccl must work with whichever of NVRTC 12 or 13 is
//! installed. The handful of functions used here have had the same C signatures since 11.2.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::PathBuf;

use libloading::Library;

type Prog = *mut c_void;
/// `nvrtcResult`; 0 is success.
type Status = c_int;
type SizeFn = unsafe extern "C" fn(Prog, *mut usize) -> Status;
type FetchFn = unsafe extern "C" fn(Prog, *mut c_char) -> Status;

/// The NVRTC functions jitccl calls, resolved from one loaded library.
pub(super) struct Api {
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> Status,
    error_string: unsafe extern "C" fn(Status) -> *const c_char,
    create_program: unsafe extern "C" fn(
        *mut Prog,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> Status,
    compile_program: unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> Status,
    destroy_program: unsafe extern "C" fn(*mut Prog) -> Status,
    num_supported_archs: unsafe extern "C" fn(*mut c_int) -> Status,
    supported_archs: unsafe extern "C" fn(*mut c_int) -> Status,
    log_size: SizeFn,
    log: FetchFn,
    ptx_size: SizeFn,
    ptx: FetchFn,
    cubin_size: SizeFn,
    cubin: FetchFn,
    /// Keeps the functions above mapped.
    _lib: Library,
}

/// A failed NVRTC call: the function and NVRTC's name for the status.
#[derive(Debug, thiserror::Error)]
#[error("{call}: {status}")]
pub(super) struct CallError {
    call: &'static str,
    status: String,
}

impl Api {
    /// Resolves every function from `lib`; a missing one (an NVRTC older than 11.2, or not
    /// NVRTC at all) is named in the error.
    pub(super) fn new(lib: Library) -> Result<Api, String> {
        fn sym<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
            // SAFETY: each field's type is the C signature of the NVRTC function it names.
            unsafe { lib.get::<T>(name.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| format!("lacks {name} (not NVRTC, or older than 11.2?): {e}"))
        }
        Ok(Api {
            version: sym(&lib, "nvrtcVersion")?,
            error_string: sym(&lib, "nvrtcGetErrorString")?,
            create_program: sym(&lib, "nvrtcCreateProgram")?,
            compile_program: sym(&lib, "nvrtcCompileProgram")?,
            destroy_program: sym(&lib, "nvrtcDestroyProgram")?,
            num_supported_archs: sym(&lib, "nvrtcGetNumSupportedArchs")?,
            supported_archs: sym(&lib, "nvrtcGetSupportedArchs")?,
            log_size: sym(&lib, "nvrtcGetProgramLogSize")?,
            log: sym(&lib, "nvrtcGetProgramLog")?,
            ptx_size: sym(&lib, "nvrtcGetPTXSize")?,
            ptx: sym(&lib, "nvrtcGetPTX")?,
            cubin_size: sym(&lib, "nvrtcGetCUBINSize")?,
            cubin: sym(&lib, "nvrtcGetCUBIN")?,
            _lib: lib,
        })
    }

    fn check(&self, call: &'static str, status: Status) -> Result<(), CallError> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: NVRTC returns a static string for every status, NULL for unknown ones.
        let text = unsafe { (self.error_string)(status) };
        let status = if text.is_null() {
            format!("status {status}")
        } else {
            // SAFETY: non-NULL, NUL-terminated, static.
            unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
        };
        Err(CallError { call, status })
    }

    /// NVRTC's (major, minor) version.
    pub(super) fn version(&self) -> Result<(i32, i32), CallError> {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: both pointers are valid for writes.
        self.check("nvrtcVersion", unsafe { (self.version)(&mut major, &mut minor) })?;
        Ok((major, minor))
    }

    /// The `sm_XX` numbers this NVRTC can compile for, ascending.
    pub(super) fn supported_archs(&self) -> Result<Vec<u32>, CallError> {
        let mut n = 0;
        // SAFETY: valid for writes.
        self.check("nvrtcGetNumSupportedArchs", unsafe { (self.num_supported_archs)(&mut n) })?;
        let mut archs = vec![0; n.max(0) as usize];
        // SAFETY: the buffer holds the number of entries NVRTC just reported.
        self.check("nvrtcGetSupportedArchs", unsafe { (self.supported_archs)(archs.as_mut_ptr()) })?;
        Ok(archs.into_iter().map(|a| a as u32).collect())
    }
}

/// An NVRTC program, destroyed on drop. Borrows the source and name: NVRTC may keep
/// pointers to both until the program is destroyed.
pub(super) struct Program<'a> {
    api: &'a Api,
    prog: Prog,
    _text: std::marker::PhantomData<&'a CStr>,
}

impl<'a> Program<'a> {
    pub(super) fn new(api: &'a Api, src: &'a CStr, name: &'a CStr) -> Result<Program<'a>, CallError> {
        let mut prog = std::ptr::null_mut();
        // SAFETY: both strings are NUL-terminated and outlive the program; no headers.
        let status = unsafe {
            (api.create_program)(&mut prog, src.as_ptr(), name.as_ptr(), 0, std::ptr::null(), std::ptr::null())
        };
        api.check("nvrtcCreateProgram", status)?;
        Ok(Program { api, prog, _text: std::marker::PhantomData })
    }

    pub(super) fn compile(&self, options: &[&CStr]) -> Result<(), CallError> {
        let ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        // SAFETY: the program is live; `ptrs` holds `options.len()` NUL-terminated strings.
        let status = unsafe { (self.api.compile_program)(self.prog, ptrs.len() as c_int, ptrs.as_ptr()) };
        self.api.check("nvrtcCompileProgram", status)
    }

    /// One of NVRTC's size-then-copy outputs, as NVRTC returns it.
    fn fetch(&self, what: [&'static str; 2], size_fn: SizeFn, fetch_fn: FetchFn) -> Result<Vec<u8>, CallError> {
        let mut size = 0;
        // SAFETY: the program is live; the buffer has the size NVRTC asked for.
        self.api.check(what[0], unsafe { size_fn(self.prog, &mut size) })?;
        let mut buf = vec![0u8; size];
        self.api.check(what[1], unsafe { fetch_fn(self.prog, buf.as_mut_ptr().cast()) })?;
        Ok(buf)
    }

    /// The PTX text, without its terminating NUL.
    pub(super) fn ptx(&self) -> Result<Vec<u8>, CallError> {
        self.fetch(["nvrtcGetPTXSize", "nvrtcGetPTX"], self.api.ptx_size, self.api.ptx).map(strip_nuls)
    }

    /// The CUBIN ELF image, untouched (its last bytes may be zeros that belong to it).
    pub(super) fn cubin(&self) -> Result<Vec<u8>, CallError> {
        self.fetch(["nvrtcGetCUBINSize", "nvrtcGetCUBIN"], self.api.cubin_size, self.api.cubin)
    }

    /// The program log as text, trimmed; a failure to fetch it becomes the text.
    pub(super) fn log(&self) -> String {
        match self.fetch(["nvrtcGetProgramLogSize", "nvrtcGetProgramLog"], self.api.log_size, self.api.log) {
            Ok(bytes) => String::from_utf8_lossy(&strip_nuls(bytes)).trim_end().to_owned(),
            Err(e) => format!("(cannot fetch the nvrtc log: {e})"),
        }
    }
}

fn strip_nuls(mut bytes: Vec<u8>) -> Vec<u8> {
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    bytes
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram, destroyed only here.
        if let Err(e) = self.api.check("nvrtcDestroyProgram", unsafe { (self.api.destroy_program)(&mut self.prog) }) {
            tracing::debug!("{e}");
        }
    }
}

/// The file a loaded symbol comes from (for libraries opened by bare name through the
/// loader path), or `None` when the loader cannot say.
pub(super) fn file_of(lib: &Library, symbol: &str) -> Option<PathBuf> {
    // SAFETY: the symbol is only looked up, not called.
    let addr = unsafe { lib.get::<unsafe extern "C" fn()>(symbol.as_bytes()) }.ok().map(|s| *s as *const c_void)?;
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: `addr` lies in a loaded library; `info` is valid for writes.
    if unsafe { libc::dladdr(addr, info.as_mut_ptr()) } == 0 {
        return None;
    }
    // SAFETY: dladdr succeeded, so `info` is initialized; dli_fname is NULL or a C string.
    let name = unsafe { info.assume_init() }.dli_fname;
    if name.is_null() {
        return None;
    }
    // SAFETY: checked non-NULL above; owned by the loader while the library is loaded.
    let path = unsafe { CStr::from_ptr(name) }.to_str().ok()?;
    std::fs::canonicalize(path).ok()
}
