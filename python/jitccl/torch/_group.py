"""The process group: its communicators, how a call runs (the ranks' agreement, posting,
finishing), sends and receives."""

import ctypes
import weakref
from datetime import timedelta
from typing import Callable, Optional

import torch
import torch.distributed as dist

from .. import _settings, errors
from .._lib import lib
from ..comm import Comm, Memory, UniqueId
from ._agree import _Agreement, _Mismatch, _desc
from ._checks import _Checks
from ._collectives import SMALL, _Collectives
from ._cuda import _Cuda, _cuda_device
from ._held import _HELD, _Held, _flush, _hold
from ._steps import _destroy, _env, _fresh_unique_id
from ._tensors import Finish, _Reject, _Staged, _buf, _check_tensor, _resolve
from ._work import _HeldWork, _PgWork, _Runtime, _backend_error, _done_work

BACKEND = "jitccl"


class ProcessGroupJitccl(_Collectives, _Checks, dist.ProcessGroup):
    """One process group on one jitccl communicator on the host (and, where torch sees a
    GPU, one on the current CUDA device for CUDA tensors). Made by PyTorch through the
    registered creator (init_process_group("jitccl"), new_group(backend="jitccl")), or
    directly from a store: ProcessGroupJitccl(store, rank, size, timeout, name)."""

    def __init__(self, store, rank: int, size: int, timeout: Optional[timedelta] = None, name: str = "default"):
        super().__init__(rank, size)
        self._name = self._group_name = name
        self._group_desc = "undefined"
        self._coalescing = False
        timeout = timeout if timeout is not None else timedelta(minutes=30)
        seconds = min(max(timeout.total_seconds(), 0.001), 1e9)
        timeouts = dict(JITCCL_TIMEOUT=f"{seconds:.3f}",
                        JITCCL_BOOTSTRAP_TIMEOUT=_settings.given("JITCCL_BOOTSTRAP_TIMEOUT") or f"{seconds:.3f}")
        # CPU tensors go through a host communicator even where there is a GPU.
        self._comm = self._make_comm(store, f"jitccl/unique_id/{name}", name, dict(timeouts, JITCCL_DEVICE="host"))
        comms = [self._comm]
        self._cuda: Optional[_Cuda] = None
        device = _cuda_device()
        if device is not None:
            with torch.cuda.device(device):
                comm = self._make_comm(store, f"jitccl/unique_id/{name}/cuda", f"{name}/cuda",
                                       dict(timeouts, JITCCL_DEVICE="cuda"))
            self._cuda = _Cuda(comm, device)
            comms.append(comm)
        self._cuda_device = device
        # Every call on the host communicator runs as a job of the library's process group
        # over it (its Works, its watchdog), the C++ backend's too.
        self._runtime = _Runtime(self._comm, seconds)
        with _env(JITCCL_DEVICE="host"):
            self._scratch = Memory(SMALL)
        self._scratch_bytes = SMALL
        # 1 while a call's Work holds the scratch (until it ends): the C++ backend's too.
        self._scratch_busy = ctypes.c_int(0)
        self._where = f"on rank {rank} of {size} in group {name!r}"
        self._agreement = _Agreement()
        # 1 once the communicators are ended: the C++ backend then hands its calls here.
        self._closed = ctypes.c_int(0)
        self._used_cuda = self._holds_scratch = False
        # Whether the C++ backend wraps this group (it keeps the Python Works it is given).
        self._native = False
        self._timeout = timeout
        # Frees the communicators when the group goes (destroy_process_group) or at exit.
        self._finalizer = weakref.finalize(self, _destroy, comms, self._runtime)

    def _make_comm(self, store, key: str, name: str, env: dict) -> Comm:
        """A communicator of the group's ranks: rank 0 sets a fresh unique id under `key`
        in the store, every rank reads it; made with `env` set."""
        rank, size = self.rank(), self.size()
        try:
            if rank == 0:
                store.set(key, bytes(_fresh_unique_id()))
            uid = store.get(key)
        except Exception as e:
            raise dist.DistBackendError(
                f"jitccl backend: rank {rank} of group {self._name!r} could not exchange the unique id through "
                f"the store: {e}") from e
        try:
            with _env(**env):
                return Comm(size, UniqueId(uid), rank, name=name)
        except errors.Error as e:
            raise dist.DistBackendError(
                f"jitccl backend: making the communicator {name!r} failed on rank {rank} of {size}: {e}") from e

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
        """Frees the communicators now (later calls on the group raise); destroy_process_group
        frees them when the group object goes."""
        _flush()
        self._closed.value = 1
        self._finalizer()

    def abort(self) -> None:
        """Ends the communicators at once, from any thread: calls waiting in them fail."""
        self._closed.value = 1
        self._runtime.abort()
        self._runtime.destroy()
        self._comm.abort()
        if self._cuda is not None:
            self._cuda.comm.abort()
        self._finalizer.detach()

    # ---- Running operations ----------------------------------------------------------------

    def _error(self, op: str, e: BaseException) -> BaseException:
        return _backend_error(op, self._where, e)

    def _comm_for(self, t: torch.Tensor) -> Comm:
        """The communicator of `t`'s device (a CUDA one ordered on the current stream)."""
        if not t.is_cuda:
            return self._comm
        self._used_cuda = True
        return self._cuda.comm_on_stream()

    def _run(self, op: str, result: list, desc: tuple, post: Callable[[], Finish], extra=None):
        """Runs a collective now (after the held sends and receives): the ranks agree on
        `desc` (and on `extra`, given the all-gathered extras, when it is a function), then
        `post` posts its calls, as a job of the process group, and returns its finishing
        step, which runs once they are done. On the host its Work is the job's work
        (complete once the call is done, as NCCL's) under the C++ backend, else a done one;
        on a GPU, where the calls are ordered on the current stream, a done one."""
        if _HELD:
            _flush()
        self._used_cuda = self._holds_scratch = False
        agreed = False
        try:
            self._agreement.check(self._comm, desc)
            if extra is not None:
                self._agree_extra(*extra)
            agreed = True
            handle, job = self._runtime.submit(op, post)
            if job.error is not None:
                # Calls the job queued before the one that failed still run, on job.keep and
                # the scratch: its work ends once they have.
                lib.jitcclWorkWait(handle, -1)
                lib.jitcclWorkRelease(handle)
                if self._holds_scratch:
                    self._scratch_busy.value = 0
                raise job.error
            if not self._used_cuda:
                work = _PgWork(self._where, op, handle, result, job, self._scratch_busy if self._holds_scratch else None)
                if self._native:
                    return work
            else:
                lib.jitcclWorkRelease(handle)
                if job.finish is not None:
                    # Copies back into tensors that require grad are not for autograd to see.
                    with torch.no_grad():
                        job.finish()
        except _Reject as e:
            raise e.kind(f"jitccl backend: {op} on rank {self.rank()} of group {self._name!r}: {e}") from None
        except _Mismatch as e:
            raise self._error(op, e) from e
        except errors.Error as e:  # the agreement's all-gather is where a dead peer shows first
            raise self._error(op if agreed else f"{op} (checking that the ranks agree on it)", e) from e
        except RuntimeError as e:  # a copy back or a local fold: not expected to fail
            raise self._error(op, e) from e
        if self._used_cuda:
            return _done_work(result, self._cuda_device)
        # The Python group alone: torch keeps no Python Work of a Python backend alive, so a
        # wait from C++ (DDP, functional collectives) would reach a bare c10d Work: the call
        # completes here, and its Work is a done one.
        work.wait()
        return _done_work(result)

    def _native_refusal(self, op: str, refusal: str) -> str:
        """The C++ backend's error text for a call the ranks made differently (`refusal`:
        jitcclAgree's)."""
        return str(self._error(op, _Mismatch(refusal)))

    def _native_failure(self, op: str, code: int) -> str:
        """The C++ backend's error text for a call whose C API call returned `code`."""
        return str(self._error(op, errors.error(code, self._comm._h)))

    def _native_work_failure(self, op: str, code: int, text: str) -> str:
        """The C++ backend's error text for a call whose work failed with `code` and `text`,
        as a Python call's Work gives it."""
        return str(_backend_error(op, self._where, errors.error_of(code, text)))

    def _agree_extra(self, values: list, check) -> None:
        """Once the descriptors agree: all-gathers `values` (ints, as many on every rank)
        and gives them to `check`, which raises _Mismatch where they do not fit."""
        mine = torch.tensor(values, dtype=torch.int64)
        every = torch.empty((self.size(), mine.numel()), dtype=torch.int64)
        self._comm.all_gather(_buf(mine), _buf(every))
        check(every)

    def _hold(self, kind: str, peer: int, t: torch.Tensor):
        staged = _Staged(t, copy_in=kind == "send")
        work = _HeldWork([t])
        _hold(_Held(self, kind, peer, staged, work))
        return work

    @staticmethod
    def _one(tensors, op: str) -> torch.Tensor:
        if len(tensors) != 1:
            raise ValueError(f"jitccl backend: {op} takes one tensor per rank, got {len(tensors)}")
        return tensors[0]

    def _checked(self, op: str, *tensors) -> None:
        try:
            for i, t in enumerate(tensors):
                _check_tensor(t, f"tensor {i}", self._cuda_device)
            if len(tensors) > 1:
                if any(t.dtype != tensors[0].dtype for t in tensors):
                    raise _Reject(TypeError, f"the tensors' data types differ "
                                             f"({', '.join(sorted({str(t.dtype) for t in tensors}))})")
                if any(t.device != tensors[0].device for t in tensors):
                    raise _Reject(ValueError, f"the tensors are on different devices "
                                              f"({', '.join(sorted({str(t.device) for t in tensors}))})")
        except _Reject as e:
            raise e.kind(f"jitccl backend: {op} on rank {self.rank()} of group {self._name!r}: {e}") from None

    def _reduction(self, op: str, opts, dtype):
        """The reduction of a call's options on `dtype` (`_resolve`'s answer); the error of
        an op the type lacks."""
        try:
            return _resolve(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, dtype)
        except _Reject as e:
            raise e.kind(f"jitccl backend: {op} on rank {self.rank()} of group {self._name!r}: {e}") from None

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
        """The block's Work: an empty job of the process group, which ends once every call
        queued before it (the block's) has."""
        self._coalescing = False
        _flush()
        handle, job = self._runtime.submit("coalesced", lambda: None)
        work = _PgWork(self._where, "coalesced", handle, [], job)
        if self._native:
            return work
        work.wait()
        return _done_work([])
