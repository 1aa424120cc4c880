"""What the "jitccl" backend's collective checks share: this rank, the Gloo group that is their
reference, comparing tensors, and the inputs whose reductions are exact in any order."""

import os

import torch
import torch.distributed as dist

import jitccl.torch

from torch_rank import RANK, check

R = dist.ReduceOp
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
# JITCCL_TORCH_NATIVE (set by the test): 1, the C++ backend; 0, the Python group alone.
NATIVE = os.environ.get("JITCCL_TORCH_NATIVE") == "1"
# The Gloo group of the same processes, made by the test's main once the default group exists.
GLOO = None


def same(a, b, what, exact=True, rtol=1e-5, atol=1e-6):
    if isinstance(a, (list, tuple)):
        check(len(a) == len(b), f"{what}: {len(a)} vs {len(b)} tensors")
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{what}[{i}]", exact, rtol, atol)
        return
    check(a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}")
    if exact:
        ok = torch.equal(a, b) if a.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2) else \
            torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    else:
        ok = torch.allclose(a, b, rtol=rtol, atol=atol)
    if not ok:
        raise AssertionError(f"rank {RANK}: {what}: jitccl\n{a}\nreference\n{b}")
    check(True, what)


def raises(kinds, fn, what, contains=()):
    try:
        fn()
    except kinds as e:
        for c in contains:
            check(c in str(e), f"{what}: the error names {c!r}: {e}")
        check(True, what)
        return e
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"rank {RANK}: {what}: expected {kinds}, got {type(e).__name__}: {e}") from e
    raise AssertionError(f"rank {RANK}: {what}: no error")



DTYPES = [torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.float64]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]


def values(dtype, shape, seed, op=None):
    """Values whose reductions are exact in `dtype` in any order (small integers, halves,
    powers of two for products), so Gloo's and jitccl's results must be equal bit for bit."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if op == R.PRODUCT:
        base = torch.tensor([1, 2, 1, 1] if dtype == torch.uint8 else [1, 2, -1, -2], dtype=torch.float64)
        if dtype in FLOATS or dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            base = torch.tensor([1, 2, -1, -0.5], dtype=torch.float64)
        v = base[torch.randint(0, 4, shape, generator=g)]
    else:
        lo = 0 if dtype in (torch.uint8, torch.uint32, torch.uint64) else -4
        v = torch.randint(lo, 5, shape, generator=g).to(torch.float64)
        if dtype.is_floating_point:
            v = v / 2
    return v.to(dtype)


def noncontig(t):
    """`t`'s values in a non-contiguous tensor of the same shape (a strided view)."""
    big = torch.zeros(tuple(t.shape) + (2,), dtype=t.dtype)
    v = big[..., 1]
    v.copy_(t)
    check(v.is_contiguous() == (t.dim() == 0 or t.numel() <= 1), "the view is strided")
    return v


def backend_of(pg):
    """What serves a jitccl group's CPU tensors: the C++ backend, or the Python group itself."""
    return pg if isinstance(pg, jitccl.torch.ProcessGroupJitccl) else pg._get_backend(torch.device("cpu"))


def both(fn, make):
    """fn(tensor, group) on the jitccl default group and on Gloo, with equal inputs (Gloo's
    contiguous: torch 2.6's Gloo all_reduce gives wrong results on strided views); the two
    tensors after."""
    a, b = make(), make().contiguous()
    fn(a, None)
    fn(b, GLOO)
    return a, b

