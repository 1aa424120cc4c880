use super::*;

#[test]
fn names_round_trip() {
    for spec in KernelSpec::all() {
        let parsed: KernelSpec = spec.to_string().parse().unwrap();
        assert_eq!(parsed, spec);
    }
}

#[test]
fn specialized_names_round_trip_and_name_their_symbols() {
    let spec: KernelSpec = "all_reduce.direct.simple.f32.sum@2".parse().unwrap();
    assert_eq!(spec.ranks, Some(2));
    assert_eq!(spec.to_string(), "all_reduce.direct.simple.f32.sum@2");
    assert_eq!(spec.symbol(), "jitccl_all_reduce_direct_simple_f32_sum__ranks2");
    let any = KernelSpec { ranks: None, ..spec };
    assert_ne!(spec.symbol(), any.symbol());
    let gather: KernelSpec = "all_gather.ring.ll.u8@64".parse().unwrap();
    assert_eq!((gather.ranks, gather.to_string().as_str()), (Some(64), "all_gather.ring.ll.u8@64"));
    for spec in KernelSpec::all() {
        let s = spec.specialized_for(3).unwrap();
        assert_eq!(s.to_string().parse::<KernelSpec>().unwrap(), s);
    }
}

#[test]
fn specialization_is_for_1_to_64_ranks() {
    let spec: KernelSpec = "all_reduce.ring.simple.f32.sum".parse().unwrap();
    for n in [1, 64] {
        assert_eq!(spec.specialized_for(n).unwrap().ranks, Some(n as u8));
    }
    for n in [0, 65, 256, 1 << 20] {
        let e = spec.specialized_for(n).unwrap_err();
        assert!(e.0.contains("1 to 64 ranks") && e.0.contains(&n.to_string()), "{n}: {e}");
    }
    let e = "all_reduce.ring.simple.f32.sum@x".parse::<KernelSpec>().unwrap_err();
    assert!(e.0.contains("not a rank count"), "{e}");
    let e = "all_reduce.ring.simple.f32.sum@0".parse::<KernelSpec>().unwrap_err();
    assert!(e.0.contains("1 to 64 ranks"), "{e}");
}

#[test]
fn invalid_combinations_say_why() {
    let e = "broadcast.tree.ll.u8".parse::<KernelSpec>().unwrap_err();
    assert!(e.0.contains("no tree algorithm"), "{e}");
    let e = "all_reduce.ring.ll.f32".parse::<KernelSpec>().unwrap_err();
    assert!(e.0.contains("needs a reduction op"), "{e}");
    let e = "all_gather.ring.ll.f32".parse::<KernelSpec>().unwrap_err();
    assert!(e.0.contains("only moves bytes"), "{e}");
    let e = "all_reduce.direct.ll.f32.sum".parse::<KernelSpec>().unwrap_err();
    assert!(e.0.contains("simple protocol only"), "{e}");
    let e = "sendrecv.tree.simple.u8".parse::<KernelSpec>().unwrap_err();
    assert!(e.0.contains("no tree algorithm"), "{e}");
    let e = "sendrecv.direct.ll.u8".parse::<KernelSpec>().unwrap_err();
    assert!(e.0.contains("simple protocol only"), "{e}");
    let e = "all_reduce.ring.xx.f32.sum".parse::<KernelSpec>().unwrap_err();
    assert!(e.0.contains("unknown protocol 'xx'"), "{e}");
    let fp8: KernelSpec = "all_reduce.ring.ll.f8e4m3.max".parse().unwrap();
    assert!(fp8.validate_for(Target::cubin(CudaArch(80))).is_err());
    assert!(fp8.validate_for(Target::cubin(CudaArch(90))).is_ok());
    assert!(fp8.validate_for(Target::ptx(CudaArch(80))).is_err());
    assert!(fp8.validate_for(Target::Host).is_ok());
}

#[test]
fn custom_op_rules() {
    static NC: CustomOp =
        CustomOp { name: "first", body: "return a;", identity: "0.0f", commutative: false, dtypes: &[DataType::F32] };
    let op = Some(RedOp::Custom(&NC));
    let tree = KernelSpec::new(Collective::AllReduce, Algorithm::Tree, Protocol::LL, DataType::F32, op);
    assert!(tree.unwrap_err().0.contains("not commutative"));
    let ring = KernelSpec::new(Collective::AllReduce, Algorithm::Ring, Protocol::LL, DataType::F32, op);
    assert_eq!(ring.unwrap().to_string(), "all_reduce.ring.ll.f32.custom:first");
    let wrong = KernelSpec::new(Collective::Reduce, Algorithm::Ring, Protocol::LL, DataType::I32, op);
    assert!(wrong.unwrap_err().0.contains("not defined for i32"));
}

#[test]
fn spec_count() {
    // 3 reducing collectives (all_reduce with 4 FIFO algorithms) x 3 protos x 12 dtypes x
    // 6 ops, plus 3 byte-moving collectives x 3 protos; direct algorithms (all_reduce: 2,
    // reduce and reduce_scatter: 1; broadcast and all_gather: 1; all_to_all, gather and
    // scatter: their only kernels, whose ring is sendrecv rounds; sendrecv's single copy)
    // with Simple only.
    assert_eq!(KernelSpec::all().len(), 6 * 3 * 12 * 6 + 3 * 3 + 4 * 12 * 6 + 2 + 3 + 1);
}

#[test]
fn collectives_in_rounds_have_direct_kernels_only() {
    for coll in [Collective::AllToAll, Collective::Gather, Collective::Scatter] {
        let ring = KernelSpec::new(coll, Algorithm::Ring, Protocol::Simple, DataType::U8, None);
        assert!(ring.unwrap_err().0.contains("sendrecv rounds"), "{coll}");
        assert!(KernelSpec::new(coll, Algorithm::Direct, Protocol::Simple, DataType::U8, None).is_ok(), "{coll}");
        assert!(coll.algorithms().contains(&Algorithm::Ring), "{coll}: the tuner weighs the rounds");
    }
}

#[test]
fn wires_name_their_kernels_and_round_trip() {
    let spec: KernelSpec = "all_reduce.ring.simple.f32.sum.wbf16".parse().unwrap();
    assert_eq!(spec.wire, Wire::Bf16);
    assert_eq!(spec.symbol(), "jitccl_all_reduce_ring_simple_f32_sum_wbf16");
    let exact = KernelSpec { wire: Wire::Exact, ..spec };
    assert_eq!(exact.to_string(), "all_reduce.ring.simple.f32.sum");
    for name in [
        "all_reduce.ring.simple.f32.sum.wfp16",
        "all_reduce.ring.simple.f32.avg.wfp8e4m3b64",
        "all_reduce.ring.simple.bf16.sum.wfp8e5m2b128@4",
        "reduce_scatter.ring.simple.f16.sum.wint8b32",
        "broadcast.ring.simple.f32.wint8b256",
        "sendrecv.ring.simple.f32.wbf16",
    ] {
        let spec: KernelSpec = name.parse().unwrap();
        assert_eq!(spec.to_string(), name);
    }
    assert_eq!("int8".parse::<Wire>().unwrap(), Wire::Int8 { block: Wire::DEFAULT_BLOCK });
    assert_eq!("E4M3b128".parse::<Wire>().unwrap(), Wire::Fp8E4M3 { block: 128 });
}

#[test]
fn wires_by_code_and_block_invert_code_and_block() {
    for name in ["exact", "bf16", "fp16", "fp8e4m3b32", "fp8e5m2b128", "int8b256", "int8"] {
        let w: Wire = name.parse().unwrap();
        assert_eq!(Wire::from_code(w.code(), w.block()).unwrap(), w, "{name}");
    }
    assert_eq!(Wire::from_code(5, None).unwrap(), Wire::Int8 { block: Wire::DEFAULT_BLOCK });
    assert!(Wire::from_code(1, Some(64)).unwrap_err().0.contains("the bf16 wire takes no block"));
    assert!(Wire::from_code(3, Some(100)).unwrap_err().0.contains("the blocks are 32, 64, 128, 256"));
    assert!(Wire::from_code(6, None).unwrap_err().0.contains("wire format 6"));
}

#[test]
fn wire_rules_say_why() {
    let refused = |name: &str, why: &str| {
        let e = name.parse::<KernelSpec>().unwrap_err();
        assert!(e.0.contains(why), "{name}: {e}");
    };
    refused("all_reduce.ring.simple.i32.sum.wbf16", "carries f32, f16 or bf16 elements, not i32");
    refused("all_reduce.ring.simple.bf16.sum.wfp16", "no narrower than bf16");
    refused("all_reduce.ring.simple.f32.max.wbf16", "sum or avg only, not max");
    refused("all_reduce.direct_oneshot.simple.f32.sum.wbf16", "with the ring, tree, direct algorithm(s)");
    refused("all_reduce.tree.ll.f32.sum.wbf16", "on the simple protocol");
    refused("reduce_scatter.direct.simple.f32.sum.wbf16", "with the ring algorithm(s)");
    for name in ["all_reduce.tree.simple.f32.sum.wbf16", "all_reduce.direct.simple.f32.avg.wint8b64"] {
        assert!(name.parse::<KernelSpec>().is_ok(), "{name}");
    }
    refused("all_reduce.ring.simple.f32.sum.wint8b48", "the blocks are 32, 64, 128, 256");
    refused("all_reduce.ring.simple.f32.sum.wbf16b64", "takes no block");
    refused("all_reduce.ring.simple.f32.sum.wint4", "unknown wire 'int4'");
    refused("broadcast.ring.simple.f32", "only moves bytes");
    let fp8: KernelSpec = "all_gather.ring.simple.f32.wfp8e4m3b64".parse().unwrap();
    assert!(fp8.validate_for(Target::cubin(CudaArch(80))).unwrap_err().0.contains("the fp8e4m3b64 wire needs"));
    assert!(fp8.validate_for(Target::cubin(CudaArch(90))).is_ok());
    static FIRST: CustomOp =
        CustomOp { name: "first", body: "return a;", identity: "0.0f", commutative: true, dtypes: &[DataType::F32] };
    let custom = KernelSpec::new(
        Collective::AllReduce,
        Algorithm::Ring,
        Protocol::Simple,
        DataType::F32,
        Some(RedOp::Custom(&FIRST)),
    );
    assert!(custom.unwrap().with_wire(Wire::Bf16).unwrap_err().0.contains("not custom:first"));
}
