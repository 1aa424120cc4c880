//! The host target's compiler: the system C compiler builds a kernel into a shared object,
//! which is loaded with libloading.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::abi::Args;
use crate::cache::BUILD_PREFIX;
use crate::compile::CompileError;

/// Flags for every host kernel. No `-march=native`: cached objects may be shared between
/// machines with different CPUs. No FMA contraction: float results must match CUDA's
/// (compiled with `--fmad=false`) bit for bit.
const CFLAGS: &[&str] = &["-O3", "-std=gnu11", "-fPIC", "-shared", "-fvisibility=hidden", "-ffp-contract=off"];

/// The system C compiler (`$CC`, else `cc`).
#[derive(Debug)]
pub struct HostCompiler {
    cc: PathBuf,
    version: String,
}

/// Finds and identifies the C compiler once per process.
pub fn host_cc() -> Result<&'static HostCompiler, CompileError> {
    static CC: OnceLock<Result<HostCompiler, String>> = OnceLock::new();
    CC.get_or_init(|| {
        let cc = PathBuf::from(std::env::var_os("CC").unwrap_or_else(|| "cc".into()));
        let out = Command::new(&cc)
            .arg("--version")
            .output()
            .map_err(|e| format!("cannot run '{}': {e} (install a C compiler, e.g. gcc, or set CC)", cc.display()))?;
        let version = String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("unknown").trim().to_string();
        tracing::info!(cc = %cc.display(), %version, "host C compiler");
        Ok(HostCompiler { cc, version })
    })
    .as_ref()
    .map_err(|reason| CompileError::Unavailable { compiler: "cc", reason: reason.clone() })
}

impl HostCompiler {
    /// Identifies the compiler and flags in cache keys.
    pub fn id(&self) -> String {
        format!("{} {}", self.version, CFLAGS.join(" "))
    }

    /// Compiles `source` into a shared object and returns its bytes. The build folder is
    /// made in `dir` (named `.build-*`, so a killed compile's leftover is recognised).
    pub fn compile(&self, source: &str, name: &str, dir: &Path) -> Result<Vec<u8>, CompileError> {
        std::fs::create_dir_all(dir).map_err(|e| CompileError::io(format!("creating {}", dir.display()), e))?;
        let tmp = tempfile::Builder::new()
            .prefix(BUILD_PREFIX)
            .tempdir_in(dir)
            .map_err(|e| CompileError::io(format!("creating a build folder in {}", dir.display()), e))?;
        let c = tmp.path().join("kernel.c");
        let so = tmp.path().join("kernel.so");
        std::fs::write(&c, source).map_err(|e| CompileError::io(format!("writing {}", c.display()), e))?;
        let mut cmd = Command::new(&self.cc);
        cmd.args(CFLAGS)
            .arg("-o")
            .arg(&so)
            .arg(&c)
            // Templates avoid libm, but a custom op's C may not: link it rather than fail
            // at load time with an undefined symbol.
            .arg("-lm");
        self.run(cmd, name)?;
        std::fs::read(&so).map_err(|e| CompileError::io(format!("reading {}", so.display()), e))
    }

    /// Parses and type-checks `source` with the kernel flags, building nothing: every error
    /// the compiler's front end finds in a kernel, in a fraction of a build's time. For
    /// checking that the generator's output is valid C; nothing is cached.
    pub fn check(&self, source: &str, name: &str) -> Result<(), CompileError> {
        let mut c = tempfile::Builder::new()
            .prefix(BUILD_PREFIX)
            .suffix(".c")
            .tempfile()
            .map_err(|e| CompileError::io("creating a temporary source file", e))?;
        c.write_all(source.as_bytes()).map_err(|e| CompileError::io(format!("writing {}", c.path().display()), e))?;
        let mut cmd = Command::new(&self.cc);
        cmd.args(CFLAGS).arg("-fsyntax-only").arg(c.path());
        self.run(cmd, name)
    }

    /// Runs `cmd` and turns a failure into an error that shows the command, its status and
    /// its output.
    fn run(&self, mut cmd: Command, name: &str) -> Result<(), CompileError> {
        let shown = std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        let res = cmd.output().map_err(|e| CompileError::io(format!("running {shown}"), e))?;
        let output: Vec<String> = [&res.stderr, &res.stdout]
            .iter()
            .map(|b| String::from_utf8_lossy(b).trim_end().to_string())
            .filter(|t| !t.is_empty())
            .collect();
        if !res.status.success() {
            let output = if output.is_empty() { "(no output)".to_string() } else { output.join("\n") };
            let log = format!("{shown}\n{}\n{output}", res.status);
            return Err(CompileError::Failed { compiler: "cc", kernel: name.to_string(), log });
        }
        if !output.is_empty() {
            tracing::debug!(kernel = name, log = %output.join("\n"), "cc diagnostics");
        }
        Ok(())
    }
}

/// A loaded host kernel: `int symbol(const struct jc_args*, int chan)`.
pub struct HostKernel {
    entry: unsafe extern "C" fn(*const Args, i32) -> i32,
    // Keeps the code mapped while `entry` can be called.
    _lib: libloading::Library,
}

impl std::fmt::Debug for HostKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HostKernel")
    }
}

impl HostKernel {
    pub fn load(path: &Path, symbol: &str) -> Result<Self, CompileError> {
        let load_err = |reason: String| CompileError::Load { kernel: symbol.to_string(), reason };
        // SAFETY: the object is one this crate compiled from generated C; it has no
        // initializers with side effects.
        let lib =
            unsafe { libloading::Library::new(path) }.map_err(|e| load_err(format!("{}: {e}", path.display())))?;
        // SAFETY: the generated entry point has exactly this signature (kernel.c).
        let entry = unsafe { lib.get::<unsafe extern "C" fn(*const Args, i32) -> i32>(symbol.as_bytes()) }
            .map_err(|e| load_err(format!("{}: {e}", path.display())))?;
        Ok(HostKernel { entry: *entry, _lib: lib })
    }

    /// Runs CTA `chan` to completion on the calling thread; returns a `JC_*` status code.
    ///
    /// # Safety
    /// `args` must describe live buffers and connectors laid out as the ABI says, and no
    /// other thread may run the same channel of the same communicator concurrently.
    #[inline]
    pub unsafe fn run(&self, args: *const Args, chan: i32) -> i32 {
        unsafe { (self.entry)(args, chan) }
    }
}
