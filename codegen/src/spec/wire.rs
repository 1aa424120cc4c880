//! Wire formats: how a kernel's FIFO steps carry floating-point elements between ranks.
//! `Exact` sends the elements as they are; the others encode each step on the sender and
//! decode it on the receiver, which reduces in fp32 (see `templates/common/wire.h` for the
//! encodings and docs/guide.md, "Wire formats", for their error bounds).

use std::fmt;
use std::str::FromStr;

use super::{invalid, Algorithm, Collective, DataType, InvalidSpec};

/// A wire format of the user's: the extension point `#[wire_codec]` fills, as `CustomOp` is
/// `#[reduction]`'s. Its functions are C statements (the same text serves the host and CUDA)
/// over parameters `a` and `b`; each `return`s its result.
///
/// Equal and hashed by content, so that two codecs of one name but other code are other
/// kernels (the disk cache keys every kernel by its source besides).
#[derive(Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WireCodec {
    /// Identifier-safe name; part of spec names and kernel symbols.
    pub name: &'static str,
    /// Elements per scale (one of [`Wire::BLOCKS`]), or `None`: no scale, every scale 1.
    pub block: Option<u16>,
    /// Body of `float scale(float a)`: a block's scale from its largest finite magnitude
    /// `a` (0 for a block of zeros and non-finite values); empty without a block.
    pub scale: &'static str,
    /// Body of `jc_u8 encode(float a, float b)`: the code of value `a` in a block of
    /// scale `b`.
    pub encode: &'static str,
    /// Body of `float decode(jc_u8 a, float b)`: the value of code `a` in a block of
    /// scale `b`.
    pub decode: &'static str,
}

/// The format a kernel's FIFO steps carry its elements in. A kernel with another wire than
/// `Exact` decodes every received step to fp32, combines in fp32, and encodes what it
/// sends; a rank's final values that other ranks also receive are the decoded encoding, so
/// that every rank ends with the same bits.
///
/// Rounding is to nearest, ties to even. Per encoding of a value `v` (`a`: the largest
/// finite magnitude of `v`'s block of `block` elements in that step):
///
/// - `Bf16`: `|e| <= 2^-8 |v| + 2^-134` (the last term: f32 denormals); f32's range, so
///   nothing saturates.
/// - `Fp16`: `|e| <= 2^-11 |v| + 2^-25`; finite values beyond ±65504 become ±Inf, as a cast
///   to half makes them.
/// - `Fp8E4M3 { block }`: a power-of-two scale per block puts `a` in (208, 416], so nothing
///   saturates: `|e| <= 2^-4 |v| + 2^-17 a + 2^-136` (the last terms: values the scale
///   leaves in e4m3's subnormals; blocks below 2^-118 keep the scale 2^-126). The codes
///   ±448 carry ±Inf.
/// - `Fp8E5M2 { block }`: as e4m3, with `a` scaled into (28672, 57344]:
///   `|e| <= 2^-3 |v| + 2^-31 a + 2^-143`.
/// - `Int8 { block }`: the scale `a / 126`, codes -126..=126 (127, -127 and -128 carry
///   +Inf, -Inf and NaN): `|e| <= a / 250 + 2^-140`.
///
/// A ring AllReduce over `n` ranks encodes each partial sum once per hop, `n` times in all,
/// so with `u`, `c` and `t` the relative, block-relative and absolute terms above,
/// `M = sum_i |x_i|` of the element and `A` the largest `M` within `block` elements of it,
/// its error is at most `n ((u + 2^-24) M + c A + t) (1 + u)^n` (`2^-24`: the fp32
/// additions). The tree encodes each partial sum once per edge up and the root's sums once
/// for the way down, and the direct (two-shot) AllReduce each peer's input once and each
/// sum once: at most `n` encodings of a partial sum on any element's path, so the same
/// bound holds. NaN and ±Inf pass through as with `Exact`. A single rank sends nothing:
/// its result is exact.
///
/// A ring hop between ranks that share memory may carry partial sums as fp32 (the runtime
/// says so per connector, `Conn::wire_plain`): then only the hops through the network round
/// them, and with `e` encodings on an element's path (over h hosts whose ranks are together
/// on the ring, `min(h, n - 1) + 1` for AllReduce) the bound is
/// `(e (u M + c A + t) + n 2^-24 M) (1 + u)^e`. Final values travel as codes on every hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Wire {
    /// The elements as they are (the default).
    #[default]
    Exact,
    /// bfloat16, round to nearest even.
    Bf16,
    /// IEEE half, round to nearest even.
    Fp16,
    /// fp8 e4m3 with a power-of-two scale per `block` elements.
    Fp8E4M3 { block: u16 },
    /// fp8 e5m2 with a power-of-two scale per `block` elements.
    Fp8E5M2 { block: u16 },
    /// 8-bit integers with an fp32 scale per `block` elements.
    Int8 { block: u16 },
    /// A codec of the user's (`#[jitccl::wire_codec]`): 8-bit codes, with an fp32 scale per
    /// block where the codec has one. Its error is what its functions make it.
    Custom(&'static WireCodec),
}

impl Wire {
    /// The block of the scaled formats when a name gives none.
    pub const DEFAULT_BLOCK: u16 = 64;
    /// The blocks a scaled format may take.
    pub const BLOCKS: &'static [u16] = &[32, 64, 128, 256];

    /// The wire's code in the kernel source (`JC_WIRE`), 0 for `Exact`.
    pub fn code(self) -> u8 {
        match self {
            Wire::Exact => 0,
            Wire::Bf16 => 1,
            Wire::Fp16 => 2,
            Wire::Fp8E4M3 { .. } => 3,
            Wire::Fp8E5M2 { .. } => 4,
            Wire::Int8 { .. } => 5,
            Wire::Custom(_) => 6,
        }
    }

    /// The algorithms whose kernels carry a wire for `coll` (on the Simple protocol): the
    /// ring for every collective and point to point, and for AllReduce the tree and the
    /// direct (two-shot) algorithm too.
    pub fn algorithms(coll: Collective) -> &'static [Algorithm] {
        match coll {
            Collective::AllReduce => &[Algorithm::Ring, Algorithm::Tree, Algorithm::Direct],
            _ => &[Algorithm::Ring],
        }
    }

    /// The elements per scale, or `None` for the unscaled formats.
    pub fn block(self) -> Option<u16> {
        match self {
            Wire::Fp8E4M3 { block } | Wire::Fp8E5M2 { block } | Wire::Int8 { block } => Some(block),
            Wire::Custom(c) => c.block,
            _ => None,
        }
    }

    /// Bytes of one encoded element (without its block's scale); `None` for `Exact`.
    pub fn code_size(self) -> Option<usize> {
        match self {
            Wire::Exact => None,
            Wire::Bf16 | Wire::Fp16 => Some(2),
            _ => Some(1),
        }
    }

    /// Whether the wire is one of the fp8 formats (which need an fp8-capable GPU on CUDA).
    pub fn is_fp8(self) -> bool {
        matches!(self, Wire::Fp8E4M3 { .. } | Wire::Fp8E5M2 { .. })
    }

    /// Checks that elements of `dtype` may travel in this wire: a float type wider than
    /// its codes (and, for a codec of the user's, a block the kernels take).
    pub fn check_dtype(self, dtype: DataType) -> Result<(), InvalidSpec> {
        if let Wire::Custom(WireCodec { name, block: Some(b), .. }) = self {
            if !Wire::BLOCKS.contains(b) {
                return Err(invalid(format!(
                    "the wire codec '{name}' has a block of {b} elements: the blocks are {}",
                    blocks()
                )));
            }
        }
        let Some(size) = self.code_size() else { return Ok(()) };
        if !matches!(dtype, DataType::F32 | DataType::F16 | DataType::BF16) {
            return Err(invalid(format!("the {self} wire carries f32, f16 or bf16 elements, not {dtype}")));
        }
        if size >= dtype.size() {
            return Err(invalid(format!("the {self} wire is no narrower than {dtype}: send {dtype} exactly")));
        }
        Ok(())
    }

    /// The wire of `code` (as [`Wire::code`] gives it) with `block` elements per scale: the
    /// scaled formats take one of [`Wire::BLOCKS`] (`None`: [`Wire::DEFAULT_BLOCK`]), the
    /// others none. The inverse of `code` and `block`, for interfaces that name a wire by
    /// numbers (the C API's `jitcclWire_t`).
    pub fn from_code(code: u8, block: Option<u16>) -> Result<Wire, InvalidSpec> {
        let scaled = |make: fn(u16) -> Wire| {
            let b = block.unwrap_or(Wire::DEFAULT_BLOCK);
            match Wire::BLOCKS.contains(&b) {
                true => Ok(make(b)),
                false => Err(invalid(format!("a wire block of {b} elements: the blocks are {}", blocks()))),
            }
        };
        let unscaled = |w: Wire| match block {
            Some(_) => Err(invalid(format!("the {w} wire takes no block"))),
            None => Ok(w),
        };
        match code {
            0 => unscaled(Wire::Exact),
            1 => unscaled(Wire::Bf16),
            2 => unscaled(Wire::Fp16),
            3 => scaled(|block| Wire::Fp8E4M3 { block }),
            4 => scaled(|block| Wire::Fp8E5M2 { block }),
            5 => scaled(|block| Wire::Int8 { block }),
            _ => Err(invalid(format!("wire format {code}: the formats are 0 (exact) to 5 (int8)"))),
        }
    }
}

fn blocks() -> String {
    Wire::BLOCKS.iter().map(|b| b.to_string()).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for Wire {
    /// `exact`, `bf16`, `fp16`, `fp8e4m3b64`, `fp8e5m2b64`, `int8b64` (the number: the block),
    /// `custom:NAME` for a codec of the user's.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wire::Exact => f.write_str("exact"),
            Wire::Bf16 => f.write_str("bf16"),
            Wire::Fp16 => f.write_str("fp16"),
            Wire::Fp8E4M3 { block } => write!(f, "fp8e4m3b{block}"),
            Wire::Fp8E5M2 { block } => write!(f, "fp8e5m2b{block}"),
            Wire::Int8 { block } => write!(f, "int8b{block}"),
            Wire::Custom(c) => write!(f, "custom:{}", c.name),
        }
    }
}

impl FromStr for Wire {
    type Err = InvalidSpec;
    /// A name as `Display` writes it; the scaled formats' block may be left out (then
    /// [`Wire::DEFAULT_BLOCK`]). A codec of the user's has no name to parse: it is a Rust
    /// value.
    fn from_str(s: &str) -> Result<Self, InvalidSpec> {
        let lower = s.to_ascii_lowercase();
        let (name, block) = match lower.rsplit_once('b') {
            Some((name, b)) if !b.is_empty() && b.bytes().all(|c| c.is_ascii_digit()) => {
                (name, Some(b.parse::<u16>().map_err(|_| invalid(format!("a wire block of {b} elements")))?))
            }
            _ => (lower.as_str(), None),
        };
        let code = match name {
            "exact" => 0,
            "bf16" => 1,
            "fp16" => 2,
            "fp8e4m3" | "e4m3" => 3,
            "fp8e5m2" | "e5m2" => 4,
            "int8" => 5,
            _ => {
                return Err(invalid(format!(
                    "unknown wire '{s}' (expected one of: exact, bf16, fp16, fp8e4m3[bN], fp8e5m2[bN], int8[bN])"
                )))
            }
        };
        Wire::from_code(code, block).map_err(|e| invalid(format!("{} (in '{s}')", e.0)))
    }
}
