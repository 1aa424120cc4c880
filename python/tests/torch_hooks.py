"""One rank of the DDP communication hooks' test (jitccl.torch.hooks), started by `jitccl
launch` as torch_collectives.py is (capi/tests/torch.rs runs it in Debian's CPU PyTorch).

A small MLP's gradients under DDP with `hooks.compress(wire)` on the jitccl default group,
against the exact average of every rank's own gradients (summed in float64 over a Gloo
group of the same processes): within the wire's documented bound (docs/guide.md, "Wire
formats"), not the exact values, and the same bits on every rank. Then what is refused: an
unknown wire, a process group of another backend, and ranks asking for different wires.
Prints "rank <r>: <N> checks passed" at the end.
"""

import os
from datetime import timedelta

os.environ.setdefault("USE_LIBUV", "0")  # Debian's torch has no libuv

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.nn  # noqa: E402,F401 - before init_process_group (see torch_collectives.py)
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import jitccl.torch  # noqa: E402 - registers "jitccl"
from jitccl.torch import hooks  # noqa: E402

from torch_rank import RANK, check, passed, run  # noqa: E402

WORLD = int(os.environ.get("WORLD_SIZE", "1"))

# One encoding's relative, block-relative and absolute error terms (the guide's table).
LAWS = {"bf16": (2 ** -8, 0.0, 2 ** -134), "fp8e4m3": (2 ** -4, 2 ** -17, 2 ** -136),
        "int8b32": (0.0, 1 / 250, 2 ** -140)}


def model() -> nn.Module:
    torch.manual_seed(7)  # the same start on every rank
    return nn.Sequential(nn.Linear(48, 96), nn.Tanh(), nn.Linear(96, 96), nn.Tanh(), nn.Linear(96, 8))


def batch():
    g = torch.Generator().manual_seed(100 + RANK)  # each rank its own data
    return torch.randn(32, 48, generator=g), torch.randn(32, 8, generator=g)


def local_grads() -> list:
    m = model()
    x, y = batch()
    nn.functional.mse_loss(m(x), y).backward()
    return [p.grad.detach().clone() for p in m.parameters()]


def hooked_grads(wire: str) -> list:
    m = model()
    ddp = DDP(m, bucket_cap_mb=0.01)  # several buckets
    ddp.register_comm_hook(None, hooks.compress(wire))
    x, y = batch()
    nn.functional.mse_loss(ddp(x), y).backward()
    return [p.grad.detach().clone() for p in m.parameters()]


def test_gradients(gloo):
    mine = torch.cat([g.reshape(-1) for g in local_grads()]).double()
    exact, mags = mine.clone(), mine.abs()
    dist.all_reduce(exact, group=gloo)
    dist.all_reduce(mags, group=gloo)
    exact /= WORLD
    for wire, (u, c, t) in LAWS.items():
        got = torch.cat([g.reshape(-1) for g in hooked_grads(wire)])
        check(got.dtype == torch.float32, f"{wire}: gradients of {got.dtype}")
        # The sum's bound (A: the largest sum of magnitudes, over the whole model), averaged.
        n = WORLD
        bound = n * ((u + 2 ** -24) * mags + c * mags.max() + t) * (1 + u) ** n / n * (1 + 2 ** -20)
        err = (got.double() - exact).abs()
        worst = (err / bound).max().item()
        check(bool((err <= bound).all()), f"{wire}: a gradient off the exact average by {worst:.2f} of the bound")
        check(WORLD == 1 or bool((got.double() != exact.float().double()).any()), f"{wire}: the exact gradients")
        every = [torch.empty_like(got) for _ in range(WORLD)]
        dist.all_gather(every, got, group=gloo)
        for q in range(WORLD):
            same = torch.equal(every[q].view(torch.int32), got.view(torch.int32))
            check(same, f"{wire}: rank {q}'s gradients differ")
        print(f"rank {RANK}: DDP with hooks.compress({wire!r}): largest error {worst:.2f} of the bound over "
              f"{got.numel()} gradients", flush=True)


def test_refusals(gloo):
    try:
        hooks.compress("int4")
        check(False, "an unknown wire was accepted")
    except ValueError as e:
        check("unknown wire 'int4'" in str(e), f"the error: {e}")
    try:
        hooks.compress("bf16")(gloo, None)
        check(False, "a Gloo group was accepted")
    except ValueError as e:
        check("'gloo'" in str(e) and "jitccl" in str(e), f"the error: {e}")
    if WORLD > 1:
        t = torch.ones(64)
        try:
            jitccl.torch.python_group(dist.group.WORLD)._wired_allreduce(t, "bf16" if RANK == 0 else "int8")
            check(False, "ranks asking for different wires were not refused")
        except dist.DistBackendError as e:
            check("in the bf16 wire" in str(e) and "in the int8b64 wire" in str(e), f"the error: {e}")
        check(torch.equal(t, torch.ones(64)), "a refused call wrote its tensor")
    # The group stays usable.
    t = torch.full((16,), float(RANK + 1))
    jitccl.torch.python_group(dist.group.WORLD)._wired_allreduce(t, "bf16").wait()
    check(torch.equal(t, torch.full((16,), (WORLD + 1) / 2)), f"after the refusals: {t[:4]}")


def main():
    dist.init_process_group("jitccl", timeout=timedelta(seconds=60))
    if RANK == 0:
        print(f"rank 0: backend {jitccl.torch.implementation()}", flush=True)
    gloo = dist.new_group(backend="gloo")
    test_gradients(gloo)
    test_refusals(gloo)
    dist.destroy_process_group()
    print(f"rank {RANK}: {passed()} checks passed", flush=True)


if __name__ == "__main__":
    run(main)
