//! Finding libnvrtc. In order:
//! 1. `JITCCL_NVRTC_PATH`: a library file or a folder searched as below; an explicit choice,
//!    so nothing else is tried when it is unusable.
//! 2. The loader path (LD_LIBRARY_PATH, rpath, the ldconfig cache), by bare name.
//! 3. CUDA toolkits: `$CUDA_HOME`, `$CUDA_PATH`, `/usr/local/cuda`, then `/usr/local/cuda-*`,
//!    newest version first.
//! 4. The project-local wheel install of `scripts/setup-nvrtc.sh` (`.deps/nvrtc`).
//! 5. Python's site-packages (a virtualenv, conda, the user's and the system's), where the
//!    NVIDIA wheels put the library under `nvidia/*/lib`.
//!
//! In each folder the names tried are [`LIB_NAMES`] (CUDA 13 first), in the folder itself
//! and its `lib64`, `lib` and `nvidia/*/lib`. The first library that loads and is NVRTC 12
//! or newer is used; when none is, the error lists every place and name looked for and why
//! each library found was refused.

use std::fmt;
use std::path::{Path, PathBuf};

use jitccl_settings::NVRTC_PATH;
use libloading::Library;

use super::api::file_of;
use super::Nvrtc;

/// Where `scripts/setup-nvrtc.sh` installs the NVRTC wheels (workspace path at build time).
const PROJECT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../.deps/nvrtc");
/// Library names, newest CUDA major first; the unversioned one is a toolkit's development link.
pub(super) const LIB_NAMES: [&str; 3] = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];
/// Sub-folders of a searched folder: itself, a toolkit's; `nvidia/*/lib` (wheels) is added.
const LIB_SUBDIRS: [&str; 3] = ["", "lib64", "lib"];

/// Somewhere to look for NVRTC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Place {
    /// The dynamic loader's own search (bare names).
    LoaderPath,
    /// A folder, searched with its sub-folders.
    Dir(PathBuf),
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::LoaderPath => f.write_str("the loader path (LD_LIBRARY_PATH, ldconfig)"),
            Place::Dir(d) => write!(f, "{}", d.display()),
        }
    }
}

/// The places searched when `JITCCL_NVRTC_PATH` is not set, in order.
pub(super) fn default_places() -> Vec<Place> {
    let mut dirs: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .collect();
    dirs.push("/usr/local/cuda".into());
    dirs.extend(versioned_toolkits(Path::new("/usr/local")));
    dirs.push(PROJECT_DIR.into());
    dirs.extend(site_packages());
    let mut places = vec![Place::LoaderPath];
    for d in dirs {
        let place = Place::Dir(d);
        if !places.contains(&place) {
            places.push(place);
        }
    }
    places
}

/// `<root>/cuda-X.Y` folders, newest version first.
fn versioned_toolkits(root: &Path) -> Vec<PathBuf> {
    let mut found: Vec<((u32, u32), PathBuf)> = read_dir_names(root)
        .filter_map(|(name, path)| {
            let (major, minor) = name.strip_prefix("cuda-")?.split_once('.')?;
            Some(((major.parse().ok()?, minor.parse().ok()?), path))
        })
        .collect();
    found.sort_by_key(|(version, _)| std::cmp::Reverse(*version));
    found.into_iter().map(|(_, p)| p).collect()
}

/// Python site-packages folders of the active environment, the user and the system.
fn site_packages() -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> =
        ["VIRTUAL_ENV", "CONDA_PREFIX"].iter().filter_map(std::env::var_os).map(PathBuf::from).collect();
    prefixes.extend(dirs::home_dir().map(|h| h.join(".local")));
    prefixes.extend(["/usr/local".into(), "/usr".into()]);
    let mut found = Vec::new();
    for lib in prefixes.iter().flat_map(|p| [p.join("lib"), p.join("lib64")]) {
        let mut pythons: Vec<PathBuf> =
            read_dir_names(&lib).filter(|(n, _)| n.starts_with("python3")).map(|(_, p)| p).collect();
        pythons.sort();
        for py in pythons {
            found.extend(["site-packages", "dist-packages"].map(|s| py.join(s)).into_iter().filter(|d| d.is_dir()));
        }
    }
    found
}

/// (file name, path) of the entries of `dir`; nothing when it cannot be read.
fn read_dir_names(dir: &Path) -> impl Iterator<Item = (String, PathBuf)> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
}

/// The libnvrtc files in `dir` and its library sub-folders, in the order they are tried.
fn candidates(dir: &Path) -> Vec<PathBuf> {
    let mut subdirs: Vec<PathBuf> = LIB_SUBDIRS.iter().map(|s| dir.join(s)).collect();
    let mut wheels: Vec<PathBuf> = read_dir_names(&dir.join("nvidia")).map(|(_, p)| p.join("lib")).collect();
    wheels.sort();
    subdirs.extend(wheels);
    subdirs.iter().flat_map(|d| LIB_NAMES.iter().map(move |n| d.join(n))).filter(|f| f.is_file()).collect()
}

/// What was looked for in `dir`, for errors.
fn searched(dir: &Path) -> String {
    format!("no libnvrtc ({}) in {} or its sub-folders lib64, lib, nvidia/*/lib", LIB_NAMES.join(", "), dir.display())
}

/// The first usable NVRTC in `path`: the file itself, or one found in the folder.
pub(super) fn open_in(path: &Path) -> Result<Nvrtc, String> {
    let files = if path.is_file() {
        vec![path.to_owned()]
    } else if path.is_dir() {
        candidates(path)
    } else {
        return Err(format!("{} does not exist", path.display()));
    };
    if files.is_empty() {
        return Err(searched(path));
    }
    first_usable(&files).map_err(|refused| refused.join("; "))
}

/// The first of `files` that opens as NVRTC, else why each was refused.
fn first_usable(files: &[PathBuf]) -> Result<Nvrtc, Vec<String>> {
    let mut refused = Vec::new();
    for file in files {
        tracing::debug!(file = %file.display(), "nvrtc: trying");
        // SAFETY: loading NVRTC runs no initializers with preconditions on our side.
        let opened =
            unsafe { Library::new(file) }.map_err(|e| format!("cannot load {}: {e}", file.display())).and_then(|lib| {
                let location = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_owned());
                Nvrtc::from_library(lib, location.display().to_string())
            });
        match opened {
            Ok(nv) => return Ok(nv),
            Err(e) => refused.push(e),
        }
    }
    Err(refused)
}

/// Libraries the loader finds by bare name, each tried in turn.
fn open_from_loader() -> Result<Nvrtc, Vec<String>> {
    let mut refused = Vec::new();
    for name in LIB_NAMES {
        // SAFETY: as in `first_usable`.
        let Ok(lib) = (unsafe { Library::new(name) }) else { continue };
        let location = file_of(&lib, "nvrtcVersion").map_or_else(|| name.to_owned(), |p| p.display().to_string());
        match Nvrtc::from_library(lib, location) {
            Ok(nv) => return Ok(nv),
            Err(e) => refused.push(e),
        }
    }
    Err(refused)
}

/// The first usable NVRTC among `places`, or an error naming every place, the names looked
/// for, and why each library found was refused.
pub(super) fn open_first(places: &[Place]) -> Result<Nvrtc, String> {
    let mut refused = Vec::new();
    for place in places {
        tracing::debug!(%place, "nvrtc: searching");
        let found = match place {
            Place::LoaderPath => open_from_loader(),
            Place::Dir(dir) => first_usable(&candidates(dir)),
        };
        match found {
            Ok(nv) => return Ok(nv),
            Err(why) => refused.extend(why),
        }
    }
    let looked: Vec<String> = places.iter().map(|p| p.to_string()).collect();
    let mut msg = format!("no usable NVRTC 12 or 13: looked for {} in {}", LIB_NAMES.join(", "), looked.join(", "));
    if !refused.is_empty() {
        msg += &format!("; refused: {}", refused.join("; "));
    }
    msg += &format!(
        ". Install the CUDA toolkit or the nvidia-cuda-nvrtc wheel (scripts/setup-nvrtc.sh), \
         or set {} to libnvrtc.so.* or its folder",
        NVRTC_PATH.name
    );
    Err(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::host::host_cc;
    use crate::compile::CompileError;
    use crate::spec::{CudaArch, CudaOutput};

    /// Writes a stand-in libnvrtc at `dir/rel`: every function jitccl binds, reporting
    /// `version` and `archs`, failing every program call with NVRTC_ERROR_FAKE.
    fn fake_nvrtc(dir: &Path, rel: &str, version: (i32, i32), archs: &[u32]) -> PathBuf {
        let archs: Vec<String> = archs.iter().map(u32::to_string).collect();
        let source = format!(
            r#"#include <stddef.h>
#define API __attribute__((visibility("default")))
static const int archs[] = {{{archs}}};
static const int n = sizeof archs / sizeof archs[0];
API int nvrtcVersion(int* a, int* b) {{ *a = {major}; *b = {minor}; return 0; }}
API const char* nvrtcGetErrorString(int s) {{ return "NVRTC_ERROR_FAKE"; }}
API int nvrtcCreateProgram(void** p, const char* s, const char* m, int k, const char* const* h,
                           const char* const* i) {{ return 3; }}
API int nvrtcCompileProgram(void* p, int k, const char* const* o) {{ return 3; }}
API int nvrtcDestroyProgram(void** p) {{ return 0; }}
API int nvrtcGetNumSupportedArchs(int* k) {{ *k = n; return 0; }}
API int nvrtcGetSupportedArchs(int* a) {{ for (int i = 0; i < n; i++) a[i] = archs[i]; return 0; }}
API int nvrtcGetProgramLogSize(void* p, size_t* k) {{ return 3; }}
API int nvrtcGetProgramLog(void* p, char* b) {{ return 3; }}
API int nvrtcGetPTXSize(void* p, size_t* k) {{ return 3; }}
API int nvrtcGetPTX(void* p, char* b) {{ return 3; }}
API int nvrtcGetCUBINSize(void* p, size_t* k) {{ return 3; }}
API int nvrtcGetCUBIN(void* p, char* b) {{ return 3; }}
"#,
            archs = archs.join(", "),
            major = version.0,
            minor = version.1,
        );
        let file = dir.join(rel);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let bytes = host_cc().unwrap().compile(&source, "fake_nvrtc", dir).unwrap();
        std::fs::write(&file, bytes).unwrap();
        file
    }

    #[test]
    fn nothing_found_names_every_place_and_name() {
        let empty = tempfile::tempdir().unwrap();
        let missing = PathBuf::from("/nonexistent/jitccl-nvrtc");
        let err = open_first(&[Place::Dir(empty.path().into()), Place::Dir(missing.clone())]).unwrap_err();
        for part in [&empty.path().display().to_string(), &missing.display().to_string(), NVRTC_PATH.name] {
            assert!(err.contains(part), "{part} missing from: {err}");
        }
        for name in LIB_NAMES {
            assert!(err.contains(name), "{name} missing from: {err}");
        }
        assert!(!err.contains("refused"), "nothing was found to refuse: {err}");
    }

    #[test]
    fn a_file_that_is_not_a_library_is_refused_by_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("lib64/libnvrtc.so.12");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "not a library").unwrap();
        let err = open_in(dir.path()).unwrap_err();
        assert!(err.contains(&format!("cannot load {}", file.display())), "{err}");
        let err = open_first(&[Place::Dir(dir.path().into())]).unwrap_err();
        assert!(err.contains("refused: cannot load"), "{err}");
    }

    #[test]
    fn an_old_nvrtc_is_refused_and_the_next_place_used() {
        let (old, new) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        fake_nvrtc(old.path(), "nvidia/cuda_nvrtc/lib/libnvrtc.so.12", (11, 8), &[70, 80]);
        let err = open_in(old.path()).unwrap_err();
        assert!(err.contains("is NVRTC 11.8; jitccl needs NVRTC 12 or 13"), "{err}");

        // In one folder the CUDA 13 wheel's library comes before the CUDA 12 one.
        fake_nvrtc(new.path(), "nvidia/cuda_nvrtc/lib/libnvrtc.so.12", (12, 9), &[70, 80, 90]);
        let lib13 = fake_nvrtc(new.path(), "nvidia/cu13/lib/libnvrtc.so.13", (13, 0), &[75, 80, 90, 100]);
        let nv = open_first(&[Place::Dir(old.path().into()), Place::Dir(new.path().into())]).unwrap();
        assert_eq!(nv.version(), (13, 0));
        assert_eq!(Path::new(nv.location()), std::fs::canonicalize(lib13).unwrap());
        assert!(nv.supports(CudaArch(80)) && !nv.supports(CudaArch(70)));
    }

    #[test]
    fn an_unsupported_arch_and_a_failing_call_are_clear_failures() {
        let dir = tempfile::tempdir().unwrap();
        fake_nvrtc(dir.path(), "libnvrtc.so.13", (13, 0), &[75, 80, 90]);
        let nv = open_in(dir.path()).unwrap();
        match nv.compile("", "k", CudaArch(70), CudaOutput::Cubin) {
            Err(CompileError::Failed { log, .. }) => {
                assert_eq!(log, "NVRTC 13.0 cannot compile for sm_70; it supports sm_75, sm_80, sm_90")
            }
            other => panic!("expected Failed, got {other:?}"),
        }
        match nv.compile("", "k", CudaArch(80), CudaOutput::Ptx) {
            Err(CompileError::Failed { log, .. }) => {
                assert_eq!(log, "nvrtcCreateProgram: NVRTC_ERROR_FAKE")
            }
            other => panic!("expected Failed, got {other:?}"),
        }
    }

    #[test]
    fn toolkits_newest_first() {
        let root = tempfile::tempdir().unwrap();
        for d in ["cuda", "cuda-12.9", "cuda-13.0", "cuda-12.10", "cuda-x", "other"] {
            std::fs::create_dir(root.path().join(d)).unwrap();
        }
        let names: Vec<String> = versioned_toolkits(root.path())
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["cuda-13.0", "cuda-12.10", "cuda-12.9"]);
    }

    #[test]
    fn default_places_start_with_the_loader_and_include_the_project_install() {
        let places = default_places();
        assert_eq!(places[0], Place::LoaderPath);
        assert!(places.contains(&Place::Dir("/usr/local/cuda".into())));
        assert!(places.contains(&Place::Dir(PROJECT_DIR.into())));
    }
}
