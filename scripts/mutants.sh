#!/usr/bin/env bash
# Mutation testing (cargo-mutants) of one source file, with the C tests as the test
# command: every mutant of FILE (an operator flipped, a function body replaced by a
# default value, ...) is built and the C tests that exercise FILE are run against it. A
# mutant that no test notices ("MISSED") is a gap in the tests, or dead code.
#
# Not part of CI: a run is one incremental build of the library plus one run of the
# chosen C tests per mutant (5-15 s each on a 2-CPU machine, MUTANTS_TIMEOUT for a mutant
# that hangs a test), after a first full build (~70 s): run it per file. On the shared
# 2-core machine, pin it: `taskset -c 1 scripts/mutants.sh ...`.
#
# cargo-mutants does not mutate `unsafe fn`s (timer::start/stop, the heap's sift_up/down,
# select's selectgo...). MUTANTS_UNSAFE=1 mutates exactly those of FILE: the tree is copied
# to target/mutants-unsafe/<file>/, `unsafe fn NAME` becomes `fn        NAME` in the copy's FILE
# (same lines and columns; the bodies already use explicit `unsafe {}` blocks, the crate
# denies unsafe_op_in_unsafe_fn; callers' `unsafe { f() }` only warn), and cargo-mutants runs
# on the copy restricted (unless MUTANTS_RE is given) to the mutants inside those functions.
# The mutants are real mutants of the same code: only the signatures' `unsafe` is gone.
#
#   cargo install cargo-mutants --locked      # once
#   scripts/mutants.sh src/sync/waitgroup.rs  # C tests chosen from the table below
#   scripts/mutants.sh src/rt/timer.rs timers sysmon_retake   # or name the C tests
#   MUTANTS_LIST=1 scripts/mutants.sh src/sync/cond.rs        # only list the mutants
#   MUTANTS_RE='31:37' scripts/mutants.sh src/sync/waitgroup.rs # only mutants matching
#   MUTANTS_EXCLUDE_RE='running_stack' scripts/mutants.sh src/rt/schedule.rs  # all but those
#   MUTANTS_TIMEOUT=20 ...                     # seconds before a hung mutant counts as caught
#   MUTANTS_UNSAFE=1 scripts/mutants.sh src/rt/timer.rs  # only the `unsafe fn`s (see above)
#   MUTANTS_UNSAFE=1 MUTANTS_RE='in (sift_up|sift_down)$' ...   # some of them
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
    # Which C tests (test names of the tests/c_*.rs drivers, matched as substrings)
    # exercise which file.
    case "$file" in
    src/sync/waitgroup.rs) filters=(foreign_wait nested_spawn bad_input goexit) ;;
    src/sync/mutex.rs) filters=(sync_mutex sync_trylock sync_cond sync_misuse
        sync_unlock_in_syscall sync_rwmutex) ;;
    src/sync/rwmutex.rs) filters=(sync_rwmutex sync_misuse sync_trylock) ;;
    src/sync/cond.rs) filters=(sync_cond sync_misuse) ;;
    src/sync/once.rs) filters=(sync_once once_goexit) ;;
    src/sync/sema.rs) filters=(sync_ foreign_wait) ;;
    src/chan/select.rs) filters=(chan_ select_basic select_sizes feature_mix_timeout_race) ;;
    src/chan/*) filters=(chan_ select_basic select_sizes) ;;
    src/rt/timer.rs) filters=(timers timer_heap chan_basic select_basic feature_mix_timer_order
        feature_mix_timer_cross_p feature_mix_locked_timer netpoll_timer netpoll_idle) ;;
    # Not preempt_hog: its 30 ms lateness bound can fail on the unmutated tree when pinned
    # to one CPU with taskset; feature_mix_pingpong_fair, preempt_fair and preempt_sigurg see sysmon's
    # preemption.
    src/rt/sysmon.rs) filters=(syscall_ sysmon_retake sysmon_wake pinned preempt_off
        preempt_sigurg preempt_fair feature_mix_pingpong_fair) ;;
    # interpose_: `holds_p` decides whether the interposer parks the goroutine.
    src/rt/syscall.rs) filters=(syscall_ sysmon_retake pinned interpose_errno
        interpose_sleep) ;;
    src/rt/lockosthread.rs | src/rt/affinity.rs) filters=(lockosthread pinned) ;;
    src/rt/schedule.rs | src/rt/mstart.rs | src/rt/ready.rs | src/rt/idle.rs | \
    src/rt/spinning.rs | src/rt/foreign.rs | src/rt/lockedm.rs | src/rt/procresize.rs | \
    src/rt/schedinit.rs | src/rt/proc.rs | src/rt/park.rs | src/rt/runq.rs)
        filters=(nested_spawn yield_fairness goexit steals lockosthread foreign_wait
            syscall_handoff feature_mix_shrink_timers feature_mix_locked_exit_handoff
            feature_mix_grow_runs_queued maxprocs handoff_wakeup
            config_max_threads_env pinned attrs preempt_lockexit)
        # proc.rs and park.rs also hold the safe points (gmp_go's, the channels', the
        # syscall exit's) and gopark/goready: the preemption and ping-pong tests see those.
        case "$file" in
        # (Not `preempt_`: it also matches torture_preempt_stress, 30 s on one CPU; not
        # preempt_hog, whose lateness bound fails under taskset.)
        src/rt/proc.rs | src/rt/park.rs) filters+=(preempt_fair preempt_regs preempt_libc
            preempt_tid preempt_sigurg preempt_off feature_mix_pingpong_fair
            syscall_errno_safepoint syscall_misuse once_goexit sync_once chan_basic dump
            deadlock_ gfree_sizes bad_input) ;;
        esac ;;
    *) filters=() ;; # every C test
    esac
fi

if ! cargo mutants --version >/dev/null 2>&1; then
    echo "scripts/mutants.sh: cargo-mutants is not installed (cargo install cargo-mutants --locked)" >&2
    exit 2
fi

# MUTANTS_OUT: another results directory, for a second run of the same file at once.
out=${MUTANTS_OUT:-"target/mutants/$(echo "$file" | tr / _)${MUTANTS_UNSAFE:+-unsafe}"}
out=$(realpath -m "$out")

if [ -n "${MUTANTS_UNSAFE:-}" ]; then
    # The definitions `[pub[(crate|super)]] [const] unsafe fn NAME` (not the `unsafe fn(..)`
    # pointer types). Each name is matched in the mutants' names as "replace [Type::]NAME
    # with ..." (the body replaced) or "... in [Type::]NAME" (an operator in its body).
    def='^([[:space:]]*(pub(\([a-z]+\))?[[:space:]]+)?(const[[:space:]]+)?)unsafe fn ([A-Za-z_][A-Za-z0-9_]*)'
    names=$(grep -oE "$def" "$file" | sed -E 's/.*unsafe fn //' | sort -u | paste -sd'|')
    if [ -z "$names" ]; then
        echo "scripts/mutants.sh: no unsafe fn in $file" >&2
        exit 2
    fi
    MUTANTS_RE=${MUTANTS_RE:-"(replace |in )([A-Za-z0-9_]+::)*($names)( -> .*)?( with |\$)"}
    # A copy of the tree (not target/, .git), one per FILE so that two runs can start at
    # once (cargo-mutants copies it again into a scratch directory of its own).
    tree=target/mutants-unsafe/$(echo "$file" | tr / _)
    mkdir -p "$tree"
    tar --exclude=./target --exclude=./.git -cf - . | tar -C "$tree" -xf -
    sed -E -i "s/$def/\1fn        \5/" "$tree/$file"
    echo "scripts/mutants.sh: unsafe fns of $file: ${names//|/ }" >&2
    cd "$tree"
fi

if [ -n "${MUTANTS_LIST:-}" ]; then
    exec cargo mutants --list --file "$file" --exclude-re 'tests::' ${MUTANTS_RE:+--re "$MUTANTS_RE"}
fi

mkdir -p "$out"
echo "scripts/mutants.sh: mutating $file; C tests: ${filters[*]:-all}; results in $out" >&2
# The loom models and the Rust unit tests are not the test command here: the C tests are
# what a user's program sees. Nor are they mutated (`--exclude-re 'tests::'`: the unit-test
# and loom-model modules; runq.rs's helpers gave 15 mutants that no C test could see).
export GMP_SKIP_LOOM=1
re=()
if [ -n "${MUTANTS_RE:-}" ]; then
    re=(--re "$MUTANTS_RE")
fi
if [ -n "${MUTANTS_EXCLUDE_RE:-}" ]; then
    re+=(--exclude-re "$MUTANTS_EXCLUDE_RE")
fi
# --cargo-arg: build only the library and the C-test drivers (tests/c_*.rs) for each mutant
# (not the unit tests, the other test binaries and the benches: a mutant's build is then
# seconds);
# --copy-target: start from this tree's build, so the first (baseline) build is incremental.
exec cargo mutants \
    --file "$file" \
    "${re[@]}" \
    --exclude-re 'tests::' \
    --output "$out" \
    --jobs 1 \
    --copy-target true \
    '--cargo-arg=--test=c_*' \
    --timeout "${MUTANTS_TIMEOUT:-60}" \
    --build-timeout 900 \
    -- -- "${filters[@]}"
