"""Communicators: made from a unique id (or all in this process), the collectives and point
to point on numpy arrays and buffers, groups, split, shrink, abort. On the host a call on a
blocking communicator is complete when it returns; a nonblocking one (blocking=False)
returns at once: `wait()` (or `ready()`) tells when its work is done."""

import ctypes
import threading
import time
from contextlib import contextmanager
from typing import Optional, Sequence, Union

from . import errors
from ._buffers import Buf, as_buf as _as_buf, encode
from ._lib import UniqueIdStruct, WireStruct, lib

c_int, c_void_p = ctypes.c_int, ctypes.c_void_p

OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
UNDEF = -2147483648
SPLIT_NOCOLOR = -1


class UniqueId:
    """The 128 bytes that name one communicator's rendezvous: made by one rank
    (`get_unique_id`), handed to the others (as `bytes`), given to every rank's `Comm`."""

    def __init__(self, data: bytes):
        if len(data) != 128:
            raise ValueError(f"a unique id is 128 bytes, got {len(data)}")
        self.data = bytes(data)

    def __bytes__(self) -> bytes:
        return self.data

    def _struct(self) -> UniqueIdStruct:
        s = UniqueIdStruct()
        ctypes.memmove(ctypes.addressof(s), self.data, 128)
        return s


def get_unique_id() -> UniqueId:
    """A new unique id (ncclGetUniqueId). With NCCL_COMM_ID / JITCCL_COMM_ID = host:port set
    on every rank, every rank gets the same one, and no id needs to be passed around."""
    s = UniqueIdStruct()
    errors.check(lib.ncclGetUniqueId(ctypes.byref(s)))
    return UniqueId(ctypes.string_at(ctypes.addressof(s), 128))


def version() -> tuple:
    """The NCCL API version served, as (major, minor, patch)."""
    v = c_int()
    errors.check(lib.ncclGetVersion(ctypes.byref(v)))
    return v.value // 10000, v.value // 100 % 100, v.value % 100


class _Config(ctypes.Structure):
    """ncclConfig_t (NCCL 2.30.7)."""

    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint)] + [
        (n, c_int) for n in ("blocking", "cgaClusterSize", "minCTAs", "maxCTAs")] + [
        ("netName", ctypes.c_char_p), ("splitShare", c_int), ("trafficClass", c_int),
        ("commName", ctypes.c_char_p)] + [
        (n, c_int) for n in ("collnetEnable", "CTAPolicy", "shrinkShare", "nvlsCTAs", "nChannelsPerNetPeer",
                             "nvlinkCentricSched", "graphUsageMode", "numRmaCtx", "maxP2pPeers",
                             "graphStreamOrdering")]


def _config(blocking=None, name=None, min_ctas=None, max_ctas=None, net_name=None, split_share=None):
    c = _Config()
    c.size, c.magic, c.version = ctypes.sizeof(_Config), 0xCAFEBEEF, 23007
    for f, _ in _Config._fields_[3:]:
        if f not in ("netName", "commName"):
            setattr(c, f, UNDEF)
    for field, value in (("blocking", blocking), ("minCTAs", min_ctas), ("maxCTAs", max_ctas),
                         ("splitShare", split_share)):
        if value is not None:
            setattr(c, field, int(value))
    c.commName = name.encode() if name is not None else None
    c.netName = net_name.encode() if net_name is not None else None
    return c


Op = Union[str, tuple]


def wire(name: str) -> WireStruct:
    """The wire format of `name`, as JITCCL_WIRE takes it ("exact", "bf16", "fp16",
    "fp8e4m3", "fp8e5m2", "int8", the scaled ones with their block as "int8b128"); an
    unknown one raises InvalidArgument (a ValueError) saying why."""
    if not isinstance(name, str):
        raise TypeError(f"a wire is named by a string such as 'bf16', got {type(name).__name__}")
    w = WireStruct()
    errors.check(lib.jitcclWireFromName(name.encode(), ctypes.byref(w)))
    return w


def _variant(call: str, name: Optional[str]):
    """NCCL's `call` (the communicator's default wire: JITCCL_WIRE, else exact) and no more
    arguments, or jitccl's wired variant and the wire of `name` to pass after the others."""
    if name is None:
        return getattr(lib, "nccl" + call), ()
    return getattr(lib, "jitcclWired" + call), (wire(name),)


def as_buf(obj, what: str, writable: bool) -> Buf:
    """`obj` as a buffer of a call; a `Buf` (address, element count, ncclDataType_t) is taken
    as it is: memory its holder vouches for, such as a torch tensor's (jitccl.torch)."""
    return obj if isinstance(obj, Buf) else _as_buf(obj, what, writable)


# The buffers of the calls posted in this thread's open group: a call runs at the group's
# end, so a temporary array passed to it must live until then.
_GROUP = threading.local()


class Comm:
    """One rank of a communicator (ncclCommInitRankConfig): every rank makes it with the same
    `uid` and `nranks`. Options as NCCL's config: `blocking`, `name` (commName),
    `min_ctas`, `max_ctas`, `net_name`, `split_share`.

    On a GPU (the communicator is made on the calling thread's current CUDA device unless
    JITCCL_DEVICE=host) the calls take device addresses (a `Buf`, e.g. of a torch CUDA
    tensor) and are ordered after the work queued on `stream`, a cudaStream_t as an int
    (None: the default stream), as NCCL's are; on the host the stream is not used."""

    stream: Optional[int] = None

    def __init__(self, nranks: int, uid: UniqueId, rank: int, *, blocking: bool = True, name: Optional[str] = None,
                 min_ctas: Optional[int] = None, max_ctas: Optional[int] = None, net_name: Optional[str] = None,
                 split_share: Optional[bool] = None, _handle: Optional[int] = None):
        self._h = c_void_p(_handle)
        self._size: Optional[int] = None
        self._blocking = blocking
        # A nonblocking communicator's calls run after they return: their buffers live
        # until `ready()` says the work is done.
        self._pending: list = []
        if _handle is not None:
            return
        cfg = _config(blocking, name, min_ctas, max_ctas, net_name, split_share)
        errors.check(lib.ncclCommInitRankConfig(ctypes.byref(self._h), nranks, uid._struct(), rank, ctypes.byref(cfg)))

    @classmethod
    def init_all(cls, n: int) -> list:
        """`n` ranks in this process (ncclCommInitAll), one `Comm` each; drive them from one
        thread with `group()`."""
        handles = (c_void_p * n)()
        errors.check(lib.ncclCommInitAll(handles, n, None))
        return [cls(n, None, r, _handle=handles[r]) for r in range(n)]

    # ---- What it is ----------------------------------------------------------------------

    def _int(self, f) -> int:
        v = c_int()
        errors.check(f(self._handle(), ctypes.byref(v)), self._h)
        return v.value

    @property
    def rank(self) -> int:
        return self._int(lib.ncclCommUserRank)

    @property
    def size(self) -> int:
        # Asked once: a communicator's size never changes, and the checks of every
        # all-gather, reduce-scatter and all-to-all need it.
        if self._size is None:
            self._size = self._int(lib.ncclCommCount)
        return self._size

    @property
    def cuda_device(self) -> Optional[int]:
        """The rank's CUDA device, or None on the host."""
        d = self._int(lib.ncclCommCuDevice)
        return None if d < 0 else d

    def _handle(self):
        if not self._h.value:
            raise errors.InvalidUsage(5, "the communicator was destroyed or aborted")
        return self._h

    # ---- State ---------------------------------------------------------------------------

    def ready(self) -> bool:
        """Whether init and every call so far are done (ncclCommGetAsyncError); raises the
        error that failed the communicator, if one did."""
        state = c_int()
        errors.check(lib.ncclCommGetAsyncError(self._handle(), ctypes.byref(state)), self._h)
        errors.check(state.value, self._h)
        done = state.value == errors.SUCCESS
        if done:
            self._pending.clear()
        return done

    def wait(self, timeout: Optional[float] = None) -> None:
        """Waits until `ready()`; TimeoutError after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.ready():
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"the communicator was not ready within {timeout} s")
            time.sleep(0.0005)

    # ---- Collectives ---------------------------------------------------------------------

    def _call(self, f, *args, keep: tuple = ()) -> None:
        """`f(*args, comm, stream)`; `keep`: the buffers, held while the call may not have run."""
        errors.check(f(*args, self._handle(), self.stream), self._h)
        if getattr(_GROUP, "keep", None) is not None:
            _GROUP.keep.extend(keep)
        if not self._blocking:
            self._pending.extend(keep)

    def _op(self, op: Op, dtype: int):
        """The op id, and the user op to destroy after the call (for ("premul_sum", x))."""
        if isinstance(op, str) and op.lower() in OPS:
            return OPS[op.lower()], None
        if isinstance(op, tuple) and len(op) == 2 and op[0] == "premul_sum":
            # The scalar in the call's type, read at once (host residence).
            raw = ctypes.create_string_buffer(encode(float(op[1]), dtype), 8)
            h = c_int()
            errors.check(lib.ncclRedOpCreatePreMulSum(ctypes.byref(h), raw, dtype, 1, self._handle()), self._h)
            return h.value, h.value
        raise ValueError(f"op {op!r}: expected one of {', '.join(OPS)} or ('premul_sum', scalar)")

    def _reduce(self, f, before: tuple, after: tuple, op: Op, dtype: int, keep: tuple) -> None:
        """`f(*before, op, *after, comm, stream)`, with a user op made and destroyed around it."""
        opid, made = self._op(op, dtype)
        try:
            self._call(f, *before, opid, *after, keep=keep)
        finally:
            if made is not None:
                lib.ncclRedOpDestroy(made, self._h)

    # all_reduce, broadcast, reduce, all_gather and reduce_scatter take `wire`, the name of
    # a wire format to carry the elements in (f32, f16 or bf16 elements wider than its codes,
    # sum or avg): each hop decodes, adds in fp32 and encodes, and every rank gets the same
    # bits, within the format's error bound (docs/guide.md, "Wire formats"). None: the
    # communicator's default (JITCCL_WIRE, else exact); "exact": exact whatever that says.

    def all_reduce(self, send, recv=None, op: Op = "sum", wire: Optional[str] = None) -> None:
        """recv[i] = op over ranks of send[i]; in place without `recv`."""
        s = as_buf(send, "all_reduce send", recv is None)
        r = s if recv is None else _same(as_buf(recv, "all_reduce recv", True), s, "all_reduce")
        f, w = _variant("AllReduce", wire)
        self._reduce(f, (s.ptr, r.ptr, s.count, s.dtype), w, op, s.dtype, (s, r))

    def broadcast(self, buf, root: int = 0, send=None, wire: Optional[str] = None) -> None:
        """`buf` on every rank takes root's `buf` (or root's `send`, if given)."""
        r = as_buf(buf, "broadcast buffer", True)
        s = r if send is None else _same(as_buf(send, "broadcast send", False), r, "broadcast")
        f, w = _variant("Broadcast", wire)
        self._call(f, s.ptr, r.ptr, r.count, r.dtype, root, *w, keep=(s, r))

    def reduce(self, send, recv=None, op: Op = "sum", root: int = 0, wire: Optional[str] = None) -> None:
        """Root's `recv` (in place without it) = op over ranks of `send`."""
        s = as_buf(send, "reduce send", recv is None)
        r = s if recv is None else _same(as_buf(recv, "reduce recv", True), s, "reduce")
        f, w = _variant("Reduce", wire)
        self._reduce(f, (s.ptr, r.ptr, s.count, s.dtype), (root, *w), op, s.dtype, (s, r))

    def all_gather(self, send, recv, wire: Optional[str] = None) -> None:
        """`recv` (size x send's elements) = every rank's `send`, in rank order."""
        s, r = as_buf(send, "all_gather send", False), as_buf(recv, "all_gather recv", True)
        self._blocks(r, s.count, "all_gather recv", s)
        f, w = _variant("AllGather", wire)
        self._call(f, s.ptr, r.ptr, s.count, s.dtype, *w, keep=(s, r))

    def reduce_scatter(self, send, recv, op: Op = "sum", wire: Optional[str] = None) -> None:
        """`recv` = block `rank` of op over ranks of `send` (size blocks of recv's elements)."""
        s, r = as_buf(send, "reduce_scatter send", False), as_buf(recv, "reduce_scatter recv", True)
        self._blocks(s, r.count, "reduce_scatter send", r)
        f, w = _variant("ReduceScatter", wire)
        self._reduce(f, (s.ptr, r.ptr, r.count, s.dtype), w, op, s.dtype, (s, r))

    def all_to_all(self, send, recv) -> None:
        """Block q of `send` goes to rank q, whose block `rank` of `recv` takes it."""
        s, r = as_buf(send, "all_to_all send", False), as_buf(recv, "all_to_all recv", True)
        n = self.size
        if s.count % n:
            raise ValueError(f"all_to_all: send's {s.count} elements are not {n} equal blocks")
        self._blocks(r, s.count // n, "all_to_all recv", s)
        self._call(lib.ncclAlltoAll, s.ptr, r.ptr, s.count // n, s.dtype, keep=(s, r))

    def gather(self, send, recv=None, root: int = 0) -> None:
        """Root's `recv` (size x send's elements) = every rank's `send`, in rank order."""
        s = as_buf(send, "gather send", False)
        r = as_buf(recv, "gather recv", True) if recv is not None else Buf(0, 0, s.dtype, None)
        if recv is not None:
            self._blocks(r, s.count, "gather recv", s)
        self._call(lib.ncclGather, s.ptr, r.ptr, s.count, s.dtype, root, keep=(s, r))

    def scatter(self, send, recv, root: int = 0) -> None:
        """`recv` = block `rank` of root's `send` (size blocks of recv's elements)."""
        r = as_buf(recv, "scatter recv", True)
        s = as_buf(send, "scatter send", False) if send is not None else Buf(0, 0, r.dtype, None)
        if send is not None:
            self._blocks(s, r.count, "scatter send", r)
        self._call(lib.ncclScatter, s.ptr, r.ptr, r.count, r.dtype, root, keep=(s, r))

    def send(self, buf, peer: int) -> None:
        b = as_buf(buf, "send buffer", False)
        self._call(lib.ncclSend, b.ptr, b.count, b.dtype, peer, keep=(b,))

    def recv(self, buf, peer: int) -> None:
        b = as_buf(buf, "recv buffer", True)
        self._call(lib.ncclRecv, b.ptr, b.count, b.dtype, peer, keep=(b,))

    def _blocks(self, big: Buf, count: int, what: str, other: Buf) -> None:
        if big.dtype != other.dtype:
            raise TypeError(f"{what}: the buffers' data types differ")
        if big.count < count * self.size:
            raise ValueError(f"{what}: holds {big.count} elements, {count * self.size} are needed")

    # ---- New communicators, the end --------------------------------------------------------

    def split(self, color: Optional[int], key: Optional[int] = None) -> Optional["Comm"]:
        """The ranks giving the same `color` form a new communicator, ordered by (key, rank);
        color None joins none (returns None). Every rank calls it."""
        h = c_void_p()
        c = SPLIT_NOCOLOR if color is None else color
        errors.check(lib.ncclCommSplit(self._handle(), c, self.rank if key is None else key, ctypes.byref(h), None),
                     self._h)
        return Comm(0, None, 0, blocking=self._blocking, _handle=h.value) if h.value else None

    def shrink(self, exclude: Sequence[int], abort: bool = False) -> "Comm":
        """The ranks not in `exclude` (which may be dead) form a new communicator; only they
        call it. `abort` first ends this communicator's running operations."""
        arr = (c_int * max(1, len(exclude)))(*exclude)
        h = c_void_p()
        errors.check(lib.ncclCommShrink(self._handle(), arr, len(exclude), ctypes.byref(h), None, int(abort)), self._h)
        return Comm(0, None, 0, blocking=self._blocking, _handle=h.value)

    def finalize(self) -> None:
        """Refuses new calls and completes the queued ones (ncclCommFinalize)."""
        errors.check(lib.ncclCommFinalize(self._handle()), self._h)

    def abort(self) -> None:
        """Ends the communicator at once, from any thread; calls waiting in it fail."""
        h, self._h = self._h, c_void_p()
        if h.value:
            errors.check(lib.ncclCommAbort(h))

    def destroy(self) -> None:
        """Frees the communicator (ncclCommDestroy); later calls raise InvalidUsage."""
        h, self._h = self._h, c_void_p()
        if h.value:
            errors.check(lib.ncclCommDestroy(h))

    def __enter__(self) -> "Comm":
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    def __repr__(self) -> str:
        if not self._h.value:
            return "Comm(destroyed)"
        return f"Comm(rank {self.rank} of {self.size})"


class Memory:
    """`nbytes` of ncclMemAlloc memory, freed by `free()` or when the object goes. On the
    host it is a block of the process's host arena, which the communicators' other local
    ranks map: calls on it run jitccl's direct algorithms (the peers load and store it in
    place), the fastest for small calls. On a GPU (the current device, unless
    JITCCL_DEVICE=host) it is device memory. `buf(count, dtype)` is a call's buffer of it."""

    def __init__(self, nbytes: int):
        p = c_void_p()
        errors.check(lib.ncclMemAlloc(ctypes.byref(p), nbytes))
        self.address, self.nbytes = p.value, nbytes

    def buf(self, count: int, dtype: int, offset: int = 0) -> Buf:
        """`count` elements of ncclDataType_t `dtype` from byte `offset` (they must fit)."""
        if offset < 0 or count < 0 or offset + count * _SIZES[dtype] > self.nbytes:
            raise ValueError(f"{count} elements of type {dtype} from byte {offset} do not fit {self.nbytes} bytes")
        return Buf(self.address + offset, count, dtype, self)

    def free(self) -> None:
        address, self.address = self.address, None
        if address:
            errors.check(lib.ncclMemFree(address))

    def __del__(self):
        try:
            self.free()
        except Exception:  # noqa: BLE001 - at interpreter exit the library may be gone
            pass


# Element sizes of the ncclDataType_t values.
_SIZES = {0: 1, 1: 1, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 1, 11: 1}


def _same(b: Buf, other: Buf, what: str) -> Buf:
    if b.dtype != other.dtype or b.count < other.count:
        raise ValueError(f"{what}: recv must have send's data type and at least its {other.count} elements")
    return b


@contextmanager
def keeping(held: list):
    """The buffers of the calls made inside (groups included) are appended to `held`: for a
    process group's job, whose calls are queued, not done, when they return."""
    outer = getattr(_GROUP, "keep", None)
    _GROUP.keep = held
    try:
        yield
    finally:
        _GROUP.keep = outer


@contextmanager
def group():
    """Calls inside run together when the block ends (ncclGroupStart / ncclGroupEnd): sends
    and receives in any order, several communicators driven by one thread. The buffers
    passed inside live until then."""
    outer = getattr(_GROUP, "keep", None)
    errors.check(lib.ncclGroupStart())
    _GROUP.keep = [] if outer is None else outer
    ok = False
    try:
        yield
        ok = True
    finally:
        code = lib.ncclGroupEnd()
        if outer is None:
            _GROUP.keep = None
        if ok:
            errors.check(code)
