//! The network poller: goroutines waiting on sockets and pipes (10,000 echo connections,
//! deadlines, close, timers, idle threads, bad input), a locked goroutine woken by the
//! poller, and the README's echo server. Harness and conventions: `support/ctest.rs`.

mod common;
#[allow(dead_code)] // each driver uses its own part of the harness
#[path = "support/ctest.rs"]
mod ctest;
#[allow(dead_code)] // each test binary uses its own part of the helpers
mod support;
use ctest::*;
use support::GMP_ENV;

#[test]
fn netpoll_echo10k() {
    expect_case("netpoll", "echo10k", &[]);
}

#[test]
fn netpoll_deadline() {
    expect_case("netpoll", "deadline", &[]);
}

#[test]
fn netpoll_close() {
    expect_case("netpoll", "close", &[]);
}

#[test]
fn netpoll_timer() {
    expect_case("netpoll", "timer", &[]);
}

#[test]
fn netpoll_pipes() {
    expect_case("netpoll", "pipes", &[]);
}

#[test]
fn netpoll_idle() {
    expect_case("netpoll", "idle", &[]);
}

#[test]
fn netpoll_badinput() {
    expect_case("netpoll", "badinput", &[]);
}

#[test]
fn netpoll_signals() {
    expect_case("netpoll", "signals", &[]);
}

/// A goroutine locked to its thread waits on the poller while every other P is idle: the
/// fd's event wakes it (handoffp starts an M to poll when it idles the last P).
#[test]
fn netpoll_locked() {
    expect_success("netpoll_locked", &[]);
}

/// The README's echo server example (examples/echo_server.c) builds warning-free and its
/// self-test (100 client goroutines against it) passes.
#[test]
fn example_echo_server() {
    let _serial = lock();
    let exe = compile_src(
        "example_echo_server",
        &manifest_dir().join("examples").join("echo_server.c"),
    );
    let mut cmd = program(&exe);
    cmd.arg("--selftest").env_remove("LD_LIBRARY_PATH");
    for var in GMP_ENV {
        cmd.env_remove(var);
    }
    let outcome = run_with_timeout(cmd, "echo_server --selftest");
    assert!(
        outcome.status.success() && outcome.stdout.contains("0 failures"),
        "{}",
        outcome.report("examples/echo_server.c --selftest failed")
    );
}
