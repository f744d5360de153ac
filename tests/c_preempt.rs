//! Asynchronous preemption: a goroutine that never calls the runtime cannot starve the
//! others, preemption keeps registers and libc's state, and it changes no system call's
//! outcome (`preempt_soak`). Harness and conventions: `support/ctest.rs`.

mod common;
#[allow(dead_code)] // each driver uses its own part of the harness
#[path = "support/ctest.rs"]
mod ctest;
#[allow(dead_code)] // each test binary uses its own part of the helpers
mod support;
use ctest::*;

#[test]
fn preempt_hog() {
    expect_case("preempt", "hog", &[]);
}

#[test]
fn preempt_fair() {
    // Up to three attempts: a run is a second of four goroutines on one CPU of a machine
    // that also runs other tests, whose threads can take a share of one goroutine's
    // slices; a run where every share is within the bound shows preemption shares the P.
    let mut last = None;
    for _ in 0..3 {
        let o = run_c("preempt", &["fair"], &[]);
        if o.status.success() {
            print!("{}", o.stdout);
            return;
        }
        last = Some(o);
    }
    let o = last.expect("three attempts");
    panic!("{}", o.report("preempt fair failed three times"));
}

#[test]
fn preempt_regs() {
    expect_case("preempt", "regs", &[PREEMPT_STRESS]);
}

#[test]
fn preempt_libc() {
    expect_case("preempt", "libc", &[PREEMPT_STRESS]);
}

#[test]
fn preempt_tid() {
    expect_case("preempt", "tid", &[PREEMPT_STRESS]);
}

#[test]
fn preempt_lockexit() {
    expect_case("preempt", "lockexit", &[PREEMPT_STRESS]);
}

#[test]
fn preempt_sigurg() {
    expect_case("preempt", "sigurg", &[PREEMPT_STRESS]);
}

#[test]
fn preempt_off() {
    expect_case("preempt", "off", &[("GMP_DEBUG", "asyncpreemptoff=1")]);
}

/// Preemption changes no system call's outcome (c-tests/preempt_soak.c): goroutines making
/// raw system calls (no hook sees them), holding pthread locks and using thread-local state
/// beside CPU hogs, at GOMAXPROCS 1, 2 and 4, with the hooks on and off, for
/// `PREEMPT_SOAK_SECS` (3 unless set; minutes for a soak) each.
fn preempt_soak(env: &[(&str, &str)]) {
    let secs = std::env::var("PREEMPT_SOAK_SECS").unwrap_or_else(|_| "3".to_string());
    for procs in ["1", "2", "4"] {
        for interpose in ["1", "0"] {
            let mut e = env.to_vec();
            e.push(("GMP_MAXPROCS", procs));
            e.push(("GMP_INTERPOSE", interpose));
            let o = run_c("preempt_soak", &[&secs], &e);
            assert!(
                o.status.success(),
                "{}",
                o.report(&format!(
                    "preempt_soak failed at GOMAXPROCS={procs} GMP_INTERPOSE={interpose}"
                ))
            );
            print!("GOMAXPROCS={procs} GMP_INTERPOSE={interpose}: {}", o.stdout);
        }
    }
}

/// The process's own choice of preemption source (a perf event where the kernel allows
/// one, else a thread CPU-time timer: rt/preemptsig.rs).
#[test]
fn preempt_soak_default_source() {
    preempt_soak(&[]);
}

/// The thread CPU-time timer, which needs no privilege.
#[test]
fn preempt_soak_cputimer_source() {
    preempt_soak(&[("GMP_DEBUG", "asyncpreemptsig=2")]);
}
