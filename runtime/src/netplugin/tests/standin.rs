//! Stand-in plugins: v8 and v12 tables of Rust functions with a chosen behaviour (init
//! fails, no device, a device), so that the choice and the life of a network are checked
//! call by call, without a library.

use std::ffi::{c_char, c_int, CStr};
use std::ptr;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::sync::Arc;

use super::super::abi::{CommConfig, Logger, NetV11, NetV8, Opaque, Profiler, PropsV12, PropsV8, Res};
use super::super::select::{choose, Plugin};
use super::super::table::Table;
use crate::error::Error;

/// Contexts of the v12 stand-ins not yet finalized.
static LIVE: AtomicIsize = AtomicIsize::new(0);
/// Inits of the v8 stand-in that succeeds.
static V8_INITS: AtomicUsize = AtomicUsize::new(0);
/// What the v8 stand-in's init sets, as aws-ofi-nccl sets NCCL_PROTO.
const SET_BY_INIT: &str = "JITCCL_TORCH_BIND";

unsafe extern "C" fn init_v8(_log: Logger) -> Res {
    V8_INITS.fetch_add(1, Ordering::SeqCst);
    std::env::set_var(SET_BY_INIT, "standin");
    0
}

unsafe extern "C" fn init_v8_fails(_log: Logger) -> Res {
    2
}

unsafe extern "C" fn init_v12(ctx: *mut Opaque, comm_id: u64, config: *mut CommConfig, _: Logger, p: Profiler) -> Res {
    // No traffic class and no profiler are asked for.
    if unsafe { (*config).traffic_class } != -1 || !p.is_null() {
        return 4;
    }
    unsafe { *ctx = Box::into_raw(Box::new(comm_id)) as Opaque };
    LIVE.fetch_add(1, Ordering::SeqCst);
    0
}

unsafe extern "C" fn finalize_v12(ctx: Opaque) -> Res {
    drop(unsafe { Box::from_raw(ctx as *mut u64) });
    LIVE.fetch_sub(1, Ordering::SeqCst);
    0
}

unsafe extern "C" fn one_device(n: *mut c_int) -> Res {
    unsafe { *n = 1 };
    0
}

unsafe extern "C" fn no_device(n: *mut c_int) -> Res {
    unsafe { *n = 0 };
    0
}

/// Odd values a loader must make sense of: a negative speed, 0 grouped receives, no PCI path.
unsafe extern "C" fn props_v8(dev: c_int, p: *mut PropsV8) -> Res {
    if dev != 0 {
        return 4;
    }
    let p = unsafe { &mut *p };
    p.name = c"sd8".as_ptr() as *mut c_char;
    p.speed = -5;
    p.latency = 2.5;
    p.ptr_support = 1;
    p.max_recvs = 0;
    p.max_comms = 8;
    p.guid = 7;
    0
}

unsafe extern "C" fn props_v12(dev: c_int, p: *mut PropsV12) -> Res {
    if dev != 0 {
        return 4;
    }
    let p = unsafe { &mut *p };
    p.name = c"sd12".as_ptr() as *mut c_char;
    p.pci_path = c"/sys/devices/pci0000:00/0000:00:05.0".as_ptr() as *mut c_char;
    p.speed = 400_000;
    p.latency = 0.5;
    p.ptr_support = 3;
    p.max_recvs = 8;
    p.max_comms = 1024;
    p.reg_is_global = 1;
    p.force_flush = 1;
    p.rail_id = -1;
    0
}

type InitV8 = unsafe extern "C" fn(Logger) -> Res;
type Devices = unsafe extern "C" fn(*mut c_int) -> Res;

fn v8(name: &'static CStr, init: InitV8, devices: Devices) -> Table {
    Table::V8(Box::leak(Box::new(NetV8 {
        name: name.as_ptr(),
        init: Some(init),
        devices: Some(devices),
        get_properties: Some(props_v8),
        listen: None,
        connect: None,
        accept: None,
        reg_mr: None,
        _reg_mr_dma_buf: ptr::null(),
        dereg_mr: None,
        isend: None,
        irecv: None,
        iflush: None,
        test: None,
        close_send: None,
        close_recv: None,
        close_listen: None,
        _get_device_mr: ptr::null(),
        _irecv_consumed: ptr::null(),
    })))
}

fn v12(name: &'static CStr, devices: Devices) -> Table {
    Table::V12(Box::leak(Box::new(NetV11::<PropsV12> {
        name: name.as_ptr(),
        init: Some(init_v12),
        devices: Some(devices),
        get_properties: Some(props_v12),
        listen: None,
        connect: None,
        accept: None,
        reg_mr: None,
        _reg_mr_dma_buf: ptr::null(),
        dereg_mr: None,
        isend: None,
        irecv: None,
        iflush: None,
        test: None,
        close_send: None,
        close_recv: None,
        close_listen: None,
        _get_device_mr: ptr::null(),
        _irecv_consumed: ptr::null(),
        _make_vdevice: ptr::null(),
        finalize: Some(finalize_v12),
        _set_net_attr: ptr::null(),
    })))
}

fn plugin(library: &str, table: Table) -> Arc<Plugin> {
    Arc::new(Plugin::new(library, table))
}

// One test: the stand-ins count their calls in shared statics. It runs in a child process,
// where the v8 stand-in's init may change the environment without racing other tests.
#[test]
fn the_choice_and_each_versions_init_follow_nccl() {
    jitccl_plugins::in_child(
        module_path!(),
        "the_choice_and_each_versions_init_follow_nccl",
        &[(SET_BY_INIT, None)],
        || {
            let bad = plugin("standin-bad.so", v8(c"Bad", init_v8_fails, one_device));
            let all = [
                bad.clone(),
                plugin("standin-empty.so", v12(c"Empty", no_device)),
                plugin("standin-good.so", v12(c"Good", one_device)),
                plugin("standin-other.so", v8(c"Other", init_v8, one_device)),
            ];
            let live = || LIVE.load(Ordering::SeqCst);

            // No name: the first plugin that initializes with a device. Empty's context, inited
            // for nothing, is finalized at once.
            let net = choose(None, 11, &all).unwrap().expect("a plugin network");
            assert_eq!((net.name(), net.version(), net.library()), ("Good", 12, "standin-good.so"));
            assert_eq!(live(), 1, "Good's context only");
            let d = &net.devices()[0];
            assert_eq!(
                (d.name.as_str(), d.pci_path.as_deref()),
                ("sd12", Some("/sys/devices/pci0000:00/0000:00:05.0"))
            );
            assert_eq!(
                (d.speed_mbps, d.latency_us, d.ptr_support, d.max_recvs, d.max_comms),
                (400_000, 0.5, 3, 8, 1024)
            );
            assert!(d.force_flush && d.reg_is_global);
            // v11+: a context per communicator, finalized with the last clone.
            let second = choose(Some("good"), 12, &all).unwrap().expect("Good again");
            assert_eq!(live(), 2);
            let clone = net.clone();
            drop(net);
            assert_eq!(live(), 2, "a clone still holds the context");
            drop(clone);
            drop(second);
            assert_eq!(live(), 0);

            // Asked by name, case-insensitive; up to v10 init runs once per process, and what it
            // set in the environment is put back.
            for id in [13, 14] {
                let other = choose(Some("oTHER"), id, &all).unwrap().expect("Other");
                assert_eq!((other.name(), other.version()), ("Other", 8));
                let d = &other.devices()[0];
                assert_eq!((d.speed_mbps, d.max_recvs, d.pci_path.as_deref(), d.force_flush), (0, 1, None, false));
            }
            assert_eq!(V8_INITS.load(Ordering::SeqCst), 1);
            assert_eq!(std::env::var_os(SET_BY_INIT), None, "the plugin's change is undone");

            assert!(choose(Some("SOCKET"), 15, &all).unwrap().is_none(), "the built-in, asked");
            assert!(choose(None, 16, &[bad]).unwrap().is_none(), "no plugin serves: the built-in");

            // A skipped plugin asked by name says why; an unknown name lists what there is.
            let e = choose(Some("bad"), 17, &all).unwrap_err().to_string();
            assert!(e.contains("Bad (v8, standin-bad.so): init failed with 2 (ncclSystemError)"), "{e}");
            let e = choose(Some("Empty"), 18, &all).unwrap_err().to_string();
            assert!(e.contains("Empty (v12, standin-empty.so): it has no device"), "{e}");
            assert_eq!(live(), 0, "a skipped plugin is not inited again");
            let e = choose(Some("IB"), 19, &all).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
            assert!(
                e.to_string().contains(
                    "'IB' (Config.net_name / JITCCL_NET); the networks available are: Socket (built in), Bad (v8, \
                 standin-bad.so), Empty (v12, standin-empty.so), Good (v12, standin-good.so), Other (v8, \
                 standin-other.so)"
                ),
                "{e}"
            );

            // Calls a table lacks, and devices it does not have, are errors, not jumps.
            let net = choose(Some("Good"), 20, &all).unwrap().expect("Good");
            let e = net.listen(1).err().expect("no device 1");
            assert_eq!((e.network.as_str(), e.call, e.code), ("Good", "listen", 4), "{e}");
            let e = net.listen(0).err().expect("no listen in the table");
            assert_eq!((e.call, e.code, e.what), ("listen", 3, "the plugin's table has no such function"), "{e}");
            assert_eq!(e.to_string(), "Good: listen failed with 3 (the plugin's table has no such function)");
            // A table without iflush says so: a receive into GPU memory that needs one is staged.
            assert!(!net.has_iflush());
            drop(net);
            assert_eq!(live(), 0);
        },
    );
}
