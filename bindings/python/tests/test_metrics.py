"""The scheduler's metrics (gmp_sched.metrics, gmp_metrics)."""

from __future__ import annotations

import ctypes
import math

import gmp_sched as gs


def test_metrics_have_go_names_and_count_goroutines() -> None:
    before = gs.metrics()
    assert isinstance(before["/sched/goroutines:goroutines"], int)
    assert before["/sched/gomaxprocs:threads"] == gs.maxprocs()
    ch = gs.Chan(ctypes.c_int)
    wg = gs.WaitGroup()

    def wait() -> None:
        for _ in ch:
            pass
        wg.done()

    wg.add(3)
    for _ in range(3):
        gs.go(wait)
    created = gs.metrics()["/sched/goroutines-created:goroutines"]
    assert isinstance(created, int)
    created0 = before["/sched/goroutines-created:goroutines"]
    assert isinstance(created0, int)
    assert created >= created0 + 3
    ch.close()
    wg.wait()


def test_latency_histogram_has_bounds_and_counts() -> None:
    h = gs.metrics()["/sched/latencies:seconds"]
    assert isinstance(h, gs.Histogram)
    bounds = [b for b, _ in h.buckets]
    assert bounds[0] == 128e-9
    assert math.isinf(bounds[-1])
    assert bounds == sorted(bounds)
    assert sum(c for _, c in h.buckets) == h.count
    assert h.sum >= 0
