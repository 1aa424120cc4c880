"""The backend's C++ part (_native.cpp): compiled at first use against the PyTorch it runs in,
with the system's C++ compiler, and kept in the library's kernel cache (JITCCL_CACHE_DIR, else the user's
cache folder) under a key of the source, PyTorch, Python and the compiler. A group made
through it runs all_reduce, broadcast and barrier of contiguous CPU tensors without Python
(an 8-byte all_reduce costs what torch's dispatch costs, not a Python call); every other call
goes to the Python group it wraps.

JITCCL_TORCH_NATIVE: "auto" (the default) uses it where it builds, else the Python group
alone, with a warning that says why; "0" never; "1" requires it (a group fails to be made
without it)."""

import atexit
import ctypes
import fcntl
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import warnings
from pathlib import Path

import torch

from .. import _settings
from .._lib import lib
from ..comm import OPS
from ._agree import _reduction_name, _type_name
from ._held import _HELD_FLAG
from ._tensors import _DTYPES, _SIMPLE_OPS

_log = logging.getLogger("jitccl.torch")
_SOURCE = Path(__file__).with_name("_native.cpp")
_NAME = "jitccl_torch_native"
_COMPILE_LIMIT_S = 600


class Unavailable(Exception):
    """Why the C++ part cannot be had here."""


def _mode() -> str:
    return (_settings.given("JITCCL_TORCH_NATIVE") or "auto").lower()


def _cache_dir() -> Path:
    given = _settings.cache_dir()
    if given == "":  # no disk cache: a folder of this process's, gone at its exit
        folder = tempfile.mkdtemp(prefix="jitccl-torch-native-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        return Path(folder)
    return Path(given)


def _flags() -> tuple:
    """(compiler, compile and link arguments); Unavailable when a part is missing."""
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        raise Unavailable("no C++ compiler (c++ or g++ on PATH, or CXX); Debian: apt install g++")
    from torch.utils.cpp_extension import include_paths, library_paths
    includes = include_paths()
    if not (Path(includes[0]) / "torch" / "csrc" / "distributed" / "c10d" / "Backend.hpp").exists():
        raise Unavailable(f"PyTorch's C++ headers are missing from {includes[0]} (Debian: apt install libtorch-dev)")
    python_include = sysconfig.get_paths()["include"]
    if not (Path(python_include) / "Python.h").exists():
        raise Unavailable(f"Python's headers are missing from {python_include} (Debian: apt install python3-dev)")
    libdir = library_paths()[0]
    abi = [f"-DPYBIND11_{k}=\"{getattr(torch._C, '_PYBIND11_' + k)}\"" for k in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI")
           if getattr(torch._C, "_PYBIND11_" + k, None) is not None]
    args = ["-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden", f"-DTORCH_EXTENSION_NAME={_NAME}",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}", *abi,
            *(f"-I{p}" for p in includes), f"-I{python_include}", f"-L{libdir}", f"-Wl,-rpath,{libdir}"]
    return cxx, args, ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"]


def _compiler_id(cxx: str) -> str:
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError) as e:
        raise Unavailable(f"the C++ compiler {cxx} does not run: {e}") from None


def _build() -> Path:
    """The compiled module's path: from the cache, or compiled now (one process at a time)."""
    cxx, args, libs = _flags()
    key = hashlib.sha256("\0".join([_SOURCE.read_text(), torch.__version__, sys.version, _compiler_id(cxx), *args])
                         .encode()).hexdigest()[:16]
    folder = _cache_dir() / "torch-native"
    folder.mkdir(parents=True, exist_ok=True)
    so = folder / f"{_NAME}-{key}.so"
    if so.exists():
        return so
    with open(folder / f"{_NAME}-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the ranks of a first run: one compiles, the others wait
        if so.exists():
            return so
        print(f"jitccl.torch: compiling the C++ backend for torch {torch.__version__} (once; under a minute) into {so}",
              file=sys.stderr, flush=True)
        start = time.monotonic()
        tmp = so.with_suffix(f".tmp{os.getpid()}")
        try:  # bounded, as every wait: the other ranks wait on the lock meanwhile
            done = subprocess.run([cxx, *args, str(_SOURCE), "-o", str(tmp), *libs], capture_output=True, text=True,
                                   timeout=_COMPILE_LIMIT_S)
        except subprocess.TimeoutExpired:
            tmp.unlink(missing_ok=True)
            raise Unavailable(f"compiling {_SOURCE.name} with {cxx} took over {_COMPILE_LIMIT_S} s") from None
        if done.returncode != 0:
            tmp.unlink(missing_ok=True)
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
            raise Unavailable(f"compiling {_SOURCE.name} failed ({cxx}, status {done.returncode}):\n{tail}")
        os.replace(tmp, so)
        _log.info("jitccl.torch: compiled %s in %.1f s", so, time.monotonic() - start)
    return so


_MODULE = None
_WHY = None  # why the C++ part is not used, once known


def _load():
    """(module, None), or (None, why it is not used)."""
    if _mode() == "0":
        return None, "JITCCL_TORCH_NATIVE=0"
    try:
        so = _build()
        loader = importlib.machinery.ExtensionFileLoader(_NAME, str(so))
        spec = importlib.util.spec_from_file_location(_NAME, str(so), loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except (Unavailable, ImportError, OSError) as e:
        return None, str(e)
    _log.info("jitccl.torch: the C++ backend from %s", so)
    return module, None


def _module():
    """The loaded C++ module, or None (with the reason in _WHY) where it is off or fails to
    build: with a warning the first time under "auto"; an error under "1"."""
    global _MODULE, _WHY
    if _MODULE is None and _WHY is None:
        _MODULE, _WHY = _load()
        if _WHY is not None and _mode() == "auto":
            warnings.warn(f"jitccl.torch: the C++ backend is unavailable, so every call goes through Python "
                          f"(slower for small calls; JITCCL_TORCH_NATIVE=0 silences this): {_WHY}", RuntimeWarning,
                          stacklevel=3)
    if _WHY is not None and _mode() == "1":
        raise RuntimeError(f"jitccl.torch: JITCCL_TORCH_NATIVE=1, and the C++ backend is unavailable: {_WHY}")
    return _MODULE


def implementation() -> str:
    """Which backend groups get: "native (<module path>)" or "python (<why>)"."""
    module = _module()
    return f"native ({module.__file__})" if module is not None else f"python ({_WHY})"


def _address(f) -> int:
    return ctypes.cast(f, ctypes.c_void_p).value


def wrap(group):
    """`group` (a ProcessGroupJitccl) inside the C++ backend, or None where that is off or
    unavailable (the caller uses `group` itself)."""
    module = _module()
    if module is None:
        return None
    direct = [(torch.empty(0, dtype=dt), code, _type_name(dt).decode()) for dt, code in _DTYPES.items()]
    ops = [(int(kind), OPS[name], _reduction_name(kind).decode()) for kind, name in _SIMPLE_OPS.items()]
    shared = dict(
        comm=group._comm._h.value, pg=group._runtime.handle, scratch=group._scratch.address,
        scratch_busy=ctypes.addressof(group._scratch_busy), scratch_bytes=group._scratch_bytes,
        held=ctypes.addressof(_HELD_FLAG), closed=ctypes.addressof(group._closed), types=direct, ops=ops,
        **{name: _address(getattr(lib, name)) for name in (
            "ncclAllReduce", "ncclBroadcast", "jitcclAgree", "jitcclProcessGroupSubmit", "jitcclWorkWait",
            "jitcclWorkError", "jitcclWorkRelease")})
    native = module.NativeBackend(group.rank(), group.size(), group, shared)
    group._native = True
    return native
