"""One rank of PyTorch on GPU 0 (tools/gpu-check.sh, stage `torch`), two or more processes,
through one of two backends (TORCH_BACKEND):

- "nccl" (the default): PyTorch's backend "nccl" served by jitccl's libnccl.so.2 (LD_PRELOAD);
- "jitccl": jitccl's own backend (`import jitccl.torch`, python/), as
  init_process_group("cpu:jitccl,cuda:jitccl"): CUDA tensors on its GPU communicator, and a
  CPU tensor on the same group too.

Every c10d collective is checked against a reference each rank computes, and one DDP step
of a small model must leave the same parameters as the same step on gloo (CPU). Rank and
size from the launcher (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)."""

import functools
import os
import sys

import torch
import torch.distributed as dist

rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
backend = os.environ.get("TORCH_BACKEND", "nccl")
torch.cuda.set_device(int(os.environ.get("CUDA_DEVICE", "0")))
if backend == "jitccl":
    import jitccl.torch  # registers "jitccl" (cpu and, with a GPU, cuda)
    dist.init_process_group("cpu:jitccl,cuda:jitccl")
    assert dist.get_backend() == "cpu:jitccl,cuda:jitccl", dist.get_backend()
    if rank == 0:  # the C++ backend (compiled here at the first group), or why not
        print(f"jitccl backend: {jitccl.torch.implementation()}", flush=True)
else:
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
gloo = dist.new_group(backend="gloo")
dev = torch.device("cuda", torch.cuda.current_device())
checks = 0


def expect(got, want, what, tol=0.0):
    global checks
    got, want = got.cpu(), want.cpu()
    ok = torch.equal(got, want) if tol == 0 else torch.allclose(got, want, rtol=tol, atol=tol)
    if not ok:
        sys.exit(f"rank {rank}: {what}: got {got.flatten()[:6]}, expected {want.flatten()[:6]}")
    checks += 1


def inp(r, n=1000, dtype=torch.float32):
    return ((torch.arange(n) + 3 * r) % 7 + 1).to(dtype)


every = torch.stack([inp(r) for r in range(size)])
for op, ref in ((dist.ReduceOp.SUM, every.sum(0)), (dist.ReduceOp.PRODUCT, every.prod(0)),
                (dist.ReduceOp.MAX, every.max(0).values), (dist.ReduceOp.MIN, every.min(0).values),
                (dist.ReduceOp.AVG, every.sum(0) / size)):
    t = inp(rank).to(dev)
    dist.all_reduce(t, op=op)
    expect(t, ref, f"all_reduce {op}", tol=1e-6 if op == dist.ReduceOp.AVG else 0)
for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64, torch.uint8, torch.int8):
    t = inp(rank, dtype=dtype).to(dev)
    dist.all_reduce(t)
    expect(t, torch.stack([inp(r, dtype=dtype) for r in range(size)]).sum(0), f"all_reduce {dtype}")
t = inp(rank).to(dev)
dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0))
expect(t, every.sum(0) * 2, "all_reduce premul_sum")
if backend == "jitccl":
    t = inp(rank).to(dev)[::2]  # a strided view (nccl refuses one): copied, reduced, copied back
    dist.all_reduce(t)
    expect(t, every.sum(0)[::2], "all_reduce of a strided view")
    t = inp(rank)  # a CPU tensor on the same group: its host communicator
    dist.all_reduce(t)
    expect(t, every.sum(0), "all_reduce of a CPU tensor")
    t = inp(rank, dtype=torch.int32).to(dev)
    dist.all_reduce(t, op=dist.ReduceOp.BXOR)  # jitccl has no bitwise ops: gathered and folded
    expect(t, functools.reduce(torch.bitwise_xor, [inp(r, dtype=torch.int32) for r in range(size)]),
           "all_reduce BXOR")

t = inp(rank).to(dev)
dist.broadcast(t, src=size - 1)
expect(t, inp(size - 1), "broadcast")
t = inp(rank).to(dev)
dist.reduce(t, dst=0)
if rank == 0:
    expect(t, every.sum(0), "reduce")
outs = [torch.empty(1000, device=dev) for _ in range(size)]
dist.all_gather(outs, inp(rank).to(dev))
expect(torch.stack(outs), every, "all_gather")
out = torch.empty(1000 * size, device=dev)
dist.all_gather_into_tensor(out, inp(rank).to(dev))
expect(out, every.flatten(), "all_gather_into_tensor")
full = [inp(r * 10 + q) for q in range(size) for r in [rank]]
out = torch.empty(1000, device=dev)
dist.reduce_scatter(out, [x.to(dev) for x in full])
expect(out, sum(inp(r * 10 + rank) for r in range(size)), "reduce_scatter")
out = torch.empty(1000, device=dev)
dist.reduce_scatter_tensor(out, torch.cat(full).to(dev))
expect(out, sum(inp(r * 10 + rank) for r in range(size)), "reduce_scatter_tensor")
# all_to_all_single with uneven splits: rank r sends q + 1 elements to rank q.
send = torch.cat([torch.full((q + 1,), float(rank * 100 + q)) for q in range(size)]).to(dev)
recv = torch.empty((rank + 1) * size, device=dev)
dist.all_to_all_single(recv, send, output_split_sizes=[rank + 1] * size,
                       input_split_sizes=[q + 1 for q in range(size)])
expect(recv, torch.cat([torch.full((rank + 1,), float(r * 100 + rank)) for r in range(size)]),
       "all_to_all_single with splits")
outs = [torch.empty(10, device=dev) for _ in range(size)]
dist.all_to_all(outs, [torch.full((10,), float(rank * 100 + q), device=dev) for q in range(size)])
expect(torch.stack(outs), torch.stack([torch.full((10,), float(r * 100 + rank)) for r in range(size)]), "all_to_all")
gathered = [torch.empty(1000, device=dev) for _ in range(size)] if rank == 0 else None
dist.gather(inp(rank).to(dev), gathered, dst=0)
if rank == 0:
    expect(torch.stack(gathered), every, "gather")
out = torch.empty(1000, device=dev)
dist.scatter(out, [inp(q).to(dev) for q in range(size)] if rank == 0 else None, src=0)
expect(out, inp(rank), "scatter")
nxt, prv = (rank + 1) % size, (rank - 1) % size
out = torch.empty(1000, device=dev)
ops = [dist.P2POp(dist.irecv, out, prv), dist.P2POp(dist.isend, inp(rank).to(dev), nxt)]
for w in dist.batch_isend_irecv(ops):
    w.wait()
expect(out, inp(prv), "batch_isend_irecv")
if rank % 2 == 0 and rank + 1 < size:
    dist.send(inp(rank).to(dev), dst=rank + 1)
elif rank % 2 == 1:
    out = torch.empty(1000, device=dev)
    dist.recv(out, src=prv)
    expect(out, inp(prv), "send/recv")
dist.barrier()
t = inp(rank).to(dev)
w = dist.all_reduce(t, async_op=True)
w.wait()
expect(t, every.sum(0), "async all_reduce, after wait()")

# One DDP step on the GPU (nccl) and the same on the CPU (gloo): equal parameters.
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
cpu_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
cpu_model.load_state_dict(model.state_dict())
gpu = torch.nn.parallel.DistributedDataParallel(model.to(dev), device_ids=[dev.index])
cpu = torch.nn.parallel.DistributedDataParallel(cpu_model, process_group=gloo)
x = torch.randn(8, 16, generator=torch.Generator().manual_seed(rank))
for m, data in ((gpu, x.to(dev)), (cpu, x)):
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m(data).square().sum().backward()
    opt.step()
for a, b in zip(gpu.module.parameters(), cpu.module.parameters()):
    expect(a.detach(), b.detach(), "DDP step beside gloo", tol=1e-5)

print(f"rank {rank}: torch {torch.__version__}, nccl version reported {torch.cuda.nccl.version()}: "
      f"{checks} checks passed", flush=True)
dist.destroy_process_group()
