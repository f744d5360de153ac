//! Parking and readying goroutines: `gopark`/`goready` (Go's proc.go), `gosched`, and the
//! switch to the scheduler stack with an action code (`mcall`), whose other half, what g0
//! does then (Go's park_m, gosched_m, goexit0), is `schedule::after_switch`.
//!
//! A goroutine leaves the CPU by switching to its M's scheduler context ("g0") with an
//! action code. Everything that publishes the goroutine to other threads — marking it
//! waiting and releasing the lock of the wait queue it is on (gopark's unlock function),
//! or putting it on a run queue (gosched) — happens on g0, after the switch has saved the
//! goroutine's registers. So a waker that finds the goroutine can resume it at once.

use core::sync::atomic::Ordering;

use super::sudog::Waiter;
use super::*;
use crate::arch;

/// Unlock function for `gopark`: called on the scheduler stack with the parked G and the
/// argument given to `gopark`; returns false to cancel the park.
pub type GoParkUnlock = UnlockFn;

/// Switches from the running goroutine to its M's scheduler loop with `act`. Returns when
/// the goroutine is resumed — possibly on another M.
///
/// # Safety
/// Called on a goroutine (not a foreign thread, not g0).
#[inline(never)]
unsafe fn mcall(act: usize) {
    // No runtime lock crosses a switch (HACKING.md, "The lock order"), except a park's:
    // its unlock function releases them on g0.
    #[cfg(debug_assertions)]
    if act != action::PARK && crate::sys::locks_held() != 0 {
        throw("a goroutine yields, is preempted or exits holding a runtime lock");
    }
    let m = getm();
    // SAFETY: caller contract: we run on a goroutine, so m is this thread's M and curg is us.
    unsafe {
        let gp = (*m).curg.load(Ordering::Relaxed);
        if hookflags::any() {
            hooks::leave(&*m, &*gp, false);
        }
        arch::switch((*gp).sp.ptr(), (*m).g0_sp.get(), act);
        if hookflags::any() {
            hooks::resume(gp);
        }
    }
}

/// Parks the calling goroutine: it stops running until some thread calls `goready` on it.
/// `unlockf(gp, arg)` runs on the scheduler stack after the goroutine is marked waiting,
/// typically to release the lock that protects the wait queue the goroutine put itself on;
/// if it returns false the goroutine resumes immediately.
///
/// # Safety
/// Called on a goroutine. The goroutine must be findable by whoever will ready it (on a
/// wait queue) before `unlockf` publishes it; it must hold no lock other than the one
/// `unlockf` releases (no other lock may cross the switch).
pub unsafe fn gopark(unlockf: Option<UnlockFn>, arg: usize, reason: WaitReason) {
    let m = getm();
    // SAFETY: on a goroutine (caller contract): m is live and ours.
    unsafe {
        let gp = (*m).curg.load(Ordering::Relaxed);
        let status = (*gp).status.load(Ordering::Relaxed);
        if status == G_SYSCALL {
            let mut buf = [0u8; 48];
            let what =
                crate::sys::fmt_msg(&mut buf, &[b"waits (", reason.as_str().as_bytes(), b")"]);
            throw_in_syscall(&*gp, core::str::from_utf8(what).unwrap_or("waits"));
        }
        if status != G_RUNNING {
            throw("gopark: bad g status");
        }
        (*m).waitunlockf.set(unlockf);
        (*m).waitlock.set(arg);
        (*gp).waitreason.store(reason as u8, Ordering::Relaxed);
        (*gp).waitsince.store(
            schedlat::stamp_park(coarsetime::coarse_now()),
            Ordering::Relaxed,
        );
        mcall(action::PARK);
    }
}

/// Makes a parked goroutine runnable. From a goroutine it goes to the caller's P's
/// `runnext`, so that it runs next on this P (a ping-pong pair stays on one P and in
/// cache, as Go's `ready(gp, .., next=true)` does); from a
/// foreign thread, to the global queue. Wakes an M if none is looking for work.
///
/// # Safety
/// `gp` is a WAITING goroutine that the caller just removed from the wait queue it was on
/// (so no one else readies it).
pub unsafe fn goready(gp: *mut G) {
    // SAFETY: caller contract; Gs are never freed.
    unsafe {
        (*gp)
            .waitreason
            .store(WaitReason::None as u8, Ordering::Relaxed);
        if hookflags::any() {
            hooks::ready(gp);
        }
        prefetch_resume(&*gp);
        casgstatus(&*gp, G_WAITING, G_RUNNABLE);
        // A goroutine bound to an M can run only there (affinity.rs); while it is locked
        // to it, the strict form (lockedm) is in charge.
        let am = affinity::affine_m(&*gp);
        if !am.is_null() {
            affinity::ready(gp, am);
            return;
        }
    }
    ready::ready_put(gp, true);
}

/// Cache lines of a parked goroutine's stack, from its saved sp up, that `goready`
/// prefetches: the saved registers and the frames it returns through when it resumes
/// (`mcall`, `gopark`, the runtime function that parked it and its C caller; ~600 bytes
/// for a `gmp_sleep`).
const RESUME_PREFETCH_BYTES: usize = 640;

/// A goroutine that waited over 1 ms (by sysmon's coarse clock; a shorter wait leaves its
/// stack warm) is likely out of this CPU's caches: start fetching the frames it will
/// return through now, so that they arrive while its waker carries on, rather than one
/// miss after another as it unwinds when it runs. With 100,000 sleepers (`sleep_many`)
/// those misses are most of a resumption (`scripts/ab.sh sleep_many` against a build
/// without the prefetch).
///
/// # Safety
/// `g` is WAITING and owned by the caller (`goready`'s contract): its saved sp and stack
/// are stable.
#[inline(always)]
unsafe fn prefetch_resume(g: &G) {
    if coarsetime::coarse_now() - g.waitsince.load(Ordering::Relaxed) <= 1_000_000 {
        return;
    }
    // SAFETY: caller contract: the parked G's fields are ours to read.
    unsafe {
        let sp = g.sp.get();
        if let Some(st) = (*g.stack.ptr()).as_ref()
            && !unstarted(sp)
        {
            crate::sys::prefetch_range(sp, (sp + RESUME_PREFETCH_BYTES).min(st.top()));
        }
    }
}

/// Yields the processor (Go's Gosched): the goroutine goes to the back of its P's run
/// queue (where Go's goyield puts it; see `after_switch`) and runs again after the
/// goroutines queued there. On a foreign thread, yields the OS thread.
#[inline]
pub fn gosched() {
    let gp = getg();
    if gp.is_null() {
        crate::sys::osyield();
        return;
    }
    // SAFETY: gp is the goroutine running on this thread; only its own M (us) changes its
    // status between RUNNING and SYSCALL.
    if unsafe { (*gp).status.load(Ordering::Relaxed) } == G_SYSCALL {
        // SAFETY: as above.
        throw_in_syscall(unsafe { &*gp }, "gmp_yield (or a zero-length sleep) called");
    }
    // SAFETY: gp is non-null, so we are on a goroutine.
    unsafe { mcall(action::GOSCHED) };
}

/// Preempts the calling goroutine at a safe point (Go's gopreempt_m): it goes to the back
/// of the global run queue, so that what waits there — the work it has been creating,
/// spilled from its P's full queue — runs first.
///
/// # Safety
/// Called on a goroutine.
pub(super) unsafe fn gopreempt() {
    // SAFETY: caller contract.
    unsafe { mcall(action::PREEMPT) };
}

/// Stops the calling goroutine and resumes it on another M, locked to it with a count of
/// 1 (`lockedm::lock_move`).
///
/// # Safety
/// Called on a goroutine that is not locked, nor bound to an M.
pub(super) unsafe fn golockmove() {
    // SAFETY: caller contract.
    unsafe { mcall(action::LOCKMOVE) };
}

/// `gopreempt` for a goroutine stopped where its C code did not expect a switch (by the
/// SIGURG trampoline, or on the way out of a blocking call). It resumes on this same M
/// (M-affinity: HACKING.md, decision 8), and until it does, the M runs no other goroutine: the C code
/// it stopped may hold a pthread mutex that the next goroutine on this thread would wait
/// for, or be halfway through thread-local state (OpenSSL's per-thread RSA blinding) that
/// the next one would use. So the stop locks the goroutine to its M, as LockOSThread does
/// (`g.asyncbound`: for this one stop; `execute` drops it): the M hands its P off and
/// sleeps in `stoplockedm` until whoever dequeues the goroutine hands it a P. A goroutine
/// already locked keeps its lock (a pinned one keeps its `affm` too).
///
/// # Safety
/// Called on goroutine `m.curg` of this thread's M `m`, holding a P.
pub(super) unsafe fn gopreempt_bound(m: *mut M) {
    // SAFETY: caller contract: m is this thread's M and curg runs here, so its owner-only
    // fields are ours; `lockedm`/`lockedg` of a running goroutine and its M are written
    // only by this thread.
    unsafe {
        let gp = (*m).curg.load(Ordering::Relaxed);
        let g = &*gp;
        if g.lockedm.load(Ordering::Relaxed).is_null() {
            g.lockedm.store(m, Ordering::Relaxed);
            (*m).lockedg.store(gp, Ordering::Relaxed);
            g.asyncbound.set(true);
        }
        gopreempt();
    }
}

/// Aborts for a goroutine that tried to switch (`what`: "gmp_yield called", "waits
/// (chan receive)", …) between gmp_entersyscall and gmp_exitsyscall or inside a
/// gmp_blocking function — where it holds no P and must stay on its thread. Names the
/// misuse, where the status check it would otherwise fail says only "bad incoming status".
#[cold]
pub(super) fn throw_in_syscall(g: &G, what: &str) -> ! {
    let mut buf = [0u8; 200];
    let msg = crate::sys::fmt_msg(
        &mut buf,
        &[
            b"goroutine ",
            &crate::sys::fmt_u64(g.goid()),
            b": ",
            what.as_bytes(),
            b" between gmp_entersyscall and gmp_exitsyscall (or in a gmp_blocking function)",
        ],
    );
    throw(core::str::from_utf8(msg).unwrap_or("switch in a syscall"))
}

/// Wakes a waiter (rt/sudog.rs) claimed by the caller: its parked goroutine (`goready`),
/// or the foreign thread sleeping on its note. The caller holds no channel lock.
///
/// # Safety
/// `w` was claimed by the caller, who has not woken it yet; this is its last access to `w`.
pub(crate) unsafe fn wake_waiter(w: *const Waiter) {
    // SAFETY: caller contract: w is alive until woken, and we won `done`.
    unsafe {
        let g = (*w).g;
        if g.is_null() {
            (*w).note.wakeup();
        } else {
            // The goroutine is parked: it queued itself under a channel lock that gopark's
            // unlock function released after marking it waiting, and we took the lock since.
            goready(g);
        }
    }
}
