"""The C library, loaded with ctypes: jitccl's libnccl.so.2 shipped in the package (or the
one JITCCL_NCCL_SO names), with the prototypes of the functions this package calls (NCCL's,
and jitccl.h's wire formats, agreement and process group)."""

import ctypes
import os
from pathlib import Path

c_int, c_size_t, c_void_p, c_char_p = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p


class UniqueIdStruct(ctypes.Structure):
    """ncclUniqueId: 128 opaque bytes."""

    _fields_ = [("internal", ctypes.c_char * 128)]


class WireStruct(ctypes.Structure):
    """jitcclWire_t (jitccl.h): a wire format's number and its block."""

    _fields_ = [("format", c_int), ("block", c_int)]


class CallStruct(ctypes.Structure):
    """jitcclCall_t (jitccl.h): a call as the ranks compare it in jitcclAgree."""

    _fields_ = [("operation", c_char_p), ("type", c_char_p), ("counts", ctypes.POINTER(c_size_t)),
                ("ncounts", c_size_t), ("root", c_int), ("reduction", c_char_p),
                ("wire", ctypes.POINTER(WireStruct))]


# jitcclJob_t (jitccl.h): a process-group job, given its argument.
JOB = ctypes.CFUNCTYPE(c_int, c_void_p)


def _path() -> str:
    given = os.environ.get("JITCCL_NCCL_SO")
    if given:
        return given
    shipped = Path(__file__).resolve().parent / "lib" / "libnccl.so.2"
    if not shipped.exists():
        raise ImportError(f"jitccl: {shipped} is missing: install the package with pip (it builds the "
                          f"library), or set JITCCL_NCCL_SO to a built libnccl.so.2")
    return str(shipped)


lib = ctypes.CDLL(_path())
PATH = lib._name

_PROTOTYPES = {
    "ncclGetVersion": [ctypes.POINTER(c_int)],
    "ncclGetUniqueId": [ctypes.POINTER(UniqueIdStruct)],
    "ncclCommInitRankConfig": [ctypes.POINTER(c_void_p), c_int, UniqueIdStruct, c_int, c_void_p],
    "ncclCommInitAll": [ctypes.POINTER(c_void_p), c_int, c_void_p],
    "ncclCommSplit": [c_void_p, c_int, c_int, ctypes.POINTER(c_void_p), c_void_p],
    "ncclCommShrink": [c_void_p, ctypes.POINTER(c_int), c_int, ctypes.POINTER(c_void_p), c_void_p, c_int],
    "ncclCommFinalize": [c_void_p],
    "ncclCommDestroy": [c_void_p],
    "ncclCommAbort": [c_void_p],
    "ncclCommGetAsyncError": [c_void_p, ctypes.POINTER(c_int)],
    "ncclCommCount": [c_void_p, ctypes.POINTER(c_int)],
    "ncclCommUserRank": [c_void_p, ctypes.POINTER(c_int)],
    "ncclCommCuDevice": [c_void_p, ctypes.POINTER(c_int)],
    "ncclRedOpCreatePreMulSum": [ctypes.POINTER(c_int), c_void_p, c_int, c_int, c_void_p],
    "ncclRedOpDestroy": [c_int, c_void_p],
    "ncclAllReduce": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
    "ncclBroadcast": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
    "ncclReduce": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_int, c_void_p, c_void_p],
    "ncclAllGather": [c_void_p, c_void_p, c_size_t, c_int, c_void_p, c_void_p],
    "ncclReduceScatter": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
    "ncclAlltoAll": [c_void_p, c_void_p, c_size_t, c_int, c_void_p, c_void_p],
    "ncclGather": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
    "ncclScatter": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
    "ncclSend": [c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
    "ncclRecv": [c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
    "ncclMemAlloc": [ctypes.POINTER(c_void_p), c_size_t],
    "ncclMemFree": [c_void_p],
    "ncclGroupStart": [],
    "ncclGroupEnd": [],
    "jitcclWireFromName": [c_char_p, ctypes.POINTER(WireStruct)],
    "jitcclSettingsJson": [c_char_p, ctypes.POINTER(c_size_t)],
    "jitcclCacheDir": [c_char_p, ctypes.POINTER(c_size_t)],
    "jitcclAgree": [ctypes.POINTER(CallStruct), c_char_p, c_size_t, c_void_p],
    "jitcclProcessGroupCreate": [c_void_p, ctypes.c_double, ctypes.POINTER(c_void_p)],
    "jitcclProcessGroupSubmit": [c_void_p, c_char_p, c_int, JOB, c_void_p, ctypes.POINTER(c_void_p)],
    "jitcclProcessGroupAbort": [c_void_p],
    "jitcclProcessGroupDestroy": [c_void_p],
    "jitcclWorkWait": [c_void_p, ctypes.c_int64],
    "jitcclWorkIsCompleted": [c_void_p, ctypes.POINTER(c_int)],
    "jitcclWorkError": [c_void_p, c_char_p, ctypes.POINTER(c_size_t)],
    "jitcclWorkRelease": [c_void_p],
    "jitcclWiredAllReduce": [c_void_p, c_void_p, c_size_t, c_int, c_int, WireStruct, c_void_p, c_void_p],
    "jitcclWiredBroadcast": [c_void_p, c_void_p, c_size_t, c_int, c_int, WireStruct, c_void_p, c_void_p],
    "jitcclWiredReduce": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_int, WireStruct, c_void_p, c_void_p],
    "jitcclWiredAllGather": [c_void_p, c_void_p, c_size_t, c_int, WireStruct, c_void_p, c_void_p],
    "jitcclWiredReduceScatter": [c_void_p, c_void_p, c_size_t, c_int, c_int, WireStruct, c_void_p, c_void_p],
}
for _name, _args in _PROTOTYPES.items():
    _f = getattr(lib, _name)
    _f.argtypes = _args
    _f.restype = c_int
lib.ncclGetLastError.argtypes = [c_void_p]
lib.ncclGetLastError.restype = c_char_p
lib.ncclGetErrorString.argtypes = [c_int]
lib.ncclGetErrorString.restype = c_char_p
