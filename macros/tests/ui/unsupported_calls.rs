// Function calls, unsupported methods and macros.

fn helper(x: f32) -> f32 {
    x
}

#[jitccl_macros::reduction(identity = 0.0)]
fn calls_a_function(a: f32, b: f32) -> f32 {
    helper(a) + b
}

#[jitccl_macros::reduction(identity = 0.0)]
fn calls_an_associated_function(a: f32, b: f32) -> f32 {
    f32::max(a, b)
}

#[jitccl_macros::reduction(identity = 0.0)]
fn unsupported_method(a: f32, b: f32) -> f32 {
    a.powi(2) + b
}

#[jitccl_macros::reduction(identity = 0.0)]
fn method_arity(a: f32, b: f32) -> f32 {
    a.min(b, b)
}

#[jitccl_macros::reduction(identity = 0.0)]
fn uses_a_macro(a: f32, b: f32) -> f32 {
    println!("{a}");
    a + b
}

#[jitccl_macros::reduction(identity = 0.0)]
fn macro_expression(a: f32, b: f32) -> f32 {
    dbg!(a) + b
}

fn main() {}
