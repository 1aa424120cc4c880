"""The collectives of the process group, on contiguous copies where tensors are not."""

import ctypes
from typing import Optional

import torch
import torch.distributed as dist

from ..comm import group as nccl_group, wire as parse_wire
from ._agree import _Mismatch, _desc
from ._steps import _all, _offsets, _scatter_into, _then
from ._tensors import Finish, _Staged, _buf


# The largest all-reduce run through the group's scratch in the host arena rather than on
# the tensor's own memory (which runs the FIFO algorithms): up to 64 KiB the copies cost less
# than they save (measured beside Gloo: docs/performance.md, "PyTorch beside Gloo", and its
# history).
SMALL = 64 << 10


class _Collectives:
    """Every c10d collective, on the group's `_run` (agreement, posting, finishing),
    `_comm_for` (the communicator of a tensor's device), `_reduction` and its checks."""

    # ---- Reductions ------------------------------------------------------------------------

    def _post_reduce(self, send: torch.Tensor, red, root: Optional[int] = None) -> Finish:
        """Posts the all-reduce (root None) or reduce of contiguous `send` by `red` (the
        group's `_reduction`), in place; returns the finishing step of a bitwise fold."""
        jop, fold, _ = red
        comm = self._comm_for(send)
        if fold is None:
            if root is None:
                comm.all_reduce(_buf(send), op=jop)
            else:
                comm.reduce(_buf(send), op=jop, root=root)
            return None
        # Bitwise: every rank's values, folded here (exact, size x the memory).
        gathered = torch.empty((self.size(),) + tuple(send.shape), dtype=send.dtype, device=send.device)
        comm.all_gather(_buf(send), _buf(gathered))

        def finish():
            if root is None or root == self.rank():
                acc = gathered[0].clone()
                for q in range(1, self.size()):
                    acc = fold(acc, gathered[q])
                send.copy_(acc)
        return finish

    def _post_reduce_small(self, t: torch.Tensor, red) -> Finish:
        """An all-reduce of small contiguous CPU `t` through the group's scratch in the host
        arena: copied in, reduced there (the peers read it in place), copied back by the
        finishing step; the scratch is the call's until its Work ends. The flag is read
        (`allreduce`) and set here in two steps, not exchanged as the C++ backend does: both
        run inside the call's job, and one group's calls come from one thread at a time
        (every rank makes them in one order, which the ranks' agreement checks)."""
        b, scratch = _buf(t), self._scratch
        nbytes = t.numel() * t.element_size()
        self._scratch_busy.value = 1
        self._holds_scratch = True
        ctypes.memmove(scratch.address, b.ptr, nbytes)
        self._comm.all_reduce(scratch.buf(b.count, b.dtype), op=red[0])
        return lambda: ctypes.memmove(b.ptr, scratch.address, nbytes)

    def allreduce(self, tensors, opts=None):
        t = self._one(tensors, "allreduce")
        self._checked("allreduce", t)
        red = self._reduction("allreduce", opts, t.dtype)

        def post():
            if t.is_contiguous():
                if (red[1] is None and not t.is_cuda and t.numel() * t.element_size() <= SMALL
                        and not self._scratch_busy.value):
                    return self._post_reduce_small(t, red)
                return self._post_reduce(t, red)
            s = _Staged(t)
            return _then(self._post_reduce(s.c, red), s.back)
        return self._run("allreduce", [t], _desc("allreduce", t.dtype, (t.numel(),), redop=red[2]), post)

    def _wired_allreduce(self, t: torch.Tensor, wire: str, op=dist.ReduceOp.AVG):
        """all_reduce of `t` by `op` (sum or avg) with its elements carried in the wire
        format named `wire` (jitcclWiredAllReduce: fp32 accumulation, the same bits on every
        rank); the ranks agree on the wire too. What jitccl.torch.hooks sends through."""
        self._checked("allreduce", t)
        opts = dist.AllreduceOptions()
        opts.reduceOp = op
        red = self._reduction("allreduce", opts, t.dtype)
        w = parse_wire(wire)

        def post():
            s = _Staged(t)
            self._comm_for(s.c).all_reduce(_buf(s.c), op=red[0], wire=wire)
            return s.back
        return self._run("allreduce", [t], _desc("allreduce", t.dtype, (t.numel(),), redop=red[2], wire=w),
                         post)

    def allreduce_coalesced(self, tensors, opts=None):
        op = "allreduce_coalesced"
        self._checked(op, *tensors)
        dtype = tensors[0].dtype if tensors else None
        red = self._reduction(op, opts, dtype)

        def post():
            finishes = []
            with nccl_group():
                for t in tensors:
                    s = _Staged(t)
                    finishes.append(_then(self._post_reduce(s.c, red), s.back))
            return _all(finishes)
        return self._run(op, list(tensors), _desc(op, dtype, [t.numel() for t in tensors], redop=red[2]), post)

    def reduce(self, tensors, opts=None):
        t = self._one(tensors, "reduce")
        root = opts.rootRank if opts is not None else 0
        self._checked("reduce", t)
        red = self._reduction("reduce", opts, t.dtype)
        self._root("reduce", root)

        def post():
            s = _Staged(t)
            return _then(self._post_reduce(s.c, red, root=root), s.back if self.rank() == root else None)
        return self._run("reduce", [t], _desc("reduce", t.dtype, [t.numel()], root, red[2]), post)

    def _post_reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, red) -> Finish:
        """Posts a reduce-scatter of contiguous `inp` (size blocks) into contiguous `out`."""
        jop, fold, _ = red
        if fold is None:
            self._comm_for(inp).reduce_scatter(_buf(inp), _buf(out), op=jop)
            return None
        whole = inp.clone()
        finish = self._post_reduce(whole, red)
        n = out.numel()

        def block():
            finish()
            out.reshape(-1).copy_(whole.reshape(-1)[self.rank() * n:(self.rank() + 1) * n])
        return block

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        op = "reduce_scatter"
        out = self._one(output_tensors, op)
        inputs = self._one(input_tensors, op)
        self._checked(op, out, *inputs)
        red = self._reduction(op, opts, out.dtype)
        self._blocks(op, "input list", len(inputs))
        for x in inputs:
            self._sized(op, "input", x.numel(), out.numel())

        def post():
            whole = torch.cat([x.reshape(-1) for x in inputs])
            s = _Staged(out, copy_in=False)
            return _then(self._post_reduce_scatter(s.c, whole, red), s.back)
        return self._run(op, [out], _desc(op, out.dtype, [out.numel()], redop=red[2]), post)

    def _reduce_scatter_base(self, output, input, opts=None):
        return self._reduce_scatter_tensors("reduce_scatter_tensor", [output], [input], opts)

    def reduce_scatter_tensor_coalesced(self, output_tensors, input_tensors, opts=None):
        return self._reduce_scatter_tensors("reduce_scatter_tensor_coalesced", output_tensors, input_tensors, opts)

    def _reduce_scatter_tensors(self, op, outputs, inputs, opts):
        self._checked(op, *outputs, *inputs)
        if len(outputs) != len(inputs):
            raise ValueError(f"jitccl backend: {op}: {len(outputs)} outputs, {len(inputs)} inputs")
        dtype = outputs[0].dtype if outputs else None
        red = self._reduction(op, opts, dtype)
        for o, i in zip(outputs, inputs):
            self._sized(op, "input", i.numel(), o.numel() * self.size())

        def post():
            finishes = []
            with nccl_group():
                for o, i in zip(outputs, inputs):
                    so, si = _Staged(o, copy_in=False), _Staged(i)
                    finishes.append(_then(self._post_reduce_scatter(so.c, si.c, red), so.back))
            return _all(finishes)
        return self._run(op, list(outputs), _desc(op, dtype, [o.numel() for o in outputs], redop=red[2]), post)

    # ---- Data movement ---------------------------------------------------------------------

    def broadcast(self, tensors, opts=None):
        t = self._one(tensors, "broadcast")
        root = opts.rootRank if opts is not None else 0
        self._checked("broadcast", t)
        self._root("broadcast", root)

        def post():
            s = _Staged(t, copy_in=self.rank() == root)
            self._comm_for(s.c).broadcast(_buf(s.c), root=root)
            return s.back
        return self._run("broadcast", [t], _desc("broadcast", t.dtype, [t.numel()], root), post)

    def allgather(self, output_tensors, input_tensors, opts=None):
        return self._allgather_lists("allgather", output_tensors, input_tensors)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        return self._allgather_lists("allgather_coalesced", output_lists, input_list)

    def _allgather_lists(self, op, output_lists, input_list):
        if len(output_lists) != len(input_list):
            raise ValueError(f"jitccl backend: {op}: {len(output_lists)} output lists, {len(input_list)} inputs")
        self._checked(op, *input_list, *[o for outs in output_lists for o in outs])
        for outs, x in zip(output_lists, input_list):
            self._blocks(op, "output list", len(outs))
            for o in outs:
                self._sized(op, "output", o.numel(), x.numel())
        dtype = input_list[0].dtype if input_list else None

        def post():
            finishes = []
            with nccl_group():
                for outs, x in zip(output_lists, input_list):
                    whole = torch.empty(self.size() * x.numel(), dtype=x.dtype, device=x.device)
                    self._comm_for(x).all_gather(_buf(x.contiguous()), _buf(whole))
                    finishes.append(_scatter_into(whole, outs))
            return _all(finishes)
        return self._run(op, list(output_lists), _desc(op, dtype, [x.numel() for x in input_list]), post)

    def _allgather_base(self, output, input, opts=None):
        return self._allgather_tensors("all_gather_into_tensor", [output], [input])

    def allgather_into_tensor_coalesced(self, output_tensors, input_tensors, opts=None):
        return self._allgather_tensors("allgather_into_tensor_coalesced", output_tensors, input_tensors)

    def _allgather_tensors(self, op, outputs, inputs):
        self._checked(op, *outputs, *inputs)
        if len(outputs) != len(inputs):
            raise ValueError(f"jitccl backend: {op}: {len(outputs)} outputs, {len(inputs)} inputs")
        for o, i in zip(outputs, inputs):
            self._sized(op, "output", o.numel(), i.numel() * self.size())
        dtype = inputs[0].dtype if inputs else None

        def post():
            finishes = []
            with nccl_group():
                for o, i in zip(outputs, inputs):
                    so = _Staged(o, copy_in=False)
                    self._comm_for(i).all_gather(_buf(i.contiguous()), _buf(so.c))
                    finishes.append(so.back)
            return _all(finishes)
        return self._run(op, list(outputs), _desc(op, dtype, [i.numel() for i in inputs]), post)

    def gather(self, output_tensors, input_tensors, opts=None):
        x = self._one(input_tensors, "gather")
        root = opts.rootRank if opts is not None else 0
        outs = self._root_blocks("gather", root, output_tensors, "output", x.numel())
        self._checked("gather", x, *outs)

        def post():
            comm = self._comm_for(x)
            if self.rank() != root:
                comm.gather(_buf(x.contiguous()), None, root=root)
                return None
            whole = torch.empty(self.size() * x.numel(), dtype=x.dtype, device=x.device)
            comm.gather(_buf(x.contiguous()), _buf(whole), root=root)
            return _scatter_into(whole, outs)
        return self._run("gather", list(output_tensors), _desc("gather", x.dtype, [x.numel()], root), post)

    def scatter(self, output_tensors, input_tensors, opts=None):
        out = self._one(output_tensors, "scatter")
        root = opts.rootRank if opts is not None else 0
        ins = self._root_blocks("scatter", root, input_tensors, "input", out.numel())
        self._checked("scatter", out, *ins)

        def post():
            s = _Staged(out, copy_in=False)
            whole = torch.cat([i.reshape(-1) for i in ins]) if ins else None
            self._comm_for(s.c).scatter(None if whole is None else _buf(whole), _buf(s.c), root=root)
            return s.back
        return self._run("scatter", [out], _desc("scatter", out.dtype, [out.numel()], root), post)

    def _pairs_check(self, op: str):
        """The check of all-to-all counts: rank r sends what rank q receives from it."""
        n = self.size()

        def check(every: torch.Tensor) -> None:
            sends, recvs = every[:, :n], every[:, n:]
            bad = (sends != recvs.t()).nonzero().tolist()
            if bad:
                r, q = bad[0]
                raise _Mismatch(f"rank {r} sends {int(sends[r, q])} elements to rank {q}, which receives "
                                f"{int(recvs[q, r])} from it" + (f" (and {len(bad) - 1} more such pairs)"
                                                                 if len(bad) > 1 else ""))
        return check

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        op = "all_to_all_single"
        self._checked(op, output, input)
        n, rank = self.size(), self.rank()
        out_counts = self._splits(op, "output", output, list(output_split_sizes))
        in_counts = self._splits(op, "input", input, list(input_split_sizes))
        if out_counts[rank] != in_counts[rank]:
            self._reject(op, f"sends {in_counts[rank]} elements to itself but receives {out_counts[rank]}")

        def post():
            so, si = _Staged(output, copy_in=False), _Staged(input)
            comm = self._comm_for(output)
            if len(set(in_counts)) == 1 and in_counts == out_counts:
                comm.all_to_all(_buf(si.c), _buf(so.c))
                return so.back
            o, i = so.c.reshape(-1), si.c.reshape(-1)
            oo, io = _offsets(out_counts), _offsets(in_counts)
            with nccl_group():
                for q in range(n):
                    if q == rank:
                        continue
                    if in_counts[q]:
                        comm.send(_buf(i[io[q]:io[q] + in_counts[q]]), q)
                    if out_counts[q]:
                        comm.recv(_buf(o[oo[q]:oo[q] + out_counts[q]]), q)
            o[oo[rank]:oo[rank] + out_counts[rank]].copy_(i[io[rank]:io[rank] + in_counts[rank]])
            return so.back
        desc = _desc(op, output.dtype, [])
        return self._run(op, [output], desc, post, extra=(in_counts + out_counts, self._pairs_check(op)))

    def alltoall(self, output_tensors, input_tensors, opts=None):
        op = "all_to_all"
        n, rank = self.size(), self.rank()
        self._blocks(op, "output list", len(output_tensors))
        self._blocks(op, "input list", len(input_tensors))
        self._checked(op, *output_tensors, *input_tensors)
        self._sized(op, "own block", output_tensors[rank].numel(), input_tensors[rank].numel())

        def post():
            staged = [_Staged(o, copy_in=False) for o in output_tensors]
            comm = self._comm_for(output_tensors[0])
            with nccl_group():
                for q in range(n):
                    if q == rank:
                        continue
                    if input_tensors[q].numel():
                        comm.send(_buf(input_tensors[q].contiguous()), q)
                    if output_tensors[q].numel():
                        comm.recv(_buf(staged[q].c), q)
            staged[rank].c.copy_(input_tensors[rank].reshape(staged[rank].c.shape))
            return _all([s.back for s in staged])
        counts = [t.numel() for t in input_tensors] + [t.numel() for t in output_tensors]
        desc = _desc(op, output_tensors[0].dtype, [])
        return self._run(op, list(output_tensors), desc, post, extra=(counts, self._pairs_check(op)))
