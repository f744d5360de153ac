"""WaitGroup, Mutex, RWMutex, Cond and Once over libgmp's parking primitives.

Each object owns its C struct (8-byte aligned, in memory Python allocated) and converts
to its address in ctypes calls, so ``go(c_worker, wg)`` hands the C goroutine a
``gmp_wg *``. Keep the Python object alive while goroutines use it.

Misuse that libgmp answers by aborting the process (Go panics) is checked here first
and raised as an exception instead: a negative WaitGroup counter (ValueError), unlocking
an unlocked Mutex/RWMutex (RuntimeError). The checks read the lock word without
synchronising, so they catch the misuse of a single thread, not every race.

Waiting from the main thread goes through a helper thread so that Ctrl-C interrupts it
(see :mod:`gmp_sched._errors`); elsewhere the call blocks in C with the GIL released.
Cond.wait and Once are not interruptible.

Timeouts: C has no timed form of these waits. ``Mutex.acquire(timeout=)`` polls
``gmp_mutex_trylock`` (backing off from 20 µs to 2 ms: it may lose the lock to a
goroutine that arrives later, and sees it free up to 2 ms late). ``WaitGroup.wait`` and
the RWMutex locks with a timeout wait on a helper thread; when the timeout passes (or
Ctrl-C interrupts the main thread) that helper stays queued as a waiter and, if it gets
the lock later, releases it at once: meanwhile the lock may look taken.
"""

from __future__ import annotations

import ctypes
import time
from ctypes import addressof, c_uint64, sizeof
from typing import Any, Callable, TypeVar

from . import _errors
from ._errors import EBUSY, check, run_on_helper
from ._lib import gmp_cond, gmp_mutex, gmp_once, gmp_rwmutex, gmp_wg, lib

S = TypeVar("S", bound=ctypes.Structure)

_RWMUTEX_MAX_READERS = 1 << 30


def _aligned(struct: type[S]) -> tuple[S, ctypes.Array[c_uint64]]:
    """A zeroed `struct` inside an array of uint64 (so 8-byte aligned)."""
    backing = (c_uint64 * ((sizeof(struct) + 7) // 8))()
    return struct.from_buffer(backing), backing


def _wait(call: Callable[[int], int], owner: Any, undo: Callable[[], object] | None,
          timeout: float | None, what: str) -> bool:
    """Blocks in ``call(owner's address)``: directly, or through a helper thread (which
    keeps `owner` alive) on the main thread or with a timeout. False on timeout."""
    addr = owner._addr
    if timeout is None and not _errors.on_main_thread():
        check(call(addr), what)
        return True
    _errors.timeout_ns(timeout)  # validates
    r = run_on_helper(call, (addr,), undo, timeout, owner)
    if r is None:
        return False
    check(r, what)
    return True


class WaitGroup:
    """Go's sync.WaitGroup. ``with WaitGroup() as wg: ...`` waits on leaving the block."""

    __slots__ = ("_wg", "_backing", "_addr", "_as_parameter_")

    def __init__(self) -> None:
        self._wg, self._backing = _aligned(gmp_wg)
        self._addr = addressof(self._wg)
        self._as_parameter_ = self._addr

    @property
    def count(self) -> int:
        """The counter now (a snapshot)."""
        c = int(self._wg.state) >> 32
        return c - (1 << 32) if c >= 1 << 31 else c

    def add(self, delta: int = 1) -> None:
        """Adds `delta` (may be negative) to the counter; ValueError if it would go
        below zero or |delta| exceeds 2**31 - 1."""
        if isinstance(delta, bool) or not isinstance(delta, int):
            raise TypeError(f"delta must be an int, not {type(delta).__name__}")
        if abs(delta) > 0x7FFFFFFF:
            raise ValueError("WaitGroup delta out of range")
        if self.count + delta < 0:
            raise ValueError("negative WaitGroup counter")
        check(lib.gmp_wg_add(self._addr, delta), "gmp_wg_add")

    def done(self) -> None:
        """Decrements the counter by one."""
        self.add(-1)

    def wait(self, timeout: float | None = None) -> bool:
        """Waits until the counter is zero; False if `timeout` seconds passed first."""
        _errors.timeout_ns(timeout)  # validates
        if self.count == 0:
            check(lib.gmp_wg_wait(self._addr), "gmp_wg_wait")
            return True
        return _wait(lib.gmp_wg_wait, self, None, timeout, "gmp_wg_wait")

    def __enter__(self) -> "WaitGroup":
        return self

    def __exit__(self, *exc: object) -> None:
        self.wait()


class Mutex:
    """Go's sync.Mutex (not recursive, not owned by a thread). ``with m:`` locks it."""

    __slots__ = ("_m", "_backing", "_addr", "_as_parameter_")

    def __init__(self) -> None:
        self._m, self._backing = _aligned(gmp_mutex)
        self._addr = addressof(self._m)
        self._as_parameter_ = self._addr

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Locks it; returns False if not blocking and it is held, or `timeout` seconds
        passed (the same contract as threading.Lock.acquire, with None for no limit)."""
        _errors.timeout_ns(timeout)  # validates
        if lib.gmp_mutex_trylock(self._addr) == 0:
            return True
        if not blocking:
            return False
        if timeout is None:
            return _wait(lib.gmp_mutex_lock, self, self._unlock_raw, None, "gmp_mutex_lock")
        # No timed lock in C: poll trylock, backing off from 20 µs to 2 ms. (A helper
        # thread blocked in gmp_mutex_lock would take the lock after the timeout and
        # hand it back: a try_lock in between would fail for nothing.)
        deadline = time.monotonic() + timeout
        delay = 20e-6
        while True:
            if lib.gmp_mutex_trylock(self._addr) == 0:
                return True
            e = _errors.scope_error()
            if e:
                check(e, "gmp_mutex_lock")
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(delay, left))
            delay = min(delay * 2, 2e-3)

    def lock(self) -> None:
        """Locks it, waiting as long as it takes."""
        self.acquire()

    def try_lock(self) -> bool:
        """Locks it if free: True if the caller now holds it."""
        r = lib.gmp_mutex_trylock(self._addr)
        if r == -EBUSY:
            return False
        check(r, "gmp_mutex_trylock")
        return True

    def locked(self) -> bool:
        return bool(self._m.state & 1)

    def release(self) -> None:
        """Unlocks it (any thread may); RuntimeError if it is not locked."""
        if not self._m.state & 1:
            raise RuntimeError("unlock of unlocked mutex")
        check(lib.gmp_mutex_unlock(self._addr), "gmp_mutex_unlock")

    unlock = release

    def _unlock_raw(self) -> None:
        lib.gmp_mutex_unlock(self._addr)

    def __enter__(self) -> "Mutex":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class _ReadLocker:
    __slots__ = ("_rw",)

    def __init__(self, rw: "RWMutex"):
        self._rw = rw

    def __enter__(self) -> "RWMutex":
        self._rw.rlock()
        return self._rw

    def __exit__(self, *exc: object) -> None:
        self._rw.runlock()


class RWMutex:
    """Go's sync.RWMutex. ``with rw:`` holds it for writing, ``with rw.reader:`` for
    reading."""

    __slots__ = ("_rw", "_backing", "_addr", "_as_parameter_", "reader")

    def __init__(self) -> None:
        self._rw, self._backing = _aligned(gmp_rwmutex)
        self._addr = addressof(self._rw)
        self._as_parameter_ = self._addr
        #: A context manager taking the read lock.
        self.reader = _ReadLocker(self)

    def rlock(self, timeout: float | None = None) -> bool:
        """Locks for reading; False if `timeout` seconds passed first."""
        return _wait(lib.gmp_rwmutex_rlock, self, lambda: lib.gmp_rwmutex_runlock(self._addr),
                     timeout, "gmp_rwmutex_rlock")

    def runlock(self) -> None:
        """Undoes one rlock; RuntimeError if no reader holds it."""
        rc = self._rw.reader_count
        if rc == 0 or rc == -_RWMUTEX_MAX_READERS:
            raise RuntimeError("RUnlock of unlocked RWMutex")
        check(lib.gmp_rwmutex_runlock(self._addr), "gmp_rwmutex_runlock")

    def lock(self, timeout: float | None = None) -> bool:
        """Locks for writing; False if `timeout` seconds passed first."""
        return _wait(lib.gmp_rwmutex_lock, self, lambda: lib.gmp_rwmutex_unlock(self._addr),
                     timeout, "gmp_rwmutex_lock")

    def unlock(self) -> None:
        """Unlocks the write lock; RuntimeError if no writer holds it."""
        if self._rw.reader_count >= 0 or not self._rw.w.state & 1:
            raise RuntimeError("Unlock of unlocked RWMutex")
        check(lib.gmp_rwmutex_unlock(self._addr), "gmp_rwmutex_unlock")

    def __enter__(self) -> "RWMutex":
        self.lock()
        return self

    def __exit__(self, *exc: object) -> None:
        self.unlock()


class Cond:
    """Go's sync.Cond over a :class:`Mutex` (a new one if none is given). ``with c:``
    locks the mutex. wait() blocks in C and is not interruptible by Ctrl-C."""

    __slots__ = ("_c", "_backing", "_addr", "_as_parameter_", "mutex")

    def __init__(self, mutex: Mutex | None = None):
        if mutex is not None and not isinstance(mutex, Mutex):
            raise TypeError(f"Cond needs a gmp_sched.Mutex, not {type(mutex).__name__}")
        self.mutex = mutex if mutex is not None else Mutex()
        self._c, self._backing = _aligned(gmp_cond)
        self._addr = addressof(self._c)
        self._as_parameter_ = self._addr

    def wait(self) -> None:
        """Unlocks the mutex, waits for signal/broadcast, locks it again. The caller
        must hold the mutex (RuntimeError otherwise)."""
        if not self.mutex.locked():
            raise RuntimeError("Cond.wait without holding its mutex")
        check(lib.gmp_cond_wait(self._addr, self.mutex._addr), "gmp_cond_wait")

    def wait_for(self, predicate: Callable[[], Any]) -> Any:
        """Waits until `predicate()` is true (called with the mutex held)."""
        result = predicate()
        while not result:
            self.wait()
            result = predicate()
        return result

    def signal(self) -> None:
        """Wakes the longest waiter, if any."""
        check(lib.gmp_cond_signal(self._addr), "gmp_cond_signal")

    def broadcast(self) -> None:
        """Wakes every waiter."""
        check(lib.gmp_cond_broadcast(self._addr), "gmp_cond_broadcast")

    notify = signal
    notify_all = broadcast

    def __enter__(self) -> "Cond":
        self.mutex.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.mutex.release()


class Once:
    """Go's sync.Once: ``once.do(fn, *args)`` calls fn the first time only; every
    caller returns after that call has returned. An exception from fn propagates to the
    caller that ran it, and the Once still counts as done (Go: a panic in f)."""

    __slots__ = ("_o", "_backing", "_addr", "_as_parameter_")

    def __init__(self) -> None:
        self._o, self._backing = _aligned(gmp_once)
        self._addr = addressof(self._o)
        self._as_parameter_ = self._addr

    @property
    def done(self) -> bool:
        return bool(self._o.done)

    def do(self, fn: Callable[..., object], *args: Any) -> None:
        if not callable(fn):
            raise TypeError("Once.do needs a callable")
        if self._o.done:
            return
        from ._go import call_once

        call_once(self._addr, fn, args)

