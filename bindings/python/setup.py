"""Build step of gmp-sched: builds libgmp.so from the Rust sources with setuptools-rust
(``Binding.NoBinding``: a plain C-ABI shared library, loaded with ctypes) and ships it as
``gmp_sched/libgmp.so.0`` (its SONAME: a C library linked against it with an rpath to
the package's directory finds it) with the C headers under ``gmp_sched/include/``.

Where the Rust sources are:
  * ``rust/`` beside this file: the copy an sdist carries (made by ``sdist`` below);
  * ``../../``: the repository this directory sits in (bindings/python).

``$GMP_SCHED_LIBGMP`` ships a libgmp.so built beforehand instead (copied as is, no cargo).

The wheel holds no Python extension module, only a shared object that ctypes opens: it is
tagged ``py3-none-<platform>``, the platform being the lowest manylinux tag the library's
glibc symbol versions allow (``manylinux_2_<N>_<arch>``; ``linux_<arch>`` if the library
needs anything beyond what manylinux allows). CI checks the tag with auditwheel.

The library is linked by zig (the ``ziglang`` package, a build requirement, or ``zig`` on
PATH) for glibc 2.17, whatever the glibc of the build machine: scripts/link-cc runs
``zig cc -target x86_64-linux-gnu.2.17`` for libgmp.so when ``$GMP_SCHED_LINK_ZIG`` names
zig, and the wheel is ``manylinux_2_17``. ``GMP_SCHED_ZIG=0`` (or no zig) links with the
C compiler as any cargo build does: the tag is then the build machine's glibc's
(``manylinux_2_34`` from glibc 2.34 on). ``GMP_SCHED_ZIG=/path/to/zig`` names a zig.
"""

from __future__ import annotations

import os
import re
import shutil
import platform
import struct
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
REPO = HERE.parent.parent
SDIST_RUST = HERE / "rust"

# What the sdist copies from the repository into rust/: everything cargo needs to build
# the library (build.rs generates the header from src/ and cbindgen.toml, and reads
# abi/exports.txt), the license texts, and .cargo/ with the scripts its config names.
RUST_TREE = ["Cargo.toml", "Cargo.lock", "build.rs", "cbindgen.toml", "LICENSE-MIT",
             "LICENSE-APACHE", "src", "abi", "include", ".cargo",
             "benches"]  # Cargo.toml names its [[bench]] files: the manifest does not parse without them

# The glibc zig links the library for: manylinux2014's, and the oldest Rust's std supports.
ZIG_TARGET = "x86_64-linux-gnu.2.17"  # the library is x86-64 only (src/arch)

# Shared objects a manylinux wheel may need from the system (PEP 600's policy list).
MANYLINUX_LIBS = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
                  "libgcc_s.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1",
                  "libutil.so.1", "libresolv.so.2"}


def rust_root() -> Path | None:
    """The directory holding the crate's Cargo.toml, or None (only a prebuilt library)."""
    if (SDIST_RUST / "Cargo.toml").exists():
        return SDIST_RUST
    if (REPO / "Cargo.toml").exists() and (REPO / "src" / "ffi").is_dir():
        return REPO
    return None


def cargo_config_scripts(root: Path) -> list[str]:
    """The files under scripts/ that root/.cargo/config.toml names (a linker wrapper, say)."""
    config = root / ".cargo" / "config.toml"
    if not config.exists():
        return []
    return sorted(set(re.findall(r"""["'](scripts/[^"']+)["']""", config.read_text())))


def header_dir() -> Path | None:
    """include/ of the Rust tree (gmp-sched/gmp.h and gmp.hpp)."""
    root = rust_root()
    return None if root is None else root / "include"


def zig() -> str | None:
    """The zig executable that links the library for ZIG_TARGET, or None: the C compiler
    links it (GMP_SCHED_ZIG=0, no zig found, not Linux x86-64)."""
    choice = os.environ.get("GMP_SCHED_ZIG", "")
    if choice == "0" or not sys.platform.startswith("linux") or platform.machine() != "x86_64":
        return None
    if choice not in ("", "1"):
        return choice
    try:
        import ziglang  # the build requirement: zig's binary ships inside the package
    except ImportError:
        return shutil.which("zig")
    exe = Path(ziglang.__file__).parent / "zig"
    return str(exe) if exe.exists() else shutil.which("zig")


# --- ELF: what the library needs from the system -------------------------------------

def _elf_needs(path: Path) -> tuple[set[str], set[tuple[str, str]]]:
    """DT_NEEDED names and (file, version) pairs of .gnu.version_r of a 64-bit
    little-endian ELF shared object."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]

    def cstr(strtab: int, off: int) -> str:
        start = sections[strtab][4] + off
        return data[start:data.index(b"\0", start)].decode()

    needed: set[str] = set()
    versions: set[tuple[str, str]] = set()
    for _name, kind, _flags, _addr, offset, size, link, info, _align, entsize in sections:
        if kind == 6:  # SHT_DYNAMIC
            for i in range(size // 16):
                tag, val = struct.unpack_from("<qQ", data, offset + i * 16)
                if tag == 1:  # DT_NEEDED
                    needed.add(cstr(link, val))
        elif kind == 0x6FFFFFFE:  # SHT_GNU_verneed
            pos = offset
            for _ in range(info):
                _ver, cnt, vfile, aux, nxt = struct.unpack_from("<HHIII", data, pos)
                apos = pos + aux
                for _ in range(cnt):
                    _hash, _fl, _other, vname, anext = struct.unpack_from("<IHHII", data, apos)
                    versions.add((cstr(link, vfile), cstr(link, vname)))
                    apos += anext
                pos += nxt
    return needed, versions


def platform_tag(lib: Path) -> str:
    """manylinux_2_<N>_<arch> for the highest GLIBC_2.<N> (at least 17) the library
    needs, with its legacy alias for 2.17 (``.manylinux2014_<arch>``, which pip before
    20.3 knows and ``manylinux_2_17`` it does not); the plain platform tag when it needs a
    library manylinux does not allow."""
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")  # linux_x86_64
    if not plat.startswith("linux_"):
        return plat
    arch = plat[len("linux_"):]
    try:
        needed, versions = _elf_needs(lib)
    except (OSError, ValueError, struct.error, IndexError):
        return plat
    if not needed <= MANYLINUX_LIBS:
        return plat
    minor = 17
    for _file, version in versions:
        m = re.fullmatch(r"GLIBC_2\.(\d+)(?:\.\d+)?", version)
        if m:
            minor = max(minor, int(m.group(1)))
    tag = f"manylinux_2_{minor}_{arch}"
    if minor == 17:
        tag += f".manylinux2014_{arch}"
    return tag


# --- the commands --------------------------------------------------------------------

class BuildPy(build_py):
    """Ships the C headers (for extension authors: ``gmp_sched.get_include()``) and a
    prebuilt library when $GMP_SCHED_LIBGMP names one."""

    def run(self) -> None:
        super().run()
        pkg = Path(self.build_lib) / "gmp_sched"
        if self.editable_mode:
            pkg = HERE / "src" / "gmp_sched"
        inc = header_dir()
        if inc is not None and not self.editable_mode:
            dest = pkg / "include" / "gmp-sched"
            dest.mkdir(parents=True, exist_ok=True)
            for name in ("gmp.h", "gmp.hpp"):
                shutil.copyfile(inc / "gmp-sched" / name, dest / name)
        given = os.environ.get("GMP_SCHED_LIBGMP")
        if given:
            pkg.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(given, pkg / "libgmp.so.0")


class Sdist(sdist):
    """Carries the Rust sources in rust/, so that the sdist builds anywhere."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        dest = Path(base_dir) / "rust"
        if dest.exists():  # an sdist made from an sdist: MANIFEST.in grafted rust/
            return
        root = rust_root()
        if root is None:
            raise SystemExit("gmp-sched: no Rust sources to put in the sdist")
        for name in RUST_TREE + cargo_config_scripts(root):
            src = root / name
            if src.is_dir():
                shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
            elif src.exists():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / name)


def _bdist_wheel_base() -> type:
    try:
        from setuptools.command.bdist_wheel import bdist_wheel
    except ImportError:  # setuptools < 70.1
        from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]
    return bdist_wheel  # type: ignore[no-any-return]


class BdistWheel(_bdist_wheel_base()):  # type: ignore[misc]
    """py3-none-<platform>: no Python ABI is involved, only the shared object's."""

    def get_tag(self) -> tuple[str, str, str]:
        _, _, plat = super().get_tag()
        libs = list(Path(self.bdist_dir).rglob("gmp_sched/libgmp.so.0"))
        if libs and plat.startswith("linux_"):
            plat = platform_tag(libs[0])
        return "py3", "none", plat


class BinaryDistribution(Distribution):
    """The wheel holds a shared object: platlib, with a platform tag."""

    def has_ext_modules(self) -> bool:
        return True


def rust_extensions() -> list[object]:
    if os.environ.get("GMP_SCHED_LIBGMP"):
        return []
    root = rust_root()
    if root is None:
        raise SystemExit("gmp-sched: no Rust sources here (rust/ or ../../Cargo.toml); "
                         "set GMP_SCHED_LIBGMP to a built libgmp.so")
    from setuptools_rust import Binding, RustExtension, Strip

    args: list[str] = []
    if root == SDIST_RUST and (root / ".cargo" / "config.toml").exists():
        # cargo finds .cargo/config.toml from its working directory up, and runs here
        # from this directory: name the sdist's copy (its relative paths stay relative to
        # rust/, as cargo resolves them against the config file's own place).
        args += ["--config", str(root / ".cargo" / "config.toml")]
    # Also in .cargo/config.toml; repeated for the crate itself so that a RUSTFLAGS in the
    # environment (which replaces config rustflags) cannot drop it: the goroutine dump
    # walks the runtime's frame pointers.
    rustc_flags = ["-C", "force-frame-pointers=yes"]
    env = dict(os.environ)
    zig_exe = zig()
    if zig_exe is not None:
        # scripts/link-cc links libgmp.so with zig for this glibc (see there). -z defs
        # (link-cc passes it too) makes an undefined symbol an error, and as a rustc flag
        # it makes cargo relink when a build switches between zig and cc (the linker's
        # environment is not part of cargo's fingerprint).
        env["GMP_SCHED_LINK_ZIG"] = zig_exe
        env["GMP_SCHED_LINK_ZIG_TARGET"] = ZIG_TARGET
        rustc_flags += ["-C", "link-arg=-Wl,-z,defs"]
    else:
        env.pop("GMP_SCHED_LINK_ZIG", None)
        print("gmp-sched: libgmp.so is linked by the C compiler, not zig (GMP_SCHED_ZIG=0, "
              "or neither the ziglang package nor zig on PATH): the wheel's manylinux tag "
              "is this machine's glibc's", file=sys.stderr)
    return [RustExtension(
        "gmp_sched.libgmp",
        path=str(root / "Cargo.toml"),
        binding=Binding.NoBinding,
        args=args,
        rustc_flags=rustc_flags,
        env=env,
        strip=Strip.No,  # BuildRust strips fully (Strip.All is `strip -x`: debug info stays)
        py_limited_api=False,
    )]


def _build_rust_class() -> type | None:
    try:
        from setuptools_rust import build_rust
    except ImportError:
        return None

    class BuildRust(build_rust):  # type: ignore[misc,valid-type]
        """Installs the library as gmp_sched/libgmp.so.0 (setuptools-rust would give it
        the interpreter's extension suffix), stripped in release builds."""

        def get_dylib_ext_path(self, ext: object, target_fname: str) -> str:
            path = super().get_dylib_ext_path(ext, target_fname)
            return os.path.join(os.path.dirname(path), "libgmp.so.0")

        def install_extension(self, ext: object, dylib_paths: list, build_artifact_dir: object) -> None:
            super().install_extension(ext, dylib_paths, build_artifact_dir)
            if self._is_debug_build(ext):
                return
            strip = shutil.which("strip")
            if strip is None:
                return
            for module_name, _ in dylib_paths:
                out = self.get_dylib_ext_path(ext, module_name)
                subprocess.run([strip, "--strip-all", out], check=True)

    return BuildRust


cmdclass: dict[str, type] = {"build_py": BuildPy, "sdist": Sdist, "bdist_wheel": BdistWheel}
_br = _build_rust_class()
if _br is not None:
    cmdclass["build_rust"] = _br

setup(cmdclass=cmdclass, distclass=BinaryDistribution, rust_extensions=rust_extensions())
