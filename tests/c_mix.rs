//! Every feature at once: short seeded runs of the torture mix (`c-tests/torture.c`; the long
//! run is scripts/torture.sh) and of the API fuzzer (`c-tests/fuzz.c`; scripts/fuzz.sh)
//! (slow: minutes). Harness and conventions: `support/ctest.rs`.

mod common;
#[allow(dead_code)] // each driver uses its own part of the harness
#[path = "support/ctest.rs"]
mod ctest;
#[allow(dead_code)] // each test binary uses its own part of the helpers
mod support;
use ctest::*;

// ---- torture: every feature at once (the long run is scripts/torture.sh) ----

/// One 3 s torture run at GOMAXPROCS `procs` with a fixed seed; on failure the output
/// holds the seed, the watchdog's report and the scheduler trace.
fn torture(procs: &str, seed: &str) {
    torture_with(procs, seed, "schedtrace=500,stacktrim=20,stackhwm=16");
}

/// `torture` with `debug` as GMP_DEBUG.
fn torture_with(procs: &str, seed: &str, debug: &str) {
    expect_success(
        "torture",
        &[
            ("TORTURE_SEED", seed),
            ("TORTURE_MS", "3000"),
            ("TORTURE_PROCS", procs),
            ("TORTURE_FEATURES", TORTURE_FEATURES),
            ("GMP_DEBUG", debug),
        ],
    );
}

#[test]
fn torture_procs_1() {
    torture("1", "101");
}

#[test]
fn torture_procs_2() {
    torture("2", "202");
}

#[test]
fn torture_procs_4() {
    torture("4", "404");
}

/// The runtime's locks with Go's exchange protocol instead of the asymmetric unlock (what
/// a process gets where membarrier(2) is refused; sys::Lock).
#[test]
fn torture_go_locks() {
    torture_with("2", "505", "schedtrace=500,asymlock=0");
}

/// Every contended runtime lock sleeps at once (no spinning; debug builds), so the
/// asymmetric lock's sleeping path — the sleeper count, the barrier, the wake-up — meets
/// every feature, at more Ps than CPUs.
#[test]
fn torture_lock_sleeps() {
    torture_with("4", "606", "schedtrace=500,lockspin=0");
}

/// The torture mix where the kernel refuses RWF_NOWAIT (`GMP_DEBUG=rwfnowait=0`, what
/// kernels before pipes took it and qemu-user give): the hooks' pipe and file calls wait
/// for readiness, then go through the hand-off, with every other feature on.
#[test]
fn torture_without_rwf_nowait() {
    torture_with("1", "707", "schedtrace=500,rwfnowait=0");
    torture_with("2", "708", "schedtrace=500,rwfnowait=0");
}

/// The torture mix with a preemption signal every sysmon round (20 µs): every feature
/// meets asynchronous preemption at arbitrary instructions.
#[test]
fn torture_preempt_stress() {
    torture_with(
        "2",
        "303",
        "schedtrace=500,asyncpreemptstress=1,stacktrim=20",
    );
}

// ---- fuzz: random valid and invalid calls to the whole API (the long run is scripts/fuzz.sh) ----

/// Runs c-tests/fuzz.c for 3 s with each seed, starting at GOMAXPROCS `procs` (its actors
/// change it within 1..4). A failure's output holds the actor that failed and its op, or
/// the watchdog's report and a goroutine dump, and the command that repeats the run.
fn fuzz(procs: &str, seeds: &[&str]) {
    fuzz_with(procs, seeds, "schedtrace=1000,stacktrim=20,stackhwm=16");
}

/// `fuzz` with `debug` as GMP_DEBUG.
fn fuzz_with(procs: &str, seeds: &[&str], debug: &str) {
    for seed in seeds {
        let outcome = run_c("fuzz", &[seed, "3", procs], &[("GMP_DEBUG", debug)]);
        assert!(
            outcome.status.success(),
            "{}",
            outcome.report(&format!("fuzz seed {seed} procs {procs} failed"))
        );
        print!("{}", outcome.stdout);
    }
}

/// The fuzzer where the kernel refuses RWF_NOWAIT (see `torture_without_rwf_nowait`).
#[test]
fn fuzz_without_rwf_nowait() {
    fuzz_with("1", &["7"], "schedtrace=1000,rwfnowait=0");
    fuzz_with("2", &["8"], "schedtrace=1000,rwfnowait=0");
}

#[test]
fn fuzz_procs_1() {
    fuzz("1", &["1", "2"]);
}

#[test]
fn fuzz_procs_2() {
    fuzz("2", &["3", "4"]);
}

#[test]
fn fuzz_procs_4() {
    fuzz("4", &["5", "6"]);
}
