//! NVRTC through cudarc: finds libnvrtc, compiles CUDA source to CUBIN or PTX.
//!
//! cudarc opens libnvrtc lazily by bare name and panics when it is missing, so this module
//! first establishes which library cudarc will bind to (preloading one by absolute path when
//! it is not on the loader path) and only then calls into cudarc.

use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use cudarc::nvrtc::{result, sys};
use libloading::Library;

use crate::compile::CompileError;
use crate::spec::CudaArch;

/// Overrides discovery: a libnvrtc file or a directory containing one.
const ENV_PATH: &str = "JITCCL_NVRTC_PATH";
/// Where `scripts/setup-nvrtc.sh` installs the NVRTC wheels (workspace path at build time).
const PROJECT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../.deps/nvrtc");
/// Sub-folders of a directory searched for the library: a wheel install, a CUDA toolkit.
const LIB_SUBDIRS: [&str; 4] = ["", "nvidia/cuda_nvrtc/lib", "lib64", "lib"];
/// Every NVRTC function this module calls through cudarc, checked up front because cudarc
/// panics on a missing symbol (an NVRTC too old for CUBIN output, say).
const REQUIRED_SYMBOLS: [&str; 10] = [
    "nvrtcVersion",
    "nvrtcCreateProgram",
    "nvrtcCompileProgram",
    "nvrtcDestroyProgram",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcGetPTXSize",
    "nvrtcGetPTX",
    "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN",
];

pub use crate::spec::CudaOutput;

/// A loaded NVRTC, shared by the whole process (see [`nvrtc`]).
#[derive(Debug)]
pub struct Nvrtc {
    /// The library preloaded by absolute path; held so that it stays mapped for cudarc,
    /// which finds it by its soname. `None` when cudarc found NVRTC on its own.
    _lib: Option<Library>,
    version: (i32, i32),
    location: String,
}

static NVRTC: OnceLock<Result<Nvrtc, String>> = OnceLock::new();

/// Loads NVRTC once per process; later calls return the same result (errors included).
pub fn nvrtc() -> Result<&'static Nvrtc, CompileError> {
    NVRTC
        .get_or_init(|| {
            let override_path = std::env::var_os(ENV_PATH).filter(|v| !v.is_empty());
            Nvrtc::load(override_path.as_deref().map(Path::new))
        })
        .as_ref()
        .map_err(|reason| unavailable(reason.clone()))
}

fn unavailable(reason: String) -> CompileError {
    CompileError::Unavailable {
        compiler: "nvrtc",
        reason,
    }
}

impl Nvrtc {
    /// NVRTC's (major, minor) version, e.g. (12, 9).
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// The library file, or "system" when cudarc found it on the loader path (for logs).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Identifies the compiler in cache keys, e.g. "nvrtc-12.9".
    pub fn id(&self) -> String {
        format!("nvrtc-{}.{}", self.version.0, self.version.1)
    }

    /// Compiles one translation unit for `arch`: CUBIN bytes, or PTX text (without a
    /// trailing NUL; append one before handing it to `cuModuleLoadData`).
    /// `name` names the program in NVRTC's diagnostics and in errors.
    pub fn compile(
        &self,
        source: &str,
        name: &str,
        arch: CudaArch,
        output: CudaOutput,
    ) -> Result<Vec<u8>, CompileError> {
        let failed = |log: String| CompileError::Failed {
            compiler: "nvrtc",
            kernel: name.to_owned(),
            log,
        };
        let src = CString::new(source).map_err(|e| {
            failed(format!(
                "source contains a NUL byte at offset {}",
                e.nul_position()
            ))
        })?;
        let file_name = CString::new(format!("{name}.cu"))
            .map_err(|_| failed("kernel name contains a NUL byte".to_owned()))?;
        // Declared after `src` and `file_name`: NVRTC may keep pointers to both until the
        // program is destroyed, and locals drop in reverse order.
        let program = Program::new(&src, &file_name)
            .map_err(|e| failed(format!("nvrtcCreateProgram: {e}")))?;

        let arch_flag = match output {
            CudaOutput::Cubin => format!("--gpu-architecture=sm_{}", arch.0),
            CudaOutput::Ptx => format!("--gpu-architecture=compute_{}", arch.0),
        };
        // No multiply-add contraction: float results must match the host target's bits.
        let mut options = vec![arch_flag.as_str(), "--std=c++17", "-default-device", "--fmad=false"];
        // NVRTC 12.4+: leave out what the kernels never use (texture/surface functions, the
        // device runtime, the runtime API's types): measured 5-25% faster compiles.
        if self.version >= (12, 4) {
            options.push("-minimal");
        }
        let started = Instant::now();
        // SAFETY: `program` is live until the end of this function.
        let status = unsafe { result::compile_program(program.0, &options) };
        let log = program.log();
        if let Err(e) = status {
            let log = if log.is_empty() {
                format!("nvrtcCompileProgram: {e}")
            } else {
                format!("{log}\n(nvrtcCompileProgram: {e})")
            };
            return Err(failed(log));
        }
        if !log.is_empty() {
            tracing::debug!(kernel = name, %log, "nvrtc log");
        }
        let mut bytes = match output {
            CudaOutput::Cubin => program.fetch(sys::nvrtcGetCUBINSize, sys::nvrtcGetCUBIN),
            CudaOutput::Ptx => program.fetch(sys::nvrtcGetPTXSize, sys::nvrtcGetPTX),
        }
        .map_err(|e| failed(format!("fetching the {output:?} output: {e}")))?;
        if output == CudaOutput::Ptx {
            strip_nuls(&mut bytes);
        }
        tracing::debug!(
            kernel = name, %arch, ?output, bytes = bytes.len(), elapsed = ?started.elapsed(),
            "nvrtc compiled"
        );
        Ok(bytes)
    }

    /// Discovery: `override_path` (the value of JITCCL_NVRTC_PATH) if given, else what
    /// cudarc finds on the loader path, else the project-local wheel install.
    fn load(override_path: Option<&Path>) -> Result<Nvrtc, String> {
        if let Some(path) = override_path {
            tracing::debug!(path = %path.display(), "nvrtc: trying {ENV_PATH}");
            // An explicit choice must not silently fall back to another NVRTC.
            return find_library(path)
                .and_then(|file| Self::preload(&file))
                .map_err(|e| format!("{ENV_PATH}={}: {e}", path.display()));
        }
        tracing::debug!("nvrtc: trying the loader path (LD_LIBRARY_PATH, ldconfig) as cudarc does");
        // SAFETY: only dlopens candidate names and closes them again; it does not touch
        // cudarc's lazily initialized library, so a miss leaves cudarc usable.
        if unsafe { sys::is_culib_present() } {
            return Self::bind(None, "system".to_owned());
        }
        tracing::debug!(dir = PROJECT_DIR, "nvrtc: trying the project-local install");
        find_library(Path::new(PROJECT_DIR))
            .and_then(|file| Self::preload(&file))
            .map_err(|e| {
                format!(
                    "{ENV_PATH} is not set, cudarc found no libnvrtc on the loader path \
                     (LD_LIBRARY_PATH, ldconfig), and the project-local install is unusable: {e}. \
                     Run scripts/setup-nvrtc.sh or set {ENV_PATH} to libnvrtc.so.12 or its directory"
                )
            })
    }

    fn preload(file: &Path) -> Result<Nvrtc, String> {
        // SAFETY: loading NVRTC runs no initializers with preconditions on our side.
        let lib = unsafe { Library::new(file) }
            .map_err(|e| format!("cannot load {}: {e}", file.display()))?;
        Self::bind(Some(lib), file.display().to_string())
    }

    /// Checks that cudarc resolves NVRTC to `preloaded` (or to anything, when `None`) with
    /// every function this module uses, then reads the version.
    fn bind(preloaded: Option<Library>, location: String) -> Result<Nvrtc, String> {
        // SAFETY: as in `load`.
        if !unsafe { sys::is_culib_present() } {
            return Err(format!(
                "{location} loads, but cudarc opens NVRTC by soname and looks for {}; \
                 the library's soname is none of these (wrong CUDA major version?)",
                cudarc_lib_names().join(", ")
            ));
        }
        // SAFETY: `is_culib_present` just opened one of the names `culib` tries, so `culib`
        // finds a library instead of panicking.
        let bound = unsafe { sys::culib() };
        for symbol in REQUIRED_SYMBOLS {
            // SAFETY: the symbol is only looked up, not called.
            unsafe { bound.get::<unsafe extern "C" fn()>(symbol.as_bytes()) }
                .map_err(|e| format!("{location} lacks {symbol} (NVRTC too old?): {e}"))?;
        }
        if let Some(lib) = &preloaded {
            // cudarc tries names like libnvrtc.so before libnvrtc.so.12, so another NVRTC on
            // the loader path wins over the preloaded one.
            // SAFETY: only the addresses are compared.
            let (ours, theirs) = unsafe {
                (
                    lib.get::<unsafe extern "C" fn()>(b"nvrtcVersion"),
                    bound.get::<unsafe extern "C" fn()>(b"nvrtcVersion"),
                )
            };
            let same = matches!((ours, theirs), (Ok(a), Ok(b)) if *a as usize == *b as usize);
            if !same {
                return Err(format!(
                    "cudarc binds to another libnvrtc found on the loader path instead of {location}; \
                     remove that one from LD_LIBRARY_PATH/ldconfig or use it"
                ));
            }
        }
        let (mut major, mut minor) = (0, 0);
        // SAFETY: the symbol exists (checked above); both pointers are valid for writes.
        unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
            .result()
            .map_err(|e| format!("nvrtcVersion failed for {location}: {e}"))?;
        tracing::info!(version = %format!("{major}.{minor}"), %location, "nvrtc loaded");
        Ok(Nvrtc {
            _lib: preloaded,
            version: (major, minor),
            location,
        })
    }
}

/// `path` itself if it is a file, else the first libnvrtc (by cudarc's names, so that cudarc
/// can find it by soname) in one of `LIB_SUBDIRS` of `path`.
fn find_library(path: &Path) -> Result<PathBuf, String> {
    if path.is_file() {
        return Ok(path.to_owned());
    }
    if !path.is_dir() {
        return Err(format!("{} does not exist", path.display()));
    }
    let names = cudarc_lib_names();
    for dir in LIB_SUBDIRS.map(|sub| path.join(sub)) {
        tracing::debug!(dir = %dir.display(), "nvrtc: searching");
        if let Some(file) = names.iter().map(|n| dir.join(n)).find(|f| f.is_file()) {
            return Ok(file);
        }
    }
    Err(format!(
        "no libnvrtc (under a name cudarc looks for, e.g. libnvrtc.so.12) in {} \
         or its sub-folders {}",
        path.display(),
        LIB_SUBDIRS[1..].join(", ")
    ))
}

/// The file names cudarc's loader tries for NVRTC, in its order (its list repeats some).
fn cudarc_lib_names() -> Vec<String> {
    let mut names = cudarc::get_lib_name_candidates("nvrtc");
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names
}

fn strip_nuls(bytes: &mut Vec<u8>) {
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
}

/// An NVRTC program, destroyed on drop.
struct Program(sys::nvrtcProgram);

type SizeFn = unsafe fn(sys::nvrtcProgram, *mut usize) -> sys::nvrtcResult;
type FetchFn = unsafe fn(sys::nvrtcProgram, *mut c_char) -> sys::nvrtcResult;

impl Program {
    fn new(src: &CStr, name: &CStr) -> Result<Program, result::NvrtcError> {
        result::create_program(src, Some(name)).map(Program)
    }

    /// One of NVRTC's size-then-copy outputs (log, PTX, CUBIN).
    fn fetch(&self, size_fn: SizeFn, fetch_fn: FetchFn) -> Result<Vec<u8>, result::NvrtcError> {
        let mut size = 0;
        // SAFETY: the program is live; the buffer has the size NVRTC asked for.
        unsafe {
            size_fn(self.0, &mut size).result()?;
            let mut buf = vec![0u8; size];
            fetch_fn(self.0, buf.as_mut_ptr().cast()).result()?;
            Ok(buf)
        }
    }

    /// The program log as text, trimmed; a failure to fetch it becomes the text.
    fn log(&self) -> String {
        match self.fetch(sys::nvrtcGetProgramLogSize, sys::nvrtcGetProgramLog) {
            Ok(mut bytes) => {
                strip_nuls(&mut bytes);
                String::from_utf8_lossy(&bytes).trim_end().to_owned()
            }
            Err(e) => format!("(cannot fetch the nvrtc log: {e})"),
        }
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by `create_program`, destroyed only here.
        if let Err(e) = unsafe { result::destroy_program(self.0) } {
            tracing::debug!("nvrtcDestroyProgram failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KERNEL: &str = r#"
extern "C" __global__ void jitccl_test_kernel(const volatile unsigned long long* in,
                                              unsigned long long* out,
                                              unsigned short* halves, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned long long v = in[i];
    out[i] = v + 1ull;
    float x = (float)(v & 0xffull);
    unsigned short h;
    asm volatile("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    halves[i] = h;
}
"#;

    /// NVRTC for tests that need it, or `None` (test skipped) unless JITCCL_REQUIRE_NVRTC=1.
    fn nvrtc_or_skip(test: &str) -> Option<&'static Nvrtc> {
        match nvrtc() {
            Ok(n) => Some(n),
            Err(e) if std::env::var("JITCCL_REQUIRE_NVRTC").as_deref() == Ok("1") => {
                panic!("JITCCL_REQUIRE_NVRTC=1 but {e}")
            }
            Err(e) => {
                println!("skipping {test}: {e}");
                None
            }
        }
    }

    #[test]
    fn compiles_cubin_for_sm80_and_sm90() {
        let Some(nv) = nvrtc_or_skip("compiles_cubin_for_sm80_and_sm90") else {
            return;
        };
        for arch in [CudaArch(80), CudaArch(90)] {
            let cubin = nv
                .compile(KERNEL, "jitccl_test_kernel", arch, CudaOutput::Cubin)
                .unwrap();
            assert!(cubin.starts_with(b"\x7fELF"), "{arch}: not an ELF image");
        }
    }

    #[test]
    fn compiles_ptx_with_inline_asm() {
        let Some(nv) = nvrtc_or_skip("compiles_ptx_with_inline_asm") else {
            return;
        };
        let ptx = nv
            .compile(KERNEL, "jitccl_test_kernel", CudaArch(90), CudaOutput::Ptx)
            .unwrap();
        let ptx = String::from_utf8(ptx).unwrap();
        assert!(ptx.contains(".entry jitccl_test_kernel"), "{ptx}");
        assert!(ptx.contains(".target sm_90"), "{ptx}");
        assert!(ptx.contains("cvt.rn.f16.f32"), "{ptx}");
        assert!(!ptx.ends_with('\0'));
    }

    #[test]
    fn syntax_error_is_failed_with_log() {
        let Some(nv) = nvrtc_or_skip("syntax_error_is_failed_with_log") else {
            return;
        };
        let src = "extern \"C\" __global__ void broken(int* p) { *p = undeclared_name; }";
        match nv.compile(src, "broken", CudaArch(90), CudaOutput::Cubin) {
            Err(CompileError::Failed {
                compiler: "nvrtc",
                kernel,
                log,
            }) => {
                assert_eq!(kernel, "broken");
                assert!(
                    log.contains("undeclared_name") && log.contains("broken.cu"),
                    "{log}"
                );
            }
            other => panic!("expected Failed, got {other:?}"),
        }
    }

    #[test]
    fn unsupported_arch_is_failed() {
        let Some(nv) = nvrtc_or_skip("unsupported_arch_is_failed") else {
            return;
        };
        let err = nv
            .compile(KERNEL, "jitccl_test_kernel", CudaArch(7), CudaOutput::Cubin)
            .unwrap_err();
        assert!(matches!(err, CompileError::Failed { .. }), "{err}");
    }

    #[test]
    fn version_and_id_agree() {
        let Some(nv) = nvrtc_or_skip("version_and_id_agree") else {
            return;
        };
        let (major, minor) = nv.version();
        assert!(major > 0, "{major}.{minor}");
        assert_eq!(nv.id(), format!("nvrtc-{major}.{minor}"));
        assert!(!nv.location().is_empty());
    }

    #[test]
    fn override_accepts_file_and_directory() {
        let Some(nv) = nvrtc_or_skip("override_accepts_file_and_directory") else {
            return;
        };
        if nv.location() == "system" {
            println!(
                "skipping override_accepts_file_and_directory: NVRTC came from the loader path"
            );
            return;
        }
        let file = Path::new(nv.location());
        let dir = file.parent().unwrap();
        for path in [file, dir] {
            let loaded = Nvrtc::load(Some(path)).unwrap();
            assert_eq!(loaded.version(), nv.version());
            assert_eq!(loaded.location(), nv.location());
        }
    }

    #[test]
    fn override_to_missing_path_is_unavailable() {
        let missing = Path::new("/nonexistent/jitccl/libnvrtc.so.12");
        match Nvrtc::load(Some(missing)).map_err(unavailable) {
            Err(CompileError::Unavailable {
                compiler: "nvrtc",
                reason,
            }) => {
                assert!(
                    reason.contains(ENV_PATH)
                        && reason.contains("/nonexistent/jitccl/libnvrtc.so.12"),
                    "{reason}"
                );
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }

    #[test]
    fn override_to_directory_without_library_names_it() {
        let empty = tempfile::tempdir().unwrap();
        let reason = Nvrtc::load(Some(empty.path())).unwrap_err();
        assert!(
            reason.contains(&empty.path().display().to_string()) && reason.contains("no libnvrtc"),
            "{reason}"
        );
    }

    #[test]
    fn reports_compile_time() {
        let Some(nv) = nvrtc_or_skip("reports_compile_time") else {
            return;
        };
        // The first compile of the process pays NVRTC's one-time initialization.
        let started = Instant::now();
        nv.compile(
            KERNEL,
            "jitccl_test_kernel",
            CudaArch(90),
            CudaOutput::Cubin,
        )
        .unwrap();
        let first = started.elapsed();
        let started = Instant::now();
        nv.compile(
            KERNEL,
            "jitccl_test_kernel",
            CudaArch(90),
            CudaOutput::Cubin,
        )
        .unwrap();
        println!(
            "nvrtc {}: small kernel to CUBIN sm_90: first {first:?}, again {:?}",
            nv.id(),
            started.elapsed()
        );
    }
}
