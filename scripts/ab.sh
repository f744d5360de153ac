#!/usr/bin/env bash
# Interleaved runs of one benchmark against the library at several commits (and Go), for
# telling a change from the VMs' noise (HACKING.md, "How to measure").
#
# Usage: scripts/ab.sh [-n RUNS] [-p PROCS] [-a "ARGS"] [-k KEY] WORKLOAD REV [REV ...]
#   WORKLOAD  a bench/c program (pingpong, skynet, sleep_many, ...)
#   REV       a commit (built once into target/ab/<sha>/: the library, and the bench
#             program compiled against that commit's own header, since the header inlines
#             fast paths), "." for the work tree as it is (rebuilt every call), or "go" for
#             bench/go's program (built with bench/run.py --build-only first)
#   -n RUNS   rounds; each round runs every REV once, in order (default 9)
#   -p PROCS  GOMAXPROCS (default 1)
#   -a ARGS   the program's arguments (e.g. "-shape 1", "-n 100000")
#   -k KEY    the RESULT field to compare (default ns_per_op; syscall_handoff: retained)
# Prints, per REV, the median and every run sorted. A failed run prints "-" in its place.
#
#   scripts/ab.sh -n 11 skynet HEAD~1 HEAD
#   scripts/ab.sh -p 2 -a "-shape 1" pingpong HEAD~3 HEAD go
#   scripts/ab.sh -k retained -a "-rounds 9" syscall_handoff HEAD~1 .
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

runs=9
procs=1
args=""
key=ns_per_op
while getopts "n:p:a:k:" opt; do
    case "$opt" in
        n) runs="$OPTARG" ;;
        p) procs="$OPTARG" ;;
        a) args="$OPTARG" ;;
        k) key="$OPTARG" ;;
        *) sed -n '2,20p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 2 ] || { sed -n '2,20p' "$0"; exit 2; }
workload=$1
shift
[ -f "bench/c/$workload.c" ] || { echo "ab.sh: no bench/c/$workload.c" >&2; exit 2; }

# Compiles the workload from source tree $1 against the library in $2.
compile() {
    cc -O2 -std=c11 -pthread -I "$1/include" "$1/bench/c/$workload.c" \
        "$2/libgmp.so" -Wl,-rpath,"$2" -o "$2/$workload"
}

# Builds REV's library and program into target/ab/<sha>/ (once per commit); prints the
# program's path.
build() {
    local rev=$1 dir src
    if [ "$rev" = go ]; then
        [ -x "bench/bin/$workload-go" ] || python3 bench/run.py --build-only --impls go >&2
        echo "$root/bench/bin/$workload-go"
        return
    fi
    if [ "$rev" = . ]; then
        dir=$root/target/ab/worktree
        cargo build --release --quiet >&2
        mkdir -p "$dir"
        cp target/release/libgmp.so "$dir/"
        ln -sf libgmp.so "$dir/libgmp.so.0"
        compile "$root" "$dir"
    else
        local sha
        sha=$(git rev-parse --short=12 "$rev^{commit}")
        dir=$root/target/ab/$sha
        if [ ! -f "$dir/libgmp.so" ] || [ ! -x "$dir/$workload" ]; then
            src=$root/target/ab/src-$sha
            git worktree remove --force "$src" 2>/dev/null || rm -rf "$src"
            git worktree add --detach "$src" "$sha" >/dev/null 2>&1
            if [ ! -f "$dir/libgmp.so" ]; then
                (cd "$src" && CARGO_TARGET_DIR=$root/target/ab/build cargo build --release --quiet) >&2
                mkdir -p "$dir"
                cp "$root/target/ab/build/release/libgmp.so" "$dir/"
                ln -sf libgmp.so "$dir/libgmp.so.0"
            fi
            compile "$src" "$dir"
            git worktree remove --force "$src"
        fi
    fi
    echo "$dir/$workload"
}

declare -a bins
for rev in "$@"; do
    bins+=("$(build "$rev")")
done

declare -A got
for _ in $(seq "$runs"); do
    for i in "${!bins[@]}"; do
        v=$(GOMAXPROCS=$procs GMP_MAXPROCS=$procs "${bins[$i]}" $args 2>/dev/null |
            sed -n "s/^RESULT .*\b$key=\([0-9.]*\).*/\1/p")
        got[$i]="${got[$i]:-} ${v:--}"
    done
done

echo "$workload GOMAXPROCS=$procs ${args:+($args) }$key, $runs interleaved rounds:"
for i in "${!bins[@]}"; do
    sorted=$(tr ' ' '\n' <<<"${got[$i]}" | grep -v '^$' | sort -g | tr '\n' ' ')
    median=$(tr ' ' '\n' <<<"${got[$i]}" | grep -E '^[0-9.]+$' | sort -g |
        awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print "-" }')
    printf '  %-14s median %-10s [ %s]\n' "$(sed -n "$((i + 1))p" <<<"$(printf '%s\n' "$@")")" "$median" "$sorted"
done
