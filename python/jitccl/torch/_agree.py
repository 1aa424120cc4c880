"""Agreement: what every rank calls, checked before any data moves."""

import ctypes
import zlib

import torch

from ._tensors import _R

# ---- Agreement: what every rank calls, checked before any data moves -------------------------

# jitccl's kernels fail a call whose ranks pass other counts, types or ops, but the rank
# that notices names only its peer, and a rank that only sends may return first. Before
# each collective the ranks all-gather a descriptor of their call (operation, type, counts,
# root, op) and refuse it, every rank alike and naming both calls, when they differ (roots
# and the per-tensor counts of coalesced calls included); a send tells its receiver what
# it sends.
_OPS = ["allreduce", "allreduce_coalesced", "reduce", "broadcast", "allgather", "allgather_coalesced",
        "all_gather_into_tensor", "allgather_into_tensor_coalesced", "reduce_scatter", "reduce_scatter_tensor",
        "reduce_scatter_tensor_coalesced", "gather", "scatter", "all_to_all_single", "all_to_all", "barrier"]
_DTYPE_NAMES = ["bool", "int8", "uint8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16",
                "bfloat16", "float32", "float64", "complex32", "complex64", "complex128", "float8_e4m3fn",
                "float8_e5m2"]
_DTYPE_ID = {getattr(torch, n): i + 1 for i, n in enumerate(_DTYPE_NAMES) if getattr(torch, n, None) is not None}
_REDOPS = {k: i for i, k in enumerate(_R.__members__.values())}
_OP_ID = {op: i for i, op in enumerate(_OPS)}


def _desc(op: str, dtype, counts, root: int = -1, redop: int = -1, wire: int = 0) -> tuple:
    """The fixed-size descriptor of a call (8 int64s); `redop`: _redop's number of its
    reduction, if it has one (the premul factor may differ by rank); `wire`: _wire_id of the
    wire format it asks for, 0 for none."""
    if len(counts) == 1:  # most calls: the count itself stands for the list
        total = crc = int(counts[0])
    else:
        counts = [int(c) for c in counts]
        total, crc = sum(counts), zlib.crc32(b",".join(str(c).encode() for c in counts))
    return (_OP_ID[op], _DTYPE_ID.get(dtype, 0), len(counts), total, crc, root, redop, wire)


_WIRE_FORMATS = ["exact", "bf16", "fp16", "fp8e4m3", "fp8e5m2", "int8"]


def _wire_id(w) -> int:
    """The descriptor's number of a jitcclWire_t (never 0, the calls that ask for none)."""
    return 1 + (w.format << 16 | w.block)


def _wire_name(wid: int) -> str:
    code, block = (wid - 1) >> 16, (wid - 1) & 0xFFFF
    name = _WIRE_FORMATS[code] if 0 <= code < len(_WIRE_FORMATS) else f"format {code}"
    return name + (f"b{block}" if block else "")


def _redop(kind) -> int:
    """The descriptor's number of a reduction (a RedOpType)."""
    return _REDOPS.get(kind, -2)


def _describe(d: list) -> str:
    op = _OPS[d[0]] if 0 <= d[0] < len(_OPS) else f"operation {d[0]}"
    dtype = _DTYPE_NAMES[d[1] - 1] if 1 <= d[1] <= len(_DTYPE_NAMES) else "?"
    if d[2] == 0:  # no counts: a barrier, or an all-to-all (its counts are checked by pair)
        what = op if d[1] == 0 else f"{op} of {dtype}"
    else:
        what = f"{op} of {d[3]} {dtype} elements" + (f" in {d[2]} tensors" if d[2] != 1 else "")
    if d[5] >= 0:
        what += f", root {d[5]}"
    if d[6] >= 0:
        what += f", ReduceOp.{list(_R.__members__)[d[6]]}"
    if d[7]:
        what += f", in the {_wire_name(d[7])} wire"
    return what


class _Mismatch(Exception):
    """The ranks called a collective differently (every rank raises it)."""


_INT64 = 4  # ncclInt64


class _Agreement:
    """One group's check that its ranks agree on each call: an all-gather of the calls'
    descriptors on the group's host communicator, in host-arena memory made once (the
    peers read it in place: a few microseconds, against tens on plain memory), and a
    compare of bytes."""

    def __init__(self, size: int, memory):
        self.size = size
        self.memory = memory  # jitccl.Memory of 64 * (size + 1) bytes, on the host
        self.mine = (ctypes.c_int64 * 8).from_address(memory.address)
        self.every = (ctypes.c_int64 * (8 * size)).from_address(memory.address + 64)
        self.bufs = (memory.buf(8, _INT64), memory.buf(8 * size, _INT64, 64))

    def check(self, comm, desc: tuple) -> None:
        """Raises _Mismatch on every rank when the ranks' descriptors differ."""
        self.mine[:] = desc
        comm.all_gather(*self.bufs)
        if bytes(self.every) != bytes(self.mine) * self.size:
            raise self.refusal()

    def refusal(self) -> "_Mismatch":
        """The _Mismatch naming what each rank called, from the gathered descriptors."""
        every = [tuple(self.every[q * 8:(q + 1) * 8]) for q in range(self.size)]
        kinds: dict = {}
        for q, d in enumerate(every):
            kinds.setdefault(_describe(d), []).append(q)
        return _Mismatch("the ranks called it differently: " + "; ".join(
            f"rank{'s' if len(qs) > 1 else ''} {', '.join(map(str, qs))}: {what}" for what, qs in kinds.items()))
