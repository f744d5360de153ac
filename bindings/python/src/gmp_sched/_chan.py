"""Channels and select.

A :class:`Chan` owns one reference to a ``gmp_chan`` and carries fixed-size elements,
described by what it was made with:

===========================  ===========================  ===========================
``Chan(...)`` element        ``send`` accepts              ``recv`` returns
===========================  ===========================  ===========================
a simple ctype (``c_int64``) a number (or an instance)     a Python number
a Structure/Union/Array type an instance (or a tuple)      a fresh instance
an int ``n > 0``             a bytes-like of n bytes       ``bytes``
``0`` or ``None``            nothing (``None``)            ``None`` (a signal channel)
``object``                   any Python object             the same object
===========================  ===========================  ===========================

``object`` channels carry a reference (the object's address, with its refcount raised
while it is in flight): only Python code may use them. The others carry plain C data and
are shared freely with C goroutines (pass ``ch`` where a ``gmp_chan *`` is wanted).
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import (
    Array,
    Structure,
    Union,
    addressof,
    c_char,
    c_void_p,
    py_object,
    sizeof,
)
import errno as _errno
from typing import Any, AsyncIterator, Generic, Iterator, TypeVar, Union as TUnion, overload

from . import _errors
from ._errors import EAGAIN, EPIPE, ETIMEDOUT, SLICE_NS, ChannelClosed, check, raise_errno, timeout_ns
from ._lib import GMP_CHAN_MAX_ELEM, GMP_RECV, GMP_SEND, gmp_select_case, lib

T = TypeVar("T")

_IntCType = TUnion[ctypes.c_byte, ctypes.c_ubyte, ctypes.c_short, ctypes.c_ushort, ctypes.c_int,
                   ctypes.c_uint, ctypes.c_long, ctypes.c_ulong, ctypes.c_longlong,
                   ctypes.c_ulonglong, ctypes.c_int8, ctypes.c_uint8, ctypes.c_int16,
                   ctypes.c_uint16, ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64,
                   ctypes.c_uint64, ctypes.c_size_t, ctypes.c_ssize_t]
_FloatCType = TUnion[ctypes.c_float, ctypes.c_double, ctypes.c_longdouble]

_send = lib.gmp_chan_send
_recv = lib.gmp_chan_recv
_try_send = lib.gmp_chan_try_send
_try_recv = lib.gmp_chan_try_recv
_send_timeout = lib.gmp_chan_send_timeout
_recv_timeout = lib.gmp_chan_recv_timeout
_select = lib.gmp_select
_now = lib.gmp_now
_get_ident = threading.get_ident
_MAIN = _errors.MAIN_THREAD_ID
_SimpleCData: Any = ctypes.c_int.__mro__[1]  # ctypes._SimpleCData

_incref = ctypes.pythonapi.Py_IncRef
_incref.argtypes = [py_object]
_incref.restype = None
_decref = ctypes.pythonapi.Py_DecRef
_decref.argtypes = [c_void_p]
_decref.restype = None


class _Codec:
    """How Python values become elements and back. ``pack`` returns a ctypes object
    holding the element (or None for size 0), ``new`` an empty one, ``unpack`` the value."""

    size = 0

    def pack(self, value: Any) -> Any:
        if value is not None:
            raise TypeError("a signal channel (element size 0) sends no value: use send()")
        return None

    def new(self) -> Any:
        return None

    def unpack(self, buf: Any) -> Any:
        return None

    def dropped(self, buf: Any) -> None:
        """The element in `buf` was packed but not sent (try_send failed, closed)."""


class _SimpleCodec(_Codec):
    def __init__(self, ctype: Any):
        self.ctype = ctype
        self.size = sizeof(ctype)

    def pack(self, value: Any) -> Any:
        if isinstance(value, self.ctype):
            return value
        if isinstance(value, _SimpleCData):
            value = value.value
        return self.ctype(value)

    def new(self) -> Any:
        return self.ctype()

    def unpack(self, buf: Any) -> Any:
        return buf.value


class _IntCodec(_SimpleCodec):
    """An integer ctype: a value outside its range raises OverflowError (as struct.pack
    does) instead of being cut to its low bits (as ctypes does)."""

    def __init__(self, ctype: Any):
        super().__init__(ctype)
        bits = 8 * self.size
        signed = ctype._type_.islower()
        self.lo = -(1 << (bits - 1)) if signed else 0
        self.hi = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1

    def pack(self, value: Any) -> Any:
        if isinstance(value, int):  # bool too, as ctypes takes it
            if self.lo <= value <= self.hi:
                return self.ctype(value)
            raise OverflowError(
                f"{value} does not fit {self.ctype.__name__} ({self.lo}..{self.hi})")
        return super().pack(value)


class _FloatCodec(_SimpleCodec):
    """c_float: a finite value beyond its range raises OverflowError (as struct.pack
    does) instead of becoming infinity."""

    def pack(self, value: Any) -> Any:
        buf = super().pack(value)
        if isinstance(value, (int, float)) and buf.value in (_INF, -_INF) and value == value \
                and value not in (_INF, -_INF):
            raise OverflowError(f"{value} does not fit {self.ctype.__name__}")
        return buf


_INF = float("inf")
_INT_CODES = frozenset("bBhHiIlLqQ")


class _CompositeCodec(_Codec):
    def __init__(self, ctype: Any):
        self.ctype = ctype
        self.size = sizeof(ctype)

    def pack(self, value: Any) -> Any:
        if isinstance(value, self.ctype):
            return value
        if isinstance(value, tuple):
            return self.ctype(*value)
        raise TypeError(f"expected {self.ctype.__name__} or a tuple, not {type(value).__name__}")

    def new(self) -> Any:
        return self.ctype()

    def unpack(self, buf: Any) -> Any:
        return buf


class _BytesCodec(_Codec):
    def __init__(self, size: int):
        self.size = size
        self.ctype = c_char * size

    def pack(self, value: Any) -> Any:
        try:
            view = memoryview(value)
        except TypeError:
            raise TypeError(f"expected a bytes-like object, not {type(value).__name__}") from None
        if view.nbytes != self.size:
            raise ValueError(f"element must be exactly {self.size} bytes, got {view.nbytes}")
        return self.ctype.from_buffer_copy(view)

    def new(self) -> Any:
        return self.ctype()

    def unpack(self, buf: Any) -> Any:
        return buf.raw


class _ObjectCodec(_Codec):
    """A reference in flight: the sender raises the refcount, the receiver takes it over."""

    size = sizeof(c_void_p)

    def pack(self, value: Any) -> Any:
        _incref(value)
        return c_void_p(id(value))

    def new(self) -> Any:
        return c_void_p()

    def unpack(self, buf: Any) -> Any:
        if not buf.value:
            return None
        obj = ctypes.cast(buf, py_object).value
        _decref(buf.value)
        return obj

    def dropped(self, buf: Any) -> None:
        _decref(buf.value)


def _codec_for(elem: Any) -> _Codec:
    if elem is None:
        return _Codec()
    if elem is object:
        return _ObjectCodec()
    if isinstance(elem, bool) or not isinstance(elem, (int, type)):
        raise TypeError(
            "Chan element must be a ctypes type, a size in bytes, None or object, "
            f"not {elem!r}"
        )
    if isinstance(elem, int):
        if elem < 0:
            raise ValueError(f"element size must be >= 0, got {elem}")
        if elem > GMP_CHAN_MAX_ELEM:
            raise ImpossibleChannel(f"element size must be at most {GMP_CHAN_MAX_ELEM} bytes, got {elem}")
        return _BytesCodec(elem) if elem else _Codec()
    if issubclass(elem, _SimpleCData):
        code = getattr(elem, "_type_", "")
        if code in _INT_CODES:
            return _IntCodec(elem)
        if code == "f":
            return _FloatCodec(elem)
        return _SimpleCodec(elem)
    if issubclass(elem, (Structure, Union, Array)):
        return _CompositeCodec(elem)
    raise TypeError(f"Chan element must be a ctypes data type, not {elem.__name__}")


class ImpossibleChannel(OSError, ValueError):
    """A channel that cannot be made: an element over GMP_CHAN_MAX_ELEM bytes or a buffer
    whose size overflows. A ValueError, and for code written before it existed an
    OSError with errno EINVAL (what gmp_chan_make returns)."""

    def __init__(self, msg: str):
        super().__init__(_errno.EINVAL, msg)


def _checked_codec(elem: Any) -> _Codec:
    codec = _codec_for(elem)
    if codec.size > GMP_CHAN_MAX_ELEM:
        raise ImpossibleChannel(f"element size must be at most {GMP_CHAN_MAX_ELEM} bytes, "
                         f"got {codec.size} ({elem!r})")
    return codec


def _addr(buf: Any) -> int | None:
    return None if buf is None else addressof(buf)


class Chan(Generic[T]):
    """A Go channel shared by Python threads, Python goroutines and C goroutines.

    ``Chan(elem, cap=0)``: `elem` is a ctypes type, a size in bytes, ``None``/``0`` (no
    payload) or ``object`` (see the module doc); `cap` the buffer length (0: unbuffered,
    each send waits for its receiver).

    Blocking calls release the GIL. On the main thread they wait in 50 ms slices, so
    Ctrl-C interrupts them with KeyboardInterrupt (see :mod:`gmp_sched._errors`); a
    value received in the instant the interrupt is raised is lost, as with queue.Queue.

    Lifetime: the Chan releases its reference when garbage collected, and the last
    release must not happen while an operation on the channel is still in progress. C
    goroutines using the channel must be joined first (a WaitGroup), or hold their own
    reference: :meth:`retain` one for them (C gives it back with ``gmp_chan_release``).
    Closing wakes them but does not wait for them to leave the channel.
    """

    __slots__ = ("_ptr", "_codec", "_as_parameter_", "__weakref__")

    @overload
    def __init__(self: "Chan[int]", elem: type[_IntCType], cap: int = 0) -> None: ...
    @overload
    def __init__(self: "Chan[float]", elem: type[_FloatCType], cap: int = 0) -> None: ...
    @overload
    def __init__(self: "Chan[bool]", elem: type[ctypes.c_bool], cap: int = 0) -> None: ...
    @overload
    def __init__(self: "Chan[bytes]", elem: type[ctypes.c_char], cap: int = 0) -> None: ...
    @overload
    def __init__(self: "Chan[int | None]", elem: type[c_void_p], cap: int = 0) -> None: ...
    @overload
    def __init__(self, elem: type[T], cap: int = 0) -> None: ...  # Structure, Union, Array
    @overload
    def __init__(self: "Chan[None]", elem: None = None, cap: int = 0) -> None: ...
    @overload
    def __init__(self: "Chan[bytes]", elem: int, cap: int = 0) -> None: ...
    @overload
    def __init__(self: "Chan[Any]", elem: type[object], cap: int = 0) -> None: ...  # object

    def __init__(self, elem: Any = None, cap: int = 0) -> None:
        self._ptr = 0
        if isinstance(cap, bool) or not isinstance(cap, int):
            raise TypeError(f"cap must be an int, not {type(cap).__name__}")
        if cap < 0:
            raise ValueError(f"cap must be >= 0, got {cap}")
        self._codec = _checked_codec(elem)
        if cap >= 1 << 63:
            raise ImpossibleChannel(f"cap {cap} is impossible")
        out = c_void_p()
        r = lib.gmp_chan_make(ctypes.byref(out), self._codec.size, cap)
        if r == -_errno.EINVAL:
            raise ImpossibleChannel(f"cap {cap} of {self._codec.size}-byte elements is impossible")
        if r == -_errno.ENOMEM:
            raise MemoryError(f"no memory for a channel buffer of {cap} elements")
        check(r, "gmp_chan_make")
        self._ptr = out.value or 0
        self._as_parameter_ = self._ptr
        _count_wrapper(self)

    @classmethod
    def from_handle(cls, handle: int, elem: Any = None, retain: bool = True) -> "Chan[Any]":
        """Wraps a ``gmp_chan *`` made elsewhere (e.g. by C code). With ``retain=True``
        the Chan takes a reference of its own; with False it adopts the caller's.
        `elem` must give the channel's element size exactly (C copies that many bytes
        into the buffers this Chan allocates; the library cannot be asked for it)."""
        if not isinstance(handle, int) or not handle:
            raise ValueError("handle must be a non-NULL gmp_chan address")
        self = cls.__new__(cls)
        self._ptr = 0
        self._codec = _checked_codec(elem)
        if retain:
            check(lib.gmp_chan_retain(handle), "gmp_chan_retain")
        self._ptr = handle
        self._as_parameter_ = handle
        _count_wrapper(self)
        return self

    @property
    def handle(self) -> int:
        """The ``gmp_chan *`` as an int (what ``ch`` converts to in a ctypes call)."""
        return self._ptr

    @property
    def elem_size(self) -> int:
        return self._codec.size

    @property
    def cap(self) -> int:
        """The buffer's capacity (0: unbuffered)."""
        return check(lib.gmp_chan_cap(self._ptr), "gmp_chan_cap")

    def __len__(self) -> int:
        """Elements in the buffer now (a snapshot)."""
        return check(lib.gmp_chan_len(self._ptr), "gmp_chan_len")

    def __bool__(self) -> bool:
        """Always true: a channel is not a container (an empty one is still a channel)."""
        return True

    def retain(self) -> int:
        """Adds a reference for C code and returns the handle; C must release it."""
        check(lib.gmp_chan_retain(self._ptr), "gmp_chan_retain")
        _retained_for_c.add(self._ptr)
        return self._ptr

    def send(self, value: T = None, timeout: float | None = None) -> None:  # type: ignore[assignment]
        """Sends `value`, waiting for a receiver or buffer room (at most `timeout`
        seconds: TimeoutError). Raises ChannelClosed if the channel is or gets closed."""
        codec = self._codec
        buf = codec.pack(value)
        p = None if buf is None else addressof(buf)
        if timeout is None:
            if _get_ident() != _MAIN:
                r = _send(self._ptr, p)
            else:  # first slice inline: the common case returns from it
                r = _send_timeout(self._ptr, p, SLICE_NS)
                if r == -ETIMEDOUT:
                    r = _errors.sliced(_send_timeout, (self._ptr, p), -1, _now)
        else:
            tns = timeout_ns(timeout)
            if _get_ident() == _MAIN:
                r = _errors.sliced(_send_timeout, (self._ptr, p), tns, _now)
            else:
                r = _send_timeout(self._ptr, p, tns)
        if r:
            codec.dropped(buf)
            raise_errno(r, "send")

    def recv(self, timeout: float | None = None) -> T:
        """Receives a value, waiting for one (at most `timeout` seconds: TimeoutError).
        Raises ChannelClosed once the channel is closed and drained."""
        codec = self._codec
        buf = codec.new()
        p = None if buf is None else addressof(buf)
        if timeout is None:
            if _get_ident() != _MAIN:
                r = _recv(self._ptr, p)
            else:  # first slice inline: the common case returns from it
                r = _recv_timeout(self._ptr, p, SLICE_NS)
                if r == -ETIMEDOUT:
                    r = _errors.sliced(_recv_timeout, (self._ptr, p), -1, _now)
        else:
            tns = timeout_ns(timeout)
            if _get_ident() == _MAIN:
                r = _errors.sliced(_recv_timeout, (self._ptr, p), tns, _now)
            else:
                r = _recv_timeout(self._ptr, p, tns)
        if r:
            raise_errno(r, "recv")
        return codec.unpack(buf)  # type: ignore[no-any-return]

    def try_send(self, value: T = None) -> bool:  # type: ignore[assignment]
        """Sends without waiting: True if sent, False if it would block. Raises
        ChannelClosed if the channel is closed."""
        codec = self._codec
        buf = codec.pack(value)
        r = _try_send(self._ptr, _addr(buf))
        if r == 0:
            return True
        codec.dropped(buf)
        if r == -EAGAIN:
            return False
        raise_errno(r, "try_send")

    def try_recv(self) -> tuple[bool, T | None]:
        """Receives without waiting: ``(True, value)``, or ``(False, None)`` if it would
        block. Raises ChannelClosed once the channel is closed and drained."""
        codec = self._codec
        buf = codec.new()
        r = _try_recv(self._ptr, _addr(buf))
        if r == 0:
            return True, codec.unpack(buf)
        if r == -EAGAIN:
            return False, None
        raise_errno(r, "try_recv")

    def close(self) -> None:
        """Closes the channel: sends fail, receivers drain the buffer, then get
        ChannelClosed. Closing a closed channel raises ChannelClosed (Go panics)."""
        check(lib.gmp_chan_close(self._ptr), "close")

    def __iter__(self) -> Iterator[T]:
        """Receives until the channel is closed and drained."""
        while True:
            try:
                yield self.recv()
            except ChannelClosed:
                return

    def __enter__(self) -> "Chan[T]":
        return self

    def __exit__(self, *exc: object) -> None:
        """Closes the channel unless it is closed already."""
        r = lib.gmp_chan_close(self._ptr)
        if r not in (0, -EPIPE):
            raise_errno(r, "close")

    async def recv_async(self) -> T:
        """Awaits a value without blocking the event loop (see gmp_sched._aio)."""
        from ._aio import recv_async

        return await recv_async(self)  # type: ignore[no-any-return]

    async def __aiter__(self) -> AsyncIterator[T]:
        """``async for v in ch``: awaits values until the channel is closed and drained."""
        from ._aio import recv_async

        while True:
            try:
                yield await recv_async(self)
            except ChannelClosed:
                return

    async def send_async(self, value: T = None) -> None:  # type: ignore[assignment]
        """Awaits sending `value` without blocking the event loop (see gmp_sched._aio)."""
        from ._aio import send_async

        await send_async(self, value)

    def __repr__(self) -> str:
        return f"<Chan {self._ptr:#x} elem_size={self._codec.size}>"

    def __del__(self) -> None:
        ptr = getattr(self, "_ptr", 0)  # 0 or unset: __init__ failed before the channel
        if not ptr:
            return
        self._ptr = 0
        if isinstance(self._codec, _ObjectCodec) and _last_wrapper(ptr):
            # Give back the references still buffered: the channel dies with us. (When
            # C holds a reference too, they stay: a leak, not a theft.)
            buf = c_void_p()
            while lib.gmp_chan_try_recv(ptr, addressof(buf)) == 0:
                if buf.value:
                    _decref(buf.value)
        lib.gmp_chan_release(ptr)


# Object channels: Python wrappers alive per channel, and channels retained for C. The
# last wrapper of a channel nobody else holds gives back the buffered references.
_wrappers: dict[int, int] = {}
_retained_for_c: set[int] = set()
_wrappers_lock = threading.Lock()


def _count_wrapper(ch: Chan[Any]) -> None:
    if isinstance(ch._codec, _ObjectCodec):
        with _wrappers_lock:
            _wrappers[ch._ptr] = _wrappers.get(ch._ptr, 0) + 1


def _last_wrapper(ptr: int) -> bool:
    with _wrappers_lock:
        n = _wrappers.get(ptr, 1) - 1
        if n > 0:
            _wrappers[ptr] = n
            return False
        _wrappers.pop(ptr, None)
        if ptr in _retained_for_c:
            _retained_for_c.discard(ptr)
            return False
        return True


class Send:
    """A select case sending `value` on `chan` (None: the case never fires)."""

    __slots__ = ("chan", "value")

    def __init__(self, chan: Chan[Any] | None, value: Any = None):
        self.chan = chan
        self.value = value


class Recv:
    """A select case receiving from `chan` (None: the case never fires)."""

    __slots__ = ("chan",)

    def __init__(self, chan: Chan[Any] | None):
        self.chan = chan


Case = TUnion[Send, Recv, Chan[Any]]

#: What select returns for its default case.
DEFAULT = -1


def select(*cases: Case, default: bool = False, timeout: float | None = None) -> tuple[int, Any]:
    """Go's select: waits until one case can proceed, performs it and returns
    ``(index, value)`` (value: what a Recv case received, None for a Send case). A bare
    Chan is a Recv case; a case on ``None`` never fires. Among ready cases one is chosen
    at random.

    ``default=True``: returns ``(DEFAULT, None)`` (-1) at once if no case is ready.
    ``timeout`` seconds: TimeoutError when they pass. The case that fires on a closed
    channel raises ChannelClosed with ``index`` set (nothing was sent or received).
    Waiting forever on no case at all raises ValueError.
    """
    if default and timeout is not None:
        raise ValueError("select: default and timeout exclude each other")
    n = len(cases)
    arr = (gmp_select_case * max(n, 1))()
    bufs: list[Any] = [None] * n
    codecs: list[_Codec | None] = [None] * n
    live = 0
    for i, case in enumerate(cases):
        if isinstance(case, Chan):
            case = Recv(case)
        if isinstance(case, Recv):
            op = GMP_RECV
        elif isinstance(case, Send):
            op = GMP_SEND
        else:
            raise TypeError(f"select case {i} must be Send, Recv or Chan, not {type(case).__name__}")
        ch = case.chan
        arr[i].op = op
        if ch is None:
            continue
        if not isinstance(ch, Chan):
            raise TypeError(f"select case {i}: expected a Chan, not {type(ch).__name__}")
        codec = ch._codec
        buf = codec.pack(case.value) if op == GMP_SEND else codec.new()  # type: ignore[union-attr]
        bufs[i] = buf
        codecs[i] = codec
        arr[i].chan = ch._ptr
        arr[i].buf = _addr(buf)
        live += 1
    if live == 0 and not default and timeout is None:
        raise ValueError("select with no cases would wait forever")
    p = addressof(arr)
    try:
        if default:
            r = _select(p, n, 0)
        elif timeout is None and _get_ident() != _MAIN:
            r = _select(p, n, -1)
        else:
            tns = timeout_ns(timeout)
            if _get_ident() == _MAIN:
                r = _errors.sliced(_select, (p, n), tns, _now)
            else:
                r = _select(p, n, tns)
    except BaseException:
        _drop_unsent(cases, bufs, codecs, None)
        raise
    if r == -ETIMEDOUT and default:
        _drop_unsent(cases, bufs, codecs, None)
        return DEFAULT, None
    if r < 0:
        _drop_unsent(cases, bufs, codecs, None)
        raise_errno(r, "select")
    _drop_unsent(cases, bufs, codecs, r if arr[r].status == 0 else None)
    if arr[r].status == -EPIPE:
        raise ChannelClosed("select: channel closed", index=r)
    if arr[r].op == GMP_RECV:
        return r, codecs[r].unpack(bufs[r])
    return r, None


def _drop_unsent(cases: tuple[Case, ...], bufs: list[Any], codecs: list[_Codec | None],
                 sent: int | None) -> None:
    """Gives back what send cases packed but did not send (object channels' references)."""
    for i, codec in enumerate(codecs):
        if codec is None or i == sent or isinstance(cases[i], (Recv, Chan)):
            continue
        codec.dropped(bufs[i])

