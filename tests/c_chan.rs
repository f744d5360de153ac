//! Channels and select: Go's semantics, conservation under contention, releasing a channel
//! that goroutines are blocked on, and the memory a channel holds. Harness and conventions:
//! `support/ctest.rs`.

mod common;
#[allow(dead_code)] // each driver uses its own part of the harness
#[path = "support/ctest.rs"]
mod ctest;
#[allow(dead_code)] // each test binary uses its own part of the helpers
mod support;
use ctest::*;

#[test]
fn chan_basic() {
    expect_success("chan_basic", &[("GMP_MAXPROCS", "2")]);
}

#[test]
fn select_basic() {
    expect_success("select_basic", &[("GMP_MAXPROCS", "2")]);
}

/// gmp_select with 1-100 cases, around the stack/heap scratch switch at 16: ready,
/// blocking, send and timeout selects fire exactly the right case.
#[test]
fn select_sizes() {
    expect_success("select_sizes", &[]);
}

#[test]
fn chan_stress() {
    expect_success("chan_stress", &[]);
}

/// chan_stress with every contended runtime lock sleeping at once (debug builds):
/// thousands of sleeps through the asymmetric lock's barrier and sleeper count.
#[test]
fn chan_stress_lock_sleeps() {
    expect_success("chan_stress", &[("GMP_DEBUG", "lockspin=0")]);
}

/// As `chan_stress_lock_sleeps`, with membarrier(2) refused by a seccomp filter after the
/// library registered for it: the locks say so once and sleep in bounded polls.
#[test]
fn chan_stress_membarrier_refused() {
    let o = expect_success(
        "chan_stress",
        &[
            ("GMP_DEBUG", "lockspin=0"),
            ("CHAN_STRESS_REFUSE_MEMBARRIER", "1"),
        ],
    );
    if o.stdout.contains("membarrier refused: yes") {
        assert!(
            o.stderr
                .contains("gmp: membarrier(2) refused after registration"),
            "{}",
            o.report("no word of the refused barrier")
        );
    }
}

// ---- channel lifetime and memory ----

/// Freed memory is scribbled over (tcache off: glibc does not perturb chunks it caches
/// there), so a blocked operation touching its released channel hangs or crashes.
#[test]
fn chan_release() {
    expect_success(
        "chan_release",
        &[
            ("MALLOC_PERTURB_", "165"),
            ("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0"),
        ],
    );
}

#[test]
fn chan_release_double() {
    expect_abort(
        "chan_release",
        "double_release",
        &["gmp: gmp_chan_release: channel released more often than retained"],
    );
}

#[test]
fn chan_release_retain_released() {
    expect_abort(
        "chan_release",
        "retain_released",
        &["gmp: gmp_chan_retain: channel already released"],
    );
}

#[test]
fn chan_release_send_released() {
    expect_abort(
        "chan_release",
        "send_released",
        &["gmp: channel used after its last gmp_chan_release"],
    );
}

/// Released channels are freed (header and buffer), also after blocked receivers were
/// served: resident memory stays flat over 20,000 channels with 8 KiB buffers.
#[test]
fn chan_free() {
    expect_success("chan_free", &[]);
}

/// A large channel buffer costs nothing until it is used: a 512 MiB buffer (64 KiB
/// elements) and a 16 GiB one (2^30 8-byte elements) are each made in under 10 ms and
/// grow the resident set by under 16 MiB, also once used a little (sends, receives, the
/// try forms, close), and their release gives it back; with the address space limited,
/// their makes are -ENOMEM.
#[test]
fn chan_lazy() {
    let o = expect_success("chan_lazy", &[]);
    assert!(
        o.stdout.contains("chan_lazy: ok"),
        "{}",
        o.report("chan_lazy")
    );
}
