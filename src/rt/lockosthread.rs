//! LockOSThread (Go's LockOSThread/UnlockOSThread, dolockOSThread, the template thread;
//! HACKING.md, decision 10).
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
//! # The template thread
//!
//! A locked goroutine may change its thread's state (unshare namespaces, setresuid on one
//! thread through a raw syscall, scheduling policy, CPU affinity, signal mask), and
//! `pthread_create` clones most of that into the child. A new M resets its signal mask,
//! affinity and name itself (`os_linux::minit`), but not namespaces, credentials or
//! scheduling policy. New Ms are therefore never created from a locked (or exiting)
//! thread: `newm` hands them to the template thread, a plain thread created by the first
//! `lock` *before* the caller is locked (so from a thread in its original state, as Go's
//! startTemplateThread), which creates them.

use core::ptr::null_mut;
use core::sync::atomic::Ordering;

use super::*;
use crate::sys::{Lock, Note};

static TEMPLATE_ONCE: std::sync::Once = std::sync::Once::new();
/// Guards `PENDING` and `SLEEPING` (a leaf lock).
static TLOCK: Lock = Lock::new(crate::sys::Rank::TemplateThread);
/// New Ms waiting for their thread, linked through `m.schedlink` (owner: holder of TLOCK).
static PENDING: Owned<*mut M> = Owned::new(null_mut());
/// The template thread is asleep on `TNOTE` (owner: holder of TLOCK).
static SLEEPING: Owned<bool> = Owned::new(false);
static TNOTE: Note = Note::new();

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
    ensure_template_thread();
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

/// Whether `newm` must not create a thread from the calling thread (it is locked, or is
/// an M exiting after its goroutine ended locked).
#[inline]
pub(super) fn must_use_template() -> bool {
    let mp = getm();
    if mp.is_null() {
        return false;
    }
    // SAFETY: this thread's M owns these fields.
    unsafe { (*mp).lockedext.get() > 0 || (*mp).exiting.get() }
}

/// The template thread's stack: it only clones Ms.
const TEMPLATE_STACK: usize = 128 * 1024;

fn ensure_template_thread() {
    TEMPLATE_ONCE.call_once(|| {
        crate::sys::spawn_detached("template thread", TEMPLATE_STACK, template_main, null_mut());
    });
}

/// Queues new M `m` (fully initialised, not started) for the template thread.
pub(super) fn newm_handoff(m: *mut M) {
    // The template thread exists: a thread is locked or exiting only after a `lock`.
    ensure_template_thread();
    TLOCK.lock();
    // SAFETY: we hold TLOCK; m is not started, so its schedlink is ours.
    let wake = unsafe {
        (*m).schedlink.set(PENDING.get());
        PENDING.set(m);
        let w = SLEEPING.get();
        SLEEPING.set(false);
        w
    };
    TLOCK.unlock();
    if wake {
        TNOTE.wakeup();
    }
}

extern "C" fn template_main(_: *mut libc::c_void) -> *mut libc::c_void {
    super::threads::register();
    loop {
        TLOCK.lock();
        // SAFETY: we hold TLOCK.
        let mut list = unsafe { PENDING.get() };
        if list.is_null() {
            // SAFETY: we hold TLOCK.
            unsafe { SLEEPING.set(true) };
            TLOCK.unlock();
            TNOTE.sleep();
            TNOTE.clear();
            continue;
        }
        // SAFETY: we hold TLOCK.
        unsafe { PENDING.set(null_mut()) };
        TLOCK.unlock();
        while !list.is_null() {
            // SAFETY: the Ms on the list are ours until started.
            let next = unsafe { (*list).schedlink.get() };
            // SAFETY: as above.
            unsafe { (*list).schedlink.set(null_mut()) };
            mstart::spawn_m_thread(list);
            list = next;
        }
    }
}
