//! LockOSThread (Go's LockOSThread/UnlockOSThread, dolockOSThread; HACKING.md,
//! decision 10).
//!
//! Counted as Go's `lockedExt`: `lock` increments `m.lockedext` and binds goroutine and
//! thread (`g.lockedm`, `m.lockedg` — the strict form of M-affinity); `unlock` decrements
//! and unbinds at zero (a goroutine started pinned stays bound by its loose affinity,
//! affinity.rs).
//! While bound the M runs only that goroutine: when it blocks, the M hands its P off and
//! sleeps (`stoplockedm`); whoever dequeues it hands a P to its M (`startlockedm`).
//!
//! Unlike Go, a thread may have goroutines bound to it loosely (M-affinity: pinned ones,
//! and ones parked there in a hooked call, affinity.rs), which run on it and nowhere else.
//! Locking such a thread would leave them no thread while the lock lasts, and the locked
//! goroutine deadlocked when it waited for one of them (the torture test found it). So a
//! first `lock` on a thread with bound goroutines (`m.naffine`) moves the caller to another
//! thread, one nothing is bound to, and locks it there (`lockedm::lock_move`): the caller is
//! locked to the thread it runs on when `lock` returns, which may not be the one it called
//! from. A goroutine that is itself pinned cannot move: it locks its own thread, and the
//! others bound to it wait until it unlocks (it must not wait for them meanwhile). A
//! goroutine that ends with a nonzero count takes its thread with it (`goexit0` sets
//! `m.exiting`; the scheduler loop returns and `mexit` ends the thread).
//!
//! New Ms are never created from a locked thread: the template thread (newm.rs) creates
//! them, started by the first `lock`.

use core::ptr::null_mut;
use core::sync::atomic::Ordering;

use super::*;

/// Why lock/unlock failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockError {
    /// Not on a goroutine.
    Foreign,
    /// The count would overflow.
    Overflow,
}

/// Locks the calling goroutine to its thread (counted). Go's LockOSThread.
pub fn lock() -> Result<u32, LockError> {
    let gp = getg();
    if gp.is_null() {
        return Err(LockError::Foreign);
    }
    // Before we are locked: this thread is still in its original state.
    newm::ensure_template_thread();
    // The goroutine cannot move between getg and here (no switch), so these are ours.
    let mp = getm();
    // SAFETY: mp is this thread's M, gp its running goroutine; the fields below are owned
    // by this thread (lockedext) or written only by the bound pair's own thread.
    unsafe {
        let m = &*mp;
        let n = m.lockedext.get();
        if n == u32::MAX {
            return Err(LockError::Overflow);
        }
        if n == 0
            && m.naffine.get() != 0
            && (*gp).affm.load(Ordering::Relaxed).is_null()
            && !m.p.load(Ordering::Relaxed).is_null()
        {
            // Goroutines are bound to this thread; locked, it would run none of them, and
            // we could wait for one forever. Lock to a thread nothing is bound to. (Not
            // from inside a blocking call, which holds no P and cannot switch: there the
            // lock stays on this thread, as in Go.)
            super::park::golockmove();
            #[cfg(debug_assertions)]
            {
                let lm = getm();
                if (*lm).lockedg.load(Ordering::Relaxed) != gp || (*lm).lockedext.get() != 1 {
                    throw("lock: moved goroutine not locked to its new thread");
                }
            }
            return Ok(1);
        }
        m.lockedext.set(n + 1);
        m.lockedg.store(gp, Ordering::Relaxed);
        (*gp).lockedm.store(mp, Ordering::Relaxed);
        Ok(n + 1)
    }
}

/// Binds goroutine `gp` and M `m` as a first (unnested) lock does: count 1, `m.lockedg`,
/// `gp.lockedm` (for `lockedm::start_locked` and `lockedm::lock_move`, which lock a goroutine
/// that is not running).
///
/// # Safety
/// `m`'s owner-only fields are the caller's (it is `m`'s thread, or `m` sleeps on no list
/// or has no thread yet), and `gp` is the caller's.
pub(super) unsafe fn lock_first(m: *mut M, gp: *mut G) {
    // SAFETY: caller contract.
    unsafe {
        (*m).lockedext.set(1);
        (*m).lockedg.store(gp, Ordering::Relaxed);
        (*gp).lockedm.store(m, Ordering::Relaxed);
    }
}

/// Undoes one `lock`; at zero the goroutine may run on any thread again (unless it was
/// started pinned: then it stays on this one, which runs other goroutines again). A call without a matching lock does nothing (Go). Returns the new count.
pub fn unlock() -> Result<u32, LockError> {
    let gp = getg();
    if gp.is_null() {
        return Err(LockError::Foreign);
    }
    let mp = getm();
    // SAFETY: as in `lock`.
    unsafe {
        let m = &*mp;
        let n = m.lockedext.get();
        if n == 0 {
            return Ok(0);
        }
        m.lockedext.set(n - 1);
        if n == 1 {
            m.lockedg.store(null_mut(), Ordering::Relaxed);
            (*gp).lockedm.store(null_mut(), Ordering::Relaxed);
        }
        Ok(n - 1)
    }
}
