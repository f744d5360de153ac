#!/usr/bin/env bash
# The long run of the scheduler torture test (c-tests/torture.c; `cargo test` runs a
# short one): several seeds, each at GOMAXPROCS 1 to 4, against the release and the
# debug (invariant-checking) builds of the library.
#
# Usage: scripts/torture.sh [-s SECONDS] [-n NSEEDS | -S "SEED ..."] [-p "PROCS ..."]
#                           [-f FEATURES] [-b "release debug"]
#   -s  seconds per run (default 60)
#   -n  number of random seeds (default 3); -S gives the seeds instead
#   -p  GOMAXPROCS values to start each seed at (default "1 2 3 4")
#   -f  TORTURE_FEATURES (default "all"; see the comment at the top of torture.c)
#   -b  library builds to test (default "release debug")
# Each run's output, with GMP_DEBUG=schedtrace=1000,stacktrim=20,stackhwm=16 (the stack caches trimmed
# every 20 ms instead of every second), goes to target/torture/logs/<time>/;
# a failure prints the command that repeats it. The last line is the summary; the exit
# status is 1 if any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=60
nseeds=3
seeds=""
procs="1 2 3 4"
features="all"
builds="release debug"
while getopts "s:n:S:p:f:b:" opt; do
    case "$opt" in
        s) secs="$OPTARG" ;;
        n) nseeds="$OPTARG" ;;
        S) seeds="$OPTARG" ;;
        p) procs="$OPTARG" ;;
        f) features="$OPTARG" ;;
        b) builds="$OPTARG" ;;
        *) sed -n '2,16p' "$0"; exit 2 ;;
    esac
done
if [ -z "$seeds" ]; then
    for _ in $(seq "$nseeds"); do
        seeds="$seeds $(( (RANDOM << 15 | RANDOM) ))"
    done
fi

out=target/torture
logs="$out/logs/$(date +%Y%m%d-%H%M%S)-$$"
mkdir -p "$logs"
for build in $builds; do
    case "$build" in
        release) cargo build --release --quiet; dir=target/release ;;
        debug) cargo build --quiet; dir=target/debug ;;
        *) echo "torture.sh: unknown build $build" >&2; exit 2 ;;
    esac
    # A private copy: a cargo build during the run must not change the library under it.
    mkdir -p "$out/$build"
    cp "$dir/libgmp.so" "$out/$build/libgmp.so.0"
    cc -std=c11 -Wall -Wextra -Werror -Wpedantic -O2 -pthread -Iinclude c-tests/torture.c \
       "$PWD/$out/$build/libgmp.so.0" -Wl,-rpath,"$PWD/$out/$build" -o "$out/$build/torture"
done

runs=0
failed=0
failures=""
for seed in $seeds; do
    for p in $procs; do
        for build in $builds; do
            log="$logs/$build-p$p-s$seed.log"
            runs=$((runs + 1))
            start=$(date +%s)
            set +e
            # In braces, so that bash's own "Segmentation fault" line goes to the log too.
            {
                env -u GMP_MAXPROCS -u GMP_STACK_SIZE -u GMP_MAX_THREADS \
                    GMP_DEBUG=schedtrace=1000,stacktrim=20,stackhwm=16 \
                    timeout -s KILL $((secs + 120)) \
                    "$out/$build/torture" "$seed" $((secs * 1000)) "$p" "$features"
            } >"$log" 2>&1
            rc=$?
            set -e
            took=$(( $(date +%s) - start ))
            if [ "$rc" -eq 0 ]; then
                echo "PASS $build procs=$p seed=$seed (${took} s)"
            else
                failed=$((failed + 1))
                why=$(grep -m1 -E "^torture: (no progress|chan|timeout|action|draining)|CHECK failed|^gmp:" "$log" || true)
                if [ -z "$why" ] && [ "$rc" -gt 128 ]; then
                    why="killed by signal $((rc - 128))"
                fi
                echo "FAIL $build procs=$p seed=$seed (status $rc, ${took} s): ${why:-see log}"
                echo "     log: $log"
                echo "     repeat: $out/$build/torture $seed $((secs * 1000)) $p '$features'"
                failures="$failures $build/p$p/s$seed"
            fi
        done
    done
done
echo "torture: $runs runs, $failed failed (${secs} s each, features $features, seeds ${seeds# })${failures:+; failed:$failures}"
[ "$failed" -eq 0 ]
