"""Held operations: sends and receives run together as one NCCL group."""

import ctypes
import threading

import torch

from .. import errors
from ..comm import group as nccl_group
from ._agree import _Mismatch
from ._tensors import _DTYPES, _buf, _flat

# ---- Held operations: sends and receives ------------------------------------------------------

# A send tells its receiver what it sends (count, type), by these numbers of the types.
_DTYPE_NAMES = ["bool", "int8", "uint8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16",
                "bfloat16", "float32", "float64", "complex32", "complex64", "complex128", "float8_e4m3fn",
                "float8_e5m2"]
_DTYPE_ID = {getattr(torch, n): i + 1 for i, n in enumerate(_DTYPE_NAMES) if getattr(torch, n, None) is not None}


class _Held:
    """A send or receive posted but not run yet."""

    __slots__ = ("pg", "kind", "peer", "staged", "work")

    def __init__(self, pg, kind: str, peer: int, staged, work):
        self.pg, self.kind, self.peer, self.staged, self.work = pg, kind, peer, staged, work

    def header(self) -> torch.Tensor:
        f = _flat(self.staged.c)
        t = self.staged.c
        return torch.tensor([f.numel(), _DTYPES[f.dtype], _DTYPE_ID[t.dtype], t.numel()], dtype=torch.int64)


# Sends and receives of every jitccl group of this process, in the order posted; the flag
# (1 while any are held) tells the C++ backend (_native.cpp) to hand its calls to Python.
_HELD: list = []
_HELD_LOCK = threading.Lock()
_HELD_FLAG = ctypes.c_int(0)


def _hold(held: "_Held") -> None:
    with _HELD_LOCK:
        _HELD.append(held)
        _HELD_FLAG.value = 1
_TORCH_OF_CODE = {code: dt for dt, code in _DTYPES.items()}


def _flush() -> None:
    """Runs the held sends and receives: first each send's header (its count and type) to
    its receiver, then the data, each phase one NCCL group. A receive whose sender sends
    something else takes the data into a scratch buffer (so nothing stays behind in the
    communicator) and fails; so does every Work of a phase that fails."""
    with _HELD_LOCK:
        ops = list(_HELD)
        _HELD.clear()
        _HELD_FLAG.value = 0
    if ops:
        with torch.no_grad():
            _run_held(ops)


def _run_held(ops: list) -> None:
    heads = [op.header() if op.kind == "send" else torch.empty(4, dtype=torch.int64) for op in ops]
    try:
        with nccl_group():
            for op, h in zip(ops, heads):
                getattr(op.pg._comm, op.kind)(_buf(h), op.peer)
    except Exception as e:  # noqa: BLE001 - handed to the Works
        _fail_all(ops, e)
        return
    failures, keep = [None] * len(ops), []
    try:
        with nccl_group():
            for i, (op, h) in enumerate(zip(ops, heads)):
                count, code, did, numel = h.tolist()
                if op.kind == "send":
                    if count:
                        op.pg._comm_for(op.staged.c).send(_buf(op.staged.c), op.peer)
                    continue
                want = op.header().tolist()
                if [count, did] != [want[0], want[2]]:
                    name = _DTYPE_NAMES[did - 1] if 1 <= did <= len(_DTYPE_NAMES) else "?"
                    failures[i] = op.pg._error("recv", _Mismatch(
                        f"rank {op.peer} sent {numel} {name} elements, this rank receives {want[3]} "
                        f"{str(op.staged.c.dtype).replace('torch.', '')}: nothing was written"))
                    if count:
                        scratch = torch.empty(count, dtype=_TORCH_OF_CODE[code], device=op.staged.c.device)
                        keep.append(scratch)
                        op.pg._comm_for(scratch).recv(_buf(scratch), op.peer)
                elif count:
                    op.pg._comm_for(op.staged.c).recv(_buf(op.staged.c), op.peer)
    except Exception as e:  # noqa: BLE001
        _fail_all(ops, e)
        return
    for op, failure in zip(ops, failures):
        if failure is not None:
            op.work._fail(failure)
            continue
        if op.kind == "recv":
            op.staged.back()
        op.work._complete()


def _fail_all(ops: list, e: BaseException) -> None:
    if isinstance(e, errors.Error):
        cause = e
        e = ops[0].pg._error("send/recv" if len(ops) == 1 else f"send/recv (one of {len(ops)} held)", e)
        e.__cause__ = cause
    for op in ops:
        op.work._fail(e)
