//! sysmon's sleep as its wakers see it (Go's `sched.sysmonwait` and `sched.sysmonnote`):
//! the flag sysmon raises before it sleeps on its note, and the wake-ups the submit path,
//! the syscall hand-off, the idle list and the timers make. sysmon itself is `sysmon.rs`.

use core::sync::atomic::{AtomicI64, AtomicU32, Ordering};

use crate::sys::Note;

/// Non-zero while sysmon sleeps on `NOTE`: `WAIT_TIMED` in a backed-off sleep (wanting the
/// next syscall to wake it), `WAIT_DEEP` in the deep sleep (every P idle; Go's
/// `sched.sysmonwait`). Whoever swaps it to 0 owns the one wakeup.
pub(super) static WAIT: AtomicU32 = AtomicU32::new(0);

/// `WAIT`: a sleep of at least `WAKEABLE_US` that ends by itself.
pub(super) const WAIT_TIMED: u32 = 1;

/// `WAIT`: the deep sleep, which only a waker ends.
pub(super) const WAIT_DEEP: u32 = 2;

pub(super) static NOTE: Note = Note::new();

/// When sysmon's current timed sleep ends (`nanotime`), for `wake_for_timer`. Written
/// before `WAIT` goes up.
pub(super) static SLEEP_UNTIL: AtomicI64 = AtomicI64::new(i64::MAX);

/// Called by `entersyscall` after publishing P_SYSCALL (SeqCst), and when a goroutine
/// goes to the global queue while every P is busy: wakes sysmon if it sleeps on its note
/// (a backed-off sleep or the deep one). One load on the fast path.
#[inline]
pub(super) fn wake_if_sleeping() {
    if WAIT.load(Ordering::SeqCst) != 0 {
        wake();
    }
}

/// Called after a timer was put on a heap while no M watches the timers
/// (`timer::wake_for_timer`): wakes sysmon if it sleeps past `step_in`, the time it would
/// step in for it (the timer's `when` plus `timer::BUSY_GRACE_NS`). The SeqCst loads pair with `wakeable_sleep`'s flag and its re-check of the
/// heaps (`unwatched_timer`).
pub(super) fn wake_for_timer(step_in: i64) {
    if WAIT.load(Ordering::SeqCst) == WAIT_TIMED && step_in < SLEEP_UNTIL.load(Ordering::SeqCst) {
        wake();
    }
}

/// Called by `pidleget` after a P left the idle list and by a foreign thread starting to
/// wait: wakes sysmon if it is in its deep sleep, which nothing else would end (a P that
/// starts working must be watched). One load on the fast path.
#[inline]
pub(super) fn wake_if_deep() {
    if WAIT.load(Ordering::SeqCst) == WAIT_DEEP {
        wake_deep();
    }
}

#[cold]
pub(super) fn wake() {
    if WAIT.swap(0, Ordering::SeqCst) != 0 {
        NOTE.wakeup();
    }
}

#[cold]
pub(super) fn wake_deep() {
    if WAIT
        .compare_exchange(WAIT_DEEP, 0, Ordering::SeqCst, Ordering::Relaxed)
        .is_ok()
    {
        NOTE.wakeup();
    }
}
