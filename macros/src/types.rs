//! The types a reduction body computes with (`Prim`) and the element types a reduction is
//! defined for (`Elem`, one per jitccl `DataType`).

use proc_macro2::TokenStream;
use quote::quote;

/// A Rust primitive the body may compute with; each is a type of the generated C too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Prim {
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
}

pub const PRIM_NAMES: &str = "i8, u8, i32, u32, i64, u64, f32, f64";

impl Prim {
    pub fn from_name(s: &str) -> Option<Prim> {
        Some(match s {
            "i8" => Prim::I8,
            "u8" => Prim::U8,
            "i32" => Prim::I32,
            "u32" => Prim::U32,
            "i64" => Prim::I64,
            "u64" => Prim::U64,
            "f32" => Prim::F32,
            "f64" => Prim::F64,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Prim::I8 => "i8",
            Prim::U8 => "u8",
            Prim::I32 => "i32",
            Prim::U32 => "u32",
            Prim::I64 => "i64",
            Prim::U64 => "u64",
            Prim::F32 => "f32",
            Prim::F64 => "f64",
        }
    }

    /// The C spelling (typedefs of the kernel preludes, identical on both targets).
    pub fn c(self) -> &'static str {
        match self {
            Prim::I8 => "jc_i8",
            Prim::U8 => "jc_u8",
            Prim::I32 => "jc_i32",
            Prim::U32 => "jc_u32",
            Prim::I64 => "jc_i64",
            Prim::U64 => "jc_u64",
            Prim::F32 => "float",
            Prim::F64 => "double",
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Prim::F32 | Prim::F64)
    }

    pub fn is_int(self) -> bool {
        !self.is_float()
    }

    pub fn is_signed(self) -> bool {
        matches!(self, Prim::I8 | Prim::I32 | Prim::I64 | Prim::F32 | Prim::F64)
    }

    pub fn bits(self) -> u32 {
        match self {
            Prim::I8 | Prim::U8 => 8,
            Prim::I32 | Prim::U32 | Prim::F32 => 32,
            Prim::I64 | Prim::U64 | Prim::F64 => 64,
        }
    }

    /// The unsigned C type integer arithmetic of this type wraps in (C's signed overflow is
    /// undefined, and narrow types would be promoted to `int`).
    pub fn c_unsigned(self) -> &'static str {
        if self.bits() <= 32 {
            "jc_u32"
        } else {
            "jc_u64"
        }
    }

    /// Smallest and largest value of an integer type.
    pub fn int_range(self) -> (i128, i128) {
        match self {
            Prim::I8 => (i8::MIN as i128, i8::MAX as i128),
            Prim::U8 => (0, u8::MAX as i128),
            Prim::I32 => (i32::MIN as i128, i32::MAX as i128),
            Prim::U32 => (0, u32::MAX as i128),
            Prim::I64 => (i64::MIN as i128, i64::MAX as i128),
            Prim::U64 => (0, u64::MAX as i128),
            Prim::F32 | Prim::F64 => unreachable!("int_range of a float type"),
        }
    }

    /// A C condition, true exactly in kernels whose compute type `C` is this type.
    pub fn c_is_compute_type(self) -> String {
        if self.is_float() {
            format!("sizeof(C) == {} && (C)0.5 != (C)0", self.bits() / 8)
        } else {
            format!(
                "sizeof(C) == {} && (C)0.5 == (C)0 && ((C)-1 < (C)0) == {}",
                self.bits() / 8,
                self.is_signed() as u8
            )
        }
    }
}

/// An element type a reduction can be defined for: a jitccl `DataType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Elem {
    Prim(Prim),
    F16,
    BF16,
    F8E4M3,
    F8E5M2,
}

pub const ELEM_NAMES: &str = "i8, u8, i32, u32, i64, u64, f16, bf16, f32, f64, F8E4M3, F8E5M2";

impl Elem {
    /// From a type's last path segment (`f16` for `half::f16`) or a name in `types(...)`.
    pub fn from_name(s: &str) -> Option<Elem> {
        if let Some(p) = Prim::from_name(s) {
            return Some(Elem::Prim(p));
        }
        Some(match s {
            "f16" => Elem::F16,
            "bf16" => Elem::BF16,
            "F8E4M3" | "f8e4m3" => Elem::F8E4M3,
            "F8E5M2" | "f8e5m2" => Elem::F8E5M2,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Elem::Prim(p) => p.name(),
            Elem::F16 => "f16",
            Elem::BF16 => "bf16",
            Elem::F8E4M3 => "F8E4M3",
            Elem::F8E5M2 => "F8E5M2",
        }
    }

    /// The type the kernels (and the Rust reference) combine values of this type in.
    pub fn compute(self) -> Prim {
        match self {
            Elem::Prim(p) => p,
            _ => Prim::F32,
        }
    }

    /// Narrow floats are widened to f32, combined, and rounded back.
    pub fn is_narrow(self) -> bool {
        !matches!(self, Elem::Prim(_))
    }

    /// The `jitccl::DataType` variant.
    pub fn datatype(self) -> &'static str {
        match self {
            Elem::Prim(Prim::I8) => "I8",
            Elem::Prim(Prim::U8) => "U8",
            Elem::Prim(Prim::I32) => "I32",
            Elem::Prim(Prim::U32) => "U32",
            Elem::Prim(Prim::I64) => "I64",
            Elem::Prim(Prim::U64) => "U64",
            Elem::Prim(Prim::F32) => "F32",
            Elem::Prim(Prim::F64) => "F64",
            Elem::F16 => "F16",
            Elem::BF16 => "BF16",
            Elem::F8E4M3 => "F8E4M3",
            Elem::F8E5M2 => "F8E5M2",
        }
    }

    /// The Rust type, through the facade's re-exports.
    pub fn rust_type(self) -> TokenStream {
        match self {
            Elem::Prim(p) => {
                let id = proc_macro2::Ident::new(p.name(), proc_macro2::Span::call_site());
                quote!(#id)
            }
            Elem::F16 => quote!(::jitccl::half::f16),
            Elem::BF16 => quote!(::jitccl::half::bf16),
            Elem::F8E4M3 => quote!(::jitccl::float8::F8E4M3),
            Elem::F8E5M2 => quote!(::jitccl::float8::F8E5M2),
        }
    }
}
