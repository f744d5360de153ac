#!/usr/bin/env bash
# Mutation testing (cargo-mutants) of one source file, with the C tests as the test
# command: every mutant of FILE (an operator flipped, a function body replaced by a
# default value, ...) is built and the C tests that exercise FILE are run against it. A
# mutant that no test notices ("MISSED") is a gap in the tests, or dead code.
#
# Not part of CI: a run is one build plus one C-test run per mutant (roughly 1-3 minutes
# each on a 2-core machine), so run it per file and keep each run within about an hour.
#
#   cargo install cargo-mutants --locked      # once
#   scripts/mutants.sh src/sync/waitgroup.rs  # C tests chosen from the table below
#   scripts/mutants.sh src/rt/timer.rs timers sysmon_retake   # or name the C tests
#   MUTANTS_LIST=1 scripts/mutants.sh src/sync/cond.rs        # only list the mutants
#   MUTANTS_RE='31:37' scripts/mutants.sh src/sync/waitgroup.rs # only mutants matching
#
# Results: target/mutants/<file>/mutants.out/ (missed.txt, caught.txt, timeout.txt,
# outcomes.json, and a log per mutant). Timeouts count as caught: a mutant that makes a C
# test hang is killed after MUTANTS_TIMEOUT seconds (default 60; the C harness itself
# gives up on a program after 120 s).
set -euo pipefail

cd "$(dirname "$0")/.."
file=${1:?usage: scripts/mutants.sh FILE [C-TEST-FILTER...]}
shift

if [ $# -gt 0 ]; then
    filters=("$@")
else
    # Which C tests (tests/c_tests.rs names, matched as substrings) exercise which file.
    case "$file" in
    src/sync/waitgroup.rs) filters=(foreign_wait nested_spawn bad_input goexit) ;;
    src/sync/mutex.rs) filters=(sync_mutex sync_misuse sync_cond sync_once) ;;
    src/sync/rwmutex.rs) filters=(sync_rwmutex sync_misuse) ;;
    src/sync/cond.rs) filters=(sync_cond sync_misuse) ;;
    src/sync/once.rs) filters=(sync_once) ;;
    src/sync/sema.rs) filters=(sync_ foreign_wait) ;;
    src/chan/*) filters=(chan_ select_basic) ;;
    src/rt/timer.rs) filters=(timers chan_basic select_basic sysmon_retake) ;;
    src/rt/sysmon.rs | src/rt/syscall.rs) filters=(syscall_ sysmon_retake affinity) ;;
    src/rt/lockosthread.rs | src/rt/affinity.rs) filters=(lockosthread affinity syscall_pinned) ;;
    src/rt/sched.rs | src/rt/proc.rs | src/rt/park.rs | src/rt/runq.rs)
        filters=(steals maxprocs nested_spawn yield_fairness goexit lockosthread affinity
            foreign_wait syscall_handoff) ;;
    *) filters=() ;; # every C test
    esac
fi

if ! cargo mutants --version >/dev/null 2>&1; then
    echo "scripts/mutants.sh: cargo-mutants is not installed (cargo install cargo-mutants --locked)" >&2
    exit 2
fi

if [ -n "${MUTANTS_LIST:-}" ]; then
    exec cargo mutants --list --file "$file" --exclude-re 'loom_tests::' ${MUTANTS_RE:+--re "$MUTANTS_RE"}
fi

out="target/mutants/$(echo "$file" | tr / _)"
mkdir -p "$out"
echo "scripts/mutants.sh: mutating $file; C tests: ${filters[*]:-all}; results in $out" >&2
# The loom models and the Rust unit tests are not the test command here: the C tests are
# what a user's program sees.
export GMP_SKIP_LOOM=1
re=()
if [ -n "${MUTANTS_RE:-}" ]; then
    re=(--re "$MUTANTS_RE")
fi
# --cargo-arg: build only the library and the C-test harness for each mutant (not the unit
# tests, the other test binaries and the benches: a mutant's build is then seconds);
# --copy-target: start from this tree's build, so the first (baseline) build is incremental.
exec cargo mutants \
    --file "$file" \
    "${re[@]}" \
    --exclude-re 'loom_tests::' \
    --output "$out" \
    --jobs 1 \
    --copy-target true \
    --cargo-arg=--test=c_tests \
    --timeout "${MUTANTS_TIMEOUT:-60}" \
    --build-timeout 900 \
    -- -- "${filters[@]}"
