#!/usr/bin/env bash
# What recording costs: interleaved runs of bench/c programs with the execution trace
# off, with the flight recorder on (GMP_TRACE=flight) and, with -s, streaming to a file;
# prints each mode's median ns per op and its ratio to "off" (HACKING.md, "How to
# measure": run it on an otherwise idle machine).
#
# Usage: scripts/trace-overhead.sh [-n ROUNDS] [-p PROCS] [-s] [-g] [WORKLOAD ...]
#   WORKLOAD  bench/c programs (default: pingpong skynet chan_mpmc yield)
#   -n        rounds, each running every mode once (default 7)
#   -p        GOMAXPROCS (default 1)
#   -s        also the streaming trace (to a file under target/)
#   -g        also bench/go's program without and with Go's trace.FlightRecorder (which
#             bench/go starts on GMP_TRACE=flight), for the same ratio on Go
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=7
procs=1
stream=0
go=0
while getopts "n:p:sg" opt; do
    case "$opt" in
        n) rounds="$OPTARG" ;;
        p) procs="$OPTARG" ;;
        s) stream=1 ;;
        g) go=1 ;;
        *) sed -n '2,14p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
workloads=${*:-pingpong skynet chan_mpmc yield}
cargo build --release --quiet
out=target/trace-overhead
mkdir -p "$out"
lib=$PWD/target/release
modes="off flight"
[ "$stream" = 1 ] && modes="$modes stream"
[ "$go" = 1 ] && modes="$modes go go-flight"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), GOMAXPROCS=$procs, $rounds rounds"
for w in $workloads; do
    cc -O2 -std=c11 -pthread -I include "bench/c/$w.c" "$lib/libgmp.so" \
        -Wl,-rpath,"$lib" -o "$out/$w"
    [ "$go" = 1 ] && (cd bench/go && go build -o "../../$out/$w-go" "./$w")
    declare -A got=()
    for _ in $(seq "$rounds"); do
        for m in $modes; do
            prog="$out/$w"
            case "$m" in
                off) t="" ;;
                flight) t=flight ;;
                stream) t="$PWD/$out/$w.trace" ;;
                go) t="" prog="$out/$w-go -procs $procs" ;;
                go-flight) t=flight prog="$out/$w-go -procs $procs" ;;
            esac
            # shellcheck disable=SC2086
            ns=$(GMP_TRACE=$t GMP_MAXPROCS=$procs $prog |
                sed -n 's/.*ns_per_op=\([0-9.]*\).*/\1/p')
            got[$m]="${got[$m]:-} $ns"
        done
    done
    rm -f "$out/$w.trace"
    base=""
    for m in $modes; do
        med=$(printf '%s\n' ${got[$m]} | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
        # Each side's ratio is to its own "off".
        [ -z "$base" ] || [ "$m" = go ] && base=$med
        printf '%-10s %-7s median %9.1f ns/op  x%.2f   (%s)\n' "$w" "$m" "$med" \
            "$(echo "$med / $base" | bc -l)" "$(echo ${got[$m]})"
    done
    unset got
done
