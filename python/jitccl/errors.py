"""Errors: each failed call raises the subclass of `Error` for NCCL's result code, with the
library's text of the failure (the call, the rank, the peer and the operation)."""

from ._lib import lib


class Error(Exception):
    """A failed jitccl call. `kind` names NCCL's result (e.g. "InvalidArgument"), `code` is
    its ncclResult_t value, and the message is jitccl's text of the failure."""

    kind = "Error"

    def __init__(self, code: int, text: str):
        super().__init__(text)
        self.code = code
        self.text = text


class UnhandledCudaError(Error):
    kind = "UnhandledCudaError"


class SystemError_(Error):
    kind = "SystemError"


class InternalError(Error):
    kind = "InternalError"


class InvalidArgument(Error, ValueError):
    kind = "InvalidArgument"


class InvalidUsage(Error):
    kind = "InvalidUsage"


class RemoteError(Error):
    kind = "RemoteError"


class Timeout(Error, TimeoutError):
    kind = "Timeout"


_BY_CODE = {1: UnhandledCudaError, 2: SystemError_, 3: InternalError, 4: InvalidArgument, 5: InvalidUsage,
            6: RemoteError, 8: Timeout}

SUCCESS, IN_PROGRESS = 0, 7


def error(code: int, comm=None) -> Error:
    """The error of failed `code`, with the last-error text of `comm` (or the process's)."""
    return error_of(code, (lib.ncclGetLastError(comm) or b"").decode(errors="replace"))


def error_of(code: int, text: str) -> Error:
    """The error of failed `code` with `text` (else the code's own)."""
    if not text:
        text = (lib.ncclGetErrorString(code) or b"").decode(errors="replace")
    return _BY_CODE.get(code, Error)(code, text)


def check(code: int, comm=None) -> int:
    """Returns `code` when it is success or in-progress; else raises its error."""
    if code in (SUCCESS, IN_PROGRESS):
        return code
    raise error(code, comm)
