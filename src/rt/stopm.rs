//! An M giving up its P (Go's `stopm`, `handoffp`): stopping until a P is handed back,
//! and passing a P on to the M that should run it next.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::*;
use super::{idle::*, newm::*, ready::*};

/// Stops the current M until new work is available; returns holding the P it was handed.
///
/// # Safety
/// `m` holds no P and is not spinning.
pub(super) unsafe fn stopm(m: ThisM<'_>) {
    if !m.p.load(Ordering::Relaxed).is_null() {
        throw("stopm holding p");
    }
    if m.spinning.load(Ordering::Relaxed) {
        throw("stopm spinning");
    }
    // SAFETY: no P.
    let has_affine = unsafe { affinity::go_idle(m) };
    {
        let mut g = lock_sched();
        // Goroutines that can run only on this M are queued (or were, after we marked
        // ourselves idle): get a P for them rather than sleep where startm would find us.
        if has_affine || m.affwanted.swap(false, Ordering::SeqCst) {
            if let Some(pp) = pidleget(&mut g) {
                drop(g);
                // SAFETY: pp came off the idle list.
                unsafe {
                    acquirep(m, pp);
                    affinity::set_active(m);
                }
                return;
            }
            affwait_put(&mut g, m.m() as *const M as *mut M);
        } else {
            mput(&mut g, m.m() as *const M as *mut M);
        }
    }
    // SAFETY: we are m's thread, on a list where a P hand-over finds us.
    unsafe {
        sleep_for_p(m);
        affinity::set_active(m);
    }
}

/// `handoffp` found Ms waiting for a P and goroutines queued, and served an M last: the
/// queued goroutines' turn is next. A hint (relaxed): a lost update costs one turn.
pub(super) static HANDOFF_QUEUE_TURN: AtomicBool = AtomicBool::new(false);

/// `handoffp` calls (the metric `/gmp/sched/handoffs:events`).
pub(crate) static HANDOFFS: AtomicU64 = AtomicU64::new(0);

/// Hands off P `pp` from an M that is about to block (Go's handoffp): runs it on another M
/// if there is work or nobody is looking for work, else puts it on the idle list.
pub(super) fn handoffp(pp: *mut P) {
    HANDOFFS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: Ps are never freed; pp was just released by the caller.
    let p = unsafe { &*pp };
    // An M waiting for a P for work only it can run takes it (with its local work) —
    // every other time when goroutines are queued too: such Ms come back for a P each
    // time their goroutine's blocking call ends, and a stream of them (goroutines waiting
    // in turn for CPython's GIL, each wait made seen by unseen.rs) would otherwise keep
    // the P from a queued goroutine for good, the one holding the GIL among them.
    if SCHED.naffwait.load(Ordering::SeqCst) != 0 {
        let queued = !p.runq.is_empty() || SCHED.runqsize.load(Ordering::SeqCst) != 0;
        if !(queued && HANDOFF_QUEUE_TURN.swap(false, Ordering::Relaxed)) {
            let mut g = lock_sched();
            if let Some(am) = affwait_get(&mut g) {
                drop(g);
                if queued {
                    HANDOFF_QUEUE_TURN.store(true, Ordering::Relaxed);
                }
                give_p(am, pp);
                return;
            }
        }
    }
    // If it has local work, start it straight away.
    if !p.runq.is_empty() || SCHED.runqsize.load(Ordering::SeqCst) != 0 {
        startm(pp, false);
        return;
    }
    // No local work: if no M is spinning or idle-with-a-P, our help is needed.
    if SCHED.nmspinning.load(Ordering::SeqCst) + SCHED.npidle.load(Ordering::SeqCst) == 0
        && SCHED
            .nmspinning
            .compare_exchange(0, 1, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    {
        SCHED.needspinning.store(0, Ordering::SeqCst);
        startm(pp, true);
        return;
    }
    #[cfg(debug_assertions)]
    handoff_delay();
    let mut g = lock_sched();
    if SCHED.runqsize.load(Ordering::Relaxed) != 0 {
        drop(g);
        startm(pp, false);
        return;
    }
    pidleput(&mut g, pp);
    drop(g);
    // The last running P gone idle, with goroutines waiting on the poller and no M in it:
    // wake one, which goes idle into the poller (Go's handoffp: "if this is the last
    // running P and nobody is polling network"). The Ms already idle saw nothing to wait
    // for when they stopped, and an M whose locked goroutine just parked on an fd stops
    // without passing through `park_idle`, which would have made it the M in the poller:
    // without this the fd's event finds every M asleep without a deadline
    // (c-tests/netpoll_locked.c). After `pidleput`, so that a P beyond GOMAXPROCS, which
    // it retires, counts too.
    if SCHED.npidle.load(Ordering::SeqCst) >= SCHED.gomaxprocs.load(Ordering::SeqCst)
        && epoll::inited()
        && netpoll::any_waiters()
        && netpoll::BLOCKED.load(Ordering::SeqCst) == 0
    {
        wakep();
    }
    // A wakep that saw no idle P may have asked for a spinner meanwhile (see wakep).
    if SCHED.needspinning.load(Ordering::SeqCst) == 1 {
        wakep();
    }
    // Nobody runs an idle P's timers but the timer M: make sure there is one that wakes
    // in time (Go's handoffp ends with wakeNetPoller for the P's earliest timer). Without
    // this, a goroutine locked to its thread that sleeps leaves its timer on an idle P
    // while every M sleeps without a deadline.
    let when = p.timers.timer0_when.load(Ordering::SeqCst);
    if when != 0 {
        timer::wake_for_timer(when);
    }
}

/// The 61-tick check's other half: an M waits for a P to run work only it can run, and
/// no P has gone idle (all are busy). Hand it ours, with our local work, and stop (onto
/// affwait ourselves if goroutines only we can run are queued: `stopm`). Returns false if
/// nobody waits (any more).
///
/// # Safety
/// `m` holds a P and is not spinning.
pub(super) unsafe fn handoff_to_affwait(m: ThisM<'_>) -> bool {
    let am = {
        let mut g = lock_sched();
        match affwait_get(&mut g) {
            Some(am) => am,
            None => return false,
        }
    };
    // SAFETY: holding a P.
    let pp = unsafe { releasep(m) };
    give_p(am, pp);
    // SAFETY: no P, not spinning.
    unsafe { stopm(m) };
    true
}

/// Test hook, debug builds only: `GMP_DEBUG=handoffdelay=<µs>` makes `handoffp` sleep
/// between its spinning check and its `pidleput`, widening the window in which a `wakep`
/// that found no idle P (needspinning) must be seen by the re-check after the `pidleput`
/// (c-tests/handoff_wakeup.c).
#[cfg(debug_assertions)]
pub(super) fn handoff_delay() {
    crate::sys::dbgvars::delay(crate::sys::dbgvars::Var::Handoffdelay);
}

/// Test hook, debug builds only: `GMP_DEBUG=idledelay=<µs>` makes `park_idle` sleep before
/// its `go_idle`, widening the window in which a goroutine bound to this M is readied
/// after the M gave up its P but before it marked its affinity queue idle: the readier
/// then wakes nobody, and `park_idle` and `stopm` must see the queued goroutine
/// themselves (c-tests/pinned_stopm.c).
#[cfg(debug_assertions)]
pub(super) fn idle_delay() {
    crate::sys::dbgvars::delay(crate::sys::dbgvars::Var::Idledelay);
}
