"""Agreement: what every rank calls, checked before any data moves."""

import zlib

import torch

from ._tensors import _R, _op_of

# ---- Agreement: what every rank calls, checked before any data moves -------------------------

# jitccl (as NCCL) does not check that the ranks of a call pass the same sizes: a mismatch
# would leave some ranks' results wrong without an error. So before each collective the
# ranks all-gather a descriptor of their call (operation, type, counts, root, op) and
# refuse it, every rank alike, when they differ; a send tells its receiver what it sends.
_OPS = ["allreduce", "allreduce_coalesced", "reduce", "broadcast", "allgather", "allgather_coalesced",
        "all_gather_into_tensor", "allgather_into_tensor_coalesced", "reduce_scatter", "reduce_scatter_tensor",
        "reduce_scatter_tensor_coalesced", "gather", "scatter", "all_to_all_single", "all_to_all", "barrier"]
_DTYPE_NAMES = ["bool", "int8", "uint8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16",
                "bfloat16", "float32", "float64", "complex32", "complex64", "complex128", "float8_e4m3fn",
                "float8_e5m2"]
_DTYPE_ID = {getattr(torch, n): i + 1 for i, n in enumerate(_DTYPE_NAMES) if getattr(torch, n, None) is not None}
_REDOPS = {k: i for i, k in enumerate(_R.__members__.values())}


def _desc(op: str, dtype, counts, root: int = -1, reduce_op=None) -> list:
    """The fixed-size descriptor of a call (8 int64s); the premul factor may differ by rank."""
    counts = [int(c) for c in counts]
    redop = -1 if reduce_op is None else _REDOPS.get(_op_of(reduce_op)[0], -2)
    crc = zlib.crc32(b",".join(str(c).encode() for c in counts))
    return [_OPS.index(op), _DTYPE_ID.get(dtype, 0), len(counts), sum(counts), crc, root, redop, 0]


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
    return what


class _Mismatch(Exception):
    """The ranks called a collective differently (every rank raises it)."""
