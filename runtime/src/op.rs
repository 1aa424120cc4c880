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
    /// PreMulSum with the multiplier read by the kernel when it runs (NCCL's
    /// `ncclScalarDevice`), so that work queued before it on the stream may write it.
    PreMulSumAt(ScalarAt),
    /// A user-defined reduction (see `#[jitccl::reduction]`).
    Custom(&'static CustomOp),
}

/// Where a [`Op::PreMulSumAt`] multiplier lives: one element of the call's datatype in
/// memory the communicator's kernels read (device memory on a GPU, host memory on the host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScalarAt(usize);

impl ScalarAt {
    /// # Safety
    /// `ptr` must point to one element of the datatype of every call made with it, aligned
    /// for that type and readable by the communicator's kernels until those calls complete.
    pub unsafe fn new(ptr: *const std::ffi::c_void) -> ScalarAt {
        ScalarAt(ptr as usize)
    }

    pub(crate) fn addr(self) -> usize {
        self.0
    }
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
            Op::PreMulSum(_) | Op::PreMulSumAt(_) => B::PreMulSum.into(),
            Op::Custom(c) => RedOp::Custom(c),
        }
    }
}
