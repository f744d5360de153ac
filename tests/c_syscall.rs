//! Blocking calls and threads: the syscall hand-off (gmp_blocking, gmp_syscall,
//! gmp_entersyscall/gmp_exitsyscall) and its misuses, sysmon's retake and what wakes it,
//! LockOSThread, what the runtime's threads inherit, fork, and pthread_exit in a goroutine.
//! Harness and conventions: `support/ctest.rs`.

mod common;
#[allow(dead_code)] // each driver uses its own part of the harness
#[path = "support/ctest.rs"]
mod ctest;
#[allow(dead_code)] // each test binary uses its own part of the helpers
mod support;
use ctest::*;

// ---- the syscall hand-off: gmp_blocking, gmp_syscall, gmp_entersyscall/gmp_exitsyscall ----

#[test]
fn syscall_handoff() {
    expect_success("syscall_handoff", &[]);
}

#[test]
fn syscall_burst() {
    expect_success("syscall_burst", &[]);
}

#[test]
fn syscall_pinned() {
    expect_success("syscall_pinned", &[]);
}

#[test]
fn syscall_errno() {
    expect_success("syscall_errno", &[]);
}

#[test]
fn syscall_errno_safepoint() {
    // Asynchronous preemption off, so that sysmon's request is left for the safe point on
    // the way out of gmp_blocking to honour.
    let o = run_c(
        "syscall_errno",
        &["safepoint"],
        &[("GMP_DEBUG", "asyncpreemptoff=1")],
    );
    assert!(
        o.status.success(),
        "{}",
        o.report("syscall_errno safepoint failed")
    );
    print!("{}", o.stdout);
}

#[test]
fn syscall_enter_exit() {
    expect_success("syscall_enter_exit", &[]);
}

#[test]
fn syscall_bad_input() {
    expect_success("syscall_bad_input", &[]);
}

#[test]
fn syscall_misuse() {
    expect_success("syscall_misuse", &[("GMP_MAXPROCS", "1")]);
}

const IN_SYSCALL: &str = "between gmp_entersyscall and gmp_exitsyscall";

#[test]
fn syscall_misuse_yield_in_syscall() {
    expect_abort(
        "syscall_misuse",
        "yield_in_syscall",
        &["gmp: goroutine ", "gmp_yield", IN_SYSCALL],
    );
}

#[test]
fn syscall_misuse_wait_in_blocking() {
    expect_abort(
        "syscall_misuse",
        "wait_in_blocking",
        &["gmp: goroutine ", "waits (chan receive)", IN_SYSCALL],
    );
}

#[test]
fn syscall_misuse_sleep_in_syscall() {
    expect_abort(
        "syscall_misuse",
        "sleep_in_syscall",
        &["gmp: goroutine ", "waits (sleep)", IN_SYSCALL],
    );
}

#[test]
fn syscall_misuse_return_in_syscall() {
    expect_abort(
        "syscall_misuse",
        "return_in_syscall",
        &[
            "gmp: goroutine ",
            "ended (returned, or called gmp_goexit)",
            IN_SYSCALL,
        ],
    );
}

#[test]
fn syscall_misuse_goexit_in_blocking() {
    expect_abort(
        "syscall_misuse",
        "goexit_in_blocking",
        &[
            "gmp: goroutine ",
            "ended (returned, or called gmp_goexit)",
            IN_SYSCALL,
        ],
    );
}

// ---- sysmon ----

#[test]
fn sysmon_retake() {
    expect_success("sysmon_retake", &[]);
}

/// The 10 ms grace must hold for the first blocking call a P ever makes too (a per-P
/// record of sysmon's that started at the P's own syscalltick with `syscallwhen` 0 would
/// take the first syscall for one it saw long ago and retake the P at once).
#[test]
fn sysmon_retake_first_syscall() {
    let out = run_c("sysmon_retake", &["first"], &[]);
    assert_success(&out, "sysmon_retake first");
}

/// What wakes sysmon (a P leaving the idle list during its deep sleep; a syscall starting
/// during a backed-off sleep) and the timers it runs for a P nobody else watches.
#[test]
fn sysmon_wake_deep() {
    expect_case("sysmon_wake", "deep", &[]);
}

#[test]
fn sysmon_wake_syscall() {
    expect_case("sysmon_wake", "syscall", &[]);
}

#[test]
fn sysmon_wake_slice() {
    expect_case(
        "sysmon_wake",
        "slice",
        &[("GMP_DEBUG", "asyncpreemptoff=1")],
    );
}

#[test]
fn sysmon_wake_timers() {
    expect_case(
        "sysmon_wake",
        "timers",
        &[("GMP_DEBUG", "asyncpreemptoff=1")],
    );
}

/// A goroutine that shrinks GOMAXPROCS and then computes on the P being retired is still
/// preempted: sysmon counts a running P beyond GOMAXPROCS as busy.
#[test]
fn maxprocs_shrink_watch() {
    expect_success("maxprocs_shrink_watch", &[]);
}

// ---- LockOSThread ----

#[test]
fn lockosthread() {
    expect_success("lockosthread", &[]);
}

#[test]
fn lockosthread_exit_reuse() {
    expect_success("lockosthread_exit_reuse", &[]);
}

// ---- threads: what they inherit, fork, pthread_exit ----

#[test]
fn thread_state() {
    expect_success("thread_state", &[("GMP_MAXPROCS", "2")]);
    expect_success("thread_state", &[]);
}

#[test]
fn fork_child() {
    expect_success("fork_child", &[]);
}

/// fork_child with an execution trace running: a child that exits runs the trace's
/// atexit handler, which must leave the parent's trace alone (it printed a Rust panic).
#[test]
fn fork_child_traced() {
    let trace = out_dir().join("fork_child_traced.trace");
    let path = trace.to_str().expect("UTF-8 path");
    let o = expect_success("fork_child", &[("GMP_TRACE", path)]);
    assert!(
        !o.stderr.contains("panick"),
        "{}",
        o.report("a child printed a panic")
    );
    // The parent finished it: its last record is END (a tag of 6 and a u64).
    let b = std::fs::read(&trace).expect("the trace file");
    assert!(
        b.starts_with(b"gmptrace") && b.len() > 9 && b[b.len() - 9] == 6,
        "unfinished trace"
    );
}

#[test]
fn pthread_exit_goroutine() {
    expect_abort(
        "pthread_exit_goroutine",
        "exit",
        &["gmp: pthread_exit called in a goroutine (goroutine "],
    );
}

#[test]
fn pthread_exit_goroutine_locked() {
    expect_case("pthread_exit_goroutine", "locked", &[]);
}
