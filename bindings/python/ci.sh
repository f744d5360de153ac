#!/usr/bin/env bash
# The Python package's CI (.ci/run calls it), from a fresh Debian machine with cargo:
#   1. builds the sdist, then the wheel from that sdist (python -m build: outside the
#      repository, so the Rust sources the sdist carries are what gets built);
#   2. checks the wheel: tag py3-none-manylinux_2_17_x86_64 (zig links the library for
#      glibc 2.17; $GMP_SCHED_WHEEL_TAG to expect another; with GMP_SCHED_ZIG=0 any
#      manylinux tag), which auditwheel must agree with (its reading of the library's
#      symbol versions), the library's export table (the interposed libc names
#      unversioned, every abi/GMP_SCHED_<x.y>.txt name in its node, nothing else), a
#      stripped libgmp.so.0, gmp.h, the license texts;
#   3. installs it into a fresh venv outside the repository for each CPython found
#      (PYTHONS="3.9 3.13" to choose) and runs the package's tests there, from the
#      unpacked sdist; mypy's typing test runs with the first one;
#   4. an editable install imports from the source tree;
#   5. bench/python/bench.py --quick, so that it cannot rot.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/gmp-sched-ci.XXXXXX)
trap 'rm -rf "$work"' EXIT
pip_q=(-q --disable-pip-version-check)

# A venv, installing Debian's python3-venv when ensurepip is missing (a fresh Debian).
mkvenv() {
    local py=$1 dir=$2
    if ! "$py" -m venv "$dir" >/dev/null 2>&1; then
        rm -rf "$dir"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -qq python3-venv >/dev/null 2>&1 \
            || { apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null; }
        "$py" -m venv "$dir"
    fi
}

# The CPythons to test: python3 first, then each 3.9..3.14 (and free-threaded 3.13t,
# 3.14t) found on PATH or in pyenv.
find_python() {
    local v=$1 p
    # pyenv's shims answer for versions that are not selected: run each to be sure.
    for p in "$HOME/.pyenv/versions/$v"*/bin/"python$v" /usr/bin/"python$v" /usr/local/bin/"python$v" "python$v"; do
        if command -v "$p" >/dev/null 2>&1 && "$p" -c pass >/dev/null 2>&1; then
            command -v "$p"; return 0
        fi
    done
    return 1
}
pyver() {
    "$1" -c 'import sys, sysconfig; print("%d.%d%s" % (sys.version_info[:2] + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else "",)))'
}
pythons=("$(command -v python3)")
seen=" $(pyver python3) "
for v in ${PYTHONS:-3.9 3.10 3.11 3.12 3.13 3.14 3.13t 3.14t}; do
    if p=$(find_python "$v"); then
        case "$seen" in *" $(pyver "$p") "*) continue ;; esac
        pythons+=("$p")
        seen+="$(pyver "$p") "
    else
        echo "python: CPython $v not on this machine: not tested"
    fi
done

echo "-- sdist, and the wheel built from it"
mkvenv python3 "$work/tools"
"$work/tools/bin/pip" install "${pip_q[@]}" build auditwheel
"$work/tools/bin/python" -m build --outdir "$work/dist" "$repo/bindings/python" >"$work/build.log" 2>&1 \
    || { tail -50 "$work/build.log"; exit 1; }
sdist=$(ls "$work"/dist/*.tar.gz)
wheel=$(ls "$work"/dist/*.whl)
echo "built $(basename "$sdist") and $(basename "$wheel")"

echo "-- the wheel's checks"
# zig links the library for glibc 2.17 (setup.py, scripts/link-cc): a wheel needing a newer
# glibc is a regression. GMP_SCHED_ZIG=0 links with cc: the tag is then this machine's.
expect_tag=${GMP_SCHED_WHEEL_TAG:-manylinux_2_17_x86_64}
[ "${GMP_SCHED_ZIG:-}" = 0 ] && expect_tag=${GMP_SCHED_WHEEL_TAG:-}
"$work/tools/bin/auditwheel" show "$wheel" | tee "$work/audit.txt"
"$work/tools/bin/python" - "$wheel" "$work/audit.txt" "$expect_tag" "$repo/abi" <<'EOF'
import io, pathlib, re, sys, zipfile
from elftools.elf.elffile import ELFFile  # auditwheel's own dependency

wheel, audit, expect, abi = sys.argv[1], open(sys.argv[2]).read(), sys.argv[3], pathlib.Path(sys.argv[4])
tag = re.fullmatch(r"gmp_sched-[^-]+-(py3)-(none)-(manylinux_\d+_\d+_x86_64)(\.manylinux2014_x86_64)?\.whl",
                   wheel.rsplit("/", 1)[-1])
assert tag, f"wheel tag is not py3-none-manylinux_*_x86_64: {wheel}"
assert not expect or tag.group(3) == expect, f"wheel tag {tag.group(3)}, expected {expect}"
# manylinux_2_17 carries its legacy alias, for pip before 20.3; no other tag has one here.
assert bool(tag.group(4)) == (tag.group(3) == "manylinux_2_17_x86_64"), f"alias: {wheel}"
agreed = re.search(r'consistent with\s+the\s+following\s+platform\s+tag:\s+"([^"]+)"', audit)
assert agreed and agreed.group(1) == tag.group(3), f"auditwheel: {agreed and agreed.group(1)} != {tag.group(3)}"
z = zipfile.ZipFile(wheel)
names = set(z.namelist())
for want in ("gmp_sched/libgmp.so.0", "gmp_sched/include/gmp-sched/gmp.h", "gmp_sched/py.typed",
             "gmp_sched-0.2.0.dist-info/licenses/LICENSE-MIT",
             "gmp_sched-0.2.0.dist-info/licenses/LICENSE-APACHE"):
    assert want in names, f"{want} missing from the wheel"
elf = ELFFile(io.BytesIO(z.read("gmp_sched/libgmp.so.0")))
sections = {s.name for s in elf.iter_sections()}
assert ".symtab" not in sections and ".debug_info" not in sections, "libgmp.so is not stripped"

# The export table (tests/exports.rs checks cargo's builds; this, the wheel's link).
def names(path, section=None):
    cur, out = None, []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("["):
            cur = line.strip("[]")
        elif line and cur == section:
            out.append(line)
    return out
verdef = elf.get_section_by_name(".gnu.version_d")
node = {vd["vd_ndx"]: next(iter(aux)).name for vd, aux in verdef.iter_versions()}
versym = elf.get_section_by_name(".gnu.version")
exported = {}
for i, sym in enumerate(elf.get_section_by_name(".dynsym").iter_symbols()):
    if sym["st_shndx"] != "SHN_UNDEF" and sym.name:
        ndx = versym.get_symbol(i).entry["ndx"]
        exported[sym.name] = "" if ndx == "VER_NDX_GLOBAL" else node.get(ndx, str(ndx))
interposed = names(abi / "exports.txt", "interposed")
wrong = {n: exported.get(n) for n in interposed if exported.get(n) != ""}
assert not wrong, f"interposed libc names not exported unversioned: {wrong}"
for frozen in sorted(abi.glob("GMP_SCHED_*.txt")):
    want = frozen.stem
    wrong = {n: exported.get(n) for n in names(frozen) if exported.get(n) != want}
    assert not wrong, f"{frozen.name} names not exported as {want}: {wrong}"
stray = {n: v for n, v in exported.items() if n not in interposed and not v.startswith("GMP_SCHED_")}
assert not stray, f"exported outside the version nodes: {stray}"
size = z.getinfo("gmp_sched/libgmp.so.0").file_size
print(f"wheel ok: {tag.group(1)}-{tag.group(2)}-{tag.group(3)}, stripped libgmp.so.0 of {size} bytes, "
      f"{len(exported)} exports ({len(interposed)} interposed unversioned), gmp.h, licenses")
EOF

echo "-- the sdist's Rust tree"
"$work/tools/bin/python" - "$sdist" <<'EOF'
import re, sys, tarfile
tar = tarfile.open(sys.argv[1])
root = tar.getnames()[0].split("/")[0]
names = set(tar.getnames())
need = ["Cargo.toml", "Cargo.lock", "build.rs", "cbindgen.toml", "src/lib.rs", "abi/exports.txt",
        "include/gmp-sched/gmp.h", ".cargo/config.toml", "LICENSE-MIT", "LICENSE-APACHE"]
config = tar.extractfile(f"{root}/rust/.cargo/config.toml").read().decode()
need += re.findall(r"""["'](scripts/[^"']+)["']""", config)  # a linker wrapper, say
missing = [n for n in need if f"{root}/rust/{n}" not in names]
assert not missing, f"the sdist lacks rust/{missing}"
print(f"sdist ok: rust/ carries the {len(need)} files the build needs, "
      f"{sum(n.startswith(root + '/rust/src/') for n in names)} entries under src/")
EOF

echo "-- tests of the installed wheel, outside the repository"
mkdir "$work/sdist"
tar xzf "$sdist" -C "$work/sdist"
srcdir=$(ls -d "$work"/sdist/gmp_sched-*)
first=1
for py in "${pythons[@]}"; do
    ver=$(pyver "$py")
    venv="$work/venv-$ver"
    mkvenv "$py" "$venv"
    extra=()
    [ $first = 1 ] && extra=(mypy)
    "$venv/bin/pip" install "${pip_q[@]}" "$wheel" pytest pytest-timeout "${extra[@]}"
    echo "python $ver ($py):"
    (cd "$srcdir" && "$venv/bin/python" -m pytest -q -p no:cacheprovider)
    if [ $first = 1 ]; then
        (cd "$repo" && "$venv/bin/python" bench/python/bench.py --quick)
        first=0
    fi
done

echo "-- editable install"
mkvenv python3 "$work/edit"
"$work/edit/bin/pip" install "${pip_q[@]}" -e "$repo/bindings/python" >"$work/edit.log" 2>&1 \
    || { tail -50 "$work/edit.log"; exit 1; }
(cd "$work" && "$work/edit/bin/python" -c '
import gmp_sched as gs, pathlib
assert pathlib.Path(gs.__file__).parent == pathlib.Path("'"$repo"'/bindings/python/src/gmp_sched"), gs.__file__
assert gs.go(sum, [1, 2]).result(10) == 3
print("editable install ok:", gs.lib._name, gs.get_include())
')
