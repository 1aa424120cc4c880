// Bodies Rust itself would reject, reported at the offending expression.

#[jitccl_macros::reduction(identity = 0.0)]
fn integer_literal_for_float(a: f32, b: f32) -> f32 {
    a + b * 2
}

#[jitccl_macros::reduction(identity = 0.0)]
fn mixed_floats(a: f32, b: f32) -> f32 {
    let x: f64 = 1.0;
    a + x
}

#[jitccl_macros::reduction(identity = 0.0)]
fn float_remainder(a: f32, b: f32) -> f32 {
    a % b
}

#[jitccl_macros::reduction(identity = 0)]
fn sqrt_of_int(a: i32, b: i32) -> i32 {
    a.sqrt() + b
}

#[jitccl_macros::reduction(identity = 0)]
fn abs_of_unsigned(a: u32, b: u32) -> u32 {
    a.abs() + b
}

#[jitccl_macros::reduction(identity = 0)]
fn negate_unsigned(a: u64, b: u64) -> u64 {
    -a + b
}

#[jitccl_macros::reduction(identity = 0.0)]
fn ambiguous_receiver(a: f64, b: f64) -> f64 {
    a + 2.0.sqrt() * b
}

#[jitccl_macros::reduction(identity = 0)]
fn literal_out_of_range(a: u8, b: u8) -> u8 {
    a.min(300) + b
}

#[jitccl_macros::reduction(identity = 0.0)]
fn bool_result(a: f32, b: f32) -> f32 {
    a < b
}

#[jitccl_macros::reduction(identity = 0.0)]
fn clamp_bounds(a: f32, b: f32) -> f32 {
    (a + b).clamp(1.0, -1.0)
}

fn main() {}
