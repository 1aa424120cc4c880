"""One rank of torch.distributed timing AllReduce, AllGather and ReduceScatter (float32 SUM)
for benches/gpu/nccl_side.py, which starts the ranks with `jitccl launch` (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) and reads rank 0's results.

    python3 torch_side.py --device cuda --backend nccl --out FILE [--sizes ...] [--budget S]

--device cuda puts every rank on GPU 0 and times back-to-back calls with CUDA events;
--device cpu times them with the wall clock (the same logic, checkable without a GPU, with
backend gloo or jitccl's own "jitccl"). Before it is timed each (collective, size) is
checked once against the reference every rank computes; a wrong element fails the rank.
Sizes are nccl-tests' (and `jitccl perf`'s): the whole buffer, the AllGather's output and
the ReduceScatter's input, split evenly over the ranks.

--need-version MAJOR.MINOR: with backend nccl, a library older than that cannot run
several ranks on one GPU (NCCL 2.30 added NCCL_MULTI_RANK_GPU_ENABLE). Then rank 0 writes
one line saying so and no rank initialises NCCL. An initialisation or a call that fails is
written the same way ("refused: ..."), so the driver records it instead of failing.

Rank 0 writes JSON lines to --out: first {"version": ...}, then one line per (collective,
size) as soon as it is measured (a run cut short by its time limit keeps what it measured)."""

import argparse
import ctypes
import datetime
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

COLLS = ("all_reduce", "all_gather", "reduce_scatter")
# Bus bandwidth over algorithm bandwidth, as nccl-tests defines them.
BUS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
       "reduce_scatter": lambda n: (n - 1) / n}


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--backend", default="nccl")
    p.add_argument("--out", required=True)
    p.add_argument("--colls", default=",".join(COLLS))
    p.add_argument("--sizes", default=" ".join(str(16 << (3 * k)) for k in range(9)))
    p.add_argument("--budget", type=float, default=0.2, help="seconds of calls per (collective, size) and rep")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--max-calls", type=int, default=500)
    p.add_argument("--need-version", default="")
    return p.parse_args()


def nccl_version():
    """The version of the NCCL torch calls: ncclGetVersion of a preloaded libnccl.so.2, else
    torch's own (torch.cuda.nccl.version() is the version torch was built against, which a
    preloaded library does not change)."""
    for lib in os.environ.get("LD_PRELOAD", "").split():
        if "libnccl" in os.path.basename(lib):
            code = ctypes.c_int()
            if ctypes.CDLL(lib).ncclGetVersion(ctypes.byref(code)) == 0:
                c = code.value
                return f"{c // 10000}.{c % 10000 // 100}.{c % 100}" if c >= 10000 else f"{c // 1000}.{c % 1000 // 100}.{c % 100}"
    v = torch.cuda.nccl.version()
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


class Rank:
    def __init__(self, args, rank, world):
        self.args, self.rank, self.world = args, rank, world
        self.cuda = args.device == "cuda"
        self.dev = torch.device("cuda", 0) if self.cuda else torch.device("cpu")
        self.out = open(args.out, "a") if rank == 0 else None

    def write(self, **row):
        if self.out:
            self.out.write(json.dumps(row) + "\n")
            self.out.flush()

    def call(self, coll, bufs):
        if coll == "all_reduce":
            dist.all_reduce(bufs[0])
        elif coll == "all_gather":
            dist.all_gather_into_tensor(bufs[1], bufs[0])
        else:
            dist.reduce_scatter_tensor(bufs[1], bufs[0])

    def buffers(self, coll, per_rank, fill):
        """(input, output) of `per_rank` elements a rank; `fill(chunk)` gives chunk's value."""
        n = self.world
        if coll == "all_reduce":
            return (torch.full((per_rank,), fill(0), device=self.dev),)
        if coll == "all_gather":
            return (torch.full((per_rank,), fill(0), device=self.dev),
                    torch.empty(per_rank * n, device=self.dev))
        inp = torch.cat([torch.full((per_rank,), fill(c), device=self.dev) for c in range(n)])
        return inp, torch.empty(per_rank, device=self.dev)

    def check(self, coll, per_rank):
        """One call on small integers (exact in float32) against the reference."""
        n, r = self.world, self.rank
        bufs = self.buffers(coll, per_rank, lambda c: float(r + 1 + 10 * c))
        self.call(coll, bufs)
        if coll == "all_reduce":
            want = torch.full((per_rank,), float(n * (n + 1) // 2))
        elif coll == "all_gather":
            want = torch.cat([torch.full((per_rank,), float(q + 1)) for q in range(n)])
        else:
            want = torch.full((per_rank,), float(n * (n + 1) // 2 + 10 * n * r))
        got = bufs[-1].cpu()
        if not torch.equal(got, want):
            bad = (got != want).nonzero()[0].item()
            sys.exit(f"rank {r}: {coll} of {per_rank} elements a rank: element {bad} is {got[bad].item()}, "
                     f"expected {want[bad].item()}")

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()
        dist.barrier(group=self.gloo)

    def timed(self, coll, bufs, calls):
        """Microseconds per call of `calls` back-to-back calls, every rank starting together."""
        self.sync()
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                self.call(coll, bufs)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e3 / calls
        t0 = time.perf_counter()
        for _ in range(calls):
            self.call(coll, bufs)
        return (time.perf_counter() - t0) * 1e6 / calls

    def agreed(self, value):
        """Rank 0's value on every rank (the call counts must match)."""
        t = torch.tensor([value], dtype=torch.float64)
        dist.broadcast(t, 0, group=self.gloo)
        return t.item()

    def mean(self, value):
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t, group=self.gloo)
        return t.item() / self.world

    def measure(self, coll, size):
        per_rank = size // (4 * self.world)
        self.check(coll, per_rank)
        # Zeros: sums of them stay finite however many calls run in place.
        bufs = self.buffers(coll, per_rank, lambda c: 0.0)
        # The batch's size from a warmed estimate (connections made, kernels built or loaded):
        # batches grow fourfold until one fills a tenth of the budget, so that a batch is not
        # sized from cold calls and then mostly times how far apart the ranks left the barrier.
        calls = 1
        while True:
            us = self.agreed(self.timed(coll, bufs, calls))
            if us * calls >= self.args.budget * 1e5 or calls >= self.args.max_calls:
                break
            calls = min(self.args.max_calls, calls * 4)
        calls = int(max(1, min(self.args.max_calls, self.args.budget * 1e6 / max(us, 1.0))))
        samples = [self.mean(self.timed(coll, bufs, calls)) for _ in range(self.args.reps)]
        us = statistics.median(samples)
        algbw = size / us / 1e3
        self.write(coll=coll, size=size, nranks=self.world, us=us, algbw=algbw,
                   busbw=algbw * BUS[coll](self.world), calls=calls, samples=samples)


def main():
    args = parse()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.device == "cuda":
        torch.cuda.set_device(0)
    version = nccl_version() if args.backend == "nccl" else torch.__version__
    if rank == 0:
        print(f"rank 0: torch {torch.__version__}, backend {args.backend}, "
              f"{'NCCL ' + version if args.backend == 'nccl' else 'no NCCL'}, {world} ranks", flush=True)
    r = Rank(args, rank, world)
    r.write(version=version, backend=args.backend, nranks=world)
    need = args.need_version
    if args.backend == "nccl" and need and tuple(map(int, version.split(".")[:2])) < tuple(map(int, need.split("."))):
        r.write(refused=f"NCCL {version} cannot run {world} ranks on one GPU (needs {need})")
        return
    timeout = datetime.timedelta(seconds=60)
    try:
        if args.backend == "nccl":
            dist.init_process_group("nccl", device_id=torch.device("cuda", 0), timeout=timeout)
        else:
            if args.backend == "jitccl":
                import jitccl.torch  # noqa: F401 - registers "jitccl"
            dist.init_process_group(args.backend, timeout=timeout)
        r.gloo = dist.new_group(backend="gloo", timeout=timeout)
        for size in map(int, args.sizes.split()):
            for coll in args.colls.split(","):
                r.measure(coll, size)
    except (RuntimeError, dist.DistBackendError) as e:
        # Written as a row naming the error: the driver counts NCCL refusing the layout as a
        # finding, and jitccl failing as a failure (the exit code says the rank failed).
        msg = str(e).strip().splitlines()
        r.write(refused=f"{args.backend} {version}: {msg[0] if msg else type(e).__name__}")
        print(f"rank {rank}: {args.backend} failed: {e}", file=sys.stderr, flush=True)
        os._exit(3)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
