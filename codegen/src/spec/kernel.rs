//! One generated kernel's specification (`KernelSpec`): its name, the rules that say which
//! combinations exist, and its optional specialization for a rank count.

use std::fmt;
use std::str::FromStr;

use super::CudaArch;
use super::{invalid, Algorithm, BuiltinOp, Collective, DataType, InvalidSpec, Protocol, RedOp, Target, Wire};

/// One generated kernel: `coll.algo.proto.dtype[.op][.wWIRE][@ranks]`, e.g.
/// `all_reduce.ring.ll.f32.sum`, specialized for 2 ranks `all_reduce.direct.simple.f32.sum@2`,
/// with the bf16 wire `all_reduce.ring.simple.f32.sum.wbf16`.
///
/// Collectives that only move data (broadcast, all_gather, sendrecv) are specialized for
/// bytes: their exact kernels exist for `u8` only and the runtime runs every datatype
/// through them; with another wire they are specialized for the float type they encode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelSpec {
    pub coll: Collective,
    pub algo: Algorithm,
    pub proto: Protocol,
    pub dtype: DataType,
    /// `Some` exactly for reducing collectives.
    pub op: Option<RedOp>,
    /// The rank count the kernel is specialized for (a constant in its code, so that its
    /// loops over ranks unroll), or `None`: any. A specialized kernel refuses a call of
    /// another rank count (`JC_ERR_SPECIALIZED`), never computing a wrong result.
    pub ranks: Option<u8>,
    /// How the FIFO steps carry the elements (`Wire::Exact`: as they are).
    pub wire: Wire,
}

/// The most ranks a kernel may be specialized for: the direct kernels' rank limit.
pub const MAX_SPECIALIZED_RANKS: usize = crate::abi::SYM_MAX_RANKS;

impl KernelSpec {
    /// Builds a spec and checks it is one that can be generated.
    pub fn new(
        coll: Collective, algo: Algorithm, proto: Protocol, dtype: DataType, op: Option<RedOp>,
    ) -> Result<Self, InvalidSpec> {
        let spec = KernelSpec { coll, algo, proto, dtype, op, ranks: None, wire: Wire::Exact };
        spec.validate()?;
        Ok(spec)
    }

    /// This kernel with its elements carried in `wire`.
    pub fn with_wire(self, wire: Wire) -> Result<Self, InvalidSpec> {
        let spec = KernelSpec { wire, ..self };
        spec.validate()?;
        Ok(spec)
    }

    /// This kernel specialized for `nranks` ranks.
    pub fn specialized_for(self, nranks: usize) -> Result<Self, InvalidSpec> {
        let too_many =
            || invalid(format!("a kernel is specialized for 1 to {MAX_SPECIALIZED_RANKS} ranks, not {nranks}"));
        let spec = KernelSpec { ranks: Some(u8::try_from(nranks).map_err(|_| too_many())?), ..self };
        spec.validate()?;
        Ok(spec)
    }

    /// Checks the combination, saying why it is not generated when it is not.
    pub fn validate(&self) -> Result<(), InvalidSpec> {
        if !self.coll.algorithms().contains(&self.algo) {
            return Err(invalid(format!(
                "{} has no {} algorithm (available: {})",
                self.coll,
                self.algo,
                names(self.coll.algorithms())
            )));
        }
        if !self.coll.has_kernel(self.algo) {
            return Err(invalid(format!(
                "{} with the {} algorithm runs as sendrecv rounds: it has no kernel of its own",
                self.coll, self.algo
            )));
        }
        if self.algo.is_direct() && self.proto != Protocol::Simple {
            return Err(invalid(format!(
                "the {} algorithm moves no FIFO steps: it has the simple protocol only",
                self.algo
            )));
        }
        match (self.coll.reduces(), self.op) {
            (true, None) => {
                return Err(invalid(format!("{} needs a reduction op", self.coll)));
            }
            (false, Some(_)) => {
                return Err(invalid(format!("{} does not reduce: it takes no op", self.coll)));
            }
            (false, None) if self.dtype != DataType::U8 && self.wire == Wire::Exact => {
                return Err(invalid(format!(
                    "{} only moves bytes: its kernel is specialized for u8 and serves every datatype",
                    self.coll
                )));
            }
            _ => {}
        }
        if let Some(n) = self.ranks {
            if n == 0 || n as usize > MAX_SPECIALIZED_RANKS {
                return Err(invalid(format!(
                    "a kernel is specialized for 1 to {MAX_SPECIALIZED_RANKS} ranks, not {n}"
                )));
            }
        }
        self.validate_wire()?;
        if let Some(RedOp::Custom(c)) = self.op {
            if !c.dtypes.contains(&self.dtype) {
                return Err(invalid(format!(
                    "custom op '{}' is not defined for {} (defined for: {})",
                    c.name,
                    self.dtype,
                    names(c.dtypes)
                )));
            }
            if !c.commutative && self.algo != Algorithm::Ring {
                return Err(invalid(format!(
                    "custom op '{}' is not commutative: the {} algorithm combines in an order \
                     that is not the ring's; use the ring algorithm",
                    c.name, self.algo
                )));
            }
        }
        Ok(())
    }

    /// The rules of a wire other than `Exact`: an algorithm whose kernel carries it
    /// ([`Wire::algorithms`]) on the Simple protocol, a float type wider than the wire's
    /// codes, and a sum (or average): the only ops whose fp32 accumulation the wire's error
    /// bounds describe.
    fn validate_wire(&self) -> Result<(), InvalidSpec> {
        let w = self.wire;
        if w == Wire::Exact {
            return Ok(());
        }
        w.check_dtype(self.dtype)?;
        let algos = Wire::algorithms(self.coll);
        if !algos.contains(&self.algo) || self.proto != Protocol::Simple {
            let names = algos.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ");
            return Err(invalid(format!(
                "the {w} wire runs {} on the simple protocol with the {names} algorithm(s), not {}/{}",
                self.coll, self.algo, self.proto
            )));
        }
        match self.op {
            None | Some(RedOp::Builtin(BuiltinOp::Sum | BuiltinOp::Avg)) => Ok(()),
            Some(op) => Err(invalid(format!("the {w} wire reduces with sum or avg only, not {op}"))),
        }
    }

    /// Checks that `target` can compile this spec.
    pub fn validate_for(&self, target: Target) -> Result<(), InvalidSpec> {
        self.validate()?;
        if let Target::Cuda { arch, .. } = target {
            if (self.dtype.is_fp8() || self.wire.is_fp8()) && arch < CudaArch::FP8 {
                let what = if self.dtype.is_fp8() { self.dtype.to_string() } else { format!("the {} wire", self.wire) };
                return Err(invalid(format!("{} needs {} or newer on CUDA (asked for {arch})", what, CudaArch::FP8)));
            }
        }
        Ok(())
    }

    /// Identifier-safe name, used as the kernel's symbol suffix and cache key part.
    pub fn symbol(&self) -> String {
        format!("jitccl_{}", self.to_string().replace(['.', ':'], "_").replace('@', "__ranks"))
    }

    /// Every valid spec with a built-in op and the exact wire (custom ops are added by their
    /// users; the other wires by the calls that ask for them).
    pub fn all() -> Vec<KernelSpec> {
        let mut out = Vec::new();
        for &coll in Collective::ALL {
            for &algo in coll.algorithms() {
                for &proto in Protocol::ALL {
                    if (algo.is_direct() && proto != Protocol::Simple) || !coll.has_kernel(algo) {
                        continue;
                    }
                    if coll.reduces() {
                        for &dtype in DataType::ALL {
                            for &op in BuiltinOp::ALL {
                                out.push(KernelSpec {
                                    coll,
                                    algo,
                                    proto,
                                    dtype,
                                    op: Some(op.into()),
                                    ranks: None,
                                    wire: Wire::Exact,
                                });
                            }
                        }
                    } else {
                        out.push(KernelSpec {
                            coll,
                            algo,
                            proto,
                            dtype: DataType::U8,
                            op: None,
                            ranks: None,
                            wire: Wire::Exact,
                        });
                    }
                }
            }
        }
        debug_assert!(out.iter().all(|s| s.validate().is_ok()));
        out
    }
}

fn names<T: fmt::Display>(items: &[T]) -> String {
    items.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for KernelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}.{}", self.coll, self.algo, self.proto, self.dtype)?;
        if let Some(op) = &self.op {
            write!(f, ".{op}")?;
        }
        if self.wire != Wire::Exact {
            write!(f, ".w{}", self.wire)?;
        }
        if let Some(n) = self.ranks {
            write!(f, "@{n}")?;
        }
        Ok(())
    }
}

impl FromStr for KernelSpec {
    type Err = InvalidSpec;
    /// Parses `coll.algo.proto.dtype[.op][.wWIRE][@ranks]` with a built-in op.
    fn from_str(s: &str) -> Result<Self, InvalidSpec> {
        let (name, ranks) = match s.split_once('@') {
            Some((name, n)) => {
                let n = n
                    .parse::<usize>()
                    .map_err(|_| invalid(format!("bad kernel spec '{s}': '@{n}' is not a rank count")))?;
                (name, Some(n))
            }
            None => (s, None),
        };
        let mut parts: Vec<&str> = name.split('.').collect();
        // No op's name starts with 'w': a last part that does names the wire.
        let wire = match parts.last().and_then(|p| p.strip_prefix('w')) {
            Some(w) if parts.len() > 4 => {
                parts.pop();
                w.parse()?
            }
            _ => Wire::Exact,
        };
        if !(parts.len() == 4 || parts.len() == 5) {
            return Err(invalid(format!(
                "bad kernel spec '{s}': expected coll.algo.proto.dtype[.op][.wWIRE][@ranks], e.g. all_reduce.ring.ll.f32.sum"
            )));
        }
        let op = match parts.get(4) {
            Some(o) => Some(RedOp::Builtin(o.parse()?)),
            None => None,
        };
        let spec = KernelSpec {
            coll: parts[0].parse()?,
            algo: parts[1].parse()?,
            proto: parts[2].parse()?,
            dtype: parts[3].parse()?,
            op,
            ranks: None,
            wire,
        };
        spec.validate()?;
        ranks.map_or(Ok(spec), |n| spec.specialized_for(n))
    }
}
