#!/usr/bin/env bash
# The long run of the API fuzzer (c-tests/fuzz.c; `cargo test` runs 3 s with six fixed
# seeds): many seeds, each at several GOMAXPROCS values, against the release and the debug
# (invariant-checking) builds of the library.
#
# Usage: scripts/fuzz.sh [-s SECONDS] [-n NSEEDS | -S "SEED ..." | -t TOTAL_SECONDS]
#                        [-p "PROCS ..."] [-b "release debug"]
#   -s  seconds per run (default 30)
#   -n  number of random seeds (default 4); -S gives the seeds instead
#   -t  keep drawing random seeds until this many seconds have passed (replaces -n)
#   -p  GOMAXPROCS values to start each seed at (default "1 2 4")
#   -b  library builds to test (default "release debug")
# Each run's output, with GMP_DEBUG=schedtrace=1000,stacktrim=20,stackhwm=16, goes to
# target/fuzz/logs/<time>/; a failure prints the command that repeats it (the run prints
# it too, after "fuzz: replay:"). The last line is the summary; the exit status is 1 if
# any run failed. Where gdb is installed, a hung run's log also has every thread's
# backtrace.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=30
nseeds=4
seeds=""
total=0
procs="1 2 4"
builds="release debug"
while getopts "s:n:S:t:p:b:" opt; do
    case "$opt" in
        s) secs="$OPTARG" ;;
        n) nseeds="$OPTARG" ;;
        S) seeds="$OPTARG" ;;
        t) total="$OPTARG" ;;
        p) procs="$OPTARG" ;;
        b) builds="$OPTARG" ;;
        *) sed -n '2,18p' "$0"; exit 2 ;;
    esac
done

gdb=""
if command -v gdb >/dev/null 2>&1; then
    gdb=1
fi

out=target/fuzz
logs="$out/logs/$(date +%Y%m%d-%H%M%S)-$$"
mkdir -p "$logs"
for build in $builds; do
    case "$build" in
        release) cargo build --release --quiet; dir=target/release ;;
        debug) cargo build --quiet; dir=target/debug ;;
        *) echo "fuzz.sh: unknown build $build" >&2; exit 2 ;;
    esac
    # A private copy: a cargo build during the run must not change the library under it.
    mkdir -p "$out/$build"
    cp "$dir/libgmp.so" "$out/$build/libgmp.so.0"
    cc -std=c11 -Wall -Wextra -Werror -Wpedantic -O2 -pthread -Iinclude c-tests/fuzz.c \
       "$PWD/$out/$build/libgmp.so.0" -Wl,-rpath,"$PWD/$out/$build" -o "$out/$build/fuzz"
done

runs=0
failed=0
failures=""
tried=""
one_seed() {
    local seed=$1 p build log start rc took why
    tried="$tried $seed"
    for p in $procs; do
        for build in $builds; do
            log="$logs/$build-p$p-s$seed.log"
            runs=$((runs + 1))
            start=$(date +%s)
            set +e
            # In braces, so that bash's own "Segmentation fault" line goes to the log too.
            {
                env -u GMP_MAXPROCS -u GMP_STACK_SIZE -u GMP_MAX_THREADS \
                    GMP_DEBUG=schedtrace=1000,stacktrim=20,stackhwm=16 GMP_FUZZ_GDB="$gdb" \
                    timeout -s KILL $((secs + 120)) \
                    "$out/$build/fuzz" "$seed" "$secs" "$p"
            } >"$log" 2>&1
            rc=$?
            set -e
            took=$(( $(date +%s) - start ))
            if [ "$rc" -eq 0 ]; then
                echo "PASS $build procs=$p seed=$seed (${took} s)"
            else
                failed=$((failed + 1))
                # The first of: a failed check, the watchdog's report line (no progress, an
                # actor stuck in one op), a panic inside the library, a "gmp:" abort.
                why=$(grep -m1 -E "CHECK failed|^fuzz: .*\(seed [0-9]+, procs|panicked at|^gmp:" "$log" || true)
                if [ -z "$why" ] && [ "$rc" -gt 128 ]; then
                    why="killed by signal $((rc - 128))"
                fi
                echo "FAIL $build procs=$p seed=$seed (status $rc, ${took} s): ${why:-see log}"
                echo "     log: $log"
                echo "     repeat: GMP_DEBUG=schedtrace=1000,stacktrim=20,stackhwm=16 $out/$build/fuzz $seed $secs $p"
                failures="$failures $build/p$p/s$seed"
            fi
        done
    done
}

if [ -n "$seeds" ]; then
    for seed in $seeds; do one_seed "$seed"; done
elif [ "$total" -gt 0 ]; then
    end=$(( $(date +%s) + total ))
    while [ "$(date +%s)" -lt "$end" ]; do one_seed $(( (RANDOM << 15 | RANDOM) )); done
else
    for _ in $(seq "$nseeds"); do one_seed $(( (RANDOM << 15 | RANDOM) )); done
fi
echo "fuzz: $runs runs, $failed failed (${secs} s each, seeds${tried})${failures:+; failed:$failures}"
[ "$failed" -eq 0 ]
