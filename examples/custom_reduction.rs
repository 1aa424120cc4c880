//! A user-defined reduction: `#[jitccl::reduction]` turns a Rust function into an op that
//! every reducing collective's kernel is generated for, and keeps the function as its
//! reference. Run with `cargo run --example custom_reduction`.

use jitccl::{Comm, Config, DeviceBuffer, Op};

/// The element of largest magnitude (as a magnitude).
#[jitccl::reduction(identity = 0.0)]
fn absmax(a: f32, b: f32) -> f32 {
    let x = a.abs();
    let y = b.abs();
    if x > y {
        x
    } else {
        y
    }
}

/// A sum that saturates at 100, for several element types.
#[jitccl::reduction(identity = 0, types(i32, u8, f32, f64))]
fn capped_sum<T>(a: T, b: T) -> T {
    (a + b).min(100 as T)
}

fn main() -> Result<(), jitccl::Error> {
    let (nranks, count) = (4, 6);
    let comms = Comm::init_all(nranks, &Config::default())?;
    let streams = comms.iter().map(|c| c.device().stream()).collect::<Result<Vec<_>, _>>()?;

    // Rank r holds (i - 3) * (r + 1) * (-1)^r.
    let input = |r: usize, i: usize| (i as f32 - 3.0) * (r + 1) as f32 * if r.is_multiple_of(2) { 1.0 } else { -1.0 };
    let mut bufs: Vec<DeviceBuffer<f32>> = Vec::new();
    for (r, (c, s)) in comms.iter().zip(&streams).enumerate() {
        let send = c.device().alloc_from(&(0..count).map(|i| input(r, i)).collect::<Vec<_>>())?;
        let recv = c.device().alloc::<f32>(count)?;
        c.all_reduce(&send, &recv, count, Op::custom(&ABSMAX), s)?;
        bufs.push(recv);
    }
    for s in &streams {
        s.synchronize()?;
    }
    let want: Vec<f32> = (0..count).map(|i| (1..nranks).fold(input(0, i), |acc, r| absmax(acc, input(r, i)))).collect();
    println!("all_reduce(absmax) over {nranks} ranks: {:?}", bufs[0].to_vec());
    println!("Rust reference:                      {want:?}");
    assert!(bufs.iter().all(|b| b.to_vec() == want), "a rank disagrees with the reference");

    // The generic op on bytes: reduce to rank 0.
    let mut out = None;
    for (r, (c, s)) in comms.iter().zip(&streams).enumerate() {
        let send = c.device().alloc_from(&[10u8 * r as u8, 40, 7])?;
        let recv = c.device().alloc::<u8>(3)?;
        c.reduce(&send, &recv, 3, Op::custom(&CAPPED_SUM), 0, s)?;
        if r == 0 {
            out = Some(recv);
        }
    }
    for s in &streams {
        s.synchronize()?;
    }
    let got = out.expect("rank 0").to_vec();
    println!("reduce(capped_sum) of u8 to rank 0:  {got:?} (capped_sum(60, 40) = {})", capped_sum(60u8, 40u8));
    assert_eq!(got, vec![60, 100, 28]);

    println!("\nThe C body generated for absmax (the same text for the host and CUDA):{}", ABSMAX.body);
    println!("and for capped_sum:{}", CAPPED_SUM.body);
    Ok(())
}
