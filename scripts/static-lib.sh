#!/usr/bin/env bash
# static-lib.sh IN.a LIBGMP.so OUT.a — the static library as it is installed.
#
# cargo's staticlib is the library's objects plus all of Rust's standard library, each
# with its debug information and the LLVM bitcode rustc embeds for LTO (~28 MB), and
# every Rust symbol global, so that two Rust static libraries in one program clash. This
# links it into one relocatable object that keeps only what the exported functions reach
# (ld -r --gc-sections, rooted at LIBGMP.so's exports, the .init_array constructors kept),
# makes every symbol but those exports local, and drops the debug information and the
# bitcode: ~2 MB, and a program linking it sees only gmp_* and the interposed libc names.
set -euo pipefail
[[ $# -eq 3 ]] || { echo "usage: $0 IN.a LIBGMP.so OUT.a" >&2; exit 2; }
in=$1 so=$2 out=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The exported names, without their @VERSION: the GC roots and the globals kept.
readelf --dyn-syms -W "$so" |
    awk '$1 ~ /:$/ && NF >= 8 && $7 != "UND" { n = $8; sub(/@.*/, "", n); print n }' |
    sort -u >"$tmp/exports"
[[ -s $tmp/exports ]] || { echo "$0: no exports found in $so" >&2; exit 1; }
roots=()
while read -r name; do roots+=(-u "$name"); done <"$tmp/exports"
ld -r --gc-sections "${roots[@]}" --whole-archive "$in" -o "$tmp/gmp.o"
objcopy --strip-debug --remove-section=.llvmbc --remove-section=.llvmcmd \
    --keep-global-symbols="$tmp/exports" "$tmp/gmp.o" "$tmp/libgmp.o"
rm -f "$tmp/out.a"
ar rcsD "$tmp/out.a" "$tmp/libgmp.o"
mv -f "$tmp/out.a" "$out"
