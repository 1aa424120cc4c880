//! The kernel generator's front door: spec + target -> loaded kernel, compiled lazily and
//! cached in memory (per process) and on disk (across processes).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rustc_hash::FxHashMap;

use crate::cache::{DiskCache, Lookup};
use crate::compile::host::{host_cc, HostKernel};
use crate::compile::nvrtc::{nvrtc, CudaOutput};
use crate::compile::CompileError;
use crate::render::render;
use crate::spec::{CudaArch, KernelSpec, Target};

/// Where a kernel came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provenance {
    /// Already loaded in this process.
    Memory,
    /// Compiled earlier (maybe by another process) and found in the disk cache.
    Disk,
    /// Compiled now.
    Compiled,
}

/// A compiled CUDA module image.
#[derive(Debug)]
pub struct CudaImage {
    pub arch: CudaArch,
    pub output: CudaOutput,
    pub bytes: Vec<u8>,
}

enum Artifact {
    Host(Arc<HostKernel>),
    Cuda(Arc<CudaImage>),
}

impl Clone for Artifact {
    fn clone(&self) -> Self {
        match self {
            Artifact::Host(k) => Artifact::Host(k.clone()),
            Artifact::Cuda(i) => Artifact::Cuda(i.clone()),
        }
    }
}

type Slot = Arc<Mutex<Option<Artifact>>>;

/// Compiles and caches kernels. Cheap to share (`Arc`); thread-safe; concurrent requests
/// for one kernel compile it once.
pub struct Generator {
    disk: Option<DiskCache>,
    loaded: Mutex<FxHashMap<(KernelSpec, Target, CudaOutput), Slot>>,
}

impl Generator {
    /// A generator with the given disk cache (`None`: memory only).
    pub fn new(disk: Option<DiskCache>) -> Self {
        if let Some(d) = &disk {
            tracing::debug!(dir = %d.dir().display(), "kernel disk cache");
            d.remove_stale_builds();
        }
        Generator { disk, loaded: Mutex::new(FxHashMap::default()) }
    }

    /// The process-wide generator, with the disk cache from the environment.
    pub fn global() -> &'static Generator {
        static G: std::sync::OnceLock<Generator> = std::sync::OnceLock::new();
        G.get_or_init(|| Generator::new(DiskCache::from_env()))
    }

    pub fn cache_dir(&self) -> Option<PathBuf> {
        self.disk.as_ref().map(|d| d.dir().to_path_buf())
    }

    /// The host kernel for `spec`, compiled if needed.
    pub fn host_kernel(&self, spec: &KernelSpec) -> Result<(Arc<HostKernel>, Provenance), CompileError> {
        match self.get(spec, Target::Host, CudaOutput::Cubin)? {
            (Artifact::Host(k), p) => Ok((k, p)),
            (Artifact::Cuda(_), _) => unreachable!("host key holds a host kernel"),
        }
    }

    /// The CUDA image (CUBIN or PTX) of `spec` for `arch`.
    pub fn cuda_image(
        &self,
        spec: &KernelSpec,
        arch: CudaArch,
        output: CudaOutput,
    ) -> Result<(Arc<CudaImage>, Provenance), CompileError> {
        match self.get(spec, Target::Cuda(arch), output)? {
            (Artifact::Cuda(i), p) => Ok((i, p)),
            (Artifact::Host(_), _) => unreachable!("cuda key holds a cuda image"),
        }
    }

    fn get(&self, spec: &KernelSpec, target: Target, output: CudaOutput) -> Result<(Artifact, Provenance), CompileError> {
        // A typed key and a fast hash: this lookup is on every launch's path.
        let key = (*spec, target, output);
        let slot = self.loaded.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_default().clone();
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = slot.as_ref() {
            return Ok((a.clone(), Provenance::Memory));
        }
        let (artifact, prov) = self.build(spec, target, output)?;
        *slot = Some(artifact.clone());
        Ok((artifact, prov))
    }

    fn build(&self, spec: &KernelSpec, target: Target, output: CudaOutput) -> Result<(Artifact, Provenance), CompileError> {
        spec.validate_for(target)?;
        let source = render(spec, target)?;
        let name = spec.to_string();
        let t0 = Instant::now();
        match target {
            Target::Host => {
                let cc = host_cc()?;
                let (path, _tmp, prov) = match &self.disk {
                    Some(d) => {
                        let path = d.path(&source, "host", &cc.id(), "so");
                        let dir = path.parent().expect("cache paths have a parent");
                        let (_, prov) = cached(d, &path, || cc.compile(&source, &name, dir))?;
                        (path, None, prov)
                    }
                    None => {
                        let t = tempfile::tempdir().map_err(|e| CompileError::io("creating a temporary folder", e))?;
                        let path = t.path().join("kernel.so");
                        let bytes = cc.compile(&source, &name, t.path())?;
                        std::fs::write(&path, bytes).map_err(|e| CompileError::io(format!("writing {}", path.display()), e))?;
                        (path, Some(t), Provenance::Compiled)
                    }
                };
                let k = HostKernel::load(&path, &spec.symbol())?;
                tracing::debug!(kernel = %name, ?prov, ms = t0.elapsed().as_secs_f64() * 1e3, "host kernel ready");
                Ok((Artifact::Host(Arc::new(k)), prov))
            }
            Target::Cuda(arch) => {
                let nv = nvrtc()?;
                let ext = match output {
                    CudaOutput::Cubin => "cubin",
                    CudaOutput::Ptx => "ptx",
                };
                let compile = || nv.compile(&source, &name, arch, output);
                let (bytes, prov) = match &self.disk {
                    Some(d) => cached(d, &d.path(&source, &target.to_string(), &nv.id(), ext), compile)?,
                    None => (compile()?, Provenance::Compiled),
                };
                tracing::debug!(kernel = %name, %arch, ?prov, ms = t0.elapsed().as_secs_f64() * 1e3, "cuda kernel ready");
                Ok((Artifact::Cuda(Arc::new(CudaImage { arch, output, bytes })), prov))
            }
        }
    }
}

/// The checked entry at `path`, else `compile`'s output, stored there. A damaged entry is
/// compiled again, with a warning (its path and what is wrong).
fn cached(
    d: &DiskCache,
    path: &Path,
    compile: impl FnOnce() -> Result<Vec<u8>, CompileError>,
) -> Result<(Vec<u8>, Provenance), CompileError> {
    match d.lookup(path) {
        Lookup::Hit(bytes) => return Ok((bytes, Provenance::Disk)),
        Lookup::Bad(why) => tracing::warn!("kernel cache entry {} is damaged ({why}); recompiling it", path.display()),
        Lookup::Missing => {}
    }
    let bytes = compile()?;
    d.store(path, &bytes).map_err(|e| CompileError::io(format!("storing {}", path.display()), e))?;
    Ok((bytes, Provenance::Compiled))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Algorithm, Collective, CustomOp, DataType, Protocol, RedOp};

    #[test]
    fn memory_then_disk_then_recompile_on_change() {
        let dir = tempfile::tempdir().unwrap();
        let spec: KernelSpec = "all_reduce.ring.ll.i32.max".parse().unwrap();
        let g = Generator::new(Some(DiskCache::new(dir.path())));
        assert_eq!(g.host_kernel(&spec).unwrap().1, Provenance::Compiled);
        assert_eq!(g.host_kernel(&spec).unwrap().1, Provenance::Memory);
        // A new generator (as in another process) finds it on disk.
        let g2 = Generator::new(Some(DiskCache::new(dir.path())));
        assert_eq!(g2.host_kernel(&spec).unwrap().1, Provenance::Disk);

        // A custom op with the same name but another body is another kernel.
        static A: CustomOp =
            CustomOp { name: "pick", body: "return a;", identity: "0", commutative: false, dtypes: &[DataType::I32] };
        static B: CustomOp =
            CustomOp { name: "pick", body: "return b;", identity: "0", commutative: false, dtypes: &[DataType::I32] };
        let with = |op: &'static CustomOp| {
            KernelSpec::new(Collective::Reduce, Algorithm::Ring, Protocol::LL, DataType::I32, Some(RedOp::Custom(op)))
                .unwrap()
        };
        assert_eq!(g2.host_kernel(&with(&A)).unwrap().1, Provenance::Compiled);
        assert_eq!(g2.host_kernel(&with(&B)).unwrap().1, Provenance::Compiled);
        assert_eq!(g2.host_kernel(&with(&A)).unwrap().1, Provenance::Memory);
    }

    #[test]
    fn compile_errors_carry_the_log() {
        static BAD: CustomOp =
            CustomOp { name: "bad", body: "return a +* b;", identity: "0", commutative: true, dtypes: &[DataType::F32] };
        let spec =
            KernelSpec::new(Collective::AllReduce, Algorithm::Ring, Protocol::Simple, DataType::F32, Some(RedOp::Custom(&BAD)))
                .unwrap();
        match Generator::new(None).host_kernel(&spec) {
            Err(CompileError::Failed { compiler: "cc", log, .. }) => assert!(log.contains("error"), "{log}"),
            other => panic!("expected a compile failure, got {other:?}"),
        }
    }
}
