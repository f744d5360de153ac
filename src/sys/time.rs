//! Time and pauses: the monotonic clock, the calibrated pause every spin is counted in,
//! yielding the CPU, prefetching.

use super::*;

/// Monotonic nanoseconds since an arbitrary origin.
pub fn nanotime() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Spins for as long as `n` pause instructions take on the machine the runtime's spin
/// constants were tuned on (Go's procyield, calibrated): `pauses(n)` pauses here.
#[inline]
pub fn procyield(n: u32) {
    for _ in 0..pauses(n) {
        core::hint::spin_loop();
    }
}

/// How long one pause instruction took, in picoseconds, on the machine where every spin
/// count of the runtime was tuned (a 2-vCPU AMD EPYC Zen 4 VM: 63-65 TSC cycles at 2.6
/// GHz). The latency of `pause` differs severalfold between CPU
/// families (~140 cycles on Skylake-derived Intel cores), so a count of pauses tuned on
/// one spins that much longer or shorter on another; [`calibrate_pause`] measures this
/// machine's and [`pauses`] converts.
pub(super) const REF_PAUSE_PS: u64 = 25_000;

/// Pauses here per pause of the reference machine, in 1/256ths (256: the same latency).
/// Set once by [`calibrate_pause`] at start-up; until then 256.
pub(super) static PAUSE_SCALE_Q8: AtomicU32 = AtomicU32::new(256);

/// The number of pause instructions that takes here as long as `n` took on the reference
/// machine (at least 1 when `n` is not 0).
#[inline(always)]
pub fn pauses(n: u32) -> u32 {
    let scaled = (n as u64 * PAUSE_SCALE_Q8.load(Ordering::Relaxed) as u64 + 128) >> 8;
    (scaled as u32).max(n.min(1))
}

/// The scale [`pauses`] uses for a machine whose pause takes `measured_ps` picoseconds,
/// in 1/256ths, clamped to [1/16, 16]: a measurement disturbed by the hypervisor (the
/// vCPU descheduled for a while) must not shrink the spins to nothing, nor a bogus tiny
/// one make them endless.
pub fn pause_scale_q8(measured_ps: u64) -> u32 {
    (REF_PAUSE_PS * 256 / measured_ps.max(1)).clamp(16, 4096) as u32
}

/// Measures how long a pause instruction takes on this machine (the fastest of five runs
/// of 200, ~25 µs in all) and sets the scale [`procyield`] and [`pauses`] use. Called
/// once at start-up.
pub fn calibrate_pause() {
    const N: u64 = 200;
    let mut best = i64::MAX;
    for _ in 0..5 {
        let t0 = nanotime();
        for _ in 0..N {
            core::hint::spin_loop();
        }
        best = best.min(nanotime() - t0);
    }
    let ps = best.max(1) as u64 * 1000 / N;
    PAUSE_SCALE_Q8.store(pause_scale_q8(ps), Ordering::Relaxed);
}

/// Gives up the CPU to another runnable thread (Go's osyield).
#[inline]
pub fn osyield() {
    // SAFETY: sched_yield has no preconditions.
    unsafe { libc::sched_yield() };
}

/// Starts moving the cache lines of `[lo, hi)` into this CPU's caches (a hint: it changes
/// no state, and an address that is not mapped is ignored by the CPU).
#[inline(always)]
pub fn prefetch_range(lo: usize, hi: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let mut a = lo & !63;
        while a < hi {
            // SAFETY: PREFETCHT0 never faults and has no architectural effect.
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                    a as *const i8,
                )
            };
            a += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (lo, hi);
}
