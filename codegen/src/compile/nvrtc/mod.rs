//! NVRTC: finds a libnvrtc of CUDA 12 or 13 (`discovery` says where and in which order),
//! binds the functions jitccl needs (`api`), compiles CUDA source to CUBIN or PTX with
//! options suited to the version found.

mod api;
mod discovery;

use std::ffi::CString;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Instant;

use jitccl_settings::NVRTC_PATH;
use libloading::Library;

use self::api::{Api, Program};
use crate::compile::CompileError;
use crate::spec::CudaArch;

pub use crate::spec::CudaOutput;

/// The oldest NVRTC major version used (CUBIN output, `nvrtcGetSupportedArchs`, C++17).
const MIN_MAJOR: i32 = 12;
/// The newest major version tested; a newer one is used with a warning.
const TESTED_MAJOR: i32 = 13;

/// A loaded NVRTC, shared by the whole process (see [`nvrtc`]).
pub struct Nvrtc {
    api: Api,
    version: (i32, i32),
    /// `sm_XX` numbers this NVRTC compiles for.
    archs: Vec<u32>,
    location: String,
}

impl std::fmt::Debug for Nvrtc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvrtc").field("version", &self.version).field("location", &self.location).finish()
    }
}

/// How hard NVRTC works on the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effort {
    /// The code a kernel runs.
    Optimized,
    /// Only to see that the source compiles.
    Check,
}

static NVRTC: OnceLock<Result<Nvrtc, String>> = OnceLock::new();

/// Loads NVRTC once per process; later calls return the same result (errors included).
pub fn nvrtc() -> Result<&'static Nvrtc, CompileError> {
    NVRTC
        .get_or_init(|| {
            let override_path = NVRTC_PATH.path();
            Nvrtc::load(override_path.as_deref())
        })
        .as_ref()
        .map_err(|reason| unavailable(reason.clone()))
}

fn unavailable(reason: String) -> CompileError {
    CompileError::Unavailable { compiler: "nvrtc", reason }
}

impl Nvrtc {
    /// The NVRTC at `path` (a libnvrtc file, or a folder searched like the default places),
    /// apart from the process-wide one: to compile with another NVRTC version.
    pub fn open(path: &Path) -> Result<Nvrtc, CompileError> {
        discovery::open_in(path).map_err(|e| unavailable(format!("{}: {e}", path.display())))
    }

    /// NVRTC's (major, minor) version, e.g. (12, 9).
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// The library file (for logs).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Identifies the compiler in cache keys, e.g. "nvrtc-12.9".
    pub fn id(&self) -> String {
        format!("nvrtc-{}.{}", self.version.0, self.version.1)
    }

    /// Whether this NVRTC compiles for `arch` (CUDA 13 dropped sm_50 to sm_72, say).
    pub fn supports(&self, arch: CudaArch) -> bool {
        self.archs.contains(&arch.0)
    }

    /// Compiles one translation unit for `arch`: CUBIN bytes, or PTX text (without a
    /// trailing NUL; append one before handing it to `cuModuleLoadData`).
    /// `name` names the program in NVRTC's diagnostics and in errors.
    pub fn compile(
        &self, source: &str, name: &str, arch: CudaArch, output: CudaOutput,
    ) -> Result<Vec<u8>, CompileError> {
        self.run(source, name, arch, output, Effort::Optimized)
    }

    /// Compiles like [`Nvrtc::compile`] as fast as this NVRTC can (`--Ofast-compile=max`
    /// from 12.8): the front end still instantiates and type-checks everything and the
    /// inline PTX is still assembled for CUBIN, but optimizations are skipped. For checking
    /// that a source compiles; the output is not meant to run.
    pub fn check(&self, source: &str, name: &str, arch: CudaArch, output: CudaOutput) -> Result<Vec<u8>, CompileError> {
        self.run(source, name, arch, output, Effort::Check)
    }

    fn run(
        &self, source: &str, name: &str, arch: CudaArch, output: CudaOutput, effort: Effort,
    ) -> Result<Vec<u8>, CompileError> {
        let failed = |log: String| CompileError::Failed { compiler: "nvrtc", kernel: name.to_owned(), log };
        if !self.supports(arch) {
            let archs: Vec<String> = self.archs.iter().map(|a| CudaArch(*a).to_string()).collect();
            let (major, minor) = self.version;
            return Err(failed(format!(
                "NVRTC {major}.{minor} cannot compile for {arch}; it supports {}",
                archs.join(", ")
            )));
        }
        let src = CString::new(source)
            .map_err(|e| failed(format!("source contains a NUL byte at offset {}", e.nul_position())))?;
        let file_name =
            CString::new(format!("{name}.cu")).map_err(|_| failed("kernel name contains a NUL byte".to_owned()))?;
        let program = Program::new(&self.api, &src, &file_name).map_err(|e| failed(e.to_string()))?;
        let options = self.options(arch, output, effort);
        let options: Vec<&std::ffi::CStr> = options.iter().map(|o| o.as_c_str()).collect();
        let started = Instant::now();
        let status = program.compile(&options);
        let log = program.log();
        if let Err(e) = status {
            return Err(failed(if log.is_empty() { e.to_string() } else { format!("{log}\n({e})") }));
        }
        if !log.is_empty() {
            tracing::debug!(kernel = name, %log, "nvrtc log");
        }
        let bytes = match output {
            CudaOutput::Cubin => program.cubin(),
            CudaOutput::Ptx => program.ptx(),
        }
        .map_err(|e| failed(format!("fetching the {output:?} output: {e}")))?;
        tracing::debug!(
            kernel = name, %arch, ?output, ?effort, bytes = bytes.len(), elapsed = ?started.elapsed(),
            "nvrtc compiled"
        );
        Ok(bytes)
    }

    /// NVRTC's options for `arch` and `output`, as far as this version knows them.
    fn options(&self, arch: CudaArch, output: CudaOutput, effort: Effort) -> Vec<CString> {
        let arch_flag = match output {
            CudaOutput::Cubin => format!("--gpu-architecture=sm_{}", arch.0),
            CudaOutput::Ptx => format!("--gpu-architecture=compute_{}", arch.0),
        };
        // No multiply-add contraction: float results must match the host target's bits.
        let mut options = vec![arch_flag, "--std=c++17".into(), "-default-device".into(), "--fmad=false".into()];
        // NVRTC 12.4+: leave out what the kernels never use (texture/surface functions, the
        // device runtime, the runtime API's types): less for NVRTC to parse, faster compiles.
        if self.version >= (12, 4) {
            options.push("-minimal".into());
        }
        // Much shorter PTX compiles for checks, which need NVRTC's errors, not fast code.
        if effort == Effort::Check && self.version >= (12, 8) {
            options.push("--Ofast-compile=max".into());
        }
        // Built from literals and digits: no NUL byte.
        options.into_iter().filter_map(|o| CString::new(o).ok()).collect()
    }

    /// Discovery: `override_path` (the value of JITCCL_NVRTC_PATH) if given, with no
    /// fallback (an explicit choice), else the default places in order.
    fn load(override_path: Option<&Path>) -> Result<Nvrtc, String> {
        match override_path {
            Some(path) => discovery::open_in(path).map_err(|e| format!("{}={}: {e}", NVRTC_PATH.name, path.display())),
            None => discovery::open_first(&discovery::default_places()),
        }
    }

    /// Binds NVRTC's functions in `lib` (found at `location`) and checks its version.
    fn from_library(lib: Library, location: String) -> Result<Nvrtc, String> {
        let api = Api::new(lib).map_err(|e| format!("{location} {e}"))?;
        let version = api.version().map_err(|e| format!("{location}: {e}"))?;
        let (major, minor) = version;
        if major < MIN_MAJOR {
            return Err(format!("{location} is NVRTC {major}.{minor}; jitccl needs NVRTC 12 or 13"));
        }
        if major > TESTED_MAJOR {
            tracing::warn!(%location, "NVRTC {major}.{minor} is newer than jitccl was tested with (12, 13)");
        }
        let archs = api.supported_archs().map_err(|e| format!("{location}: {e}"))?;
        tracing::info!(version = %format!("{major}.{minor}"), %location, "nvrtc loaded");
        Ok(Nvrtc { api, version, archs, location })
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
            Err(e) if jitccl_settings::REQUIRE_NVRTC.flag_or_warn() => {
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
            let cubin = nv.compile(KERNEL, "jitccl_test_kernel", arch, CudaOutput::Cubin).unwrap();
            assert!(cubin.starts_with(b"\x7fELF"), "{arch}: not an ELF image");
        }
    }

    #[test]
    fn compiles_ptx_with_inline_asm() {
        let Some(nv) = nvrtc_or_skip("compiles_ptx_with_inline_asm") else {
            return;
        };
        let ptx = nv.compile(KERNEL, "jitccl_test_kernel", CudaArch(90), CudaOutput::Ptx).unwrap();
        let ptx = String::from_utf8(ptx).unwrap();
        assert!(ptx.contains(".entry jitccl_test_kernel"), "{ptx}");
        assert!(ptx.contains(".target sm_90"), "{ptx}");
        assert!(ptx.contains("cvt.rn.f16.f32"), "{ptx}");
        assert!(!ptx.ends_with('\0'));
    }

    #[test]
    fn a_check_compiles_ptx_and_cubin_and_still_fails_on_errors() {
        let Some(nv) = nvrtc_or_skip("a_check_compiles_ptx_and_cubin_and_still_fails_on_errors") else {
            return;
        };
        let ptx = String::from_utf8(nv.check(KERNEL, "jitccl_test_kernel", CudaArch(90), CudaOutput::Ptx).unwrap());
        assert!(ptx.unwrap().contains(".entry jitccl_test_kernel"));
        let cubin = nv.check(KERNEL, "jitccl_test_kernel", CudaArch(80), CudaOutput::Cubin).unwrap();
        assert!(cubin.starts_with(b"\x7fELF"));
        // Inline PTX that ptxas rejects fails a CUBIN check as it fails a compile.
        let bad_asm = KERNEL.replace("cvt.rn.f16.f32", "cvt.rn.f16.nonsense");
        let err = nv.check(&bad_asm, "bad_asm", CudaArch(90), CudaOutput::Cubin).unwrap_err();
        assert!(matches!(err, CompileError::Failed { ref log, .. } if log.contains("nonsense")), "{err}");
        let err = nv.check("__global__ void k() { undeclared_name; }", "k", CudaArch(90), CudaOutput::Ptx);
        assert!(matches!(err, Err(CompileError::Failed { ref log, .. }) if log.contains("undeclared_name")), "{err:?}");
    }

    #[test]
    fn syntax_error_is_failed_with_log() {
        let Some(nv) = nvrtc_or_skip("syntax_error_is_failed_with_log") else {
            return;
        };
        let src = "extern \"C\" __global__ void broken(int* p) { *p = undeclared_name; }";
        match nv.compile(src, "broken", CudaArch(90), CudaOutput::Cubin) {
            Err(CompileError::Failed { compiler: "nvrtc", kernel, log }) => {
                assert_eq!(kernel, "broken");
                assert!(log.contains("undeclared_name") && log.contains("broken.cu"), "{log}");
            }
            other => panic!("expected Failed, got {other:?}"),
        }
    }

    #[test]
    fn unsupported_arch_is_failed() {
        let Some(nv) = nvrtc_or_skip("unsupported_arch_is_failed") else {
            return;
        };
        let err = nv.compile(KERNEL, "jitccl_test_kernel", CudaArch(7), CudaOutput::Cubin).unwrap_err();
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
        if !Path::new(nv.location()).is_file() {
            println!("skipping override_accepts_file_and_directory: the loader found NVRTC by name");
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
            Err(CompileError::Unavailable { compiler: "nvrtc", reason }) => {
                assert!(
                    reason.contains(NVRTC_PATH.name) && reason.contains("/nonexistent/jitccl/libnvrtc.so.12"),
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
        assert!(reason.contains(&empty.path().display().to_string()) && reason.contains("no libnvrtc"), "{reason}");
    }

    #[test]
    fn reports_compile_time() {
        let Some(nv) = nvrtc_or_skip("reports_compile_time") else {
            return;
        };
        // The first compile of the process pays NVRTC's one-time initialization.
        let started = Instant::now();
        nv.compile(KERNEL, "jitccl_test_kernel", CudaArch(90), CudaOutput::Cubin).unwrap();
        let first = started.elapsed();
        let started = Instant::now();
        nv.compile(KERNEL, "jitccl_test_kernel", CudaArch(90), CudaOutput::Cubin).unwrap();
        println!("nvrtc {}: small kernel to CUBIN sm_90: first {first:?}, again {:?}", nv.id(), started.elapsed());
    }
}
