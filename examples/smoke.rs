use jitccl::{Comm, Config, Op, Protocol, Algorithm};
use std::time::{Duration, Instant};
fn main() {
    let n: usize = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(2);
    let count: usize = std::env::args().nth(2).map(|s| s.parse().unwrap()).unwrap_or(7);
    let cfg = Config { nchannels: Some(1), algo: Some(Algorithm::Ring), proto: Some(Protocol::Simple), timeout: Some(Duration::from_secs(5)), slot_bytes: Some([256, 64, 256]) };
    let comms = Comm::init_all(n, &cfg).unwrap();
    let streams: Vec<_> = comms.iter().map(|c| c.device().stream().unwrap()).collect();
    let bufs: Vec<_> = comms.iter().map(|c| c.device().alloc_from(&vec![1.0f32 + c.rank() as f32; count]).unwrap()).collect();
    for it in 0..3 {
        let t = Instant::now();
        for r in 0..n { comms[r].all_reduce(&bufs[r], &bufs[r], count, Op::Sum, &streams[r]).unwrap(); }
        for s in &streams { if let Err(e) = s.synchronize() { println!("err {e}"); } }
        println!("iter {it}: {:?} first {:?}", t.elapsed(), &bufs[0].to_vec()[..count.min(4)]);
    }
}
