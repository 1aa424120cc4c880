//! One set of calls over the five versions of a plugin's table: what differs between
//! versions (how `init` is called and whether it returns a context, `int` or `size_t`
//! sizes, `connect`'s comm config, profiler handles, the properties' layout) is settled
//! here, so the rest of the module speaks to one interface.

use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;

use super::abi::{self, CommConfig, NetV10, NetV11, NetV8, NetV9, Opaque, PropsV11, PropsV12, Res};
use super::{DeviceProps, Handle};
use crate::plugin::Library;

/// The versions jitccl speaks, newest first: the order the symbols are looked up in.
pub(super) const VERSIONS: [u32; 5] = [12, 11, 10, 9, 8];

/// A plugin's exported table, by version.
#[derive(Clone, Copy)]
pub(super) enum Table {
    V8(&'static NetV8),
    V9(&'static NetV9),
    V10(&'static NetV10),
    V11(&'static NetV11<PropsV11>),
    V12(&'static NetV11<PropsV12>),
}

// SAFETY: the tables are immutable data of a library that stays loaded; NCCL's plugin
// contract has their functions called from any thread.
unsafe impl Send for Table {}
unsafe impl Sync for Table {}

/// A call the plugin refused (or could not be made): which one, its code and the code's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fail {
    pub call: &'static str,
    pub code: Res,
    pub what: &'static str,
}

fn check(call: &'static str, code: Res) -> Result<(), Fail> {
    if code == abi::SUCCESS {
        Ok(())
    } else {
        Err(Fail { call, code, what: abi::result_name(code) })
    }
}

fn missing(call: &'static str) -> Fail {
    Fail { call, code: abi::INTERNAL_ERROR, what: "the plugin's table has no such function" }
}

/// The function `$f` of any version's table (the same type in every version).
macro_rules! common {
    ($table:expr, $f:ident) => {
        match $table {
            Table::V8(t) => t.$f,
            Table::V9(t) => t.$f,
            Table::V10(t) => t.$f,
            Table::V11(t) => t.$f,
            Table::V12(t) => t.$f,
        }
        .ok_or(missing(stringify!($f)))?
    };
}

/// What a network's calls need beside the table: v11+'s context, v10's comm config.
pub(super) struct Context {
    /// The context `init` returned (v11+); NULL before.
    pub raw: Opaque,
    /// What v10's `connect` takes (v11+ gave it to `init`): no traffic class asked. The
    /// plugin gets a mutable pointer, so it lives in a cell, for as long as the network.
    config: UnsafeCell<CommConfig>,
}

impl Context {
    pub fn new() -> Context {
        Context {
            raw: ptr::null_mut(),
            config: UnsafeCell::new(CommConfig { traffic_class: abi::TRAFFIC_CLASS_UNDEF }),
        }
    }
}

/// Which close call a comm takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CommKind {
    Send,
    Recv,
}

/// A C string of the plugin's, if not NULL.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn text(p: *const c_char) -> Option<String> {
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Properties as the interface says them, whatever the version's layout. Used inside the
/// unsafe block of the call that filled them: the plugin's strings are NULL or
/// NUL-terminated.
macro_rules! device_props {
    ($p:expr, $force_flush:expr) => {{
        let p = $p;
        DeviceProps {
            name: text(p.name).unwrap_or_default(),
            pci_path: text(p.pci_path),
            guid: p.guid,
            ptr_support: p.ptr_support as u32,
            speed_mbps: p.speed.max(0) as u32,
            latency_us: p.latency,
            max_comms: p.max_comms.max(0) as u32,
            // A plugin that says 0 still takes one receive per call.
            max_recvs: p.max_recvs.max(1) as u32,
            reg_is_global: p.reg_is_global != 0,
            force_flush: $force_flush,
        }
    }};
}

impl Table {
    /// The table of `version` that `lib` exports, if it does.
    pub fn of(lib: &Library, version: u32) -> Option<Table> {
        let p = lib.symbol(&format!("ncclNetPlugin_v{version}"))?;
        // SAFETY: a library exporting `ncclNetPlugin_vN` promises version N's table there,
        // and it stays loaded for the life of the process.
        Some(unsafe {
            match version {
                8 => Table::V8(&*(p as *const NetV8)),
                9 => Table::V9(&*(p as *const NetV9)),
                10 => Table::V10(&*(p as *const NetV10)),
                11 => Table::V11(&*(p as *const NetV11<PropsV11>)),
                12 => Table::V12(&*(p as *const NetV11<PropsV12>)),
                _ => return None,
            }
        })
    }

    /// The newest table `lib` exports, as NCCL picks it.
    pub fn find(lib: &Library) -> Option<Table> {
        VERSIONS.iter().find_map(|&v| Table::of(lib, v))
    }

    pub fn version(&self) -> u32 {
        match self {
            Table::V8(_) => 8,
            Table::V9(_) => 9,
            Table::V10(_) => 10,
            Table::V11(_) => 11,
            Table::V12(_) => 12,
        }
    }

    /// The network's name (its `name` field).
    pub fn name(&self) -> String {
        let p = match self {
            Table::V8(t) => t.name,
            Table::V9(t) => t.name,
            Table::V10(t) => t.name,
            Table::V11(t) => t.name,
            Table::V12(t) => t.name,
        };
        // SAFETY: the table's name is NULL or a string of the loaded library.
        unsafe { text(p) }.unwrap_or_else(|| "(unnamed)".into())
    }

    /// Whether `init` is per communicator (and returns a context), else once per process.
    pub fn per_comm(&self) -> bool {
        self.version() >= 11
    }

    /// `init`: once per process up to v10 (the context stays NULL), per communicator from
    /// v11 (`comm_id` lets the plugin group a communicator's connections).
    pub fn init(&self, ctx: &mut Context, comm_id: u64) -> Result<(), Fail> {
        let log = crate::plugin::logger::logger();
        let prof: abi::Profiler = ptr::null();
        let mut config = CommConfig { traffic_class: abi::TRAFFIC_CLASS_UNDEF };
        // SAFETY: the table's own entry, called with the arguments its version takes.
        let code = unsafe {
            match self {
                Table::V8(t) => t.init.ok_or(missing("init"))?(log),
                Table::V9(t) => t.init.ok_or(missing("init"))?(log),
                Table::V10(t) => t.init.ok_or(missing("init"))?(log, prof),
                Table::V11(t) => t.init.ok_or(missing("init"))?(&mut ctx.raw, comm_id, &mut config, log, prof),
                Table::V12(t) => t.init.ok_or(missing("init"))?(&mut ctx.raw, comm_id, &mut config, log, prof),
            }
        };
        check("init", code)
    }

    /// `finalize` of a v11+ context (nothing before v11).
    pub fn finalize(&self, ctx: &Context) -> Result<(), Fail> {
        let f = match self {
            Table::V11(t) => t.finalize,
            Table::V12(t) => t.finalize,
            _ => return Ok(()),
        };
        // SAFETY: the context `init` returned, finalized once, after its comms closed.
        check("finalize", unsafe { f.ok_or(missing("finalize"))?(ctx.raw) })
    }

    pub fn devices(&self) -> Result<usize, Fail> {
        let mut n: c_int = 0;
        // SAFETY: `devices` writes one int.
        check("devices", unsafe { common!(self, devices)(&mut n) })?;
        Ok(n.max(0) as usize)
    }

    pub fn properties(&self, dev: c_int) -> Result<DeviceProps, Fail> {
        // SAFETY (each arm): `getProperties` fills its version's properties, which start
        // zeroed (all fields are plain numbers and pointers).
        unsafe {
            match self {
                Table::V8(t) => {
                    let mut p: abi::PropsV8 = std::mem::zeroed();
                    check("getProperties", t.get_properties.ok_or(missing("getProperties"))?(dev, &mut p))?;
                    Ok(device_props!(p, false))
                }
                Table::V9(t) => {
                    let mut p: abi::PropsV9 = std::mem::zeroed();
                    check("getProperties", t.get_properties.ok_or(missing("getProperties"))?(dev, &mut p))?;
                    Ok(device_props!(p, p.force_flush != 0))
                }
                Table::V10(t) => {
                    let mut p: abi::PropsV9 = std::mem::zeroed();
                    check("getProperties", t.get_properties.ok_or(missing("getProperties"))?(dev, &mut p))?;
                    Ok(device_props!(p, p.force_flush != 0))
                }
                Table::V11(t) => {
                    let mut p: PropsV11 = std::mem::zeroed();
                    check("getProperties", t.get_properties.ok_or(missing("getProperties"))?(dev, &mut p))?;
                    Ok(device_props!(p, p.force_flush != 0))
                }
                Table::V12(t) => {
                    let mut p: PropsV12 = std::mem::zeroed();
                    check("getProperties", t.get_properties.ok_or(missing("getProperties"))?(dev, &mut p))?;
                    Ok(device_props!(p, p.force_flush != 0))
                }
            }
        }
    }

    /// `listen` on device `dev`: fills `handle`, returns the listen comm.
    pub fn listen(&self, ctx: &Context, dev: c_int, handle: &mut Handle) -> Result<Opaque, Fail> {
        let mut comm: Opaque = ptr::null_mut();
        let h = handle.as_mut_ptr() as *mut c_void;
        // SAFETY: the handle has NCCL_NET_HANDLE_MAXSIZE bytes; the context is this
        // network's.
        let code = unsafe {
            match self {
                Table::V8(t) => t.listen.ok_or(missing("listen"))?(dev, h, &mut comm),
                Table::V9(t) => t.listen.ok_or(missing("listen"))?(dev, h, &mut comm),
                Table::V10(t) => t.listen.ok_or(missing("listen"))?(dev, h, &mut comm),
                Table::V11(t) => t.listen.ok_or(missing("listen"))?(ctx.raw, dev, h, &mut comm),
                Table::V12(t) => t.listen.ok_or(missing("listen"))?(ctx.raw, dev, h, &mut comm),
            }
        };
        check("listen", code)?;
        if comm.is_null() {
            return Err(Fail { call: "listen", code: abi::INTERNAL_ERROR, what: "ncclSuccess with no listen comm" });
        }
        Ok(comm)
    }

    /// `connect` to `handle` (non-blocking: NULL = call again, with the same handle, which
    /// the plugin may keep its progress in). No device offload.
    pub fn connect(&self, ctx: &Context, dev: c_int, handle: &mut Handle) -> Result<Opaque, Fail> {
        let mut comm: Opaque = ptr::null_mut();
        let mut offload: Opaque = ptr::null_mut();
        let h = handle.as_mut_ptr() as *mut c_void;
        // SAFETY: as `listen`; the comm config lives as long as the context.
        let code = unsafe {
            match self {
                Table::V8(t) => t.connect.ok_or(missing("connect"))?(dev, h, &mut comm, &mut offload),
                Table::V9(t) => t.connect.ok_or(missing("connect"))?(dev, h, &mut comm, &mut offload),
                Table::V10(t) => {
                    t.connect.ok_or(missing("connect"))?(dev, ctx.config.get(), h, &mut comm, &mut offload)
                }
                Table::V11(t) => t.connect.ok_or(missing("connect"))?(ctx.raw, dev, h, &mut comm, &mut offload),
                Table::V12(t) => t.connect.ok_or(missing("connect"))?(ctx.raw, dev, h, &mut comm, &mut offload),
            }
        };
        check("connect", code)?;
        Ok(comm)
    }

    /// `accept` (non-blocking: NULL = call again). No device offload.
    pub fn accept(&self, listen: Opaque) -> Result<Opaque, Fail> {
        let mut comm: Opaque = ptr::null_mut();
        let mut offload: Opaque = ptr::null_mut();
        // SAFETY: a listen comm of this table, not closed.
        check("accept", unsafe { common!(self, accept)(listen, &mut comm, &mut offload) })?;
        Ok(comm)
    }

    /// `regMr` of memory of `kind` (an `NCCL_PTR_*` bit).
    pub fn reg_mr(&self, comm: Opaque, data: *mut u8, bytes: usize, kind: u32) -> Result<Opaque, Fail> {
        let mut mh: Opaque = ptr::null_mut();
        // SAFETY: a comm of this table; the caller keeps the region alive while registered.
        let code = unsafe { common!(self, reg_mr)(comm, data as *mut c_void, bytes, kind as c_int, &mut mh) };
        check("regMr", code)?;
        Ok(mh)
    }

    pub fn dereg_mr(&self, comm: Opaque, mh: Opaque) -> Result<(), Fail> {
        // SAFETY: a handle `regMr` gave for this comm, deregistered once.
        check("deregMr", unsafe { common!(self, dereg_mr)(comm, mh) })
    }

    /// `isend` of one buffer; NULL = the plugin had no room (try later).
    pub fn isend(&self, comm: Opaque, data: *const u8, bytes: usize, tag: c_int, mh: Opaque) -> Result<Opaque, Fail> {
        let mut req: Opaque = ptr::null_mut();
        let data = data as *mut c_void;
        // SAFETY: a send comm of this table and a region registered with it.
        let code = unsafe {
            match self {
                Table::V8(t) => t.isend.ok_or(missing("isend"))?(comm, data, small("isend", bytes)?, tag, mh, &mut req),
                Table::V9(t) => t.isend.ok_or(missing("isend"))?(comm, data, bytes, tag, mh, &mut req),
                Table::V10(t) => {
                    t.isend.ok_or(missing("isend"))?(comm, data, bytes, tag, mh, ptr::null_mut(), &mut req)
                }
                Table::V11(t) => {
                    t.isend.ok_or(missing("isend"))?(comm, data, bytes, tag, mh, ptr::null_mut(), &mut req)
                }
                Table::V12(t) => {
                    t.isend.ok_or(missing("isend"))?(comm, data, bytes, tag, mh, ptr::null_mut(), &mut req)
                }
            }
        };
        check("isend", code)?;
        Ok(req)
    }

    /// `irecv` of one buffer (n = 1); NULL = the plugin had no room (try later).
    pub fn irecv(&self, comm: Opaque, data: *mut u8, bytes: usize, tag: c_int, mh: Opaque) -> Result<Opaque, Fail> {
        let mut req: Opaque = ptr::null_mut();
        let mut datas = [data as *mut c_void];
        let mut tags = [tag];
        let mut mhs = [mh];
        let mut phandles: [*mut c_void; 1] = [ptr::null_mut()];
        let mut sizes = [bytes];
        let (d, tg, m, p) = (datas.as_mut_ptr(), tags.as_mut_ptr(), mhs.as_mut_ptr(), phandles.as_mut_ptr());
        // SAFETY: a receive comm of this table, a region registered with it, arrays of n = 1.
        let code = unsafe {
            match self {
                Table::V8(t) => {
                    let mut sizes = [small("irecv", bytes)?];
                    t.irecv.ok_or(missing("irecv"))?(comm, 1, d, sizes.as_mut_ptr(), tg, m, &mut req)
                }
                Table::V9(t) => t.irecv.ok_or(missing("irecv"))?(comm, 1, d, sizes.as_mut_ptr(), tg, m, &mut req),
                Table::V10(t) => t.irecv.ok_or(missing("irecv"))?(comm, 1, d, sizes.as_mut_ptr(), tg, m, p, &mut req),
                Table::V11(t) => t.irecv.ok_or(missing("irecv"))?(comm, 1, d, sizes.as_mut_ptr(), tg, m, p, &mut req),
                Table::V12(t) => t.irecv.ok_or(missing("irecv"))?(comm, 1, d, sizes.as_mut_ptr(), tg, m, p, &mut req),
            }
        };
        check("irecv", code)?;
        Ok(req)
    }

    /// Whether the table has an `iflush` entry.
    pub fn has_iflush(&self) -> bool {
        match self {
            Table::V8(t) => t.iflush.is_some(),
            Table::V9(t) => t.iflush.is_some(),
            Table::V10(t) => t.iflush.is_some(),
            Table::V11(t) => t.iflush.is_some(),
            Table::V12(t) => t.iflush.is_some(),
        }
    }

    /// `iflush` of one received buffer (n = 1); NULL = nothing to wait for.
    pub fn iflush(&self, comm: Opaque, data: *mut u8, bytes: usize, mh: Opaque) -> Result<Opaque, Fail> {
        let mut req: Opaque = ptr::null_mut();
        let mut datas = [data as *mut c_void];
        let mut sizes = [small("iflush", bytes)?];
        let mut mhs = [mh];
        // SAFETY: a receive comm of this table, a region registered with it, arrays of n = 1.
        let code = unsafe {
            common!(self, iflush)(comm, 1, datas.as_mut_ptr(), sizes.as_mut_ptr(), mhs.as_mut_ptr(), &mut req)
        };
        check("iflush", code)?;
        Ok(req)
    }

    /// `test`: the bytes moved once done.
    pub fn test(&self, req: Opaque) -> Result<Option<usize>, Fail> {
        let (mut done, mut size): (c_int, c_int) = (0, 0);
        // SAFETY: a request of this table, not yet completed.
        check("test", unsafe { common!(self, test)(req, &mut done, &mut size) })?;
        Ok((done != 0).then_some(size.max(0) as usize))
    }

    pub fn close(&self, kind: CommKind, comm: Opaque) -> Result<(), Fail> {
        // SAFETY: a comm of this table, closed once.
        match kind {
            CommKind::Send => check("closeSend", unsafe { common!(self, close_send)(comm) }),
            CommKind::Recv => check("closeRecv", unsafe { common!(self, close_recv)(comm) }),
        }
    }

    pub fn close_listen(&self, comm: Opaque) -> Result<(), Fail> {
        // SAFETY: a listen comm of this table, closed once.
        check("closeListen", unsafe { common!(self, close_listen)(comm) })
    }
}

/// A size for an `int` size (v8's sends and receives, every version's iflush): one that does
/// not fit is refused, never truncated.
fn small(call: &'static str, bytes: usize) -> Result<c_int, Fail> {
    c_int::try_from(bytes).map_err(|_| Fail {
        call,
        code: abi::INVALID_ARGUMENT,
        what: "ncclInvalidArgument: the size is over an int",
    })
}
