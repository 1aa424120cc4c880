//! Who runs a stream's launches: a caller that synchronizes runs them on its own thread (a
//! blocking call), after which the stream stops waking its own thread for each new launch;
//! a launch that nobody synchronizes must still run, on the stream's thread.

use std::time::{Duration, Instant};

use jitccl::{Comm, Config, Op};

#[test]
fn a_launch_nobody_synchronizes_still_runs_after_blocking_calls() {
    let cfg = Config { timeout: Some(Duration::from_secs(60)), ..Config::default() };
    for n in [2, 3] {
        let comms = Comm::init_all(n, &cfg).unwrap();
        let want = (n * (n + 1) / 2) as f32;
        std::thread::scope(|s| {
            for c in &comms {
                s.spawn(move || {
                    let r = c.rank();
                    // Bound to its rank's CPUs, the thread runs its synchronized calls itself.
                    if let Some(cpus) = c.bind_current_thread().unwrap() {
                        let now = std::thread::available_parallelism().unwrap().get();
                        assert_eq!(now, cpus.len(), "rank {r}: the thread is not bound to {cpus:?}");
                    }
                    let stream = c.device().stream().unwrap();
                    let send = c.device().alloc_from(&[(r + 1) as f32; 33]).unwrap();
                    let recv = c.device().alloc::<f32>(33).unwrap();
                    for i in 0..50 {
                        c.all_reduce(&send, &recv, 33, Op::Sum, &stream).unwrap();
                        stream.synchronize().unwrap();
                        assert_eq!(recv.to_vec(), vec![want; 33], "rank {r}, blocking call {i}");
                    }
                    let late = c.device().alloc::<f32>(33).unwrap();
                    c.all_reduce(&send, &late, 33, Op::Sum, &stream).unwrap();
                    let t0 = Instant::now();
                    while !stream.is_idle() {
                        assert!(
                            t0.elapsed() < Duration::from_secs(20),
                            "rank {r}: the launch nobody waits for never ran"
                        );
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    stream.synchronize().unwrap();
                    assert_eq!(late.to_vec(), vec![want; 33], "rank {r}: the launch nobody waited for");
                });
            }
        });
    }
}

/// CUDA graphs are for CUDA streams: a host stream refuses a capture, saying so, and
/// stays usable.
#[test]
fn a_host_stream_refuses_a_graph_capture() {
    let dev = jitccl::Device::host(0);
    let s = dev.stream().unwrap();
    let e = s.begin_capture().unwrap_err();
    assert!(matches!(e, jitccl::Error::Unsupported(_)) && e.to_string().contains("CUDA graphs"), "{e}");
    let e = s.end_capture().unwrap_err();
    assert!(e.to_string().contains("CUDA graphs"), "{e}");
    s.synchronize().unwrap();
}
