"""One rank of the package's test (capi/tests/python.rs runs it under `jitccl launch`):
every collective of `jitccl.Comm` on numpy arrays and on plain buffers against a reference
each rank computes, in and out of place; wire formats; groups, split, nonblocking init, PreMulSum,
errors as exceptions, and the end of a communicator. Prints "rank R: N checks passed"."""

import array
import ctypes
import os
import sys

import numpy as np

import jitccl

rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
checks = 0


def expect(cond, what):
    global checks
    if not cond:
        sys.exit(f"rank {rank}: {what}")
    checks += 1


def equal(got, want, what):
    expect(np.array_equal(np.asarray(got), np.asarray(want)), f"{what}: got {np.asarray(got)[:6]}, expected {np.asarray(want)[:6]}")


def inp(r, n, dtype="float32", salt=0):
    return ((np.arange(n) + 3 * r + salt) % 7 + 1).astype(dtype)


expect(jitccl.version() == (2, 30, 7), f"version {jitccl.version()}")
uid = jitccl.get_unique_id()
comm = jitccl.Comm(size, uid, rank, name="python")
expect((comm.rank, comm.size, comm.cuda_device) == (rank, size, None), f"rank/size/device {comm}")

n = 1000
for dtype in ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64"):
    every = np.stack([inp(r, n, dtype) for r in range(size)])
    for op, ref in (("sum", every.sum(0)), ("max", every.max(0)), ("min", every.min(0))):
        out = np.zeros(n, dtype)
        comm.all_reduce(inp(rank, n, dtype), out, op=op)
        equal(out, ref.astype(dtype), f"all_reduce {op} {dtype}")
x = inp(rank, n)
comm.all_reduce(x, op="prod")
equal(x, np.prod(np.stack([inp(r, n) for r in range(size)]), 0), "all_reduce prod in place")
x = inp(rank, n, "float64")
comm.all_reduce(x, op="avg")
expect(np.allclose(x, np.mean(np.stack([inp(r, n, "float64") for r in range(size)]), 0)), "all_reduce avg")
x = inp(rank, n)
comm.all_reduce(x, op=("premul_sum", 2.0))
equal(x, 2 * np.sum(np.stack([inp(r, n) for r in range(size)]), 0), "all_reduce premul_sum")

# A plain buffer: array.array of floats.
buf = array.array("f", inp(rank, 64).tolist())
comm.all_reduce(buf)
equal(np.array(buf), np.sum(np.stack([inp(r, 64) for r in range(size)]), 0), "all_reduce on an array.array")

# ncclMemAlloc memory (the host arena: the direct algorithms), in and out of place.
mem = jitccl.Memory(2 * 64 * 4)
a = np.frombuffer((ctypes.c_float * 128).from_address(mem.address), np.float32)
a[:64] = inp(rank, 64)
comm.all_reduce(mem.buf(64, 7))
equal(a[:64], np.sum(np.stack([inp(r, 64) for r in range(size)]), 0), "all_reduce in ncclMemAlloc memory")
a[:64] = inp(rank, 64)
comm.all_reduce(mem.buf(64, 7), mem.buf(64, 7, offset=256), op="max")
equal(a[64:], np.max(np.stack([inp(r, 64) for r in range(size)]), 0), "all_reduce max into ncclMemAlloc memory")
try:
    mem.buf(65, 7, offset=256)
    expect(False, "a view past the memory's end is refused")
except ValueError as e:
    expect("do not fit 512 bytes" in str(e), f"the refusal says why: {e}")
del a
mem.free()
mem.free()  # twice: nothing more happens
expect(mem.address is None, "freed memory has no address")

x = inp(rank, n)
comm.broadcast(x, root=size - 1)
equal(x, inp(size - 1, n), "broadcast")
x, out = inp(rank, n), np.zeros(n, "float32")
comm.reduce(x, out, root=0)
if rank == 0:
    equal(out, np.sum(np.stack([inp(r, n) for r in range(size)]), 0), "reduce")
out = np.zeros(n * size, "float32")
comm.all_gather(inp(rank, n), out)
equal(out, np.concatenate([inp(r, n) for r in range(size)]), "all_gather")
out = np.zeros(n, "float32")
comm.reduce_scatter(inp(rank, n * size, salt=1), out)
equal(out, np.sum(np.stack([inp(r, n * size, salt=1) for r in range(size)]), 0)[rank * n:(rank + 1) * n], "reduce_scatter")
send = np.concatenate([np.full(10, rank * 100 + q, "int32") for q in range(size)])
out = np.zeros(10 * size, "int32")
comm.all_to_all(send, out)
equal(out, np.concatenate([np.full(10, r * 100 + rank, "int32") for r in range(size)]), "all_to_all")
out = np.zeros(n * size, "float32") if rank == 0 else None
comm.gather(inp(rank, n), out, root=0)
if rank == 0:
    equal(out, np.concatenate([inp(r, n) for r in range(size)]), "gather")
out = np.zeros(n, "float32")
comm.scatter(np.concatenate([inp(q, n) for q in range(size)]) if rank == 0 else None, out, root=0)
equal(out, inp(rank, n), "scatter")

# Sends and receives in a group: to the next rank, from the previous.
got = np.zeros(n, "float32")
with jitccl.group():
    comm.recv(got, (rank - 1) % size)
    comm.send(inp(rank, n), (rank + 1) % size)
equal(got, inp((rank - 1) % size, n), "send/recv in a group")

# Errors are exceptions carrying the kind and the library's text.
try:
    comm.all_reduce(np.zeros(4, "float32"), op="xor")
    expect(False, "a bad op was accepted")
except ValueError:
    checks += 1
try:
    comm.broadcast(np.zeros(4, "float32"), root=size)
    expect(False, "a bad root was accepted")
except jitccl.InvalidArgument as e:
    expect(e.kind == "InvalidArgument" and e.code == 4 and "root" in str(e), f"the error: {e!r}")
try:
    comm.all_reduce(np.zeros((4, 4), "float32")[:, 0])
    expect(False, "a non-contiguous array was accepted")
except ValueError as e:
    expect("contiguous" in str(e), f"the error: {e}")

# Wire formats: within the format's bound of the exact result (docs/guide.md, "Wire
# formats"), not the exact bits where ranks send, the same bits on every rank.
def noisy(r, count, salt):
    return np.sin(np.arange(count) * 0.37 + r * 1.3 + salt).astype("float32")


def same_everywhere(x, what):
    every = np.zeros(size * x.nbytes, "uint8")
    comm.all_gather(x.view("uint8"), every)
    expect(all(np.array_equal(row, x.view("uint8")) for row in every.reshape(size, -1)), f"{what}: ranks differ")


m = 600
every = np.stack([noisy(r, m, 1) for r in range(size)]).astype("float64")
exact = every.sum(0)
mags = np.abs(every).sum(0)
for name, u, c in (("bf16", 2 ** -8, 0.0), ("fp8e4m3b128", 2 ** -4, 2 ** -17),
                   ("int8", 0.0, 1 / 250)):
    x = noisy(rank, m, 1)
    comm.all_reduce(x, wire=name)
    # The bound with A, the largest sum of magnitudes in a block, taken over the whole array.
    bound = size * ((u + 2 ** -24) * mags + c * mags.max() + 1e-30) * (1 + u) ** size
    expect(np.all(np.abs(x - exact) <= bound), f"all_reduce in {name}: error above the bound")
    expect(size == 1 or np.any(x != exact.astype("float32")), f"all_reduce in {name}: the exact result")
    same_everywhere(x, f"all_reduce in {name}")
x = noisy(rank, m, 2)
comm.broadcast(x, root=size - 1, wire="bf16")
want = noisy(size - 1, m, 2)
expect(np.all(np.abs(x - want) <= 2 ** -8 * np.abs(want) + 1e-30), "broadcast in bf16")
same_everywhere(x, "broadcast in bf16")
out = np.zeros(m * size, "float32")
comm.all_gather(noisy(rank, m, 3), out, wire="fp16")
want = np.concatenate([noisy(r, m, 3) for r in range(size)])
expect(np.all(np.abs(out - want) <= 2 ** -11 * np.abs(want) + 2 ** -25), "all_gather in fp16")
out = np.zeros(m // size, "float32")
comm.reduce_scatter(noisy(rank, m // size * size, 4), out, wire="bf16")
every = np.stack([noisy(r, m // size * size, 4) for r in range(size)]).astype("float64")
block = slice(rank * (m // size), (rank + 1) * (m // size))
bound = size * (2 ** -8 + 2 ** -24) * np.abs(every).sum(0)[block] * (1 + 2 ** -8) ** size
expect(np.all(np.abs(out - every.sum(0)[block]) <= bound), "reduce_scatter in bf16")
y = np.zeros(m, "float32")
comm.reduce(noisy(rank, m, 5), y, op="avg", root=0, wire="int8b32")
if rank == 0:
    want = np.stack([noisy(r, m, 5) for r in range(size)]).astype("float64").mean(0)
    expect(np.allclose(y, want, atol=size / 250 * 2), "reduce avg in int8b32")
x, plain = noisy(rank, m, 6), noisy(rank, m, 6)
comm.all_reduce(x, wire="exact")
comm.all_reduce(plain)
equal(x, plain, "all_reduce in the exact wire is the plain call (no JITCCL_WIRE)")
for bad, kind, why in (("int4", ValueError, "unknown wire 'int4'"), ("int8b48", ValueError, "the blocks are"),
                       (16, TypeError, "named by a string")):
    try:
        comm.all_reduce(np.zeros(4, "float32"), wire=bad)
        expect(False, f"wire {bad!r} was accepted")
    except kind as e:
        expect(why in str(e), f"wire {bad!r}: {e}")
ints = np.arange(8, dtype="int32")
try:
    comm.all_reduce(ints, wire="bf16")
    expect(False, "an int32 all_reduce in bf16 was accepted")
except jitccl.InvalidArgument as e:
    expect(isinstance(e, ValueError) and "not i32" in str(e), f"the error: {e}")
equal(ints, np.arange(8, dtype="int32"), "a refused call writes nothing")

# Split: even and odd ranks.
half = comm.split(rank % 2)
x = np.full(8, float(rank), "float32")
half.all_reduce(x)
equal(x, np.full(8, float(sum(r for r in range(size) if r % 2 == rank % 2)), "float32"), "all_reduce on a split")
expect(comm.split(None) is None, "a split without a color gave a communicator")
half.destroy()

# A nonblocking communicator on rank 0's fresh id (made without NCCL_COMM_ID, broadcast):
# init and calls return at once, and wait() tells when they are done.
raw = np.zeros(128, "uint8")
if rank == 0:
    os.environ.pop("NCCL_COMM_ID", None)
    os.environ.pop("JITCCL_COMM_ID", None)
    raw[:] = np.frombuffer(bytes(jitccl.get_unique_id()), "uint8")
comm.broadcast(raw, root=0)
nb = jitccl.Comm(size, jitccl.UniqueId(raw.tobytes()), rank, blocking=False)
nb.wait(timeout=60)
x = np.ones(16, "float32")
nb.all_reduce(x)
nb.wait(timeout=60)
equal(x, np.full(16, float(size)), "all_reduce on a nonblocking communicator")
nb.destroy()
comm.finalize()
comm.destroy()
try:
    comm.all_reduce(np.zeros(4, "float32"))
    expect(False, "a destroyed communicator took a call")
except jitccl.InvalidUsage:
    checks += 1
print(f"rank {rank}: {checks} checks passed", flush=True)
