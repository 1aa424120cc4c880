"""Agreement: what every rank calls, checked before any data moves."""

import ctypes

from .. import errors
from .._lib import CallStruct, lib
from ._tensors import _R

# ---- Agreement: what every rank calls, checked before any data moves -------------------------

# jitccl's kernels fail a call whose ranks pass other counts, types or ops, but the rank
# that notices names only its peer, and a rank that only sends may return first. Before
# each collective the ranks compare a description of their call (operation, type, counts,
# root, op, wire) and refuse it, every rank alike and naming each call, when they differ.
# The rules live in the library (jitcclAgree, jitccl.h), which the C++ backend calls too:
# this file only names the call in PyTorch's words.
_REDUCTIONS = {k: f"ReduceOp.{name}" for name, k in _R.__members__.items()}


def _type_name(dtype) -> bytes:
    """The name the ranks compare for a torch dtype: "float32", "int8", ..."""
    return str(dtype).replace("torch.", "").encode()


def _reduction_name(kind) -> bytes:
    """The name the ranks compare for a reduction (a RedOpType)."""
    return _REDUCTIONS.get(kind, str(kind)).encode()


def _desc(op: str, dtype, counts, root: int = -1, redop=None, wire=None) -> CallStruct:
    """The description of a call (jitcclCall_t); `redop`: the RedOpType of its reduction,
    if it has one (the premul factor may differ by rank); `wire`: the jitcclWire_t it asks
    for, if any."""
    array = (ctypes.c_size_t * len(counts))(*counts)
    call = CallStruct(op.encode(), None if dtype is None else _type_name(dtype), array, len(counts), root,
                      None if redop is None else _reduction_name(redop),
                      None if wire is None else ctypes.pointer(wire))
    call.keep = array  # the counts live as long as the call
    return call


class _Mismatch(Exception):
    """The ranks called a collective differently (every rank raises it)."""


class _Agreement:
    """One group's check that its ranks agree on each call, over its host communicator
    (the library all-gathers the descriptions in host-arena memory, which the peers read
    in place)."""

    _REFUSAL_BYTES = 4096

    def __init__(self):
        self.refusal = ctypes.create_string_buffer(self._REFUSAL_BYTES)

    def check(self, comm, call: CallStruct) -> None:
        """Raises _Mismatch on every rank when the ranks' calls differ; errors.Error when
        the all-gather fails (a peer gone, the timeout)."""
        code = lib.jitcclAgree(ctypes.byref(call), self.refusal, self._REFUSAL_BYTES, comm._handle())
        if code != errors.SUCCESS:
            raise errors.error(code, comm._h)
        if self.refusal.value:
            raise _Mismatch(self.refusal.value.decode())
