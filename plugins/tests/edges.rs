//! The edge-case plugins a loader is tested with: only the v8 symbol, init failing, no
//! devices, a send that fails on purpose, and the GPU stand-in on host memory.

mod support;

use jitccl_plugins::{EDGE_FAILSEND, EDGE_GPU, EDGE_INITFAIL, EDGE_NODEV, EDGE_V8ONLY};
use support::{expect_ok, run_one, run_pair, Spec};

#[test]
fn v8only_exports_one_symbol_and_moves_data() {
    let run = run_one(&Spec::loopback(EDGE_V8ONLY, 8), &["symbols"]);
    expect_ok(&run, "listing symbols");
    assert_eq!(run.stdout.trim(), "symbols: v8");
    let spec = Spec::loopback(EDGE_V8ONLY, 8);
    let (recv, send) = run_pair(&spec, &spec, "data");
    for run in [&recv, &send] {
        assert!(run.stdout.starts_with("name: EdgeV8\n") && run.stdout.ends_with("OK\n"), "{}", run.stdout);
    }
}

#[test]
fn initfail_fails_init_in_both_tables() {
    for version in [8, 12] {
        let run = run_one(&Spec::loopback(EDGE_INITFAIL, version), &["info"]);
        expect_ok(&run, "info");
        // ncclInternalError is 3.
        assert_eq!(run.stdout, "name: EdgeInitFail\ninit failed: rc 3\n", "v{version}");
    }
}

#[test]
fn nodev_reports_no_device() {
    for version in [8, 12] {
        let run = run_one(&Spec::loopback(EDGE_NODEV, version), &["info"]);
        expect_ok(&run, "info");
        assert_eq!(run.stdout, "name: EdgeNoDev\ndevices: 0\n", "v{version}");
    }
}

#[test]
fn failsend_fails_the_nth_send_and_everything_after_it() {
    let spec = Spec::loopback(EDGE_FAILSEND, 12).with_env("JITCCL_EDGE_FAIL_SEND", "3");
    let (recv, send) = run_pair(&spec, &spec, "failsend");
    let both = support::describe_pair(&recv, &send);
    // ncclSystemError is 2: for send 3 itself, the in-flight send 2, and the later send 4.
    for line in ["isend 3 failed: rc 2", "test of isend 2 after the failure: rc 2", "isend 4 after the failure: rc 2"] {
        assert!(send.stdout.contains(line), "missing '{line}'\n{both}");
    }
    // Send 1 arrives; send 2 may (it was handed to the network before the failure); never more.
    assert!(recv.stdout.contains("received 1 messages") || recv.stdout.contains("received 2 messages"), "{both}");
}

/// Without a GPU the stand-in still moves host memory, reports NCCL_PTR_HOST | NCCL_PTR_CUDA
/// (3), and refuses host memory registered as NCCL_PTR_CUDA (the driver's data scenario
/// checks that before it registers as NCCL_PTR_HOST).
#[test]
fn gpu_standin_reports_gpu_memory_moves_host_memory_and_refuses_the_wrong_kind() {
    let run = run_one(&Spec::loopback(EDGE_GPU, 12), &["info"]);
    expect_ok(&run, "info");
    assert!(run.stdout.contains("name=edgegpu0 pci=- speed=10000 ptrSupport=3 maxRecvs=1"), "{}", run.stdout);
    let spec = Spec::loopback(EDGE_GPU, 12);
    let (recv, send) = run_pair(&spec, &spec, "data");
    for run in [&recv, &send] {
        assert!(run.stdout.starts_with("name: EdgeGpu\n") && run.stdout.ends_with("OK\n"), "{}", run.stdout);
    }
}
