//! The C programs under valgrind, AddressSanitizer and ThreadSanitizer: they run clean (the
//! runtime announces its stacks and its synchronisation) and real bugs are still reported
//! (slow: minutes). Harness and conventions: `support/ctest.rs`.

use std::process::Command;

mod common;
#[allow(dead_code)] // each driver uses its own part of the harness
#[path = "support/ctest.rs"]
mod ctest;
#[allow(dead_code)] // each test binary uses its own part of the helpers
mod support;
use ctest::*;
use support::{GMP_ENV, Outcome};

// ---- valgrind: goroutine stacks are registered (VALGRIND_STACK_REGISTER) ----

/// Runs `c-tests/sanitize.c` (with `args`) under `valgrind --error-exitcode=1`, or None
/// when valgrind is not installed.
fn run_valgrind(args: &[&str]) -> Option<Outcome> {
    if Command::new("valgrind").arg("--version").output().is_err() {
        eprintln!("valgrind not installed: skipped (.ci/run installs it)");
        return None;
    }
    let _serial = lock();
    let exe = compile_src_flags(
        "sanitize",
        &manifest_dir().join("c-tests/sanitize.c"),
        FRAME_FLAGS,
    );
    let mut cmd = Command::new("valgrind");
    cmd.args(["-q", "--error-exitcode=1"])
        .arg(&exe)
        .args(args)
        .current_dir(out_dir())
        .env("GMP_MAXPROCS", "2")
        .env_remove("LD_LIBRARY_PATH");
    for var in GMP_ENV {
        cmd.env_remove(var);
    }
    Some(run_with_timeout(cmd, "valgrind sanitize"))
}

#[test]
fn valgrind_clean() {
    let Some(o) = run_valgrind(&[]) else { return };
    assert!(
        o.status.success(),
        "{}",
        o.report("valgrind reported errors")
    );
    assert!(
        o.stdout.contains("sanitize: ok"),
        "{}",
        o.report("program result")
    );
    assert!(!o.stderr.contains("=="), "{}", o.report("valgrind output"));
}

#[test]
fn valgrind_still_reports_use_after_free() {
    let Some(o) = run_valgrind(&["uaf"]) else {
        return;
    };
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        o.report("valgrind must report the bug")
    );
    assert!(
        o.stderr.contains("Invalid read of size 8"),
        "{}",
        o.report("the invalid read")
    );
    assert!(
        o.stderr.contains("sanitize_uaf"),
        "{}",
        o.report("in the goroutine's function")
    );
}

// ---- AddressSanitizer: the stack switches are announced (rt/asan.rs) ----

const ASAN_FLAGS: &[&str] = &["-fsanitize=address", "-fno-omit-frame-pointer", "-g"];

/// Compiles `c-tests/<name>.c` with ASan (as `asan_<name>`) and runs it with `args`.
fn run_asan(name: &str, args: &[&str]) -> Outcome {
    let _serial = lock();
    let exe = compile_src_flags(
        &format!("asan_{name}"),
        &manifest_dir().join("c-tests").join(format!("{name}.c")),
        ASAN_FLAGS,
    );
    let mut cmd = Command::new(&exe);
    cmd.args(args)
        .current_dir(out_dir())
        .env("GMP_MAXPROCS", "2")
        .env_remove("LD_LIBRARY_PATH");
    for var in GMP_ENV {
        if *var != "GMP_MAXPROCS" {
            cmd.env_remove(var);
        }
    }
    run_with_timeout(cmd, &format!("asan_{name} {}", args.join(" ")))
}

/// A representative half of the C tests, built with -fsanitize=address, runs clean. (Not
/// `timers`: its 100,000 sleepers' oversleep bound is a timing claim, and ASan's slowdown
/// plus a busy machine pushed it past 500 ms once.)
#[test]
fn asan_suite() {
    for name in [
        "sanitize",
        "chan_basic",
        "select_basic",
        "chan_release",
        "sync_mutex",
        "sync_rwmutex",
        "sync_cond",
        "sync_once",
        "goexit",
        "once_goexit",
        "sync_trylock",
        "foreign_wait",
        "nested_spawn",
        "pinned",
        "lockosthread",
        "attrs",
        "syscall_errno",
        "yield_fairness",
        "gfree_sizes",
        "steals",
        "chan_stress",
        "syscall_enter_exit",
        "thread_state",
    ] {
        let o = run_asan(name, &[]);
        assert!(
            o.status.success(),
            "{}",
            o.report(&format!("asan_{name} failed"))
        );
        assert!(
            !o.stderr.contains("AddressSanitizer"),
            "{}",
            o.report(&format!("asan_{name}"))
        );
    }
}

#[test]
fn asan_still_reports_use_after_free() {
    let o = run_asan("sanitize", &["uaf"]);
    assert!(
        !o.status.success(),
        "{}",
        o.report("ASan must stop the program")
    );
    assert!(
        o.stderr
            .contains("ERROR: AddressSanitizer: heap-use-after-free"),
        "{}",
        o.report("report")
    );
    assert!(
        o.stderr.contains("in sanitize_uaf"),
        "{}",
        o.report("in the goroutine's function")
    );
}

/// ASan places an overflow of a goroutine's local array in its frame and variable: it
/// knows the stack the thread runs on (without the annotations: "a wild pointer").
#[test]
fn asan_knows_goroutine_stacks() {
    let o = run_asan("sanitize", &["stack_overflow"]);
    assert!(
        !o.status.success(),
        "{}",
        o.report("ASan must stop the program")
    );
    assert!(
        o.stderr
            .contains("ERROR: AddressSanitizer: stack-buffer-overflow"),
        "{}",
        o.report("report")
    );
    assert!(
        o.stderr.contains("'local_buf'"),
        "{}",
        o.report("the variable, found in the goroutine's frame")
    );
}

// ---- ThreadSanitizer: goroutines are fibers, the runtime's synchronisation is announced ----

const TSAN_FLAGS: &[&str] = &["-fsanitize=thread", "-g"];

/// Compiles `c-tests/<name>.c` with TSan (as `tsan_<name>`) and runs it with `args` and the
/// suppressions for libgmp's own (uninstrumented) allocations, scripts/tsan.supp.
fn run_tsan(name: &str, args: &[&str]) -> Outcome {
    run_tsan_with(name, args, true)
}

/// `run_tsan`, with scripts/tsan.supp only if `suppressed`.
fn run_tsan_with(name: &str, args: &[&str], suppressed: bool) -> Outcome {
    let _serial = lock();
    let exe = compile_src_flags(
        &format!("tsan_{name}"),
        &manifest_dir().join("c-tests").join(format!("{name}.c")),
        TSAN_FLAGS,
    );
    let mut cmd = Command::new(&exe);
    cmd.args(args)
        .current_dir(out_dir())
        .env("GMP_MAXPROCS", "2")
        .env_remove("TSAN_OPTIONS")
        .env_remove("LD_LIBRARY_PATH");
    if suppressed {
        let supp = manifest_dir().join("scripts/tsan.supp");
        cmd.env("TSAN_OPTIONS", format!("suppressions={}", supp.display()));
    }
    for var in GMP_ENV {
        if *var != "GMP_MAXPROCS" {
            cmd.env_remove(var);
        }
    }
    run_with_timeout(cmd, &format!("tsan_{name} {}", args.join(" ")))
}

/// A third of the C tests (those with fewer goroutines alive than TSan's 8,128 fibers),
/// built with -fsanitize=thread, run without a report. Without the runtime's annotations,
/// `sanitize` alone had four false races (a goroutine's own stack seen from two threads).
#[test]
fn tsan_suite() {
    for name in [
        "sanitize",
        "chan_basic",
        "select_basic",
        "chan_release",
        "chan_stress",
        "sync_mutex",
        "sync_rwmutex",
        "sync_once",
        "sync_cond",
        "once_goexit",
        "goexit",
        "foreign_wait",
        "pinned",
        "attrs",
        "lockosthread",
        "yield_fairness",
        "syscall_errno",
    ] {
        let o = run_tsan(name, &[]);
        assert!(
            o.status.success(),
            "{}",
            o.report(&format!("tsan_{name} failed"))
        );
        assert!(
            !o.stderr.contains("ThreadSanitizer"),
            "{}",
            o.report(&format!("tsan_{name}"))
        );
    }
}

/// Goroutines parked on an unbuffered channel whose buffers C main's send, close and
/// receive copy into, zero and copy out of (`sanitize parked`) run clean without the
/// suppressions, which hide every call libgmp makes to an intercepted function (the copy's
/// `memmove`, the zeroing's `memset`). Without the edge from the sudog's owner to the party
/// that dequeues it (chan/waitq.rs, "The waiter's buffer and ThreadSanitizer") TSan
/// reports each as a race with the goroutine's own use of its buffer before it parked,
/// and (also with the suppressions, so `tsan_suite` fails too) C main's write after its
/// send as a race with the receiver's write before its receive, which Go's memory model
/// orders.
#[test]
fn tsan_parked_peer_buffers() {
    let o = run_tsan_with("sanitize", &["parked"], false);
    assert!(
        o.status.success() && o.stdout.contains("parked: ok"),
        "{}",
        o.report("tsan_sanitize parked failed")
    );
    assert!(
        !o.stderr.contains("ThreadSanitizer"),
        "{}",
        o.report("tsan_sanitize parked")
    );
}

#[test]
fn tsan_still_reports_a_race() {
    let o = run_tsan("sanitize", &["race"]);
    assert_eq!(
        o.status.code(),
        Some(66),
        "{}",
        o.report("TSan must report the race")
    );
    assert!(
        o.stderr.contains("WARNING: ThreadSanitizer: data race"),
        "{}",
        o.report("report")
    );
    assert!(
        o.stderr.contains("sanitize_racer"),
        "{}",
        o.report("in the goroutines' function")
    );
}

/// A race reported on a goroutine whose M has another goroutine bound to it: TSan's
/// symbolizer opens files through the interposer's hooks while TSan holds its
/// thread-registry lock, and a hook that handed the open to a helper thread would park the
/// goroutine with the lock held (the whole process would wait for it; the program's alarm
/// ends it after 60 s). The report must complete and the program finish.
#[test]
fn tsan_reports_on_a_bound_goroutine() {
    let o = run_tsan("sanitize", &["race_bound"]);
    assert_eq!(
        o.status.code(),
        Some(66),
        "{}",
        o.report("TSan must report the race and the program finish")
    );
    assert!(
        o.stderr.contains("WARNING: ThreadSanitizer: data race")
            && o.stderr.contains("sanitize_bound_racer"),
        "{}",
        o.report("report")
    );
    assert!(
        o.stdout.contains("race_bound done"),
        "{}",
        o.report("finished")
    );
}

/// An fd number closed by `gmp_close` (a system call TSan does not see) and handed out
/// again to a thread unordered with the close: the runtime's close-before-reuse edge keeps
/// TSan from reporting a race on the fd.
#[test]
fn tsan_fd_reuse_after_gmp_close() {
    let o = run_tsan("sanitize", &["fd_reuse"]);
    expect_sanitizer_clean(&o, "ThreadSanitizer", "tsan_fd_reuse_after_gmp_close");
    assert!(
        o.stdout.contains("fd_reuse done"),
        "{}",
        o.report("finished")
    );
}

// ---- the torture mix and the API fuzzer, sanitized ----

/// A sanitized run exited 0 and `tool` ("AddressSanitizer", "ThreadSanitizer") reported
/// nothing.
fn expect_sanitizer_clean(o: &Outcome, tool: &str, what: &str) {
    assert!(
        o.status.success(),
        "{}",
        o.report(&format!("{what} failed"))
    );
    assert!(
        !o.stderr.contains(tool),
        "{}",
        o.report(&format!("{what}: {tool} report"))
    );
}

/// The torture mix (every feature) built with ASan, 3 s at GOMAXPROCS 2.
#[test]
fn asan_torture() {
    let o = run_asan("torture", &["707", "3000", "2", "all"]);
    expect_sanitizer_clean(&o, "AddressSanitizer", "asan_torture");
}

/// The torture features a TSan run takes: all but the netpoller's and plain libc's fd
/// calls. TSan models file descriptors through its own interceptors of open, close,
/// socketpair, ...; the fds the runtime closes (`gmp_close`, and the interposer's close
/// of an fd a goroutine is parked on) close through a raw system call it never sees, so
/// it takes every later reuse of the number for a race on the fd. And all but C code's own
/// pthread locks: under TSan the runtime installs no signal handler (TSan runs handlers
/// late, not on the interrupted context), so a goroutine asleep in a pthread mutex keeps
/// its thread and P (rt/unseen.rs needs the handler).
const TSAN_TORTURE_FEATURES: &str = "all,-net,-libc,-pthread";

/// The torture mix built with TSan, 3 s at GOMAXPROCS 2: no report.
#[test]
fn tsan_torture() {
    let o = run_tsan("torture", &["808", "3000", "2", TSAN_TORTURE_FEATURES]);
    expect_sanitizer_clean(&o, "ThreadSanitizer", "tsan_torture");
}

/// The API fuzzer built with ASan, 3 s at GOMAXPROCS 2 (its actors change it).
#[test]
fn asan_fuzz() {
    let o = run_asan("fuzz", &["909", "3", "2"]);
    expect_sanitizer_clean(&o, "AddressSanitizer", "asan_fuzz");
}

/// The API fuzzer built with TSan, 3 s at GOMAXPROCS 2: no report, no hang.
#[test]
fn tsan_fuzz() {
    let o = run_tsan("fuzz", &["910", "3", "2"]);
    expect_sanitizer_clean(&o, "ThreadSanitizer", "tsan_fuzz");
}
