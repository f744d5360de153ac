"""The CPU profile (gmp_sched.cpuprofile_start, cpuprofile_stop)."""

from __future__ import annotations

import errno
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import gmp_sched as gs


def burn(seconds: float) -> int:
    end = time.process_time() + seconds
    n = 0
    while time.process_time() < end:
        n += sum(i * i for i in range(1000))
    return n


def test_profile_of_a_labelled_goroutine(tmp_path: Path) -> None:
    path = tmp_path / "cpu.pprof"

    def work() -> int:
        gs.set_label("stage", "burn")
        return burn(0.3)

    with open(path, "wb") as f:
        gs.cpuprofile_start(f, 200)
        try:
            assert gs.go(work).result() > 0
        finally:
            gs.cpuprofile_stop()
    data = path.read_bytes()
    # profile.proto: field 1 (sample_type) first; the string table names the types.
    assert data[:1] == b"\x0a"
    for s in (b"samples", b"cpu", b"nanoseconds", b"goid", b"stage", b"burn"):
        assert s in data
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        return
    tags = subprocess.run(
        [go, "tool", "pprof", "-symbolize=none", "-tags", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "stage:" in tags and "burn" in tags, tags


def test_errors(tmp_path: Path) -> None:
    with pytest.raises(OSError) as e:
        gs.cpuprofile_stop()
    assert e.value.errno == errno.EINVAL
    with open(tmp_path / "a.pprof", "wb") as f:
        with pytest.raises(OSError) as e:
            gs.cpuprofile_start(f, 20000)
        assert e.value.errno == errno.EINVAL
        gs.cpuprofile_start(f.fileno())
        try:
            with pytest.raises(OSError) as e:
                gs.cpuprofile_start(f)
            assert e.value.errno == errno.EBUSY
        finally:
            gs.cpuprofile_stop()
    with pytest.raises(TypeError):
        gs.cpuprofile_start(1, 1.5)  # type: ignore[arg-type]
