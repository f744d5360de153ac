//! The sync objects: mutex, rwmutex, cond, once and the try-locks, their argument checks and
//! the misuses that abort, the mutex's spinning, and its entry points in the library (not
//! gmp.h's inline fast path). Harness and conventions: `support/ctest.rs`.

use std::os::unix::process::ExitStatusExt;

mod common;
#[allow(dead_code)] // each driver uses its own part of the harness
#[path = "support/ctest.rs"]
mod ctest;
#[allow(dead_code)] // each test binary uses its own part of the helpers
mod support;
use ctest::*;
use support::{GMP_ENV, Outcome};

#[test]
fn sync_mutex() {
    expect_success("sync_mutex", &[]);
}

#[test]
fn sync_rwmutex() {
    expect_success("sync_rwmutex", &[]);
}

#[test]
fn sync_cond() {
    expect_success("sync_cond", &[]);
}

#[test]
fn sync_once() {
    expect_success("sync_once", &[]);
}

#[test]
fn sync_trylock() {
    expect_success("sync_trylock", &[]);
}

#[test]
fn once_goexit() {
    expect_success("once_goexit", &[("GMP_MAXPROCS", "2")]);
}

/// gmp_mutex: a spinner must not take the WOKEN bit that unlock set for the waiter it
/// woke (the spin stretched by the debug build's `mutexspindelay` hook).
#[test]
fn sync_mutex_spin() {
    expect_success(
        "sync_mutex_spin",
        &[("GMP_DEBUG", "asyncpreemptoff=1,mutexspindelay=40000")],
    );
}

/// gmp_mutex spins even with goroutines queued on its P (a deviation from Go's canSpin),
/// but only a bounded time: a goroutine made runnable on the locker's P (spawned, woken by
/// a timer, woken by a channel send) runs while the mutex is still held elsewhere.
#[test]
fn sync_mutex_local() {
    expect_success("sync_mutex_local", &[("GMP_DEBUG", "asyncpreemptoff=1")]);
}

#[test]
fn sync_unlock_in_syscall() {
    // One P: the woken waiter waits in the holder's runnext while the holder relocks.
    expect_success("sync_unlock_in_syscall", &[("GMP_MAXPROCS", "1")]);
}

// ---- argument checks, and the misuses that abort ----

#[test]
fn sync_misuse() {
    expect_success("sync_misuse", &[]);
}

#[test]
fn sync_misuse_mutex_unlock_unlocked() {
    expect_abort(
        "sync_misuse",
        "mutex_unlock_unlocked",
        &["gmp: sync: unlock of unlocked mutex"],
    );
}

#[test]
fn sync_misuse_mutex_unlock_goroutine() {
    expect_abort(
        "sync_misuse",
        "mutex_unlock_goroutine",
        &["gmp: sync: unlock of unlocked mutex"],
    );
}

#[test]
fn sync_misuse_rwmutex_runlock_unlocked() {
    expect_abort(
        "sync_misuse",
        "rwmutex_runlock_unlocked",
        &["gmp: sync: RUnlock of unlocked RWMutex"],
    );
}

#[test]
fn sync_misuse_rwmutex_runlock_writer() {
    expect_abort(
        "sync_misuse",
        "rwmutex_runlock_writer",
        &["gmp: sync: RUnlock of unlocked RWMutex"],
    );
}

#[test]
fn sync_misuse_rwmutex_unlock_unlocked() {
    expect_abort(
        "sync_misuse",
        "rwmutex_unlock_unlocked",
        &["gmp: sync: Unlock of unlocked RWMutex"],
    );
}

#[test]
fn sync_misuse_cond_wait_unlocked() {
    expect_abort(
        "sync_misuse",
        "cond_wait_unlocked",
        &["gmp: sync: unlock of unlocked mutex"],
    );
}

// ---- the library's own mutex entry points (mutation testing found them untested) ----

/// Runs `c-tests/<name>.c` compiled with `-DGMP_NO_INLINE_FAST_PATHS` (as `<name>_noinline`):
/// `gmp_mutex_lock`/`gmp_mutex_unlock` are then the library's functions, not gmp.h's
/// inline CAS, so their fast halves (`mutex::lock_fast`, `mutex::unlock_fast`) run.
fn run_c_noinline(name: &str, args: &[&str]) -> Outcome {
    let _serial = lock();
    let exe = compile_src_flags(
        &format!("{name}_noinline"),
        &manifest_dir().join("c-tests").join(format!("{name}.c")),
        &["-DGMP_NO_INLINE_FAST_PATHS"],
    );
    let mut cmd = program(&exe);
    cmd.args(args).current_dir(out_dir());
    for var in GMP_ENV {
        cmd.env_remove(var);
    }
    cmd.env_remove("LD_LIBRARY_PATH");
    run_with_timeout(cmd, &format!("{name}_noinline {}", args.join(" ")))
}

/// sync_mutex.c through the library's `gmp_mutex_lock`/`gmp_mutex_unlock`: an unlock
/// that skipped waking a waiter, or reported a misuse, fails it.
#[test]
fn sync_mutex_noinline() {
    let o = run_c_noinline("sync_mutex", &[]);
    assert_success(&o, "sync_mutex_noinline");
}

/// The library's `gmp_mutex_unlock` of an unlocked mutex aborts with Go's text.
#[test]
fn sync_misuse_mutex_unlock_unlocked_noinline() {
    let o = run_c_noinline("sync_misuse", &["mutex_unlock_unlocked"]);
    assert_eq!(
        o.status.signal(),
        Some(libc::SIGABRT),
        "{}",
        o.report("sync_misuse_noinline mutex_unlock_unlocked should have died by SIGABRT")
    );
    assert!(
        o.stderr.contains("gmp: sync: unlock of unlocked mutex"),
        "{}",
        o.report("sync_misuse_noinline mutex_unlock_unlocked")
    );
}
