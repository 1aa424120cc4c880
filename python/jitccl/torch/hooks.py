"""DDP communication hooks that send gradient buckets through jitccl's compressed
AllReduce, registered as PyTorch's own (torch.distributed.algorithms.ddp_comm_hooks):

    import jitccl.torch
    from jitccl.torch import hooks
    dist.init_process_group("jitccl")
    ddp = DistributedDataParallel(model)
    ddp.register_comm_hook(None, hooks.compress("bf16"))   # None: the default group

Where PyTorch's `bf16_compress_hook` casts each bucket to bf16 and lets the backend sum in
bf16 (every hop rounds, and the error grows with the rank count), these keep the bucket's
own type: each hop of the ring decodes the wire format, adds in fp32 and encodes, and every
rank gets the same bits, averaged as DDP expects. Any format jitccl has: "bf16", "fp16",
"fp8e4m3", "fp8e5m2", "int8", the scaled ones with a block ("int8b128"); their error bounds
are in docs/guide.md, "Wire formats". Buckets of f32 gradients take any of them, f16 and
bf16 ones the 8-bit formats.

The hooks run on the "jitccl" backend's own communicator (that of the group's C++ backend
and of its Python group alike), with the ranks' agreement on each call as every collective
of the backend; a process group of another backend is refused with a ValueError.
"""

from typing import Callable, Optional

import torch
import torch.distributed as dist

from ..comm import wire as parse_wire
from . import python_group
from ._group import BACKEND

__all__ = ["compress"]


def _jitccl_group(process_group: Optional[dist.ProcessGroup]):
    """The ProcessGroupJitccl of `process_group` (None: the default group)."""
    pg = process_group if process_group is not None else dist.group.WORLD
    if pg is None:
        raise ValueError("jitccl.torch.hooks: no process group: call dist.init_process_group(\"jitccl\") first")
    try:
        backend = dist.get_backend(pg)
    except (ValueError, RuntimeError) as e:
        raise ValueError(f"jitccl.torch.hooks: {pg!r} is not a process group of this process: {e}") from None
    if backend != BACKEND:
        raise ValueError(f"jitccl.torch.hooks: the process group's backend is {backend!r}: the compressed "
                         f"AllReduce runs on jitccl's communicator; make the group with backend=\"jitccl\"")
    return python_group(pg)


def compress(wire: str = "bf16") -> Callable:
    """A DDP communication hook, `hook(process_group, bucket) -> Future[Tensor]`, averaging
    each gradient bucket across the group's ranks with its elements carried in the wire
    format `wire`. A bad name raises ValueError here, not in the backward pass."""
    parse_wire(wire)

    def hook(process_group: Optional[dist.ProcessGroup], bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        group = _jitccl_group(process_group)
        work = group._wired_allreduce(bucket.buffer(), wire)
        return work.get_future().then(lambda fut: fut.value()[0])

    hook.__name__ = hook.__qualname__ = f"compress_{wire}_hook"
    hook.__doc__ = f"DDP communication hook: each gradient bucket averaged in jitccl's {wire} wire format."
    return hook
