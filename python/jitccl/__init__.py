"""jitccl from Python: communicators and every collective on numpy arrays and buffers,
through jitccl's NCCL-compatible C library (libnccl.so.2, loaded with ctypes; the package
ships it).

    import numpy as np, jitccl
    uid = jitccl.get_unique_id()            # on one rank, then pass bytes(uid) to the others
    comm = jitccl.Comm(nranks, uid, rank)   # every rank
    x = np.ones(1024, np.float32)
    comm.all_reduce(x)                      # in place, complete on return (host)
"""

from .comm import Comm, Memory, UniqueId, get_unique_id, group, version
from .errors import (
    Error, InternalError, InvalidArgument, InvalidUsage, RemoteError, SystemError_, Timeout, UnhandledCudaError,
)
from ._lib import PATH as library_path

__all__ = [
    "Comm", "Memory", "UniqueId", "get_unique_id", "group", "version", "library_path", "Error", "InternalError",
    "InvalidArgument", "InvalidUsage", "RemoteError", "SystemError_", "Timeout", "UnhandledCudaError",
]
