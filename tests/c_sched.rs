//! The scheduler: spawning and ending goroutines, yield fairness, work stealing, GOMAXPROCS
//! and the parallel speed-up, goroutines pinned to their M (`GMP_GO_PINNED`), C main and
//! other foreign threads working with goroutines, and the features-combined cases of
//! `c-tests/feature_mix.c`. Harness and conventions: `support/ctest.rs`.

mod common;
#[allow(dead_code)] // each driver uses its own part of the harness
#[path = "support/ctest.rs"]
mod ctest;
#[allow(dead_code)] // each test binary uses its own part of the helpers
mod support;
use ctest::*;

// ---- spawning and ending goroutines ----

#[test]
fn spawn_million() {
    expect_success("spawn_million", &[]);
}

#[test]
fn nested_spawn() {
    expect_success("nested_spawn", &[]);
}

#[test]
fn goexit() {
    expect_success("goexit", &[]);
}

// ---- fairness, stealing, GOMAXPROCS, wake-ups ----

#[test]
fn yield_fairness() {
    expect_success("yield_fairness", &[]);
}

#[test]
fn pingpong_hog() {
    expect_success("pingpong_hog", &[]);
}

#[test]
fn steals() {
    expect_success("steals", &[("GMP_MAXPROCS", "2")]);
}

/// gmp_num_goroutine counts every goroutine that lives through the call while others
/// start and end on other Ps and threads.
#[test]
fn num_goroutine_floor() {
    expect_success("num_goroutine_floor", &[("GMP_MAXPROCS", "2")]);
}

#[test]
fn maxprocs() {
    // The program checks that its first gmp_maxprocs(0) returns GMP_MAXPROCS.
    expect_success("maxprocs", &[("GMP_MAXPROCS", "3")]);
}

#[test]
fn parallel_speedup() {
    expect_success("parallel_speedup", &[]);
}

/// handoffp's needspinning re-check: work readied while a blocking M hands off its P
/// (the window stretched by the debug build's `handoffdelay` hook) is not stranded.
#[test]
fn handoff_wakeup() {
    expect_success(
        "handoff_wakeup",
        &[("GMP_DEBUG", "asyncpreemptoff=1,handoffdelay=200000")],
    );
}

// ---- goroutine attributes; goroutines pinned to their M (GMP_GO_PINNED) ----

#[test]
fn attrs() {
    expect_success("attrs", &[("GMP_MAXPROCS", "2")]);
}

#[test]
fn pinned() {
    expect_success("pinned", &[]);
}

/// stopm's look at the affinity queue: a pinned goroutine readied while its M is going to
/// sleep (the window stretched by the debug build's `idledelay` hook) is not stranded.
#[test]
fn pinned_stopm() {
    expect_success("pinned_stopm", &[("GMP_DEBUG", "idledelay=200000")]);
}

// ---- foreign threads (C main, pthreads) and goroutines ----

#[test]
fn foreign_wait() {
    expect_success("foreign_wait", &[]);
}

/// C main in a quick exchange with a goroutine: neither side sleeps in the kernel per
/// message (channels at GOMAXPROCS 1 and 2, a socketpair), the spinning that does this is
/// bounded (idle) and does not slow a burst of spawns (burst), and a goroutine woken by
/// the poller starts a new time slice (socket, root: no preemption requests).
#[test]
fn foreign_exchange_chan1() {
    expect_case("foreign_exchange", "chan1", &[]);
}

#[test]
fn foreign_exchange_chan2() {
    expect_case("foreign_exchange", "chan2", &[]);
}

#[test]
fn foreign_exchange_socket() {
    expect_case("foreign_exchange", "socket", &[]);
}

#[test]
fn foreign_exchange_root() {
    expect_case("foreign_exchange", "root", &[]);
}

#[test]
fn foreign_exchange_burst() {
    expect_case("foreign_exchange", "burst", &[]);
}

#[test]
fn foreign_exchange_idle() {
    expect_case("foreign_exchange", "idle", &[]);
}

/// Foreign threads compete for the spinning M's mailbox while GOMAXPROCS keeps changing:
/// every hand-off is run exactly once (the mailbox's loom model is `rt::mailbox_loom`).
#[test]
fn foreign_exchange_mailbox() {
    expect_case("foreign_exchange", "mailbox", &[]);
}

// ---- features combined the way users combine them (c-tests/feature_mix.c) ----

#[test]
fn feature_mix_timeout_race() {
    expect_case("feature_mix", "timeout_race", &[]);
}

#[test]
fn feature_mix_locked_timer() {
    expect_case("feature_mix", "locked_timer", &[]);
}

#[test]
fn feature_mix_shrink_timers() {
    expect_case("feature_mix", "shrink_timers", &[]);
}

#[test]
fn feature_mix_pingpong_fair() {
    expect_case("feature_mix", "pingpong_fair", &[]);
}

#[test]
fn feature_mix_pingpong_fair_local() {
    expect_case("feature_mix", "pingpong_fair_local", &[]);
}

#[test]
fn feature_mix_retake_spinner() {
    expect_case("feature_mix", "retake_spinner", &[]);
}

#[test]
fn feature_mix_spin_fair() {
    expect_case("feature_mix", "spin_fair", &[]);
}

/// Cooperative preemption alone (no signals): the safe points in gmp_go and in channel
/// operations bound how long a queued goroutine waits.
#[test]
fn feature_mix_spawn_fair_cooperative() {
    expect_case(
        "feature_mix",
        "spawn_fair",
        &[("GMP_DEBUG", "asyncpreemptoff=1")],
    );
}

#[test]
fn feature_mix_spin_fair_cooperative() {
    expect_case(
        "feature_mix",
        "spin_fair",
        &[("GMP_DEBUG", "asyncpreemptoff=1")],
    );
}

#[test]
fn feature_mix_timer_order() {
    expect_case("feature_mix", "timer_order", &[]);
}

#[test]
fn feature_mix_timer_cross_p() {
    expect_case("feature_mix", "timer_cross_p", &[]);
}

#[test]
fn feature_mix_locked_exit_handoff() {
    expect_case("feature_mix", "locked_exit_handoff", &[]);
}

#[test]
fn feature_mix_grow_runs_queued() {
    expect_case(
        "feature_mix",
        "grow_runs_queued",
        &[("GMP_DEBUG", "asyncpreemptoff=1")],
    );
}
