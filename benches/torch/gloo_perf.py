"""Gloo yardstick for `jitccl perf`: one rank of torch.distributed on the "gloo" backend
(CPU tensors, float32) timing collectives at a list of sizes, printing one line per size
in the units and layout of benches/mpi/'s programs, under a header line per collective
("# torch.distributed COLL on gloo ..."). benches/peers.sh starts its ranks (in the chroot
of scripts/setup-torch.sh, torchrun's environment, GLOO_SOCKET_IFNAME pinned); one start
serves every collective, as PyTorch takes seconds to start.

    python3 gloo_perf.py COLL:SIZE:WARMUP:ITERS...

each a collective at one size, in that order. COLL: all_reduce (SUM, in place), all_gather
(all_gather_into_tensor), reduce_scatter (reduce_scatter_tensor, SUM), broadcast (root 0,
in place) or all_to_all (all_to_all_single). SIZE counts bytes as `jitccl perf` and nccl-tests do: AllGather's whole
output, ReduceScatter's and AlltoAll's whole input (n blocks), the buffer otherwise.

Rank 0 prints, per size:  bytes  time_us  algbw_GBps  busbw_GBps  wrong  warmup  iters
where time is the slowest rank's per-iteration average after a barrier, algbw = bytes /
time and busbw = algbw x nccl-tests' bus factor. `wrong` counts result elements, over all
ranks, that differ from the expected ones in one checked call per size on a poisoned
output; the exit status is 1 if any did.
"""

import os
import sys
import time

os.environ.setdefault("USE_LIBUV", "0")  # Debian's torch has no libuv

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

COLLS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")


def values(src: int, blk: int, count: int) -> torch.Tensor:
    """Rank `src`'s block `blk`: small integers, exact in float32 under any sum over ranks,
    different per block and index so that a misplaced block shows."""
    return (src + 1) * (blk * 8 + torch.arange(count) % 7 + 1).float()


class Case:
    """One collective at one size: its buffers, its call, and the check of its result."""

    def __init__(self, coll: str, nbytes: int, rank: int, n: int):
        self.coll, self.rank, self.n = coll, rank, n
        blocks = 1 if coll in ("all_reduce", "broadcast") else n
        self.count = nbytes // 4 // blocks  # one block
        self.bytes = self.count * blocks * 4
        c = self.count
        if coll == "all_reduce":
            self.send = values(rank, 0, c)
        elif coll == "all_gather":
            self.send, self.recv = values(rank, 0, c), torch.empty(c * n)
        elif coll == "reduce_scatter":
            self.send, self.recv = torch.cat([values(rank, q, c) for q in range(n)]), torch.empty(c)
        elif coll == "all_to_all":
            # Block q goes to rank q: its value names the pair.
            self.send, self.recv = torch.cat([values(rank, q, c) for q in range(n)]), torch.empty(c * n)
        else:
            self.send = values(0, 0, c) if rank == 0 else torch.empty(c)

    def call(self):
        if self.coll == "all_reduce":
            dist.all_reduce(self.send)
        elif self.coll == "all_gather":
            dist.all_gather_into_tensor(self.recv, self.send)
        elif self.coll == "reduce_scatter":
            dist.reduce_scatter_tensor(self.recv, self.send)
        elif self.coll == "all_to_all":
            dist.all_to_all_single(self.recv, self.send)
        else:
            dist.broadcast(self.send, 0)

    def wrong(self) -> int:
        """Elements wrong after one call from fresh, poisoned buffers."""
        c, n, r = self.count, self.n, self.rank
        nan = float("nan")
        if self.coll == "all_reduce":
            self.send = values(r, 0, c)
            self.call()
            got, want = self.send, values(0, 0, c) * (n * (n + 1) // 2)
        elif self.coll == "broadcast":
            self.send = values(0, 0, c) if r == 0 else torch.full((c,), nan)
            self.call()
            got, want = self.send, values(0, 0, c)
        else:
            self.recv.fill_(nan)
            self.call()
            got = self.recv
            if self.coll == "all_gather":
                want = torch.cat([values(q, 0, c) for q in range(n)])
            elif self.coll == "reduce_scatter":
                want = values(0, r, c) * (n * (n + 1) // 2)
            else:
                want = torch.cat([values(q, r, c) for q in range(n)])
        return int((got != want).sum().item())

    def bus_factor(self) -> float:
        return {"all_reduce": 2 * (self.n - 1) / self.n, "broadcast": 1.0}.get(self.coll, (self.n - 1) / self.n)


def main():
    runs = [a.split(":") for a in sys.argv[1:]]
    if not runs or any(len(r) != 4 or r[0] not in COLLS or not all(x.isdigit() for x in r[1:]) for r in runs):
        sys.exit(f"usage: gloo_perf.py COLL:SIZE:WARMUP:ITERS... (COLL: {', '.join(COLLS)})")
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    failed, last = False, None
    for coll, nbytes, warmup, iters in runs:
        if rank == 0 and coll != last:
            print(f"# torch.distributed {coll} on gloo, float32, {n} ranks (torch {torch.__version__})")
            print(f"# {'size(B)':>12} {'time(us)':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>8} {'warmup':>6} {'iters':>6}")
        last = coll
        failed |= measure(Case(coll, int(nbytes), rank, n), int(warmup), int(iters)) != 0
    dist.destroy_process_group()
    sys.exit(1 if failed else 0)


def measure(case: Case, warmup: int, iters: int) -> int:
    """Times `case` and prints its line on rank 0; returns its wrong elements over all ranks."""
    if case.count == 0:
        sys.exit(f"gloo_perf: {case.coll} at {case.n} ranks needs at least {4 * case.n} B")
    for _ in range(warmup):
        case.call()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        case.call()
    # The slowest rank's time, and every rank's wrong elements, summed.
    us = torch.tensor([(time.perf_counter() - start) * 1e6 / iters], dtype=torch.float64)
    dist.all_reduce(us, op=dist.ReduceOp.MAX)
    wrong = torch.tensor([case.wrong()], dtype=torch.int64)
    dist.all_reduce(wrong)
    if case.rank == 0:
        algbw = case.bytes / us.item() / 1e3
        print(f"  {case.bytes:12d} {us.item():10.2f} {algbw:8.2f} {algbw * case.bus_factor():8.2f} {wrong.item():8d} "
              f"{warmup:6d} {iters:6d}", flush=True)
    return wrong.item()


if __name__ == "__main__":
    main()
