"""go() with Python callables, the runtime's knobs, stats."""

from __future__ import annotations

import ctypes
import dataclasses
import os
import threading
import time

import pytest

import gmp_sched as gs
from gmp_sched import Chan, WaitGroup

from conftest import libgmp_path, run_python


def test_python_goroutine_runs_with_args_on_its_own_locked_thread() -> None:
    out = Chan(object, 4)

    def body(a: int, b: str) -> None:
        tid = threading.get_native_id()
        gid = gs.goid()
        gs.sleep(0.01)  # parks; a locked goroutine resumes on the same thread
        gs.gosched()
        out.send((a, b, gid, tid, threading.get_native_id()))

    gid = gs.go(body, 1, "x")
    a, b, seen_gid, tid_before, tid_after = out.recv(timeout=10)
    assert (a, b) == (1, "x")
    assert seen_gid == gid > 0
    assert tid_before == tid_after != threading.get_native_id()


@pytest.mark.parametrize("preload", [False, True])
@pytest.mark.parametrize("procs", [1, 2])
def test_cpu_bound_python_goroutines_sleep_and_sqlite_beside_a_thread(
    procs: int, preload: bool
) -> None:
    # Python goroutines wait for the GIL in a futex the runtime does not see, time.sleep
    # sleeps in clock_nanosleep (hooked only under LD_PRELOAD), sqlite3 takes its own
    # mutexes: each keeps its P only until sysmon finds it asleep (rt/unseen.rs), and a
    # goroutine preempted holding the GIL gets a P back. In a child interpreter: a hang
    # must not take pytest with it.
    env = dict(os.environ)
    if preload:
        env["LD_PRELOAD"] = libgmp_path()
    r = run_python(
        "import sqlite3, sys, threading, time\n"
        "import gmp_sched as gs\n"
        f"gs.maxprocs({procs})\n"
        "out = gs.Chan(object, 64)\n"
        "def cpu(n):\n"
        "    s = 0\n"
        "    for i in range(n): s += i * i\n"
        "    out.send(s)\n"
        "def sleeper():\n"
        "    for _ in range(20): time.sleep(0.002)\n"
        "    out.send('slept')\n"
        "def sql():\n"
        "    db = sqlite3.connect(':memory:')\n"
        "    db.execute('create table t(x)')\n"
        "    for i in range(200): db.execute('insert into t values (?)', (i,))\n"
        "    out.send(db.execute('select sum(x) from t').fetchone()[0])\n"
        "def thr():\n"
        "    s = 0\n"
        "    for i in range(2_000_000): s += i\n"
        "t = threading.Thread(target=thr); t.start()\n"
        "for _ in range(2): gs.go(cpu, 3_000_000)\n"
        "for _ in range(3): gs.go(sleeper)\n"
        "for _ in range(2): gs.go(sql)\n"
        "res = sorted(map(str, (out.recv(timeout=50) for _ in range(7))))\n"
        "t.join()\n"
        "print(res)\n",
        timeout=90,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    n = str(sum(i * i for i in range(3_000_000)))
    assert r.stdout.strip() == str(["19900", "19900", n, n, "slept", "slept", "slept"])


def test_python_goroutines_start_beside_pinned_c_goroutines() -> None:
    # At GOMAXPROCS=1, pinned C goroutines park bound to the thread that ran them, which
    # then picks up the Python goroutines. A lock taken inside the callback would move the
    # goroutine off that thread after ctypes had bound a thread state to it (a crash);
    # started GMP_GO_LOCKED, each is locked to a thread nothing is pinned to before any
    # Python runs. In a child interpreter, which a crash must not take down with pytest.
    r = run_python(
        "import threading\n"
        "import gmp_sched as gs\n"
        "gs.maxprocs(1)\n"
        "hold = gs.WaitGroup(); hold.add(1)\n"
        "for _ in range(8): gs.go(gs.lib.gmp_wg_wait, hold, pinned=True)\n"
        "gs.sleep(0.05)\n"
        "out = gs.Chan(object, 64)\n"
        "def body():\n"
        "    t = threading.get_native_id(); gs.sleep(0.001); gs.gosched()\n"
        "    out.send((t, threading.get_native_id()))\n"
        "for _ in range(40): gs.go(body)\n"
        "res = [out.recv(timeout=20) for _ in range(40)]\n"
        "assert all(a == b for a, b in res), res\n"
        "hold.done(); gs.sleep(0.05)\n"
        "print('python goroutines:', len(res))\n"
    )
    assert r.returncode == 0, r.stderr
    assert "python goroutines: 40" in r.stdout


def test_python_goroutines_spawn_python_and_c_goroutines() -> None:
    # A tree: each Python goroutine starts two children (Python) and 50 C goroutines.
    wg = WaitGroup()
    leaves = Chan(object, 64)

    def node(depth: int) -> None:
        wg.add(50)
        for _ in range(50):
            gs.go(gs.lib.gmp_wg_done, wg)
        if depth == 0:
            leaves.send(threading.get_native_id())
        else:
            wg.add(2)
            gs.go(node, depth - 1)
            gs.go(node, depth - 1)
        wg.done()

    wg.add(1)
    gs.go(node, 3)
    assert wg.wait(timeout=60)
    assert len(leaves) == 8


def test_many_python_goroutines() -> None:
    n = 200
    results = Chan(object, n)
    wg = WaitGroup()
    wg.add(n)

    def body(i: int) -> None:
        results.send(i * i)
        wg.done()

    for i in range(n):
        gs.go(body, i)
    assert wg.wait(timeout=60)
    got = sorted(results.recv() for _ in range(n))
    assert got == sorted(i * i for i in range(n))
    deadline = time.monotonic() + 10
    while gs.python_goroutines() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gs.python_goroutines() == 0


def test_python_goroutines_reuse_threads() -> None:
    # One after the other: each ends unlocked, so its thread serves the next ones.
    tids = Chan(object, 1)
    seen = set()
    for _ in range(50):
        gs.go(lambda: tids.send(threading.get_native_id()))
        seen.add(tids.recv(timeout=10))
    assert len(seen) <= 8, f"{len(seen)} threads for 50 sequential Python goroutines"


def test_exception_in_python_goroutine_goes_to_excepthook_and_program_continues() -> None:
    caught: list[gs.ExceptHookArgs] = []
    done = Chan(None, 10)

    def hook(args: gs.ExceptHookArgs) -> None:
        caught.append(args)
        done.send()

    def boom(i: int) -> None:
        raise KeyError(i)

    gs.set_excepthook(hook)
    try:
        ids = [gs.go(boom, i) for i in range(5)]
        for _ in range(5):
            done.recv(timeout=10)
    finally:
        gs.set_excepthook(None)
    assert sorted(a.exc_value.args[0] for a in caught) == list(range(5))
    assert {a.exc_type for a in caught} == {KeyError}
    assert sorted(a.goroutine for a in caught) == sorted(ids)
    assert all(a.fn is boom for a in caught)
    assert gs.excepthook is gs._go._default_excepthook


def test_default_excepthook_prints_traceback() -> None:
    r = run_python(
        "import gmp_sched as gs\n"
        "def boom(): raise ValueError('from a goroutine')\n"
        "wg = gs.WaitGroup(); wg.add(1)\n"
        "def after(): wg.done()\n"
        "gs.go(boom); gs.sleep(0.2); gs.go(after); wg.wait(); print('still running')\n"
    )
    assert r.returncode == 0, r.stderr
    assert "still running" in r.stdout
    assert "Exception in goroutine" in r.stderr and "ValueError: from a goroutine" in r.stderr


def test_go_bad_input() -> None:
    with pytest.raises(TypeError):
        gs.go(42)
    with pytest.raises(TypeError):
        gs.go(ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda p: None))
    with pytest.raises(ValueError):
        gs.go(print, stack_size=-1)
    with pytest.raises(ValueError):
        gs.go(print, pinned=True)
    with pytest.raises(ValueError):
        gs.go(print, locked=True)
    with pytest.raises(TypeError):
        gs.go(gs.lib.gmp_wg_done, 1, 2)
    with pytest.raises(TypeError):
        gs.go(gs.lib.gmp_wg_done, "not a pointer")
    with pytest.raises(OSError):
        gs.go(gs.lib.gmp_yield, stack_size=1)  # below GMP_MIN_STACK: EINVAL


def test_c_goroutine_from_the_library_itself() -> None:
    # gmp_wg_done(gmp_wg *) has the shape of a goroutine body (its result is ignored).
    wg = WaitGroup()
    wg.add(1000)
    for i in range(1000):
        gs.go(gs.lib.gmp_wg_done, wg, stack_size=gs._lib.GMP_MIN_STACK if i % 2 else None,
              pinned=i % 3 == 0, locked=i % 5 == 0)
    assert wg.wait(timeout=30)


def test_c_goroutine_started_locked(worker: ctypes.CDLL) -> None:
    class DepthJob(ctypes.Structure):
        _fields_ = [("depth", ctypes.c_int), ("wg", ctypes.c_void_p)]

    wg = WaitGroup()
    jobs = [DepthJob(0, gs.as_voidp(wg)) for _ in range(2)]
    wg.add(2)
    gs.go(worker.record_lock_depth, ctypes.pointer(jobs[0]), locked=True)
    gs.go(worker.record_lock_depth, ctypes.pointer(jobs[1]))
    assert wg.wait(timeout=10)
    assert [j.depth for j in jobs] == [2, 1]


def test_as_voidp() -> None:
    wg = WaitGroup()
    ch = Chan(ctypes.c_int)
    v = ctypes.c_int(3)
    assert gs.as_voidp(None) is None
    assert gs.as_voidp(1234) == 1234
    assert gs.as_voidp(wg) == ctypes.addressof(wg._wg)
    assert gs.as_voidp(ch) == ch.handle
    assert gs.as_voidp(v) == ctypes.addressof(v)
    assert gs.as_voidp(ctypes.pointer(v)) == ctypes.addressof(v)
    with pytest.raises(TypeError):
        gs.as_voidp(True)
    with pytest.raises(TypeError):
        gs.as_voidp(b"bytes")


def test_maxprocs_and_counters() -> None:
    prev = gs.maxprocs()
    assert prev >= 1
    try:
        assert gs.maxprocs(1) == prev
        assert gs.maxprocs() == 1
        assert gs.stats().gomaxprocs == 1
    finally:
        gs.maxprocs(prev)
    with pytest.raises(ValueError):
        gs.maxprocs(0)
    with pytest.raises(ValueError):
        gs.maxprocs(1025)
    with pytest.raises(TypeError):
        gs.maxprocs("2")  # type: ignore[arg-type]
    assert gs.num_cpu() >= 1
    assert gs.num_goroutine() >= 0
    assert gs.goid() == 0  # the main thread is not a goroutine
    t0 = gs.now()
    gs.sleep(0.02)
    assert gs.now() - t0 >= 15_000_000
    gs.sleep(0)
    gs.sleep(-1)
    gs.gosched()
    with pytest.raises(TypeError):
        gs.sleep("1")  # type: ignore[arg-type]


def test_stats_dataclass() -> None:
    s = gs.stats()
    assert isinstance(s, gs.SchedStats)
    assert s.gomaxprocs == gs.maxprocs() == len(s.runq_lens)
    before = s.spawned
    wg = WaitGroup()
    wg.add(10)
    for _ in range(10):
        gs.go(gs.lib.gmp_wg_done, wg)
    wg.wait()
    assert gs.stats().spawned >= before + 10
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.goroutines = 1  # type: ignore[misc]


def test_settings_validation() -> None:
    with pytest.raises(ValueError):
        gs.set_default_stack_size(-1)
    with pytest.raises(OSError):
        gs.set_default_stack_size(1)
    gs.set_default_stack_size(256 * 1024)
    with pytest.raises(ValueError):
        gs.set_max_threads(0)
    prev = gs.set_max_threads(10_000)
    assert prev >= 1
    gs.set_max_threads(prev)


def test_interpreter_exit_with_python_goroutines_running() -> None:
    # Goroutines blocked, woken during finalization, and busy: exit stays clean.
    r = run_python(
        "import gmp_sched as gs, time\n"
        "ch = gs.Chan(object)\n"
        "def blocked(): ch.recv()\n"
        "def busy():\n"
        "    while True: gs.gosched()\n"
        "for _ in range(4): gs.go(blocked)\n"
        "for _ in range(2): gs.go(busy)\n"
        "time.sleep(0.1)\n"
        "ch.close()\n"
        "print('bye')\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "bye"


def test_many_python_goroutines_blocked_at_once() -> None:
    # 64 Python goroutines wait on one channel at the same time (64 threads), then the
    # main thread feeds them; each answers once.
    n = 64
    inbox = Chan(ctypes.c_int64)
    answers = Chan(ctypes.c_int64, n)
    started = WaitGroup()
    started.add(n)

    def worker() -> None:
        started.done()
        answers.send(inbox.recv() * 2)

    for _ in range(n):
        gs.go(worker)
    assert started.wait(timeout=60)
    for i in range(n):
        inbox.send(i, timeout=30)
    assert sorted(answers.recv(timeout=30) for _ in range(n)) == [2 * i for i in range(n)]


def test_cond_and_once_inside_python_goroutines() -> None:
    c = gs.Cond()
    once = gs.Once()
    state = {"ready": False, "inits": 0}
    done = WaitGroup()
    n = 6
    done.add(n)

    def init() -> None:
        state["inits"] += 1

    def waiter() -> None:
        once.do(init)
        with c:
            c.wait_for(lambda: state["ready"])
        done.done()

    for _ in range(n):
        gs.go(waiter)
    gs.sleep(0.05)
    with c:
        state["ready"] = True
        c.broadcast()
    assert done.wait(timeout=30)
    assert state["inits"] == 1
