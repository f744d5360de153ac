"""Scopes: Go's ``context.Context`` (``WithCancel`` / ``WithTimeout``) carried by the
goroutine or thread instead of passed along, used as a nursery::

    with gmp_sched.scope(timeout=2.0) as s:
        for job in jobs:
            gmp_sched.go(fetch, job)       # C or Python goroutines: they belong to s
    # here every goroutine started in s has returned

While the ``with`` block runs, the scope is the current one of the thread (or Python
goroutine) that entered it; goroutines started meanwhile belong to it, as do theirs.
Once it is cancelled (:meth:`Scope.cancel`, an enclosing scope's cancel, or an
exception leaving the block) or its deadline passes, every wait of those goroutines and
of the block itself ends: the package's waits raise :class:`Cancelled` or
``TimeoutError``, C calls return ``-ECANCELED`` / ``-ETIMEDOUT``, and under the
interposer the blocking libc calls that park fail with errno ``ECANCELED`` /
``ETIMEDOUT``. An operation that need not wait still completes.

On exit the block waits for the scope's goroutines, then ends the scope (the enclosing
one becomes current again). When an exception leaves the block, the scope is cancelled
first, so that the goroutines give up their waits instead of holding the exception up
(trio's nurseries do the same). A Ctrl-C during that wait cancels the scope too and
keeps waiting for the goroutines to return; the ``KeyboardInterrupt`` is raised once
they have.
"""

from __future__ import annotations

import ctypes
from ctypes import c_void_p
from types import TracebackType

from ._errors import (
    ECANCELED,
    ETIMEDOUT,
    Cancelled,
    _Job,
    check,
    on_main_thread,
    start_on_helper,
    timeout_ns,
)
from ._lib import lib

_INT64_MAX = 2**63 - 1


class Scope:
    """A scope (see the module doc): ``with Scope(timeout) as s:`` begins it, the block's
    end waits for its goroutines and ends it. `timeout` is in seconds from entering the
    block (None: no deadline of its own; an enclosing scope's earlier deadline applies).
    A scope is entered once."""

    __slots__ = ("_timeout_ns", "_h", "_helpers", "_ended")

    def __init__(self, timeout: float | None = None) -> None:
        self._timeout_ns = timeout_ns(timeout)
        self._h: int | None = None
        # Waits of wait() that Ctrl-C interrupted on the main thread: their helper
        # threads are still in gmp_scope_wait, so the scope may not end before they
        # return (the handle must stay valid for those calls).
        self._helpers: list[_Job] = []
        # After the block: (err, deadline) as they were when it ended.
        self._ended: tuple[type[Cancelled] | type[TimeoutError], int | None] | None = None

    def _handle(self) -> int:
        if self._h is None:
            raise RuntimeError("the scope is not entered or has ended (use it in a with statement)")
        return self._h

    def __enter__(self) -> "Scope":
        if self._h is not None or self._ended is not None:
            raise RuntimeError("a scope is entered once")
        out = c_void_p()
        check(lib.gmp_scope_begin(ctypes.byref(out), self._timeout_ns), "gmp_scope_begin")
        self._h = out.value
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        h = self._handle()
        if exc_type is not None:
            lib.gmp_scope_cancel(h)
        interrupted: BaseException | None = None
        # The wait, then every interrupted wait() of the block: all return once the
        # scope's goroutines have.
        pending = [self._start_wait()] + self._helpers
        for job in pending:
            while job is not None:
                try:
                    if job.done.wait():
                        job = None
                except KeyboardInterrupt as e:
                    # Ctrl-C: cancel and wait on for the goroutines to return.
                    interrupted = interrupted or e
                    lib.gmp_scope_cancel(h)
        self._helpers.clear()
        # Ending cancels the scope (Go's deferred cancel()): what err says from then on.
        final = (self.err or Cancelled, self.deadline)
        r = lib.gmp_scope_end(h)
        self._h = None
        self._ended = final
        if r < 0:
            raise RuntimeError(
                "a scope ends on the thread or goroutine that entered it, innermost first"
            )
        if interrupted is not None:
            raise interrupted

    def _start_wait(self) -> _Job | None:
        """On the main thread, gmp_scope_wait on a helper thread (a Ctrl-C can interrupt
        the wait for it); elsewhere the plain call, done when this returns (None)."""
        h = self._handle()
        if on_main_thread():
            return start_on_helper(lib.gmp_scope_wait, (h,), None, self)
        check(lib.gmp_scope_wait(h), "gmp_scope_wait")
        return None

    def cancel(self) -> None:
        """Cancels the scope and every scope begun inside it (Go's ``cancel()``): their
        waits raise :class:`Cancelled`, now and from then on. Harmless when repeated;
        from any thread or goroutine while the block runs."""
        check(lib.gmp_scope_cancel(self._handle()), "gmp_scope_cancel")

    @property
    def err(self) -> type[Cancelled] | type[TimeoutError] | None:
        """Why the scope has ended (Go's ``ctx.Err()``): None while it has not,
        :class:`Cancelled` once it (or an enclosing scope) was cancelled,
        ``TimeoutError`` once its deadline passed (the classes, as Go's sentinel
        errors: ``s.err is gmp_sched.Cancelled``). After the block, what it was when the
        scope ended (ending cancels it)."""
        if self._h is None and self._ended is not None:
            return self._ended[0]
        r = lib.gmp_scope_err(self._handle())
        if r == 0:
            return None
        if -r == ECANCELED:
            return Cancelled
        if -r == ETIMEDOUT:
            return TimeoutError
        check(r, "gmp_scope_err")
        return None

    @property
    def deadline(self) -> int | None:
        """The scope's deadline (the earliest of its own and its enclosing scopes') on
        :func:`now`'s clock, in nanoseconds, or None if it has none."""
        if self._h is None and self._ended is not None:
            return self._ended[1]
        d = check(lib.gmp_scope_deadline(self._handle()), "gmp_scope_deadline")
        return None if d == _INT64_MAX else int(d)

    def wait(self) -> None:
        """Waits until every goroutine started in the scope (or a scope begun inside it)
        has returned. Not ended by the scope itself: :meth:`cancel` first to make them
        return sooner. Ctrl-C interrupts it on the main thread."""
        job = self._start_wait()
        if job is None:
            return
        try:
            job.done.wait()
        except BaseException:
            self._helpers.append(job)
            raise
        check(job.result, "gmp_scope_wait")

    def __repr__(self) -> str:
        if self._h is None and self._ended is None:
            return "<Scope (not entered)>"
        err = self.err
        state = "active" if err is None else err.__name__
        return f"<Scope {state}{' (ended)' if self._h is None else ''}>"


def scope(timeout: float | None = None) -> Scope:
    """``with gmp_sched.scope(timeout=None) as s:``: a :class:`Scope` (see its doc)."""
    return Scope(timeout)


__all__ = ["Cancelled", "Scope", "scope"]
