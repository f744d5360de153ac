"""Exceptions, the -errno mapping, and waits that Ctrl-C can interrupt.

Every libgmp function returns a non-negative value or a negative errno. This binding maps:

* ``-EPIPE`` from a channel operation -> :class:`ChannelClosed`;
* ``-ETIMEDOUT`` -> the builtin :class:`TimeoutError` (errno ``ETIMEDOUT``), also when a
  scope's deadline ended the wait;
* ``-ECANCELED`` (a wait in a cancelled scope) -> :class:`Cancelled`, an ``OSError``
  with errno ``ECANCELED``;
* anything else -> :class:`OSError` with that errno.

Bad Python arguments (wrong types, negative sizes) raise ``TypeError``/``ValueError``
before anything reaches C.

Interrupting waits. A thread blocked inside a foreign call cannot run Python signal
handlers; Python runs them when the call returns. So the main thread (the only one
Python delivers signals to) never makes an unbounded blocking call:

* channel operations and select wait in slices of :data:`SLICE_S` (50 ms) with the
  ``_timeout`` forms; between slices the interpreter runs pending handlers, so Ctrl-C
  raises ``KeyboardInterrupt`` within one slice. A timed-out slice performed nothing,
  so the runtime is consistent when the exception propagates. A slice that a scope's
  deadline ended (the scope reports ``ETIMEDOUT``) ends the wait, as a cancel does;
* WaitGroup, Mutex and RWMutex waits have no timed form in C: the main thread hands the
  blocking call to a helper thread (:func:`run_on_helper`) and waits on a
  ``threading.Event``, which signals interrupt at once. An abandoned helper finishes its
  call later and undoes it (unlocks the lock it got), so nothing stays held. Inside a
  scope the helper makes the call in a scope of its own with the same deadline, which the
  main thread cancels (looking every 2 ms) once its own scope is cancelled.

Other threads (and goroutines running Python) make the plain blocking call: Python never
interrupts them.
"""

from __future__ import annotations

import ctypes
import errno as _errno
import os
import queue
import threading
import time
from typing import Any, Callable, NoReturn

from ._lib import lib

#: Length of one wait slice on the main thread, in seconds and nanoseconds.
SLICE_S = 0.05
SLICE_NS = 50_000_000
#: How often the main thread looks at its scope while a helper makes its call.
SCOPE_POLL_S = 0.002

EPIPE = _errno.EPIPE
ETIMEDOUT = _errno.ETIMEDOUT
ECANCELED = _errno.ECANCELED
EAGAIN = _errno.EAGAIN
EBUSY = _errno.EBUSY

MAIN_THREAD_ID = threading.main_thread().ident


class ChannelClosed(Exception):
    """The channel is closed: a send on it, a receive once it is closed and drained, a
    second close, or a select case that fired on a closed channel (``index`` is then the
    case's index, else ``None``)."""

    def __init__(self, msg: str = "channel closed", index: int | None = None):
        super().__init__(msg)
        self.index = index


class Cancelled(OSError):
    """A wait ended because its scope (:class:`Scope`) was cancelled: an ``OSError``
    with errno ``ECANCELED``, as :class:`TimeoutError` is one with ``ETIMEDOUT`` (the
    error a scope's deadline gives)."""


def raise_errno(r: int, what: str) -> NoReturn:
    """Raises the exception for the negative errno `r` returned by `what`."""
    e = -r
    if e == EPIPE:
        raise ChannelClosed(f"{what}: channel closed")
    if e == ETIMEDOUT:
        raise TimeoutError(e, f"{what}: timed out")
    if e == ECANCELED:
        raise Cancelled(e, f"{what}: cancelled")
    raise OSError(e, f"{what}: {os.strerror(e)}")


def check(r: int, what: str) -> int:
    """Returns `r` if it is not negative, else raises for it."""
    if r < 0:
        raise_errno(r, what)
    return r


def on_main_thread() -> bool:
    return threading.get_ident() == MAIN_THREAD_ID


def timeout_ns(timeout: float | None) -> int:
    """Seconds (float) to nanoseconds; ``None`` -> -1 (no limit); negative -> ValueError."""
    if timeout is None:
        return -1
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
        raise TypeError(f"timeout must be a number of seconds or None, not {type(timeout).__name__}")
    if timeout < 0:
        raise ValueError("timeout must be >= 0")
    if timeout != timeout:  # NaN
        raise ValueError("timeout must not be NaN")
    return min(int(timeout * 1e9), 2**62)


def scope_error() -> int:
    """The error of the caller's current scope: 0 while it runs in none or in one that has
    not ended, else -ECANCELED or -ETIMEDOUT."""
    s = lib.gmp_scope_current()
    return 0 if not s else int(lib.gmp_scope_err(s))


def sliced(call: Callable[..., int], args: tuple[Any, ...], tns: int, now: Callable[[], int]) -> int:
    """Calls ``call(*args, slice_ns)`` in slices of at most SLICE_NS until it returns
    something other than -ETIMEDOUT, `tns` nanoseconds (-1: no limit) have passed, or the
    caller's scope has ended (its error is returned: a scope's deadline ends a slice with
    -ETIMEDOUT, which alone does not tell it from the slice's own end).
    Pending signal handlers run between slices (KeyboardInterrupt propagates from here)."""
    if tns < 0:
        while True:
            r = call(*args, SLICE_NS)
            if r != -ETIMEDOUT:
                return r
            e = scope_error()
            if e:
                return e
    deadline = now() + tns
    while True:
        left = deadline - now()
        ns = max(0, min(left, SLICE_NS))
        r = call(*args, ns)
        if r == -ETIMEDOUT and ns > 0:
            e = scope_error()
            if e:
                return e
        if r != -ETIMEDOUT or left <= SLICE_NS:
            return r


class _Job:
    __slots__ = ("call", "args", "undo", "owner", "done", "lock", "result", "finished", "abandoned",
                 "timeout_ns", "scope", "cancelled")

    def __init__(self, call: Callable[..., int], args: tuple[Any, ...], undo: Callable[[], object] | None,
                 owner: object, timeout_ns: int | None = None):
        self.call = call
        # The Python object owning the C memory `args` point into: an abandoned call
        # may still be inside C when its caller has forgotten the object.
        self.owner = owner
        self.args = args
        self.undo = undo
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.result = 0
        self.finished = False
        self.abandoned = False
        # Not None: the call runs in a scope of the helper's own with this deadline (-1:
        # none), standing for the caller's scope (see cancel()); its handle while it runs.
        self.timeout_ns = timeout_ns
        self.scope: int | None = None
        self.cancelled = False

    def run(self) -> None:
        if self.timeout_ns is not None:
            h = ctypes.c_void_p()
            check(lib.gmp_scope_begin(ctypes.byref(h), self.timeout_ns), "gmp_scope_begin")
            with self.lock:
                self.scope = h.value
                if self.cancelled:
                    lib.gmp_scope_cancel(self.scope)
        r = self.call(*self.args)
        with self.lock:
            if self.scope is not None:
                lib.gmp_scope_end(self.scope)
                self.scope = None
            self.result = r
            self.finished = True
            abandoned = self.abandoned
        self.done.set()
        if abandoned and r >= 0 and self.undo is not None:
            self.undo()

    def cancel(self) -> None:
        """Cancels the helper's scope, if the call still runs in it: the caller's own
        scope was cancelled."""
        with self.lock:
            self.cancelled = True
            if self.scope is not None:
                lib.gmp_scope_cancel(self.scope)

    def abandon(self) -> bool:
        """Gives up waiting. Returns True if the call had already finished (the caller
        then owns its outcome), False if the helper will undo it when it finishes."""
        with self.lock:
            if self.finished:
                return True
            self.abandoned = True
            return False


class _Helper(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="gmp_sched-waiter", daemon=True)
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()

    def run(self) -> None:
        while True:
            job = self.jobs.get()
            job.run()
            with _idle_lock:
                if len(_idle) >= _MAX_IDLE:
                    return
                _idle.append(self)


_idle: list[_Helper] = []
_idle_lock = threading.Lock()
_MAX_IDLE = 4


def _scope_timeout() -> int | None:
    """For a call handed to a helper: None outside scopes, else the time to the caller's
    scope's deadline (-1: none; 0: it has ended), for the helper's scope."""
    s = lib.gmp_scope_current()
    if not s:
        return None
    if lib.gmp_scope_err(s) == -ETIMEDOUT:
        return 0
    d = int(lib.gmp_scope_deadline(s))
    if d == 2**63 - 1:
        return -1
    return max(0, d - int(lib.gmp_now()))


def _wait_done(job: _Job, timeout: float | None) -> bool:
    """Waits for `job` for at most `timeout` seconds (None: no limit); True once it is
    done. For a job in a scope of its own the caller's scope is looked at every
    SCOPE_POLL_S: once it is cancelled, so is the job's (whose deadline is the caller's
    already)."""
    if job.timeout_ns is None:
        return job.done.wait(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if scope_error() == -ECANCELED:
            job.cancel()
        step = SCOPE_POLL_S if deadline is None else min(SCOPE_POLL_S, deadline - time.monotonic())
        if job.done.wait(max(0.0, step)):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return job.done.is_set()


def start_on_helper(
    call: Callable[..., int], args: tuple[Any, ...], undo: Callable[[], object] | None,
    owner: object, scoped: bool = False,
) -> _Job:
    """Starts the blocking ``call(*args)`` on a helper thread; its job's ``done`` event
    is set once it has returned (with ``result``). `scoped`: the caller's scope ends the
    call (through a scope of the helper's own, see :func:`run_on_helper`)."""
    job = _Job(call, args, undo, owner, _scope_timeout() if scoped else None)
    with _idle_lock:
        helper = _idle.pop() if _idle else None
    if helper is None:
        helper = _Helper()
        helper.jobs.put(job)
        helper.start()
    else:
        helper.jobs.put(job)
    return job


def run_on_helper(
    call: Callable[..., int], args: tuple[Any, ...], undo: Callable[[], object] | None,
    timeout: float | None,
    owner: object,
) -> int | None:
    """Runs the blocking ``call(*args)`` on a helper thread and waits for it, for at most
    `timeout` seconds (None: no limit), interruptibly. Returns its result, or None on
    timeout. On timeout or an exception (KeyboardInterrupt) the call is abandoned: when
    it completes successfully later, ``undo()`` runs on the helper thread. If it had
    completed before, an exception undoes it here before propagating. The job keeps
    `owner` (the object whose C memory the call uses) alive until the call returns."""
    job = start_on_helper(call, args, undo, owner, scoped=True)
    try:
        finished = _wait_done(job, timeout)
    except BaseException:
        if job.abandon() and job.result >= 0 and undo is not None:
            undo()
        raise
    if finished or job.abandon():
        return job.result
    return None
