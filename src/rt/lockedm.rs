//! Locked goroutines (Go's `stoplockedm`, `startlockedm`): an M that runs one goroutine
//! only, and moving a goroutine that locks itself to an M that runs nothing else.

use core::ptr::null_mut;
use core::sync::atomic::Ordering;

use super::*;
use super::{idle::*, newm::*, stopm::*};

/// Our G is locked to us and not runnable: hand our P off and sleep until someone finds the
/// G runnable and hands us a P to run it with (Go's stoplockedm).
///
/// # Safety
/// On `m`'s scheduler stack (g0).
pub(super) unsafe fn stoplockedm(m: ThisM<'_>) {
    if !m.p.load(Ordering::Relaxed).is_null() {
        // SAFETY: holding a P.
        let pp = unsafe { releasep(m) };
        handoffp(pp);
    }
    if m.spinning.load(Ordering::Relaxed) {
        throw("stoplockedm: spinning");
    }
    // SAFETY: no P; startlockedm hands us one.
    unsafe { sleep_for_p(m) };
}

/// We dequeued a G locked to M `lm`: hand our P to `lm`, wake it, and stop (Go's
/// startlockedm).
///
/// # Safety
/// `m` holds a P.
pub(super) unsafe fn startlockedm(m: ThisM<'_>, lm: *mut M) {
    // SAFETY: holding a P (the caller's contract).
    let pp = unsafe { releasep(m) };
    // SAFETY: Ms are never freed; lm is asleep in stoplockedm (or about to be) and takes
    // nextp only after our wakeup, which publishes it.
    unsafe {
        (*lm).nextp.store(pp, Ordering::Relaxed);
        (*lm).park.wakeup();
        stopm(m);
    }
}

/// `gmp_lock_os_thread` from goroutine `gp` found goroutines bound to this M (pinned to
/// it, or parked on it in hooked calls: `m.naffine`). Locked here, the M would run only `gp`
/// and they could run nowhere: a locked goroutine waiting for one of them (a mutex it
/// holds) would wait forever. So `gp` is locked to another M instead, one nothing is bound
/// to: an idle one (`mget_clean`), else a new one; it gets our P and runs `gp` at once
/// (`m.lockstart`), and we stop. Ms are reused, so a program that keeps locking on such
/// threads does not keep making threads.
///
/// Also how a goroutine started with `GMP_GO_LOCKED` reaches its thread when the M that
/// dequeued it has goroutines bound to it (`start_locked`).
///
/// # Safety
/// `m` holds a P and is not spinning; `gp` is RUNNABLE, on no queue, has no
/// M, is not bound to any M, and is ours (it stopped running on `m`, from `after_switch`;
/// or `schedule` dequeued it, unstarted).
pub(super) unsafe fn lock_move(m: ThisM<'_>, gp: *mut G) {
    let clean = {
        let mut g = lock_sched();
        mget_clean(&mut g)
    };
    // SAFETY: holding a P.
    let pp = unsafe { releasep(m) };
    let bind = |lm: *mut M| {
        // SAFETY: lm sleeps on no list (taken off `midle` under the lock) or has no thread
        // yet, so its fields are ours until the wake-up (or the thread start) publishes
        // them; gp is ours (caller contract).
        unsafe {
            lockosthread::lock_first(lm, gp);
            (*lm).lockstart.set(true);
        }
    };
    match clean {
        Some(lm) => {
            bind(lm);
            give_p(lm, pp);
        }
        None => {
            let lm = allocm(pp, false);
            bind(lm);
            newm1(lm);
        }
    }
    // SAFETY: no P, not spinning (it ran a goroutine).
    unsafe { stopm(m) };
}

/// `gp`, started with `GMP_GO_LOCKED`, is about to run for the first time: lock it to this
/// M and return true, or, when goroutines are bound to this M, hand it to another
/// (`lock_move`, which stops us) and return false.
///
/// # Safety
/// `m` holds a P and is not spinning; `gp` is RUNNABLE, dequeued and ours.
#[cold]
#[inline(never)]
pub(super) unsafe fn start_locked(m: ThisM<'_>, gp: *mut G) -> bool {
    // SAFETY: caller contract: gp is ours, m's owner-only fields are ours.
    unsafe {
        (*gp).lockedm.store(null_mut(), Ordering::Relaxed);
        if m.naffine.get() != 0 {
            lock_move(m, gp);
            return false;
        }
        lockosthread::lock_first(m.m() as *const M as *mut M, gp);
    }
    true
}

/// Whether `lock_move` handed this M its locked goroutine with the P it holds: run it now.
/// Clears the mark.
#[inline]
pub(super) fn take_lockstart(m: ThisM<'_>) -> bool {
    // SAFETY: `m` is this thread's M, the owner of `lockstart`; the writer published it
    // with the wake-up we woke from.
    unsafe {
        if !m.lockstart.get() {
            return false;
        }
        m.lockstart.set(false);
    }
    true
}
