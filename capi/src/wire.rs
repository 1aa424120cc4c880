//! jitccl's extension header `include/jitccl.h`: wire formats in C. A `jitcclWire_t` (a
//! format and a block), read from a name as `JITCCL_WIRE` takes it, and the collectives
//! that carry their elements in one (`jitcclWiredX`: ncclX's arguments and rules, plus the
//! wire). Exported once each: they have no profiling twin, as they are not NCCL's.

use std::ffi::{c_char, c_int, c_void, CStr};

use jitccl::Wire;

use crate::handle::{last_error, CommHandle};
use crate::status::guard;
use crate::types::*;
use crate::{calls, group};

/// `jitcclWire_t`: `format` is `Wire::code` (jitcclWireExact = 0 .. jitcclWireInt8 = 5),
/// `block` the scaled formats' elements per scale (0: the default) and 0 for the others.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CWire {
    pub format: c_int,
    pub block: c_int,
}

impl CWire {
    /// The wire it names, or why it names none.
    pub(crate) fn wire(self) -> Result<Wire, Failure> {
        let bad = |why: String| {
            fail(INVALID_ARGUMENT, format!("wire {{format {}, block {}}}: {why}", self.format, self.block))
        };
        let code = u8::try_from(self.format).map_err(|_| bad("the formats are 0 (exact) to 5 (int8)".into()))?;
        let block = match self.block {
            0 => None,
            b => Some(u16::try_from(b).map_err(|_| bad(format!("a block of {b} elements is out of range")))?),
        };
        Wire::from_code(code, block).map_err(|e| bad(e.to_string()))
    }

    fn of(wire: Wire) -> CWire {
        CWire { format: c_int::from(wire.code()), block: wire.block().map_or(0, c_int::from) }
    }
}

/// Runs `$call` with the wire of `$w`, or fails as `$name` with why it names none before
/// anything is queued (kept as the communicator's last error too, and failing the open
/// group, as any bad argument of a call).
macro_rules! with_wire {
    ($name:expr, $comm:expr, $w:expr, |$wire:ident| $call:expr) => {
        match $w.wire() {
            Ok($wire) => $call,
            Err(f) => {
                group::note(&f);
                guard($name, last_error($comm), || Err(f))
            }
        }
    };
}

/// `jitcclWireFromName`: the wire of `name` (`bf16`, `int8b128`, `fp8e4m3`: the names of
/// `JITCCL_WIRE`) into `*out`; a bad name leaves `*out` as it was.
#[no_mangle]
pub unsafe extern "C" fn jitcclWireFromName(name: *const c_char, out: *mut CWire) -> NcclResult {
    guard("jitcclWireFromName", None, || {
        if name.is_null() || out.is_null() {
            return Err(fail(INVALID_ARGUMENT, "name or out is NULL"));
        }
        let text = CStr::from_ptr(name).to_str().map_err(|_| fail(INVALID_ARGUMENT, "the name is not UTF-8"))?;
        let wire: Wire = text.trim().parse().map_err(|e| fail(INVALID_ARGUMENT, format!("{e}")))?;
        *out = CWire::of(wire);
        Ok(SUCCESS)
    })
}

#[no_mangle]
pub unsafe extern "C" fn jitcclWiredAllReduce(
    send: *const c_void, recv: *mut c_void, count: usize, dt: c_int, op: c_int, w: CWire, comm: *mut CommHandle,
    stream: *mut c_void,
) -> NcclResult {
    const NAME: &str = "jitcclWiredAllReduce";
    with_wire!(NAME, comm, w, |wire| calls::all_reduce(NAME, send, recv, count, dt, op, Some(wire), comm, stream))
}

#[no_mangle]
pub unsafe extern "C" fn jitcclWiredBroadcast(
    send: *const c_void, recv: *mut c_void, count: usize, dt: c_int, root: c_int, w: CWire, comm: *mut CommHandle,
    stream: *mut c_void,
) -> NcclResult {
    const NAME: &str = "jitcclWiredBroadcast";
    with_wire!(NAME, comm, w, |wire| calls::broadcast(NAME, send, recv, count, dt, root, Some(wire), comm, stream))
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn jitcclWiredReduce(
    send: *const c_void, recv: *mut c_void, count: usize, dt: c_int, op: c_int, root: c_int, w: CWire,
    comm: *mut CommHandle, stream: *mut c_void,
) -> NcclResult {
    const NAME: &str = "jitcclWiredReduce";
    with_wire!(NAME, comm, w, |wire| calls::reduce(NAME, send, recv, count, dt, op, root, Some(wire), comm, stream))
}

#[no_mangle]
pub unsafe extern "C" fn jitcclWiredAllGather(
    send: *const c_void, recv: *mut c_void, count: usize, dt: c_int, w: CWire, comm: *mut CommHandle,
    stream: *mut c_void,
) -> NcclResult {
    const NAME: &str = "jitcclWiredAllGather";
    with_wire!(NAME, comm, w, |wire| calls::all_gather(NAME, send, recv, count, dt, Some(wire), comm, stream))
}

#[no_mangle]
pub unsafe extern "C" fn jitcclWiredReduceScatter(
    send: *const c_void, recv: *mut c_void, count: usize, dt: c_int, op: c_int, w: CWire, comm: *mut CommHandle,
    stream: *mut c_void,
) -> NcclResult {
    const NAME: &str = "jitcclWiredReduceScatter";
    with_wire!(NAME, comm, w, |wire| calls::reduce_scatter(NAME, send, recv, count, dt, op, Some(wire), comm, stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_wires_name_the_wires_their_names_do() {
        for name in ["exact", "bf16", "fp16", "fp8e4m3b128", "fp8e5m2b32", "int8b256"] {
            let w: Wire = name.parse().unwrap();
            assert_eq!(CWire::of(w).wire().unwrap(), w, "{name}");
        }
        assert_eq!(CWire { format: 5, block: 0 }.wire().unwrap(), Wire::Int8 { block: Wire::DEFAULT_BLOCK });
        for (format, block, why) in [
            (9, 0, "the formats are 0"),
            (-1, 0, "the formats are 0"),
            (1, 64, "takes no block"),
            (3, 48, "the blocks are 32, 64, 128, 256"),
            (3, -64, "out of range"),
            (5, 1 << 20, "out of range"),
        ] {
            let e = CWire { format, block }.wire().unwrap_err();
            assert!(e.code == INVALID_ARGUMENT && e.text.contains(why), "{format}/{block}: {}", e.text);
        }
    }
}
