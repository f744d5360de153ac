//! Scheduling latency (Go's `/sched/latencies:seconds`): how long goroutines wait
//! runnable before they run, sampled.
//!
//! One transition to runnable in `GMP_DEBUG=schedlatency=N` (64 by default, a power of two;
//! `off` stops it) is timed: the thread making it counts its transitions (an M in
//! `M::schedlat_tick`, the threads outside the runtime together in one atomic) and stamps
//! the goroutine with the clock every Nth time; the M that runs it reads the clock again
//! and adds the difference to its P's histogram. Go times one transition in 8 with its
//! cheaper clock; a `clock_gettime` costs about a fifth of a channel round trip here, so
//! timing one in 8 would slow a ping-pong by a tenth (HACKING.md, "Deviations from Go").
//!
//! The stamp lives in `G::waitsince`, which holds the park time only while the goroutine
//! waits: a stamp has its lowest bit set (a park time never has, `stamp_park`), so a
//! goroutine made runnable by a path that does not stamp (none today) is never timed
//! from its park.
//!
//! Buckets are powers of two of nanoseconds: bucket 0 holds waits under 128 ns, bucket `i`
//! those under 2^(i+7) ns, and the last everything longer (over 2^37 ns, about 137 s).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::*;

/// Buckets per histogram (`gmp_metrics`'s `GMP_METRIC_BUCKETS`).
pub(crate) const BUCKETS: usize = 32;

/// The exclusive upper bound of bucket `i` in nanoseconds (None: the last, unbounded).
pub(crate) fn bucket_bound_ns(i: usize) -> Option<u64> {
    (i + 1 < BUCKETS).then(|| 1u64 << (i + 7))
}

/// The bucket of a wait of `ns` nanoseconds.
#[inline]
fn bucket_of(ns: u64) -> usize {
    // Under 128 ns: bucket 0; else the bit length of ns, less 7.
    let bits = 64 - ns.leading_zeros() as usize;
    bits.saturating_sub(7).min(BUCKETS - 1)
}

/// A P's histogram of timed waits, and their sum. Written by the P's holding M only
/// (`owner_inc`-style load + store); read by anyone.
pub(crate) struct Histogram {
    counts: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

impl Histogram {
    pub(crate) const fn new() -> Histogram {
        Histogram {
            counts: [const { AtomicU64::new(0) }; BUCKETS],
            sum_ns: AtomicU64::new(0),
        }
    }
}

/// `period - 1` (the period a power of two), or `u32::MAX` when timing is off. Set by
/// `init` from `GMP_DEBUG`.
static MASK: AtomicU32 = AtomicU32::new(63);

/// The transitions made by threads outside the runtime (no M to count them).
static FOREIGN_TICK: AtomicU32 = AtomicU32::new(0);

/// Reads `GMP_DEBUG=schedlatency` (runtime start-up).
pub(crate) fn init() {
    let n = crate::sys::dbgvars::get(crate::sys::dbgvars::Var::Schedlatency);
    let mask = if n <= 0 {
        u32::MAX
    } else {
        (n.min(1 << 30) as u32).next_power_of_two() - 1
    };
    MASK.store(mask, Ordering::Relaxed);
}

/// The park time `gopark` stores in `G::waitsince`: never mistaken for a stamp.
#[inline(always)]
pub(crate) fn stamp_park(t: i64) -> i64 {
    t & !1
}

/// `casgstatus`'s part: stamps one goroutine in a period as it becomes runnable, and
/// times it as it starts running.
#[inline(always)]
pub(crate) fn transition(gp: &G, old: u32, new: u32) {
    if new == G_RUNNABLE {
        runnable(gp);
    } else if old == G_RUNNABLE {
        let s = gp.waitsince.load(Ordering::Relaxed);
        if s & 1 != 0 {
            running(gp, s);
        }
    }
}

#[inline(always)]
fn runnable(gp: &G) {
    let m = getm();
    if m.is_null() {
        if FOREIGN_TICK.fetch_add(1, Ordering::Relaxed) & MASK.load(Ordering::Relaxed) == 0 {
            stamp(gp);
        }
        return;
    }
    // SAFETY: a non-null TLS slot is this thread's M; the countdown is its own.
    unsafe {
        let left = (*m).schedlat_tick.get();
        if left == 0 {
            stamp(gp);
            (*m).schedlat_tick.set(MASK.load(Ordering::Relaxed));
        } else {
            (*m).schedlat_tick.set(left - 1);
        }
    }
}

/// An untimed goroutine's `waitsince` is even (a park time, or 0 once a timed wait was
/// recorded): only this makes it odd. (With timing off the countdown restarts at
/// `u32::MAX`: one goroutine in four billion transitions is timed.)
#[cold]
#[inline(never)]
fn stamp(gp: &G) {
    gp.waitsince
        .store(crate::sys::nanotime() | 1, Ordering::Relaxed);
}

/// A timed goroutine starts running on this thread's M, whose P records the wait.
#[cold]
#[inline(never)]
fn running(gp: &G, stamp: i64) {
    gp.waitsince.store(0, Ordering::Relaxed);
    let m = getm();
    if m.is_null() {
        return;
    }
    // SAFETY: this thread's M; the P it holds (it is about to run gp) is never freed.
    let pp = unsafe { (*m).p.load(Ordering::Relaxed) };
    if pp.is_null() {
        return;
    }
    let ns = crate::sys::nanotime().saturating_sub(stamp & !1).max(0) as u64;
    // SAFETY: Ps are never freed; the histogram is the holding M's (us).
    let h = unsafe { &(*pp).schedlat };
    let c = &h.counts[bucket_of(ns)];
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    h.sum_ns
        .store(h.sum_ns.load(Ordering::Relaxed) + ns, Ordering::Relaxed);
}

/// Every P's histogram summed: the counts, and the sum of the timed waits in nanoseconds.
pub(crate) fn snapshot() -> ([u64; BUCKETS], u64) {
    let mut counts = [0u64; BUCKETS];
    let mut sum = 0u64;
    for p in all_ps() {
        for (c, pc) in counts.iter_mut().zip(&p.schedlat.counts) {
            *c += pc.load(Ordering::Relaxed);
        }
        sum += p.schedlat.sum_ns.load(Ordering::Relaxed);
    }
    (counts, sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(127), 0);
        assert_eq!(bucket_of(128), 1);
        assert_eq!(bucket_of(255), 1);
        assert_eq!(bucket_of(256), 2);
        assert_eq!(bucket_of(1 << 36), 30);
        assert_eq!(bucket_of((1 << 37) - 1), 30);
        assert_eq!(bucket_of(1 << 37), 31);
        assert_eq!(bucket_of(u64::MAX), 31);
        for i in 0..BUCKETS - 1 {
            let b = bucket_bound_ns(i).unwrap();
            assert_eq!(bucket_of(b - 1), i);
            assert_eq!(bucket_of(b), i + 1);
        }
        assert_eq!(bucket_bound_ns(BUCKETS - 1), None);
    }
}
