//! Memory: the reuse of dead goroutines' records, and goroutine stacks (guards, stacks taken
//! lazily or promised, idle stacks given back to the system). Harness and conventions:
//! `support/ctest.rs`.

mod common;
#[allow(dead_code)] // each driver uses its own part of the harness
#[path = "support/ctest.rs"]
mod ctest;
#[allow(dead_code)] // each test binary uses its own part of the helpers
mod support;
use ctest::*;

#[test]
fn gfree_sizes() {
    expect_success("gfree_sizes", &[]);
}

// ---- goroutine stacks ----

#[test]
fn stack_guard() {
    expect_success("stack_guard", &[]);
}

#[test]
fn stack_guard_jump() {
    expect_abort(
        "stack_guard",
        "jump",
        &["gmp: goroutine ", ": stack overflow"],
    );
}

#[test]
fn stack_guard_frame() {
    expect_abort(
        "stack_guard",
        "frame",
        &["gmp: goroutine ", ": stack overflow"],
    );
}

#[test]
fn stack_guard_alloca() {
    expect_abort(
        "stack_guard",
        "alloca",
        &["gmp: goroutine ", ": stack overflow"],
    );
}

/// A goroutine spawned by a goroutine takes a stack when it starts (skynet's faults).
#[test]
fn lazy_stacks() {
    expect_success("lazy_stacks", &[]);
}

/// The promise of a stack that cannot be kept is gmp_go's -ENOMEM, not a failed start.
#[test]
fn lazy_stacks_nomem() {
    expect_case("lazy_stacks", "nomem", &[]);
}

/// Goroutines C main spawns while the only P is busy hold promises of stacks, not stacks:
/// 20,000 of them grow the page tables by less than 3 MiB (a mapped, guarded stack each:
/// ~12 MiB).
#[test]
fn foreign_promises() {
    expect_success("foreign_promises", &[("GMP_DEBUG", "asyncpreemptoff=1")]);
}

#[test]
fn stack_trim_idle() {
    expect_case("stack_trim", "idle", &[]);
}

#[test]
fn stack_trim_off() {
    expect_case("stack_trim", "off", &[("GMP_DEBUG", "stacktrim=0")]);
}

#[test]
fn stack_trim_bursts() {
    expect_case("stack_trim", "bursts", &[]);
}
