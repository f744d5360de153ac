#!/usr/bin/env python3
"""A bench run's table in the format of README.md and docs/performance.md.

    python3 scripts/readme_rows.py [--targets] [bench/results/<cpu>/results.md]

Prints the rows of README.md's performance table (the header included): both shapes of
each workload on one line, the ratio of the root-goroutine shape in bold. With
`--targets`, a last column gives the goal each row is held to in bench/run.py, marked
✓ / ✗: the form of docs/performance.md's tables. The script only formats what the run
measured. Default input: bench/results/amd-epyc-zen4/results.md.
"""

import sys
from pathlib import Path

# (workload, README label, unit of the metric)
ROWS = [
    ("spawn", "spawn + join, 1M goroutines", "ns"),
    ("yield2", "yield, 2 goroutines", "ns"),
    ("yield100", "yield, 100 goroutines", "ns"),
    ("pingpong", "unbuffered ping-pong round trip", "ns"),
    ("chan_mpmc", "buffered channel, 4+4 goroutines, per item", "ns"),
    ("skynet", "skynet, per leaf", "ns"),
    ("mutex", "mutex, 8 goroutines, lock+unlock (20M pairs)", "ns"),
    ("sleep_many", "100k × 10 ms sleepers, wall", "ms"),
    ("parked_rss", "1M parked goroutines, KiB each", "plain"),
    ("syscall_handoff", "syscall hand-off: throughput kept with a 5th goroutine blocked 200 ms in read", "plain"),
    ("syscall_fast", "trivial syscall (getppid) through the hand-off (`gmp_syscall`)", "ns"),
    ("hog_latency", "1 ms timer behind a goroutine that calls nothing: median lateness", "us"),
    ("tcp_rtt", "TCP round trip, loopback, 1 connection, 64 B ping-pong", "ns"),
    ("tcp_echo", "TCP echo, loopback, 1,000 connections, 64 B, per message", "ns"),
]

HEADER = "| workload (time per op unless noted) | GOMAXPROCS | libgmp (root goroutine) | libgmp (C main) | Go | ratio root / C main |"
TARGET_HEADER = " target |"


def read(path: Path) -> dict:
    """(workload, shape, procs) -> (libgmp median, Go median, ratio, met, target)."""
    rows = {}
    for line in path.read_text().splitlines():
        if not line.startswith("| ") or line.startswith("| workload"):
            continue
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) < 9:
            continue
        name, shape = (c[0][:-5], "main") if c[0].endswith("/main") else (c[0], "root")
        rows[(name, shape, c[2])] = (c[4].split()[0], c[5].split()[0], c[6], c[8], c[7])
    return rows


def fmt(v: str, unit: str) -> str:
    x = float(v)
    if unit == "ns":
        if x >= 1000:
            return f"{x / 1000:#.3g} µs"
        return f"{x:#.3g} ns" if x < 100 else f"{x:.1f} ns"
    if unit == "ms":
        return f"{x:.1f} ms"
    if unit == "us":
        return f"{x / 1000:.1f} ms" if x >= 1000 else f"{x:.1f} µs"
    return v


def target(t: str) -> str:
    return t.replace("≤", "≤ ").replace("≥", "≥ ")


def mark(met: str) -> str:
    return "✓" if met == "yes" else "✗"


def main() -> int:
    args = sys.argv[1:]
    targets = "--targets" in args
    args = [a for a in args if a != "--targets"]
    path = Path(args[0] if args else "bench/results/amd-epyc-zen4/results.md")
    rows = read(path)
    cols = HEADER.count("|") - 1 + targets
    out = [HEADER + (TARGET_HEADER if targets else ""), "|" + "---|" * cols]
    for name, label, unit in ROWS:
        if name == "parked_rss":
            # One row: the same at both GOMAXPROCS; the target is the words.
            root, main_ = rows[(name, "root", "1")], rows.get((name, "main", "1"))
            other = f" / {float(main_[2]):.2f}" if main_ else ""
            goal = f" one page + ≤ 128 B {mark(root[3])} |" if targets else ""
            out.append(
                f"| {label} | 1, 2 | {root[0]} | {main_[0] if main_ else '—'} | {root[1]} | "
                f"**{float(root[2]):.2f}**{other} |{goal}"
            )
            continue
        for i, procs in enumerate(("1", "2")):
            root = rows.get((name, "root", procs))
            main_ = rows.get((name, "main", procs))
            if root is None:
                continue
            first = label if i == 0 else ""
            lib_main = fmt(main_[0], unit) if main_ else "—"
            if name == "syscall_handoff":
                ratio = "—"
            elif main_:
                ratio = f"**{float(root[2]):.2f}** / {float(main_[2]):.2f}"
            else:
                ratio = f"**{float(root[2]):.2f}**"
            marks = mark(root[3]) + (f" / {mark(main_[3])}" if main_ else "")
            # At GOMAXPROCS=1 the mutex is judged against two locked read-modify-writes
            # (docs/performance.md, "What bounds each row"), not against Go.
            goal = "≤ 1.2× two RMWs" if name == "mutex" and procs == "1" else target(root[4])
            goal = f" {goal} {marks} |" if targets else ""
            out.append(
                f"| {first} | {procs} | {fmt(root[0], unit)} | {lib_main} | "
                f"{fmt(root[1], unit)} | {ratio} |{goal}"
            )
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
