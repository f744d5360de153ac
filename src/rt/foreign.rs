//! The foreign-thread path: the mailbox through which a thread that is not an M hands a
//! goroutine straight to the M spinning for it (Go has none: its cgo callbacks run on an M
//! with a P).

use core::ptr::null_mut;
use core::sync::atomic::Ordering;

use super::*;
use super::{ready::*, steal::*};

/// Whether a foreign thread acted since `m` last asked (and notes that it has now seen it).
#[inline]
pub(super) fn foreign_moved(m: ThisM<'_>) -> bool {
    let acts = crate::sys::FOREIGN_ACTS.load(Ordering::Relaxed);
    // SAFETY: `m` is this thread's M, the owner of `foreign_seen`.
    unsafe {
        if acts == m.foreign_seen.get() {
            return false;
        }
        m.foreign_seen.set(acts);
    }
    true
}

/// Whether a foreign thread is in a quick exchange with goroutines right now
/// (`sys::FOREIGN_LAST_NS`).
pub(super) fn foreign_recent() -> bool {
    let last = crate::sys::FOREIGN_LAST_NS.load(Ordering::Relaxed);
    crate::sys::nanotime() - last < crate::sys::FOREIGN_RECENT_NS
}

/// Makes the caller the M spinning for a foreign thread, if none is, by opening the
/// mailbox (null → OPEN). The caller then calls `spin_for_foreign`, which closes it.
#[inline]
pub(super) fn open_mailbox() -> bool {
    // AcqRel, with the closing swap's: one spinner's turn happens before the next one's.
    FOREIGN_MAILBOX.load(Ordering::Relaxed).is_null()
        && FOREIGN_MAILBOX
            .compare_exchange(
                null_mut(),
                MAILBOX_OPEN,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
}

/// `find_runnable` step 4a: polls the places a foreign thread's work arrives (the global
/// queue, this P's queue and timers, the poller) for up to `sys::FOREIGN_SPIN_NS`, or until
/// the foreign thread acts again (the exchange goes on: the poll restarts). None when
/// nothing came; the caller then carries on as after a failed steal.
///
/// # Safety
/// Called by `p`'s owner `m`, spinning, after its `open_mailbox` succeeded.
// Out of line: an idle path, kept out of find_runnable's body.
#[inline(never)]
pub(super) unsafe fn spin_for_foreign(m: ThisM<'_>, p: &P) -> Option<(*mut G, bool)> {
    // Poll with the mailbox open, and close it on the way out, taking whatever it holds
    // then.
    // SAFETY: caller contract.
    let found = unsafe { spin_for_foreign_open(m, p) };
    // acquire: a goroutine handed over with release; release: for the next spinner's
    // opening CAS.
    let gp = FOREIGN_MAILBOX.swap(null_mut(), Ordering::AcqRel);
    if gp == MAILBOX_OPEN || gp.is_null() {
        return found;
    }
    // gp counts as queued (`enqueued` by the foreign thread) until `schedule` dequeues it.
    match found {
        None if p.id < SCHED.gomaxprocs.load(Ordering::Relaxed) => {
            // SAFETY: m's own thread owns foreign_handoff.
            unsafe { m.foreign_handoff.set(true) };
            Some((gp, false))
        }
        // We have a goroutine to run already (or our P is leaving service): the handed
        // one goes where it would have gone without the mailbox, and runs after it.
        _ => {
            globrunqput(&mut lock_sched(), gp);
            wakep();
            found
        }
    }
}

/// `spin_for_foreign` with the mailbox open: returns a goroutine handed over through
/// it, or what the polls found (which may leave one in the mailbox for the caller).
///
/// # Safety
/// As `spin_for_foreign`.
#[inline(always)]
pub(super) unsafe fn spin_for_foreign_open(m: ThisM<'_>, p: &P) -> Option<(*mut G, bool)> {
    let mut deadline = crate::sys::nanotime() + crate::sys::FOREIGN_SPIN_NS;
    let mut polls = 0u32;
    loop {
        // The mailbox first: it is what the foreign thread's next hand-off fills.
        if FOREIGN_MAILBOX.load(Ordering::Relaxed) != MAILBOX_OPEN {
            return None;
        }
        if p.id >= SCHED.gomaxprocs.load(Ordering::Relaxed) {
            return None;
        }
        // SAFETY: we own p.
        if let Some(x) = unsafe { timers_and_queues(m, p) } {
            return Some(x);
        }
        if !m.aff.is_empty() || SCHED.needspinning.load(Ordering::Relaxed) == 1 {
            return None;
        }
        polls = polls.wrapping_add(1);
        if polls.is_multiple_of(64) {
            // SAFETY: we hold p.
            if unsafe { poll_network(p) } {
                continue;
            }
            // Step 4 of find_runnable, which comes after this spin: a spinning M takes
            // work queued on busy Ps, also while a foreign exchange keeps it here.
            // SAFETY: we own p and are spinning.
            if let Some(gp) = unsafe { steal_work(m, p) } {
                return Some((gp, false));
            }
        }
        core::hint::spin_loop();
        if polls.is_multiple_of(16) {
            if foreign_moved(m) {
                deadline = crate::sys::nanotime() + crate::sys::FOREIGN_SPIN_NS;
            } else if crate::sys::nanotime() >= deadline {
                return None;
            }
        }
    }
}
