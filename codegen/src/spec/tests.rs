use super::*;

#[test]
fn names_round_trip() {
    for spec in KernelSpec::all() {
        let parsed: KernelSpec = spec.to_string().parse().unwrap();
        assert_eq!(parsed, spec);
    }
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
    // 3 reducing collectives (all_reduce with 3 FIFO algorithms) x 3 protos x 12 dtypes x
    // 6 ops, plus 3 byte-moving collectives x 3 protos; direct algorithms (all_reduce: 2,
    // reduce and reduce_scatter: 1; broadcast and all_gather: 1; all_to_all, gather and
    // scatter: their only kernels, whose ring is sendrecv rounds; sendrecv's single copy)
    // with Simple only.
    assert_eq!(KernelSpec::all().len(), 5 * 3 * 12 * 6 + 3 * 3 + 4 * 12 * 6 + 2 + 3 + 1);
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
