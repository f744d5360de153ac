"""WaitGroup, Mutex, RWMutex, Cond, Once: every call, misuse as exceptions, timeouts."""

from __future__ import annotations

import threading
import time

import pytest

import gmp_sched as gs
from gmp_sched import Cond, Mutex, Once, RWMutex, WaitGroup


def test_waitgroup_counts_and_waits() -> None:
    wg = WaitGroup()
    assert wg.count == 0
    assert wg.wait() is True  # zero: returns at once
    wg.add(3)
    assert wg.count == 3
    assert wg.wait(timeout=0.05) is False
    for _ in range(3):
        threading.Thread(target=wg.done).start()
    assert wg.wait(timeout=10) is True
    assert wg.count == 0


def test_waitgroup_context_manager_waits() -> None:
    finished: list[int] = []

    with WaitGroup() as wg:
        for i in range(4):
            wg.add(1)

            def body(i: int = i) -> None:
                time.sleep(0.01)
                finished.append(i)
                wg.done()

            gs.go(body)
    assert sorted(finished) == [0, 1, 2, 3]


def test_waitgroup_misuse_raises_instead_of_aborting() -> None:
    wg = WaitGroup()
    with pytest.raises(ValueError):
        wg.done()
    with pytest.raises(ValueError):
        wg.add(-1)
    with pytest.raises(ValueError):
        wg.add(2**31)
    with pytest.raises(TypeError):
        wg.add(1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        wg.wait(timeout=-1)
    wg.add(1)
    wg.done()
    assert wg.count == 0


def test_waitgroup_wait_off_main_thread_with_timeout() -> None:
    wg = WaitGroup()
    wg.add(1)
    out: list[bool] = []
    t = threading.Thread(target=lambda: out.append(wg.wait(timeout=0.05)))
    t.start()
    t.join()
    assert out == [False]
    wg.done()


def test_mutex_basic_and_context_manager() -> None:
    m = Mutex()
    assert not m.locked()
    assert m.acquire() is True
    assert m.locked()
    assert m.try_lock() is False
    assert m.acquire(blocking=False) is False
    assert m.acquire(timeout=0.05) is False
    m.release()
    assert not m.locked()
    with m:
        assert m.locked()
    assert not m.locked()
    m.lock()
    m.unlock()
    assert m.try_lock() is True
    m.unlock()


def test_mutex_misuse() -> None:
    m = Mutex()
    with pytest.raises(RuntimeError):
        m.unlock()
    with pytest.raises(ValueError):
        m.acquire(timeout=-1)


def test_mutex_excludes_threads_and_goroutines() -> None:
    m = Mutex()
    counter = [0]
    n_threads, per = 4, 2000
    wg = WaitGroup()

    def bump() -> None:
        for _ in range(per):
            with m:
                v = counter[0]
                counter[0] = v + 1
        wg.done()

    wg.add(n_threads * 2)
    threads = [threading.Thread(target=bump) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for _ in range(n_threads):
        gs.go(bump)
    assert wg.wait(timeout=60)
    assert counter[0] == 2 * n_threads * per


def test_mutex_timed_acquire_leaves_no_waiter_behind() -> None:
    m = Mutex()
    m.lock()
    t0 = time.monotonic()
    assert m.acquire(timeout=0.05) is False
    assert time.monotonic() - t0 >= 0.045
    m.unlock()
    assert m.try_lock() is True  # nobody took it in between
    m.unlock()
    got: list[bool] = []
    m.lock()
    t = threading.Thread(target=lambda: got.append(m.acquire(timeout=10)))
    t.start()
    time.sleep(0.01)
    m.unlock()
    t.join()
    assert got == [True] and m.locked()
    m.unlock()


def test_rwmutex() -> None:
    timed = RWMutex()
    with timed.reader:
        with timed.reader:  # two readers at once
            assert timed.lock(timeout=0.05) is False
    with timed:
        assert timed.rlock(timeout=0.05) is False
    # (The timed-out waiters stay queued on `timed` and release what they get.)
    rw = RWMutex()
    rw.rlock()
    rw.runlock()
    rw.lock()
    rw.unlock()
    with pytest.raises(RuntimeError):
        rw.runlock()
    with pytest.raises(RuntimeError):
        rw.unlock()
    rw.rlock()
    with pytest.raises(RuntimeError):
        rw.unlock()  # held for reading, not writing
    rw.runlock()


def test_rwmutex_writers_exclude_readers() -> None:
    rw = RWMutex()
    shared = [0, 0]
    bad: list[tuple[int, int]] = []
    wg = WaitGroup()

    def writer() -> None:
        for _ in range(300):
            with rw:
                shared[0] += 1
                shared[1] += 1
        wg.done()

    def reader() -> None:
        for _ in range(300):
            with rw.reader:
                a, b = shared
                if a != b:
                    bad.append((a, b))
        wg.done()

    wg.add(4)
    for f in (writer, writer, reader, reader):
        threading.Thread(target=f, daemon=True).start()
    r = rw._rw
    assert wg.wait(timeout=60), (
        f"wg={wg.count} shared={shared} w.state={r.w.state} w.sema={r.w.sema} "
        f"writer_sem={r.writer_sem} reader_sem={r.reader_sem} "
        f"reader_count={r.reader_count} reader_wait={r.reader_wait}"
    )
    assert not bad and shared == [600, 600]


def test_cond_signal_and_broadcast() -> None:
    c = Cond()
    ready: list[int] = []
    woke: list[int] = []
    wg = WaitGroup()

    def waiter(i: int) -> None:
        with c:
            ready.append(i)
            c.wait_for(lambda: len(woke) >= 0 and flag[0])
            woke.append(i)
        wg.done()

    flag = [False]
    wg.add(3)
    for i in range(3):
        threading.Thread(target=waiter, args=(i,)).start()
    while True:
        with c:
            if len(ready) == 3:
                break
        time.sleep(0.001)
    with c:
        flag[0] = True
        c.signal()
    c.broadcast()
    assert wg.wait(timeout=10)
    assert sorted(woke) == [0, 1, 2]
    c.notify()
    c.notify_all()


def test_cond_misuse() -> None:
    c = Cond(Mutex())
    with pytest.raises(RuntimeError):
        c.wait()
    with pytest.raises(TypeError):
        Cond(threading.Lock())  # type: ignore[arg-type]


def test_once_runs_once_and_propagates() -> None:
    o = Once()
    calls: list[int] = []
    assert not o.done
    ts = [threading.Thread(target=o.do, args=(calls.append, 1)) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    o.do(calls.append, 2)
    assert calls == [1] and o.done

    o2 = Once()
    with pytest.raises(ZeroDivisionError):
        o2.do(lambda: 1 / 0)
    assert o2.done
    o2.do(lambda: 1 / 0)  # done: not called again
    with pytest.raises(TypeError):
        Once().do(42)  # type: ignore[arg-type]
