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
Errors: ChannelClosed, TimeoutError, OSError(errno); bad arguments TypeError/ValueError.
"""

from ._aio import recv_async, send_async
from ._chan import DEFAULT, Chan, Recv, Send, select
from ._errors import ChannelClosed
from ._go import (
    ExceptHookArgs,
    SchedStats,
    as_voidp,
    go,
    goid,
    gosched,
    maxprocs,
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
from ._sync import Cond, Mutex, Once, RWMutex, WaitGroup

__version__ = "0.2.0"


def __getattr__(name: str) -> object:
    # gmp_sched.excepthook lives in _go (the trampoline reads it there); reading it
    # through the package gives the current hook.
    if name == "excepthook":
        from . import _go

        return _go.excepthook
    raise AttributeError(name)


def set_excepthook(hook: "object") -> None:
    """Sets the function called with an ExceptHookArgs when a Python goroutine raises
    (None restores the default, which prints the traceback)."""
    from . import _go

    _go.excepthook = hook if hook is not None else _go._default_excepthook  # type: ignore[assignment]


__all__ = [
    "DEFAULT",
    "Chan",
    "ChannelClosed",
    "Cond",
    "ExceptHookArgs",
    "Mutex",
    "Once",
    "RWMutex",
    "Recv",
    "SchedStats",
    "Send",
    "WaitGroup",
    "as_voidp",
    "get_include",
    "go",
    "goid",
    "gosched",
    "how_loaded",
    "lib",
    "maxprocs",
    "now",
    "num_cpu",
    "num_goroutine",
    "python_goroutines",
    "recv_async",
    "select",
    "send_async",
    "set_default_stack_size",
    "set_excepthook",
    "set_max_threads",
    "sleep",
    "stats",
]
