"""``python -m gmp_sched [--procs N] [--goroutines N]``: a smoke run.

Runs a small workload with Go's scheduler trace on (GMP_DEBUG=schedtrace=50 unless
GMP_DEBUG is set): Python goroutines passing values through a pipeline of channels,
and batches of C goroutines joined by a WaitGroup. The trace lines go to stderr; a
summary and the final statistics to stdout.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m gmp_sched", description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=0, help="GOMAXPROCS (default: CPUs)")
    parser.add_argument("--goroutines", type=int, default=100_000, help="C goroutines to start")
    args = parser.parse_args(argv)
    if "GMP_DEBUG" not in os.environ:
        # The runtime reads GMP_DEBUG when it starts: run again with it set.
        os.environ["GMP_DEBUG"] = "schedtrace=50"
        os.execv(sys.executable, [sys.executable, "-m", "gmp_sched", *argv])

    import gmp_sched as gs

    if args.procs:
        gs.maxprocs(args.procs)
    print(f"gmp_sched {gs.__version__}: libgmp found via {gs.how_loaded}, GOMAXPROCS={gs.maxprocs()}")

    # A pipeline of Python goroutines: square, then add one; main sums the results.
    src: gs.Chan[int] = gs.Chan(object, 16)
    mid: gs.Chan[int] = gs.Chan(object, 16)
    out: gs.Chan[int] = gs.Chan(object, 16)

    def square() -> None:
        for v in src:
            out_v = v * v
            gs.sleep(0.0005)
            mid.send(out_v)
        mid.close()

    def add_one() -> None:
        for v in mid:
            out.send(v + 1)
        out.close()

    gs.go(square)
    gs.go(add_one)
    t0 = time.perf_counter()
    n = 400
    feeder_done = gs.WaitGroup()
    feeder_done.add(1)

    def feed() -> None:
        for i in range(n):
            src.send(i)
        src.close()
        feeder_done.done()

    gs.go(feed)
    total = sum(out)
    feeder_done.wait()
    assert total == sum(i * i + 1 for i in range(n)), total
    print(f"pipeline of 3 Python goroutines: {n} values in {time.perf_counter() - t0:.3f} s, sum {total}")

    # C goroutines: libgmp's own gmp_wg_done(gmp_wg *) is a function of one pointer,
    # so it serves as a goroutine body that needs no compiler: each one marks itself
    # done on the WaitGroup (its int result is ignored, as the C ABI allows).
    t0 = time.perf_counter()
    wg = gs.WaitGroup()
    batch = 10_000
    started = 0
    while started < args.goroutines:
        k = min(batch, args.goroutines - started)
        wg.add(k)
        for _ in range(k):
            gs.go(gs.lib.gmp_wg_done, wg)
        started += k
        gs.sleep(0.005)
    wg.wait()
    dt = time.perf_counter() - t0
    print(f"{started} C goroutines started and joined in {dt:.3f} s")
    print(gs.stats())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
