//! Renders a kernel's source from the askama templates: the spec decides the datatype and
//! op snippets and which protocol/algorithm files are included; the target decides the
//! prelude and the primitives' flavour.

use askama::Template;

use crate::abi::{ll128_flag_word, AbiSizes};
use crate::compile::CompileError;
use crate::spec::{Algorithm, BuiltinOp, Collective, DataType, KernelSpec, RedOp, Target, Wire};

/// How a datatype is stored (`T`) and combined (`C`) in C.
struct Dtype {
    storage: &'static str,
    compute: &'static str,
    to_c: &'static str,
    from_c: &'static str,
}

/// C bodies of the op's functions (see `templates/kernel.c`).
struct OpSource {
    combine: String,
    pre: &'static str,
    post: &'static str,
    scalar: &'static str,
}

#[derive(Template)]
#[template(path = "kernel.c", escape = "none")]
struct KernelSource<'a> {
    spec: String,
    target: String,
    symbol: String,
    cuda: bool,
    proto: &'static str,
    ll128_flag: usize,
    algo_file: &'static str,
    call_kind: u64,
    dtype: DataType,
    d: Dtype,
    op_name: String,
    /// No reduction op: the kernel only moves bytes.
    copy_only: bool,
    op: OpSource,
    /// The rank count the kernel is specialized for, or 0: any.
    ranks: u8,
    wire: String,
    /// `Wire::code`: 0 for the exact wire.
    wire_code: u8,
    /// Elements per scale of a scaled wire, else 0.
    wire_block: u16,
    abi: &'a AbiSizes,
}

fn dtype(d: DataType) -> Dtype {
    let plain = |ty: &'static str| Dtype { storage: ty, compute: ty, to_c: "v", from_c: "v" };
    let narrow = |storage, to_c, from_c| Dtype { storage, compute: "float", to_c, from_c };
    match d {
        DataType::I8 => plain("jc_i8"),
        DataType::U8 => plain("jc_u8"),
        DataType::I32 => plain("jc_i32"),
        DataType::U32 => plain("jc_u32"),
        DataType::I64 => plain("jc_i64"),
        DataType::U64 => plain("jc_u64"),
        DataType::F32 => plain("float"),
        DataType::F64 => plain("double"),
        DataType::F16 => narrow("jc_u16", "jc_f16_to_f32(v)", "jc_f32_to_f16(v)"),
        DataType::BF16 => narrow("jc_u16", "jc_bf16_to_f32(v)", "jc_f32_to_bf16(v)"),
        DataType::F8E4M3 => narrow("jc_u8", "jc_e4m3_to_f32(v)", "jc_f32_to_e4m3(v)"),
        DataType::F8E5M2 => narrow("jc_u8", "jc_e5m2_to_f32(v)", "jc_f32_to_e5m2(v)"),
    }
}

/// The unsigned type of an integer's width: integer sums and products wrap, and signed
/// overflow is undefined in C.
fn unsigned_of(d: DataType) -> &'static str {
    match d.size() {
        1 => "jc_u8",
        4 => "jc_u32",
        _ => "jc_u64",
    }
}

fn op_source(spec: &KernelSpec) -> OpSource {
    let d = spec.dtype;
    let int = d.is_integer();
    let u = unsigned_of(d);
    let wrap = |sym: &str| format!("return (C)(({u})a {sym} ({u})b);");
    let mut src = OpSource {
        combine: "return a + b;".into(),
        pre: "return v;",
        post: "return v;",
        scalar: if int { "return (C)a->scalar_i;" } else { "return (C)a->scalar_f;" },
    };
    match spec.op {
        // Copy kernels never combine.
        None => src.combine = "return b;".into(),
        Some(RedOp::Custom(c)) => src.combine = c.body.to_string(),
        Some(RedOp::Builtin(b)) => match b {
            BuiltinOp::Sum if int => src.combine = wrap("+"),
            BuiltinOp::Sum => {}
            BuiltinOp::Prod if int => src.combine = wrap("*"),
            BuiltinOp::Prod => src.combine = "return a * b;".into(),
            BuiltinOp::Min => src.combine = "return b < a ? b : a;".into(),
            BuiltinOp::Max => src.combine = "return b > a ? b : a;".into(),
            BuiltinOp::Avg if int => {
                src.combine = wrap("+");
                src.post = "return (C)(v / (C)x->args->nranks);";
            }
            BuiltinOp::Avg => src.pre = "return v * x->scalar;",
            BuiltinOp::PreMulSum if int => {
                src.combine = wrap("+");
                src.scalar = "return a->scalar_ptr ? (C)*(const T*)a->scalar_ptr : (C)a->scalar_i;";
                src.pre = match d.size() {
                    1 => "return (C)((jc_u8)v * (jc_u8)x->scalar);",
                    4 => "return (C)((jc_u32)v * (jc_u32)x->scalar);",
                    _ => "return (C)((jc_u64)v * (jc_u64)x->scalar);",
                };
            }
            BuiltinOp::PreMulSum => {
                src.pre = "return v * x->scalar;";
                src.scalar = "return a->scalar_ptr ? jc_to_c(*(const T*)a->scalar_ptr) : (C)a->scalar_f;";
            }
        },
    }
    src
}

fn algo_file(spec: &KernelSpec) -> &'static str {
    match (spec.coll, spec.algo) {
        (Collective::AllReduce, Algorithm::Tree) => "all_reduce_tree",
        (Collective::AllReduce, Algorithm::OneShot) => "all_reduce_oneshot",
        (Collective::AllReduce, Algorithm::Direct) => "all_reduce_direct",
        (Collective::AllReduce, Algorithm::DirectOneShot) => "all_reduce_direct_oneshot",
        (Collective::Broadcast, Algorithm::Direct) => "broadcast_direct",
        (Collective::Reduce, Algorithm::Direct) => "reduce_direct",
        (Collective::AllGather, Algorithm::Direct) => "all_gather_direct",
        (Collective::ReduceScatter, Algorithm::Direct) => "reduce_scatter_direct",
        (Collective::AllReduce, _) => "all_reduce_ring",
        (Collective::Broadcast, _) => "broadcast_ring",
        (Collective::Reduce, _) => "reduce_ring",
        (Collective::AllGather, _) => "all_gather_ring",
        (Collective::ReduceScatter, _) => "reduce_scatter_ring",
        (Collective::SendRecv, Algorithm::Direct) => "sendrecv_direct",
        (Collective::SendRecv, _) => "sendrecv",
        // Only their direct algorithms have kernels (see KernelSpec::validate).
        (Collective::AllToAll, _) => "all_to_all_direct",
        (Collective::Gather, _) => "gather_direct",
        (Collective::Scatter, _) => "scatter_direct",
    }
}

/// What a collective's kernel mixes into the identity its FIFO steps carry (see
/// `jc_call_tag` in `templates/common/ctx.h`): the collective, algorithm, datatype and op,
/// and wire, so that ranks which call with another of them fail instead of pairing their
/// steps. Point to point carries bytes only: a send and its receive may name other datatypes.
fn call_kind(spec: &KernelSpec) -> u64 {
    if spec.coll == Collective::SendRecv {
        return 0;
    }
    let op = spec.op.as_ref().map_or_else(String::new, |o| o.to_string());
    let mut what = format!("{}.{}.{}.{op}", spec.coll, spec.algo, spec.dtype);
    if spec.wire != Wire::Exact {
        what += &format!(".{}", spec.wire);
    }
    // FNV-1a: stable across builds and processes, unlike std's hasher.
    what.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// The complete source of one kernel for one target.
pub fn render(spec: &KernelSpec, target: Target) -> Result<String, CompileError> {
    spec.validate_for(target)?;
    let abi = AbiSizes::of_this_build();
    let cuda = matches!(target, Target::Cuda { .. });
    let src = KernelSource {
        spec: spec.to_string(),
        target: target.to_string(),
        symbol: spec.symbol(),
        cuda,
        proto: spec.proto.name(),
        ll128_flag: ll128_flag_word(cuda),
        algo_file: algo_file(spec),
        call_kind: call_kind(spec),
        dtype: spec.dtype,
        d: dtype(spec.dtype),
        op_name: spec.op.map_or_else(|| "none (copy)".to_string(), |o| o.to_string()),
        copy_only: spec.op.is_none(),
        op: op_source(spec),
        ranks: spec.ranks.unwrap_or(0),
        wire: spec.wire.to_string(),
        wire_code: spec.wire.code(),
        wire_block: spec.wire.block().unwrap_or(0),
        abi: &abi,
    };
    src.render().map_err(|e| CompileError::Render(e.to_string()))
}
