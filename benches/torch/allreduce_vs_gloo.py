"""torch.distributed.all_reduce through the "jitccl" backend and through Gloo, in the same
rank processes, interleaved: one rank of benches/torch/run.sh (which starts them with
`jitccl launch` in the chroot of scripts/setup-torch.sh).

For each repetition and each size (float32 SUM, in place) each backend times a batch of
calls, in alternating order, with a barrier of its own before the batch. A batch runs from a
common start, the moment the last rank leaves the barrier (no call can finish before it),
to the last rank's end, on the machine's monotonic clock that every rank reads: the time
ranks take to leave the barrier is not counted, however short the batch. Its time per call
is one sample. A batch's size comes from a warmed estimate: batches four times longer each
until one takes a tenth of BENCH_BATCH_S, every rank taking the same figure. The table
gives each side's median and its spread (lower to upper quartile) over the repetitions,
and Gloo's median over jitccl's (above 1: jitccl is faster). At 8 B it also sets out where jitccl's time goes, each measured in the
same repetitions: `jitccl perf`'s own time (its Rust ranks, started by rank 0 here while
the others wait), a bare C API call through ctypes on the group's communicator, the
group's agreement step alone (through ctypes), the Python group's allreduce called directly
(the path every call took before the C++ backend), and the whole dist.all_reduce (through
the C++ backend where it is on: the header says which).

Environment: BENCH_REPS (default 7), BENCH_SIZES (bytes, default 8 B to 256 MiB by 8x,
and 256 MiB), BENCH_BATCH_S (seconds per batch, default 0.05), JITCCL_BIN (the jitccl
binary, for perf; without it perf is left out), BENCH_CSV (a file to which rank 0 appends
each side's median busbw per size, as benches/busbw_svg.py reads it: run.sh draws the plot).
"""

import os
import statistics
import subprocess
import time

os.environ.setdefault("USE_LIBUV", "0")  # Debian's torch has no libuv

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import jitccl.torch  # noqa: E402 - registers "jitccl"
from jitccl.torch._agree import _desc  # noqa: E402
from jitccl.torch._tensors import _buf  # noqa: E402

REPS = int(os.environ.get("BENCH_REPS", "7"))
SIZES = [int(s) for s in os.environ.get("BENCH_SIZES", "").split()] or \
    [8 << (3 * k) for k in range(9)] + [256 << 20]
BATCH_S = float(os.environ.get("BENCH_BATCH_S", "0.05"))


def timed(call, iters: int, barrier) -> float:
    """Microseconds per call of `iters` calls after `barrier()`, from the last rank's start
    to the last rank's end (the same figure on every rank)."""
    barrier()
    start = time.perf_counter()
    for _ in range(iters):
        call()
    end = time.perf_counter()
    mine = torch.tensor([start, end], dtype=torch.float64)
    every = [torch.empty(2, dtype=torch.float64) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine, group=GLOO)
    return (max(t[1].item() for t in every) - max(t[0].item() for t in every)) / iters * 1e6


def iterations(call, barrier) -> int:
    """As many calls as fill about BATCH_S, from a warmed estimate: batches grow fourfold
    until one takes a tenth of BATCH_S (connections made, kernels compiled, caches warm)."""
    n = 1
    while True:
        us = timed(call, n, barrier)
        if us * n >= BATCH_S * 1e5 or n >= 1 << 20:
            return max(1, int(BATCH_S * 1e6 / max(us, 0.01)))
        n *= 4


def perf_8b(nranks: int) -> float:
    """`jitccl perf all_reduce` at 8 B, in place, on this machine now (its own ranks, its
    own processes): microseconds per call."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                        "NCCL_COMM_ID", "JITCCL_COMM_ID")}
    out = subprocess.run([os.environ["JITCCL_BIN"], "perf", "all_reduce", "-N", str(nranks), "-b", "8", "-e", "8",
                          "-n", "5000", "-w", "500"], env=dict(env, JITCCL_DEVICE="host"), capture_output=True,
                         text=True, timeout=120, check=True).stdout
    row = [line.split() for line in out.splitlines() if line.split()[:1] == ["8"]][0]
    return float(row[9])  # in place


def quartiles(xs):
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return q[0], q[1], q[2]


def size_name(b: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def write_csv(path: str, world: int, samples):
    """Appends `series,size_bytes,busbw_GBps` rows (the header once): each side's median, as
    nccl-tests counts AllReduce's bus bandwidth (algbw x 2(n-1)/n)."""
    fresh = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a") as f:
        if fresh:
            f.write("series,size_bytes,busbw_GBps\n")
        for side, label in (("jitccl", "jitccl"), ("gloo", "Gloo")):
            for s in SIZES:
                busbw = s / quartiles(samples[(s, side)])[1] / 1e3 * 2 * (world - 1) / world
                f.write(f"{label} ({world} ranks),{s},{busbw:.4f}\n")


def main():
    global GLOO
    dist.init_process_group("jitccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    GLOO = dist.new_group(backend="gloo")
    jit_barrier, gloo_barrier = (lambda: dist.barrier()), (lambda: dist.barrier(group=GLOO))
    pg = jitccl.torch.python_group(dist.group.WORLD)
    samples = {(s, side): [] for s in SIZES for side in ("jitccl", "gloo")}
    small = {k: [] for k in ("perf", "capi", "agree", "python", "torch")}
    tensors = {s: torch.ones(s // 4) for s in SIZES}
    eight = tensors[8] if 8 in tensors else torch.ones(2)
    eight_buf = _buf(eight)
    desc = _desc("allreduce", eight.dtype, [eight.numel()], redop=dist.ReduceOp.RedOpType.SUM)
    batch = {}
    for s in SIZES:  # the batch sizes, and a warm-up (kernels compiled, buffers touched)
        t = tensors[s]
        batch[(s, "jitccl")] = iterations(lambda: dist.all_reduce(t), jit_barrier)
        batch[(s, "gloo")] = iterations(lambda: dist.all_reduce(t, group=GLOO), gloo_barrier)
    for rep in range(REPS):
        for s in SIZES:
            t = tensors[s]
            sides = [("jitccl", lambda: dist.all_reduce(t), jit_barrier),
                     ("gloo", lambda: dist.all_reduce(t, group=GLOO), gloo_barrier)]
            for side, call, barrier in sides if rep % 2 == 0 else sides[::-1]:
                samples[(s, side)].append(timed(call, batch[(s, side)], barrier))
        # The 8 B breakdown, in the same repetition.
        n = batch.get((8, "jitccl"), 2000)
        small["torch"].append(timed(lambda: dist.all_reduce(eight), n, jit_barrier))
        small["capi"].append(timed(lambda: pg._comm.all_reduce(eight_buf), n, jit_barrier))
        small["agree"].append(timed(lambda: pg._agreement.check(pg._comm, desc), n, jit_barrier))
        small["python"].append(timed(lambda: pg.allreduce([eight]).wait(), n, jit_barrier))
        if os.environ.get("JITCCL_BIN"):
            dist.barrier(group=GLOO)
            if rank == 0:
                small["perf"].append(perf_8b(world))
            dist.barrier(group=GLOO)
    if rank != 0:
        dist.destroy_process_group()
        return
    print(f"\ntorch.distributed.all_reduce, float32 SUM in place, {world} ranks, {REPS} repetitions interleaved "
          f"(torch {torch.__version__}); microseconds per call: median [lower - upper quartile]")
    print(f"jitccl backend: {jitccl.torch.implementation()}")
    print(f"{'size':>9} | {'jitccl':>24} | {'gloo':>24} | gloo/jitccl | jitccl GB/s")
    for s in SIZES:
        j, g = quartiles(samples[(s, "jitccl")]), quartiles(samples[(s, "gloo")])
        print(f"{size_name(s):>9} | {j[1]:9.1f} [{j[0]:.1f} - {j[2]:.1f}] | {g[1]:9.1f} [{g[0]:.1f} - {g[2]:.1f}] "
              f"| {g[1] / j[1]:10.2f}x | {s / j[1] / 1e3:10.3f}")
    if os.environ.get("BENCH_CSV"):
        write_csv(os.environ["BENCH_CSV"], world, samples)
    print(f"\n8 B, where jitccl's time goes ({world} ranks), microseconds per call: median [quartiles]")
    for key, what in (("perf", "jitccl perf (Rust ranks, in place)"), ("capi", "C API call through ctypes"),
                      ("agree", "the agreement step alone"), ("python", "the Python group's allreduce"),
                      ("torch", "dist.all_reduce on jitccl")):
        if small[key]:
            q = quartiles(small[key])
            print(f"  {what:<36} {q[1]:8.2f} [{q[0]:.2f} - {q[2]:.2f}]")
    if small["perf"]:
        over = [t - p for t, p in zip(small["torch"], small["perf"])]
        print(f"  {'dist.all_reduce - perf (per rep)':<36} {statistics.median(over):8.2f} "
              f"[{min(over):.2f} - {max(over):.2f}]")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
