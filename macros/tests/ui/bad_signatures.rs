// Signatures a reduction cannot have.

#[jitccl_macros::reduction(identity = 0)]
fn three_arguments(a: i32, b: i32, c: i32) -> i32 {
    a + b + c
}

#[jitccl_macros::reduction(identity = 0)]
fn mixed_arguments(a: i32, b: i64) -> i32 {
    a
}

#[jitccl_macros::reduction(identity = 0)]
fn other_result(a: i32, b: i32) -> i64 {
    0
}

#[jitccl_macros::reduction(identity = 0)]
fn unsupported_element(a: i16, b: i16) -> i16 {
    a + b
}

#[jitccl_macros::reduction(identity = 0)]
fn mutable_argument(mut a: i32, b: i32) -> i32 {
    a + b
}

#[jitccl_macros::reduction(identity = 0)]
async fn asynchronous(a: i32, b: i32) -> i32 {
    a + b
}

#[jitccl_macros::reduction(identity = 0, types(f32, f64))]
fn bounded<T: Copy>(a: T, b: T) -> T {
    a
}

#[jitccl_macros::reduction(identity = 0)]
fn generic_without_types<T>(a: T, b: T) -> T {
    a
}

#[jitccl_macros::reduction(identity = 0, types(i32))]
fn types_on_a_concrete_fn(a: i32, b: i32) -> i32 {
    a
}

#[jitccl_macros::reduction(identity = 0.0, types(f32, f128))]
fn unknown_element_type<T>(a: T, b: T) -> T {
    a
}

#[jitccl_macros::reduction(identity = 0, types(f32, f64, i32))]
fn body_wrong_for_one_type<T>(a: T, b: T) -> T {
    (a * b).sqrt()
}

#[jitccl_macros::reduction(identity = 0.0)]
fn narrow_type_in_body(a: jitccl::half::f16, b: jitccl::half::f16) -> jitccl::half::f16 {
    let x: f16 = a;
    x
}

fn main() {}
