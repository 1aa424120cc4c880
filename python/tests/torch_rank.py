"""What the PyTorch backend's rank scripts (torch_*.py) share: counting passed checks, and
running a rank's main so that any failure ends the process with status 1 and its
traceback (never a hang in interpreter shutdown behind a failed group)."""

import os
import sys
import traceback

RANK = int(os.environ.get("RANK", "0"))
_passed = 0


def check(cond, what) -> None:
    """Counts a passed check; raises AssertionError naming this rank and `what` otherwise."""
    global _passed
    if not cond:
        raise AssertionError(f"rank {RANK}: {what}")
    _passed += 1


def passed() -> int:
    """The number of checks passed so far."""
    return _passed


def run(main) -> None:
    """Runs `main()`; on any exception prints it and exits with status 1 at once."""
    try:
        main()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
