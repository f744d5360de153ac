"""Build step of gmp-sched: puts libgmp.so inside the package.

The library comes from, in this order:
  * $GMP_SCHED_LIBGMP: a libgmp.so built beforehand (copied as is);
  * `cargo build --release` in the libgmp source tree this package sits in
    (bindings/python of the repository), copied from cargo's target directory.
GNU MP's libgmp.so is never looked for.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent


def _libgmp() -> Path:
    given = os.environ.get("GMP_SCHED_LIBGMP")
    if given:
        return Path(given)
    root = HERE.parent.parent
    if not (root / "Cargo.toml").exists() or not (root / "src" / "ffi").is_dir():
        raise SystemExit(
            "gmp-sched: not inside the libgmp source tree; set GMP_SCHED_LIBGMP to a built libgmp.so"
        )
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    if not Path(cargo).exists():
        raise SystemExit("gmp-sched: cargo (a Rust toolchain) is needed to build libgmp.so, "
                         "or set GMP_SCHED_LIBGMP to a built one")
    subprocess.run([cargo, "build", "--release", "--lib"], cwd=root, check=True)
    meta = subprocess.run(
        [cargo, "metadata", "--format-version", "1", "--no-deps"],
        cwd=root, check=True, capture_output=True, text=True,
    )
    return Path(json.loads(meta.stdout)["target_directory"]) / "release" / "libgmp.so"


class BuildPyWithLibgmp(build_py):
    def run(self):
        super().run()
        src = _libgmp()
        if not src.exists():
            raise SystemExit(f"gmp-sched: {src} was not built")
        dest = Path(self.build_lib) / "gmp_sched" / "libgmp.so"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)


class BinaryDistribution(Distribution):
    """The wheel holds a shared object: tag it for this platform, not as pure Python."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithLibgmp}, distclass=BinaryDistribution)
