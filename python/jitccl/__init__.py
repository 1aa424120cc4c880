"""jitccl from Python: communicators and every collective on numpy arrays and buffers,
through jitccl's NCCL-compatible C library (libnccl.so.2, loaded with ctypes; the package
ships it).

    import numpy as np, jitccl
    uid = jitccl.get_unique_id()            # on one rank, then pass bytes(uid) to the others
    comm = jitccl.Comm(nranks, uid, rank)   # every rank
    x = np.ones(1024, np.float32)
    comm.all_reduce(x)                      # in place, complete on return (host)
    comm.all_reduce(x, wire="bf16")         # carried in bf16, summed in fp32 (docs/guide.md)
"""

from .comm import Comm, Memory, UniqueId, get_unique_id, group, version, wire
from .errors import (
    Error, InternalError, InvalidArgument, InvalidUsage, RemoteError, SystemError_, Timeout, UnhandledCudaError,
)
from ._lib import PATH as library_path
from ._settings import settings

__all__ = [
    "Comm", "Memory", "UniqueId", "get_unique_id", "group", "version", "wire", "library_path", "settings", "Error", "InternalError",
    "InvalidArgument", "InvalidUsage", "RemoteError", "SystemError_", "Timeout", "UnhandledCudaError",
]
