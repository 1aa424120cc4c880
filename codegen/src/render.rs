//! Renders a kernel's source from the askama templates: the spec decides the datatype and
//! op snippets and which protocol/algorithm files are included; the target decides the
//! prelude and the primitives' flavour.

use askama::Template;

use crate::abi::{ll128_flag_word, AbiSizes};
use crate::compile::CompileError;
use crate::spec::{BuiltinOp, Collective, DataType, KernelSpec, RedOp, Target, Wire, WireCodec};

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

/// The kernel template: `templates/kernel.c` with the choice of its algorithm's file
/// (`codegen/build.rs`), given to askama as a literal.
macro_rules! kernel_source {
    ($template:literal) => {
        #[derive(Template)]
        #[template(source = $template, ext = "c", escape = "none")]
        struct KernelSource<'a> {
            spec: String,
            target: String,
            symbol: String,
            cuda: bool,
            proto: &'static str,
            ll128_flag: usize,
            /// `<collective>_<algorithm>`: the file of `templates/algo/` the kernel includes.
            algo_file: String,
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
            /// The user's codec of a `Wire::Custom`, else `None`.
            codec: Option<&'static WireCodec>,
            abi: &'a AbiSizes,
        }
    };
}
include!(concat!(env!("OUT_DIR"), "/kernel_template.rs"));

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

fn algo_file(spec: &KernelSpec) -> String {
    format!("{}_{}", spec.coll, spec.algo)
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
    // A codec of the user's by its code too: two of one name must not pair their steps.
    if let Wire::Custom(c) = spec.wire {
        what += &format!(".{:?}.{}.{}.{}", c.block, c.scale, c.encode, c.decode);
    }
    // FNV-1a: stable across builds and processes, unlike std's hasher.
    what.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// The complete source of one kernel for one target.
pub fn render(spec: &KernelSpec, target: Target) -> Result<String, CompileError> {
    spec.validate_for(target)?;
    let abi = AbiSizes::of_this_build();
    let cuda = matches!(target, Target::Cuda { .. });
    let algo_file = algo_file(spec);
    if !ALGO_FILES.contains(&algo_file.as_str()) {
        return Err(CompileError::Render(format!("{spec}: no template templates/algo/{algo_file}.h")));
    }
    let src = KernelSource {
        spec: spec.to_string(),
        target: target.to_string(),
        symbol: spec.symbol(),
        cuda,
        proto: spec.proto.name(),
        ll128_flag: ll128_flag_word(cuda),
        algo_file,
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
        codec: match spec.wire {
            Wire::Custom(c) => Some(c),
            _ => None,
        },
        abi: &abi,
    };
    src.render().map_err(|e| CompileError::Render(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::ALGO_FILES;
    use crate::spec::Collective;

    /// Every algorithm with a kernel has its file, and every file is some algorithm's: the
    /// name is all that ties them.
    #[test]
    fn every_algorithm_with_a_kernel_has_its_file_and_no_file_is_left_over() {
        let mut named: Vec<String> = Vec::new();
        for &coll in Collective::ALL {
            for &algo in coll.algorithms().iter().filter(|&&a| coll.has_kernel(a)) {
                let file = format!("{coll}_{algo}");
                assert!(ALGO_FILES.contains(&file.as_str()), "no templates/algo/{file}.h for {coll} {algo}");
                named.push(file);
            }
        }
        for file in ALGO_FILES {
            assert!(named.iter().any(|n| n == file), "templates/algo/{file}.h is no algorithm's file");
        }
    }
}
