"""Buffers as the C API takes them: an address, an element count and an ncclDataType_t,
from a numpy array (any of the types jitccl has, bfloat16 and fp8 from ml_dtypes too) or
a writable object of the buffer protocol (bytearray, array.array, memoryview)."""

import ctypes
import struct

# numpy dtype names and buffer-protocol formats to ncclDataType_t.
_DTYPES = {
    "int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5, "float16": 6,
    "float32": 7, "float64": 8, "bfloat16": 9, "float8_e4m3fn": 10, "float8_e5m2": 11,
}
_FORMATS = {"b": (0, 1), "B": (1, 1), "e": (6, 2), "f": (7, 4), "d": (8, 8)}
_INT_FORMATS = {"h": None, "i": True, "l": True, "q": True, "I": False, "L": False, "Q": False}


class Buf:
    """One buffer of a call: its address, element count and data type."""

    __slots__ = ("ptr", "count", "dtype", "keep")

    def __init__(self, ptr: int, count: int, dtype: int, keep):
        self.ptr, self.count, self.dtype, self.keep = ptr, count, dtype, keep


def _int_format(fmt: str, size: int):
    signed = _INT_FORMATS.get(fmt)
    if signed is None or size not in (4, 8):
        return None
    return {(4, True): 2, (4, False): 3, (8, True): 4, (8, False): 5}[(size, signed)]


def as_buf(obj, what: str, writable: bool) -> Buf:
    """`obj` as a buffer of a call; TypeError or ValueError (naming `what`) if it cannot be."""
    if hasattr(obj, "__array_interface__") and hasattr(obj, "dtype"):
        name = obj.dtype.name
        if name not in _DTYPES:
            raise TypeError(f"{what}: numpy dtype {name} is not one jitccl has ({', '.join(_DTYPES)})")
        if not obj.flags["C_CONTIGUOUS"]:
            raise ValueError(f"{what}: the array is not contiguous; pass numpy.ascontiguousarray(...) "
                             f"(and copy the result back)")
        if writable and not obj.flags["WRITEABLE"]:
            raise ValueError(f"{what}: the array is read-only")
        return Buf(obj.__array_interface__["data"][0], obj.size, _DTYPES[name], obj)
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError(f"{what}: expected a numpy array or a writable buffer, got {type(obj).__name__}") from None
    if not view.c_contiguous:
        raise ValueError(f"{what}: the buffer is not contiguous")
    fmt = view.format.lstrip("@=<")
    dtype = _FORMATS.get(fmt, (None, 0))[0] if fmt in _FORMATS else _int_format(fmt, view.itemsize)
    if dtype is None:
        raise TypeError(f"{what}: buffer format {view.format!r} is not one jitccl has")
    if view.readonly:
        raise ValueError(f"{what}: the buffer is read-only (pass a numpy array, or a bytearray)")
    raw = (ctypes.c_char * view.nbytes).from_buffer(view.cast("B"))
    return Buf(ctypes.addressof(raw), view.nbytes // view.itemsize, dtype, (view, raw))


# Scalars of a call's type (a PreMulSum's factor), by ncclDataType_t: struct formats.
_PACK = {0: "b", 1: "B", 2: "i", 3: "I", 4: "q", 5: "Q", 6: "e", 7: "f", 8: "d"}


def encode(value: float, dtype: int) -> bytes:
    """`value` as one element of `dtype`, little-endian (integer types take whole numbers)."""
    if dtype in _PACK:
        fmt = _PACK[dtype]
        return struct.pack("<" + fmt, int(value) if fmt in "bBiIqQ" else value)
    if dtype == 9:
        # bfloat16: the top half of the float32, rounded to nearest even.
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        bits += 0x7FFF + ((bits >> 16) & 1)
        return struct.pack("<H", (bits >> 16) & 0xFFFF)
    try:
        import ml_dtypes
        import numpy
    except ImportError:
        raise TypeError("a PreMulSum factor of an fp8 type needs numpy and ml_dtypes") from None
    name = {10: "float8_e4m3fn", 11: "float8_e5m2"}[dtype]
    return numpy.array([value], dtype=getattr(ml_dtypes, name)).tobytes()
