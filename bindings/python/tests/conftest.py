"""Shared fixtures: the C worker library (built with cc against the loaded libgmp)."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
#: The repository, or an unpacked sdist (whose rust/ holds the Rust tree): the tests also
#: run from a copy outside both, where what needs them skips.
REPO = HERE.parents[2] if (HERE.parents[2] / "Cargo.toml").exists() else HERE.parent / "rust"


def include_dir() -> Path:
    """Where gmp-sched/gmp.h is: the package's copy (gmp_sched.get_include())."""
    import gmp_sched

    return Path(gmp_sched.get_include())


def libgmp_path() -> str:
    """The file of the libgmp the package loaded."""
    import gmp_sched

    return os.path.realpath(gmp_sched.lib._name)


class Job(ctypes.Structure):
    """struct job of worker.c."""

    _fields_ = [("in_", ctypes.c_void_p), ("out", ctypes.c_void_p), ("wg", ctypes.c_void_p)]


@pytest.fixture(scope="session")
def worker(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    include = include_dir()
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("worker") / "libworker.so"
    # Linked by path: its DT_NEEDED is libgmp's SONAME, which the loader matches to
    # the copy the package already loaded (one runtime per process).
    subprocess.run(
        [cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
         f"-I{include}", str(HERE / "worker.c"), libgmp_path(), "-o", str(out)],
        check=True,
    )
    lib = ctypes.CDLL(str(out))
    lib.counter_value.restype = ctypes.c_int64
    lib.counter_value.argtypes = []
    return lib


def run_python(code: str, timeout: float = 60, **kw: object) -> subprocess.CompletedProcess:
    """Runs `code` in a child interpreter (the same one, so the same gmp_sched)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, **kw)  # type: ignore[call-overload]
