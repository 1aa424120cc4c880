"""One rank of a ctypes program on jitccl's libnccl.so.2, the way vLLM's pynccl loads NCCL:
no build step, the library named by a path, collectives on numpy arrays checked against a
reference each rank computes itself. Rank and size come from the launcher (RANK,
WORLD_SIZE); NCCL_COMM_ID fixes the root, so every rank makes the same unique id."""

import ctypes
import os
import sys

import numpy as np

lib = ctypes.CDLL(os.environ["NCCL_SO"])
rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


lib.ncclGetErrorString.restype = ctypes.c_char_p
lib.ncclGetLastError.restype = ctypes.c_char_p
comm_t = ctypes.c_void_p
NCCL = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5,
        "float16": 6, "float32": 7, "float64": 8}
SUM, PROD, MAX, MIN, AVG = range(5)
checks = 0


def check(res, what):
    if res != 0:
        text = lib.ncclGetLastError(None).decode()
        sys.exit(f"rank {rank}: {what} returned {res} ({lib.ncclGetErrorString(res).decode()}): {text}")


def ptr(a):
    return ctypes.c_void_p(a.ctypes.data)


def expect(got, want, what):
    global checks
    if not np.array_equal(got, want):
        sys.exit(f"rank {rank}: {what}: got {got[:8]}..., expected {want[:8]}...")
    checks += 1


def inputs(r, n, dtype):
    return ((np.arange(n) + 3 * r) % 7 + 1).astype(dtype)


version = ctypes.c_int()
check(lib.ncclGetVersion(ctypes.byref(version)), "ncclGetVersion")
expect(np.array([version.value]), np.array([23007]), "ncclGetVersion")
uid = UniqueId()
check(lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
comm = comm_t()
check(lib.ncclCommInitRank(ctypes.byref(comm), size, uid, rank), "ncclCommInitRank")
count = ctypes.c_int()
check(lib.ncclCommCount(comm, ctypes.byref(count)), "ncclCommCount")
expect(np.array([count.value]), np.array([size]), "ncclCommCount")

for name, code in NCCL.items():
    for n in (0, 1, 1023):
        every = [inputs(r, n, name) for r in range(size)]
        send, recv = every[rank].copy(), np.zeros(n, name)
        for op, ref in ((SUM, np.sum), (MAX, np.max), (MIN, np.min)):
            check(lib.ncclAllReduce(ptr(send), ptr(recv), ctypes.c_size_t(n), code, op, comm, None),
                  f"ncclAllReduce {name}")
            want = ref(np.stack(every), axis=0).astype(name) if n else recv
            expect(recv, want, f"AllReduce op {op} {name} x{n}")

n = 4097
every = [inputs(r, n, "float32") for r in range(size)]
buf = every[rank].copy()
check(lib.ncclBroadcast(ptr(buf), ptr(buf), ctypes.c_size_t(n), NCCL["float32"], size - 1, comm, None),
      "ncclBroadcast")
expect(buf, every[size - 1], "Broadcast in place")
gathered = np.zeros(n * size, "float32")
check(lib.ncclAllGather(ptr(every[rank]), ptr(gathered), ctypes.c_size_t(n), NCCL["float32"], comm, None),
      "ncclAllGather")
expect(gathered, np.concatenate(every), "AllGather")
full = [inputs(r, n * size, "float32") for r in range(size)]
part = np.zeros(n, "float32")
check(lib.ncclReduceScatter(ptr(full[rank]), ptr(part), ctypes.c_size_t(n), NCCL["float32"], SUM, comm, None),
      "ncclReduceScatter")
expect(part, np.sum(np.stack(full), axis=0)[rank * n:(rank + 1) * n], "ReduceScatter")

bad = lib.ncclAllReduce(ptr(part), ptr(part), ctypes.c_size_t(n), 99, SUM, comm, None)
if bad != 4 or b"data type 99" not in lib.ncclGetLastError(comm):
    sys.exit(f"rank {rank}: a bad data type gave {bad}: {lib.ncclGetLastError(comm)}")
checks += 1
check(lib.ncclCommDestroy(comm), "ncclCommDestroy")
print(f"rank {rank}: {checks} checks passed")
