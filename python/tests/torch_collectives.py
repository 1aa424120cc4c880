"""One rank of the "jitccl" PyTorch backend's test (python/jitccl/torch.py), started by
`jitccl launch` (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) with PyTorch importable and
JITCCL_NCCL_SO naming the library (capi/tests/torch.rs runs it in Debian's CPU PyTorch).

Every collective on the jitccl default group is checked against the same collective on a
Gloo group of the same processes (Gloo is the reference; where Gloo lacks a type or op,
against values computed here), over every data type and op, contiguous or not; then
DDP's training against DDP on Gloo, async Works, sends and receives, new_group, calls
that disagree across ranks (an error on every rank, nothing written), and
destroy_process_group. Prints "rank <r>: <N> checks passed" at the end.
"""

import gc
import os
import time
from datetime import timedelta

os.environ.setdefault("USE_LIBUV", "0")  # Debian's torch has no libuv

import torch.distributed as dist  # noqa: E402
# Before init_process_group: DDP imports torch.distributed.nn, whose functions take
# group.WORLD as a default argument, which would then hold the default group forever.
import torch.distributed.nn  # noqa: E402,F401

import jitccl.torch  # noqa: E402 - registers "jitccl"

import torch_checks as world  # noqa: E402
from torch_against_gloo import (  # noqa: E402
    test_allgather_family, test_allreduce, test_alltoall_gather_scatter, test_broadcast_reduce, test_point_to_point,
    test_reduce_scatter_family)
from torch_checks import NATIVE, RANK, WORLD, backend_of  # noqa: E402
from torch_lifecycle import test_ddp, test_errors, test_groups, test_works  # noqa: E402
from torch_rank import check, passed, run  # noqa: E402


TESTS = [test_allreduce, test_broadcast_reduce, test_allgather_family, test_reduce_scatter_family,
         test_alltoall_gather_scatter, test_point_to_point, test_works, test_ddp, test_groups, test_errors]


def main():
    dist.init_process_group("jitccl", timeout=timedelta(seconds=60))
    check(dist.get_backend() == "jitccl", "the default group is jitccl's")
    check((dist.get_rank(), dist.get_world_size()) == (RANK, WORLD), "rank and size")
    kind = type(backend_of(dist.group.WORLD)).__name__
    check(kind == ("NativeBackend" if NATIVE else "ProcessGroupJitccl"), f"the group's backend is a {kind}")
    if RANK == 0:
        print(f"rank 0: backend {jitccl.torch.implementation()}", flush=True)
    world.GLOO = dist.new_group(backend="gloo")
    only = os.environ.get("JITCCL_TORCH_TESTS")
    for test in TESTS:
        if only and test.__name__ not in only.split(","):
            continue
        start, before = time.time(), passed()
        test()
        print(f"rank {RANK}: {test.__name__}: {passed() - before} checks in {time.time() - start:.1f} s", flush=True)
    pg = dist.group.WORLD
    fin = jitccl.torch.python_group(pg)._finalizer
    dist.destroy_process_group()
    del pg
    gc.collect()
    check(not fin.alive, "destroy_process_group() freed the default group's communicator")
    check(not dist.is_initialized(), "no default group after destroy_process_group")
    print(f"rank {RANK}: {passed()} checks passed", flush=True)


if __name__ == "__main__":
    run(main)