//! Compiles with a second NVRTC, given by `JITCCL_NVRTC13_PATH` (a libnvrtc.so.13 or a
//! folder holding one, e.g. a `pip install --target DIR nvidia-cuda-nvrtc` of CUDA 13), next
//! to the process-wide one. Skipped when the variable is not set: CI keeps only the 12.9
//! wheels, and nothing downloads NVRTC 13 for it.

use jitccl_codegen::compile::nvrtc::{CudaOutput, Nvrtc};
use jitccl_codegen::{render, CompileError, CudaArch, KernelSpec, Target};

const VAR: &str = "JITCCL_NVRTC13_PATH";

#[test]
fn nvrtc13_compiles_specs_and_refuses_dropped_archs() {
    let Some(path) = std::env::var_os(VAR).filter(|v| !v.is_empty()) else {
        println!("skipping: {VAR} is not set");
        return;
    };
    let nv = Nvrtc::open(std::path::Path::new(&path)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(nv.version().0, 13, "{} at {}", nv.id(), nv.location());
    // CUDA 13 dropped Maxwell, Pascal and Volta.
    assert!(!nv.supports(CudaArch(70)) && nv.supports(CudaArch(80)) && nv.supports(CudaArch(90)));

    let specs = ["all_reduce.ring.ll.f32.sum", "all_reduce.tree.ll128.bf16.max", "all_gather.ring.simple.u8"];
    for name in specs {
        let spec: KernelSpec = name.parse().unwrap();
        for arch in [CudaArch(80), CudaArch(90)] {
            let src = render(&spec, Target::cubin(arch)).unwrap();
            let cubin = nv.compile(&src, name, arch, CudaOutput::Cubin).unwrap_or_else(|e| panic!("{e}"));
            assert!(cubin.starts_with(b"\x7fELF"), "{name} for {arch}: not an ELF image");
        }
        let src = render(&spec, Target::ptx(CudaArch(90))).unwrap();
        let ptx = nv.compile(&src, name, CudaArch(90), CudaOutput::Ptx).unwrap_or_else(|e| panic!("{e}"));
        let ptx = String::from_utf8(ptx).unwrap();
        assert!(ptx.contains(&format!(".entry {}(", spec.symbol())) && ptx.contains(".target sm_90"), "{name}");
    }

    let spec: KernelSpec = specs[0].parse().unwrap();
    let src = render(&spec, Target::cubin(CudaArch(70))).unwrap();
    match nv.compile(&src, specs[0], CudaArch(70), CudaOutput::Cubin) {
        Err(CompileError::Failed { log, .. }) => {
            assert!(
                log.contains(&format!("NVRTC {}.{} cannot compile for sm_70", nv.version().0, nv.version().1)),
                "{log}"
            )
        }
        other => panic!("expected Failed, got {other:?}"),
    }
}
