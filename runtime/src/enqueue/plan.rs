//! A call's plan: the tuner's choice for its shape and the kernel that runs it. A rank
//! remembers the last plan it made, so a call that repeats the one before (a loop's calls,
//! the common case) skips the tuner's and the kernel table's locks and hash lookups: a
//! small call's path is short enough that these showed in its profile.

use std::sync::Mutex;

use jitccl_codegen::{Collective, DataType, KernelSpec, RedOp};

use super::Rank;
use crate::device::Kernel;
use crate::error::{Error, Result};
use crate::tune::Choice;

/// What a plan depends on besides its rank (whose tuner and overrides are fixed at init).
#[derive(Clone, Copy, PartialEq)]
pub(super) struct Shape {
    pub coll: Collective,
    /// Per-rank bytes, as the tuner sees them.
    pub bytes: usize,
    /// The kernel's element type (bytes for collectives that only move data).
    pub dtype: DataType,
    pub op: Option<RedOp>,
    /// Every buffer registered: the direct algorithms are candidates.
    pub direct: bool,
    /// The library's own exchange (see `Call::internal`).
    pub internal: bool,
}

/// The last plan a rank made (`Rank::last`).
pub(super) type Last = Mutex<Option<(Shape, Choice, Kernel)>>;

impl Rank {
    /// The choice and kernel for a call of `shape` on this rank.
    pub(super) fn plan(&self, shape: Shape) -> Result<(Choice, Kernel)> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, choice, kernel)) = last.as_ref().filter(|(s, ..)| *s == shape) {
            return Ok((*choice, kernel.clone()));
        }
        drop(last);
        let choice = match shape.internal {
            true => self.tuner.internal(shape.dtype.size()),
            false => {
                let commutative = !matches!(shape.op, Some(RedOp::Custom(c)) if !c.commutative);
                self.tuner.choose_for(shape.coll, shape.bytes, shape.dtype.size(), commutative, shape.direct)?
            }
        };
        let kernel = self.kernel(shape.coll, choice, shape.dtype, shape.op)?;
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((shape, choice, kernel.clone()));
        Ok((choice, kernel))
    }

    /// The kernel for one launch: from this rank's table, else validated and fetched
    /// (compiled if need be) from the generator.
    fn kernel(&self, coll: Collective, choice: Choice, dtype: DataType, op: Option<RedOp>) -> Result<Kernel> {
        let spec = KernelSpec { coll, algo: choice.algo, proto: choice.proto, dtype, op };
        if let Some(k) = self.kernels.lock().unwrap_or_else(|e| e.into_inner()).get(&spec) {
            return Ok(k.clone());
        }
        let spec = KernelSpec::new(coll, choice.algo, choice.proto, dtype, op)
            .map_err(|e| Error::InvalidArgument(format!("{} with {dtype}: {e}", coll.name())))?;
        let kernel = Kernel::get(&self.device, &spec)?;
        self.kernels.lock().unwrap_or_else(|e| e.into_inner()).insert(spec, kernel.clone());
        Ok(kernel)
    }
}
