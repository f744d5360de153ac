"""The binding cannot fall behind the library: every exported gmp_* symbol is declared,
and every declaration matches its prototype in include/gmp-sched/gmp.h."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess

import pytest

import gmp_sched
from gmp_sched import _lib

from conftest import REPO, include_dir, libgmp_path


def exported_gmp_symbols() -> set[str]:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is needed to list the exports")
    out = subprocess.run([nm, "-D", "--defined-only", libgmp_path()], check=True,
                         capture_output=True, text=True).stdout
    # Without the symbol version nm prints after the name ("gmp_go@@GMP_SCHED_0.2").
    names = {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}
    # A name C cannot spell (the channel entries' halves, "gmp_chan_send.slow", exported
    # only to be named in goroutine dumps) is not API.
    return {n for n in names if n.startswith("gmp_") and n.replace("_", "a").isalnum()}


def compat_symbols() -> set[str]:
    """The [compat] names of abi/exports.txt: functions older headers declared, exported
    for programs built against them, not API (gmp.h declares their replacements)."""
    path = REPO / "abi" / "exports.txt"
    if not path.exists():
        return set()
    names: set[str] = set()
    section = ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif section == "compat":
            names.add(line)
    return names


def test_every_exported_symbol_is_declared() -> None:
    exported = exported_gmp_symbols() - compat_symbols()
    assert "gmp_go" in exported
    missing = sorted(exported - set(_lib.DECLARATIONS))
    assert not missing, f"declare these in gmp_sched/_lib.py DECLARATIONS: {missing}"
    for name in exported:
        fn = getattr(gmp_sched.lib, name)
        assert fn.argtypes is not None and fn.restype is not None, name


# C type in the header -> the ctypes type the declaration must use.
C_TYPES = {
    "int": ctypes.c_int,
    "long": ctypes.c_long,
    "int32_t": ctypes.c_int32,
    "int64_t": ctypes.c_int64,
    "uint32_t": ctypes.c_uint32,
    "uint64_t": ctypes.c_uint64,
    "size_t": ctypes.c_size_t,
    "socklen_t": ctypes.c_uint32,
    "void": None,
}
FUNCTION_POINTER_TYPEDEFS = {"gmp_func", "gmp_blocking_fn", "gmp_leak_fn"}


def ctype_of(decl: str) -> object:
    decl = re.sub(r"\b(const|struct)\b", " ", decl).strip()
    if "*" in decl:
        base = decl.split("*")[0].split()
        return ctypes.c_char_p if base == ["char"] else ctypes.c_void_p
    words = decl.split()
    if len(words) > 1:  # drop the parameter name
        words = words[:-1]
    t = words[0]
    if t in FUNCTION_POINTER_TYPEDEFS:
        return ctypes.c_void_p
    assert t in C_TYPES, f"unknown C type {decl!r}: extend C_TYPES"
    return C_TYPES[t]


def header_prototypes() -> dict[str, tuple[object, list[object]]]:
    header = include_dir() / "gmp-sched" / "gmp.h"
    text = header.read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    body = text.split('extern "C" {', 1)[1].split("#ifdef __cplusplus", 1)[0]
    body = "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("#"))
    protos: dict[str, tuple[object, list[object]]] = {}
    for m in re.finditer(r"([\w\s\*]+?)\b(gmp_\w+)\s*\(([^)]*)\)\s*;", body):
        ret, name, params = m.group(1), m.group(2), m.group(3).strip()
        args = [] if params in ("", "void") else [ctype_of(p) for p in params.split(",")]
        protos[name] = (ctype_of(ret + " x") if "*" not in ret else ctype_of(ret), args)
    return protos


def test_declarations_match_the_header() -> None:
    protos = header_prototypes()
    assert len(protos) > 40
    assert set(protos) == set(_lib.DECLARATIONS), (
        sorted(set(protos) ^ set(_lib.DECLARATIONS))
    )
    for name, (restype, argtypes) in _lib.DECLARATIONS.items():
        want_ret, want_args = protos[name]
        assert restype is want_ret, f"{name}: restype {restype} != header {want_ret}"
        assert list(argtypes) == want_args, f"{name}: argtypes {argtypes} != header {want_args}"


def test_struct_layouts_match_c() -> None:
    # Sizes the header implies on LP64 (checked by the C compiler in test_worker).
    assert ctypes.sizeof(_lib.gmp_wg) == 16
    assert ctypes.sizeof(_lib.gmp_mutex) == 8
    assert ctypes.sizeof(_lib.gmp_rwmutex) == 24
    assert ctypes.sizeof(_lib.gmp_cond) == 32
    assert ctypes.sizeof(_lib.gmp_once) == 12
    assert ctypes.sizeof(_lib.gmp_select_case) == 32
    assert ctypes.sizeof(_lib.gmp_sched_stats) == 184
    assert ctypes.sizeof(_lib.gmp_stack_mark) == 40
    assert ctypes.sizeof(_lib.gmp_metric) == 8 * 5 + 8 * _lib.GMP_METRIC_BUCKETS


def test_library_version_is_the_package_version() -> None:
    assert gmp_sched.lib.gmp_sched_version().decode() == gmp_sched.__version__
