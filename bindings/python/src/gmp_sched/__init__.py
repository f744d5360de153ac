"""gmp_sched: goroutines, channels and select from Python, on libgmp (Go's M:P:G
scheduler as a C library; not GNU MP).

    import ctypes, gmp_sched as gs

    lib = ctypes.CDLL("./libwork.so")     # void worker(void *chan): reads until closed
    jobs = gs.Chan(ctypes.c_int64, cap=64)
    for _ in range(1000):
        gs.go(lib.worker, jobs)            # 1000 cheap C goroutines
    for n in range(10_000):
        jobs.send(n)                       # releases the GIL; Ctrl-C interrupts it
    jobs.close()                           # (join the workers before dropping jobs)

The rules: C functions run as ordinary goroutines (thousands are cheap); Python callables
run as goroutines locked to an OS thread each (a thread's cost; they take the GIL);
blocking calls release the GIL; on the main thread they are interruptible by Ctrl-C.
``with gmp_sched.scope(timeout) as s:`` is Go's context as a nursery: cancelling it or
its deadline ends every wait of the goroutines started in it, and the block's end waits
for them.
Errors: ChannelClosed, TimeoutError, Cancelled, OSError(errno); bad arguments
TypeError/ValueError.
"""

from __future__ import annotations

from typing import Callable

from ._aio import recv_async, send_async
from ._chan import DEFAULT, Chan, Recv, Send, select
from ._errors import Cancelled, ChannelClosed
from ._go import (
    ExceptHookArgs,
    Goroutine,
    _default_excepthook,
    cpuprofile_start,
    cpuprofile_stop,
    Histogram,
    SchedStats,
    StackMark,
    as_voidp,
    go,
    goid,
    gosched,
    maxprocs,
    get_label,
    metrics,
    set_label,
    stack_usage,
    now,
    num_cpu,
    num_goroutine,
    python_goroutines,
    set_default_stack_size,
    set_max_threads,
    sleep,
    stats,
)
from ._lib import get_include, how_loaded, lib
from ._scope import Scope, scope
from ._signal import signal_notify, signal_stop
from ._sync import Cond, Mutex, Once, RWMutex, WaitGroup

__version__ = "0.2.0"


#: Called with an :class:`ExceptHookArgs` when a Python goroutine raises (as
#: ``threading.excepthook``): assign it, or call :func:`set_excepthook`. The default
#: prints the traceback to stderr.
excepthook: Callable[[ExceptHookArgs], object] = _default_excepthook


def set_excepthook(hook: Callable[[ExceptHookArgs], object] | None) -> None:
    """Sets ``gmp_sched.excepthook`` (None restores the default, which prints the
    traceback)."""
    global excepthook
    excepthook = hook if hook is not None else _default_excepthook


__all__ = [
    "DEFAULT",
    "Cancelled",
    "Chan",
    "ChannelClosed",
    "Cond",
    "ExceptHookArgs",
    "Goroutine",
    "Histogram",
    "Mutex",
    "Once",
    "RWMutex",
    "Recv",
    "SchedStats",
    "Scope",
    "StackMark",
    "Send",
    "WaitGroup",
    "as_voidp",
    "cpuprofile_start",
    "cpuprofile_stop",
    "get_include",
    "excepthook",
    "go",
    "goid",
    "gosched",
    "how_loaded",
    "lib",
    "maxprocs",
    "get_label",
    "metrics",
    "set_label",
    "stack_usage",
    "now",
    "num_cpu",
    "num_goroutine",
    "python_goroutines",
    "recv_async",
    "scope",
    "select",
    "send_async",
    "set_default_stack_size",
    "set_excepthook",
    "set_max_threads",
    "signal_notify",
    "signal_stop",
    "sleep",
    "stats",
]
