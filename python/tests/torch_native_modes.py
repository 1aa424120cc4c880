"""The "jitccl" PyTorch backend where its C++ part cannot be built (a C++ compiler that does
not run: CXX=/nonexistent/c++), one rank, by JITCCL_TORCH_NATIVE (capi/tests/torch.rs runs
it once per case, each a process of its own, as the choice is made once per process):

- "auto": one RuntimeWarning saying why, and the Python group serves every call;
- "1": making the group fails, naming the setting and the reason;
- "bogus": making the group fails with ValueError naming the accepted values.

Prints "rank 0: <N> checks passed" at the end."""

import os
import warnings
from datetime import timedelta

os.environ.setdefault("USE_LIBUV", "0")  # Debian's torch has no libuv

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import jitccl.torch  # noqa: E402 - registers "jitccl"

from torch_rank import check, passed, run  # noqa: E402


def init():
    dist.init_process_group("jitccl", rank=0, world_size=1, timeout=timedelta(seconds=30))


def main():
    mode = os.environ["JITCCL_TORCH_NATIVE"]
    if mode == "auto":
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            init()
        why = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning) and "jitccl" in str(w.message)]
        check(len(why) == 1 and "/nonexistent/c++" in why[0], f"one warning naming the compiler: {why}")
        check(jitccl.torch.implementation().startswith("python ("), jitccl.torch.implementation())
        check(isinstance(dist.group.WORLD, jitccl.torch.ProcessGroupJitccl), "the Python group serves alone")
        t = torch.arange(5, dtype=torch.float32)
        dist.all_reduce(t)
        check(torch.equal(t, torch.arange(5, dtype=torch.float32)), "an all_reduce on it")
        dist.destroy_process_group()
    else:
        kind = RuntimeError if mode == "1" else ValueError
        try:
            init()
        except kind as e:
            text = str(e)
            check("JITCCL_TORCH_NATIVE" in text, f"the error names the setting: {text}")
            if mode == "1":
                check("/nonexistent/c++" in text, f"and why the C++ part is unavailable: {text}")
            else:
                check("expected one of auto, 0, 1" in text, f"and what it accepts, in the library's words: {text}")
        else:
            raise AssertionError(f"JITCCL_TORCH_NATIVE={mode}: the group was made")
    print(f"rank 0: {passed()} checks passed", flush=True)


if __name__ == "__main__":
    run(main)
