"""The Works the process group returns: done ones, and those of held sends and receives."""

from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as dist
from torch._C import Future as _Future
from torch._C._distributed_c10d import _create_work_from_future

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
