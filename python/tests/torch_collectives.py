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

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
# Before init_process_group: DDP imports torch.distributed.nn, whose functions take
# group.WORLD as a default argument, which would then hold the default group forever.
import torch.distributed.nn  # noqa: E402,F401
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import jitccl.torch  # noqa: E402,F401 - registers "jitccl"

from torch_rank import check, passed, run  # noqa: E402

R = dist.ReduceOp


def same(a, b, what, exact=True, rtol=1e-5, atol=1e-6):
    if isinstance(a, (list, tuple)):
        check(len(a) == len(b), f"{what}: {len(a)} vs {len(b)} tensors")
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{what}[{i}]", exact, rtol, atol)
        return
    check(a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}")
    if exact:
        ok = torch.equal(a, b) if a.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2) else \
            torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    else:
        ok = torch.allclose(a, b, rtol=rtol, atol=atol)
    if not ok:
        raise AssertionError(f"rank {RANK}: {what}: jitccl\n{a}\nreference\n{b}")
    check(True, what)


def raises(kinds, fn, what, contains=()):
    try:
        fn()
    except kinds as e:
        for c in contains:
            check(c in str(e), f"{what}: the error names {c!r}: {e}")
        check(True, what)
        return e
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"rank {RANK}: {what}: expected {kinds}, got {type(e).__name__}: {e}") from e
    raise AssertionError(f"rank {RANK}: {what}: no error")


# ---- Inputs ---------------------------------------------------------------------------------

DTYPES = [torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.float64]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]


def values(dtype, shape, seed, op=None):
    """Values whose reductions are exact in `dtype` in any order (small integers, halves,
    powers of two for products), so Gloo's and jitccl's results must be equal bit for bit."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if op == R.PRODUCT:
        base = torch.tensor([1, 2, 1, 1] if dtype == torch.uint8 else [1, 2, -1, -2], dtype=torch.float64)
        if dtype in FLOATS or dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            base = torch.tensor([1, 2, -1, -0.5], dtype=torch.float64)
        v = base[torch.randint(0, 4, shape, generator=g)]
    else:
        lo = 0 if dtype in (torch.uint8, torch.uint32, torch.uint64) else -4
        v = torch.randint(lo, 5, shape, generator=g).to(torch.float64)
        if dtype.is_floating_point:
            v = v / 2
    return v.to(dtype)


def noncontig(t):
    """`t`'s values in a non-contiguous tensor of the same shape (a strided view)."""
    big = torch.zeros(tuple(t.shape) + (2,), dtype=t.dtype)
    v = big[..., 1]
    v.copy_(t)
    check(v.is_contiguous() == (t.dim() == 0 or t.numel() <= 1), "the view is strided")
    return v


def backend_of(pg):
    """What serves a jitccl group's CPU tensors: the C++ backend, or the Python group itself."""
    return pg if isinstance(pg, jitccl.torch.ProcessGroupJitccl) else pg._get_backend(torch.device("cpu"))


def both(fn, make):
    """fn(tensor, group) on the jitccl default group and on Gloo, with equal inputs (Gloo's
    contiguous: torch 2.6's Gloo all_reduce gives wrong results on strided views); the two
    tensors after."""
    a, b = make(), make().contiguous()
    fn(a, None)
    fn(b, GLOO)
    return a, b


# ---- The collectives, against Gloo ------------------------------------------------------------


def test_allreduce():
    for dtype in DTYPES:
        for op in (R.SUM, R.PRODUCT, R.MIN, R.MAX):
            for nc in (False, True):
                def make():
                    t = values(dtype, (3, 5), 100 * RANK + 7, op)
                    return noncontig(t) if nc else t
                a, b = both(lambda t, g: dist.all_reduce(t, op=op, group=g), make)
                same(a, b, f"all_reduce {dtype} {op} noncontig={nc}")
        if dtype in INTS:
            for op in (R.BAND, R.BOR, R.BXOR):
                a, b = both(lambda t, g: dist.all_reduce(t, op=op, group=g),
                                  lambda: values(dtype, (17,), 5 + RANK))
                same(a, b, f"all_reduce {dtype} {op}")
    # AVG (Gloo has none: against Gloo's SUM / size) and PREMUL_SUM (against Gloo's SUM of x * f).
    for dtype in FLOATS:
        t = values(dtype, (33,), 3 + RANK) * WORLD
        ref = t.clone()
        dist.all_reduce(ref, group=GLOO)
        got = t.clone()
        dist.all_reduce(got, op=R.AVG)
        same(got, ref / WORLD, f"all_reduce {dtype} AVG")
        for factor in (0.5, torch.tensor(2.0)):
            got = t.clone()
            dist.all_reduce(got, op=dist._make_nccl_premul_sum(factor))
            ref = t * factor
            dist.all_reduce(ref, group=GLOO)
            same(got, ref.to(dtype), f"all_reduce {dtype} PREMUL_SUM({factor})")
    # Integer AVG, as NCCL's: the sum in the type, divided, rounded toward zero.
    for dtype in (torch.int8, torch.int32, torch.int64):
        t = torch.tensor([-3 - RANK, 3 + RANK, 1, -1, 2 * RANK], dtype=dtype)
        got, ref = t.clone(), t.clone()
        dist.all_reduce(got, op=R.AVG)
        dist.all_reduce(ref, group=GLOO)
        same(got, torch.div(ref, WORLD, rounding_mode="trunc"), f"all_reduce {dtype} AVG")
    # Random floats, a larger size: equal within fp32's rounding (the sums' orders differ).
    for n in (1, 1000, 300_000):
        t = torch.randn(n, generator=torch.Generator().manual_seed(RANK))
        a, b = t.clone(), t.clone()
        dist.all_reduce(a)
        dist.all_reduce(b, group=GLOO)
        same(a, b, f"all_reduce random float32 x {n}", exact=False)
    # bool (bytes; MIN, MAX and bitwise), complex (real pairs), empty tensors, 0-dim tensors.
    for op in (R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR):
        a, b = both(lambda t, g: dist.all_reduce(t, op=op, group=g), lambda: values(torch.bool, (19,), RANK))
        same(a, b, f"all_reduce bool {op}")
    for dtype in (torch.complex64, torch.complex128):
        def make():
            return torch.complex(values(torch.float32, (9,), RANK), values(torch.float32, (9,), 50 + RANK)).to(dtype)
        a, b = both(lambda t, g: dist.all_reduce(t, group=g), make)
        same(a, b, f"all_reduce {dtype} SUM")
    # A small parameter (requires grad), reduced in place: the write is not autograd's business.
    p = nn.Parameter(torch.full((3,), float(RANK)))
    dist.all_reduce(p)
    same(p.detach(), torch.full((3,), float(sum(range(WORLD)))), "all_reduce of a small parameter")
    # A strided view of a parameter (requires grad): the copy back is not autograd's business.
    w = nn.Parameter(torch.full((4, 3), float(RANK)))
    dist.all_reduce(w.t())
    same(w.detach(), torch.full((4, 3), float(sum(range(WORLD)))), "all_reduce of a parameter's strided view")
    a, b = both(lambda t, g: dist.all_reduce(t, group=g), lambda: torch.empty(0))
    same(a, b, "all_reduce of an empty tensor")
    a, b = both(lambda t, g: dist.all_reduce(t, group=g), lambda: torch.tensor(float(RANK)))
    same(a, b, "all_reduce of a 0-dim tensor")
    # Types Gloo lacks: against values computed here.
    for dtype in [d for d in (getattr(torch, "uint32", None), getattr(torch, "uint64", None),
                              torch.float8_e4m3fn, torch.float8_e5m2) if d is not None]:
        every = [values(dtype, (11,), 9 + q) for q in range(WORLD)]
        got = every[RANK].clone()
        dist.all_reduce(got)
        ref = sum(e.to(torch.float64) for e in every).to(dtype)
        same(got, ref, f"all_reduce {dtype} SUM (against a local sum)")
        got = every[RANK].clone()
        dist.all_reduce(got, op=R.MAX)
        same(got, torch.stack([e.to(torch.float64) for e in every]).amax(0).to(dtype), f"all_reduce {dtype} MAX")
        got = values(dtype, (5,), 0) if RANK == 1 % WORLD else torch.zeros(5).to(dtype)
        dist.broadcast(got, 1 % WORLD)
        same(got, values(dtype, (5,), 0), f"broadcast {dtype}")


def test_broadcast_reduce():
    for root in range(WORLD):
        for dtype in (torch.int8, torch.bfloat16, torch.float32, torch.float64, torch.bool, torch.complex64):
            def make(rank=RANK):
                if dtype == torch.complex64:
                    return torch.complex(values(torch.float32, (4, 6), rank), values(torch.float32, (4, 6), 9))
                return values(dtype, (4, 6), 40 + rank)
            for nc in (False, True):
                a = noncontig(make()) if nc else make()
                dist.broadcast(a, root)
                same(a, make(root), f"broadcast {dtype} root {root} noncontig={nc}")
                if dtype not in (torch.bool, torch.complex64):  # types Gloo's broadcast has
                    b = make()
                    dist.broadcast(b, root, group=GLOO)
                    same(a, b, f"broadcast {dtype} root {root} noncontig={nc}, against Gloo")
        for dtype, op in ((torch.float32, R.SUM), (torch.int64, R.MAX), (torch.bfloat16, R.MIN),
                          (torch.int32, R.BXOR), (torch.float64, R.PRODUCT)):
            def make():
                return noncontig(values(dtype, (3, 4), 70 + RANK, op))
            a, b = both(lambda t, g: dist.reduce(t, root, op=op, group=g), make)
            if RANK == root:
                same(a, b, f"reduce {dtype} {op} root {root}")
            else:
                same(a, make(), f"reduce {dtype} {op}: a non-root's tensor is unchanged")


def test_allgather_family():
    for dtype in DTYPES + [torch.bool]:
        x = values(dtype, (2, 3), 30 + RANK)
        outs_a = [torch.zeros_like(x) for _ in range(WORLD)]
        outs_b = [torch.zeros_like(x) for _ in range(WORLD)]
        dist.all_gather(outs_a, x)
        dist.all_gather(outs_b, x, group=GLOO)
        same(outs_a, outs_b, f"all_gather {dtype}")
        a = torch.zeros((WORLD * 2, 3), dtype=dtype)
        b = torch.zeros((WORLD * 2, 3), dtype=dtype)
        dist.all_gather_into_tensor(a, x)
        dist.all_gather_into_tensor(b, x, group=GLOO)
        same(a, b, f"all_gather_into_tensor {dtype}")
    # Non-contiguous input and outputs.
    x = noncontig(values(torch.float32, (3, 4), RANK))
    outs_a = [noncontig(torch.zeros(3, 4)) for _ in range(WORLD)]
    outs_b = [torch.zeros(3, 4) for _ in range(WORLD)]
    dist.all_gather(outs_a, x)
    dist.all_gather(outs_b, x, group=GLOO)
    same([o.contiguous() for o in outs_a], outs_b, "all_gather non-contiguous")
    a = torch.zeros(4, WORLD * 3).t()
    b = torch.zeros(WORLD * 3, 4)
    dist.all_gather_into_tensor(a, x)
    dist.all_gather_into_tensor(b, x, group=GLOO)
    same(a.contiguous(), b, "all_gather_into_tensor into a non-contiguous output")
    # Coalesced (the coalescing manager's fast path: allgather_into_tensor_coalesced).
    xs = [values(torch.float32, (n,), RANK + n) for n in (1, 5, 8)]
    outs = [torch.zeros(WORLD * x.numel()) for x in xs]
    with dist._coalescing_manager():
        for o, x in zip(outs, xs):
            dist.all_gather_into_tensor(o, x)
    for o, x in zip(outs, xs):
        ref = torch.zeros_like(o)
        dist.all_gather_into_tensor(ref, x, group=GLOO)
        same(o, ref, f"coalesced all_gather_into_tensor x {x.numel()}")
    # all_gather_coalesced (deprecated, still a method) and object collectives on top.
    lists = [[torch.zeros(4) for _ in range(WORLD)], [torch.zeros(2) for _ in range(WORLD)]]
    ins = [torch.full((4,), float(RANK)), torch.full((2,), -float(RANK))]
    dist.all_gather_coalesced(lists, ins)
    same(lists[0], [torch.full((4,), float(q)) for q in range(WORLD)], "all_gather_coalesced 0")
    same(lists[1], [torch.full((2,), -float(q)) for q in range(WORLD)], "all_gather_coalesced 1")
    objs = [None] * WORLD
    dist.all_gather_object(objs, {"rank": RANK, "name": "x" * RANK})
    check(objs == [{"rank": q, "name": "x" * q} for q in range(WORLD)], f"all_gather_object: {objs}")
    box = [f"from {RANK}", RANK] if RANK == 0 else [None, None]
    dist.broadcast_object_list(box, 0)
    check(box == ["from 0", 0], f"broadcast_object_list: {box}")


def gloo_reduce_scatter(whole, op=R.SUM):
    """Gloo's reference of a reduce-scatter (its own has none in torch 2.6): its all_reduce of
    the whole input, this rank's block of it."""
    whole = whole.contiguous().clone()
    dist.all_reduce(whole, op=op, group=GLOO)
    return whole.reshape(WORLD, -1)[RANK]


def test_reduce_scatter_family():
    for dtype in DTYPES:
        for op in (R.SUM, R.MAX, R.PRODUCT) if dtype != torch.uint8 else (R.SUM, R.MIN):
            ins = [values(dtype, (5,), 10 * RANK + q, op) for q in range(WORLD)]
            whole = torch.cat(ins).reshape(WORLD, 5)
            ref = gloo_reduce_scatter(whole, op)
            a = torch.zeros(5, dtype=dtype)
            dist.reduce_scatter(a, [i.clone() for i in ins], op=op)
            same(a, ref, f"reduce_scatter {dtype} {op}")
            a = torch.zeros(5, dtype=dtype)
            dist.reduce_scatter_tensor(a, whole.clone(), op=op)
            same(a, ref, f"reduce_scatter_tensor {dtype} {op}")
    # Bitwise (a fold of an all-gather), AVG, a non-contiguous output and input.
    ins = [values(torch.int64, (6,), 3 * RANK + q) for q in range(WORLD)]
    a = torch.zeros(6, dtype=torch.int64)
    dist.reduce_scatter(a, ins, op=R.BOR)
    same(a, gloo_reduce_scatter(torch.cat(ins), R.BOR), "reduce_scatter int64 BOR")
    whole = noncontig(values(torch.float32, (WORLD * 2, 3), RANK))
    out = noncontig(torch.zeros(2, 3))
    dist.reduce_scatter_tensor(out, whole, op=R.AVG)
    same(out.contiguous(), gloo_reduce_scatter(whole).reshape(2, 3) / WORLD, "reduce_scatter_tensor AVG, strided")
    # Coalesced (reduce_scatter_tensor_coalesced through the coalescing manager).
    wholes = [values(torch.float32, (WORLD * n,), RANK + n) for n in (1, 3)]
    outs = [torch.zeros(n) for n in (1, 3)]
    with dist._coalescing_manager():
        for o, w in zip(outs, wholes):
            dist.reduce_scatter_tensor(o, w)
    for o, w in zip(outs, wholes):
        same(o, gloo_reduce_scatter(w), f"coalesced reduce_scatter_tensor x {o.numel()}")
    # allreduce_coalesced: the coalescing manager's all_reduce fast path.
    ts = [values(torch.float32, (n,), RANK + 2 * n) for n in (2, 7)]
    refs = [t.clone() for t in ts]
    with dist._coalescing_manager():
        for t in ts:
            dist.all_reduce(t)
    for r in refs:
        dist.all_reduce(r, group=GLOO)
    same(ts, refs, "coalesced all_reduce")


def test_alltoall_gather_scatter():
    # Equal blocks, then uneven splits (rank r sends r + q + 1 rows to rank q).
    for dtype in (torch.float32, torch.int8, torch.bfloat16):
        x = values(dtype, (WORLD * 3, 2), 20 + RANK)
        a, b = torch.zeros_like(x), torch.zeros_like(x)
        dist.all_to_all_single(a, x)
        dist.all_to_all_single(b, x, group=GLOO)
        same(a, b, f"all_to_all_single {dtype}")
    ins = [RANK + q + 1 for q in range(WORLD)]
    outs = [q + RANK + 1 for q in range(WORLD)]
    x = values(torch.float64, (sum(ins), 3), RANK)
    a, b = torch.zeros(sum(outs), 3, dtype=torch.float64), torch.zeros(sum(outs), 3, dtype=torch.float64)
    dist.all_to_all_single(a, x, outs, ins)
    dist.all_to_all_single(b, x, outs, ins, group=GLOO)
    same(a, b, "all_to_all_single uneven")
    zero_in = [0 if q == (RANK + 1) % WORLD else 2 for q in range(WORLD)]
    zero_out = [0 if q == (RANK - 1) % WORLD else 2 for q in range(WORLD)]
    x = values(torch.int32, (sum(zero_in),), RANK)
    a, b = torch.zeros(sum(zero_out), dtype=torch.int32), torch.zeros(sum(zero_out), dtype=torch.int32)
    dist.all_to_all_single(a, x, zero_out, zero_in)
    dist.all_to_all_single(b, x, zero_out, zero_in, group=GLOO)
    same(a, b, "all_to_all_single with empty blocks")
    # all_to_all of lists: block sizes by pair.
    send = [values(torch.float32, (RANK + q + 1,), 10 * RANK + q) for q in range(WORLD)]
    a = [noncontig(torch.zeros(q + RANK + 1)) for q in range(WORLD)]
    dist.all_to_all(a, send)  # Gloo has none: against what rank q sent
    same(a, [values(torch.float32, (q + RANK + 1,), 10 * q + RANK) for q in range(WORLD)], "all_to_all lists")
    for root in range(WORLD):
        x = noncontig(values(torch.float32, (2, 3), 60 + RANK))
        ga = [torch.zeros(2, 3) for _ in range(WORLD)] if RANK == root else None
        gb = [torch.zeros(2, 3) for _ in range(WORLD)] if RANK == root else None
        dist.gather(x, ga, dst=root)
        dist.gather(x.contiguous(), gb, dst=root, group=GLOO)
        if RANK == root:
            same(ga, gb, f"gather root {root}")
        chunks = [values(torch.int64, (4,), 80 + q) for q in range(WORLD)] if RANK == root else None
        a, b = torch.zeros(4, 2, dtype=torch.int64)[:, 1], torch.zeros(4, dtype=torch.int64)
        dist.scatter(a, chunks, src=root)
        dist.scatter(b, chunks, src=root, group=GLOO)
        same(a.contiguous(), b, f"scatter root {root}")


def test_point_to_point():
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    # A ring with isend before irecv on every rank (held, run together at the wait).
    for n in (3, 100_000):
        x, y = torch.full((n,), float(RANK)), torch.zeros(n)
        reqs = [dist.isend(x, nxt), dist.irecv(y, prv)]
        for r in reqs:
            check(r.wait() is True, "isend/irecv wait")
        same(y, torch.full((n,), float(prv)), f"ring isend/irecv x {n}")
    # batch_isend_irecv both ways, non-contiguous receive.
    x = torch.arange(6, dtype=torch.int64) + 10 * RANK
    y1, y2 = torch.zeros(6, dtype=torch.int64), noncontig(torch.zeros(2, 3, dtype=torch.int64))
    ops = [dist.P2POp(dist.isend, x, nxt), dist.P2POp(dist.isend, x, prv),
           dist.P2POp(dist.irecv, y1, prv), dist.P2POp(dist.irecv, y2, nxt)]
    for r in dist.batch_isend_irecv(ops):
        r.wait()
    same(y1, torch.arange(6, dtype=torch.int64) + 10 * prv, "batch_isend_irecv from prev")
    same(y2.contiguous().reshape(6), torch.arange(6, dtype=torch.int64) + 10 * nxt, "batch_isend_irecv from next")
    # Blocking send/recv pairs: even ranks send first.
    t = torch.tensor([RANK, RANK * 2], dtype=torch.bfloat16)
    got = torch.zeros(2, dtype=torch.bfloat16)
    if RANK % 2 == 0:
        if nxt != RANK:
            dist.send(t, nxt)
        if prv != RANK:
            dist.recv(got, prv)
    else:
        dist.recv(got, prv)
        dist.send(t, nxt)
    if WORLD > 1:
        same(got, torch.tensor([prv, prv * 2], dtype=torch.bfloat16), "send/recv")
    # A receive posted before, the send's wait after another collective (which runs it).
    y = torch.zeros(3)
    reqs = [dist.irecv(y, prv), dist.isend(torch.full((3,), 7.0 + RANK), nxt)]
    z = torch.ones(1)
    dist.all_reduce(z)
    check(all(r.is_completed() for r in reqs), "held sends and receives ran before the collective")
    same(y, torch.full((3,), 7.0 + prv), "irecv completed by a later collective")
    same(z, torch.full((1,), float(WORLD)), "the collective after them")


def test_works():
    t = torch.ones(8)
    w = dist.all_reduce(t, async_op=True)
    check(w.is_completed(), "an async all_reduce's Work is complete")
    check(w.wait() is True and w.is_success(), "wait() is True")
    fut = w.get_future()
    check(fut.done(), "its future is done")
    same(fut.value()[0], torch.full((8,), float(WORLD)), "the future's value is the result")
    chained = fut.then(lambda f: f.value()[0] * 2)
    same(chained.wait(), torch.full((8,), 2.0 * WORLD), "a callback chained on the future")
    for work in (dist.broadcast(t, 0, async_op=True), dist.barrier(async_op=True),
                 dist.all_gather_into_tensor(torch.zeros(8 * WORLD), t, async_op=True)):
        check(work.is_completed() and work.wait(), "async Work of broadcast, barrier, all_gather")
    # A coalescing block on the CPU (start/end coalescing): a broadcast and an all_reduce.
    a, b = torch.full((2,), float(RANK)), torch.full((3,), 1.0)
    with dist._coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:
        dist.broadcast(a, WORLD - 1)
        dist.all_reduce(b)
    cm.wait()
    same(a, torch.full((2,), float(WORLD - 1)), "broadcast in a coalescing block")
    same(b, torch.full((3,), float(WORLD)), "all_reduce in a coalescing block")
    # Functional collectives (through the C++ dispatcher into the Python group).
    import torch.distributed._functional_collectives as funcol
    got = funcol.all_reduce(torch.full((3,), float(RANK)), "sum", dist.group.WORLD)
    same(funcol.wait_tensor(got), torch.full((3,), float(sum(range(WORLD)))), "functional all_reduce")
    got = funcol.all_gather_tensor(torch.full((2,), float(RANK)), 0, dist.group.WORLD)
    same(funcol.wait_tensor(got), torch.arange(WORLD, dtype=torch.float32).repeat_interleave(2),
         "functional all_gather_tensor")
    if WORLD > 1:
        y = torch.zeros(2)
        r = dist.irecv(y, (RANK - 1) % WORLD)
        s = dist.isend(torch.full((2,), float(RANK)), (RANK + 1) % WORLD)
        f = r.get_future()
        same(f.wait()[0], torch.full((2,), float((RANK - 1) % WORLD)), "an irecv's future gives the tensor")
        check(s.is_completed(), "the isend is complete")
    dist.barrier()


def test_ddp():
    """A few SGD steps of a small model under DDP, on jitccl and on Gloo: equal parameters
    (fp32 rounding), equal across ranks, and unlike each rank's own start."""
    def train(pg, steps=4):
        torch.manual_seed(1234 + RANK)  # different starts: DDP broadcasts rank 0's
        model = nn.Sequential(nn.Linear(12, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 5))
        ddp = DDP(model, process_group=pg, bucket_cap_mb=0.002)  # several buckets
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
        g = torch.Generator().manual_seed(99 + RANK)
        for _ in range(steps):
            x, y = torch.randn(16, 12, generator=g), torch.randn(16, 5, generator=g)
            loss = nn.functional.mse_loss(ddp(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        # Parameters, then the buffers (BatchNorm's running statistics: rank 0's broadcast at
        # each forward, then updated by this rank's batch, so they differ by rank).
        return ([p.detach().clone() for p in model.parameters()],
                [b.detach().clone() for b in model.buffers()])

    start = time.time()
    mine = train(dist.group.WORLD)
    ref = train(GLOO)
    same(mine[0], ref[0], "DDP parameters, jitccl vs Gloo", exact=False, rtol=1e-5, atol=1e-6)
    same(mine[1], ref[1], "DDP buffers, jitccl vs Gloo", exact=False, rtol=1e-5, atol=1e-6)
    flat = torch.cat([p.reshape(-1).to(torch.float64) for p in mine[0]])
    every = [torch.zeros_like(flat) for _ in range(WORLD)]
    dist.all_gather(every, flat, group=GLOO)
    for q in range(WORLD):
        same(every[q], every[0], f"DDP parameters of rank {q} equal rank 0's")
    diff = max((a - b).abs().max().item() for a, b in zip(mine[0], ref[0]))
    print(f"rank {RANK}: DDP (2 trainings) in {time.time() - start:.1f} s; parameters differ from Gloo's by at "
          f"most {diff:.2e}", flush=True)


def test_groups():
    """new_group: subsets, each with its communicator; destroy_process_group frees it."""
    evens = dist.new_group([q for q in range(WORLD) if q % 2 == 0], backend="jitccl")
    odds = dist.new_group([q for q in range(WORLD) if q % 2 == 1], backend="jitccl") if WORLD > 1 else None
    evens_gloo = dist.new_group([q for q in range(WORLD) if q % 2 == 0], backend="gloo")
    odds_gloo = dist.new_group([q for q in range(WORLD) if q % 2 == 1], backend="gloo") if WORLD > 1 else None
    mine, mine_gloo = (evens, evens_gloo) if RANK % 2 == 0 else (odds, odds_gloo)
    check(dist.get_backend(mine) == "jitccl", f"the group's backend: {dist.get_backend(mine)}")
    a, b = values(torch.float32, (10,), RANK), values(torch.float32, (10,), RANK)
    dist.all_reduce(a, group=mine)
    dist.all_reduce(b, group=mine_gloo)
    same(a, b, "all_reduce in a subgroup")
    members = dist.get_process_group_ranks(mine)
    outs = [torch.zeros(2) for _ in members]
    dist.all_gather(outs, torch.full((2,), float(RANK)), group=mine)
    same(outs, [torch.full((2,), float(q)) for q in members], "all_gather in a subgroup (group ranks)")
    t = torch.full((3,), float(RANK))
    dist.broadcast(t, members[-1], group=mine)  # a global rank as the root
    same(t, torch.full((3,), float(members[-1])), "broadcast in a subgroup from its last member")
    # A device map naming jitccl for both devices gives the same kind of group.
    both_devices = dist.new_group(backend="cpu:jitccl,cuda:jitccl")
    check(type(backend_of(both_devices)) is type(backend_of(dist.group.WORLD)),
          f"cpu:jitccl,cuda:jitccl: {type(backend_of(both_devices))}")
    x = torch.full((5,), float(RANK))
    dist.all_reduce(x, group=both_devices)
    same(x, torch.full((5,), float(sum(range(WORLD)))), "all_reduce on a cpu:jitccl,cuda:jitccl group")
    dist.destroy_process_group(both_devices)
    # A group of every rank in reverse order: group rank 0 is the last process.
    rev = dist.new_group(list(range(WORLD))[::-1], backend="jitccl")
    t = torch.full((2,), float(RANK))
    dist.broadcast(t, WORLD - 1, group=rev)
    same(t, torch.full((2,), float(WORLD - 1)), "broadcast in a reversed group")
    # destroy_process_group(subgroup) frees its communicator; the others go on.
    pg = mine
    fin = jitccl.torch.python_group(pg)._finalizer
    dist.destroy_process_group(mine)
    del pg, mine, evens, odds
    gc.collect()
    check(not fin.alive, "destroy_process_group(group) freed the group's communicator")
    x = torch.ones(2)
    dist.all_reduce(x, group=rev)
    same(x, torch.full((2,), float(WORLD)), "another group after one was destroyed")
    dist.destroy_process_group(rev)


def meta_on_gloo():
    """What this torch does with a meta tensor on a Gloo group: None where its dispatcher
    serves it without a backend (2.11), else the type of the error it raises (2.6)."""
    gloo = dist.new_group(list(range(WORLD)), backend="gloo")
    try:
        dist.all_reduce(torch.zeros(2, device="meta"), group=gloo)
        return None
    except Exception as e:  # noqa: BLE001
        return type(e)
    finally:
        dist.destroy_process_group(gloo)


def test_errors():
    """Bad arguments: refused on the calling rank before anything is sent. Calls that
    disagree across ranks: an error on every rank, nothing written, the group usable."""
    # Local: refused at once, on every rank alike here.
    raises(ValueError, lambda: dist.all_gather_into_tensor(torch.zeros(WORLD + 1), torch.zeros(1)),
           "all_gather_into_tensor into a wrong-sized output", ("all_gather_into_tensor", f"rank {RANK}"))
    meta = lambda: dist.all_reduce(torch.zeros(2, device="meta"))  # noqa: E731
    if not NATIVE:  # the Python group sees every call
        raises(ValueError, meta, "a tensor on the meta device", ("CPU and CUDA tensors", "meta"))
    elif meta_on_gloo() is None:  # torch serves it before a C++ backend sees it (2.11), as for Gloo
        check(meta() is None, "a tensor on the meta device: served by torch's dispatcher, as on Gloo")
    else:  # torch's dispatcher refuses it before a C++ backend sees it, as for Gloo (2.6)
        raises(NotImplementedError, meta, "a tensor on the meta device", ("Meta",))
    if not torch.cuda.is_available():
        check(jitccl.torch.python_group(dist.group.WORLD)._cuda is None, "no CUDA communicator where torch sees no GPU")
    raises(TypeError, lambda: dist.all_reduce(torch.zeros(2, dtype=torch.int16)), "int16",
           ("int16", "allreduce"))
    raises(TypeError, lambda: dist.all_reduce(torch.zeros(2), op=R.BAND), "BAND on float32", ("BAND",))
    raises(TypeError, lambda: dist.all_reduce(torch.zeros(2, dtype=torch.bool)), "SUM on bool", ("bool",))
    raises(TypeError, lambda: dist.all_reduce(torch.zeros(2, dtype=torch.int32), op=dist._make_nccl_premul_sum(2.0)),
           "PREMUL_SUM on int32", ("PREMUL_SUM", "int32"))
    raises(ValueError, lambda: dist.all_to_all_single(torch.zeros(WORLD), torch.zeros(WORLD), [1] * WORLD,
                                                     [2] + [1] * (WORLD - 1)),
           "all_to_all_single splits that do not add up", ("split",))
    # Disagreeing calls, on a group with a short timeout: the ranks' sizes differ.
    g = dist.new_group(backend="jitccl", timeout=timedelta(seconds=5))
    start = time.time()
    x = torch.full((100 + 10 * RANK,), 1.0)
    e = raises(dist.DistBackendError, lambda: dist.all_reduce(x, group=g), "all_reduce with sizes that differ",
               ("allreduce", f"rank {RANK}", "100 float32", "differently"))
    check(isinstance(e, RuntimeError), "a DistBackendError is a RuntimeError")
    check(torch.equal(x, torch.full((100 + 10 * RANK,), 1.0)), "nothing was written")
    # Small calls (through the group's scratch in the host arena): the same refusal.
    for dtype in (torch.float32, torch.int8):
        x = torch.full((3 + RANK,), 1, dtype=dtype)
        raises(dist.DistBackendError, lambda: dist.all_reduce(x, group=g), f"a small all_reduce of {dtype}, sizes differ",
               ("allreduce", f"rank {RANK}", "3 " + str(dtype).replace("torch.", ""), "differently"))
        check(torch.equal(x, torch.full((3 + RANK,), 1, dtype=dtype)), "the small call wrote nothing")
    if WORLD > 1:
        y = torch.full((3,), float(RANK))
        raises(dist.DistBackendError, lambda: dist.broadcast(y, min(RANK, 1), group=g),
               "broadcast with roots that differ", ("root 0", "root 1"))
        check(torch.equal(y, torch.full((3,), float(RANK))), "the broadcast wrote nothing")
        raises(dist.DistBackendError, lambda: dist.all_reduce(torch.zeros(4), group=g) if RANK else
               dist.all_gather_into_tensor(torch.zeros(4 * WORLD), torch.zeros(4), group=g),
               "different collectives", ("all_gather_into_tensor of 4 float32", "allreduce of 4 float32"))
        splits_in = [1] * WORLD
        splits_out = [1] * WORLD
        if RANK == 0:
            splits_in, splits_out = [1] + [2] + [1] * (WORLD - 2), [1] + [2] + [1] * (WORLD - 2)
        raises(dist.DistBackendError,
               lambda: dist.all_to_all_single(torch.zeros(sum(splits_out)), torch.zeros(sum(splits_in)), splits_out,
                                              splits_in, group=g),
               "all_to_all_single whose splits disagree", ("rank 0 sends 2 elements to rank 1",))
        # A send and its receive with other sizes: the receive fails, nothing written.
        if RANK == 0:
            dist.send(torch.ones(5), 1, group=g)
        elif RANK == 1:
            y = torch.zeros(7)
            raises(dist.DistBackendError, lambda: dist.recv(y, 0, group=g), "a receive of another size",
                   ("rank 0 sent 5 float32", "receives 7"))
            check(torch.equal(y, torch.zeros(7)), "the receive wrote nothing")
    # The group still works: nothing was left in it.
    x = torch.full((4,), float(RANK))
    dist.all_reduce(x, group=g)
    same(x, torch.full((4,), float(sum(range(WORLD)))), "the group works after refused calls")
    check(time.time() - start < 4, f"refusals took {time.time() - start:.1f} s, not a timeout")
    # A rank that never comes: the wait ends with the group's timeout (5 s), as an error.
    if WORLD > 1:
        start = time.time()
        if RANK == 0:
            e = raises(dist.DistBackendError, lambda: dist.all_reduce(torch.ones(3), group=g),
                       "an all_reduce that other ranks never join", ("Timeout", "rank 0"))
            took = time.time() - start
            check(4 <= took < 30, f"it ended after the group's timeout: {took:.1f} s")
        dist.barrier(group=GLOO)
        # The group is failed now; later calls raise at once rather than hang.
        start = time.time()
        raises(dist.DistBackendError, lambda: dist.all_reduce(torch.ones(3), group=g), "a failed group's call")
        check(time.time() - start < 15, "a failed group raises soon")
    dist.destroy_process_group(g)
    # A group shut down through its backend: its calls raise (the C++ backend's fast ones
    # included), write nothing, and other groups go on.
    g = dist.new_group(backend="jitccl")
    backend_of(g).shutdown()
    for what, call in (("all_reduce", lambda t: dist.all_reduce(t, group=g)),
                       ("broadcast", lambda t: dist.broadcast(t, 0, group=g))):
        x = torch.full((4,), 3.0)
        raises(dist.DistBackendError, lambda: call(x), f"{what} on a group shut down", ("destroyed or aborted",))
        check(torch.equal(x, torch.full((4,), 3.0)), f"the refused {what} wrote nothing")
    raises(dist.DistBackendError, lambda: dist.barrier(group=g), "barrier on a group shut down")
    dist.destroy_process_group(g)
    x = torch.ones(2)
    dist.all_reduce(x)
    same(x, torch.full((2,), float(WORLD)), "the default group after another was shut down")


TESTS = [test_allreduce, test_broadcast_reduce, test_allgather_family, test_reduce_scatter_family,
         test_alltoall_gather_scatter, test_point_to_point, test_works, test_ddp, test_groups, test_errors]


def main():
    global RANK, WORLD, GLOO, NATIVE
    dist.init_process_group("jitccl", timeout=timedelta(seconds=60))
    RANK, WORLD = dist.get_rank(), dist.get_world_size()
    check(dist.get_backend() == "jitccl", "the default group is jitccl's")
    # JITCCL_TORCH_NATIVE (set by the test): 1, the C++ backend; 0, the Python group alone.
    NATIVE = os.environ.get("JITCCL_TORCH_NATIVE") == "1"
    kind = type(backend_of(dist.group.WORLD)).__name__
    check(kind == ("NativeBackend" if NATIVE else "ProcessGroupJitccl"), f"the group's backend is a {kind}")
    if RANK == 0:
        print(f"rank 0: backend {jitccl.torch.implementation()}", flush=True)
    check(RANK == int(os.environ["RANK"]) and WORLD == int(os.environ["WORLD_SIZE"]), "rank and size")
    GLOO = dist.new_group(backend="gloo")
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
    RANK = int(os.environ.get("RANK", "0"))
    run(main)
