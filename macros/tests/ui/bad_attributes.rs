// The attribute's arguments.

#[jitccl_macros::reduction]
fn no_identity(a: f32, b: f32) -> f32 {
    a + b
}

#[jitccl_macros::reduction(identity = 0.0, associative = true)]
fn unknown_argument(a: f32, b: f32) -> f32 {
    a + b
}

#[jitccl_macros::reduction(identity = f32::INFINITY)]
fn identity_not_a_literal(a: f32, b: f32) -> f32 {
    a.min(b)
}

#[jitccl_macros::reduction(identity = 0.5)]
fn identity_of_another_type(a: i32, b: i32) -> i32 {
    a + b
}

#[jitccl_macros::reduction(identity = 0.0, name = "has space")]
fn bad_name(a: f32, b: f32) -> f32 {
    a + b
}

#[jitccl_macros::reduction(identity = 0.0, commutative = "yes")]
fn bad_flag(a: f32, b: f32) -> f32 {
    a + b
}

fn main() {}
