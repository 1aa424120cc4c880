"""DDP training with gradients in jitccl's wire formats: one rank of
`NRANKS=4 benches/torch/run.sh ddp_wire.py` (which starts them with `jitccl launch` in the
chroot of scripts/setup-torch.sh).

An MLP learns a fixed random teacher network's function from synthetic data (each rank its
own batches), under DDP on the "jitccl" backend, once per way of averaging the gradients:
jitccl's AllReduce in the exact wire, in bf16 and in fp8e4m3 (`jitccl.torch.hooks.compress`:
fp32 accumulation), and PyTorch's own `bf16_compress_hook` on the same backend (gradients
cast to bf16 and summed in bf16). Every run starts from the same weights and sees the same
batches. Rank 0 prints each run's final loss on a held-out set (and the mean training loss
of the last 20 steps), and its difference from the exact wire's.

Environment: BENCH_STEPS (default 200), BENCH_BATCH (per rank, default 64).
"""

import os
import time
import warnings

os.environ.setdefault("USE_LIBUV", "0")  # Debian's torch has no libuv
# Debian's torch on Python 3.13: its hooks' module warns of a Python change at import.
warnings.filterwarnings("ignore", category=FutureWarning)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import jitccl.torch  # noqa: E402 - registers "jitccl"
from jitccl.torch import hooks  # noqa: E402

STEPS = int(os.environ.get("BENCH_STEPS", "200"))
BATCH = int(os.environ.get("BENCH_BATCH", "64"))
IN, HIDDEN, OUT = 32, 256, 8


def mlp(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, OUT))


TEACHER = mlp(1).requires_grad_(False)


def data(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, IN, generator=g)
    return x, TEACHER(x) + 0.01 * torch.randn(n, OUT, generator=g)


def train(hook) -> tuple:
    """(held-out loss, mean training loss of the last 20 steps, seconds) of one run."""
    model = mlp(2)
    ddp = DDP(model)
    if hook is not None:
        ddp.register_comm_hook(None, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.02, momentum=0.9)
    rank = dist.get_rank()
    losses = []
    start = time.perf_counter()
    for step in range(STEPS):
        x, y = data(BATCH, 1000 * step + rank)
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    took = time.perf_counter() - start
    x, y = data(4096, 999_999)
    with torch.no_grad():
        held_out = nn.functional.mse_loss(model(x), y).item()
    return held_out, sum(losses[-20:]) / 20, took


def pytorch_bf16_compress(process_group, bucket):
    """PyTorch's bf16_compress_hook itself: DDP refuses it by its name without CUDA and NCCL,
    though it runs on any backend that sums bf16, as jitccl's does."""
    return bf16_compress_hook(process_group, bucket)


def main():
    # The ranks share this host, where jitccl runs wired calls exactly unless asked to
    # encode: the comparison is about what the wires do to training.
    os.environ["JITCCL_WIRE_LOCAL"] = "encode"
    dist.init_process_group("jitccl")
    runs = [("jitccl exact wire", hooks.compress("exact")), ("jitccl bf16 wire", hooks.compress("bf16")),
            ("jitccl fp8e4m3 wire", hooks.compress("fp8e4m3")), ("PyTorch bf16_compress_hook", pytorch_bf16_compress)]
    if dist.get_rank() == 0:
        print(f"{dist.get_world_size()} ranks, {STEPS} steps of {BATCH} samples per rank, torch {torch.__version__}, "
              f"backend {jitccl.torch.implementation().split(' ')[0]}")
        print("| gradients averaged by | held-out loss | vs exact wire | last 20 steps' loss | time |")
        print("|---|---|---|---|---|", flush=True)
    exact = None
    for name, hook in runs:
        held_out, last, took = train(hook)
        exact = held_out if exact is None else exact
        if dist.get_rank() == 0:
            print(f"| {name} | {held_out:.5f} | {(held_out - exact) / exact * 100:+.2f}% | {last:.5f} | {took:.1f} s |",
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
