//! Scheduling latency (Go's `/sched/latencies:seconds`): how long goroutines wait
//! runnable before they run, sampled.
//!
//! The timing is an observer of the switch (`hookflags::SCHEDLAT`, called from
//! `hooks.rs`), as the execution trace is: while it is off it costs nothing (a check in
//! `casgstatus` cost 2–5% of a ping-pong's and a yield loop's instructions). Once the
//! metrics have been read (`enable`: `gmp_metrics`, `gmp_metrics_write_prometheus`),
//! sysmon turns it on for 1 ms in every 100 (`sysmon_round`); `GMP_DEBUG=schedlatency=N`
//! turns it on for good from the start, and `schedlatency=off` forbids it.
//!
//! While it is on, one transition to runnable in N (8 by default, as in Go; a power of
//! two) is timed: the thread making it counts down (an M in `M::schedlat_tick`, the
//! threads outside the runtime together in one atomic) and stamps the goroutine with the
//! clock; the M that runs it reads the clock again and adds the difference to its P's
//! histogram. Go times always
//! (HACKING.md, "Deviations from Go").
//!
//! The stamp lives in `G::waitsince`, which holds the park time only while the goroutine
//! waits: a stamp has its lowest bit set (a park time never has, `stamp_park`), so a
//! goroutine made runnable without a stamp (a park its unlock function refused, or any
//! wake-up while the timing is off) is never timed from its park.
//!
//! Buckets are powers of two of nanoseconds: bucket 0 holds waits under 128 ns, bucket `i`
//! those under 2^(i+7) ns, and the last everything longer (over 2^37 ns, about 137 s).

use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};

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

/// `period - 1` (the period a power of two). Set by `init` from `GMP_DEBUG`.
static MASK: AtomicU32 = AtomicU32::new(7);

/// The transitions made by threads outside the runtime (no M to count them).
static FOREIGN_TICK: AtomicU32 = AtomicU32::new(0);

/// Whether `GMP_DEBUG=schedlatency=off` forbids timing.
static OFF: AtomicBool = AtomicBool::new(false);

/// `GMP_DEBUG=schedlatency=N`: timing on from the start, without windows.
static ALWAYS: AtomicBool = AtomicBool::new(false);

/// The metrics were read: sysmon opens timing windows (`sysmon_round`).
static WANTED: AtomicBool = AtomicBool::new(false);

/// When the open window opened (`nanotime`): a stamp older than that is from an earlier
/// window whose goroutine ran unseen, and is not a wait. Written by sysmon only.
static WINDOW_START: AtomicI64 = AtomicI64::new(0);

/// When sysmon opens the next window. Written by sysmon only.
static NEXT_OPEN: AtomicI64 = AtomicI64::new(0);

/// How long a window stays open, and the share of the time windows are open: one part in
/// `DUTY` (a window that sysmon closed late is followed by a longer gap).
const WINDOW_NS: i64 = 1_000_000;
const DUTY: i64 = 100;

/// Reads `GMP_DEBUG=schedlatency` (runtime start-up): a period given there starts the
/// timing at once.
pub(crate) fn init() {
    match crate::sys::dbgvars::get(crate::sys::dbgvars::Var::Schedlatency) {
        // Not given: the default period, from the first read.
        n if n < 0 => {}
        0 => OFF.store(true, Ordering::Relaxed),
        n => {
            MASK.store(
                (n.min(1 << 30) as u32).next_power_of_two() - 1,
                Ordering::Relaxed,
            );
            ALWAYS.store(true, Ordering::Relaxed);
            hookflags::set(hookflags::SCHEDLAT, true);
        }
    }
}

/// A wait longer than this (ns; 0: none) sets `OVER` (the flight recorder's latency
/// trigger, `trace::flight_latency`, which clears it).
pub(crate) static OVER_NS: AtomicU64 = AtomicU64::new(0);
pub(crate) static OVER: AtomicBool = AtomicBool::new(false);

/// The flight recorder's latency trigger (`trace::flight_latency`): every wait is timed,
/// from now on, unless `GMP_DEBUG=schedlatency=off`.
pub(crate) fn time_every_wait() {
    if OFF.load(Ordering::Relaxed) {
        return;
    }
    MASK.store(0, Ordering::Relaxed);
    ALWAYS.store(true, Ordering::Relaxed);
    hookflags::set(hookflags::SCHEDLAT, true);
}

/// The metrics were read: from now on sysmon opens timing windows, unless `GMP_DEBUG`
/// turned the timing off.
pub(crate) fn enable() {
    if !OFF.load(Ordering::Relaxed) && !WANTED.load(Ordering::Relaxed) {
        WANTED.store(true, Ordering::Relaxed);
    }
}

/// sysmon's round: opens a timing window when one is due, closes the open one after
/// `WINDOW_NS`. With the hooks on, a switch costs a quarter (ping-pong) to a half (yield
/// loop) more instructions (every hook site calls out, `hooks.rs`); open one part in
/// `DUTY` of the time, that is about 0.5%, and a window of a busy scheduler still times
/// hundreds of waits.
pub(crate) fn sysmon_round(now: i64) {
    if !WANTED.load(Ordering::Relaxed) || ALWAYS.load(Ordering::Relaxed) {
        return;
    }
    if on() {
        let open = now - WINDOW_START.load(Ordering::Relaxed);
        if open >= WINDOW_NS {
            hookflags::set(hookflags::SCHEDLAT, false);
            NEXT_OPEN.store(
                now + (open * (DUTY - 1)).min(1_000_000_000),
                Ordering::Relaxed,
            );
        }
    } else if now >= NEXT_OPEN.load(Ordering::Relaxed) {
        WINDOW_START.store(now, Ordering::Relaxed);
        // SeqCst (in `set`): a stamp taken after a hook saw the bit is after the start.
        hookflags::set(hookflags::SCHEDLAT, true);
    }
}

/// Whether waits are being timed (the hooks call in only when some observer is on).
#[inline]
pub(crate) fn on() -> bool {
    hookflags::get(hookflags::SCHEDLAT)
}

/// The park time `gopark` stores in `G::waitsince`: never mistaken for a stamp.
#[inline(always)]
pub(crate) fn stamp_park(t: i64) -> i64 {
    t & !1
}

/// `gp` is about to become runnable (`hooks::ready`, `readied`, `spawn`, a yield or a
/// preemption in `after_switch`): every Nth time on this thread, stamp it. An untimed
/// goroutine's `waitsince` is even (a park time, or 0 once a timed wait was recorded):
/// only this makes it odd.
pub(crate) fn runnable(gp: &G) {
    let m = getm();
    let due = if m.is_null() {
        FOREIGN_TICK.fetch_add(1, Ordering::Relaxed) & MASK.load(Ordering::Relaxed) == 0
    } else {
        // SAFETY: a non-null TLS slot is this thread's M; the countdown is its own.
        unsafe {
            let left = (*m).schedlat_tick.get();
            (*m).schedlat_tick.set(if left == 0 {
                MASK.load(Ordering::Relaxed)
            } else {
                left - 1
            });
            left == 0
        }
    };
    if due {
        gp.waitsince
            .store(crate::sys::nanotime() | 1, Ordering::Relaxed);
    }
}

/// `g` starts running on `m` (`hooks::execute`): a stamped wait goes to the histogram
/// of the P `m` holds.
pub(crate) fn running(m: &M, g: &G) {
    let stamp = g.waitsince.load(Ordering::Relaxed);
    if stamp & 1 == 0 {
        return;
    }
    g.waitsince.store(0, Ordering::Relaxed);
    if stamp < WINDOW_START.load(Ordering::Relaxed) {
        return;
    }
    let pp = m.p.load(Ordering::Relaxed);
    if pp.is_null() {
        return;
    }
    let ns = crate::sys::nanotime().saturating_sub(stamp & !1).max(0) as u64;
    let over = OVER_NS.load(Ordering::Relaxed);
    if over != 0 && ns > over {
        OVER.store(true, Ordering::Relaxed);
    }
    // SAFETY: Ps are never freed; the histogram is the holding M's (m's, on its thread).
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
