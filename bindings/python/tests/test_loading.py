"""Which libgmp the package uses: its own copy, or one already in the process; never
GNU MP. Also the `python -m gmp_sched` smoke run."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gmp_sched as gs

from conftest import HERE, include_dir, libgmp_path, run_python

SHOW = (
    "import ctypes, os, gmp_sched as gs\n"
    "print(gs.how_loaded, os.path.realpath(gs.lib._name), "
    "ctypes.cast(gs.lib.gmp_go, ctypes.c_void_p).value)\n"
)


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("GMP_SCHED_LIBRARY", None)
    env.pop("LD_PRELOAD", None)
    env.update(extra)
    return env


def test_loaded_from_the_package_by_default() -> None:
    if os.environ.get("GMP_SCHED_LIBRARY"):
        pytest.skip("GMP_SCHED_LIBRARY overrides the package copy in this run")
    assert gs.how_loaded == "package"
    assert Path(gs.lib._name).parent == Path(gs.__file__).parent


def test_ld_preload_copy_is_used(tmp_path: Path) -> None:
    copy = tmp_path / "libgmp.so.0"
    shutil.copyfile(libgmp_path(), copy)
    r = run_python(SHOW, env=child_env(LD_PRELOAD=str(copy)))
    if "GMP_SCHED_LIBRARY" in os.environ and r.returncode != 0:
        pytest.skip("development run without an installed copy")
    assert r.returncode == 0, r.stderr
    how, path, _ = r.stdout.split()
    assert how == "loaded" and path == str(copy)


def test_copy_linked_by_an_extension_is_used(tmp_path: Path) -> None:
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("needs cc")
    libdir = tmp_path / "lib"
    libdir.mkdir()
    shutil.copyfile(libgmp_path(), libdir / "libgmp.so.0")
    ext = tmp_path / "libext.so"
    subprocess.run([cc, "-std=c11", "-fPIC", "-shared", f"-I{include_dir()}",
                    str(HERE / "worker.c"), str(libdir / "libgmp.so.0"),
                    f"-Wl,-rpath,{libdir}", "-o", str(ext)], check=True)
    code = (
        f"import ctypes; ext = ctypes.CDLL({str(ext)!r})\n"
        + SHOW
        + "wg = gs.WaitGroup(); wg.add(100)\n"
        "for _ in range(100): gs.go(ext.count_done, wg)\n"
        "wg.wait(); ext.counter_value.restype = ctypes.c_int64\n"
        "print(ext.counter_value(), ctypes.cast(ext.gmp_go, ctypes.c_void_p).value)\n"
    )
    r = run_python(code, env=child_env())
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()
    how, path, addr = first.split()
    count, ext_addr = second.split()
    assert how == "loaded" and path == str(libdir / "libgmp.so.0")
    assert addr == ext_addr  # one runtime: the extension and the package share gmp_go
    assert count == "100"


def test_gnu_mp_is_never_taken() -> None:
    gnu = ctypes.util.find_library("gmp")
    if gnu is None:
        pytest.skip("GNU MP is not installed")
    code = f"import ctypes, os; ctypes.CDLL({gnu!r}, mode=os.RTLD_GLOBAL)\n" + SHOW
    r = run_python(code, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    how, path, addr = r.stdout.split()
    assert how in ("package", "env") and "libgmp.so.10" not in path and int(addr) > 0


def test_python_m_smoke_run_prints_the_scheduler_trace() -> None:
    r = subprocess.run([sys.executable, "-m", "gmp_sched", "--goroutines", "20000"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "20000 C goroutines started and joined" in r.stdout
    assert "pipeline of 3 Python goroutines" in r.stdout
    assert "SCHED " in r.stderr and "gomaxprocs=" in r.stderr


def test_package_is_typed() -> None:
    assert (Path(gs.__file__).parent / "py.typed").exists()


def test_header_is_shipped() -> None:
    header = Path(gs.get_include()) / "gmp-sched" / "gmp.h"
    assert "gmp_go" in header.read_text()


def test_c_library_linked_with_an_rpath_loads_before_the_package(tmp_path: Path) -> None:
    # The README's recipe: link against the package's copy by path with an rpath to the
    # package's directory; loaded before gmp_sched is imported, the loader finds the
    # package's copy by its SONAME, and the package then uses that same runtime.
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("needs cc")
    lib = Path(libgmp_path())
    if lib.name != "libgmp.so.0":
        pytest.skip(f"the loaded library is {lib.name}, not the package's libgmp.so.0")
    ext = tmp_path / "libext.so"
    subprocess.run([cc, "-std=c11", "-fPIC", "-shared", f"-I{include_dir()}",
                    str(HERE / "worker.c"), str(lib), f"-Wl,-rpath,{lib.parent}",
                    "-o", str(ext)], check=True)
    code = (
        f"import ctypes; ext = ctypes.CDLL({str(ext)!r})\n"
        + SHOW
        + "print(ctypes.cast(ext.gmp_go, ctypes.c_void_p).value)\n"
    )
    r = run_python(code, env=child_env())
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()
    how, path, addr = first.split()
    assert how == "loaded" and path == str(lib)
    assert addr == second
