//! The coarse clock: monotonic nanoseconds as sysmon last read them, refreshed each round
//! (every 20 µs to 10 ms while any P runs; a park happens only on a running P), so that
//! `gopark` records when a goroutine parked (`G::waitsince`, for the dump's wait times)
//! with one load and one store, not a clock read. sysmon marks the clock stale (0) before
//! its deep sleep; a park in the window before its next round reads the real clock.

use core::sync::atomic::{AtomicI64, Ordering};

/// Monotonic nanoseconds as last seen by sysmon (see the module doc; the gdb script reads
/// it by name). 0 before sysmon's first round.
pub(crate) static COARSE_NOW: AtomicI64 = AtomicI64::new(0);

/// The park time `gopark` records: sysmon's clock, or the real one while sysmon's is stale
/// (the first parks after every P was idle; sysmon's next round, at most 20 µs after a P
/// starts running, makes it fresh again). Without the fallback a goroutine that parked in
/// that window showed no wait time however long it waited.
#[inline]
pub(crate) fn coarse_now() -> i64 {
    match COARSE_NOW.load(Ordering::Relaxed) {
        0 => stale_now(),
        t => t,
    }
}

#[cold]
fn stale_now() -> i64 {
    crate::sys::nanotime()
}

/// Called by sysmon each round with the time it just read.
#[inline]
pub(crate) fn set_coarse_now(now: i64) {
    COARSE_NOW.store(now, Ordering::Relaxed);
}

/// Called before sysmon's deep sleep (every P idle), which may last hours: a goroutine that
/// parks after a P left the idle list but before sysmon's next round reads the clock
/// itself (`coarse_now`) rather than recording a time from before the sleep.
pub(crate) fn coarse_now_stale() {
    COARSE_NOW.store(0, Ordering::Relaxed);
}
