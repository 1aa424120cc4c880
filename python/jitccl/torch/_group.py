"""The process group: one jitccl communicator, every c10d collective on CPU tensors."""

import os
import weakref
from datetime import timedelta
from typing import Callable, Optional

import torch
import torch.distributed as dist

from .. import errors
from ..comm import Comm, UniqueId, group as nccl_group
from ._agree import _Mismatch, _desc, _describe
from ._checks import _Checks
from ._held import _HELD, _HELD_LOCK, _Held, _HeldWork, _done_work, _flush
from ._steps import _all, _destroy, _env, _fresh_unique_id, _offsets, _scatter_into, _then
from ._tensors import Finish, _Reject, _Staged, _buf, _check_tensor, _op_of, _reduction

BACKEND = "jitccl"


# ---- The process group -------------------------------------------------------------------------


class ProcessGroupJitccl(_Checks, dist.ProcessGroup):
    """One process group on one jitccl communicator. Made by PyTorch through the registered
    creator (init_process_group("jitccl"), new_group(backend="jitccl")), or directly from a
    store: ProcessGroupJitccl(store, rank, size, timeout, name)."""

    def __init__(self, store, rank: int, size: int, timeout: Optional[timedelta] = None, name: str = "default"):
        super().__init__(rank, size)
        self._name = self._group_name = name
        self._group_desc = "undefined"
        self._coalescing = False
        timeout = timeout if timeout is not None else timedelta(minutes=30)
        seconds = min(max(timeout.total_seconds(), 0.001), 1e9)
        key = f"jitccl/unique_id/{name}"
        timeouts = _env(JITCCL_TIMEOUT=f"{seconds:.3f}",
                        JITCCL_BOOTSTRAP_TIMEOUT=os.environ.get("JITCCL_BOOTSTRAP_TIMEOUT") or f"{seconds:.3f}")
        try:
            if rank == 0:
                with timeouts:
                    store.set(key, bytes(_fresh_unique_id()))
            uid = store.get(key)
        except Exception as e:
            raise dist.DistBackendError(
                f"jitccl backend: rank {rank} of group {name!r} could not exchange the unique id through "
                f"the store: {e}") from e
        try:
            with timeouts:
                self._comm = Comm(size, UniqueId(uid), rank, name=name)
        except errors.Error as e:
            raise dist.DistBackendError(
                f"jitccl backend: making the communicator of group {name!r} failed on rank {rank} of {size}: "
                f"{e}") from e
        self._timeout = timeout
        # Frees the communicator when the group goes (destroy_process_group) or at exit.
        self._finalizer = weakref.finalize(self, _destroy, self._comm)

    # ---- What it is ------------------------------------------------------------------------

    def getBackendName(self) -> str:
        return BACKEND

    # torch 2.6's ProcessGroup keeps its name and description in its C++ backends, which a
    # Python group has none of: they live here (destroy_process_group reads the name).
    def _set_group_name(self, name: str) -> None:
        self._group_name = name

    @property
    def group_name(self) -> str:
        return self._group_name

    def _set_group_desc(self, desc: str) -> None:
        self._group_desc = desc

    @property
    def group_desc(self) -> str:
        return self._group_desc

    def __repr__(self) -> str:
        return f"ProcessGroupJitccl(group {self._name!r}, rank {self.rank()} of {self.size()})"

    def shutdown(self) -> None:
        """Frees the communicator now (later calls on the group raise); destroy_process_group
        frees it when the group object goes."""
        _flush()
        self._finalizer()

    def abort(self) -> None:
        """Ends the communicator at once, from any thread: calls waiting in it fail."""
        self._comm.abort()
        self._finalizer.detach()

    # ---- Running operations ----------------------------------------------------------------

    def _error(self, op: str, e: BaseException) -> BaseException:
        return dist.DistBackendError(
            f"jitccl backend: {op} failed on rank {self.rank()} of {self.size()} in group {self._name!r}: "
            f"{type(e).__name__.lstrip('_')}: {e}")

    def _run(self, op: str, result: list, desc: list, post: Callable[[], Finish], extra=None):
        """Runs a collective now (after the held sends and receives): the ranks agree on
        `desc` (and on `extra`, given the all-gathered extras, when it is a function), then
        `post` posts its calls and returns its finishing step. Complete on return."""
        _flush()
        # Copies in and out of tensors that require grad are not for autograd to see.
        with torch.no_grad():
            try:
                self._agree(op, desc, extra)
                finish = post()
            except _Reject as e:
                raise e.kind(f"jitccl backend: {op} on rank {self.rank()} of group {self._name!r}: {e}") from None
            except (errors.Error, _Mismatch) as e:
                raise self._error(op, e) from e
            if finish is not None:
                try:
                    finish()
                except Exception as e:  # a copy back or a local fold: not expected to fail
                    raise self._error(op, e) from e
        return _done_work(result)

    def _agree(self, op: str, desc: list, extra=None) -> None:
        """Raises _Mismatch on every rank when the ranks' descriptors differ. `extra`:
        (list of ints of the same length on every rank, check(all of them as a tensor)),
        compared only once the descriptors agree."""
        n = self.size()
        mine = torch.tensor(desc, dtype=torch.int64)
        every = torch.empty((n, mine.numel()), dtype=torch.int64)
        self._comm.all_gather(_buf(mine), _buf(every))
        if not bool((every == every[0]).all()):
            kinds: dict = {}
            for q, d in enumerate(every.tolist()):
                kinds.setdefault(_describe(d), []).append(q)
            raise _Mismatch("the ranks called it differently: " + "; ".join(
                f"rank{'s' if len(qs) > 1 else ''} {', '.join(map(str, qs))}: {what}" for what, qs in kinds.items()))
        if extra is not None:
            values, check = extra
            mine = torch.tensor(values, dtype=torch.int64)
            every = torch.empty((n, mine.numel()), dtype=torch.int64)
            self._comm.all_gather(_buf(mine), _buf(every))
            check(every)

    def _hold(self, kind: str, peer: int, t: torch.Tensor):
        staged = _Staged(t, copy_in=kind == "send")
        work = _HeldWork([t])
        with _HELD_LOCK:
            _HELD.append(_Held(self, kind, peer, staged, work))
        return work

    @staticmethod
    def _one(tensors, op: str) -> torch.Tensor:
        if len(tensors) != 1:
            raise ValueError(f"jitccl backend: {op} takes one tensor per rank, got {len(tensors)}")
        return tensors[0]

    def _checked(self, op: str, *tensors) -> None:
        try:
            for i, t in enumerate(tensors):
                _check_tensor(t, f"tensor {i}")
            if tensors and any(t.dtype != tensors[0].dtype for t in tensors):
                raise _Reject(TypeError, f"the tensors' data types differ "
                                         f"({', '.join(sorted({str(t.dtype) for t in tensors}))})")
        except _Reject as e:
            raise e.kind(f"jitccl backend: {op} on rank {self.rank()} of group {self._name!r}: {e}") from None

    def _reduction_checked(self, op: str, reduce_op, dtype) -> None:
        kind, factor = _op_of(reduce_op)
        try:
            _reduction(kind, factor, dtype)
        except _Reject as e:
            raise e.kind(f"jitccl backend: {op} on rank {self.rank()} of group {self._name!r}: {e}") from None

    # ---- Reductions ------------------------------------------------------------------------

    def _post_reduce(self, send: torch.Tensor, reduce_op, root: Optional[int] = None) -> Finish:
        """Posts the all-reduce (root None) or reduce of contiguous `send`, in place; returns
        the finishing step of a bitwise fold."""
        kind, factor = _op_of(reduce_op)
        jop, fold = _reduction(kind, factor, send.dtype)
        if fold is None:
            if root is None:
                self._comm.all_reduce(_buf(send), op=jop)
            else:
                self._comm.reduce(_buf(send), op=jop, root=root)
            return None
        # Bitwise: every rank's values, folded here (exact, size x the memory).
        gathered = torch.empty((self.size(),) + tuple(send.shape), dtype=send.dtype)
        self._comm.all_gather(_buf(send), _buf(gathered))

        def finish():
            if root is None or root == self.rank():
                acc = gathered[0].clone()
                for q in range(1, self.size()):
                    acc = fold(acc, gathered[q])
                send.copy_(acc)
        return finish

    def allreduce(self, tensors, opts=None):
        t = self._one(tensors, "allreduce")
        reduce_op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        self._checked("allreduce", t)
        self._reduction_checked("allreduce", reduce_op, t.dtype)

        def post():
            s = _Staged(t)
            return _then(self._post_reduce(s.c, reduce_op), s.back)
        return self._run("allreduce", [t], _desc("allreduce", t.dtype, [t.numel()], reduce_op=reduce_op), post)

    def allreduce_coalesced(self, tensors, opts=None):
        op = "allreduce_coalesced"
        reduce_op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        self._checked(op, *tensors)
        if tensors:
            self._reduction_checked(op, reduce_op, tensors[0].dtype)
        dtype = tensors[0].dtype if tensors else None

        def post():
            finishes = []
            with nccl_group():
                for t in tensors:
                    s = _Staged(t)
                    finishes.append(_then(self._post_reduce(s.c, reduce_op), s.back))
            return _all(finishes)
        return self._run(op, list(tensors), _desc(op, dtype, [t.numel() for t in tensors], reduce_op=reduce_op), post)

    def reduce(self, tensors, opts=None):
        t = self._one(tensors, "reduce")
        root = opts.rootRank if opts is not None else 0
        reduce_op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        self._checked("reduce", t)
        self._reduction_checked("reduce", reduce_op, t.dtype)
        self._root("reduce", root)

        def post():
            s = _Staged(t)
            return _then(self._post_reduce(s.c, reduce_op, root=root), s.back if self.rank() == root else None)
        return self._run("reduce", [t], _desc("reduce", t.dtype, [t.numel()], root, reduce_op), post)

    def _post_reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, reduce_op) -> Finish:
        """Posts a reduce-scatter of contiguous `inp` (size blocks) into contiguous `out`."""
        kind, factor = _op_of(reduce_op)
        jop, fold = _reduction(kind, factor, inp.dtype)
        if fold is None:
            self._comm.reduce_scatter(_buf(inp), _buf(out), op=jop)
            return None
        whole = inp.clone()
        finish = self._post_reduce(whole, reduce_op)
        n = out.numel()

        def block():
            finish()
            out.reshape(-1).copy_(whole.reshape(-1)[self.rank() * n:(self.rank() + 1) * n])
        return block

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        op = "reduce_scatter"
        out = self._one(output_tensors, op)
        inputs = self._one(input_tensors, op)
        reduce_op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        self._checked(op, out, *inputs)
        self._reduction_checked(op, reduce_op, out.dtype)
        self._blocks(op, "input list", len(inputs))
        for x in inputs:
            self._sized(op, "input", x.numel(), out.numel())

        def post():
            whole = torch.cat([x.reshape(-1) for x in inputs])
            s = _Staged(out, copy_in=False)
            return _then(self._post_reduce_scatter(s.c, whole, reduce_op), s.back)
        return self._run(op, [out], _desc(op, out.dtype, [out.numel()], reduce_op=reduce_op), post)

    def _reduce_scatter_base(self, output, input, opts=None):
        return self._reduce_scatter_tensors("reduce_scatter_tensor", [output], [input], opts)

    def reduce_scatter_tensor_coalesced(self, output_tensors, input_tensors, opts=None):
        return self._reduce_scatter_tensors("reduce_scatter_tensor_coalesced", output_tensors, input_tensors, opts)

    def _reduce_scatter_tensors(self, op, outputs, inputs, opts):
        reduce_op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        self._checked(op, *outputs, *inputs)
        if len(outputs) != len(inputs):
            raise ValueError(f"jitccl backend: {op}: {len(outputs)} outputs, {len(inputs)} inputs")
        if outputs:
            self._reduction_checked(op, reduce_op, outputs[0].dtype)
        for o, i in zip(outputs, inputs):
            self._sized(op, "input", i.numel(), o.numel() * self.size())
        dtype = outputs[0].dtype if outputs else None

        def post():
            finishes = []
            with nccl_group():
                for o, i in zip(outputs, inputs):
                    so, si = _Staged(o, copy_in=False), _Staged(i)
                    finishes.append(_then(self._post_reduce_scatter(so.c, si.c, reduce_op), so.back))
            return _all(finishes)
        return self._run(op, list(outputs), _desc(op, dtype, [o.numel() for o in outputs], reduce_op=reduce_op), post)

    # ---- Data movement ---------------------------------------------------------------------

    def broadcast(self, tensors, opts=None):
        t = self._one(tensors, "broadcast")
        root = opts.rootRank if opts is not None else 0
        self._checked("broadcast", t)
        self._root("broadcast", root)

        def post():
            s = _Staged(t, copy_in=self.rank() == root)
            self._comm.broadcast(_buf(s.c), root=root)
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
                    whole = torch.empty(self.size() * x.numel(), dtype=x.dtype)
                    self._comm.all_gather(_buf(x.contiguous()), _buf(whole))
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
                    self._comm.all_gather(_buf(i.contiguous()), _buf(so.c))
                    finishes.append(so.back)
            return _all(finishes)
        return self._run(op, list(outputs), _desc(op, dtype, [i.numel() for i in inputs]), post)

    def gather(self, output_tensors, input_tensors, opts=None):
        x = self._one(input_tensors, "gather")
        root = opts.rootRank if opts is not None else 0
        self._root("gather", root)
        outs = []
        if self.rank() == root:
            outs = self._one(output_tensors, "gather")
            self._blocks("gather", "output list", len(outs))
            for o in outs:
                self._sized("gather", "output", o.numel(), x.numel())
        elif any(len(o) for o in output_tensors):
            self._reject("gather", f"only the root ({root}) has outputs")
        self._checked("gather", x, *outs)

        def post():
            if self.rank() != root:
                self._comm.gather(_buf(x.contiguous()), None, root=root)
                return None
            whole = torch.empty(self.size() * x.numel(), dtype=x.dtype)
            self._comm.gather(_buf(x.contiguous()), _buf(whole), root=root)
            return _scatter_into(whole, outs)
        return self._run("gather", list(output_tensors), _desc("gather", x.dtype, [x.numel()], root), post)

    def scatter(self, output_tensors, input_tensors, opts=None):
        out = self._one(output_tensors, "scatter")
        root = opts.rootRank if opts is not None else 0
        self._root("scatter", root)
        ins = []
        if self.rank() == root:
            ins = self._one(input_tensors, "scatter")
            self._blocks("scatter", "input list", len(ins))
            for i in ins:
                self._sized("scatter", "input", i.numel(), out.numel())
        elif any(len(i) for i in input_tensors):
            self._reject("scatter", f"only the root ({root}) has inputs")
        self._checked("scatter", out, *ins)

        def post():
            s = _Staged(out, copy_in=False)
            whole = torch.cat([i.reshape(-1) for i in ins]) if ins else None
            self._comm.scatter(None if whole is None else _buf(whole), _buf(s.c), root=root)
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
            if len(set(in_counts)) == 1 and in_counts == out_counts:
                self._comm.all_to_all(_buf(si.c), _buf(so.c))
                return so.back
            o, i = so.c.reshape(-1), si.c.reshape(-1)
            oo, io = _offsets(out_counts), _offsets(in_counts)
            with nccl_group():
                for q in range(n):
                    if q == rank:
                        continue
                    if in_counts[q]:
                        self._comm.send(_buf(i[io[q]:io[q] + in_counts[q]]), q)
                    if out_counts[q]:
                        self._comm.recv(_buf(o[oo[q]:oo[q] + out_counts[q]]), q)
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
            with nccl_group():
                for q in range(n):
                    if q == rank:
                        continue
                    if input_tensors[q].numel():
                        self._comm.send(_buf(input_tensors[q].contiguous()), q)
                    if output_tensors[q].numel():
                        self._comm.recv(_buf(staged[q].c), q)
            staged[rank].c.copy_(input_tensors[rank].reshape(staged[rank].c.shape))
            return _all([s.back for s in staged])
        counts = [t.numel() for t in input_tensors] + [t.numel() for t in output_tensors]
        desc = _desc(op, output_tensors[0].dtype, [])
        return self._run(op, list(output_tensors), desc, post, extra=(counts, self._pairs_check(op)))

    def barrier(self, opts=None):
        return self._run("barrier", [], _desc("barrier", None, []), lambda: None)

    # ---- Point to point --------------------------------------------------------------------

    def send(self, tensors, dst: int, tag: int = 0):
        t = self._one(tensors, "send")
        self._checked("send", t)
        self._peer("send", dst)
        return self._hold("send", dst, t)

    def recv(self, tensors, src: int, tag: int = 0):
        t = self._one(tensors, "recv")
        self._checked("recv", t)
        self._peer("recv", src)
        return self._hold("recv", src, t)

    def recv_anysource(self, tensors, tag: int = 0):
        raise ValueError("jitccl backend: recv from any source is not supported (NCCL has none): name the source")

    # ---- Coalescing blocks (_coalescing_manager with a device) --------------------------------

    def _start_coalescing(self, device=None):
        """Collectives in the block run as they are called; sends and receives are held
        until its end (or a wait), as always."""
        self._coalescing = True

    def _end_coalescing(self, device=None):
        self._coalescing = False
        _flush()
        return _done_work([])
