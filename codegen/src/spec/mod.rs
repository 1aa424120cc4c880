//! Typed kernel specifications: the vocabulary of a kernel (collective, algorithm, protocol,
//! datatype, reduction op, wire format) with each term's names and rules; `KernelSpec` (in `kernel`)
//! combines exactly one of each per generated kernel.

use std::fmt;
use std::str::FromStr;

pub use kernel::{KernelSpec, MAX_SPECIALIZED_RANKS};
pub use target::{CudaArch, CudaOutput, Target};
pub use wire::{Wire, WireCodec};

mod kernel;
mod target;
mod wire;

/// Why a spec cannot be generated, or a name cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidSpec(pub String);

pub(crate) fn invalid(msg: impl Into<String>) -> InvalidSpec {
    InvalidSpec(msg.into())
}

/// Declares a fieldless enum with its canonical lowercase name, accepted aliases, `ALL`,
/// `Display` and `FromStr` — the one place the name <-> variant mapping lives.
macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident, $what:literal { $($(#[$vm:meta])* $v:ident = $s:literal $(| $alias:literal)*),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vm])* $v),+ }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$v),+];
            /// Canonical lowercase name (used in spec names and kernel symbols).
            pub fn name(self) -> &'static str { match self { $($name::$v => $s),+ } }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.name()) }
        }
        impl FromStr for $name {
            type Err = InvalidSpec;
            fn from_str(s: &str) -> Result<Self, InvalidSpec> {
                match s.to_ascii_lowercase().as_str() {
                    $($s $(| $alias)* => Ok($name::$v),)+
                    _ => Err(invalid(format!(
                        concat!("unknown ", $what, " '{}' (expected one of: {})"),
                        s,
                        [$($s),+].join(", ")
                    ))),
                }
            }
        }
    };
}

named_enum!(
    /// A collective operation.
    Collective, "collective" {
        AllReduce = "all_reduce" | "allreduce",
        Broadcast = "broadcast" | "bcast",
        Reduce = "reduce",
        AllGather = "all_gather" | "allgather",
        ReduceScatter = "reduce_scatter" | "reducescatter",
        SendRecv = "sendrecv" | "send_recv",
        /// Block q of every rank's send buffer to rank q.
        AllToAll = "all_to_all" | "alltoall",
        /// Every rank's block to the root.
        Gather = "gather",
        /// Block q of the root's send buffer to rank q.
        Scatter = "scatter",
    }
);

named_enum!(
    /// How data moves between ranks.
    Algorithm, "algorithm" {
        Ring = "ring",
        Tree = "tree",
        /// Every rank sends its input to every rank and folds all of them in rank order:
        /// one hop of latency, n times the data; for small AllReduce.
        OneShot = "oneshot" | "one_shot",
        /// On registered (symmetric) buffers of ranks on one host: loads and stores straight
        /// into peers' buffers, no FIFO. AllReduce: two-shot (each rank reduces its slice
        /// from every peer's input and writes it into every peer's output).
        Direct = "direct",
        /// AllReduce on registered buffers: each rank reads every peer's whole input and
        /// folds it in rank order; for small sizes.
        DirectOneShot = "direct_oneshot",
        /// AllReduce in log2(n) rounds of pairwise swaps (rank positions differing in one
        /// bit), each rank sending log2(n) times the data: few hops and few messages, for
        /// small calls between hosts.
        RecursiveDoubling = "recursive_doubling" | "doubling",
    }
);

impl Algorithm {
    /// Whether the algorithm reads and writes peers' registered buffers directly: it needs
    /// every buffer of the call registered and runs with the Simple protocol only (it moves
    /// no FIFO steps; the protocol only names the kernel).
    pub fn is_direct(self) -> bool {
        matches!(self, Algorithm::Direct | Algorithm::DirectOneShot)
    }
}

named_enum!(
    /// Wire protocol of a connector FIFO (NCCL's Simple, LL and LL128).
    Protocol, "protocol" {
        /// Bulk slots; the sender posts a tail counter after a fence.
        Simple = "simple",
        /// 16-byte lines of two {4-byte data, 4-byte flag} halves: no fence, 50% efficiency.
        LL = "ll",
        /// 128-byte lines of 120 data bytes and one 8-byte flag.
        LL128 = "ll128",
    }
);

named_enum!(
    /// Element type. Names follow Rust; nccl-tests' names are accepted too.
    DataType, "datatype" {
        I8 = "i8" | "int8" | "char",
        U8 = "u8" | "uint8",
        I32 = "i32" | "int32" | "int",
        U32 = "u32" | "uint32",
        I64 = "i64" | "int64",
        U64 = "u64" | "uint64",
        F16 = "f16" | "half" | "float16",
        BF16 = "bf16" | "bfloat16",
        F32 = "f32" | "float" | "float32",
        F64 = "f64" | "double" | "float64",
        /// fp8 e4m3 ("fn": no infinity, saturating conversion).
        F8E4M3 = "f8e4m3" | "fp8_e4m3" | "e4m3",
        /// fp8 e5m2 (saturating conversion).
        F8E5M2 = "f8e5m2" | "fp8_e5m2" | "e5m2",
    }
);

impl DataType {
    pub const fn size(self) -> usize {
        match self {
            DataType::I8 | DataType::U8 | DataType::F8E4M3 | DataType::F8E5M2 => 1,
            DataType::F16 | DataType::BF16 => 2,
            DataType::I32 | DataType::U32 | DataType::F32 => 4,
            DataType::I64 | DataType::U64 | DataType::F64 => 8,
        }
    }
    pub fn is_float(self) -> bool {
        !self.is_integer()
    }
    pub fn is_integer(self) -> bool {
        matches!(self, DataType::I8 | DataType::U8 | DataType::I32 | DataType::U32 | DataType::I64 | DataType::U64)
    }
    pub fn is_signed_integer(self) -> bool {
        matches!(self, DataType::I8 | DataType::I32 | DataType::I64)
    }
    pub fn is_fp8(self) -> bool {
        matches!(self, DataType::F8E4M3 | DataType::F8E5M2)
    }
    /// The name nccl-tests prints in its `type` column.
    pub fn nccl_name(self) -> &'static str {
        match self {
            DataType::I8 => "int8",
            DataType::U8 => "uint8",
            DataType::I32 => "int32",
            DataType::U32 => "uint32",
            DataType::I64 => "int64",
            DataType::U64 => "uint64",
            DataType::F16 => "half",
            DataType::BF16 => "bfloat16",
            DataType::F32 => "float",
            DataType::F64 => "double",
            DataType::F8E4M3 => "f8e4m3",
            DataType::F8E5M2 => "f8e5m2",
        }
    }
}

named_enum!(
    /// The built-in reduction operators (custom ones are [`CustomOp`]).
    BuiltinOp, "reduction op" {
        Sum = "sum",
        Prod = "prod",
        Min = "min",
        Max = "max",
        /// Sum divided by the number of ranks (floats: each input pre-scaled by 1/n;
        /// integers: the sum divided at the end, truncating).
        Avg = "avg",
        /// Each rank's input multiplied by that rank's scalar, then summed.
        PreMulSum = "premulsum",
    }
);

/// A user-defined reduction: the extension point the `#[reduction]` proc-macro fills.
///
/// `body` is C source for the body of `C combine(C a, C b)` where `C` is the compute type
/// (the element type itself, `float` for f16/bf16/fp8). The same text serves both targets.
/// Equal and hashed by content, so an edited body is a different kernel.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CustomOp {
    /// Identifier-safe name; part of spec names and kernel symbols.
    pub name: &'static str,
    /// C statements forming the combine function body; must `return` a value.
    pub body: &'static str,
    /// Identity element as a C literal of the compute type (e.g. `0.0f`).
    pub identity: &'static str,
    /// Whether `combine(a, b) == combine(b, a)`; tree algorithms require it.
    pub commutative: bool,
    /// The element types the body is valid for.
    pub dtypes: &'static [DataType],
}

/// A reduction operator: built in or custom.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RedOp {
    Builtin(BuiltinOp),
    Custom(&'static CustomOp),
}

impl RedOp {
    pub fn name(&self) -> &'static str {
        match self {
            RedOp::Builtin(b) => b.name(),
            RedOp::Custom(c) => c.name,
        }
    }
}

impl From<BuiltinOp> for RedOp {
    fn from(b: BuiltinOp) -> Self {
        RedOp::Builtin(b)
    }
}

impl fmt::Display for RedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedOp::Builtin(b) => write!(f, "{b}"),
            RedOp::Custom(c) => write!(f, "custom:{}", c.name),
        }
    }
}

impl Collective {
    /// Whether the collective combines values (and so needs a reduction op).
    pub fn reduces(self) -> bool {
        matches!(self, Collective::AllReduce | Collective::Reduce | Collective::ReduceScatter)
    }
    pub fn algorithms(self) -> &'static [Algorithm] {
        match self {
            Collective::AllReduce => &[
                Algorithm::Ring,
                Algorithm::Tree,
                Algorithm::OneShot,
                Algorithm::Direct,
                Algorithm::DirectOneShot,
                Algorithm::RecursiveDoubling,
            ],
            Collective::SendRecv => &[Algorithm::Ring, Algorithm::Direct],
            _ => &[Algorithm::Ring, Algorithm::Direct],
        }
    }

    /// Whether the collective's FIFO algorithm (the ring) is point-to-point rounds: one
    /// sendrecv launch per peer, made by the runtime, with no kernel of its own.
    pub fn in_rounds(self) -> bool {
        matches!(self, Collective::AllToAll | Collective::Gather | Collective::Scatter)
    }

    /// Whether `algo` of this collective has a kernel of its own.
    pub fn has_kernel(self, algo: Algorithm) -> bool {
        (algo.is_direct() || !self.in_rounds()) && self.algorithms().contains(&algo)
    }
}

#[cfg(test)]
mod tests;
