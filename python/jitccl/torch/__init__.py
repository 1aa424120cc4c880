"""PyTorch's "jitccl" process-group backend, for CPU and CUDA tensors: importing this
module registers it.

    import torch.distributed as dist
    import jitccl.torch                                  # registers "jitccl" (cpu; cuda with a GPU)
    dist.init_process_group("jitccl")                    # env://: RANK, WORLD_SIZE, MASTER_*
    dist.all_reduce(torch.ones(4))                       # every collective; DDP on top
    pairs = dist.new_group([0, 1], backend="jitccl")     # groups, each its own communicator

Each process group is one jitccl communicator on the host, made from the store PyTorch
hands the backend: the group's rank 0 makes the unique id and sets its bytes in the store
under a key named after the group, the others read them. Where torch sees a GPU, the group
also gets a communicator on the current CUDA device (torch.cuda.set_device first, as for
NCCL) for CUDA tensors on it ("cpu:jitccl,cuda:jitccl" and plain "jitccl" alike: PyTorch
gives one Python group every device); their calls are ordered after the work queued on the
current stream, and their Works' wait() orders the current stream after them. The
group's timeout is the communicators' (JITCCL_TIMEOUT is set to it while they are made,
and JITCCL_BOOTSTRAP_TIMEOUT too unless it is set), so a wait on a peer that never comes
ends in an error after it.

A collective on CPU tensors runs as a job of the library's process group over the host
communicator (jitccl.h's, the runtime's c10d-style group: queued in order on the calling
thread, a watchdog that fails a call past the group's timeout and aborts the communicator):
its Work is that group's work, complete once the call is done, as NCCL's (`wait()` before
reading the result of an `async_op=True` call; `is_completed()`, `exception()`; `get_future()`
waits for it). The C++ backend's own calls, and every call of the Python group alone, have
ended when they return; only a call the C++ backend hands to the Python group may still be
running then. A CUDA tensors' call is ordered on the current stream and its Work is a done
one whose wait orders the current stream after it.
Sends and receives (isend, irecv, batch_isend_irecv, send, recv) are held until the next
`wait()` on one of them (or `is_completed()`, `get_future()`), the next collective on any
jitccl group, or the end of a coalescing block, then run together as one NCCL group: a
rank may post its sends before its receives, as with Gloo.

The ranks check that they agree on each call before any data moves (jitccl, as NCCL, does
not: ranks passing different sizes would get wrong results without an error): they
all-gather a descriptor of the collective (operation, type, counts, root, op), through the
library's jitcclAgree, and a send first tells its receiver its count and type. Calls that differ raise DistBackendError on
every rank and write nothing; the group stays usable. The price is one small all-gather
per collective on the host communicator, in host-arena memory made once (and a header per
send). Up to 64 KiB an all_reduce of a CPU tensor runs through a scratch buffer in the host
arena (copied in and out), beyond that on the tensor itself.

Data types: every one torch and jitccl share (int8, uint8, int32, int64, float16,
bfloat16, float32, float64, and uint32, uint64, float8_e4m3fn, float8_e5m2 where torch
has them), complex as their real pairs (SUM, AVG, PREMUL_SUM), bool as bytes (data
movement; MIN, MAX and the bitwise ops). Ops: SUM, PRODUCT, MIN, MAX, AVG, PREMUL_SUM
(`dist._make_nccl_premul_sum(factor)`) in jitccl; BAND, BOR, BXOR (integer and bool
tensors) by an all-gather and a local fold, since jitccl has no bitwise reductions.
Non-contiguous tensors are copied to contiguous ones and the results copied back.

The group lives in a C++ c10d::Backend, compiled at first use against the PyTorch at hand
(_native.py; JITCCL_TORCH_NATIVE=0 turns it off, =1 requires it), which runs all_reduce,
broadcast and barrier of one contiguous CPU tensor itself, with the same checks, and hands
every other call to the Python group; without a C++ compiler and PyTorch's headers the
Python group serves alone (`implementation()` says which, and why).

A failed call raises torch.distributed.DistBackendError naming the operation, the rank
and the group, chained from the jitccl.Error; a bad argument raises ValueError or
TypeError before anything is sent. A failed communicator stays failed: later operations
on its group raise too.
"""

import torch
import torch.distributed as dist

from . import _native
from ._group import BACKEND, ProcessGroupJitccl
from ._native import implementation

__all__ = ["BACKEND", "ProcessGroupJitccl", "create_backend", "implementation", "python_group"]


def create_backend(dist_opts, backend_options=None):
    """The creator registered for "jitccl" (PyTorch's extended API: the options carry the
    store, the group's rank, size, timeout and name): the group inside the C++ backend, or
    the Python group alone where that is off or unavailable."""
    group = ProcessGroupJitccl(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, dist_opts.timeout,
                               dist_opts.group_id)
    native = _native.wrap(group)
    return group if native is None else native


def python_group(pg) -> ProcessGroupJitccl:
    """The ProcessGroupJitccl of a jitccl group (what `new_group` or the default group gives):
    the group itself, or the one inside its C++ backend."""
    if isinstance(pg, ProcessGroupJitccl):
        return pg
    return pg._get_backend(torch.device("cpu")).python_group


if BACKEND.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND, create_backend, extended_api=True,
                                  devices=["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
