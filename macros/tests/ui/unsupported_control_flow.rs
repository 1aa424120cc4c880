// Loops, match, return, if without else, mutation.

#[jitccl_macros::reduction(identity = 0)]
fn loops(a: i32, b: i32) -> i32 {
    let s = a;
    for i in 0..b {
        let _ = i;
    }
    s
}

#[jitccl_macros::reduction(identity = 0)]
fn while_loop(a: i32, b: i32) -> i32 {
    while a > b {}
    a
}

#[jitccl_macros::reduction(identity = 0)]
fn matches(a: i32, b: i32) -> i32 {
    match a {
        0 => b,
        _ => a,
    }
}

#[jitccl_macros::reduction(identity = 0)]
fn returns(a: i32, b: i32) -> i32 {
    if a > b {
        return a;
    }
    b
}

#[jitccl_macros::reduction(identity = 0)]
fn if_without_else(a: i32, b: i32) -> i32 {
    let c = if a > b { a };
    c
}

#[jitccl_macros::reduction(identity = 0)]
fn mutable(a: i32, b: i32) -> i32 {
    let mut s = a;
    s += b;
    s
}

#[jitccl_macros::reduction(identity = 0)]
fn assigns(a: i32, b: i32) -> i32 {
    let s = a;
    s = b;
    s
}

#[jitccl_macros::reduction(identity = 0)]
fn no_value(a: i32, b: i32) -> i32 {
    let s = a + b;
}

fn main() {}
