"""The settings as the library reads them (jitcclSettingsJson, jitcclCacheDir in jitccl.h),
so that the package checks and defaults a variable as the table of docs/settings.md says,
not by a copy of its rules."""

import ctypes
import json
from typing import Dict, Optional

from . import errors
from ._lib import lib


def _text(call) -> str:
    size = ctypes.c_size_t(0)
    call(None, ctypes.byref(size))  # learns the size: fails with ncclInvalidArgument
    buf = ctypes.create_string_buffer(size.value)
    errors.check(call(buf, ctypes.byref(size)))
    return buf.value.decode()


def settings() -> Dict[str, dict]:
    """Every setting by name: its "value" (as given, else the default in words), whether it
    is "given", its "source" (the variable read, or "default"), "problem" (why the library
    refuses the value, else None), and the table's "kind", "default" and "about"."""
    return {row["name"]: row for row in json.loads(_text(lib.jitcclSettingsJson))}


def given(name: str) -> Optional[str]:
    """The value given to setting `name` (its JITCCL_ or NCCL name), or None when unset;
    ValueError, in the library's words, when the library would refuse it."""
    row = settings().get(name)
    if row is None:
        raise KeyError(f"{name} is not a jitccl setting (see `jitccl env --all`)")
    if row["problem"] is not None:
        raise ValueError(f"{row['source']}={row['value']!r}: {row['problem']}")
    return row["value"] if row["given"] else None


def cache_dir() -> str:
    """The kernel cache's folder the library uses ("" when it keeps none)."""
    return _text(lib.jitcclCacheDir)
