"""mypy --strict accepts typical code and rejects wrong element types (skipped where mypy
is not installed: `pip install mypy`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

GOOD = '''
import asyncio, ctypes
import gmp_sched as gs

ints = gs.Chan(ctypes.c_int64, cap=4)
ints.send(1)
n: int = ints.recv()
ok, maybe = ints.try_recv()
floats = gs.Chan(ctypes.c_double)
x: float = floats.recv(timeout=0.1) if False else 0.0
raw = gs.Chan(16)
b: bytes = raw.recv() if False else b""
signal = gs.Chan(None)
signal.send()
objs: gs.Chan[str] = gs.Chan(object)
objs.send("s")
s: str = objs.recv() if False else ""

class Point(ctypes.Structure):
    _fields_ = [("x", ctypes.c_int), ("y", ctypes.c_int)]

points = gs.Chan(Point, cap=1)
points.send(Point(1, 2))
p: Point = points.recv()

def add(a: int, b: int = 0) -> int:
    return a + b

g = gs.go(add, 1, b=2)
total: int = g.result(timeout=1) + g.id
g.join(0.1)

async def main() -> list[int]:
    return [v async for v in ints]

idx, val = gs.select(gs.Recv(ints), gs.Send(objs, "x"), default=True)
gs.excepthook = lambda args: None
'''

# Each line must be an error (the line numbers are checked).
BAD = '''
import ctypes
import gmp_sched as gs

ints = gs.Chan(ctypes.c_int64)
objs: gs.Chan[str] = gs.Chan(object)
class Point(ctypes.Structure):
    _fields_ = [("x", ctypes.c_int)]
points = gs.Chan(Point)
def add(a: int) -> int:
    return a
ints.send("str")  # E
objs.send(3)  # E
s: str = ints.recv()  # E
points.send(5)  # E
r: str = gs.go(add, 1).result()  # E
ints.try_send(b"x")  # E
f: float = gs.Chan(16).recv()  # E
'''


def run_mypy(tmp_path: Path, name: str, code: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / name
    path.write_text(code)
    env = dict(os.environ)
    import gmp_sched

    pkg_parent = Path(gmp_sched.__file__).resolve().parent.parent
    if "site-packages" not in pkg_parent.parts and "dist-packages" not in pkg_parent.parts:
        env["MYPYPATH"] = str(pkg_parent)  # an editable install or a source checkout
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         "--cache-dir", str(tmp_path / "cache"), "--python-version",
         f"{sys.version_info[0]}.{sys.version_info[1]}", "--hide-error-context",
         "--no-error-summary", str(path)],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)


def test_mypy_accepts_good_code(tmp_path: Path) -> None:
    r = run_mypy(tmp_path, "good.py", GOOD)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_rejects_wrong_element_types(tmp_path: Path) -> None:
    r = run_mypy(tmp_path, "bad.py", BAD)
    want = {i for i, line in enumerate(BAD.splitlines(), 1) if line.endswith("# E")}
    got = {int(m.group(1)) for m in re.finditer(r"bad\.py:(\d+): error", r.stdout)}
    assert got == want, r.stdout + r.stderr
