#!/usr/bin/env python3
"""Benchmarks of the Python binding (gmp_sched), each against what Python offers:

1. channel round trip: Python sends an int and receives the reply
   a. gmp_sched: main thread <-> a C echo goroutine (unbuffered channels, ctypes calls)
   b. gmp_sched: main thread <-> a Python thread (the same channels, both ends Python)
   c. queue.Queue: main thread <-> a Python thread
   d. asyncio.Queue: coroutine <-> coroutine in one loop
   e. gmp_sched through the asyncio bridge: a coroutine <-> a C echo goroutine, and two
      coroutines of one loop (send_async/recv_async, async for)
2. one-way stream of ints through a 1024-element buffer to a consumer that sums them
   (a C goroutine / a Python thread)
3. start and join N units of C work (the same C function, called through ctypes):
   a. as N C goroutines (gmp_sched.go + WaitGroup)
   b. as N threading.Thread
   c. on a ThreadPoolExecutor (default workers)

Each measurement is repeated --reps times; the median is reported, with the range. Run it from the
repository with gmp_sched installed (cc builds bench/python/work.c against the libgmp
the package loaded). `--quick` runs tiny sizes (for CI, so it cannot rot).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gmp_sched as gs

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


class Echo(ctypes.Structure):
    _fields_ = [("in_", ctypes.c_void_p), ("out", ctypes.c_void_p), ("wg", ctypes.c_void_p)]


class Drain(ctypes.Structure):
    _fields_ = [("in_", ctypes.c_void_p), ("wg", ctypes.c_void_p), ("sum", ctypes.c_int64)]


class Unit(ctypes.Structure):
    _fields_ = [("wg", ctypes.c_void_p), ("sum", ctypes.c_int64)]


def build_work() -> ctypes.CDLL:
    out_dir = REPO / "target" / "bench-python"
    out_dir.mkdir(parents=True, exist_ok=True)
    so = out_dir / "libwork.so"
    subprocess.run(["cc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
                    f"-I{REPO / 'include'}", str(HERE / "work.c"),
                    os.path.realpath(gs.lib._name), "-o", str(so)], check=True)
    lib = ctypes.CDLL(str(so))
    lib.work.argtypes = [ctypes.c_void_p]
    lib.work.restype = None
    return lib


def rt_gmp_c(lib: ctypes.CDLL, n: int) -> float:
    a, b = gs.Chan(ctypes.c_int64), gs.Chan(ctypes.c_int64)
    wg = gs.WaitGroup()
    wg.add(1)
    e = Echo(a.handle, b.handle, wg._addr)
    gs.go(lib.echo, e)
    send, recv = a.send, b.recv
    t0 = time.perf_counter()
    for i in range(n):
        send(i)
        if recv() != i:
            raise AssertionError("echo mismatch")
    dt = time.perf_counter() - t0
    a.close()
    wg.wait()  # the goroutine is done with the channels: they may be released
    return dt / n


def rt_gmp_thread(n: int) -> float:
    a, b = gs.Chan(ctypes.c_int64), gs.Chan(ctypes.c_int64)

    def peer() -> None:
        for v in a:
            b.send(v)

    t = threading.Thread(target=peer)
    t.start()
    send, recv = a.send, b.recv
    t0 = time.perf_counter()
    for i in range(n):
        send(i)
        if recv() != i:
            raise AssertionError("mismatch")
    dt = time.perf_counter() - t0
    a.close()
    t.join()
    return dt / n


def rt_queue(n: int) -> float:
    a: queue.Queue[int | None] = queue.Queue(maxsize=1)
    b: queue.Queue[int] = queue.Queue(maxsize=1)

    def peer() -> None:
        while (v := a.get()) is not None:
            b.put(v)

    t = threading.Thread(target=peer)
    t.start()
    put, get = a.put, b.get
    t0 = time.perf_counter()
    for i in range(n):
        put(i)
        if get() != i:
            raise AssertionError("mismatch")
    dt = time.perf_counter() - t0
    a.put(None)
    t.join()
    return dt / n


def rt_asyncio(n: int) -> float:
    async def main() -> float:
        a: asyncio.Queue[int | None] = asyncio.Queue(maxsize=1)
        b: asyncio.Queue[int] = asyncio.Queue(maxsize=1)

        async def peer() -> None:
            while (v := await a.get()) is not None:
                await b.put(v)

        t = asyncio.create_task(peer())
        t0 = time.perf_counter()
        for i in range(n):
            await a.put(i)
            if await b.get() != i:
                raise AssertionError("mismatch")
        dt = time.perf_counter() - t0
        await a.put(None)
        await t
        return dt / n

    return asyncio.run(main())


def rt_bridge_c(lib: ctypes.CDLL, n: int) -> float:
    """A coroutine <-> a C echo goroutine, through send_async/recv_async (the bridge)."""
    a, b = gs.Chan(ctypes.c_int64), gs.Chan(ctypes.c_int64)
    wg = gs.WaitGroup()
    wg.add(1)
    e = Echo(a.handle, b.handle, wg._addr)
    gs.go(lib.echo, e)

    async def main() -> float:
        send, recv = a.send_async, b.recv_async
        t0 = time.perf_counter()
        for i in range(n):
            await send(i)
            if await recv() != i:
                raise AssertionError("echo mismatch")
        return time.perf_counter() - t0

    dt = asyncio.run(main())
    a.close()
    wg.wait()
    return dt / n


def rt_bridge_coroutines(n: int) -> float:
    """Two coroutines of one loop through gmp_sched channels (each wait: the bridge)."""
    async def main() -> float:
        a: gs.Chan[int] = gs.Chan(ctypes.c_int64)
        b: gs.Chan[int] = gs.Chan(ctypes.c_int64)

        async def peer() -> None:
            async for v in a:
                await b.send_async(v)

        t = asyncio.create_task(peer())
        t0 = time.perf_counter()
        for i in range(n):
            await a.send_async(i)
            if await b.recv_async() != i:
                raise AssertionError("mismatch")
        dt = time.perf_counter() - t0
        a.close()
        await t
        return dt

    return asyncio.run(main()) / n


def stream_gmp(lib: ctypes.CDLL, n: int) -> float:
    ch = gs.Chan(ctypes.c_int64, 1024)
    wg = gs.WaitGroup()
    wg.add(1)
    d = Drain(ch.handle, wg._addr, 0)
    gs.go(lib.drain, d)
    send = ch.send
    t0 = time.perf_counter()
    for i in range(n):
        send(i)
    ch.close()
    wg.wait()
    dt = time.perf_counter() - t0
    assert d.sum == n * (n - 1) // 2
    return dt / n


def stream_queue(n: int) -> float:
    q: queue.Queue[int | None] = queue.Queue(maxsize=1024)
    total = [0]

    def consumer() -> None:
        s = 0
        while (v := q.get()) is not None:
            s += v
        total[0] = s

    t = threading.Thread(target=consumer)
    t.start()
    put = q.put
    t0 = time.perf_counter()
    for i in range(n):
        put(i)
    put(None)
    t.join()
    dt = time.perf_counter() - t0
    assert total[0] == n * (n - 1) // 2
    return dt / n


def spawn_goroutines(lib: ctypes.CDLL, n: int) -> float:
    wg = gs.WaitGroup()
    u = Unit(wg._addr, 0)
    t0 = time.perf_counter()
    wg.add(n)
    go, work = gs.go, lib.work
    for _ in range(n):
        go(work, u)
    wg.wait()
    dt = time.perf_counter() - t0
    assert u.sum == n * sum(i * i for i in range(64))
    return dt


def spawn_threads(lib: ctypes.CDLL, n: int) -> float:
    wg = gs.WaitGroup()
    u = Unit(wg._addr, 0)
    arg = ctypes.addressof(u)
    work = lib.work
    t0 = time.perf_counter()
    wg.add(n)
    threads = []
    for _ in range(n):
        t = threading.Thread(target=work, args=(arg,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    assert u.sum == n * sum(i * i for i in range(64))
    return dt


def spawn_pool(lib: ctypes.CDLL, n: int) -> float:
    wg = gs.WaitGroup()
    u = Unit(wg._addr, 0)
    arg = ctypes.addressof(u)
    work = lib.work
    t0 = time.perf_counter()
    wg.add(n)
    with ThreadPoolExecutor() as pool:
        for _ in range(n):
            pool.submit(work, arg)
    dt = time.perf_counter() - t0
    assert u.sum == n * sum(i * i for i in range(64))
    return dt


SPREAD: dict[float, tuple[float, float]] = {}


def median(f, reps: int) -> float:  # type: ignore[no-untyped-def]
    """The median of `reps` runs; the runs' range is kept for the spread column."""
    runs = [f() for _ in range(reps)]
    m = statistics.median(runs)
    SPREAD[m] = (min(runs), max(runs))
    return m


def spread(v: float, scale: float, fmt: str) -> str:
    lo, hi = SPREAD.get(v, (v, v))
    return f"{lo * scale:{fmt}}–{hi * scale:{fmt}}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one rep (CI)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--roundtrips", type=int, default=20_000)
    ap.add_argument("--spawn", type=int, default=100_000)
    args = ap.parse_args()
    if args.quick:
        args.reps, args.roundtrips, args.spawn = 1, 500, 2_000
    lib = build_work()
    n, reps = args.roundtrips, args.reps
    print(f"gmp_sched bench: GOMAXPROCS={gs.maxprocs()}, {os.cpu_count()} CPUs, "
          f"Python {sys.version.split()[0]}, {reps} reps, medians")
    rows = [
        ("gmp_sched Chan, main thread <-> C goroutine", median(lambda: rt_gmp_c(lib, n), reps)),
        ("gmp_sched Chan, main thread <-> Python thread", median(lambda: rt_gmp_thread(n), reps)),
        ("queue.Queue, main thread <-> Python thread", median(lambda: rt_queue(n), reps)),
        ("asyncio.Queue, coroutine <-> coroutine", median(lambda: rt_asyncio(n), reps)),
    ]
    base = rows[2][1]
    print(f"\n| channel round trip ({n} per rep) | µs per round trip | range over reps | vs queue.Queue |")
    print("|---|---|---|---|")
    for name, v in rows:
        print(f"| {name} | {v * 1e6:.1f} | {spread(v, 1e6, '.1f')} | {v / base:.2f} |")
    aio = [
        ("asyncio.Queue, coroutine <-> coroutine", rows[3][1]),
        ("gmp_sched Chan through the bridge, coroutine <-> C goroutine",
         median(lambda: rt_bridge_c(lib, n), reps)),
        ("gmp_sched Chan through the bridge, coroutine <-> coroutine",
         median(lambda: rt_bridge_coroutines(n), reps)),
    ]
    abase = aio[0][1]
    print(f"\n| asyncio round trip ({n} per rep) | µs per round trip | range over reps | vs asyncio.Queue |")
    print("|---|---|---|---|")
    for name, v in aio:
        print(f"| {name} | {v * 1e6:.1f} | {spread(v, 1e6, '.1f')} | {v / abase:.2f} |")
    k = n * 5
    stream = [
        ("gmp_sched Chan(cap 1024), main thread -> C goroutine", median(lambda: stream_gmp(lib, k), reps)),
        ("queue.Queue(1024), main thread -> Python thread", median(lambda: stream_queue(k), reps)),
    ]
    print(f"\n| one-way stream ({k} items per rep) | µs per item | range over reps | vs queue.Queue |")
    print("|---|---|---|---|")
    for name, v in stream:
        print(f"| {name} | {v * 1e6:.2f} | {spread(v, 1e6, '.2f')} | {v / stream[1][1]:.2f} |")
    m = args.spawn
    spawn = [
        (f"{m} C goroutines (go + WaitGroup)", median(lambda: spawn_goroutines(lib, m), reps)),
        (f"{m} threading.Thread (start + join)", median(lambda: spawn_threads(lib, m), reps)),
        (f"{m} tasks on a ThreadPoolExecutor", median(lambda: spawn_pool(lib, m), reps)),
    ]
    g = spawn[0][1]
    print("\n| start and join, same C work | total | µs each | vs goroutines |")
    print("|---|---|---|---|")
    for name, v in spawn:
        print(f"| {name} | {v * 1e3:.1f} ms | {v / m * 1e6:.2f} | {v / g:.1f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
