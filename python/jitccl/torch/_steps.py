"""Small steps the process group composes: finishing work, offsets, environment."""

import os
from typing import Callable, List

import torch

from .. import errors
from ..comm import Comm, get_unique_id
from ._tensors import Finish

# ---- Helpers -------------------------------------------------------------------------------------


def _then(first: Finish, second: Finish) -> Finish:
    if first is None:
        return second
    if second is None:
        return first

    def both():
        first()
        second()
    return both


def _all(finishes: List[Finish]) -> Finish:
    finishes = [f for f in finishes if f is not None]
    if not finishes:
        return None

    def run_all():
        for f in finishes:
            f()
    return run_all


def _scatter_into(whole: torch.Tensor, outs: list) -> Callable[[], None]:
    """Copies `whole`'s equal blocks into the tensors `outs`."""
    def finish():
        n = whole.numel() // max(len(outs), 1)
        for q, o in enumerate(outs):
            o.copy_(whole[q * n:(q + 1) * n].view(o.shape))
    return finish


def _offsets(counts: list) -> list:
    out, at = [], 0
    for c in counts:
        out.append(at)
        at += c
    return out


class _env:
    """Sets environment variables for the duration of a block (for the C library's getenv)."""

    def __init__(self, **values):
        self.values = values

    def __enter__(self):
        self.saved = {k: os.environ.get(k) for k in self.values}
        for k, v in self.values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _fresh_unique_id():
    """A unique id of its own: NCCL_COMM_ID / JITCCL_COMM_ID would give every group the same."""
    with _env(NCCL_COMM_ID=None, JITCCL_COMM_ID=None):
        return get_unique_id()


def _destroy(comms: List[Comm], runtime) -> None:
    """Ends the group's process group (once its pending work has ended), then its
    communicators."""
    runtime.destroy()
    for comm in comms:
        try:
            comm.destroy()
        except errors.Error:
            pass
