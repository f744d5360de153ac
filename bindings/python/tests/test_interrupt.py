"""Ctrl-C: SIGINT to a child interpreter interrupts the main thread blocked on a channel,
select, WaitGroup, Mutex, RWMutex or sleep with KeyboardInterrupt, and leaves the
runtime consistent (each case checks the object still works afterwards)."""

from __future__ import annotations

import os
import queue
import random
import signal
import statistics
import subprocess
import sys
import threading
import time

CHILD = r'''
import ctypes, signal, sys, time
import gmp_sched as gs

signal.signal(signal.SIGINT, signal.default_int_handler)

def wait_interrupted(name, block):
    print("ready", name, flush=True)
    try:
        block()
    except KeyboardInterrupt:
        print("interrupted", name, repr(time.monotonic()), flush=True)
        return
    print("not-interrupted", name, flush=True)
    sys.exit(1)

# channel receive, then the channel still works
ch = gs.Chan(ctypes.c_int)
wait_interrupted("recv", ch.recv)
gs.go(lambda: ch.send(7))
assert ch.recv(timeout=10) == 7

# channel send on an unbuffered channel nobody reads
wait_interrupted("send", lambda: ch.send(1))
gs.go(lambda: ch.send(8))
assert ch.recv(timeout=10) == 8

# select
wait_interrupted("select", lambda: gs.select(ch, gs.Send(gs.Chan(None), None)))

# WaitGroup
wg = gs.WaitGroup()
wg.add(1)
wait_interrupted("waitgroup", wg.wait)
wg.done()
assert wg.wait(timeout=10)

# Mutex held by someone else; once released, the abandoned waiter gives it back
m = gs.Mutex()
m.lock()
wait_interrupted("mutex", m.lock)
m.unlock()
deadline = time.monotonic() + 10
while not m.try_lock():
    assert time.monotonic() < deadline, "mutex left locked"
    time.sleep(0.001)
m.unlock()

# RWMutex held for reading; a writer waits
rw = gs.RWMutex()
rw.rlock()
wait_interrupted("rwmutex", rw.lock)
rw.runlock()
assert rw.lock(timeout=10)
rw.unlock()

wait_interrupted("sleep", lambda: gs.sleep(60))
print("consistent", gs.num_goroutine() >= 0, flush=True)
'''


def line_reader(p: "subprocess.Popen[str]") -> "queue.Queue[str]":
    """The child's lines, read by a thread (a line may wait in the pipe's buffer, so
    select() on the fd cannot tell when one is there)."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert p.stdout is not None
        for line in p.stdout:
            lines.put(line)
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    return lines


def readline(lines: "queue.Queue[str]", timeout: float = 10) -> str:
    """The next line; fails the test if none comes within `timeout` seconds."""
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError("the child printed nothing (still blocked?)") from None


def test_sigint_interrupts_blocked_main_thread_quickly() -> None:
    p = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, bufsize=1)
    latencies: dict[str, float] = {}
    lines = line_reader(p)
    try:
        while True:
            line = readline(lines, 60)
            if not line:
                break
            words = line.split()
            if words[0] == "ready":
                time.sleep(0.2 + random.uniform(0, 0.05))  # blocked; any phase of a slice
                sent = time.monotonic()
                os.kill(p.pid, signal.SIGINT)
                reply = readline(lines).split()
                assert reply[:2] == ["interrupted", words[1]], reply
                latencies[words[1]] = float(reply[2]) - sent
            elif words[0] == "consistent":
                break
        rc = p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert rc == 0, p.stderr.read() if p.stderr else ""
    assert set(latencies) == {"recv", "send", "select", "waitgroup", "mutex", "rwmutex", "sleep"}
    # The design bound is one 50 ms slice (the target: 100 ms). The machine is shared,
    # so a single case may be late; the typical one must not.
    assert statistics.median(latencies.values()) < 0.1, latencies
    assert max(latencies.values()) < 0.5, latencies
    print("SIGINT latencies (s):", {k: round(v, 4) for k, v in latencies.items()})
