//! The collectives and point to point on the caller's buffers (host memory on the host, the
//! rank's device memory on a GPU), and the reduction ops made by
//! ncclRedOpCreatePreMulSum. Each call is checked by jitccl (a bad argument changes
//! nothing), queued on the communicator's stream, and completed as `group` says. The
//! collectives that take a wire format are shared with `wire`'s call variants.

use std::ffi::{c_int, c_void};

use jitccl::{DataType, DeviceBuffer, Element, Error, Op, ScalarAt, Stream, Wire};

use crate::group;
use crate::handle::{last_error, CommHandle, Live, PreMul, Scalar};
use crate::status::guard;
use crate::types::*;

/// Runs `$e` with `$T` the Rust type of `$dt`.
macro_rules! typed {
    ($dt:expr, $T:ident => $e:expr) => {
        match $dt {
            DataType::I8 => {
                type $T = i8;
                $e
            }
            DataType::U8 => {
                type $T = u8;
                $e
            }
            DataType::I32 => {
                type $T = i32;
                $e
            }
            DataType::U32 => {
                type $T = u32;
                $e
            }
            DataType::I64 => {
                type $T = i64;
                $e
            }
            DataType::U64 => {
                type $T = u64;
                $e
            }
            DataType::F16 => {
                type $T = half::f16;
                $e
            }
            DataType::BF16 => {
                type $T = half::bf16;
                $e
            }
            DataType::F32 => {
                type $T = f32;
                $e
            }
            DataType::F64 => {
                type $T = f64;
                $e
            }
            DataType::F8E4M3 => {
                type $T = float8::F8E4M3;
                $e
            }
            DataType::F8E5M2 => {
                type $T = float8::F8E5M2;
                $e
            }
        }
    };
}

/// `$l.comm.$call(..)`, or in `$wire`'s format when the call names one (else the
/// communicator's default applies, where it fits).
macro_rules! via {
    ($l:expr, $wire:expr, $call:ident($($a:expr),* $(,)?)) => {
        match $wire {
            None => $l.comm.$call($($a),*),
            Some(w) => $l.comm.wired(w).$call($($a),*),
        }
    };
}

/// `len` elements at `ptr` on the rank's device; a NULL pointer is an empty buffer (for the
/// sides a rank does not use: a non-root's receive buffer of Reduce, ...). Inlined, as the
/// op below: a view returned through memory stalls the loads that copy it on.
#[inline(always)]
unsafe fn buf<T: Element>(live: &Live, ptr: *const c_void, len: usize) -> Result<DeviceBuffer<T>, Error> {
    let len = if ptr.is_null() { 0 } else { len };
    DeviceBuffer::from_raw(live.comm.device(), ptr as *mut T, len)
}

fn dtype(v: c_int) -> Result<DataType, Failure> {
    data_type(v).ok_or_else(|| fail(INVALID_ARGUMENT, format!("data type {v} is not an ncclDataType_t")))
}

/// The value of a scalar of `dt` in `bytes`, as f64.
fn scalar_value(dt: DataType, b: &[u8]) -> f64 {
    let n = dt.size();
    let mut w = [0u8; 8];
    w[..n].copy_from_slice(&b[..n]);
    match dt {
        DataType::I8 => w[0] as i8 as f64,
        DataType::U8 => w[0] as f64,
        DataType::I32 => i32::from_le_bytes([w[0], w[1], w[2], w[3]]) as f64,
        DataType::U32 => u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as f64,
        DataType::I64 => i64::from_le_bytes(w) as f64,
        DataType::U64 => u64::from_le_bytes(w) as f64,
        DataType::F16 => half::f16::from_le_bytes([w[0], w[1]]).to_f64(),
        DataType::BF16 => half::bf16::from_le_bytes([w[0], w[1]]).to_f64(),
        DataType::F32 => f32::from_le_bytes([w[0], w[1], w[2], w[3]]) as f64,
        DataType::F64 => f64::from_le_bytes(w),
        DataType::F8E4M3 => float8::F8E4M3::from_bits(w[0]).to_f64(),
        DataType::F8E5M2 => float8::F8E5M2::from_bits(w[0]).to_f64(),
    }
}

/// The jitccl op of `op` for a call of `dt`.
#[inline(always)]
unsafe fn op_for(live: &Live, op: c_int, dt: DataType) -> Result<Op, Failure> {
    match builtin_op(op) {
        Some(o) => Ok(o),
        None => user_op(live, op, dt),
    }
}

/// An op made by ncclRedOpCreatePreMulSum, for a call of `dt`.
#[cold]
unsafe fn user_op(live: &Live, op: c_int, dt: DataType) -> Result<Op, Failure> {
    let ops = live.ops.lock().unwrap_or_else(|e| e.into_inner());
    let entry = user_op_index(op).and_then(|i| ops.get(i)).and_then(Option::as_ref);
    let Some(PreMul { dtype: made_for, scalar }) = entry else {
        return Err(fail(INVALID_ARGUMENT, format!("op {op} is neither built in nor a live op of this communicator")));
    };
    if *made_for != dt {
        return Err(fail(INVALID_ARGUMENT, format!("op {op} was made for data type {made_for}, not {dt}")));
    }
    Ok(match scalar {
        Scalar::Value(v) => Op::PreMulSum(*v),
        // Read by the kernel when it runs, as NCCL does: a kernel queued before it on the
        // stream may write it. The caller keeps it valid while the op lives (NCCL's rule).
        Scalar::At(p) => Op::PreMulSumAt(ScalarAt::new(*p as *const c_void)),
    })
}

/// One call: checks the communicator and type, finds the stream it runs on (on a GPU the
/// caller's, see `Live::stream_for`), runs `f` on it, then posts it to the open group or
/// completes it.
unsafe fn call(
    name: &str, comm: *mut CommHandle, stream: *mut c_void, dt: c_int,
    f: impl FnOnce(&Live, &Stream, DataType) -> Result<(), Failure>,
) -> NcclResult {
    guard(name, last_error(comm), || {
        let out = (|| {
            let live = CommHandle::live(comm)?;
            let dt = dtype(dt)?;
            let stream = live.stream_for(stream)?;
            f(&live, &stream, dt)?;
            if group::is_open() {
                group::posted(comm);
                return Ok(SUCCESS);
            }
            group::complete(&live.comm, &stream)
        })();
        if let Err(f) = &out {
            group::note(f);
        }
        out
    })
}

/// The entry of a user op in a communicator's table.
fn user_op_index(op: c_int) -> Option<usize> {
    op.checked_sub(NUM_BUILTIN_OPS).and_then(|i| usize::try_from(i).ok())
}

fn root(r: c_int) -> Result<usize, Failure> {
    usize::try_from(r).map_err(|_| fail(INVALID_ARGUMENT, format!("root {r} is negative")))
}

fn peer(p: c_int) -> Result<usize, Failure> {
    usize::try_from(p).map_err(|_| fail(INVALID_ARGUMENT, format!("peer {p} is negative")))
}

/// `count` blocks per rank, or an error if that overflows.
fn all(live: &Live, count: usize) -> Result<usize, Failure> {
    count.checked_mul(live.comm.nranks()).ok_or_else(|| fail(INVALID_ARGUMENT, format!("count {count} overflows")))
}

/// AllReduce as `name` (ncclAllReduce, or jitcclWiredAllReduce with its `wire`).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn all_reduce(
    name: &str, send: *const c_void, recv: *mut c_void, count: usize, dt: c_int, op: c_int, wire: Option<Wire>,
    comm: *mut CommHandle, stream: *mut c_void,
) -> NcclResult {
    call(name, comm, stream, dt, |l, s, dt| {
        let op = op_for(l, op, dt)?;
        typed!(dt, T => via!(l, wire, all_reduce(&buf::<T>(l, send, count)?, &buf::<T>(l, recv, count)?, count, op, s)))?;
        Ok(())
    })
}

export! {
    ncclAllReduce / pncclAllReduce(
        send: *const c_void, recv: *mut c_void, count: usize, dt: c_int, op: c_int, comm: *mut CommHandle,
        stream: *mut c_void,
    ) -> NcclResult {
        all_reduce("ncclAllReduce", send, recv, count, dt, op, None, comm, stream)
    }
}

/// Broadcast as `name` (ncclBroadcast, ncclBcast in place, or jitcclWiredBroadcast).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn broadcast(
    name: &str, send: *const c_void, recv: *mut c_void, count: usize, dt: c_int, rt: c_int, wire: Option<Wire>,
    comm: *mut CommHandle, stream: *mut c_void,
) -> NcclResult {
    call(name, comm, stream, dt, |l, s, dt| {
        let rt = root(rt)?;
        typed!(dt, T => via!(l, wire, broadcast(&buf::<T>(l, send, count)?, &buf::<T>(l, recv, count)?, count, rt, s)))?;
        Ok(())
    })
}

export! {
    ncclBroadcast / pncclBroadcast(
        send: *const c_void, recv: *mut c_void, count: usize, dt: c_int, rt: c_int, comm: *mut CommHandle,
        stream: *mut c_void,
    ) -> NcclResult {
        broadcast("ncclBroadcast", send, recv, count, dt, rt, None, comm, stream)
    }
}

export! {
    /// In-place broadcast (NCCL's legacy form).
    ncclBcast / pncclBcast(
        buff: *mut c_void, count: usize, dt: c_int, rt: c_int, comm: *mut CommHandle, stream: *mut c_void,
    ) -> NcclResult {
        broadcast("ncclBcast", buff, buff, count, dt, rt, None, comm, stream)
    }
}

/// Reduce as `name` (ncclReduce, or jitcclWiredReduce).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn reduce(
    name: &str, send: *const c_void, recv: *mut c_void, count: usize, dt: c_int, op: c_int, rt: c_int,
    wire: Option<Wire>, comm: *mut CommHandle, stream: *mut c_void,
) -> NcclResult {
    call(name, comm, stream, dt, |l, s, dt| {
        let (op, rt) = (op_for(l, op, dt)?, root(rt)?);
        typed!(dt, T => via!(l, wire, reduce(&buf::<T>(l, send, count)?, &buf::<T>(l, recv, count)?, count, op, rt, s)))?;
        Ok(())
    })
}

export! {
    ncclReduce / pncclReduce(
        send: *const c_void, recv: *mut c_void, count: usize, dt: c_int, op: c_int, rt: c_int,
        comm: *mut CommHandle, stream: *mut c_void,
    ) -> NcclResult {
        reduce("ncclReduce", send, recv, count, dt, op, rt, None, comm, stream)
    }
}

/// AllGather as `name` (ncclAllGather, or jitcclWiredAllGather).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn all_gather(
    name: &str, send: *const c_void, recv: *mut c_void, count: usize, dt: c_int, wire: Option<Wire>,
    comm: *mut CommHandle, stream: *mut c_void,
) -> NcclResult {
    call(name, comm, stream, dt, |l, s, dt| {
        let total = all(l, count)?;
        typed!(dt, T => via!(l, wire, all_gather(&buf::<T>(l, send, count)?, &buf::<T>(l, recv, total)?, count, s)))?;
        Ok(())
    })
}

export! {
    ncclAllGather / pncclAllGather(
        send: *const c_void, recv: *mut c_void, count: usize, dt: c_int, comm: *mut CommHandle, stream: *mut c_void,
    ) -> NcclResult {
        all_gather("ncclAllGather", send, recv, count, dt, None, comm, stream)
    }
}

/// ReduceScatter as `name` (ncclReduceScatter, or jitcclWiredReduceScatter).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn reduce_scatter(
    name: &str, send: *const c_void, recv: *mut c_void, count: usize, dt: c_int, op: c_int, wire: Option<Wire>,
    comm: *mut CommHandle, stream: *mut c_void,
) -> NcclResult {
    call(name, comm, stream, dt, |l, s, dt| {
        let (op, total) = (op_for(l, op, dt)?, all(l, count)?);
        typed!(dt, T => via!(l, wire, reduce_scatter(&buf::<T>(l, send, total)?, &buf::<T>(l, recv, count)?, count, op, s)))?;
        Ok(())
    })
}

export! {
    ncclReduceScatter / pncclReduceScatter(
        send: *const c_void, recv: *mut c_void, count: usize, dt: c_int, op: c_int, comm: *mut CommHandle,
        stream: *mut c_void,
    ) -> NcclResult {
        reduce_scatter("ncclReduceScatter", send, recv, count, dt, op, None, comm, stream)
    }
}

export! {
    ncclAlltoAll / pncclAlltoAll(
        send: *const c_void, recv: *mut c_void, count: usize, dt: c_int, comm: *mut CommHandle, stream: *mut c_void,
    ) -> NcclResult {
        call("ncclAlltoAll", comm, stream, dt, |l, s, dt| {
            let total = all(l, count)?;
            typed!(dt, T => l.comm.all_to_all(&buf::<T>(l, send, total)?, &buf::<T>(l, recv, total)?, count, s))?;
            Ok(())
        })
    }
}

export! {
    ncclGather / pncclGather(
        send: *const c_void, recv: *mut c_void, count: usize, dt: c_int, rt: c_int, comm: *mut CommHandle,
        stream: *mut c_void,
    ) -> NcclResult {
        call("ncclGather", comm, stream, dt, |l, s, dt| {
            let (rt, total) = (root(rt)?, all(l, count)?);
            typed!(dt, T => l.comm.gather(&buf::<T>(l, send, count)?, &buf::<T>(l, recv, total)?, count, rt, s))?;
            Ok(())
        })
    }
}

export! {
    ncclScatter / pncclScatter(
        send: *const c_void, recv: *mut c_void, count: usize, dt: c_int, rt: c_int, comm: *mut CommHandle,
        stream: *mut c_void,
    ) -> NcclResult {
        call("ncclScatter", comm, stream, dt, |l, s, dt| {
            let (rt, total) = (root(rt)?, all(l, count)?);
            typed!(dt, T => l.comm.scatter(&buf::<T>(l, send, total)?, &buf::<T>(l, recv, count)?, count, rt, s))?;
            Ok(())
        })
    }
}

export! {
    ncclSend / pncclSend(
        send: *const c_void, count: usize, dt: c_int, to: c_int, comm: *mut CommHandle, stream: *mut c_void,
    ) -> NcclResult {
        call("ncclSend", comm, stream, dt, |l, s, dt| {
            let to = peer(to)?;
            typed!(dt, T => l.comm.send(&buf::<T>(l, send, count)?, count, to, s))?;
            Ok(())
        })
    }
}

export! {
    ncclRecv / pncclRecv(
        recv: *mut c_void, count: usize, dt: c_int, from: c_int, comm: *mut CommHandle, stream: *mut c_void,
    ) -> NcclResult {
        call("ncclRecv", comm, stream, dt, |l, s, dt| {
            let from = peer(from)?;
            typed!(dt, T => l.comm.recv(&buf::<T>(l, recv, count)?, count, from, s))?;
            Ok(())
        })
    }
}

export! {
    /// An op multiplying each rank's input by its `scalar` before summing. Host residence:
    /// the value is read now; device residence: at each call, from the rank's memory.
    ncclRedOpCreatePreMulSum / pncclRedOpCreatePreMulSum(
        op: *mut c_int, scalar: *mut c_void, dt: c_int, residence: c_int, comm: *mut CommHandle,
    ) -> NcclResult {
        guard("ncclRedOpCreatePreMulSum", last_error(comm), || {
            let live = CommHandle::live(comm)?;
            let d = dtype(dt)?;
            if op.is_null() || scalar.is_null() {
                return Err(fail(INVALID_ARGUMENT, "op or scalar is NULL"));
            }
            let scalar = match residence {
                0 => Scalar::At(scalar as usize),
                1 => Scalar::Value(scalar_value(d, std::slice::from_raw_parts(scalar as *const u8, d.size()))),
                r => return Err(fail(INVALID_ARGUMENT, format!("scalar residence {r}: device (0) or host (1)"))),
            };
            let mut ops = live.ops.lock().unwrap_or_else(|e| e.into_inner());
            let slot = ops.iter().position(Option::is_none).unwrap_or(ops.len());
            if slot == ops.len() {
                ops.push(None);
            }
            ops[slot] = Some(PreMul { dtype: d, scalar });
            *op = NUM_BUILTIN_OPS + slot as c_int;
            Ok(SUCCESS)
        })
    }
}

export! {
    ncclRedOpDestroy / pncclRedOpDestroy(op: c_int, comm: *mut CommHandle) -> NcclResult {
        guard("ncclRedOpDestroy", last_error(comm), || {
            let live = CommHandle::live(comm)?;
            let mut ops = live.ops.lock().unwrap_or_else(|e| e.into_inner());
            match user_op_index(op).and_then(|i| ops.get_mut(i)).filter(|e| e.is_some()) {
                Some(entry) => {
                    *entry = None;
                    Ok(SUCCESS)
                }
                None => Err(fail(INVALID_ARGUMENT, format!("op {op} is not a live op made for this communicator"))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_read_as_their_type() {
        assert_eq!(scalar_value(DataType::I32, &(-3i32).to_le_bytes()), -3.0);
        assert_eq!(scalar_value(DataType::F16, &half::f16::from_f64(0.5).to_le_bytes()), 0.5);
        assert_eq!(scalar_value(DataType::U8, &[200]), 200.0);
        assert_eq!(scalar_value(DataType::F64, &2.25f64.to_le_bytes()), 2.25);
    }
}
