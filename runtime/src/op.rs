//! Reduction operators as callers name them, and what kernels are specialized for.

use jitccl_codegen::{CustomOp, RedOp};

/// A reduction operator as the caller names it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    Sum,
    Prod,
    Min,
    Max,
    /// Sum divided by the number of ranks.
    Avg,
    /// Each rank's input multiplied by this rank's scalar, then summed. For integer types
    /// the scalar must be a whole number.
    PreMulSum(f64),
    /// A user-defined reduction (see `#[jitccl::reduction]`).
    Custom(&'static CustomOp),
}

impl Op {
    pub fn custom(op: &'static CustomOp) -> Op {
        Op::Custom(op)
    }

    pub(crate) fn red_op(self) -> RedOp {
        use jitccl_codegen::BuiltinOp as B;
        match self {
            Op::Sum => B::Sum.into(),
            Op::Prod => B::Prod.into(),
            Op::Min => B::Min.into(),
            Op::Max => B::Max.into(),
            Op::Avg => B::Avg.into(),
            Op::PreMulSum(_) => B::PreMulSum.into(),
            Op::Custom(c) => RedOp::Custom(c),
        }
    }
}
