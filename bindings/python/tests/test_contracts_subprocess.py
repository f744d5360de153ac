"""subprocess.run(capture_output=True) from Python goroutines under LD_PRELOAD gets what it
gets on threads: every child exits 0 and every byte it wrote to its stdout and stderr
pipes arrives.

The pipes subprocess creates in a goroutine are made by the hooked pipe2, and the
parent reads both through a selector (poll) in the hooks while the child -- coreutils
`head` under `sh`, which the preload reaches too -- writes into them with plain blocking
writes. A flag the runtime set on the open file description underneath would reach the
child ("head: write error: Resource temporarily unavailable"). Each scenario runs in a
child interpreter with libgmp.so preloaded (a hang must not take pytest with it), first
in goroutines, then the same calls on threads; both must agree with the expected sizes.
"""

from __future__ import annotations

import os
import shutil

import pytest

from conftest import libgmp_path, run_python

OUT_BYTES = 300_000
ERR_BYTES = 70_000
WORKERS = 6
ROUNDS = 3

CODE = f"""
import shutil, subprocess, sys, threading
import gmp_sched as gs

procs = int(sys.argv[1])
gs.maxprocs(procs)
SH = shutil.which("sh")
CMD = [SH, "-c", "set -e; head -c {OUT_BYTES} /dev/zero; head -c {ERR_BYTES} /dev/zero >&2"]

def once():
    r = subprocess.run(CMD, capture_output=True, timeout=30)
    return (r.returncode, len(r.stdout), len(r.stderr), r.stderr[:80] if len(r.stderr) != {ERR_BYTES} else b"")

def worker(sink):
    for _ in range({ROUNDS}):
        sink(once())

# In goroutines (Python goroutines each run on a thread of their own while they hold the
# interpreter; the hooked calls park them).
out = gs.Chan(object, {WORKERS * ROUNDS})
for _ in range({WORKERS}):
    gs.go(worker, out.send)
in_goroutines = sorted(out.recv(timeout=50) for _ in range({WORKERS * ROUNDS}))

# The same calls on plain threads (the hooks pass straight through there).
lock = threading.Lock()
seen = []
def sink(r):
    with lock:
        seen.append(r)
ts = [threading.Thread(target=worker, args=(sink,)) for _ in range({WORKERS})]
for t in ts: t.start()
for t in ts: t.join(50)
on_threads = sorted(seen)

print("goroutines", in_goroutines)
print("threads", on_threads)
"""


@pytest.mark.parametrize("procs", [1, 2])
def test_subprocess_run_capture_output_in_goroutines_under_ld_preload(procs: int) -> None:
    if shutil.which("sh") is None or shutil.which("head") is None:
        pytest.skip("needs sh and head")
    env = dict(os.environ)
    env["LD_PRELOAD"] = libgmp_path()
    for var in ("GMP_MAXPROCS", "GMP_DEBUG", "GMP_INTERPOSE"):
        env.pop(var, None)
    r = run_python(CODE.replace("sys.argv[1]", repr(str(procs))), timeout=90, env=env)
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(" ", 1) for line in r.stdout.strip().splitlines())
    want = str([(0, OUT_BYTES, ERR_BYTES, b"")] * (WORKERS * ROUNDS))
    assert lines["threads"] == want, r.stdout
    assert lines["goroutines"] == want, r.stdout + r.stderr
