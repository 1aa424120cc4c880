"""Tensors as the C API's buffers: data types, contiguous staging, reduce ops."""

from typing import Callable, Optional

import torch
import torch.distributed as dist

from .._buffers import Buf

# torch dtypes to ncclDataType_t.
_DTYPES = {
    torch.int8: 0, torch.uint8: 1, torch.int32: 2, torch.int64: 4, torch.float16: 6, torch.float32: 7,
    torch.float64: 8, torch.bfloat16: 9,
}
for _name, _code in (("uint32", 3), ("uint64", 5), ("float8_e4m3fn", 10), ("float8_e5m2", 11)):
    if getattr(torch, _name, None) is not None:
        _DTYPES[getattr(torch, _name)] = _code
_COMPLEX = {torch.complex64, torch.complex128, torch.complex32}
_INTEGER = {torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64} | {
    getattr(torch, n) for n in ("uint16", "uint32", "uint64") if getattr(torch, n, None) is not None}

_R = dist.ReduceOp.RedOpType
_SIMPLE_OPS = {_R.SUM: "sum", _R.PRODUCT: "prod", _R.MIN: "min", _R.MAX: "max", _R.AVG: "avg"}
_BITWISE = {_R.BAND: torch.bitwise_and, _R.BOR: torch.bitwise_or, _R.BXOR: torch.bitwise_xor}

Finish = Optional[Callable[[], None]]


class _Reject(Exception):
    """A bad argument, found before anything is posted (raised as its `kind`)."""

    def __init__(self, kind, text):
        super().__init__(text)
        self.kind = kind


# ---- Tensors as the C API's buffers --------------------------------------------------------


def _check_tensor(t, what: str, cuda_device) -> None:
    """Raises _Reject unless `t` is a dense tensor of a type jitccl has, on the CPU or (when
    `cuda_device` is not None) on that CUDA device."""
    if not isinstance(t, torch.Tensor):
        raise _Reject(TypeError, f"{what}: expected a tensor, got {type(t).__name__}")
    if t.is_cuda:
        if cuda_device is None:
            raise _Reject(ValueError, f"{what}: a tensor on {t.device}, and this group has no CUDA communicator "
                                      f"(torch.cuda.is_available() was False when it was made)")
        if t.device.index != cuda_device:
            raise _Reject(ValueError, f"{what}: a tensor on {t.device}, and this group's CUDA communicator is on "
                                      f"cuda:{cuda_device} (call torch.cuda.set_device before making the group)")
    elif t.device.type != "cpu":
        raise _Reject(ValueError, f"{what}: the jitccl backend takes CPU and CUDA tensors, got one on {t.device}")
    if t.layout != torch.strided:
        raise _Reject(ValueError, f"{what}: only dense (strided) tensors, got {t.layout}")
    if t.dtype not in _DTYPES and t.dtype not in _COMPLEX and t.dtype != torch.bool:
        raise _Reject(TypeError, f"{what}: data type {t.dtype} is not one jitccl has")


def _flat(t: torch.Tensor) -> torch.Tensor:
    """A contiguous `t`'s elements as a tensor of a jitccl type (bool as uint8, complex as
    its real pairs), sharing its memory."""
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    if t.dtype in _COMPLEX:
        return torch.view_as_real(t)
    return t


def _buf(t: torch.Tensor) -> Buf:
    """A contiguous tensor as a call's buffer; the Buf holds the tensor."""
    f = _flat(t)
    return Buf(f.data_ptr(), f.numel(), _DTYPES[f.dtype], t)


class _Staged:
    """A tensor a call uses: itself when contiguous, else a contiguous copy (`copy_in`: of its
    values) whose result `back()` copies into it."""

    def __init__(self, t: torch.Tensor, copy_in: bool = True):
        self.t = t
        if t.is_contiguous():
            self.c = t
        else:
            self.c = t.contiguous() if copy_in else torch.empty(t.shape, dtype=t.dtype, device=t.device)

    def back(self) -> None:
        if self.c is not self.t:
            self.t.copy_(self.c)


def _op_of(reduce_op):
    """(RedOpType, premul factor or None) of a ReduceOp (or a bare RedOpType)."""
    if isinstance(reduce_op, _R):
        return reduce_op, None
    kind, factor = reduce_op.__getstate__()
    if isinstance(factor, torch.Tensor):
        factor = factor.item()
    return kind, factor


def _reduction(kind, factor, dtype):
    """The jitccl op for a reduction of `dtype`, or a bitwise fold (a torch function) done
    by an all-gather; _Reject if neither is right for the type."""
    name = kind.name if hasattr(kind, "name") else str(kind)
    if kind in _BITWISE:
        if dtype in _INTEGER or dtype == torch.bool:
            return None, _BITWISE[kind]
        raise _Reject(TypeError, f"ReduceOp.{name} needs an integer or bool tensor, got {dtype}")
    if dtype == torch.bool:
        if kind in (_R.MIN, _R.MAX):
            return _SIMPLE_OPS[kind], None
        raise _Reject(TypeError, f"ReduceOp.{name} on bool tensors: only MIN, MAX, BAND, BOR, BXOR")
    if kind == _R.PREMUL_SUM:
        if not (dtype.is_floating_point or dtype in _COMPLEX):
            raise _Reject(TypeError, f"PREMUL_SUM needs a floating-point tensor (as NCCL's), got {dtype}")
        if factor is None:
            raise _Reject(ValueError, "PREMUL_SUM without a factor (use dist._make_nccl_premul_sum)")
        if isinstance(factor, complex):
            raise _Reject(TypeError, "PREMUL_SUM with a complex factor")
        return ("premul_sum", float(factor)), None
    if dtype in _COMPLEX and kind not in (_R.SUM, _R.AVG):
        raise _Reject(TypeError, f"ReduceOp.{name} on complex tensors: only SUM, AVG and PREMUL_SUM")
    if kind in _SIMPLE_OPS:
        return _SIMPLE_OPS[kind], None
    raise _Reject(ValueError, f"ReduceOp.{name} is not supported")


_RESOLVED: dict = {}


def _resolve(reduce_op, dtype):
    """(jitccl op, bitwise fold, RedOpType) of `reduce_op` on `dtype`: _reduction's answer,
    kept for the ops without a factor (it is the same every call)."""
    kind, factor = _op_of(reduce_op)
    if dtype is None:  # a call without tensors
        return None, None, kind
    if factor is not None:
        return _reduction(kind, factor, dtype) + (kind,)
    got = _RESOLVED.get((kind, dtype))
    if got is None:
        got = _RESOLVED[(kind, dtype)] = _reduction(kind, None, dtype) + (kind,)
    return got
