"""Every collective on the "jitccl" default group against the same collective on Gloo, over
every data type and op, contiguous or not, and sends and receives."""

import torch
import torch.distributed as dist
import torch.nn as nn

import torch_checks as world
from torch_checks import DTYPES, FLOATS, INTS, RANK, WORLD, R, both, noncontig, same, values
from torch_rank import check


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
        dist.all_reduce(ref, group=world.GLOO)
        got = t.clone()
        dist.all_reduce(got, op=R.AVG)
        same(got, ref / WORLD, f"all_reduce {dtype} AVG")
        for factor in (0.5, torch.tensor(2.0)):
            got = t.clone()
            dist.all_reduce(got, op=dist._make_nccl_premul_sum(factor))
            ref = t * factor
            dist.all_reduce(ref, group=world.GLOO)
            same(got, ref.to(dtype), f"all_reduce {dtype} PREMUL_SUM({factor})")
    # Integer AVG, as NCCL's: the sum in the type, divided, rounded toward zero.
    for dtype in (torch.int8, torch.int32, torch.int64):
        t = torch.tensor([-3 - RANK, 3 + RANK, 1, -1, 2 * RANK], dtype=dtype)
        got, ref = t.clone(), t.clone()
        dist.all_reduce(got, op=R.AVG)
        dist.all_reduce(ref, group=world.GLOO)
        same(got, torch.div(ref, WORLD, rounding_mode="trunc"), f"all_reduce {dtype} AVG")
    # Random floats, a larger size: equal within fp32's rounding (the sums' orders differ).
    for n in (1, 1000, 300_000):
        t = torch.randn(n, generator=torch.Generator().manual_seed(RANK))
        a, b = t.clone(), t.clone()
        dist.all_reduce(a)
        dist.all_reduce(b, group=world.GLOO)
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
                    dist.broadcast(b, root, group=world.GLOO)
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
        dist.all_gather(outs_b, x, group=world.GLOO)
        same(outs_a, outs_b, f"all_gather {dtype}")
        a = torch.zeros((WORLD * 2, 3), dtype=dtype)
        b = torch.zeros((WORLD * 2, 3), dtype=dtype)
        dist.all_gather_into_tensor(a, x)
        dist.all_gather_into_tensor(b, x, group=world.GLOO)
        same(a, b, f"all_gather_into_tensor {dtype}")
    # Non-contiguous input and outputs.
    x = noncontig(values(torch.float32, (3, 4), RANK))
    outs_a = [noncontig(torch.zeros(3, 4)) for _ in range(WORLD)]
    outs_b = [torch.zeros(3, 4) for _ in range(WORLD)]
    dist.all_gather(outs_a, x)
    dist.all_gather(outs_b, x, group=world.GLOO)
    same([o.contiguous() for o in outs_a], outs_b, "all_gather non-contiguous")
    a = torch.zeros(4, WORLD * 3).t()
    b = torch.zeros(WORLD * 3, 4)
    dist.all_gather_into_tensor(a, x)
    dist.all_gather_into_tensor(b, x, group=world.GLOO)
    same(a.contiguous(), b, "all_gather_into_tensor into a non-contiguous output")
    # Coalesced (the coalescing manager's fast path: allgather_into_tensor_coalesced).
    xs = [values(torch.float32, (n,), RANK + n) for n in (1, 5, 8)]
    outs = [torch.zeros(WORLD * x.numel()) for x in xs]
    with dist._coalescing_manager():
        for o, x in zip(outs, xs):
            dist.all_gather_into_tensor(o, x)
    for o, x in zip(outs, xs):
        ref = torch.zeros_like(o)
        dist.all_gather_into_tensor(ref, x, group=world.GLOO)
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
    dist.all_reduce(whole, op=op, group=world.GLOO)
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
        dist.all_reduce(r, group=world.GLOO)
    same(ts, refs, "coalesced all_reduce")


def test_alltoall_gather_scatter():
    # Equal blocks, then uneven splits (rank r sends r + q + 1 rows to rank q).
    for dtype in (torch.float32, torch.int8, torch.bfloat16):
        x = values(dtype, (WORLD * 3, 2), 20 + RANK)
        a, b = torch.zeros_like(x), torch.zeros_like(x)
        dist.all_to_all_single(a, x)
        dist.all_to_all_single(b, x, group=world.GLOO)
        same(a, b, f"all_to_all_single {dtype}")
    ins = [RANK + q + 1 for q in range(WORLD)]
    outs = [q + RANK + 1 for q in range(WORLD)]
    x = values(torch.float64, (sum(ins), 3), RANK)
    a, b = torch.zeros(sum(outs), 3, dtype=torch.float64), torch.zeros(sum(outs), 3, dtype=torch.float64)
    dist.all_to_all_single(a, x, outs, ins)
    dist.all_to_all_single(b, x, outs, ins, group=world.GLOO)
    same(a, b, "all_to_all_single uneven")
    zero_in = [0 if q == (RANK + 1) % WORLD else 2 for q in range(WORLD)]
    zero_out = [0 if q == (RANK - 1) % WORLD else 2 for q in range(WORLD)]
    x = values(torch.int32, (sum(zero_in),), RANK)
    a, b = torch.zeros(sum(zero_out), dtype=torch.int32), torch.zeros(sum(zero_out), dtype=torch.int32)
    dist.all_to_all_single(a, x, zero_out, zero_in)
    dist.all_to_all_single(b, x, zero_out, zero_in, group=world.GLOO)
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
        dist.gather(x.contiguous(), gb, dst=root, group=world.GLOO)
        if RANK == root:
            same(ga, gb, f"gather root {root}")
        chunks = [values(torch.int64, (4,), 80 + q) for q in range(WORLD)] if RANK == root else None
        a, b = torch.zeros(4, 2, dtype=torch.int64)[:, 1], torch.zeros(4, dtype=torch.int64)
        dist.scatter(a, chunks, src=root)
        dist.scatter(b, chunks, src=root, group=world.GLOO)
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

