"""C goroutines (a worker library built by cc) fed by Python over channels."""

from __future__ import annotations

import ctypes
import sys
import threading

import gmp_sched as gs
from gmp_sched import Chan, WaitGroup

from conftest import Job


def test_100k_c_goroutines_results_conserved(worker: ctypes.CDLL) -> None:
    n, batch = 100_000, 10_000
    inp = Chan(ctypes.c_int64)
    out = Chan(ctypes.c_int64, cap=n)
    wg = WaitGroup()
    job = Job(inp.handle, out.handle, wg._addr)
    for start in range(0, n, batch):
        wg.add(batch)
        for _ in range(batch):
            gs.go(worker.square_one, job)
        for x in range(start, start + batch):
            inp.send(x)
    assert wg.wait(timeout=120)
    assert len(out) == n
    total = sum(out.recv() for _ in range(n))
    assert total == sum(x * x for x in range(n))
    assert gs.stats().spawned >= n


def test_python_goroutines_talk_to_c_goroutines(worker: ctypes.CDLL) -> None:
    # C echo goroutines (x -> x + 1) serve Python goroutines over shared channels.
    requests = Chan(ctypes.c_int64)
    replies = Chan(ctypes.c_int64, 64)
    echo_wg = WaitGroup()
    job = Job(requests.handle, replies.handle, echo_wg._addr)
    n_echo, n_py, per = 8, 16, 200
    echo_wg.add(n_echo)
    for _ in range(n_echo):
        gs.go(worker.echo_plus_one, job)

    sums = Chan(ctypes.c_int64, n_py)
    py_wg = WaitGroup()
    py_wg.add(n_py)

    def client(i: int) -> None:
        for k in range(per):
            requests.send(i * per + k)
        py_wg.done()

    def collector() -> None:
        s = 0
        for _ in range(n_py * per):
            s += replies.recv()
        sums.send(s)

    for i in range(n_py):
        gs.go(client, i)
    gs.go(collector)
    assert py_wg.wait(timeout=60)
    total = sums.recv(timeout=60)
    m = n_py * per
    assert total == sum(range(m)) + m
    requests.close()
    assert echo_wg.wait(timeout=30)


def test_eight_python_threads_share_channels_with_goroutines(worker: ctypes.CDLL) -> None:
    # 8 OS threads and C goroutines both send and receive on the same two channels.
    inp = Chan(ctypes.c_int64, 16)
    out = Chan(ctypes.c_int64, 16)
    wg = WaitGroup()
    job = Job(inp.handle, out.handle, wg._addr)
    n_echo = 32
    wg.add(n_echo)
    for _ in range(n_echo):
        gs.go(worker.echo_plus_one, job)

    n_threads, per = 8, 1000
    received: list[int] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def sender(t: int) -> None:
        try:
            for k in range(per):
                inp.send(t * per + k)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def receiver() -> None:
        try:
            mine = [out.recv(timeout=30) for _ in range(per)]
            with lock:
                received.extend(mine)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=sender, args=(t,)) for t in range(n_threads // 2)]
    threads += [threading.Thread(target=receiver) for _ in range(n_threads // 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    m = n_threads // 2 * per
    assert sorted(received) == [x + 1 for x in range(m)]
    inp.close()
    assert wg.wait(timeout=30)


def test_c_producer_python_consumer_with_select(worker: ctypes.CDLL) -> None:
    count = Chan(ctypes.c_int64, 1)
    data = Chan(ctypes.c_int64, 8)
    wg = WaitGroup()
    wg.add(1)
    job = Job(count.handle, data.handle, wg._addr)  # alive until the goroutine is done
    gs.go(worker.produce, job)
    count.send(500)
    quit_ = Chan(None)
    total = 0
    got = 0
    while got < 500:
        i, v = gs.select(data, quit_, timeout=30)
        assert i == 0
        total += v
        got += 1
    assert total == 500 * 501 // 2
    assert wg.wait(timeout=10)


def test_counter_worker_many_spawns(worker: ctypes.CDLL) -> None:
    wg = WaitGroup()
    before = worker.counter_value()
    n = 20_000
    wg.add(n)
    for _ in range(n):
        gs.go(worker.count_done, wg)
    assert wg.wait(timeout=60)
    assert worker.counter_value() - before == n


def test_threads_starting_different_c_functions_at_once(worker: ctypes.CDLL) -> None:
    # go() caches the last function's address: threads alternating two functions must
    # never start one with the other's address. (With the GIL of CPython 3.11 a torn
    # cache needs a thread switch between two stores, which the interpreter does not
    # make: this guards the behaviour, it did not catch a deliberately split store.)
    wg = WaitGroup()
    before = worker.counter_value()
    per, n_threads = 2000, 4
    wg.add(per * n_threads)

    def starter(t: int) -> None:
        for k in range(per):
            if (k + t) % 2:
                gs.go(worker.count_done, wg)
            else:
                gs.go(gs.lib.gmp_wg_done, wg)

    threads = [threading.Thread(target=starter, args=(t,)) for t in range(n_threads)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads between almost any two bytecodes
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert wg.wait(timeout=60)
    assert worker.counter_value() - before == per * n_threads // 2
