"""The Works the process group returns: those of its calls, run as jobs of the library's
process group; done ones (CUDA calls, coalescing blocks); those of held sends and receives."""

import ctypes
import threading
from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as dist
from torch._C import Future as _Future
from torch._C._distributed_c10d import _create_work_from_future

from .. import errors
from .._lib import JOB, lib
from ..comm import keeping
from ._held import _flush


def _done_work(result: list, cuda_device=None):
    """The Work of a call made when it returned, as Gloo's once done: a C++ Work over a set
    future (torch's C future itself, a microsecond less than its Python wrapper), which
    C++ callers such as the functional collectives can wait on. For CUDA tensors the future
    knows their device: waiting on it orders the current stream after the call's, as
    NCCL's Work does."""
    fut = _Future([] if cuda_device is None else [torch.device("cuda", cuda_device)])
    fut.set_result(result)
    return _create_work_from_future(fut)


class _HeldWork(dist.Work):
    """The Work of a held send or receive: waiting on it (or asking whether it is done, or
    for its future) runs the held operations."""

    _asks_python = True  # the C++ backend asks this object, not torch's trampoline

    def __init__(self, result: list):
        super().__init__()
        self._result = result
        self._done = False
        self._failure: Optional[BaseException] = None
        self._fut = torch.futures.Future()

    def _complete(self) -> None:
        self._done = True
        self._fut.set_result(self._result)

    def _fail(self, e: BaseException) -> None:
        self._done, self._failure = True, e
        self._fut.set_exception(e)

    def _run(self) -> None:
        if not self._done:
            _flush()

    def wait(self, timeout: Optional[timedelta] = None) -> bool:
        self._run()
        if self._failure is not None:
            raise self._failure
        return True

    def is_completed(self) -> bool:
        self._run()
        return True

    def is_success(self) -> bool:
        self._run()
        return self._failure is None

    def exception(self):
        self._run()
        return self._failure

    def get_future(self):
        self._run()
        return self._fut

    def result(self) -> list:
        self.wait()
        return self._result


# ---- Calls as jobs of the library's process group ----------------------------------------------


def _backend_error(op: str, where: str, e: BaseException) -> BaseException:
    """The DistBackendError of call `op` of a group (`where`: "on rank R of N in group ...")
    that failed with `e`."""
    return dist.DistBackendError(f"jitccl backend: {op} failed {where}: {type(e).__name__.lstrip('_')}: {e}")


# The job the calling thread submits now (jitcclProcessGroupSubmit runs it on this thread).
_CURRENT = threading.local()
_INTERNAL_ERROR = 3


class _Job:
    """A call's posting step, run as a job: its finishing step, or the exception it raised,
    and the buffers its calls use (held until its work ends: they are queued, not done,
    when they return)."""

    __slots__ = ("post", "finish", "error", "keep")

    def __init__(self, post):
        self.post, self.finish, self.error, self.keep = post, None, None, []


@JOB
def _run_job(_arg) -> int:
    job = _CURRENT.job
    try:
        with keeping(job.keep):
            job.finish = job.post()
        return errors.SUCCESS
    except BaseException as e:  # noqa: BLE001 - raised again by the submitting caller
        job.error = e
        return e.code if isinstance(e, errors.Error) else _INTERNAL_ERROR


class _Runtime:
    """The group's process group in the library (jitccl.h: the runtime's c10d-style group
    over the host communicator): each call is a job of it, queued on the calling thread, and
    its Work is the group's work; its watchdog fails a call past the group's timeout and
    aborts the communicator."""

    def __init__(self, comm, timeout_s: float):
        h = ctypes.c_void_p()
        errors.check(lib.jitcclProcessGroupCreate(comm._handle(), timeout_s, ctypes.byref(h)), comm._h)
        self.handle = h.value

    def submit(self, op: str, post) -> tuple:
        """Runs `post` now as the group's next operation: (the work's handle, the _Job)."""
        job = _Job(post)
        _CURRENT.job = job
        w = ctypes.c_void_p()
        try:
            errors.check(lib.jitcclProcessGroupSubmit(self.handle, op.encode(), -1, _run_job, None, ctypes.byref(w)))
        finally:
            _CURRENT.job = None
        return w.value, job

    def abort(self) -> None:
        lib.jitcclProcessGroupAbort(self.handle)

    def destroy(self) -> None:
        lib.jitcclProcessGroupDestroy(self.handle)


class _PgWork(dist.Work):
    """The Work of a call run as a job of the group's process group: its completion, wait
    and error are the library's work's (NCCL's semantics: complete once the call is done);
    the call's finishing step (copies back from staging, a bitwise fold) runs once it has
    ended well. `get_future()` waits for it."""

    _asks_python = True  # the C++ backend asks this object, not torch's trampoline

    def __init__(self, where: str, op: str, handle: int, result: list, job: "_Job", scratch_busy=None):
        super().__init__()
        self._where, self._op, self._h, self._result = where, op, handle, result
        # The group's scratch flag when this call holds the scratch (not the group itself,
        # which a Work must not keep alive).
        self._finish, self._keep, self._scratch_busy = job.finish, job.keep, scratch_busy
        self._settled, self._failure, self._fut = False, None, None
        self._lock = threading.Lock()

    def _text(self) -> str:
        n = ctypes.c_size_t(0)
        lib.jitcclWorkError(self._h, None, ctypes.byref(n))  # a size query: not a failure
        buf = ctypes.create_string_buffer(max(n.value, 1))
        lib.jitcclWorkError(self._h, buf, ctypes.byref(n))
        return buf.value.decode(errors="replace")

    def _settle(self, code: int) -> None:
        """Once, with the ended work's result code: the finishing step, or the error."""
        with self._lock:
            if self._settled:
                return
            self._settled = True
            try:
                if code == errors.SUCCESS:
                    if self._finish is not None:
                        with torch.no_grad():
                            self._finish()
                else:
                    cause = errors.error_of(code, self._text())
                    self._failure = _backend_error(self._op, self._where, cause)
                    self._failure.__cause__ = cause
            finally:
                self._finish = self._keep = None
                if self._scratch_busy is not None:
                    self._scratch_busy.value = 0

    def wait(self, timeout: Optional[timedelta] = None) -> bool:
        ms = int(timeout.total_seconds() * 1000) if timeout else -1  # c10d's 0: no timeout
        code = lib.jitcclWorkWait(self._h, ms)
        if code == errors.IN_PROGRESS:
            raise dist.DistBackendError(f"jitccl backend: {self._op} {self._where}: wait gave up after {ms} ms; the "
                                        f"operation is still pending")
        self._settle(code)
        if self._failure is not None:
            raise self._failure
        return True

    def is_completed(self) -> bool:
        if not self._settled:
            done = ctypes.c_int(0)
            if lib.jitcclWorkIsCompleted(self._h, ctypes.byref(done)) == errors.SUCCESS and done.value:
                self._settle(lib.jitcclWorkWait(self._h, 0))
        return self._settled

    def is_success(self) -> bool:
        return self.is_completed() and self._failure is None

    def exception(self):
        self.is_completed()
        return self._failure

    def get_future(self):
        if self._fut is None:
            fut = torch.futures.Future()
            try:
                self.wait()
                fut.set_result(self._result)
            except Exception as e:  # noqa: BLE001 - the future carries it
                fut.set_exception(e)
            self._fut = fut
        return self._fut

    def result(self) -> list:
        self.wait()
        return self._result

    def __del__(self):
        try:
            if not self._settled and (self._finish is not None or self._keep or self._scratch_busy is not None):
                self.wait()  # the result reaches its tensors, the buffers and the scratch are freed
        except Exception:  # noqa: BLE001 - a dropped Work's failure has nobody to go to
            pass
        try:
            lib.jitcclWorkRelease(self._h)
        except Exception:  # noqa: BLE001 - the library is gone at interpreter exit
            pass
