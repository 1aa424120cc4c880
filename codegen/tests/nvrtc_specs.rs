//! Every valid kernel spec compiles with NVRTC for the CUDA target: PTX for sm_90 for every
//! spec, and CUBIN (PTX assembled by NVRTC's ptxas) for a sample of them, for sm_90 and for
//! sm_80 (fp8 specs excluded there: they need sm_89, and the spec rules must reject them).
//!
//! What the sample must reach: PTX generation checks all the C++, but the inline PTX of
//! the protocol and prelude code and of the datatype conversions is checked only when it
//! is assembled. So the CUBIN sample holds, per arch, every (collective, algorithm,
//! protocol), every (datatype, op) and every (protocol, datatype) at least once: every
//! inline-PTX site with every operand type it is given. Assembling every spec for sm_90
//! as well would add ptxas's time to every spec and reach no inline-PTX site that the
//! sample does not.
//!
//! Both go through [`Generator::check`] (NVRTC without optimizations): every C++ error and
//! every inline-PTX error still fails, sooner. A pass is remembered in
//! the kernel cache (`JITCCL_CACHE_DIR`, keyed by source, target and NVRTC), so a run after
//! a change checks what the change touched, as a build cache would.
//! The optimized code is what the PTX instruction test below and the GPU runs look at.
//!
//! Needs NVRTC (scripts/setup-nvrtc.sh, or JITCCL_NVRTC_PATH), not a GPU. Without NVRTC the
//! tests are skipped with a message, unless JITCCL_REQUIRE_NVRTC=1 makes that a failure.
//! Run with `--nocapture` to see the timing.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use jitccl_codegen::cache::DiskCache;
use jitccl_codegen::compile::nvrtc::{nvrtc, CudaOutput, Nvrtc};
use jitccl_codegen::{
    Algorithm, Collective, CompileError, CudaArch, DataType, Generator, KernelSpec, Protocol, Provenance, RedOp, Target,
};

const SM80: CudaArch = CudaArch(80);
const SM90: CudaArch = CudaArch(90);
/// Parallel NVRTC compiles: one per core.
fn workers() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}
/// Compiler logs shown when compiles fail.
const SHOWN_LOGS: usize = 3;
const MAX_LOG_CHARS: usize = 4000;

/// NVRTC, or `None` (test skipped) unless JITCCL_REQUIRE_NVRTC=1.
fn nvrtc_or_skip(test: &str) -> Option<&'static Nvrtc> {
    match nvrtc() {
        Ok(nv) => Some(nv),
        Err(e) if jitccl_settings::REQUIRE_NVRTC.flag_or_warn() => {
            panic!("JITCCL_REQUIRE_NVRTC=1 but {e}")
        }
        Err(e) => {
            println!("skipping {test}: {e}");
            None
        }
    }
}

/// A CUBIN sample: it takes a spec that brings a (collective, algorithm, protocol), a
/// (datatype, op) or a (protocol, datatype) it does not have yet.
#[derive(Default)]
struct Sample {
    shapes: HashSet<(Collective, Algorithm, Protocol)>,
    elements: HashSet<(DataType, Option<RedOp>)>,
    encodings: HashSet<(Protocol, DataType)>,
}

impl Sample {
    fn takes(&mut self, spec: &KernelSpec) -> bool {
        let shape = self.shapes.insert((spec.coll, spec.algo, spec.proto));
        let element = self.elements.insert((spec.dtype, spec.op));
        let encoding = self.encodings.insert((spec.proto, spec.dtype));
        shape || element || encoding
    }
}

/// Every (spec, arch, output) to compile; asserts on the way that sm_80 rejects exactly
/// the fp8 specs (and that the generator refuses them without compiling).
fn jobs(generator: &Generator) -> Vec<(KernelSpec, CudaArch, CudaOutput)> {
    let mut jobs = Vec::new();
    let (mut sm90, mut sm80) = (Sample::default(), Sample::default());
    for spec in KernelSpec::all() {
        assert!(spec.validate_for(Target::cubin(SM90)).is_ok(), "{spec} rejected for {SM90}");
        jobs.push((spec, SM90, CudaOutput::Ptx));
        if sm90.takes(&spec) {
            jobs.push((spec, SM90, CudaOutput::Cubin));
        }
        if spec.dtype.is_fp8() {
            assert!(
                spec.validate_for(Target::cubin(SM80)).is_err(),
                "{spec} accepted for {SM80}, which has no fp8 conversions"
            );
            match generator.cuda_image(&spec, SM80, CudaOutput::Cubin) {
                Err(CompileError::Spec(_)) => {}
                other => panic!("{spec} for {SM80}: expected a spec error, got {other:?}"),
            }
        } else {
            assert!(spec.validate_for(Target::cubin(SM80)).is_ok(), "{spec} rejected for {SM80}");
            if sm80.takes(&spec) {
                jobs.push((spec, SM80, CudaOutput::Cubin));
            }
        }
    }
    jobs
}

fn shorten(log: &str) -> String {
    if log.chars().count() <= MAX_LOG_CHARS {
        return log.to_owned();
    }
    let head: String = log.chars().take(MAX_LOG_CHARS).collect();
    format!("{head}\n[... log truncated]")
}

/// Checks `jobs` on `workers()` threads (remembered passes skipped: the checks go through the
/// kernel cache, `JITCCL_CACHE_DIR`); the failures (what, log), the wall time, the
/// compilers' busy time and how many were remembered.
fn compile(jobs: &[(KernelSpec, CudaArch, CudaOutput)]) -> (Vec<(String, String)>, Duration, Duration, usize) {
    let checker = Generator::new(DiskCache::from_env());
    let remembered = AtomicUsize::new(0);
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::<(String, String)>::new());
    let busy = Mutex::new(Duration::ZERO);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..workers() {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(spec, arch, output)) = jobs.get(i) else {
                    break;
                };
                let t0 = Instant::now();
                let outcome = checker.check(&spec, Target::Cuda { arch, output });
                *busy.lock().unwrap() += t0.elapsed();
                let problem = match outcome {
                    Ok(Provenance::Disk) => {
                        remembered.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Ok(_) => continue,
                    Err(CompileError::Failed { log, .. }) => log,
                    Err(e) => e.to_string(),
                };
                failures.lock().unwrap().push((format!("{spec} for {arch} ({output:?})"), problem));
            });
        }
    });
    let busy = *busy.lock().unwrap();
    (failures.into_inner().unwrap(), started.elapsed(), busy, remembered.into_inner())
}

/// Fails naming every kernel of `failures` (of `total`), with the first logs.
fn assert_compiled(mut failures: Vec<(String, String)>, total: usize) {
    if failures.is_empty() {
        return;
    }
    failures.sort();
    let names: Vec<&str> = failures.iter().map(|(k, _)| k.as_str()).collect();
    let logs: Vec<String> =
        failures.iter().take(SHOWN_LOGS).map(|(k, log)| format!("--- {k}:\n{}", shorten(log))).collect();
    panic!(
        "{} of {total} kernels failed to compile: {}\n\nfirst logs:\n{}",
        failures.len(),
        names.join(", "),
        logs.join("\n")
    );
}

#[test]
fn every_spec_compiles_to_ptx_and_a_sample_to_cubin_for_sm90_and_sm80() {
    let Some(nv) = nvrtc_or_skip("every_spec_compiles_to_ptx_and_a_sample_to_cubin_for_sm90_and_sm80") else {
        return;
    };
    let generator = Generator::new(None);
    let jobs = jobs(&generator);
    let (failures, elapsed, busy, remembered) = compile(&jobs);
    let cubins = jobs.iter().filter(|j| j.2 == CudaOutput::Cubin).count();
    println!(
        "nvrtc {} ({}): {} kernels to PTX (sm_90), {cubins} to CUBIN (sm_90 and sm_80 samples) in {:.1} s \
         with {} workers, {:.0} ms per compile ({remembered} remembered from an earlier pass)",
        nv.id(),
        nv.location(),
        jobs.len() - cubins,
        elapsed.as_secs_f64(),
        workers(),
        busy.as_secs_f64() * 1e3 / jobs.len().saturating_sub(remembered).max(1) as f64
    );
    assert_compiled(failures, jobs.len());
}

/// The direct kernels run on GPUs (ranks that address each other's buffers): every one of
/// them, each reducing one over a sample of datatypes (every inline-PTX conversion) with
/// every op, assembled to CUBIN for sm_90, so that their inline PTX is checked too.
#[test]
fn every_direct_kernel_assembles_to_cubin_for_every_op_over_a_datatype_sample() {
    let Some(_) = nvrtc_or_skip("every_direct_kernel_assembles_to_cubin_for_every_op_over_a_datatype_sample") else {
        return;
    };
    let sample =
        [DataType::F32, DataType::I32, DataType::F16, DataType::BF16, DataType::F64, DataType::U8, DataType::F8E4M3];
    let jobs: Vec<_> = KernelSpec::all()
        .into_iter()
        .filter(|s| s.algo.is_direct() && sample.contains(&s.dtype))
        .map(|s| (s, SM90, CudaOutput::Cubin))
        .collect();
    let shapes: HashSet<_> = jobs.iter().map(|(s, _, _)| (s.coll, s.algo)).collect();
    // AllReduce's two, and one each for Broadcast, Reduce, AllGather, ReduceScatter,
    // AlltoAll, Gather, Scatter and SendRecv.
    assert_eq!(shapes.len(), 10, "direct kernels: {shapes:?}");
    let (failures, elapsed, _, _) = compile(&jobs);
    println!("{} direct kernels to CUBIN (sm_90) in {:.1} s", jobs.len(), elapsed.as_secs_f64());
    assert_compiled(failures, jobs.len());
}

/// Kernels specialized for a rank count (`KernelSpec::ranks`): every (collective, algorithm,
/// protocol) with f32 sum (or bytes), for 2 and 3 ranks, assembled to CUBIN for sm_90.
#[test]
fn every_shape_specialized_for_a_rank_count_assembles_to_cubin() {
    let Some(_) = nvrtc_or_skip("every_shape_specialized_for_a_rank_count_assembles_to_cubin") else {
        return;
    };
    let jobs: Vec<_> = KernelSpec::all()
        .into_iter()
        .filter(|s| {
            s.dtype == DataType::U8 && s.op.is_none()
                || s.dtype == DataType::F32 && s.op.is_some_and(|o| o.name() == "sum")
        })
        .flat_map(|s| [2, 3].map(|n| (s.specialized_for(n).unwrap(), SM90, CudaOutput::Cubin)))
        .collect();
    let (failures, elapsed, _, _) = compile(&jobs);
    println!("{} specialized kernels to CUBIN (sm_90) in {:.1} s", jobs.len(), elapsed.as_secs_f64());
    assert_compiled(failures, jobs.len());
}

/// The wire formats' kernels (`KernelSpec::wire`): AllReduce with every wire over f32, and
/// over bf16 with int8, its tree and direct kernels with a scaled wire each (the fan-out
/// that sends a step's bytes again; the direct rounding), and the other ring collectives
/// with one wire each, assembled to
/// CUBIN for sm_90; the unscaled and int8 wires for sm_80 too (fp8 wires need sm_89).
#[test]
fn wire_kernels_assemble_to_cubin() {
    let Some(_) = nvrtc_or_skip("wire_kernels_assemble_to_cubin") else {
        return;
    };
    let names = [
        ("all_reduce.ring.simple.f32.sum.wbf16", true),
        ("all_reduce.ring.simple.f32.sum.wfp16", true),
        ("all_reduce.ring.simple.f32.avg.wfp8e4m3b64", false),
        ("all_reduce.ring.simple.f32.sum.wfp8e5m2b128", false),
        ("all_reduce.ring.simple.f32.sum.wint8b64", true),
        ("all_reduce.ring.simple.bf16.sum.wint8b32", false),
        ("all_reduce.tree.simple.f32.sum.wint8b64", false),
        ("all_reduce.direct.simple.f32.avg.wfp8e4m3b32", false),
        ("reduce_scatter.ring.simple.f32.sum.wbf16", false),
        ("all_gather.ring.simple.f32.wint8b64", false),
        ("broadcast.ring.simple.f16.wfp8e4m3b64", false),
        ("sendrecv.ring.simple.f32.wbf16", false),
    ];
    let mut jobs = Vec::new();
    for (name, sm80) in names {
        let spec: KernelSpec = name.parse().unwrap();
        jobs.push((spec, SM90, CudaOutput::Cubin));
        if sm80 {
            jobs.push((spec, SM80, CudaOutput::Cubin));
        }
    }
    let (failures, elapsed, _, _) = compile(&jobs);
    println!("{} wire kernels to CUBIN in {:.1} s", jobs.len(), elapsed.as_secs_f64());
    assert_compiled(failures, jobs.len());
}

#[test]
fn ptx_holds_the_kernel_entry_and_the_protocol_instructions() {
    let Some(_) = nvrtc_or_skip("ptx_holds_the_kernel_entry_and_the_protocol_instructions") else {
        return;
    };
    let generator = Generator::new(None);
    let ptx_of = |name: &str| {
        let spec: KernelSpec = name.parse().unwrap();
        let (image, _) = generator.cuda_image(&spec, SM90, CudaOutput::Ptx).unwrap_or_else(|e| panic!("{e}"));
        (spec, String::from_utf8(image.bytes.clone()).expect("PTX is text"))
    };

    let (spec, ptx) = ptx_of("all_reduce.ring.ll.f32.sum");
    assert!(ptx.contains(&format!(".visible .entry {}(", spec.symbol())), "no entry {} in\n{ptx}", spec.symbol());
    assert!(ptx.contains(".target sm_90"));
    // LL: a line moves as one 16-byte access; a step ends with one fence, of GPU scope where
    // the peer is on this GPU and system scope otherwise, then plain stores of the counters
    // (no release store: it would fence again, at system scope).
    for insn in [
        "ld.volatile.global.v2.u64",
        "st.volatile.global.v2.u64",
        "membar.gl",
        "membar.sys",
        "st.relaxed.sys.u64",
        "bar.sync",
    ] {
        assert!(ptx.contains(insn), "{spec}: no {insn} in the PTX");
    }
    assert!(!ptx.contains("st.release.sys"), "{spec}: a release store in the PTX");

    // Simple: 16-byte packs from the peer's slot (volatile) and the user's buffer, four in
    // flight per thread before the first is used, and 16-byte stores.
    for name in ["all_reduce.ring.simple.f32.sum", "all_reduce.ring.simple.bf16.max"] {
        let (spec, ptx) = ptx_of(name);
        let pos = |insn: &str| -> Vec<usize> { ptx.match_indices(insn).map(|(i, _)| i).collect() };
        let (vol, plain, stores) = (pos("ld.volatile.v4.u32"), pos("ld.v4.u32"), pos("st.v4."));
        assert_eq!((vol.len(), plain.len()), (4, 4), "{spec}: 4 + 4 pack loads");
        assert!(stores.len() >= 4, "{spec}: pack stores");
        assert!(vol.iter().chain(&plain).all(|&l| l < stores[0]), "{spec}: every load before the first store");
    }

    // Direct: thread 0 fences (GPU scope where every rank is on this GPU in this process,
    // system scope otherwise) and raises its counter with a plain store, waits with acquire
    // loads; the view of every rank is the block's, in shared memory; copies move 16-byte
    // packs.
    let (spec, ptx) = ptx_of("all_reduce.direct.simple.f32.sum");
    for insn in ["membar.gl", "membar.sys", "st.relaxed.sys.u64", "ld.acquire.sys.u64", "bar.sync", ".shared"] {
        assert!(ptx.contains(insn), "{spec}: no {insn} in the PTX");
    }
    assert!(!ptx.contains("st.release.sys"), "{spec}: a release store in the PTX");
    let (spec, ptx) = ptx_of("all_gather.direct.simple.u8");
    for insn in ["ld.v4.u32", "st.v4.u32"] {
        assert!(ptx.contains(insn), "{spec}: no {insn} in the PTX");
    }

    // Direct, specialized for its rank count: the fold's rank loop unrolls, so more than one
    // rank's packs are loaded before the first is combined (at 2 ranks all 2 x 4; at 4 NVVM
    // emits two ranks' first, and ptxas may hoist more); a kernel for any rank count loads
    // one rank's 4 packs, then combines.
    let loads_before_first_add = |name: &str| {
        let (spec, ptx) = ptx_of(name);
        let first_add = ptx.find("add.rn.f32").unwrap_or_else(|| panic!("{spec}: no add.rn.f32"));
        ptx[..first_add].matches("ld.v4.u32").count()
    };
    assert_eq!(loads_before_first_add("all_reduce.direct.simple.f32.sum"), 4);
    assert_eq!(loads_before_first_add("all_reduce.direct.simple.f32.sum@2"), 8);
    assert!(loads_before_first_add("all_reduce.direct.simple.f32.sum@4") >= 8);

    let (spec, ptx) = ptx_of("reduce.ring.ll128.f8e4m3.sum");
    assert!(ptx.contains(&spec.symbol()));
    for insn in ["ld.acquire.sys.u64", "cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.f16x2.e4m3x2"] {
        assert!(ptx.contains(insn), "{spec}: no {insn} in the PTX");
    }
}
