//! The kernels an op makes: keyed on its source, described by the macro's constants, and
//! compiled by NVRTC for CUDA.

use super::*;

#[test]
fn a_changed_body_is_another_kernel() {
    assert_eq!(PICK_FIRST.name, PICK_SECOND.name);
    assert_eq!((pick_first(1, 2), pick_second(1, 2)), (1, 2));
    assert_ne!(PICK_FIRST.body, PICK_SECOND.body);
    let w = world(2, Some(Algorithm::Ring), Some(Protocol::LL));
    let x = |r: usize, i: usize| (10 * r + i) as i32;
    let first = run(&w, Collective::Reduce, Op::custom(&PICK_FIRST), 3, 0, &x).unwrap();
    let second = run(&w, Collective::Reduce, Op::custom(&PICK_SECOND), 3, 0, &x).unwrap();
    assert_eq!(first[0], vec![10, 11, 12], "pick_first keeps what rank 1 sent");
    assert_eq!(second[0], vec![0, 1, 2], "pick_second keeps rank 0's own");

    let dir = tempfile::tempdir().unwrap();
    let g = Generator::new(Some(jitccl::codegen::cache::DiskCache::new(dir.path())));
    let spec = |op: &'static CustomOp| {
        KernelSpec::new(Collective::Reduce, Algorithm::Ring, Protocol::LL, DataType::I32, Some(RedOp::Custom(op)))
            .unwrap()
    };
    assert_eq!(spec(&PICK_FIRST).to_string(), spec(&PICK_SECOND).to_string());
    assert_eq!(g.host_kernel(&spec(&PICK_FIRST)).unwrap().1, Provenance::Compiled);
    assert_eq!(g.host_kernel(&spec(&PICK_SECOND)).unwrap().1, Provenance::Compiled);
    assert_eq!(g.host_kernel(&spec(&PICK_FIRST)).unwrap().1, Provenance::Memory);
    let src = |op| jitccl::codegen::render(&spec(op), jitccl::codegen::Target::Host).unwrap();
    assert_ne!(src(&PICK_FIRST), src(&PICK_SECOND));
}

// ---- what the macro emits ----

#[test]
fn emitted_constants_describe_the_op() {
    assert_eq!(ABSMAX.name, "absmax");
    assert_eq!(ABSMAX.identity, "0.0f");
    assert!(ABSMAX.commutative);
    assert_eq!(ABSMAX.dtypes, &[DataType::F32]);
    assert_eq!(ABSMAX_ANY.dtypes, &[DataType::F32, DataType::F64, DataType::F16, DataType::BF16]);
    assert!(!DIGITS.commutative);
    assert_eq!(DIGITS.identity, "0");
    assert_eq!(CLAMPED_SUM.dtypes.len(), 8);
    assert_eq!(PICK_FIRST.name, "pick");
    // The references are the functions themselves (narrow floats computed in f32).
    assert_eq!(absmax(-3.0, 2.0), 3.0);
    assert_eq!(absmax_any(half::f16::from_f32(-1.5), half::f16::from_f32(1.0)), half::f16::from_f32(1.5));
    assert_eq!(digits(12, 3), 123);
    assert_eq!(digits(1.0f64, 2.0), 12.0);
}

// ---- NVRTC: the same specs for CUDA ----

fn cuda_specs() -> Vec<KernelSpec> {
    let ops: [&'static CustomOp; 9] =
        [&ABSMAX, &ABSMAX_ANY, &CLAMPED_SUM, &DIGITS, &FLOAT_MIX, &INT_MIX, &WRAPPING, &PICK_FIRST, &PICK_SECOND];
    let mut specs = Vec::new();
    for op in ops {
        for &dtype in op.dtypes {
            let s = KernelSpec::new(
                Collective::AllReduce,
                Algorithm::Ring,
                Protocol::Simple,
                dtype,
                Some(RedOp::Custom(op)),
            );
            specs.push(s.unwrap());
        }
    }
    // Every collective, algorithm and protocol for one op.
    for &coll in [Collective::AllReduce, Collective::Reduce, Collective::ReduceScatter].iter() {
        for &algo in coll.algorithms() {
            // Direct algorithms have the Simple protocol only.
            for &proto in Protocol::ALL.iter().filter(|&&p| !algo.is_direct() || p == Protocol::Simple) {
                let s = KernelSpec::new(coll, algo, proto, DataType::F16, Some(RedOp::Custom(&ABSMAX_ANY))).unwrap();
                if !specs.contains(&s) {
                    specs.push(s);
                }
            }
        }
    }
    specs
}

#[test]
fn specs_compile_with_nvrtc_for_sm90() {
    let required = std::env::var("JITCCL_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    if let Err(e) = nvrtc() {
        assert!(!required, "JITCCL_REQUIRE_NVRTC=1 but {e}");
        eprintln!("skipping the NVRTC check: {e}");
        return;
    }
    let specs = cuda_specs();
    let mut failed = Vec::new();
    for spec in &specs {
        // A check (no optimizations): every C++ and inline-PTX error still fails.
        if let Err(e) = Generator::global().check(spec, Target::cubin(CudaArch(90))) {
            failed.push(format!("{spec}: {e}"));
        }
    }
    assert!(failed.is_empty(), "{} of {} failed:\n{}", failed.len(), specs.len(), failed.join("\n"));
    eprintln!("{} custom-op kernels compiled with NVRTC for sm_90", specs.len());
}
