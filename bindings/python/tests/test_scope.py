"""Scopes (``with gmp_sched.scope(timeout) as s``): a cancel or a deadline ends the waits
of the scope's goroutines (C and Python) and of the block itself with Cancelled /
TimeoutError; the block's end waits for the goroutines and restores the enclosing scope;
an exception (Ctrl-C too) leaving the block cancels the scope first. Waits are for
states (values on channels), never sleeps."""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import threading
import time

import pytest

import gmp_sched as gs
from gmp_sched import Cancelled, Chan, WaitGroup

from conftest import Job


def current() -> int | None:
    return gs.lib.gmp_scope_current()


def blocked(ready: Chan[None], out: Chan[object]) -> None:
    """A Python goroutine: says it is about to wait, waits on a channel nobody feeds, and
    reports what ended the wait."""
    never: Chan[int] = Chan(ctypes.c_int)
    ready.send()
    try:
        never.recv()
    except (Cancelled, TimeoutError) as e:
        out.send(type(e))
        raise
    out.send(None)


def test_cancel_ends_every_wait_of_python_and_c_goroutines(worker: ctypes.CDLL) -> None:
    n_py, n_c = 4, 100
    ready: Chan[None] = Chan(None, n_py)
    out: Chan[object] = Chan(object, n_py)
    never = Chan(ctypes.c_int64)
    sink = Chan(ctypes.c_int64, n_c)
    wg = WaitGroup()
    job = Job(never.handle, sink.handle, wg._addr)
    before = gs.num_goroutine()
    with gs.scope() as s:
        assert current() is not None
        assert s.err is None and s.deadline is None
        handles = [gs.go(blocked, ready, out) for _ in range(n_py)]
        wg.add(n_c)
        for _ in range(n_c):
            gs.go(worker.square_one, job)
        for _ in range(n_py):
            ready.recv(timeout=10)
        t0 = time.monotonic()
        s.cancel()
        s.wait()
        took = time.monotonic() - t0
        assert s.err is Cancelled
        # The block's own waits are in the scope too.
        with pytest.raises(Cancelled) as info:
            ready.recv()
        assert info.value.errno == errno.ECANCELED
        assert isinstance(info.value, OSError)
        with pytest.raises(Cancelled):
            gs.sleep(3600)
    assert current() is None
    assert took < 5, f"the cancel took {took:.3f} s to free the goroutines"
    assert wg.count == 0
    assert len(sink) == 0
    assert [out.recv(timeout=0) for _ in range(n_py)] == [Cancelled] * n_py
    for h in handles:
        assert isinstance(h.exception(timeout=10), Cancelled)
    # Every goroutine of the scope has ended (the Python ones' threads are reused).
    deadline = time.monotonic() + 10
    while gs.num_goroutine() > before and time.monotonic() < deadline:
        gs.sleep(0.001)
    assert gs.num_goroutine() <= before


def test_deadline_ends_the_main_threads_untimed_wait() -> None:
    # The main thread waits in 50 ms slices: a slice the scope's deadline ended must end
    # the wait (TimeoutError), not start the next slice.
    c: Chan[int] = Chan(ctypes.c_int)
    t0 = gs.now()
    with gs.scope(timeout=0.05) as s:
        d = s.deadline
        assert d is not None and t0 + 50_000_000 <= d <= gs.now() + 50_000_000
        with gs.scope(timeout=10) as inner:
            assert inner.deadline == d  # the enclosing deadline is earlier
        with pytest.raises(TimeoutError):
            c.recv()
        assert gs.now() >= d
        assert gs.now() - d < 5_000_000_000
        assert s.err is TimeoutError
        with pytest.raises(TimeoutError):
            c.send(1, timeout=3600)
        with pytest.raises(TimeoutError):
            gs.select(c, timeout=3600)
        with pytest.raises(TimeoutError):
            gs.select(c)


def test_deadline_ends_python_goroutines() -> None:
    ready: Chan[None] = Chan(None, 2)
    out: Chan[object] = Chan(object, 2)
    with gs.scope(timeout=0.05) as s:
        gs.go(blocked, ready, out)
        # The scope's end waits for the goroutine, which the deadline frees.
    assert s.err is TimeoutError  # kept once the block has ended
    assert out.recv(timeout=0) is TimeoutError
    with gs.scope() as quiet:
        pass
    assert quiet.err is Cancelled  # ending a scope cancels it (Go's deferred cancel())


def test_ended_scope_still_completes_what_need_not_wait() -> None:
    with gs.scope() as s:
        s.cancel()
        s.cancel()  # twice: harmless
        buffered: Chan[int] = Chan(ctypes.c_int, 1)
        unbuffered: Chan[int] = Chan(ctypes.c_int)
        buffered.send(7)  # room: no wait
        with pytest.raises(Cancelled):
            buffered.send(8)  # full: it would wait
        assert buffered.recv() == 7
        assert buffered.try_send(9)
        assert unbuffered.try_recv() == (False, None)
        assert gs.select(unbuffered, default=True) == (gs.DEFAULT, None)
        with pytest.raises(Cancelled):
            gs.select(unbuffered, timeout=3600)
        with pytest.raises(Cancelled):
            gs.select(unbuffered)
        with pytest.raises(Cancelled):
            unbuffered.recv(timeout=3600)


def test_exit_waits_for_goroutines_that_finish_on_their_own() -> None:
    finished = threading.Event()
    go_on: Chan[None] = Chan(None)

    def body() -> None:
        go_on.recv()
        finished.set()

    with gs.scope():
        gs.go(body)
        go_on.send()
    assert finished.is_set()


def test_exception_leaving_the_block_cancels_first(capsys: pytest.CaptureFixture[str]) -> None:
    ready: Chan[None] = Chan(None, 1)
    out: Chan[object] = Chan(object, 1)
    with pytest.raises(ValueError, match="give up"):
        with gs.scope():
            h = gs.go(blocked, ready, out)
            ready.recv(timeout=10)
            raise ValueError("give up")
    assert current() is None
    assert out.recv(timeout=0) is Cancelled
    assert isinstance(h.exception(timeout=10), Cancelled)
    # A goroutine that let its scope's cancel propagate is not reported by the default
    # excepthook.
    assert "Exception in goroutine" not in capsys.readouterr().err


def test_ctrl_c_while_exit_waits_cancels_and_still_waits() -> None:
    ready: Chan[None] = Chan(None, 1)
    out: Chan[object] = Chan(object, 1)
    # The goroutine would wait for ever; SIGINT reaches the main thread while the
    # block's end waits for it (or, at worst, earlier in the block: the outcome is the
    # same either way).
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    with pytest.raises(KeyboardInterrupt):
        with gs.scope():
            h = gs.go(blocked, ready, out)
            ready.recv(timeout=10)
            timer.start()
    timer.join()
    assert current() is None
    assert out.recv(timeout=10) is Cancelled
    assert isinstance(h.exception(timeout=10), Cancelled)


def test_nesting_and_misuse() -> None:
    with gs.scope() as outer:
        outer_h = current()
        with gs.scope() as inner:
            assert current() != outer_h
            outer.cancel()  # reaches the scope begun inside it
            assert inner.err is Cancelled
        assert current() == outer_h
    assert current() is None
    s = gs.Scope()
    with pytest.raises(RuntimeError):
        s.cancel()  # not entered
    with s:
        with pytest.raises(RuntimeError):
            s.__enter__()
    with pytest.raises(ValueError):
        gs.scope(timeout=-1)


def test_scope_in_a_python_goroutine() -> None:
    # Off the main thread the waits are plain blocking calls; a cancel from the main
    # thread reaches the goroutine's scope and its own goroutines.
    handle: Chan[object] = Chan(object, 1)
    ready: Chan[None] = Chan(None, 4)
    out: Chan[object] = Chan(object, 4)
    done: Chan[object] = Chan(object, 1)

    def owner() -> None:
        with gs.scope() as s:
            for _ in range(3):
                gs.go(blocked, ready, out)
            handle.send(s)
            try:
                Chan(ctypes.c_int).recv()
            except Cancelled:
                done.send("cancelled")

    gs.go(owner)
    s = handle.recv(timeout=10)
    for _ in range(3):
        ready.recv(timeout=10)
    s.cancel()
    assert done.recv(timeout=10) == "cancelled"
    assert [out.recv(timeout=10) for _ in range(3)] == [Cancelled] * 3


def test_cancel_ends_lock_waits_of_a_goroutine() -> None:
    # A goroutine in a scope waiting for a held Mutex, RWMutex read lock and write lock:
    # each wait raises Cancelled once the scope is cancelled, and the locks stay usable.
    m = gs.Mutex()
    rw = gs.RWMutex()
    handle: Chan[object] = Chan(object, 1)
    out: Chan[object] = Chan(object, 4)
    m.acquire()
    assert rw.lock(timeout=10)

    def owner() -> None:
        with gs.scope() as s:
            handle.send(s)
            for wait in (m.acquire, rw.rlock, rw.lock):
                try:
                    wait()
                    out.send("locked")
                except Cancelled:
                    out.send(Cancelled)

    gs.go(owner)
    s = handle.recv(timeout=10)
    deadline = time.monotonic() + 10
    while m._m.state >> 3 != 1:  # the goroutine waits for the mutex
        assert time.monotonic() < deadline
        time.sleep(0.001)
    s.cancel()
    assert [out.recv(timeout=10) for _ in range(3)] == [Cancelled] * 3
    m.release()
    rw.unlock()
    with m:
        pass
    with rw.reader:
        pass
    with rw:
        pass
    assert m._m.state == 0 and rw._rw.reader_count == 0


def test_scope_ends_the_main_threads_lock_and_waitgroup_waits() -> None:
    # On the main thread these waits run on a helper thread; the scope still ends them:
    # a cancel by a goroutine (within a few ms) and a deadline.
    m = gs.Mutex()
    rw = gs.RWMutex()
    wg = WaitGroup()
    m.acquire()
    assert rw.lock(timeout=10)
    wg.add(1)
    for wait in (m.acquire, rw.rlock, rw.lock, wg.wait):
        with gs.scope() as s:
            gs.go(lambda: (time.sleep(0.02), s.cancel()))
            t0 = time.monotonic()
            with pytest.raises(Cancelled):
                wait()
            assert time.monotonic() - t0 < 5
        with gs.scope(timeout=0.03):
            t0 = time.monotonic()
            with pytest.raises(TimeoutError):
                wait()
            assert 0.02 <= time.monotonic() - t0 < 5
    # Nothing was taken (the cancelled waits' ghosts still count as the mutex's waiters
    # until the unlock runs them).
    assert m._m.state & 1 and wg.count == 1
    m.release()
    rw.unlock()
    wg.done()
    wg.wait()
    assert m._m.state == 0 and rw._rw.reader_count == 0 and rw._rw.w.state == 0
