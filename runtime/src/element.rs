//! Rust element types that map to a jitccl [`DataType`].

use jitccl_codegen::DataType;

/// A plain-old-data element a device buffer can hold.
///
/// # Safety
/// Implementors must be `Copy` types with no padding and no invalid bit patterns, whose size
/// is `DTYPE.size()`.
pub unsafe trait Element: Copy + Send + Sync + std::fmt::Debug + PartialEq + 'static {
    const DTYPE: DataType;
}

macro_rules! element {
    ($($t:ty => $d:ident),+ $(,)?) => {$(
        // SAFETY: plain numeric types of exactly the datatype's size.
        unsafe impl Element for $t { const DTYPE: DataType = DataType::$d; }
        const _: () = assert!(size_of::<$t>() == DataType::$d.size());
    )+};
}

element!(
    i8 => I8, u8 => U8, i32 => I32, u32 => U32, i64 => I64, u64 => U64,
    f32 => F32, f64 => F64, half::f16 => F16, half::bf16 => BF16,
    float8::F8E4M3 => F8E4M3, float8::F8E5M2 => F8E5M2,
);
