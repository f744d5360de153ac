"""Goroutines from Python, and the runtime's knobs.

Two kinds of goroutine body:

* **A C function** (a ctypes function from a shared library, ``void fn(void *)``) runs
  as an ordinary goroutine: a few KiB of stack, parked and stolen like any other; this
  is how Python starts thousands of cheap goroutines. It gets one argument converted to
  ``void *`` (see :func:`as_voidp`); the caller keeps what it points to alive.
* **A Python callable** runs as a goroutine *locked to its own OS thread* (started
  with ``GMP_GO_LOCKED``, so locked before ctypes enters Python on the thread;
  ``gmp_unlock_os_thread`` is its last call). A lock taken inside the callback would be
  too late: ctypes has bound a thread state to the thread by then, and a lock on a
  thread that C goroutines are pinned to moves the goroutine to another thread.
  CPython ties a thread state to its OS thread, so Python code must not migrate, nor
  share its thread with another goroutine running Python: while it runs, the thread
  serves it alone, and a Python goroutine that waits keeps its thread asleep. So each
  live Python goroutine is one OS thread (the runtime starts threads as needed and
  reuses them after; the live count is bounded by ``gmp_set_max_threads``, 10,000),
  costing about what a ``threading.Thread`` costs, and it runs Python under the GIL.
  While it waits for the GIL its thread keeps its processor (P); other Ps steal the C
  goroutines queued behind it. The unlock at the end is safe: ctypes drops the thread
  state it made for the callback when the callback returns, and nothing between the
  unlock and the end of the goroutine can switch it to another thread.

  An exception escaping a Python goroutine is passed to ``gmp_sched.excepthook`` (by
  default: the traceback is printed to stderr) and the program continues, as with
  threading; the goroutine's handle also re-raises it from ``result()``.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import itertools
import sys
import threading
import time
import traceback
from ctypes import Array, Structure, Union, addressof, c_void_p, sizeof
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Generic, TypeVar

from . import _errors
from ._errors import Cancelled, ChannelClosed, check, timeout_ns
from ._lib import (
    GMP_GO_LOCKED,
    GMP_GO_PINNED,
    GMP_METRIC_BUCKETS,
    GMP_METRIC_HISTOGRAM,
    STATS_BUFFER_BYTES,
    gmp_attr,
    gmp_func,
    gmp_metric,
    gmp_sched_stats,
    gmp_stack_mark,
    lib,
)

if TYPE_CHECKING:
    from ._chan import Chan

R = TypeVar("R")

_SimpleCData: Any = ctypes.c_int.__mro__[1]  # ctypes._SimpleCData
_CFuncPtr: Any = type(lib.gmp_go).__mro__[1]  # ctypes._CFuncPtr


def _is_python_callback(fn: Any) -> bool:
    """A CFUNCTYPE object wrapping a Python callable (it owns a thunk)."""
    objs = getattr(fn, "_objects", None) or {}
    return any(type(v).__name__ == "CThunkObject" for v in objs.values())


def as_voidp(arg: Any) -> int | None:
    """The ``void *`` a C goroutine receives for `arg`: None -> NULL; an int -> that
    address; a Chan, WaitGroup, Mutex... -> its C object; a ctypes pointer -> its value;
    any other ctypes instance (Structure, array, c_int...) -> its address."""
    if arg is None:
        return None
    if isinstance(arg, bool):
        raise TypeError("a bool is not a goroutine argument")
    if isinstance(arg, int):
        return arg
    param = getattr(arg, "_as_parameter_", None)
    if isinstance(param, int):
        return param
    if isinstance(arg, (c_void_p, ctypes.c_char_p, _CFuncPtr)) or isinstance(arg, ctypes._Pointer):
        return ctypes.cast(arg, c_void_p).value
    if isinstance(arg, (Structure, Union, Array, _SimpleCData)):
        return addressof(arg)
    raise TypeError(f"cannot pass {type(arg).__name__} to a C goroutine as void *")


@dataclass(frozen=True)
class ExceptHookArgs:
    """What :func:`excepthook` receives."""

    exc_type: type[BaseException]
    exc_value: BaseException
    exc_traceback: Any
    goroutine: int
    fn: Callable[..., object]


def _default_excepthook(args: ExceptHookArgs) -> None:
    # A goroutine that let its scope's end propagate (Cancelled, or TimeoutError once
    # the scope's deadline passed) ended as the scope asked: nothing to report.
    e = _errors.scope_error()
    if e and isinstance(args.exc_value, Cancelled if -e == _errors.ECANCELED else TimeoutError):
        return
    name = getattr(args.fn, "__qualname__", repr(args.fn))
    print(f"Exception in goroutine {args.goroutine} ({name}):", file=sys.stderr)
    traceback.print_exception(args.exc_type, args.exc_value, args.exc_traceback, file=sys.stderr)


def _current_excepthook() -> Callable[[ExceptHookArgs], object]:
    """``gmp_sched.excepthook``: an attribute of the package, which users may assign."""
    pkg = sys.modules.get(__package__ or "gmp_sched")
    hook = getattr(pkg, "excepthook", None)
    return hook if callable(hook) else _default_excepthook


class Goroutine(int, Generic[R]):
    """What :func:`go` returns: the goroutine's id (an ``int``, as before) and, for a
    Python callable, a handle on its end in the manner of ``threading.Thread`` and
    ``concurrent.futures.Future``: :meth:`join`, :meth:`done`, :meth:`result`,
    :meth:`exception`.

    A C goroutine's end cannot be seen from Python (the C function runs as is): its
    handle is only the id, and those methods raise RuntimeError; join C goroutines with
    a WaitGroup."""

    # A C goroutine's handle sets nothing (it is only an int).
    _slot: "_Slot | None" = None

    @property
    def id(self) -> int:
        return int(self)

    def _chan(self) -> "Chan[None]":
        if self._slot is None:
            raise RuntimeError("a C goroutine cannot be joined from Python: use a WaitGroup")
        return self._slot.end

    def join(self, timeout: float | None = None) -> None:
        """Waits until the goroutine has finished, or `timeout` seconds have passed (then
        returns all the same, as ``threading.Thread.join``: see :meth:`done`). Ctrl-C
        interrupts it on the main thread."""
        end = self._chan()
        if int(self) == lib.gmp_goid():
            raise RuntimeError("a goroutine cannot join itself")
        try:
            end.recv(timeout)
        except (ChannelClosed, TimeoutError):
            return

    def done(self) -> bool:
        """True once the goroutine has finished (returned or raised)."""
        try:
            return self._chan().try_recv()[0]
        except ChannelClosed:
            return True

    def is_alive(self) -> bool:
        return not self.done()

    def result(self, timeout: float | None = None) -> R:
        """What the callable returned, once it has; re-raises what it raised. Raises
        TimeoutError if it has not finished within `timeout` seconds."""
        self.join(timeout)
        if not self.done():
            raise TimeoutError(f"goroutine {int(self)} has not finished")
        result, exc = self._slot.outcome  # type: ignore[union-attr]
        if exc is not None:
            raise exc
        return result  # type: ignore[no-any-return]

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """What the callable raised (None if it returned), once it has finished."""
        self.join(timeout)
        if not self.done():
            raise TimeoutError(f"goroutine {int(self)} has not finished")
        return self._slot.outcome[1]  # type: ignore[union-attr]

    def __repr__(self) -> str:
        if self._slot is None:
            return f"<Goroutine {int(self)} (C)>"
        return f"<Goroutine {int(self)} {self._slot.name} {'done' if self.done() else 'running'}>"

    __str__ = int.__repr__


class _Slot:
    """A Python goroutine's end: a channel closed when it has finished, and its outcome
    (result, exception), set before the close."""

    __slots__ = ("end", "outcome", "name")

    def __init__(self, end: "Chan[None]", name: str):
        self.end = end
        self.name = name
        self.outcome: tuple[Any, BaseException | None] = (None, None)


# Python goroutines waiting to start: key (the void * argument) -> (fn, args, kwargs, slot).
_pending: dict[int, tuple[Callable[..., object], tuple[Any, ...], dict[str, Any], _Slot]] = {}
_keys = itertools.count(1)
_live_lock = threading.Lock()
_live = 0


def _py_goroutine(key: int | None) -> None:
    global _live
    fn, args, kwargs, slot = _pending.pop(key or 0)
    result: Any = None
    exc: BaseException | None = None
    try:
        result = fn(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001 - reported to the hook, as threading does
        exc = e
        try:
            _current_excepthook()(ExceptHookArgs(type(e), e, e.__traceback__, lib.gmp_goid(), fn))
        except BaseException:  # noqa: BLE001 - a failing hook must not kill the thread
            traceback.print_exc()
    finally:
        # From here on the GIL is kept (the calls below go through ctypes.PyDLL): a
        # thread that gave it away now would need it back, and once the interpreter has
        # begun to finalize, CPython ends such a thread with pthread_exit, which the
        # runtime refuses in a goroutine (it aborts the process).
        slot.outcome = (result, exc)
        _close_keep_gil(slot.end.handle)
        with _live_lock:
            _live -= 1
        # Back to an ordinary M: when this callback returns, ctypes drops the thread
        # state PyGILState_Ensure made for it, and nothing between here and the end of
        # the goroutine can switch, so the thread may serve other goroutines (a thread
        # exiting locked would be ended and its M leaked).
        _unlock_keep_gil()


_pylib = ctypes.PyDLL(lib._name)
_close_keep_gil = _pylib.gmp_chan_close
_close_keep_gil.argtypes = [c_void_p]
_close_keep_gil.restype = ctypes.c_int
_unlock_keep_gil = _pylib.gmp_unlock_os_thread
_unlock_keep_gil.argtypes = []
_unlock_keep_gil.restype = ctypes.c_int

_started_any = False

#: At exit, how long to wait for the number of live Python goroutines to drop before
#: giving up on the rest (seconds).
EXIT_GRACE_S = 0.1


def _wait_at_exit() -> None:
    """Lets Python goroutines that are finishing finish before the interpreter
    finalizes: a goroutine still in Python then, or coming back from C to Python, gives
    up the GIL to the finalizing main thread and is ended by CPython with pthread_exit,
    which the runtime refuses in a goroutine (it aborts the process). Waits as long as
    their number keeps dropping (EXIT_GRACE_S at a time), then for the runtime's count of
    goroutines to settle: a goroutine has left Python for good only when it has ended,
    after the last Python step that could be counted. Goroutines blocked for good are
    left, as daemon threads are."""
    if not _started_any:
        return
    last = _live
    deadline = time.monotonic() + EXIT_GRACE_S
    while last > 0:
        time.sleep(0.001)
        now_live = _live
        if now_live < last:
            last, deadline = now_live, time.monotonic() + EXIT_GRACE_S
        elif time.monotonic() >= deadline:
            return
    # The count settles when no goroutine has ended for 5 ms running.
    n = lib.gmp_num_goroutine()
    settled = time.monotonic() + 0.005
    while time.monotonic() < min(settled, deadline):
        time.sleep(0.001)
        m = lib.gmp_num_goroutine()
        if m < n:
            n, settled = m, time.monotonic() + 0.005


atexit.register(_wait_at_exit)

# One trampoline for every Python goroutine, alive as long as the module: a ctypes
# callback must outlive each call into it.
_TRAMPOLINE = gmp_func(_py_goroutine)
_TRAMPOLINE_ADDR = ctypes.cast(_TRAMPOLINE, c_void_p).value

# The last C function started and its address, one tuple so that threads racing in
# go() never pair one function with another's address.
_last: tuple[Any, int] = (None, 0)


def go(
    fn: Callable[..., R],
    *args: Any,
    stack_size: int | None = None,
    pinned: bool = False,
    locked: bool = False,
    **kwargs: Any,
) -> Goroutine[R]:
    """Starts a goroutine and returns its :class:`Goroutine` handle (an int: its id).

    `fn` is a C function (``void fn(void *)``, a ctypes function of a shared library),
    given at most one argument (converted by :func:`as_voidp`), or a Python callable,
    called with ``*args, **kwargs`` on its own OS thread (see the module doc); the
    handle joins it and gives its result. `stack_size` (bytes), `pinned`
    (GMP_GO_PINNED) and `locked` (GMP_GO_LOCKED: started locked to its thread) are
    gmp_attr's fields, never passed on to `fn` (wrap it in ``functools.partial`` to pass
    arguments of those names); the last two are for C goroutines (Python goroutines are
    always locked).
    """
    global _last, _live, _started_any
    attr = None
    if stack_size is not None or pinned or locked:
        a = gmp_attr()
        if stack_size is not None:
            if isinstance(stack_size, bool) or not isinstance(stack_size, int) or stack_size <= 0:
                raise ValueError(f"stack_size must be a positive int, got {stack_size!r}")
            a.stack_size = stack_size
        a.flags = (GMP_GO_PINNED if pinned else 0) | (GMP_GO_LOCKED if locked else 0)
        attr = a
    if isinstance(fn, _CFuncPtr) and not _is_python_callback(fn):
        if kwargs:
            raise TypeError("a C goroutine takes no keyword arguments")
        if len(args) > 1:
            raise TypeError("a C goroutine takes at most one argument (a void *)")
        arg = as_voidp(args[0]) if args else None
        last_fn, addr = _last
        if fn is not last_fn:
            addr = ctypes.cast(fn, c_void_p).value or 0
            _last = (fn, addr)
        if attr is None:
            r = lib.gmp_go(addr, arg)
        else:
            r = lib.gmp_go_attr(addr, arg, ctypes.byref(attr))
        return Goroutine(check(r, "gmp_go"))
    if isinstance(fn, _CFuncPtr):
        raise TypeError(
            "a ctypes callback wrapping a Python function cannot run as a plain goroutine: "
            "pass the Python callable itself"
        )
    if not callable(fn):
        raise TypeError(f"go() needs a C function or a callable, not {type(fn).__name__}")
    if pinned or locked:
        raise ValueError(
            "pinned and locked apply to C goroutines (Python goroutines are locked)"
        )
    from ._chan import Chan

    _started_any = True
    key = next(_keys)
    slot = _Slot(Chan(None), getattr(fn, "__qualname__", None) or type(fn).__name__)
    _pending[key] = (fn, args, kwargs, slot)
    with _live_lock:
        _live += 1
    if attr is None:
        attr = gmp_attr()
    attr.flags = GMP_GO_LOCKED
    r = lib.gmp_go_attr(_TRAMPOLINE_ADDR, key, ctypes.byref(attr))
    if r < 0:
        _pending.pop(key, None)
        with _live_lock:
            _live -= 1
        check(r, "gmp_go")
    handle: Goroutine[R] = Goroutine(r)
    handle._slot = slot
    return handle


def python_goroutines() -> int:
    """Python goroutines started and not yet finished."""
    return _live


def call_once(addr: int, fn: Callable[..., object], args: tuple[Any, ...]) -> None:
    """gmp_once_do(addr, fn(*args)): the exception fn raised, if it ran here, propagates."""
    caught: list[BaseException] = []

    def body(_: int | None) -> None:
        try:
            fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised below, in the caller
            caught.append(e)

    cb = gmp_func(body)
    check(lib.gmp_once_do(addr, ctypes.cast(cb, c_void_p).value, None), "gmp_once_do")
    if caught:
        raise caught[0]


def sleep(seconds: float) -> None:
    """Sleeps (a goroutine parks on a timer; a thread sleeps in the kernel, on the main
    thread in slices that Ctrl-C interrupts). ``seconds <= 0`` only yields. In a scope
    that ends first, raises :class:`Cancelled` or ``TimeoutError``."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError("seconds must be a number")
    if seconds <= 0:
        lib.gmp_sleep(0)
        return
    ns = timeout_ns(seconds)
    if not _errors.on_main_thread():
        check(lib.gmp_sleep(ns), "sleep")
        return
    deadline = lib.gmp_now() + ns
    while True:
        left = deadline - lib.gmp_now()
        if left <= 0:
            return
        check(lib.gmp_sleep(min(left, _errors.SLICE_NS)), "sleep")


def gosched() -> None:
    """Yields the processor (Go's runtime.Gosched); on a plain thread, sched_yield."""
    lib.gmp_yield()


def goid() -> int:
    """The calling goroutine's id, 0 on a thread that is not a goroutine."""
    return int(lib.gmp_goid())


def set_label(key: str, value: str | None) -> None:
    """Sets the calling goroutine's label ``key`` (``None`` removes it), as Go's
    ``pprof.SetGoroutineLabels``: goroutines started afterwards inherit the labels, and the
    goroutine dump shows them. On a thread that is not a goroutine it sets the labels that
    thread gives the goroutines it starts."""
    if not key:
        raise ValueError("a label key must not be empty")
    check(
        lib.gmp_labels_set(key.encode(), None if value is None else value.encode()),
        "gmp_labels_set",
    )


def get_label(key: str) -> str | None:
    """The calling goroutine's (or thread's) label ``key``, or ``None``."""
    k = key.encode()
    n = lib.gmp_labels_get(k, None, 0)
    if n == -errno.ENOENT:
        return None
    n = check(n, "gmp_labels_get")
    buf = ctypes.create_string_buffer(n + 1)
    check(lib.gmp_labels_get(k, buf, n + 1), "gmp_labels_get")
    return buf.value.decode(errors="replace")


def cpuprofile_start(file: Any, hz: int = 100) -> None:
    """Starts a CPU profile (Go's ``pprof.StartCPUProfile``): the threads that run
    goroutines are sampled ``hz`` times per second of their CPU time (0: 100), each sample
    with its goroutine's id and labels. ``file`` is a file descriptor or an object with
    ``fileno()``; :func:`cpuprofile_stop` writes the profile there in pprof's format
    (``go tool pprof -top file``). Raises OSError: EBUSY if a profile runs or SIGPROF has
    another handler, EBADF for a closed file, EINVAL for ``hz`` above 10000."""
    fd = file if isinstance(file, int) else file.fileno()
    if isinstance(hz, bool) or not isinstance(hz, int):
        raise TypeError(f"hz must be an int, not {type(hz).__name__}")
    check(lib.gmp_cpuprofile_start(fd, hz), "gmp_cpuprofile_start")


def cpuprofile_stop() -> None:
    """Stops the CPU profile and writes it. Raises OSError (EINVAL) if none runs."""
    check(lib.gmp_cpuprofile_stop(), "gmp_cpuprofile_stop")


def maxprocs(n: int | None = None) -> int:
    """Returns GOMAXPROCS; with `n` (1..1024) sets it and returns the previous value."""
    if n is None:
        return check(lib.gmp_maxprocs(0), "gmp_maxprocs")
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"n must be an int, not {type(n).__name__}")
    if not 1 <= n <= 1024:
        raise ValueError(f"maxprocs must be in 1..1024, got {n}")
    return check(lib.gmp_maxprocs(n), "gmp_maxprocs")


def num_goroutine() -> int:
    """Live goroutines."""
    return check(lib.gmp_num_goroutine(), "gmp_num_goroutine")


def num_cpu() -> int:
    """CPUs the process may run on."""
    return check(lib.gmp_num_cpu(), "gmp_num_cpu")


def now() -> int:
    """The runtime's monotonic clock, in nanoseconds."""
    return int(lib.gmp_now())


def set_default_stack_size(nbytes: int) -> None:
    """Stack size of goroutines started without one (16 KiB .. 1 GiB)."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError(f"stack size must be a non-negative int, got {nbytes!r}")
    check(lib.gmp_set_default_stack_size(nbytes), "gmp_set_default_stack_size")


def set_max_threads(n: int) -> int:
    """Sets the thread-count fuse; returns the previous value."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"max threads must be an int >= 1, got {n!r}")
    return check(lib.gmp_set_max_threads(n), "gmp_set_max_threads")


@dataclass(frozen=True)
class SchedStats:
    """Scheduler statistics (Go's schedtrace fields plus counters since start)."""

    gomaxprocs: int
    idleprocs: int
    threads: int
    spinningthreads: int
    needspinning: int
    idlethreads: int
    runqueue: int
    goroutines: int
    steals: int
    spawned: int
    schedticks: int
    #: Goroutine records ever allocated (reused, never freed).
    allg: int
    #: Preemption requests (10 ms slices), and the network poller's polls and readied
    #: goroutines.
    preempt_requests: int
    netpoll_polls: int
    netpoll_readied: int
    #: Asynchronous preemption: signals sent, goroutines stopped, and refusals by reason.
    preempt_signals: int
    async_preempts: int
    async_refused_stale: int
    async_refused_lib: int
    async_refused_stack: int
    async_skipped_blocked: int
    unseen_signals: int
    unseen_wrapped: int
    deferred_closes: int
    #: Stack high-water marks (:func:`stack_usage`): goroutines measured, and the
    #: deepest mark of all in bytes.
    stack_samples: int
    stack_high_water: int
    #: Local run queue length of each processor.
    runq_lens: tuple[int, ...] = field(default=())


def stats() -> SchedStats:
    """A snapshot of the scheduler's state."""
    raw = (ctypes.c_uint64 * (STATS_BUFFER_BYTES // 8))()
    lens = (ctypes.c_uint32 * 1024)()
    n = check(lib.gmp_stats(addressof(raw), addressof(lens), len(lens)), "gmp_stats")
    s = gmp_sched_stats.from_buffer(raw)
    assert sizeof(s) <= STATS_BUFFER_BYTES
    values = {f[0]: getattr(s, f[0]) for f in gmp_sched_stats._fields_}
    return SchedStats(**values, runq_lens=tuple(lens[:n]))


@dataclass(frozen=True)
class Histogram:
    """A histogram metric: ``buckets`` pairs each bucket's upper bound (seconds; the last
    is infinite) with its count (not cumulative)."""

    count: int
    sum: float
    buckets: tuple[tuple[float, int], ...]


@dataclass(frozen=True)
class StackMark:
    """The stack high-water mark of one start function (``gmp_stack_usage``)."""

    #: The start function's address, and its symbol name when its object exports it.
    func: int
    name: str | None
    #: The deepest its measured goroutines went, in bytes from the top of the stack (a
    #: multiple of the page size), and the size of the stack of the last one measured.
    high_water: int
    stack_size: int
    #: Goroutines measured.
    samples: int


def stack_usage() -> list[StackMark]:
    """The stack high-water marks measured so far, one per start function, deepest first.
    Each thread measures at most one goroutine it starts every 4 ms
    (``GMP_DEBUG=stackhwm=N``: one start in N)."""
    n = check(lib.gmp_stack_usage(None, 0), "gmp_stack_usage")
    arr = (gmp_stack_mark * n)()
    n = min(n, check(lib.gmp_stack_usage(addressof(arr), n), "gmp_stack_usage"))
    return [
        StackMark(
            m.func or 0,
            m.name.decode(errors="replace") if m.name else None,
            m.high_water,
            m.stack_size,
            m.samples,
        )
        for m in arr[:n]
    ]


def metrics() -> dict[str, int | Histogram]:
    """The scheduler's metrics by their Go runtime/metrics names (``gmp_metrics``):
    ``"/sched/goroutines:goroutines"`` is an int, ``"/sched/latencies:seconds"`` a
    :class:`Histogram`."""
    n = check(lib.gmp_metrics(None, 0), "gmp_metrics")
    arr = (gmp_metric * n)()
    n = min(n, check(lib.gmp_metrics(addressof(arr), n), "gmp_metrics"))
    bounds = []
    for i in range(GMP_METRIC_BUCKETS):
        b = ctypes.c_double()
        check(lib.gmp_metric_bucket_bound(i, addressof(b)), "gmp_metric_bucket_bound")
        bounds.append(b.value)
    out: dict[str, int | Histogram] = {}
    for m in arr[:n]:
        name = m.name.decode()
        if m.kind == GMP_METRIC_HISTOGRAM:
            out[name] = Histogram(m.value, m.sum, tuple(zip(bounds, m.buckets)))
        else:
            out[name] = m.value
    return out
