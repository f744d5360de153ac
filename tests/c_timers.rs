//! Timers: gmp_now and gmp_sleep, one P's timer heap, and sleepers that wake on time on a
//! busy P. Harness and conventions: `support/ctest.rs`.

mod common;
#[allow(dead_code)] // each driver uses its own part of the harness
#[path = "support/ctest.rs"]
mod ctest;
#[allow(dead_code)] // each test binary uses its own part of the helpers
mod support;
use ctest::*;

#[test]
fn timers() {
    expect_success("timers", &[]);
}

/// One P's timer heap with 256 timers: each fires in time and never early; stopped ones
/// (removed from the middle of the heap) never fire.
#[test]
fn timer_heap() {
    expect_success("timer_heap", &[]);
}

/// A sleeper on a busy P (GOMAXPROCS=1) wakes through that P's own timer check while C
/// main keeps ~180 ms of work queued globally: the timer M leaves a busy P's timers to it
/// until they are 0.5 ms overdue, instead of readying their goroutines behind the queue.
#[test]
fn timer_busy_p() {
    expect_success("timer_busy_p", &[]);
}

/// 400 sleepers fall due at once on a busy P (GOMAXPROCS=1) while C main keeps ~360 ms of
/// work queued globally: the P readies them as its run queue has room instead of
/// overflowing it into the global queue, behind the work.
#[test]
fn timer_backlog() {
    expect_success("timer_backlog", &[]);
}
