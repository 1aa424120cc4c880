"""One rank of the "jitccl" backend's killed-rank test (capi/tests/torch.rs): the ranks
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; started one by one, not by a launcher that
would end them all when one dies) run a few collectives, then rank JITCCL_TORCH_VICTIM
kills itself with SIGKILL (a crash, the OOM killer) at the point JITCCL_TORCH_KILL_AT
names. Every other rank's pending or next call must fail with DistBackendError naming the
dead rank within LIMIT seconds of the call (the group's timeout is 60 s, so only noticing
the death itself is fast enough), later calls on the group fail at once, and the rank
exits cleanly. Points:

- next:    the victim dies between collectives; the others' next all_reduce finds it gone.
- pending: the others are waiting in an all_reduce (its agreement step) when it dies.
- agreed:  it dies once the ranks have agreed on an all_reduce, before its data moves.
- during:  it dies inside a 64 MiB all_reduce (a timer thread kills it mid-call).
- held:    the others hold a send to it and a receive from it; their wait() runs them.

Prints "rank <r>: <N> checks passed" on each surviving rank.
"""

import os
import signal
import sys
import threading
import time
from datetime import timedelta

os.environ.setdefault("USE_LIBUV", "0")  # Debian's torch has no libuv

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import jitccl.torch  # noqa: E402 - registers "jitccl"
from torch_rank import RANK, check, passed, run  # noqa: E402

LIMIT = 10.0  # seconds from a survivor's call to its error
WORLD = int(os.environ["WORLD_SIZE"])
VICTIM = int(os.environ["JITCCL_TORCH_VICTIM"])
POINT = os.environ["JITCCL_TORCH_KILL_AT"]


def die(why: str) -> None:
    print(f"rank {RANK}: dying ({why})", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def fails_naming_victim(what: str, call) -> None:
    """`call()` raises DistBackendError naming the victim as the rank that failed, within LIMIT."""
    start = time.monotonic()
    try:
        call()
    except dist.DistBackendError as e:
        took = time.monotonic() - start
        text = str(e)
        print(f"rank {RANK}: {what} failed after {took:.2f} s: {text}", flush=True)
        check(took < LIMIT, f"{what}: failed after {took:.1f} s, not within {LIMIT} s")
        check(f"rank {VICTIM} failed first" in text, f"{what}: the error names dead rank {VICTIM}: {text}")
        check(f"rank {RANK} of {WORLD}" in text, f"{what}: the error names this rank: {text}")
        return
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"rank {RANK}: {what}: expected DistBackendError, got {type(e).__name__}: {e}") from e
    raise AssertionError(f"rank {RANK}: {what}: no error after rank {VICTIM} died")


def main():
    dist.init_process_group("jitccl", timeout=timedelta(seconds=60))
    check(dist.get_world_size() == WORLD and 0 <= VICTIM < WORLD, "world and victim")
    # Healthy collectives first: the death comes after init, into a working group.
    for n in (1, 1000):
        t = torch.full((n,), float(RANK))
        dist.all_reduce(t)
        check(torch.equal(t, torch.full((n,), float(sum(range(WORLD))))), f"all_reduce x {n} before the death")
    dist.barrier()
    survivors = [q for q in range(WORLD) if q != VICTIM]

    if POINT == "next":
        if RANK == VICTIM:
            die("between collectives")
        time.sleep(0.5)  # it is gone before the call
        fails_naming_victim("all_reduce after the death", lambda: dist.all_reduce(torch.ones(4)))
    elif POINT == "pending":
        if RANK == VICTIM:
            time.sleep(1.0)  # the others are waiting for it by now
            die("while the others wait in an all_reduce")
        fails_naming_victim("a pending all_reduce", lambda: dist.all_reduce(torch.ones(4)))
    elif POINT == "agreed":
        t = torch.ones(1 << 16)
        if RANK == VICTIM:
            # A strided view: the victim's call goes through the Python group, whose agreement
            # step is hooked; the others' (the C++ backend's, where it is on) agree with it.
            t = torch.ones(1 << 16, 2)[:, 0]
            agreement = jitccl.torch.python_group(dist.group.WORLD)._agreement
            agree = agreement.check

            def agree_then_die(*args):
                agree(*args)
                die("after the agreement, before the data")
            agreement.check = agree_then_die
        fails_naming_victim("an agreed all_reduce", lambda: dist.all_reduce(t))
    elif POINT == "during":
        if RANK == VICTIM:
            threading.Timer(0.05, die, ("inside a 64 MiB all_reduce",)).start()
        big = torch.ones(16 << 20)
        fails_naming_victim("a 64 MiB all_reduce (or the next)",
                            lambda: [dist.all_reduce(big) for _ in range(100)])
    elif POINT == "held":
        if RANK == VICTIM:
            time.sleep(1.0)
            die("while the others hold a send to it and a receive from it")
        x, y = torch.full((100,), float(RANK)), torch.zeros(100)
        reqs = [dist.isend(x, VICTIM), dist.irecv(y, VICTIM)]
        fails_naming_victim("wait() on a held send and receive", lambda: [r.wait() for r in reqs])
        check(torch.equal(y, torch.zeros(100)), "the failed receive wrote nothing")
    else:
        raise ValueError(f"JITCCL_TORCH_KILL_AT={POINT!r}: one of next, pending, agreed, during, held")

    # The group is failed for good: later calls raise at once, naming the same rank.
    start = time.monotonic()
    fails_naming_victim("a later all_reduce", lambda: dist.all_reduce(torch.ones(2)))
    fails_naming_victim("a later broadcast", lambda: dist.broadcast(torch.ones(2), survivors[0]))
    check(time.monotonic() - start < 1.0, "a failed group's calls raise at once")
    start = time.monotonic()
    dist.destroy_process_group()
    check(time.monotonic() - start < LIMIT, f"destroy_process_group took {time.monotonic() - start:.1f} s")
    print(f"rank {RANK}: {passed()} checks passed", flush=True)


if __name__ == "__main__":
    run(main)
    sys.stdout.flush()
    # Not interpreter shutdown: the default store's server may have been the dead rank's.
    os._exit(0)
