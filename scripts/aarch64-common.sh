# What scripts/aarch64.sh and scripts/aarch64-vm.sh share (sourced by both).

# qemu-user 7.2's fork of a multi-threaded guest can deadlock in the child before it execs
# (a host lock of the emulator's, held by another thread at the fork: the child waits in
# a futex for ever). It happens to the Rust test harness itself, which does not load the
# library, starting a C test program now and then when tests run in parallel (its spawn
# waits for the exec, so the harness's own time limit never starts). So every step under
# qemu has a time limit, and a step that runs out of it (and only that) is run once more;
# a step that fails, or runs out of time twice, fails the script.
# Usage: under_qemu SECONDS NAME COMMAND...
under_qemu() {
    local limit=$1 name=$2
    shift 2
    local try rc
    for try in 1 2; do
        rc=0
        timeout -k 10 "$limit" "$@" || rc=$?
        if [ "$rc" -eq 0 ]; then
            return 0
        fi
        if [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ]; then
            echo "$name failed (exit $rc)"
            return "$rc"
        fi
        echo "$name: no end after $limit s (try $try; qemu-user's fork can deadlock)"
    done
    return 1
}

# Builds the torture test and the API fuzzer for aarch64 against the cross-built library
# into the absolute directory OUT (with the library as OUT/libgmp.so.0, their rpath).
# Usage: build_torture_fuzz OUT
build_torture_fuzz() {
    local out=$1 prog
    mkdir -p "$out"
    cp "target/aarch64-unknown-linux-gnu/release/libgmp.so" "$out/libgmp.so.0"
    for prog in torture fuzz; do
        aarch64-linux-gnu-gcc -std=c11 -Wall -Wextra -Werror -Wpedantic -O2 -pthread -Iinclude \
            "c-tests/$prog.c" "$out/libgmp.so.0" -Wl,-rpath,"$out" -o "$out/$prog"
    done
}

# A 10 s torture run with FEATURES, then two 8 s fuzzer runs without the ops OPS_OFF, each
# on a fresh seed at GOMAXPROCS 2 with a 20 s watchdog (emulation is an order of magnitude
# slower than the default 2 s allows), started by RUNNER (split at spaces) with GMP_DEBUG
# set to DEBUG, killed after LIMIT seconds; WHERE names the place in the output. Exits the
# script on a failure, with the end of the program's log.
# Usage: torture_and_fuzz OUT WHERE "RUNNER" LIMIT DEBUG FEATURES OPS_OFF
torture_and_fuzz() {
    local out=$1 where=$2 runner=$3 limit=$4 debug=$5 features=$6 ops_off=$7 seed i
    local clean=(env -u GMP_MAXPROCS -u GMP_STACK_SIZE -u GMP_MAX_THREADS -u GMP_DEBUG)
    seed=$(( (RANDOM << 15 | RANDOM) ))
    echo "== torture $where: seed $seed, 10 s, GOMAXPROCS 2, $features"
    # shellcheck disable=SC2086 # the runner's words
    if ! "${clean[@]}" ${debug:+GMP_DEBUG=$debug} TORTURE_STALL_MS=20000 \
        timeout -s KILL "$limit" $runner "$out/torture" "$seed" 10000 2 "$features" \
        >"$out/torture.log" 2>&1; then
        head -60 "$out/torture.log"
        echo "torture failed: seed $seed (log: $out/torture.log)"
        exit 1
    fi
    tail -1 "$out/torture.log"
    for i in 1 2; do
        seed=$(( (RANDOM << 15 | RANDOM) ))
        echo "== fuzz $where: seed $seed, 8 s, GOMAXPROCS 2, ops off: ${ops_off:-none}"
        # shellcheck disable=SC2086 # the runner's words
        if ! "${clean[@]}" GMP_DEBUG="${debug:+$debug,}schedtrace=1000" FUZZ_STALL_MS=20000 \
            FUZZ_OPS_OFF="$ops_off" \
            timeout -s KILL "$limit" $runner "$out/fuzz" "$seed" 8 2 >"$out/fuzz.log" 2>&1; then
            grep -v "^SCHED" "$out/fuzz.log" | tail -60
            echo "fuzz failed: seed $seed (log: $out/fuzz.log)"
            exit 1
        fi
        grep -v "^SCHED" "$out/fuzz.log" | tail -1
    done
}
