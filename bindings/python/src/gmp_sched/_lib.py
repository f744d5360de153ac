"""Loading libgmp.so and declaring every function of include/gmp-sched/gmp.h for ctypes.

Which copy is loaded (one runtime per process):

1. a libgmp.so already mapped into the process (LD_PRELOAD, or linked by an extension
   module), found in /proc/self/maps and re-opened with RTLD_NOLOAD; it must export
   ``gmp_go`` (GNU MP's libgmp.so.10 does not, and is skipped);
2. the file named by the environment variable ``GMP_SCHED_LIBRARY`` (development);
3. the copy installed inside this package (``gmp_sched/libgmp.so.0``, named by its
   SONAME so that a C library linked against it with an rpath to the package finds it).

``ctypes.util.find_library("gmp")`` is never used: on a Linux system it finds GNU MP.

Every C function is declared in :data:`DECLARATIONS` (name -> restype, argtypes); the
test suite checks that every exported ``gmp_*`` symbol has an entry, and that each entry
matches the prototype in include/gmp-sched/gmp.h. Adding a function to the header means
adding one line here.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import (
    CFUNCTYPE,
    Structure,
    c_char_p,
    c_double,
    c_int,
    c_int32,
    c_int64,
    c_long,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path

# Constants of include/gmp-sched/gmp.h.
GMP_GO_PINNED = 1
GMP_GO_LOCKED = 2
GMP_MIN_STACK = 16384
GMP_MAX_STACK = 1073741824
GMP_MAX_PROCS = 1024
GMP_CHAN_MAX_ELEM = 65536
GMP_SEND = 1
GMP_RECV = 2
GMP_METRIC_BUCKETS = 32
GMP_METRIC_COUNTER = 0
GMP_METRIC_GAUGE = 1
GMP_METRIC_HISTOGRAM = 2

#: ``typedef void (*gmp_func)(void *arg)``
gmp_func = CFUNCTYPE(None, c_void_p)
#: ``typedef int64_t (*gmp_blocking_fn)(void *arg)``
gmp_blocking_fn = CFUNCTYPE(c_int64, c_void_p)


class gmp_attr(Structure):
    _fields_ = [("stack_size", c_size_t), ("flags", c_uint32)]


class gmp_wg(Structure):
    _fields_ = [("state", c_uint64), ("sema", c_uint32), ("reserved", c_uint32)]


class gmp_mutex(Structure):
    _fields_ = [("state", c_int32), ("sema", c_uint32)]


class gmp_rwmutex(Structure):
    _fields_ = [
        ("w", gmp_mutex),
        ("writer_sem", c_uint32),
        ("reader_sem", c_uint32),
        ("reader_count", c_int32),
        ("reader_wait", c_int32),
    ]


class gmp_cond(Structure):
    _fields_ = [
        ("wait", c_uint32),
        ("notify", c_uint32),
        ("lock", c_uint32),
        ("reserved", c_uint32),
        ("head", c_void_p),
        ("tail", c_void_p),
    ]


class gmp_once(Structure):
    _fields_ = [("done", c_uint32), ("m", gmp_mutex)]


class gmp_select_case(Structure):
    _fields_ = [("chan", c_void_p), ("op", c_uint32), ("buf", c_void_p), ("status", c_int32)]


class gmp_sched_stats(Structure):
    """The fields of ``gmp_sched_stats`` this binding knows. The library may append
    fields: :func:`gmp_sched.stats` hands it a larger buffer (``STATS_BUFFER_BYTES``)."""

    _fields_ = [
        ("gomaxprocs", c_int32),
        ("idleprocs", c_int32),
        ("threads", c_int32),
        ("spinningthreads", c_int32),
        ("needspinning", c_int32),
        ("idlethreads", c_int32),
        ("runqueue", c_int64),
        ("goroutines", c_int64),
        ("steals", c_uint64),
        ("spawned", c_uint64),
        ("schedticks", c_uint64),
        ("allg", c_uint64),
        ("preempt_requests", c_uint64),
        ("netpoll_polls", c_uint64),
        ("netpoll_readied", c_uint64),
        ("preempt_signals", c_uint64),
        ("async_preempts", c_uint64),
        ("async_refused_stale", c_uint64),
        ("async_refused_lib", c_uint64),
        ("async_refused_stack", c_uint64),
        ("async_skipped_blocked", c_uint64),
        ("unseen_signals", c_uint64),
        ("unseen_wrapped", c_uint64),
        ("deferred_closes", c_uint64),
        ("stack_samples", c_uint64),
        ("stack_high_water", c_uint64),
    ]


class gmp_metric(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("help", c_char_p),
        ("kind", c_uint32),
        ("value", c_uint64),
        ("sum", c_double),
        ("buckets", c_uint64 * GMP_METRIC_BUCKETS),
    ]


class gmp_stack_mark(Structure):
    _fields_ = [
        ("func", c_void_p),
        ("name", c_char_p),
        ("high_water", c_size_t),
        ("stack_size", c_size_t),
        ("samples", c_uint64),
    ]


#: Room for fields a newer library appends to gmp_sched_stats.
STATS_BUFFER_BYTES = 1024

# Every pointer but strings, function pointers included, is passed as void *: callers
# hand over plain addresses (ints), the cheapest argument ctypes converts.
P = c_void_p

#: name -> (restype, argtypes), in the order of include/gmp-sched/gmp.h.
DECLARATIONS: dict[str, tuple[object, list[object]]] = {
    "gmp_sched_version": (c_char_p, []),
    "gmp_go": (c_int64, [P, P]),
    "gmp_go_attr": (c_int64, [P, P, P]),
    "gmp_yield": (c_int, []),
    "gmp_goexit": (c_int, []),
    "gmp_goid": (c_int64, []),
    "gmp_maxprocs": (c_int, [c_int]),
    "gmp_num_goroutine": (c_int64, []),
    "gmp_num_cpu": (c_int, []),
    "gmp_set_default_stack_size": (c_int, [c_size_t]),
    "gmp_set_max_threads": (c_int, [c_int]),
    "gmp_wg_add": (c_int, [P, c_int64]),
    "gmp_wg_done": (c_int, [P]),
    "gmp_wg_wait": (c_int, [P]),
    "gmp_stats": (c_int, [P, P, c_size_t]),
    "gmp_chan_make": (c_int, [P, c_size_t, c_size_t]),
    "gmp_chan_retain": (c_int, [P]),
    "gmp_chan_release": (c_int, [P]),
    "gmp_chan_send": (c_int, [P, P]),
    "gmp_chan_recv": (c_int, [P, P]),
    "gmp_chan_try_send": (c_int, [P, P]),
    "gmp_chan_try_recv": (c_int, [P, P]),
    "gmp_chan_send_timeout": (c_int, [P, P, c_int64]),
    "gmp_chan_recv_timeout": (c_int, [P, P, c_int64]),
    "gmp_chan_close": (c_int, [P]),
    "gmp_chan_len": (c_int64, [P]),
    "gmp_chan_cap": (c_int64, [P]),
    "gmp_select": (c_int, [P, c_size_t, c_int64]),
    "gmp_mutex_lock": (c_int, [P]),
    "gmp_mutex_lock_nocancel": (c_int, [P]),
    "gmp_mutex_lock_slow": (c_int, [P]),
    "gmp_mutex_trylock": (c_int, [P]),
    "gmp_mutex_unlock": (c_int, [P]),
    "gmp_mutex_unlock_slow": (c_int, [P, c_int32]),
    "gmp_rwmutex_rlock": (c_int, [P]),
    "gmp_rwmutex_runlock": (c_int, [P]),
    "gmp_rwmutex_lock": (c_int, [P]),
    "gmp_rwmutex_unlock": (c_int, [P]),
    "gmp_rwmutex_trylock": (c_int, [P]),
    "gmp_rwmutex_tryrlock": (c_int, [P]),
    "gmp_cond_wait": (c_int, [P, P]),
    "gmp_cond_signal": (c_int, [P]),
    "gmp_cond_broadcast": (c_int, [P]),
    "gmp_once_do": (c_int, [P, P, P]),
    "gmp_entersyscall": (c_int, []),
    "gmp_exitsyscall": (c_int, []),
    "gmp_blocking": (c_int64, [P, P]),
    "gmp_read": (c_int64, [c_int, P, c_size_t]),
    "gmp_write": (c_int64, [c_int, P, c_size_t]),
    "gmp_pread": (c_int64, [c_int, P, c_size_t, c_int64]),
    "gmp_pwrite": (c_int64, [c_int, P, c_size_t, c_int64]),
    "gmp_open": (c_int, [c_char_p, c_int, c_int]),
    "gmp_close": (c_int, [c_int]),
    # The netpoller (sockets and pipes; socklen_t is unsigned int).
    # Seeing inside: the goroutine dump and the execution trace.
    "gmp_dump": (c_int, [c_int]),
    "gmp_trace_flight_latency": (c_int, [c_int64]),
    "gmp_trace_flight_start": (c_int, [c_uint32, c_uint32]),
    "gmp_trace_flight_stop": (c_int, []),
    "gmp_trace_flight_write": (c_int, [c_int]),
    "gmp_trace_start": (c_int, [c_char_p]),
    "gmp_trace_stop": (c_int, []),
    # A goroutine-leak handler (gmp_leak_fn: goid, reason, arg); NULL restores stderr.
    "gmp_set_leak_handler": (c_int, [P, P]),
    "gmp_leaks": (c_int, [c_int]),
    # Metrics (Go's runtime/metrics names) and their Prometheus text.
    "gmp_metrics": (c_int, [P, c_size_t]),
    "gmp_metric_bucket_bound": (c_int, [c_size_t, P]),
    "gmp_metrics_write_prometheus": (c_int, [c_int]),
    "gmp_stack_usage": (c_int, [P, c_size_t]),
    "gmp_labels_set": (c_int, [c_char_p, c_char_p]),
    "gmp_labels_get": (c_int, [c_char_p, c_char_p, c_size_t]),
    # The CPU profile (pprof's format).
    "gmp_cpuprofile_start": (c_int, [c_int, c_int]),
    "gmp_cpuprofile_stop": (c_int, []),
    # Scopes: cancellation and deadlines.
    "gmp_scope_begin": (c_int, [P, c_int64]),
    "gmp_scope_cancel": (c_int, [P]),
    "gmp_scope_err": (c_int, [P]),
    "gmp_scope_deadline": (c_int64, [P]),
    "gmp_scope_wait": (c_int, [P]),
    "gmp_scope_end": (c_int, [P]),
    "gmp_scope_current": (P, []),
    # Signals as channels (Go's os/signal).
    "gmp_signal_notify": (c_int, [P, P, c_size_t]),
    "gmp_signal_stop": (c_int, [P]),
    "gmp_fd_register": (c_int, [c_int]),
    "gmp_fd_unregister": (c_int, [c_int]),
    "gmp_fd_wait": (c_int, [c_int, c_uint32, c_int64]),
    "gmp_socket": (c_int, [c_int, c_int, c_int]),
    "gmp_pipe": (c_int, [P]),
    "gmp_accept": (c_int, [c_int, P, P, c_int]),
    "gmp_accept_timeout": (c_int, [c_int, P, P, c_int, c_int64]),
    "gmp_connect": (c_int, [c_int, P, c_uint32, c_int64]),
    "gmp_recv": (c_int64, [c_int, P, c_size_t, c_int]),
    "gmp_recv_timeout": (c_int64, [c_int, P, c_size_t, c_int, c_int64]),
    "gmp_send": (c_int64, [c_int, P, c_size_t, c_int]),
    "gmp_send_timeout": (c_int64, [c_int, P, c_size_t, c_int, c_int64]),
    "gmp_recvfrom": (c_int64, [c_int, P, c_size_t, c_int, P, P]),
    "gmp_recvfrom_timeout": (c_int64, [c_int, P, c_size_t, c_int, P, P, c_int64]),
    "gmp_sendto": (c_int64, [c_int, P, c_size_t, c_int, P, c_uint32]),
    "gmp_sendto_timeout": (c_int64, [c_int, P, c_size_t, c_int, P, c_uint32, c_int64]),
    "gmp_recvmsg": (c_int64, [c_int, P, c_int]),
    "gmp_recvmsg_timeout": (c_int64, [c_int, P, c_int, c_int64]),
    "gmp_sendmsg": (c_int64, [c_int, P, c_int]),
    "gmp_sendmsg_timeout": (c_int64, [c_int, P, c_int, c_int64]),
    "gmp_fsync": (c_int, [c_int]),
    "gmp_syscall": (c_long, [c_long] * 7),
    "gmp_lock_os_thread": (c_int, []),
    "gmp_unlock_os_thread": (c_int, []),
    "gmp_now": (c_int64, []),
    "gmp_sleep": (c_int, [c_int64]),
}


def _mapped_candidates() -> list[str]:
    """Paths of mapped files named libgmp.so* (ours is libgmp.so / libgmp.so.0)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    seen: list[str] = []
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        path = parts[5].strip()
        if os.path.basename(path).startswith("libgmp.so") and path not in seen:
            seen.append(path)
    return seen


def _open_loaded() -> ctypes.CDLL | None:
    for path in _mapped_candidates():
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:
            continue
        if hasattr(lib, "gmp_go"):
            return lib
    return None


def library_path() -> Path:
    """Where the copy shipped with this package is (it may not exist in a source tree)."""
    here = Path(__file__).resolve().parent
    soname = here / "libgmp.so.0"
    # libgmp.so: where versions before 0.2.0's wheel put it (an older editable build).
    return soname if soname.exists() or not (here / "libgmp.so").exists() else here / "libgmp.so"


def get_include() -> str:
    """The directory to put on a C compiler's include path for ``#include
    <gmp-sched/gmp.h>`` (and ``gmp.hpp``): the copy installed with the package, or in a
    source checkout (an editable install) the repository's ``include/``."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "include", here.parents[3] / "include" if len(here.parents) > 3 else None):
        if candidate is not None and (candidate / "gmp-sched" / "gmp.h").exists():
            return str(candidate)
    raise FileNotFoundError("gmp_sched: gmp-sched/gmp.h is not installed with this package")


def load() -> tuple[ctypes.CDLL, str]:
    """Opens libgmp (see the module doc for the order) and declares every function.

    Returns the library and how it was found ("loaded", "env" or "package")."""
    lib = _open_loaded()
    how = "loaded"
    if lib is None:
        env = os.environ.get("GMP_SCHED_LIBRARY")
        if env:
            lib, how = ctypes.CDLL(env), "env"
        else:
            path = library_path()
            if not path.exists():
                raise ImportError(
                    f"gmp_sched: {path} is missing; install the package with pip "
                    "(which builds libgmp.so with cargo) or set GMP_SCHED_LIBRARY"
                )
            lib, how = ctypes.CDLL(str(path)), "package"
        if not hasattr(lib, "gmp_go"):
            raise ImportError(f"gmp_sched: {lib._name} is not libgmp (no gmp_go symbol)")
    declare(lib)
    return lib, how


def declare(lib: ctypes.CDLL) -> None:
    """Sets restype/argtypes of every function in DECLARATIONS that `lib` exports (a
    function newer than the library stays undeclared and unavailable)."""
    for name, (restype, argtypes) in DECLARATIONS.items():
        fn = getattr(lib, name, None)
        if fn is None:
            continue
        fn.restype = restype
        fn.argtypes = argtypes


lib, how_loaded = load()
