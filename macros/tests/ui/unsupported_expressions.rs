// Expressions outside the supported subset.

#[jitccl_macros::reduction(identity = 0.0)]
fn constants(a: f32, b: f32) -> f32 {
    a.max(b).min(f32::MAX)
}

#[jitccl_macros::reduction(identity = 0.0)]
fn unknown_name(a: f32, b: f32) -> f32 {
    a + c
}

#[jitccl_macros::reduction(identity = 0.0)]
fn closure(a: f32, b: f32) -> f32 {
    let f = |x: f32| x * 2.0;
    a + b
}

#[jitccl_macros::reduction(identity = 0.0)]
fn tuples(a: f32, b: f32) -> f32 {
    let t = (a, b);
    a
}

#[jitccl_macros::reduction(identity = 0.0)]
fn arrays(a: f32, b: f32) -> f32 {
    [a, b][0]
}

#[jitccl_macros::reduction(identity = 0.0)]
fn references(a: f32, b: f32) -> f32 {
    let r = &a;
    b
}

#[jitccl_macros::reduction(identity = 0)]
fn strings(a: u8, b: u8) -> u8 {
    let s = "x";
    a
}

#[jitccl_macros::reduction(identity = 0)]
fn patterns(a: i32, b: i32) -> i32 {
    let (x, y) = (a, b);
    x
}

#[jitccl_macros::reduction(identity = 0)]
fn unsupported_cast(a: i32, b: i32) -> i32 {
    (a as i16) as i32 + b
}

#[jitccl_macros::reduction(identity = 0)]
fn items(a: i32, b: i32) -> i32 {
    const K: i32 = 2;
    a + b
}

fn main() {}
