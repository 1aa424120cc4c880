"""CUDA tensors: a group's communicator on its GPU, and the stream its calls are ordered on."""

import torch

from ..comm import Comm


class _Cuda:
    """The group's communicator on the GPU that was current when the group was made (as
    NCCL's ranks take theirs: torch.cuda.set_device first), for CUDA tensors on that
    device. Each call is ordered after the work queued on the device's current stream, as
    NCCL's are, so the caller's kernels before and after it see its data."""

    def __init__(self, comm: Comm, device: int):
        self.comm, self.device = comm, device

    def comm_on_stream(self) -> Comm:
        """The communicator, its calls ordered on the current stream."""
        self.comm.stream = torch.cuda.current_stream(self.device).cuda_stream
        return self.comm


def _cuda_device():
    """The CUDA device a new group's GPU communicator goes on (the current one), or None
    where torch sees no GPU."""
    return torch.cuda.current_device() if torch.cuda.is_available() else None
