"""The README's example runs as written: its C file compiled the way its shell line
says (header and library from the package, an rpath to it), then its Python program."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import HERE, include_dir, libgmp_path, run_python

README = HERE.parent / "README.md"


def block(text: str, lang: str) -> str:
    m = re.search(rf"```{lang}\n(.*?)```", text, flags=re.S)
    assert m, f"no ```{lang} block in the README's example"
    return m.group(1)


def test_readme_example_runs(tmp_path: Path) -> None:
    if not README.exists():
        pytest.skip("README.md is not beside the tests")
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("needs cc")
    example = README.read_text().split("## An example", 1)[1].split("\n## ", 1)[0]
    (tmp_path / "square.c").write_text(block(example, "c"))
    shell = block(example, "sh")
    assert '-Wl,-rpath,"$pkg"' in shell and '"$pkg/libgmp.so.0"' in shell
    lib = Path(libgmp_path())
    subprocess.run([cc, "-shared", "-fPIC", f"-I{include_dir()}", "square.c", str(lib),
                    f"-Wl,-rpath,{lib.parent}", "-o", "libsquare.so"], cwd=tmp_path, check=True)
    r = run_python(block(example, "python"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['hello', 'world']"
