#!/usr/bin/env python3
"""Runs the libgmp-vs-Go benchmark pairs and reports libgmp/Go ratios.

    python3 bench/run.py [--quick] [--reps 5] [--only spawn,yield2] [--procs 1,2]
                         [--shapes root,main] [--out bench/results/CPU] [--build-only]
                         [--timeout SECONDS] [--impls c,go] [--no-cargo] [--list]

Builds the library (cargo build --release), every C program against it and every
Go program; then runs each (workload, GOMAXPROCS) pair alternately
(c, go, c, go, ...) --reps times as separate processes, and prints median and
min-max time per operation of each side and the ratio libgmp/Go of the medians.
A C program runs in two shapes (see SHAPES): driven by a root goroutine, and driven by
the C main thread itself; each shape is a row of its own, against the same Go runs.
Writes <out>/results.md (table), <out>/ratio.svg (chart) and <out>/results.json
(every run). Exits non-zero when a build fails or a run fails (non-zero exit,
timeout, missing or mismatched RESULT line).

Adding a workload: write bench/c/<prog>.c and bench/go/<prog>/main.go (both print
the RESULT line, see bench/c/bench.h) and add one Workload entry to WORKLOADS.
Python 3.11 standard library only.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import html
import json
import math
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
BIN = BENCH / "bin"
GO_DIR = BENCH / "go"
LIB_DIR = ROOT / "target" / "release"


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str     # row name; the programs print it as workload=<name>
    prog: str     # bench/c/<prog>.c and bench/go/<prog>/main.go
    args: dict    # full-size flags, passed as -key value
    quick: dict   # --quick flags (tiny: CI runs these so the benchmarks cannot rot)
    target: float | dict  # goal for libgmp/Go (lower is better); or {procs: goal}
    what: str     # one line for the report
    # The RESULT key the ratio compares (median libgmp / median Go). Most rows use
    # ns_per_op; a row may compare wall time or an extra key such as kib_per_g.
    metric: str = "ns_per_op"
    # For a row whose goal is absolute rather than relative to Go: libgmp's median of the
    # metric must be at least this (higher is better; `target` then only scales the chart).
    floor: float | None = None
    # The shapes the C program has (its -shape flag, see SHAPES); Go has one shape only.
    shapes: tuple = ("root", "main")

    def target_for(self, procs: int) -> float:
        if isinstance(self.target, dict):
            return self.target.get(procs, max(self.target.values()))
        return self.target

    def target_text(self) -> str:
        if self.floor is not None:
            return f"libgmp ≥{self.floor:g}"
        if isinstance(self.target, dict):
            return ", ".join(f"procs={p}: ≤{t:g}" for p, t in sorted(self.target.items()))
        return f"≤{self.target:g}"


# Who drives a C workload (the C program's -shape flag). Go's main is a goroutine, so the
# Go program has one shape, and both C shapes are compared against the same Go runs.
# A row whose libgmp and Go runs both spread over this factor (max/min) ran while the
# machine was disturbed (Row.disturbed).
DISTURBED_SPREAD = 2.0

SHAPES = {"root": 0, "main": 1}
SHAPE_LABEL = {"root": "root goroutine", "main": "C main"}


# What each metric is, for the table header of a row.
METRIC_UNIT = {"ns_per_op": "ns/op", "wall_ms": "ms wall", "kib_per_g": "KiB/goroutine",
               "retained": "throughput kept", "late_p50_us": "µs late (median)"}


# The workload table: one entry per row of the report. Targets ("fast on every path C
# programs take"): <= 0.5 of Go for spawn, skynet, pingpong, chan_mpmc, yield
# and sleep_many, <= 0.8 for the contended mutex; mutex at GOMAXPROCS=1 is judged against
# two uncontended locked read-modify-writes instead (README).
WORKLOADS = [
    Workload("spawn", "spawn", {"n": 1_000_000}, {"n": 2_000}, 0.5,
             "N goroutines spawned by one goroutine, each signals a WaitGroup; ns per goroutine"),
    Workload("yield2", "yield", {"g": 2, "n": 10_000_000}, {"g": 2, "n": 20_000}, 0.5,
             "2 goroutines yield (Gosched) n/2 times each; ns per yield"),
    Workload("yield100", "yield", {"g": 100, "n": 10_000_000}, {"g": 100, "n": 20_000}, 0.5,
             "100 goroutines yield (Gosched) n/100 times each; ns per yield"),
    Workload("pingpong", "pingpong", {"n": 1_000_000}, {"n": 5_000}, 0.5,
             "main and an echo goroutine bounce an int64 over two unbuffered channels; "
             "ns per round trip"),
    Workload("chan_mpmc", "chan_mpmc", {"n": 10_000_000}, {"n": 20_000}, 0.5,
             "4 producers send distinct int64s on one channel (cap 1024), 4 consumers sum "
             "them until it is closed; ns per item"),
    Workload("skynet", "skynet", {"n": 1_000_000}, {"n": 1_000}, 0.5,
             "Go's skynet: a 10-ary tree of goroutines, each node sums its children's "
             "numbers from its own channel (cap 10); ns per leaf"),
    Workload("mutex", "mutex", {"n": 20_000_000}, {"n": 20_000}, {1: 1.0, 2: 0.8},
             "8 goroutines lock/increment/unlock one mutex n/8 times each; "
             "ns per lock/unlock"),
    Workload("sleep_many", "sleep_many", {"n": 100_000}, {"n": 2_000}, 0.5,
             "N goroutines each sleep 10 ms, main waits for all; wall time",
             metric="wall_ms"),
    Workload("parked_rss", "parked_rss", {"n": 1_000_000}, {"n": 10_000}, 1.6,
             "N goroutines blocked receiving on one channel; KiB of RSS per parked "
             "goroutine, then close wakes all",
             metric="kib_per_g"),
    Workload("syscall_handoff", "syscall_handoff", {"ms": 400, "block_ms": 200, "rounds": 9},
             {"ms": 40, "block_ms": 20, "rounds": 1}, 1.0,
             "4 CPU-bound goroutines (slices + yield): throughput with a 5th goroutine blocked "
             "200 ms in read(2) on a pipe, over throughput without it",
             metric="retained", floor=0.95),
    Workload("syscall_fast", "syscall_fast", {"n": 5_000_000}, {"n": 20_000}, 1.0,
             "one goroutine calls getppid(2) through the syscall hand-off (gmp_syscall; "
             "Go: syscall.Syscall) n times; ns per call (raw_ns: libc's getppid(); "
             "blocking_ns: through gmp_blocking(fn))",
             shapes=("root",)),  # on C main gmp_syscall is a plain call: nothing to hand off
    Workload("hog_latency", "hog_latency", {"n": 1_000}, {"n": 20}, 1.0,
             "one goroutine spins in a loop that calls nothing; another sleeps 1 ms n times; "
             "median lateness of the wake-ups (p99 in late_p99_us)",
             metric="late_p50_us"),
    Workload("tcp_rtt", "tcp_rtt", {"n": 200_000}, {"n": 2_000}, 1.0,
             "one TCP connection on 127.0.0.1 in the process (listener, accept goroutine, "
             "echo goroutine; Go: net.Listen/Dial, conn.Read/Write): main writes 64 bytes "
             "and reads the echo, n times; ns per round trip"),
    Workload("tcp_echo", "tcp_echo", {"c": 1000, "m": 100}, {"c": 50, "m": 20}, 1.0,
             "c TCP connections on 127.0.0.1 in the process, one echo goroutine and one "
             "client goroutine per connection; after all have connected, each client writes "
             "64 bytes and reads the echo, m times; ns per message (c*m)"),
]

IMPL_LABEL = {"c": "libgmp", "go": "Go"}
CC_FLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-Wpedantic", "-pthread"]
RESULT_RE = re.compile(r"^RESULT(?: \S+=\S*)+\s*$")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sh(cmd: list[str], cwd: Path, env: dict | None = None) -> bool:
    log(f"$ {shlex.join(cmd)}" + (f"   (in {cwd.relative_to(ROOT) or '.'})" if cwd != ROOT else ""))
    try:
        r = subprocess.run(cmd, cwd=cwd, env=env)
    except OSError as e:
        log(f"  cannot run {cmd[0]}: {e}")
        return False
    if r.returncode != 0:
        log(f"  FAILED (exit {r.returncode})")
    return r.returncode == 0


def capture(cmd: list[str], cwd: Path = ROOT, timeout: float = 60) -> str:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                              timeout=timeout).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


# ---------------------------------------------------------------------------- build

def c_binary(prog: str) -> Path:
    return BIN / prog


def go_binary(prog: str) -> Path:
    return BIN / f"{prog}-go"


# scripts/spin_pingpong.c: two plain threads bouncing one cache line, no runtime at all.
PROBE = BIN / "spin_pingpong"
PROBE_ROUNDS = 300_000
# A C main run whose probe took over this many times the run's fastest probe ran while
# the host had the two vCPUs far apart (README, "Slow periods of C main's exchanges").
SLOW_LINE = 2.0


def line_rtt() -> float | None:
    """ns per round trip of one cache line between two threads, measured just before a C
    main run: every exchange between C main and an M pays a few such trips, so a slow
    host placement shows here first (a shared VM's cores can be moved apart for minutes,
    which makes a C main row several times slower and leaves the others alone)."""
    if len(os.sched_getaffinity(0)) < 2:  # one CPU: the two threads would take turns
        return None
    out = capture([str(PROBE), str(PROBE_ROUNDS)], timeout=10)
    try:
        return float(out.split()[0])
    except (IndexError, ValueError):
        return None


def build(progs: list[str], impls: list[str], cargo: bool) -> bool:
    BIN.mkdir(parents=True, exist_ok=True)
    ok = True
    if "c" in impls:
        if cargo and not sh(["cargo", "build", "--release"], ROOT):
            return False
        lib = LIB_DIR / "libgmp.so"
        if not lib.exists():
            log(f"missing {lib}")
            return False
        header = ROOT / "include" / "gmp-sched" / "gmp.h"
        if not header.exists():  # else cc would fail, or find an installed copy
            log(f"missing {header}")
            return False
        # The probe of the two CPUs' cache-line round trip (`line_rtt`).
        ok &= sh(["cc", *CC_FLAGS, "scripts/spin_pingpong.c", "-o",
                  str(PROBE.relative_to(ROOT))], ROOT)
        for prog in progs:
            # Link the library by path: -lgmp would be GNU MP.
            ok &= sh(["cc", *CC_FLAGS, "-I", "include", f"bench/c/{prog}.c",
                      str(lib.relative_to(ROOT)), f"-Wl,-rpath,{LIB_DIR}",
                      "-o", str(c_binary(prog).relative_to(ROOT))], ROOT)
    if "go" in impls:
        for prog in progs:
            ok &= sh(["go", "build", "-o", str(go_binary(prog)), f"./{prog}"], GO_DIR)
    return ok


# ---------------------------------------------------------------------------- run

@dataclasses.dataclass
class Run:
    workload: str
    impl: str
    procs: int
    rep: int
    ok: bool
    shape: str = "root"  # C: who drove it (SHAPES); Go: always its main goroutine
    ns_per_op: float | None = None
    wall_ms: float | None = None
    maxrss_kib: int | None = None
    n: int | None = None
    value: float | None = None  # the row's metric (Workload.metric)
    extra: dict = dataclasses.field(default_factory=dict)  # the other RESULT keys
    error: str = ""
    cmd: str = ""


def parse_result(stdout: str) -> dict | None:
    lines = [l for l in stdout.splitlines() if l.startswith("RESULT ")]
    if len(lines) != 1 or not RESULT_RE.match(lines[0]):
        return None
    return dict(kv.split("=", 1) for kv in lines[0].split()[1:])


def run_one(w: Workload, impl: str, procs: int, rep: int, args: dict, timeout: float,
            shape: str = "root") -> Run:
    exe = c_binary(w.prog) if impl == "c" else go_binary(w.prog)
    cmd = [str(exe)] + [f"-{k}={v}" for k, v in args.items()] + [f"-procs={procs}"]
    if impl == "c" and shape != "root":  # the default shape stays off the command line
        cmd.append(f"-shape={SHAPES[shape]}")
    env = dict(os.environ, GOMAXPROCS=str(procs), GMP_MAXPROCS=str(procs))
    run = Run(w.name, impl, procs, rep, ok=False, shape=shape,
              cmd=shlex.join([str(exe.relative_to(ROOT)), *cmd[1:]]))
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        run.error = f"timeout after {timeout:g} s"
        return run
    except OSError as e:
        run.error = f"cannot run: {e}"
        return run
    res = parse_result(r.stdout)
    if r.returncode != 0:
        tail = " | ".join(r.stderr.strip().splitlines()[-3:])
        how = (f"killed by {signal.Signals(-r.returncode).name}" if r.returncode < 0
               else f"exit {r.returncode}")
        run.error = how + (f": {tail}" if tail else "")
    elif res is None:
        run.error = "no (single, well-formed) RESULT line on stdout"
    elif (res.get("workload"), res.get("impl"), res.get("procs"), res.get("shape", "root")) != (
            w.name, impl, str(procs), shape):
        run.error = (f"RESULT says workload={res.get('workload')} impl={res.get('impl')} "
                     f"procs={res.get('procs')} shape={res.get('shape', 'root')}")
    else:
        try:
            run.ns_per_op = float(res["ns_per_op"])
            run.wall_ms = float(res["wall_ms"])
            run.maxrss_kib = int(res["maxrss_kib"])
            run.n = int(res["n"])
            run.value = float(res[w.metric])
            run.extra = {k: v for k, v in res.items() if k not in (
                "workload", "impl", "procs", "n", "ns_per_op", "wall_ms", "maxrss_kib",
                "shape")}
            run.ok = all(math.isfinite(x) and x > 0 for x in (run.ns_per_op, run.value))
            if not run.ok:
                run.error = f"bad ns_per_op={res['ns_per_op']} or {w.metric}={res[w.metric]}"
        except (KeyError, ValueError) as e:
            run.error = f"bad RESULT line: {e}"
    return run


@dataclasses.dataclass
class Row:
    w: Workload
    procs: int
    shape: str  # the C side's shape (SHAPES)
    runs: dict  # impl -> list[Run]; the Go list is shared by the rows of both shapes

    @property
    def label(self) -> str:
        """The row's name: the workload, with /main for the C-main shape."""
        return self.w.name if self.shape == "root" else f"{self.w.name}/{self.shape}"

    def stats(self, impl: str) -> tuple[float, float, float] | None:
        xs = [r.value for r in self.runs.get(impl, []) if r.ok]
        return (statistics.median(xs), min(xs), max(xs)) if xs else None

    def rss(self, impl: str) -> int | None:
        xs = [r.maxrss_kib for r in self.runs.get(impl, []) if r.ok]
        return int(statistics.median(xs)) if xs else None

    @property
    def failed(self) -> bool:
        return any(not r.ok for rs in self.runs.values() for r in rs)

    @property
    def ratio(self) -> float | None:
        c, g = self.stats("c"), self.stats("go")
        if self.failed or c is None or g is None:
            return None
        return c[0] / g[0]

    @property
    def status(self) -> str:
        if self.failed:
            return "FAILED"
        if self.w.floor is not None:
            c = self.stats("c")
            return "n/a" if c is None else "yes" if c[0] >= self.w.floor else "no"
        if self.ratio is None:
            return "n/a"
        return "yes" if self.ratio <= self.target else "no"

    @property
    def target(self) -> float:
        return self.w.target_for(self.procs)

    @property
    def disturbed(self) -> bool:
        """Both sides' runs spread over DISTURBED_SPREAD (max/min): what a stretch of a
        shared VM running slow for everyone looks like (2026-11-24: spawn at GOMAXPROCS=2
        took 2-3x its usual time on both sides for three reps), as opposed to one side's
        own variance. The medians of such a row say little; run it again."""
        c, g = self.stats("c"), self.stats("go")
        if c is None or g is None or min(c[1], g[1]) <= 0:
            return False
        return c[2] / c[1] >= DISTURBED_SPREAD and g[2] / g[1] >= DISTURBED_SPREAD


# ---------------------------------------------------------------------------- report

def fmt_ns(x: float) -> str:
    return f"{x:.0f}" if x >= 1000 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def fmt_stats(s: tuple[float, float, float] | None) -> str:
    if s is None:
        return "-"
    return f"{fmt_ns(s[0])} ({fmt_ns(s[1])}–{fmt_ns(s[2])})"


HEADER = ["workload", "shape (libgmp)", "procs", "metric", "libgmp median (min–max)", "Go median (min–max)",
          "ratio libgmp/Go", "target", "met?"]


def table_rows(rows: list[Row]) -> list[list[str]]:
    out = []
    for r in rows:
        ratio = r.ratio
        out.append([r.label, SHAPE_LABEL[r.shape], str(r.procs),
                    METRIC_UNIT.get(r.w.metric, r.w.metric),
                    fmt_stats(r.stats("c")), fmt_stats(r.stats("go")),
                    f"{ratio:.3f}" if ratio is not None else "-",
                    r.w.target_text() if r.w.floor is not None else f"≤{r.target:g}", r.status])
    return out


def line_probes(rows: list[Row]) -> dict[str, list[float]]:
    """The line_rtt probes taken before each row's C main runs, by row name."""
    out = {}
    for r in rows:
        xs = [float(run.extra["line_rtt_ns"]) for run in r.runs.get("c", [])
              if "line_rtt_ns" in run.extra]
        if xs:
            out[f"{r.label} procs={r.procs}"] = xs
    return out


def disturbed_rows(rows: list[Row]) -> list[str]:
    """The rows that ran while the machine was disturbed (Row.disturbed), named for a report."""
    return [f"{r.label} procs={r.procs}" for r in rows if r.disturbed]


def print_table(rows: list[Row]) -> None:
    body = table_rows(rows)
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(HEADER)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    print(line(HEADER))
    print(line(["-" * w for w in widths]))
    for b in body:
        print(line(b))
    disturbed = disturbed_rows(rows)
    if disturbed:
        print(f"\nDisturbed (both sides spread over {DISTURBED_SPREAD:g}x): "
              + ", ".join(disturbed) + ": run them again.")


def cpu_family() -> str:
    """The results folder of this machine's CPU: one per family the project is measured on
    (contended rows and the cost of single instructions such as `stmxcsr` and `pause`
    differ between them), e.g. amd-epyc-zen4, amd-epyc-zen5, intel-xeon."""
    vendor, model, family, model_no = "", "", -1, -1
    try:
        for l in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = l.partition(":")
            key, val = key.strip(), val.strip()
            if key == "vendor_id" and not vendor:
                vendor = val
            elif key == "model name" and not model:
                model = val
            elif key == "cpu family" and family < 0:
                family = int(val)
            elif key == "model" and model_no < 0:
                model_no = int(val)
    except (OSError, ValueError):
        pass
    if vendor == "AuthenticAMD":
        name = "amd-epyc" if "EPYC" in model else "amd"
        return name + amd_generation(family, model_no)
    if vendor == "GenuineIntel":
        return "intel-xeon" if "Xeon" in model else "intel"
    return "other"


def amd_generation(family: int, model_no: int) -> str:
    """The Zen generation of an AMD CPU as a folder suffix ("" when unknown). Family 25
    (0x19) holds Zen 3 (models 0x00-0x0F, 0x20-0x5F) and Zen 4 (0x10-0x1F, 0x60-0xAF);
    family 26 (0x1A) is Zen 5."""
    if family == 23:
        return "-zen2" if model_no >= 0x30 else "-zen1"
    if family == 25:
        zen4 = 0x10 <= model_no <= 0x1F or 0x60 <= model_no <= 0xAF
        return "-zen4" if zen4 else "-zen3"
    if family == 26:
        return "-zen5"
    return ""


def machine_info() -> dict:
    cpu = "unknown CPU"
    try:
        for l in Path("/proc/cpuinfo").read_text().splitlines():
            if l.startswith("model name"):
                cpu = l.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        for l in Path("/proc/meminfo").read_text().splitlines():
            if l.startswith("MemTotal:"):
                mem = f"{int(l.split()[1]) / 2**20:.0f} GiB"
    except (OSError, ValueError):
        pass
    commit = capture(["git", "rev-parse", "--short", "HEAD"])
    if commit and capture(["git", "status", "--porcelain", "--untracked-files=no"]):
        commit += " (dirty)"
    return {
        "cpu": cpu,
        "cores": len(os.sched_getaffinity(0)),
        "memory": mem,
        "kernel": f"{platform.system()} {platform.release()}",
        "go": capture(["go", "env", "GOVERSION"]) or "go ?",
        "rustc": capture(["rustc", "--version"]),
        "cc": capture(["cc", "--version"]).split("\n")[0],
        "commit": commit,
        "date": dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
    }


def write_markdown(path: Path, rows: list[Row], m: dict, opts: dict) -> None:
    md = ["# libgmp vs Go: benchmark results", ""]
    md.append(f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory']}, {m['kernel']}.  ")
    md.append(f"Toolchains: {m['go']}, {m['rustc']}, {m['cc']}.  ")
    md.append(f"Commit {m['commit'] or 'unknown'}, {m['date']}.  ")
    md.append(f"Command: `{opts['command']}` ({opts['reps']} alternating runs per side, "
              f"each a separate process; ratio = libgmp median / Go median of the row's "
              f"metric (ns per op unless stated), lower is better).")
    md.append("")
    body = table_rows(rows)
    hdr = HEADER + ["libgmp maxrss KiB", "Go maxrss KiB"]
    md.append("| " + " | ".join(hdr) + " |")
    md.append("|" + "|".join("---:" if i in (2, 6) else "---" for i in range(len(hdr))) + "|")
    for r, b in zip(rows, body):
        rss = [str(r.rss(i)) if r.rss(i) is not None else "-" for i in ("c", "go")]
        md.append("| " + " | ".join(b + rss) + " |")
    md.append("")
    md.append("![libgmp/Go ratio per workload](ratio.svg)")
    md.append("")
    md.append("Shapes (who drives the libgmp workload, `-shape`; Go's main is a goroutine, so "
              "the Go side has one shape and both libgmp rows of a workload are compared "
              "against the same Go runs):")
    md.append("")
    md.append("- **root goroutine**: the C main thread starts one root goroutine that does what "
              "Go's main does, and waits for it.")
    md.append("- **C main**: the C main thread does it itself, as a foreign thread (spawns, "
              "sends, receives and waits without a P; it blocks on a futex where a goroutine "
              "parks).")
    md.append("")
    md.append("Workloads:")
    md.append("")
    seen = set()
    for r in rows:
        if r.w.name not in seen:
            seen.add(r.w.name)
            args = " ".join(f"-{k} {v}" for k, v in opts["args"][r.w.name].items())
            md.append(f"- `{r.w.name}` ({args}): {r.w.what}.")
    probes = line_probes(rows)
    if probes:
        fastest = min(x for xs in probes.values() for x in xs)
        slow = [label for label, xs in probes.items() if max(xs) > SLOW_LINE * fastest]
        allx = sorted(x for xs in probes.values() for x in xs)
        md.append("")
        md.append(f"Before each C main run, `scripts/spin_pingpong.c` ({PROBE_ROUNDS:,} round "
                  "trips of one cache line between two plain threads) measured the machine's "
                  f"own cross-CPU round trip: median {fmt_ns(statistics.median(allx))} ns "
                  f"({fmt_ns(allx[0])}–{fmt_ns(allx[-1])}). "
                  + (f"Rows with a run whose probe took over {SLOW_LINE:g}x the fastest (the "
                     "host had the CPUs far apart; such a row's C main runs are slow for "
                     "reasons outside the library): " + ", ".join(slow) + "."
                     if slow else f"No probe took over {SLOW_LINE:g}x the fastest."))
    disturbed = disturbed_rows(rows)
    if disturbed:
        md.append("")
        md.append(f"Rows whose runs spread over {DISTURBED_SPREAD:g}x (max/min) on both sides, "
                  "as when the machine slows down for everyone; their medians are "
                  "unreliable, run them again: " + ", ".join(disturbed) + ".")
    fails = [run for run in unique_runs(rows) if not run.ok]
    if fails:
        md.append("")
        md.append("Failed runs:")
        md.append("")
        for f in fails:
            shape = f" ({SHAPE_LABEL[f.shape]})" if f.impl == "c" else ""
            md.append(f"- {f.workload} {IMPL_LABEL[f.impl]}{shape} procs={f.procs} "
                      f"rep {f.rep}: {f.error} (`{f.cmd}`)")
    path.write_text("\n".join(md) + "\n")


def unique_runs(rows: list[Row]) -> list[Run]:
    """Every run once (the rows of a workload's two shapes share their Go runs)."""
    seen, out = set(), []
    for r in rows:
        for rs in r.runs.values():
            for run in rs:
                if id(run) not in seen:
                    seen.add(id(run))
                    out.append(run)
    return out


PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948"]
# The C-main shape's bars: the same hue as the root goroutine's, lighter, hatched.
PALETTE_MAIN = ["#a9c1da", "#f8c595", "#a8d3a2", "#d8bcd1", "#badbd8", "#f6e4a4"]


def bar_fill(pi: int, shape: str) -> str:
    return (PALETTE[pi % len(PALETTE)] if shape == "root"
            else f"url(#hatch{pi % len(PALETTE_MAIN)})")


def nice_step(span: float) -> float:
    raw = span / 6
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def write_svg(path: Path, rows: list[Row], m: dict, quick: bool) -> None:
    names = list(dict.fromkeys(r.w.name for r in rows))
    procs = sorted({r.procs for r in rows})
    shapes = [sh for sh in SHAPES if any(r.shape == sh for r in rows)]
    bars = [(p, sh) for p in procs for sh in shapes]  # per workload: shapes side by side
    ratios = [r.ratio for r in rows if r.ratio is not None]
    targets = [r.target for r in rows]
    top = max([1.25, *(t * 1.2 for t in targets), *(x * 1.15 for x in ratios)])
    top = min(top, 4.0)  # taller bars are clipped and labelled with their value
    step = nice_step(top)
    top = math.ceil(top / step) * step

    bar_w, gap_in = (34, 6) if len(bars) <= 2 else (26, 4)
    group_w = len(bars) * bar_w + (len(bars) - 1) * gap_in
    left, right, top_pad, bottom = 70, 30, 90, 70
    plot_h = 320
    legend = [(p, sh, f"GOMAXPROCS={p}" + (f", {SHAPE_LABEL[sh]}" if len(shapes) > 1 else ""))
              for p, sh in bars]
    legend_step = lambda text: 130 if len(shapes) == 1 else 16 + 7 * len(text) + 20
    legend_w = sum(legend_step(t) for _, _, t in legend) + 80
    plot_w = max(560, legend_w, len(names) * (group_w + 40) + 40)
    gap_out = (plot_w - len(names) * group_w) / (len(names) + 1)
    width, height = left + plot_w + right, top_pad + plot_h + bottom
    y = lambda v: top_pad + plot_h - (min(v, top) / top) * plot_h
    esc = lambda s: html.escape(str(s), quote=True)

    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
         f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" '
         f'font-size="12">',
         '<defs>' + "".join(
             f'<pattern id="hatch{i}" width="6" height="6" patternUnits="userSpaceOnUse" '
             f'patternTransform="rotate(45)"><rect width="6" height="6" fill="{c}"/>'
             f'<line x1="0" y1="0" x2="0" y2="6" stroke="{PALETTE[i]}" stroke-width="2"/>'
             f'</pattern>' for i, c in enumerate(PALETTE_MAIN)) + '</defs>',
         f'<rect width="{width}" height="{height}" fill="white"/>',
         f'<text x="{width / 2}" y="24" text-anchor="middle" font-size="15" font-weight="bold">'
         f'libgmp / Go{" (--quick sizes, not a measurement)" if quick else ""}'
         f'</text>',
         f'<text x="{width / 2}" y="44" text-anchor="middle" fill="#444">'
         f'{esc(m["cpu"])}, {m["cores"]} cores · {esc(m["go"])} · {esc(m["date"])}</text>']
    # legend
    lx = left
    for p, sh, text in legend:
        s.append(f'<rect x="{lx}" y="58" width="12" height="12" '
                 f'fill="{bar_fill(procs.index(p), sh)}"/><text x="{lx + 16}" y="68">{esc(text)}</text>')
        lx += legend_step(text)
    s.append(f'<line x1="{lx}" y1="64" x2="{lx + 22}" y2="64" stroke="#c00" '
             f'stroke-dasharray="5,3" stroke-width="2"/><text x="{lx + 26}" y="68">target</text>')
    # grid and axis
    v = 0.0
    while v <= top + 1e-9:
        s.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{left + plot_w}" y2="{y(v):.1f}" '
                 f'stroke="#e5e5e5"/><text x="{left - 6}" y="{y(v) + 4:.1f}" '
                 f'text-anchor="end">{v:g}</text>')
        v += step
    s.append(f'<text x="18" y="{top_pad + plot_h / 2}" text-anchor="middle" '
             f'transform="rotate(-90 18 {top_pad + plot_h / 2})">libgmp / Go (row metric)</text>')
    s.append(f'<line x1="{left}" y1="{top_pad}" x2="{left}" y2="{top_pad + plot_h}" stroke="#333"/>')
    s.append(f'<line x1="{left}" y1="{top_pad + plot_h}" x2="{left + plot_w}" '
             f'y2="{top_pad + plot_h}" stroke="#333"/>')
    # bars
    by_key = {(r.w.name, r.procs, r.shape): r for r in rows}
    target_lines = []  # drawn over the bars
    for gi, name in enumerate(names):
        gx = left + gap_out + gi * (group_w + gap_out)
        for bi, (p, sh) in enumerate(bars):
            pi = procs.index(p)
            r = by_key.get((name, p, sh))
            if r is None:
                continue
            x = gx + bi * (bar_w + gap_in)
            cx = x + bar_w / 2
            ty = y(r.target)  # dashed target over each bar (it may differ per procs)
            if r.w.floor is None:
                target_lines.append(f'<line x1="{x - 3}" y1="{ty:.1f}" x2="{x + bar_w + 3}" '
                                    f'y2="{ty:.1f}" stroke="#c00" stroke-dasharray="5,3" '
                                    f'stroke-width="2"/>')
            if r.ratio is None:
                s.append(f'<text x="{cx}" y="{top_pad + plot_h - 6}" text-anchor="middle" '
                         f'fill="#c00" font-size="10" transform="rotate(-90 {cx} '
                         f'{top_pad + plot_h - 6})" dx="0" dy="4">{esc(r.status)}</text>')
                continue
            yt = y(r.ratio)
            s.append(f'<rect x="{x}" y="{yt:.1f}" width="{bar_w}" height="{top_pad + plot_h - yt:.1f}" '
                     f'fill="{bar_fill(pi, sh)}"><title>{esc(name)} procs={p} '
                     f'{esc(SHAPE_LABEL[sh])}: {r.ratio:.3f}</title></rect>')
            clipped = r.ratio > top
            if clipped:
                s.append(f'<path d="M{x} {yt + 10:.1f} l{bar_w} -6 M{x} {yt + 16:.1f} l{bar_w} -6" '
                         f'stroke="white" stroke-width="3"/>')
            weight = ' font-weight="bold"' if clipped else ""
            s.append(f'<text x="{cx}" y="{yt - 4:.1f}" text-anchor="middle" font-size="11" '
                     f'paint-order="stroke" stroke="white" stroke-width="3"{weight}>'
                     f'{r.ratio:.2f}</text>')
        s.append(f'<text x="{gx + group_w / 2}" y="{top_pad + plot_h + 20}" text-anchor="middle" '
                 f'font-size="13">{esc(name)}</text>')
    # Go = 1.0
    s.append(f'<line x1="{left}" y1="{y(1):.1f}" x2="{left + plot_w}" y2="{y(1):.1f}" '
             f'stroke="#000" stroke-width="1.5"/>')
    s.append(f'<text x="{left + plot_w - 4}" y="{y(1) - 5:.1f}" text-anchor="end" '
             f'font-weight="bold">Go = 1.0</text>')
    s.extend(target_lines)  # over the bars and the Go line
    s.append(f'<text x="{left}" y="{height - 14}" fill="#666" font-size="11">Bar = median libgmp '
             f'÷ median Go of the row\'s metric (ns/op, or see the table). '
             f'Lower is better.'
             + (' Hatched: libgmp driven by the C main thread (a foreign thread) instead of a '
                'root goroutine; same Go runs.' if len(shapes) > 1 else '') + '</text>')
    s.append("</svg>")
    path.write_text("\n".join(s) + "\n")


# ---------------------------------------------------------------------------- main

def csv(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="tiny sizes, 1 rep (CI: keeps the benchmarks from rotting); "
                         "default --out bench/out/quick")
    ap.add_argument("--reps", type=int, help="runs per side per row (default 5, --quick 1)")
    ap.add_argument("--only", type=csv,
                    help="comma-separated workloads (default all); a workload selects both its "
                         "shapes, <workload>/<shape> (pingpong/main) one")
    ap.add_argument("--procs", type=csv, default=["1", "2"], help="GOMAXPROCS values (default 1,2)")
    ap.add_argument("--shapes", type=csv, default=list(SHAPES),
                    help="who drives the C workloads: root (a root goroutine), main (the C "
                         "main thread); default root,main")
    ap.add_argument("--out", type=Path,
                    help="report folder (default bench/results/<cpu family>: amd-epyc-zen4, "
                    "amd-epyc-zen5, intel-xeon, ...)")
    ap.add_argument("--build-only", action="store_true", help="build everything, run nothing")
    ap.add_argument("--timeout", type=float, help="seconds per run (default 300, --quick 60)")
    ap.add_argument("--impls", type=csv, default=["c", "go"],
                    help="sides to build and run: c,go (default both; 'go' alone records a Go baseline)")
    ap.add_argument("--no-cargo", action="store_true",
                    help="do not run cargo build (use the existing target/release/libgmp.so)")
    ap.add_argument("--list", action="store_true", help="list the workloads and exit")
    a = ap.parse_args()

    if a.list:
        for w in WORKLOADS:
            for sh in w.shapes:
                name = w.name if sh == "root" else f"{w.name}/{sh}"
                print(f"{name:20} prog={w.prog:15} shape={sh:4} args={w.args} quick={w.quick} "
                      f"metric={w.metric} target {w.target_text()}  {w.what}")
        return 0
    known = {w.name: w for w in WORKLOADS}
    if not a.shapes or any(sh not in SHAPES for sh in a.shapes):
        ap.error(f"--shapes takes {', '.join(SHAPES)} or both")
    # --only: workload -> the shapes it selects
    only: dict[str, set] | None = None
    if a.only is not None:
        only = {}
        for x in a.only:
            name, _, sh = x.partition("/")
            if name not in known or (sh and sh not in known[name].shapes):
                ap.error(f"unknown workload {x}; known: {', '.join(known)} "
                         f"(each may end in /root or /main, see --list)")
            only.setdefault(name, set()).update([sh] if sh else SHAPES)
    if not a.impls or any(i not in IMPL_LABEL for i in a.impls):
        ap.error("--impls takes c, go or c,go")
    try:
        procs = [int(p) for p in a.procs]
        assert procs and all(p > 0 for p in procs)
    except (ValueError, AssertionError):
        ap.error("--procs takes positive integers, e.g. 1,2")
    impls = [i for i in ("c", "go") if i in a.impls]

    def shapes_of(w: Workload) -> list[str]:
        if "c" not in impls:  # the Go program has one shape
            return ["root"]
        return [sh for sh in SHAPES if sh in w.shapes and sh in a.shapes
                and (only is None or sh in only.get(w.name, ()))]

    workloads = [w for w in WORKLOADS if (only is None or w.name in only) and shapes_of(w)]
    if not workloads:
        ap.error("no workload left to run (--only / --shapes)")
    reps = a.reps if a.reps is not None else (1 if a.quick else 5)
    if reps < 1:
        ap.error("--reps must be >= 1")
    timeout = a.timeout or (60.0 if a.quick else 300.0)
    out = a.out or (BENCH / "out" / "quick" if a.quick else BENCH / "results" / cpu_family())

    progs = list(dict.fromkeys(w.prog for w in workloads))
    if not build(progs, impls, cargo=not a.no_cargo):
        log("build FAILED")
        return 1
    if a.build_only:
        log("build OK")
        return 0

    rows = []
    all_args = {w.name: (w.quick if a.quick else w.args) for w in workloads}
    t_start = time.monotonic()
    for w in workloads:
        shapes = shapes_of(w)
        for p in procs:
            go_runs: list[Run] = []  # one Go run per rep, shared by the rows of both shapes
            wrows = {sh: Row(w, p, sh, {i: (go_runs if i == "go" else []) for i in impls})
                     for sh in shapes}
            # Per rep: c (root goroutine), go, c (C main): the sides alternate, and each
            # C run is next to a Go run.
            c_steps = [("c", sh) for sh in shapes] if "c" in impls else []
            steps = c_steps[:1] + ([("go", "root")] if "go" in impls else []) + c_steps[1:]
            for rep in range(1, reps + 1):
                for impl, sh in steps:
                    probe = line_rtt() if impl == "c" and sh == "main" else None
                    run = run_one(w, impl, p, rep, all_args[w.name], timeout, sh)
                    if probe is not None:
                        run.extra["line_rtt_ns"] = probe
                    (go_runs if impl == "go" else wrows[sh].runs["c"]).append(run)
                    who = IMPL_LABEL[impl] + (f" ({SHAPE_LABEL[sh]})" if impl == "c" else "")
                    log(f"  {w.name:15} procs={p} {who:23} rep {rep}/{reps}: "
                        + (f"{fmt_ns(run.ns_per_op)} ns/op, {run.wall_ms:.0f} ms, "
                           f"{run.maxrss_kib} KiB"
                           + (f", {w.metric}={run.value:g}"
                              if w.metric not in ("ns_per_op", "wall_ms") else "")
                           if run.ok else f"FAILED: {run.error}")
                        + (f" (line round trip {probe:.0f} ns)" if probe is not None else ""))
            rows.extend(wrows.values())
    log(f"runs took {time.monotonic() - t_start:.0f} s")

    m = machine_info()
    print()
    print(f"{m['cpu']}, {m['cores']} cores, {m['go']}, {m['date']}"
          f"{' (--quick sizes: not a measurement)' if a.quick else ''}")
    print_table(rows)

    out.mkdir(parents=True, exist_ok=True)
    opts = {"command": shlex.join(["python3", "bench/run.py", *sys.argv[1:]]), "reps": reps,
            "args": all_args, "shapes": {w.name: shapes_of(w) for w in workloads}}
    write_markdown(out / "results.md", rows, m, opts)
    write_svg(out / "ratio.svg", rows, m, a.quick)
    (out / "results.json").write_text(json.dumps({
        "machine": m, "options": opts, "quick": a.quick,
        "targets": {w.name: {str(p): w.target_for(p) for p in procs} for w in workloads},
        "metrics": {w.name: w.metric for w in workloads},
        "runs": [dataclasses.asdict(run) for run in unique_runs(rows)],
    }, indent=1) + "\n")
    print(f"\nwrote {out / 'results.md'}, {out / 'ratio.svg'}, {out / 'results.json'}")

    failed = [r for r in rows if r.failed]
    if failed:
        log(f"{len(failed)} row(s) FAILED: "
            + ", ".join(f"{r.label} procs={r.procs}" for r in failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
