"""The "jitccl" group's life beyond single collectives: async Works, DDP's training against
DDP on Gloo, new_group, and calls that must fail (an error on every rank, nothing written)."""

import gc
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import jitccl.torch
import torch_checks as world
from torch_checks import NATIVE, RANK, WORLD, R, backend_of, raises, same, values
from torch_rank import check


def test_works():
    t = torch.ones(8)
    w = dist.all_reduce(t, async_op=True)
    # NCCL's semantics: complete once the call is done, which wait() waits for.
    check(w.wait() is True and w.is_completed() and w.is_success(), "wait() is True, then the Work is complete")
    fut = w.get_future()
    check(fut.done(), "its future is done")
    same(fut.value()[0], torch.full((8,), float(WORLD)), "the future's value is the result")
    chained = fut.then(lambda f: f.value()[0] * 2)
    same(chained.wait(), torch.full((8,), 2.0 * WORLD), "a callback chained on the future")
    for work in (dist.broadcast(t, 0, async_op=True), dist.barrier(async_op=True),
                 dist.all_gather_into_tensor(torch.zeros(8 * WORLD), t, async_op=True)):
        check(work.wait() and work.is_completed(), "async Work of broadcast, barrier, all_gather")
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
    ref = train(world.GLOO)
    same(mine[0], ref[0], "DDP parameters, jitccl vs Gloo", exact=False, rtol=1e-5, atol=1e-6)
    same(mine[1], ref[1], "DDP buffers, jitccl vs Gloo", exact=False, rtol=1e-5, atol=1e-6)
    flat = torch.cat([p.reshape(-1).to(torch.float64) for p in mine[0]])
    every = [torch.zeros_like(flat) for _ in range(WORLD)]
    dist.all_gather(every, flat, group=world.GLOO)
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
    # A rank that never comes: the wait ends with the group's timeout (5 s), as an error
    # (in the ranks' agreement, which comes before the call's work).
    if WORLD > 1:
        start = time.time()
        if RANK == 0:
            e = raises(dist.DistBackendError, lambda: dist.all_reduce(torch.ones(3), group=g),
                       "an all_reduce that other ranks never join", ("Timeout", "rank 0"))
            took = time.time() - start
            check(4 <= took < 30, f"it ended after the group's timeout: {took:.1f} s")
        dist.barrier(group=world.GLOO)
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

