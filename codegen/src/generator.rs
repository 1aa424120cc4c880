//! The kernel generator's front door: spec + target -> loaded kernel, compiled lazily and
//! cached in memory (per process) and on disk (across processes).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rustc_hash::FxHashMap;

use crate::cache::{DiskCache, Lookup};
use crate::compile::host::{host_cc, HostKernel};
use crate::compile::nvrtc::nvrtc;
use crate::compile::CompileError;
use crate::render::render;
use crate::spec::{CudaArch, CudaOutput, KernelSpec, Target};

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

/// A compiled kernel of either target, as [`Generator::get`] returns it.
#[derive(Clone)]
pub enum Artifact {
    Host(Arc<HostKernel>),
    Cuda(Arc<CudaImage>),
}

impl Artifact {
    /// The target this artifact was compiled for.
    pub fn target(&self) -> Target {
        match self {
            Artifact::Host(_) => Target::Host,
            Artifact::Cuda(i) => Target::Cuda { arch: i.arch, output: i.output },
        }
    }

    /// The host kernel, or an error naming the target this artifact is for.
    pub fn into_host(self) -> Result<Arc<HostKernel>, CompileError> {
        match self {
            Artifact::Host(k) => Ok(k),
            other => Err(CompileError::WrongArtifact { target: other.target(), wanted: "host kernel" }),
        }
    }

    /// The CUDA image, or an error naming the target this artifact is for.
    pub fn into_cuda(self) -> Result<Arc<CudaImage>, CompileError> {
        match self {
            Artifact::Cuda(i) => Ok(i),
            other => Err(CompileError::WrongArtifact { target: other.target(), wanted: "CUDA image" }),
        }
    }
}

type Slot = Arc<Mutex<Option<Artifact>>>;

/// Compiles and caches kernels. Cheap to share (`Arc`); thread-safe; concurrent requests
/// for one kernel compile it once.
pub struct Generator {
    disk: Option<DiskCache>,
    loaded: Mutex<FxHashMap<(KernelSpec, Target), Slot>>,
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

    /// Checks that `spec` compiles for `target`, building nothing meant to run: the host
    /// compiler's front end ([`HostCompiler::check`](crate::compile::host::HostCompiler::check))
    /// or NVRTC's fastest settings ([`Nvrtc::check`](crate::compile::nvrtc::Nvrtc::check)),
    /// whose image must hold the kernel's entry. A check that passes is remembered in the
    /// disk cache (an empty marker, keyed as a kernel is: source, target, compiler and
    /// flags), so that checking again what did not change is a lookup, as with a build
    /// cache: [`Provenance::Disk`] then, else [`Provenance::Compiled`].
    pub fn check(&self, spec: &KernelSpec, target: Target) -> Result<Provenance, CompileError> {
        let source = render(spec, target)?;
        let name = spec.to_string();
        let marker = |compiler: &str| {
            self.disk.as_ref().map(|d| d.path(&source, &format!("{target}:check"), compiler, "checked"))
        };
        match target {
            Target::Host => {
                let cc = host_cc()?;
                remembered(marker(&cc.id()), || cc.check(&source, &name))
            }
            Target::Cuda { arch, output } => {
                let nv = nvrtc()?;
                remembered(marker(&nv.id()), || {
                    let image = nv.check(&source, &name, arch, output)?;
                    let entry = format!(".entry {}(", spec.symbol());
                    let problem = match output {
                        CudaOutput::Cubin if !image.starts_with(b"\x7fELF") => "the CUBIN is not an ELF image",
                        CudaOutput::Ptx if !String::from_utf8_lossy(&image).contains(&entry) => "the PTX has no entry",
                        _ => return Ok(()),
                    };
                    Err(CompileError::Failed { compiler: "nvrtc", kernel: name.clone(), log: problem.to_owned() })
                })
            }
        }
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
        let (artifact, prov) = self.get(spec, Target::Host)?;
        Ok((artifact.into_host()?, prov))
    }

    /// The CUDA image (CUBIN or PTX) of `spec` for `arch`.
    pub fn cuda_image(
        &self, spec: &KernelSpec, arch: CudaArch, output: CudaOutput,
    ) -> Result<(Arc<CudaImage>, Provenance), CompileError> {
        let (artifact, prov) = self.get(spec, Target::Cuda { arch, output })?;
        Ok((artifact.into_cuda()?, prov))
    }

    /// The artifact of `spec` for `target`, compiled if needed: from memory, else from the
    /// disk cache, else compiled now.
    pub fn get(&self, spec: &KernelSpec, target: Target) -> Result<(Artifact, Provenance), CompileError> {
        // A typed key and a fast hash: this lookup is on every launch's path.
        let key = (*spec, target);
        let slot = self.loaded.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_default().clone();
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = slot.as_ref() {
            return Ok((a.clone(), Provenance::Memory));
        }
        let source = render(spec, target)?;
        let (artifact, prov) = match target {
            Target::Host => self.build_host(spec, &source)?,
            Target::Cuda { arch, output } => self.build_cuda(spec, &source, arch, output)?,
        };
        *slot = Some(artifact.clone());
        Ok((artifact, prov))
    }

    fn build_host(&self, spec: &KernelSpec, source: &str) -> Result<(Artifact, Provenance), CompileError> {
        let name = spec.to_string();
        let t0 = Instant::now();
        let cc = host_cc()?;
        let (path, _tmp, prov) = match &self.disk {
            Some(d) => {
                let path = d.path(source, &Target::Host.to_string(), &cc.id(), "so");
                let dir = path.parent().expect("cache paths have a parent");
                let (_, prov) = cached(d, &path, || cc.compile(source, &name, dir))?;
                (path, None, prov)
            }
            None => {
                let t = tempfile::tempdir().map_err(|e| CompileError::io("creating a temporary folder", e))?;
                let path = t.path().join("kernel.so");
                let bytes = cc.compile(source, &name, t.path())?;
                std::fs::write(&path, bytes).map_err(|e| CompileError::io(format!("writing {}", path.display()), e))?;
                (path, Some(t), Provenance::Compiled)
            }
        };
        let k = HostKernel::load(&path, &spec.symbol())?;
        tracing::debug!(kernel = %name, ?prov, ms = t0.elapsed().as_secs_f64() * 1e3, "host kernel ready");
        Ok((Artifact::Host(Arc::new(k)), prov))
    }

    fn build_cuda(
        &self, spec: &KernelSpec, source: &str, arch: CudaArch, output: CudaOutput,
    ) -> Result<(Artifact, Provenance), CompileError> {
        let name = spec.to_string();
        let t0 = Instant::now();
        let nv = nvrtc()?;
        let compile = || nv.compile(source, &name, arch, output);
        let (bytes, prov) = match &self.disk {
            Some(d) => {
                let target = Target::Cuda { arch, output };
                cached(d, &d.path(source, &target.to_string(), &nv.id(), output.ext()), compile)?
            }
            None => (compile()?, Provenance::Compiled),
        };
        tracing::debug!(kernel = %name, %arch, ?prov, ms = t0.elapsed().as_secs_f64() * 1e3, "cuda kernel ready");
        Ok((Artifact::Cuda(Arc::new(CudaImage { arch, output, bytes })), prov))
    }
}

/// [`Provenance::Disk`] where `marker` exists, else `check`'s outcome, a pass leaving the
/// marker behind.
fn remembered(
    marker: Option<PathBuf>, check: impl FnOnce() -> Result<(), CompileError>,
) -> Result<Provenance, CompileError> {
    if marker.as_ref().is_some_and(|m| m.is_file()) {
        return Ok(Provenance::Disk);
    }
    check()?;
    if let Some(m) = marker {
        // A marker that cannot be written costs only a check next time.
        let _ = m.parent().map(std::fs::create_dir_all);
        let _ = std::fs::write(&m, b"");
    }
    Ok(Provenance::Compiled)
}

/// The checked entry at `path`, else `compile`'s output, stored there. A damaged entry is
/// compiled again, with a warning (its path and what is wrong). While one process compiles
/// an entry, others that miss it wait for it (the entry's lock) instead of compiling too.
fn cached(
    d: &DiskCache, path: &Path, compile: impl FnOnce() -> Result<Vec<u8>, CompileError>,
) -> Result<(Vec<u8>, Provenance), CompileError> {
    if let Lookup::Hit(bytes) = d.lookup(path) {
        return Ok((bytes, Provenance::Disk));
    }
    let _lock = d.lock(path);
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
    use crate::spec::{Algorithm, BuiltinOp, Collective, CustomOp, DataType, Protocol, RedOp, Wire, WireCodec};

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

    /// Two wire codecs of one name but other code: one spec name, two kernels, in memory and
    /// on disk.
    #[test]
    fn wire_codecs_are_kernels_by_their_code() {
        static HALF: WireCodec = WireCodec {
            name: "twin",
            block: None,
            scale: "",
            encode: "return (jc_u8)(a * 0.5f);",
            decode: "return a * 2.0f;",
        };
        static THIRD: WireCodec = WireCodec {
            name: "twin",
            block: None,
            scale: "",
            encode: "return (jc_u8)(a / 3.0f);",
            decode: "return a * 3.0f;",
        };
        let dir = tempfile::tempdir().unwrap();
        let g = Generator::new(Some(DiskCache::new(dir.path())));
        let sum = Some(RedOp::Builtin(BuiltinOp::Sum));
        let with = |c: &'static WireCodec| {
            KernelSpec::new(Collective::AllReduce, Algorithm::Ring, Protocol::Simple, DataType::F32, sum)
                .and_then(|s| s.with_wire(Wire::Custom(c)))
                .unwrap()
        };
        assert_eq!(with(&HALF).to_string(), "all_reduce.ring.simple.f32.sum.wcustom:twin");
        assert_eq!(with(&HALF).to_string(), with(&THIRD).to_string());
        assert_ne!(with(&HALF), with(&THIRD));
        assert_eq!(g.host_kernel(&with(&HALF)).unwrap().1, Provenance::Compiled);
        assert_eq!(g.host_kernel(&with(&THIRD)).unwrap().1, Provenance::Compiled);
        assert_eq!(g.host_kernel(&with(&HALF)).unwrap().1, Provenance::Memory);
        let g2 = Generator::new(Some(DiskCache::new(dir.path())));
        assert_eq!(g2.host_kernel(&with(&THIRD)).unwrap().1, Provenance::Disk);
        // A block the kernels do not take (the macro refuses it; a hand-made codec is
        // refused here).
        static ODD: WireCodec = WireCodec {
            name: "odd",
            block: Some(100),
            scale: "return a;",
            encode: "return 0;",
            decode: "return 0.0f;",
        };
        let e = with(&HALF).with_wire(Wire::Custom(&ODD)).unwrap_err();
        assert!(e.0.contains("the wire codec 'odd' has a block of 100 elements"), "{e}");
    }

    #[test]
    fn a_process_that_misses_an_entry_being_compiled_waits_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = DiskCache::new(dir.path());
        let path = d.path("src", "host", "cc", "so");
        // Both miss it at once; one compiles (slowly), the other waits and reads its entry.
        let (start, compiles) = (std::sync::Barrier::new(2), std::sync::atomic::AtomicUsize::new(0));
        let compile = || {
            compiles.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(300));
            Ok(b"object".to_vec())
        };
        let run = || {
            start.wait();
            cached(&d, &path, compile).unwrap()
        };
        let provs = std::thread::scope(|s| {
            let other = s.spawn(run);
            [run(), other.join().unwrap()]
        });
        assert_eq!(compiles.into_inner(), 1, "compiled once");
        let mut provs: Vec<_> = provs.iter().map(|(bytes, p)| (bytes.as_slice(), *p)).collect();
        provs.sort_by_key(|(_, p)| *p == Provenance::Disk);
        assert_eq!(provs, [(&b"object"[..], Provenance::Compiled), (&b"object"[..], Provenance::Disk)]);
    }

    #[test]
    fn typed_accessors_refuse_the_other_target() {
        let spec: KernelSpec = "all_gather.ring.ll.u8".parse().unwrap();
        let (artifact, _) = Generator::new(None).get(&spec, Target::Host).unwrap();
        assert_eq!(artifact.target(), Target::Host);
        match artifact.clone().into_cuda() {
            Err(e @ CompileError::WrongArtifact { target: Target::Host, .. }) => {
                assert!(e.to_string().contains("compiled for host is not a CUDA image"), "{e}")
            }
            other => panic!("expected WrongArtifact, got {:?}", other.map(|i| i.arch)),
        }
        assert!(artifact.into_host().is_ok());
    }

    #[test]
    fn each_target_and_output_is_its_own_entry() {
        if let Err(e) = crate::compile::nvrtc::nvrtc() {
            assert!(!jitccl_settings::REQUIRE_NVRTC.flag_or_warn(), "{e}");
            println!("skipping: {e}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let spec: KernelSpec = "all_gather.ring.ll.u8".parse().unwrap();
        let targets =
            [Target::Host, Target::cubin(CudaArch(80)), Target::cubin(CudaArch(90)), Target::ptx(CudaArch(90))];
        let g = Generator::new(Some(DiskCache::new(dir.path())));
        // Every target compiles once, although they share the spec: no entry answers for another.
        for t in targets {
            let (a, prov) = g.get(&spec, t).unwrap();
            assert_eq!((a.target(), prov), (t, Provenance::Compiled), "{t}");
        }
        for t in targets {
            assert_eq!(g.get(&spec, t).unwrap().1, Provenance::Memory, "{t}");
        }
        let g2 = Generator::new(Some(DiskCache::new(dir.path())));
        for t in targets {
            assert_eq!(g2.get(&spec, t).unwrap().1, Provenance::Disk, "{t}");
        }
        let image = |arch, output| g.cuda_image(&spec, arch, output).unwrap().0;
        let (cubin80, cubin90) = (image(CudaArch(80), CudaOutput::Cubin), image(CudaArch(90), CudaOutput::Cubin));
        let ptx = image(CudaArch(90), CudaOutput::Ptx);
        assert!(cubin80.bytes.starts_with(b"\x7fELF") && cubin90.bytes.starts_with(b"\x7fELF"));
        assert_ne!(cubin80.bytes, cubin90.bytes);
        assert_eq!((ptx.arch, ptx.output), (CudaArch(90), CudaOutput::Ptx));
        assert!(String::from_utf8_lossy(&ptx.bytes).contains(".target sm_90"));
        // One disk entry per target: host .so, two CUBINs, one PTX.
        let mut files: Vec<String> = walk(dir.path())
            .into_iter()
            .filter_map(|p| p.extension().map(|e| e.to_string_lossy().into_owned()))
            .filter(|e| e != "sum" && e != "lock")
            .collect();
        files.sort();
        assert_eq!(files, ["cubin", "cubin", "ptx", "so"]);
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                found.extend(walk(&p));
            } else {
                found.push(p);
            }
        }
        found
    }

    #[test]
    fn compile_errors_carry_the_log() {
        static BAD: CustomOp = CustomOp {
            name: "bad",
            body: "return a +* b;",
            identity: "0",
            commutative: true,
            dtypes: &[DataType::F32],
        };
        let spec = KernelSpec::new(
            Collective::AllReduce,
            Algorithm::Ring,
            Protocol::Simple,
            DataType::F32,
            Some(RedOp::Custom(&BAD)),
        )
        .unwrap();
        match Generator::new(None).host_kernel(&spec) {
            Err(CompileError::Failed { compiler: "cc", log, .. }) => assert!(log.contains("error"), "{log}"),
            other => panic!("expected a compile failure, got {other:?}"),
        }
    }

    /// A kernel specialized for 3 ranks, called with 2: it ends at its entry with
    /// `JC_ERR_SPECIALIZED` recorded in its status and the rank halted, its output untouched.
    #[test]
    fn a_kernel_specialized_for_a_rank_count_refuses_another() {
        use crate::abi::{Args, Channel, Status, ERR_SPECIALIZED};
        let generator = Generator::new(None);
        for name in ["all_reduce.ring.simple.f32.sum@3", "all_reduce.direct.simple.f32.sum@3"] {
            let spec: KernelSpec = name.parse().unwrap();
            let (kernel, _) = generator.host_kernel(&spec).unwrap();
            let send = [1.0f32; 4];
            let mut recv = [7.0f32; 4];
            let mut status = [Status::default()];
            let mut channel = Channel::default();
            let (abort, failed) = (0i32, [0i32; 3]);
            // SAFETY: every field of Args is an integer, a float or a raw pointer: all zeros is
            // a valid value (null pointers), and the ones the entry reads are set below.
            let mut args: Args = unsafe { std::mem::zeroed() };
            args.sendbuff = send.as_ptr().cast();
            args.recvbuff = recv.as_mut_ptr().cast();
            args.count = 4;
            args.timeout_ns = 1_000_000_000;
            args.channels = &mut channel;
            args.status = status.as_mut_ptr();
            args.abort_flag = &abort;
            args.peer_failed = failed.as_ptr();
            args.nranks = 2;
            args.nchannels = 1;
            // SAFETY: the buffers, status and channel above live across the call.
            let code = unsafe { kernel.run(&args, 0) };
            assert_eq!((code, status[0].code), (ERR_SPECIALIZED, ERR_SPECIALIZED), "{spec}");
            assert_eq!((recv, channel.halted), ([7.0; 4], 1), "{spec}");
        }
    }
}
