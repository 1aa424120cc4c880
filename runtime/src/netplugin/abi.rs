//! NCCL's network plugin interface, versions 8 to 12, as the C side lays it out: each
//! version's function table (exported as `ncclNetPlugin_vN`) and device properties. Only
//! layouts live here; `table` adapts the versions to one set of calls.
//!
//! Every function pointer is an `Option`: a plugin may leave entries NULL, and calling one
//! must be an error, not a jump to address 0. Entries jitccl never calls are typed as
//! plain pointers: they only hold their place in the layout.

use std::ffi::{c_char, c_int, c_void};

/// `ncclResult_t`.
pub(super) type Res = c_int;
/// A comm, request, memory handle or context: opaque to the host.
pub(super) type Opaque = *mut c_void;
/// The logger handed to `init` (`ncclDebugLogger_t`).
pub(super) use crate::plugin::logger::Logger;
/// The profiler callback of v10+ (jitccl passes none).
pub(super) type Profiler = *const c_void;

pub(super) const SUCCESS: Res = 0;
pub(super) const INTERNAL_ERROR: Res = 3;
pub(super) const INVALID_ARGUMENT: Res = 4;
pub(super) const INVALID_USAGE: Res = 5;

/// `NCCL_PTR_HOST`: host memory.
pub(crate) const PTR_HOST: u32 = 0x1;
/// `NCCL_PTR_CUDA`: the device reaches GPU memory directly.
pub(crate) const PTR_CUDA: u32 = 0x2;
/// `NCCL_PTR_DMABUF`: GPU memory through dma-buf.
pub(crate) const PTR_DMABUF: u32 = 0x4;

/// `NCCL_NET_TRAFFIC_CLASS_UNDEF`: no traffic class asked.
pub(super) const TRAFFIC_CLASS_UNDEF: c_int = -1;

/// The name of an `ncclResult_t`.
pub(super) fn result_name(code: Res) -> &'static str {
    match code {
        0 => "ncclSuccess",
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        8 => "ncclTimeout",
        _ => "not an ncclResult_t",
    }
}

/// Device properties of v8 (64 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(super) struct PropsV8 {
    pub name: *mut c_char,
    pub pci_path: *mut c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    /// Mbps.
    pub speed: c_int,
    pub port: c_int,
    /// Microseconds.
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: c_int,
    pub net_device_version: c_int,
}

/// The physical devices a virtual NIC merges: 4 at most up to v11, 8 from v12.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(super) struct VirtualDevice<const N: usize> {
    pub ndevs: c_int,
    pub devs: [c_int; N],
}

/// Device properties of v9 and v10 (104 bytes): v8's with `forceFlush`, the virtual-device
/// description and the transfer limits.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(super) struct PropsV9 {
    pub name: *mut c_char,
    pub pci_path: *mut c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub force_flush: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: c_int,
    pub net_device_version: c_int,
    pub vprops: VirtualDevice<4>,
    pub max_p2p_bytes: usize,
    pub max_coll_bytes: usize,
}

/// Device properties of v11 (112 bytes): v9's with the multi-request size.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(super) struct PropsV11 {
    pub name: *mut c_char,
    pub pci_path: *mut c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub force_flush: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: c_int,
    pub net_device_version: c_int,
    pub vprops: VirtualDevice<4>,
    pub max_p2p_bytes: usize,
    pub max_coll_bytes: usize,
    pub max_multi_request_size: c_int,
}

/// Device properties of v12 (128 bytes): v11's with virtual NICs of up to 8 devices, the
/// rail and the plane.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(super) struct PropsV12 {
    pub name: *mut c_char,
    pub pci_path: *mut c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub force_flush: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: c_int,
    pub net_device_version: c_int,
    pub vprops: VirtualDevice<8>,
    pub max_p2p_bytes: usize,
    pub max_coll_bytes: usize,
    pub max_multi_request_size: c_int,
    pub rail_id: i16,
    pub plane_id: i16,
}

/// `ncclNetCommConfig_vN` (v10+).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(super) struct CommConfig {
    pub traffic_class: c_int,
}

// Entries of the same type in every version.
type Accept = unsafe extern "C" fn(listen: Opaque, recv: *mut Opaque, dev_handle: *mut Opaque) -> Res;
type RegMr = unsafe extern "C" fn(comm: Opaque, data: *mut c_void, size: usize, kind: c_int, mh: *mut Opaque) -> Res;
type DeregMr = unsafe extern "C" fn(comm: Opaque, mh: Opaque) -> Res;
type Test = unsafe extern "C" fn(req: Opaque, done: *mut c_int, sizes: *mut c_int) -> Res;
type Close = unsafe extern "C" fn(comm: Opaque) -> Res;
/// `iflush`: sizes are `int` in every version.
pub(super) type Iflush = unsafe extern "C" fn(
    recv: Opaque,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut c_int,
    mhs: *mut Opaque,
    req: *mut Opaque,
) -> Res;
type Devices = unsafe extern "C" fn(ndev: *mut c_int) -> Res;

/// `ncclNet_v8_t`: sizes are `int`.
#[repr(C)]
pub(super) struct NetV8 {
    pub name: *const c_char,
    pub init: Option<unsafe extern "C" fn(log: Logger) -> Res>,
    pub devices: Option<Devices>,
    pub get_properties: Option<unsafe extern "C" fn(dev: c_int, props: *mut PropsV8) -> Res>,
    pub listen: Option<unsafe extern "C" fn(dev: c_int, handle: *mut c_void, listen: *mut Opaque) -> Res>,
    pub connect: Option<
        unsafe extern "C" fn(dev: c_int, handle: *mut c_void, send: *mut Opaque, dev_handle: *mut Opaque) -> Res,
    >,
    pub accept: Option<Accept>,
    pub reg_mr: Option<RegMr>,
    pub _reg_mr_dma_buf: *const c_void,
    pub dereg_mr: Option<DeregMr>,
    pub isend: Option<
        unsafe extern "C" fn(
            send: Opaque,
            data: *mut c_void,
            size: c_int,
            tag: c_int,
            mh: Opaque,
            req: *mut Opaque,
        ) -> Res,
    >,
    pub irecv: Option<
        unsafe extern "C" fn(
            recv: Opaque,
            n: c_int,
            data: *mut *mut c_void,
            sizes: *mut c_int,
            tags: *mut c_int,
            mhs: *mut Opaque,
            req: *mut Opaque,
        ) -> Res,
    >,
    pub iflush: Option<Iflush>,
    pub test: Option<Test>,
    pub close_send: Option<Close>,
    pub close_recv: Option<Close>,
    pub close_listen: Option<Close>,
    pub _get_device_mr: *const c_void,
    pub _irecv_consumed: *const c_void,
}

/// `ncclNet_v9_t`: v8's with `size_t` sizes in `isend`/`irecv` and `makeVDevice`.
#[repr(C)]
pub(super) struct NetV9 {
    pub name: *const c_char,
    pub init: Option<unsafe extern "C" fn(log: Logger) -> Res>,
    pub devices: Option<Devices>,
    pub get_properties: Option<unsafe extern "C" fn(dev: c_int, props: *mut PropsV9) -> Res>,
    pub listen: Option<unsafe extern "C" fn(dev: c_int, handle: *mut c_void, listen: *mut Opaque) -> Res>,
    pub connect: Option<
        unsafe extern "C" fn(dev: c_int, handle: *mut c_void, send: *mut Opaque, dev_handle: *mut Opaque) -> Res,
    >,
    pub accept: Option<Accept>,
    pub reg_mr: Option<RegMr>,
    pub _reg_mr_dma_buf: *const c_void,
    pub dereg_mr: Option<DeregMr>,
    pub isend: Option<
        unsafe extern "C" fn(
            send: Opaque,
            data: *mut c_void,
            size: usize,
            tag: c_int,
            mh: Opaque,
            req: *mut Opaque,
        ) -> Res,
    >,
    pub irecv: Option<
        unsafe extern "C" fn(
            recv: Opaque,
            n: c_int,
            data: *mut *mut c_void,
            sizes: *mut usize,
            tags: *mut c_int,
            mhs: *mut Opaque,
            req: *mut Opaque,
        ) -> Res,
    >,
    pub iflush: Option<Iflush>,
    pub test: Option<Test>,
    pub close_send: Option<Close>,
    pub close_recv: Option<Close>,
    pub close_listen: Option<Close>,
    pub _get_device_mr: *const c_void,
    pub _irecv_consumed: *const c_void,
    pub _make_vdevice: *const c_void,
}

/// `isend` from v10: a profiler handle before the request.
type IsendV10 = unsafe extern "C" fn(
    send: Opaque,
    data: *mut c_void,
    size: usize,
    tag: c_int,
    mh: Opaque,
    phandle: *mut c_void,
    req: *mut Opaque,
) -> Res;
/// `irecv` from v10: profiler handles before the request.
type IrecvV10 = unsafe extern "C" fn(
    recv: Opaque,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut usize,
    tags: *mut c_int,
    mhs: *mut Opaque,
    phandles: *mut *mut c_void,
    req: *mut Opaque,
) -> Res;

/// `ncclNet_v10_t`: `init` takes a profiler callback, `connect` a comm config, `isend` and
/// `irecv` profiler handles.
#[repr(C)]
pub(super) struct NetV10 {
    pub name: *const c_char,
    pub init: Option<unsafe extern "C" fn(log: Logger, prof: Profiler) -> Res>,
    pub devices: Option<Devices>,
    pub get_properties: Option<unsafe extern "C" fn(dev: c_int, props: *mut PropsV9) -> Res>,
    pub listen: Option<unsafe extern "C" fn(dev: c_int, handle: *mut c_void, listen: *mut Opaque) -> Res>,
    pub connect: Option<
        unsafe extern "C" fn(
            dev: c_int,
            config: *mut CommConfig,
            handle: *mut c_void,
            send: *mut Opaque,
            dev_handle: *mut Opaque,
        ) -> Res,
    >,
    pub accept: Option<Accept>,
    pub reg_mr: Option<RegMr>,
    pub _reg_mr_dma_buf: *const c_void,
    pub dereg_mr: Option<DeregMr>,
    pub isend: Option<IsendV10>,
    pub irecv: Option<IrecvV10>,
    pub iflush: Option<Iflush>,
    pub test: Option<Test>,
    pub close_send: Option<Close>,
    pub close_recv: Option<Close>,
    pub close_listen: Option<Close>,
    pub _get_device_mr: *const c_void,
    pub _irecv_consumed: *const c_void,
    pub _make_vdevice: *const c_void,
}

/// `ncclNet_v11_t` (`P` = [`PropsV11`]) and `ncclNet_v12_t` (`P` = [`PropsV12`]): `init`
/// per communicator returns a context that `listen`, `connect` and `finalize` take.
#[repr(C)]
pub(super) struct NetV11<P> {
    pub name: *const c_char,
    pub init: Option<
        unsafe extern "C" fn(
            ctx: *mut Opaque,
            comm_id: u64,
            config: *mut CommConfig,
            log: Logger,
            prof: Profiler,
        ) -> Res,
    >,
    pub devices: Option<Devices>,
    pub get_properties: Option<unsafe extern "C" fn(dev: c_int, props: *mut P) -> Res>,
    pub listen: Option<unsafe extern "C" fn(ctx: Opaque, dev: c_int, handle: *mut c_void, listen: *mut Opaque) -> Res>,
    pub connect: Option<
        unsafe extern "C" fn(
            ctx: Opaque,
            dev: c_int,
            handle: *mut c_void,
            send: *mut Opaque,
            dev_handle: *mut Opaque,
        ) -> Res,
    >,
    pub accept: Option<Accept>,
    pub reg_mr: Option<RegMr>,
    pub _reg_mr_dma_buf: *const c_void,
    pub dereg_mr: Option<DeregMr>,
    pub isend: Option<IsendV10>,
    pub irecv: Option<IrecvV10>,
    pub iflush: Option<Iflush>,
    pub test: Option<Test>,
    pub close_send: Option<Close>,
    pub close_recv: Option<Close>,
    pub close_listen: Option<Close>,
    pub _get_device_mr: *const c_void,
    pub _irecv_consumed: *const c_void,
    pub _make_vdevice: *const c_void,
    pub finalize: Option<unsafe extern "C" fn(ctx: Opaque) -> Res>,
    pub _set_net_attr: *const c_void,
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    /// The sizes and offsets NCCL's headers give on LP64 (and the notes' table).
    #[test]
    fn properties_have_nccls_layouts() {
        assert_eq!(size_of::<PropsV8>(), 64);
        assert_eq!(offset_of!(PropsV8, guid), 16);
        assert_eq!(offset_of!(PropsV8, ptr_support), 24);
        assert_eq!(offset_of!(PropsV8, speed), 32);
        assert_eq!(offset_of!(PropsV8, latency), 40);
        assert_eq!(offset_of!(PropsV8, max_recvs), 48);
        assert_eq!(offset_of!(PropsV8, net_device_version), 56);

        assert_eq!(size_of::<PropsV9>(), 104);
        assert_eq!(offset_of!(PropsV9, force_flush), 32);
        assert_eq!(offset_of!(PropsV9, speed), 36);
        assert_eq!(offset_of!(PropsV9, latency), 44);
        assert_eq!(offset_of!(PropsV9, max_recvs), 52);
        assert_eq!(offset_of!(PropsV9, vprops), 64);
        assert_eq!(offset_of!(PropsV9, max_p2p_bytes), 88);
        assert_eq!(offset_of!(PropsV9, max_coll_bytes), 96);

        assert_eq!(size_of::<PropsV11>(), 112);
        assert_eq!(offset_of!(PropsV11, vprops), 64);
        assert_eq!(offset_of!(PropsV11, max_p2p_bytes), 88);
        assert_eq!(offset_of!(PropsV11, max_multi_request_size), 104);

        assert_eq!(size_of::<PropsV12>(), 128);
        assert_eq!(offset_of!(PropsV12, vprops), 64);
        assert_eq!(offset_of!(PropsV12, max_p2p_bytes), 104);
        assert_eq!(offset_of!(PropsV12, max_coll_bytes), 112);
        assert_eq!(offset_of!(PropsV12, max_multi_request_size), 120);
        assert_eq!(offset_of!(PropsV12, rail_id), 124);
        assert_eq!(offset_of!(PropsV12, plane_id), 126);
    }

    /// A table is its name and one pointer per function, in NCCL's order.
    #[test]
    fn tables_have_nccls_entry_counts_and_order() {
        let word = size_of::<*const c_void>();
        assert_eq!(size_of::<NetV8>(), 19 * word);
        assert_eq!(size_of::<NetV9>(), 20 * word);
        assert_eq!(size_of::<NetV10>(), 20 * word);
        assert_eq!(size_of::<NetV11<PropsV11>>(), 22 * word);
        assert_eq!(size_of::<NetV11<PropsV12>>(), 22 * word);
        assert_eq!(offset_of!(NetV8, isend), 10 * word);
        assert_eq!(offset_of!(NetV8, test), 13 * word);
        assert_eq!(offset_of!(NetV9, irecv), 11 * word);
        assert_eq!(offset_of!(NetV10, close_listen), 16 * word);
        assert_eq!(offset_of!(NetV11<PropsV12>, finalize), 20 * word);
        assert_eq!(size_of::<CommConfig>(), 4);
    }

    #[test]
    fn results_are_named() {
        assert_eq!(result_name(SUCCESS), "ncclSuccess");
        assert_eq!(result_name(2), "ncclSystemError");
        assert_eq!(result_name(6), "ncclRemoteError");
        assert_eq!(result_name(-1), "not an ncclResult_t");
    }
}
