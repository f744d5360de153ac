//! Ms: creating, starting and stopping them (Go's `newm`, `allocm`, `mstart`, `mexit`,
//! `startm`, `stopm`), handing a P on (`handoffp`), and an M waiting for a P for work only
//! it can run (affinity).

use core::ptr::null_mut;
use core::sync::atomic::Ordering;

use super::*;
use super::{idle::*, schedule::*, stopm::*};
use crate::arch;

/// The body of every M: bind the thread to its M, take the P it was started for, and run
/// the scheduler loop until the M exits (only when a goroutine ended locked to it).
///
/// # Safety
/// Called once, on `m`'s new thread.
pub(super) unsafe fn mstart(m: &M) {
    arch::tls_set(m as *const M as usize);
    // SAFETY: this is m's new thread (the caller's contract), its TLS slot just set.
    let m = unsafe { ThisM::assume(m) };
    os_linux::minit(&m);
    if let Some(&key) = EXIT_KEY.get() {
        // SAFETY: key was created by `init_exit_key`; the value is this thread's M, which
        // lives forever (Ms are never freed).
        unsafe { libc::pthread_setspecific(key, m.m() as *const M as *const libc::c_void) };
    }
    // SAFETY: m's own thread owns g0_fpenv.
    unsafe { m.g0_fpenv.set(arch::fpenv_current()) };
    crate::stack::ensure_altstack();
    m.tid.store(crate::sys::gettid(), Ordering::Relaxed);
    sigprof::minit(m.m());
    let pp = m.nextp.swap(null_mut(), Ordering::Acquire);
    // SAFETY: pp was handed to this M by its creator.
    unsafe { acquirep(m, pp) };
    // A panic inside the scheduler is a runtime bug: never unwind off the thread.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: on g0, once, holding a P.
        unsafe { schedule_loop(m) }
    }));
    if r.is_err() {
        throw("scheduler loop panicked");
    }
    // SAFETY: holding its P, no goroutine.
    unsafe { mexit(m) };
}

/// The M's goroutine ended while locked to it (LockOSThread): give its P away and let the
/// thread end (Go's mexit). The M stays on `allm` marked dead; the thread's exit
/// destructor puts it on `SCHED.mfree` (`mfree_put`), where `allocm` finds it for the
/// next new thread (Ms are never freed, but reused). The thread's alternate signal stack
/// is unmapped by src/stack's thread-exit destructor.
///
/// # Safety
/// `m` holds a P, with no current goroutine.
pub(super) unsafe fn mexit(m: ThisM<'_>) {
    if m.spinning.load(Ordering::Relaxed) {
        throw("mexit: spinning");
    }
    // SAFETY: m's own thread owns naffine.
    if unsafe { m.naffine.get() } != 0 || !m.aff.is_empty() {
        throw("mexit: goroutines bound to the exiting M");
    }
    // SAFETY: holding a P.
    let pp = unsafe { releasep(m) };
    // m.exiting is still set, so an M this hand-off creates comes from the template thread.
    handoffp(pp);
    m.lockedg.store(null_mut(), Ordering::Relaxed);
    m.dead.store(true, Ordering::Release);
    SCHED.mcount.fetch_sub(1, Ordering::SeqCst);
    arch::tls_set(0);
}

/// The key whose destructor catches an M thread exiting other than through `mexit`.
pub(super) static EXIT_KEY: std::sync::OnceLock<libc::pthread_key_t> = std::sync::OnceLock::new();

/// A goroutine locked to `m` ended its thread with pthread_exit: finish it as `goexit0` +
/// `mexit` would (the frames it had are gone already).
///
/// # Safety
/// On `m`'s exiting thread, which holds a P and whose locked goroutine is `gp`.
unsafe fn exit_locked_thread(m: &M, gp: *mut G) {
    // SAFETY: caller contract.
    unsafe {
        let g = &*gp;
        casgstatus(g, G_RUNNING, G_DEAD);
        let pp = m.p.load(Ordering::Relaxed);
        owner_inc(&(*pp).nexited);
        g.lockedm.store(core::ptr::null_mut(), Ordering::Relaxed);
        m.lockedg.store(core::ptr::null_mut(), Ordering::Relaxed);
        m.curg.store(core::ptr::null_mut(), Ordering::Relaxed);
        let pp = releasep(ThisM::assume(m));
        handoffp(pp);
    }
    m.dead.store(true, Ordering::Release);
    SCHED.mcount.fetch_sub(1, Ordering::SeqCst);
    crate::arch::tls_set(0);
}

/// Destructor of `EXIT_KEY` (`init_exit_key`): an M's thread is exiting. Through `mexit` the M is `dead`
/// already; otherwise its goroutine called pthread_exit (or the thread was cancelled).
unsafe extern "C" fn thread_exit_guard(arg: *mut c_void) {
    // SAFETY: the value set by `minit`: this thread's M, never freed.
    let m = unsafe { &*(arg as *const M) };
    if m.dead.load(Ordering::Relaxed) {
        // Our last look at the M: another thread may revive it from here on.
        mfree_put(m);
        return;
    }
    let gp = m.curg.load(Ordering::Relaxed);
    if gp.is_null() {
        throw("an M's thread exited (pthread_exit or cancellation) outside a goroutine");
    }
    if m.lockedg.load(Ordering::Relaxed) == gp && !m.p.load(Ordering::Relaxed).is_null() {
        // The goroutine is locked to this thread (LockOSThread): ending the thread is what
        // Go does when such a goroutine exits, so take it as that exit (an embedding
        // runtime ends its threads this way: CPython's finalization pthread_exits the
        // threads that run Python goroutines). The goroutine is done, its P goes to
        // another M, and this M is dead.
        // SAFETY: this thread is m's and holds its P; gp is its running goroutine.
        unsafe { exit_locked_thread(m, gp) };
        mfree_put(m);
        return;
    }
    let mut buf = [0u8; 96];
    // SAFETY: gp was this M's goroutine when the thread left it; Gs are never freed.
    let goid = crate::sys::fmt_u64(unsafe { (*gp).goid() });
    let msg = crate::sys::fmt_msg(
        &mut buf,
        &[
            b"pthread_exit called in a goroutine (goroutine ",
            &goid,
            b")",
        ],
    );
    throw(core::str::from_utf8(msg).unwrap_or("pthread_exit called in a goroutine"))
}

/// Creates `EXIT_KEY` (from `init_once`, before any M exists).
pub(super) fn init_exit_key() {
    EXIT_KEY.get_or_init(|| {
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: key is a valid out-pointer; the destructor has the signature pthread
        // wants.
        if unsafe { libc::pthread_key_create(&mut key, Some(thread_exit_guard)) } != 0 {
            throw("pthread_key_create failed");
        }
        key
    });
}
