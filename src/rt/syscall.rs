//! Blocking calls with P hand-off (Go's entersyscall / exitsyscall / handoffp in proc.go;
//! HACKING.md, decision 4).
//!
//! `entersyscall` keeps the P on the M, but makes it *up for grabs*: the P goes to
//! `P_SYSCALL` with `p.m == 0`, and the M remembers it in `m.oldp`. The goroutine goes to
//! `G_SYSCALL`; `m.curg` and `g.m` stay. If the call is short, `exitsyscall` takes the P
//! back with one CAS (`P_SYSCALL → P_RUNNING`) and no lock. If it lasts, sysmon's `retake`
//! CASes the P to `P_IDLE` and hands it to another M (`handoffp`), so the other
//! goroutines keep running.
//!
//! On return, a goroutine whose P was taken never moves to another thread (C code may keep
//! `&errno` in a register across the call; HACKING.md, decisions 4 and 8): its M takes an
//! idle P if there is one; otherwise it waits, with the goroutine on its stack, for a P to
//! be handed to it. That wait is M-affinity's (affinity.rs): the M joins `SCHED.affwait`,
//! which a P going idle serves before the idle list, `handoffp` serves first, and a busy
//! P serves at its 61-tick fairness check (so the M is not starved at GOMAXPROCS=1 while
//! other goroutines keep the P busy). Sysmon counts a waiting M as work when it decides
//! whether to retake a P from a syscall.

use core::ptr::null_mut;
use core::sync::atomic::Ordering;

use super::*;

/// Why a call to `enter` did nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnterError {
    /// Not on a goroutine (a foreign thread): nothing to hand off.
    Foreign,
    /// The goroutine is in a syscall already (nested blocking call).
    Nested,
}

/// Changes the status of the goroutine running on this thread between RUNNING and
/// SYSCALL. Only the goroutine's own M ever writes the status of a RUNNING or SYSCALL
/// goroutine (nobody else may CAS it: the table in mod.rs), so a checked load and a
/// release store do what `casgstatus` does without a locked instruction; the fast path
/// then costs one atomic RMW (the P's status CAS on return; on entry a store, see
/// `enter`), where Go 1.26's costs two (CASes of the G's status, which sysmon's retake
/// also CASes). The check stays on in release builds.
#[inline(always)]
fn setgstatus_own(g: &G, old: u32, new: u32) {
    if g.status.load(Ordering::Relaxed) != old {
        throw("casgstatus: bad incoming status");
    }
    g.status.store(new, Ordering::Release);
}

/// Enters a blocking call (Go's entersyscall). `Ok` means the caller must call [`exitsyscall`]
/// when the call returns, on the same goroutine (it does not move).
#[inline]
pub fn entersyscall() -> Result<(), EnterError> {
    let mp = getm();
    if mp.is_null() {
        return Err(EnterError::Foreign);
    }
    // SAFETY: a non-null TLS slot is this thread's live M.
    let m = unsafe { &*mp };
    let gp = m.curg.load(Ordering::Relaxed);
    if gp.is_null() {
        return Err(EnterError::Foreign);
    }
    // SAFETY: gp runs on this thread.
    let g = unsafe { &*gp };
    if g.status.load(Ordering::Relaxed) == G_SYSCALL {
        return Err(EnterError::Nested);
    }
    let pp = m.p.load(Ordering::Relaxed);
    // SAFETY: a RUNNING goroutine's M holds a P (triangle invariant).
    let p = unsafe { &*pp };
    #[cfg(debug_assertions)]
    if p.m.load(Ordering::Relaxed) != mp || g.m.load(Ordering::Relaxed) != mp {
        throw("entersyscall: triangle invariant broken");
    }
    if traceevent::on() {
        traceevent::syscall_enter(m, g);
    }
    // SAFETY: m's own thread owns syscalltick.
    unsafe { m.syscalltick.set(p.syscalltick.load(Ordering::Relaxed)) };
    setgstatus_own(g, G_RUNNING, G_SYSCALL);
    m.oldp.store(pp, Ordering::Relaxed);
    m.p.store(null_mut(), Ordering::Relaxed);
    p.m.store(null_mut(), Ordering::Relaxed);
    // Publish: from here the P may be taken (release: its next owner sees our writes to
    // its owner-only state). Then a StoreLoad barrier before reading sysmon's flag (sysmon
    // sets the flag, then re-checks the Ps; one of us must see the other). Nobody else
    // writes a P_RUNNING P's status, so a store does what Go's exchange does; with the
    // asymmetric fence pair on, the barrier is the light side, a compiler barrier, and
    // sysmon makes the heavy side (membarrier(2)) between raising its flag and its look
    // (`sysmon::wakeable_sleep`): the hand-off's fast path keeps one locked instruction,
    // the exit's CAS (HACKING.md, the deviations table).
    if p.status.load(Ordering::Relaxed) != P_RUNNING {
        throw("entersyscall: P not running");
    }
    if crate::sys::membarrier::on() {
        p.status.store(P_SYSCALL, Ordering::Release);
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
    } else {
        p.status.swap(P_SYSCALL, Ordering::SeqCst);
    }
    sysmonwake::wake_if_sleeping();
    Ok(())
}

/// Returns from a blocking call entered with [`entersyscall`] (Go's exitsyscall). The goroutine
/// continues on the same thread: with its old P if nobody took it, else with an idle P,
/// else after waiting (on this thread) for a P to be handed over.
#[inline]
pub fn exitsyscall() {
    let mp = getm();
    // SAFETY: `enter` succeeded on this goroutine, so mp is this thread's live M and its
    // goroutine (G_SYSCALL) is the caller.
    let m = unsafe { &*mp };
    let gp = m.curg.load(Ordering::Relaxed);
    // SAFETY: as above.
    let g = unsafe { &*gp };
    let oldp = m.oldp.load(Ordering::Relaxed);
    m.oldp.store(null_mut(), Ordering::Relaxed);
    #[cfg(debug_assertions)]
    if oldp.is_null()
        || !m.p.load(Ordering::Relaxed).is_null()
        || g.m.load(Ordering::Relaxed) != mp
        || g.status.load(Ordering::Relaxed) != G_SYSCALL
    {
        throw("exitsyscall: not in a syscall");
    }
    // SAFETY: Ps are never freed.
    let p = unsafe { &*oldp };
    // Fast path: our P is still in P_SYSCALL (nobody retook it, or it went round and is
    // in someone else's syscall now — either way it is free to take). acquire: we see the
    // writes of whoever owned it last.
    if p.status.load(Ordering::Relaxed) == P_SYSCALL
        && p.status
            .compare_exchange(P_SYSCALL, P_RUNNING, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    {
        p.m.store(mp, Ordering::Relaxed);
        m.p.store(oldp, Ordering::Relaxed);
        // Tell sysmon that this is a new syscall if it sees P_SYSCALL again.
        p.syscalltick.store(
            p.syscalltick.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
        setgstatus_own(g, G_SYSCALL, G_RUNNING);
        if traceevent::on() {
            traceevent::syscall_exit(m, g);
        }
        return;
    }
    // SAFETY: mp is this thread's M (as above); the goroutine is in a syscall and its P is
    // gone.
    unsafe { exitsyscall_slow(ThisM::assume(m), gp) };
    if traceevent::on() {
        traceevent::syscall_exit(m, g);
    }
}

/// `exit` when our P was retaken: take an idle P, or wait on this thread, with the
/// goroutine on its stack, until one is handed over (affinity.rs: the M waits on
/// `SCHED.affwait`, which every P going idle, `handoffp` and the busy Ps' 61-tick check
/// serve first).
///
/// # Safety
/// Running (on its stack) goroutine `gp` in G_SYSCALL, holding no P.
#[cold]
#[inline(never)]
unsafe fn exitsyscall_slow(m: ThisM<'_>, gp: *mut G) {
    // SAFETY: gp is ours (caller contract).
    let g = unsafe { &*gp };
    // SAFETY: no P; an M running a goroutine is never spinning.
    unsafe { idle::wait_for_p(m) };
    casgstatus(g, G_SYSCALL, G_RUNNING);
    let pp = m.p.load(Ordering::Relaxed);
    // SAFETY: we hold pp.
    let p = unsafe { &*pp };
    p.schedtick.store(
        p.schedtick.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
    #[cfg(debug_assertions)]
    if !std::ptr::eq(g.m.load(Ordering::Relaxed), m.m())
        || m.curg.load(Ordering::Relaxed) != gp
        || !std::ptr::eq(p.m.load(Ordering::Relaxed), m.m())
    {
        throw("exitsyscall: triangle invariant broken");
    }
}

/// Runs `f` as a blocking call: with P hand-off on a goroutine, directly elsewhere (and
/// directly when already inside one). While `f` runs on a goroutine, `m.inblocking` counts
/// it, so that [`exitsyscall_user`] refuses to end the syscall under our feet.
#[inline(always)]
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    let entered = match entersyscall() {
        Ok(()) => true,
        Err(EnterError::Nested) => false,
        Err(EnterError::Foreign) => return f(),
    };
    // SAFETY: enter found a goroutine on this thread's M; in G_SYSCALL it cannot leave
    // this M (no switch is allowed there), so the M's owner-only field is ours throughout.
    let m = unsafe { &*getm() };
    // SAFETY: as above.
    unsafe { m.inblocking.set(m.inblocking.get() + 1) };
    let r = f();
    // SAFETY: as above.
    unsafe { m.inblocking.set(m.inblocking.get() - 1) };
    if entered {
        exitsyscall();
    }
    r
}

/// Why [`exitsyscall_user`] did nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitError {
    /// Not on a goroutine.
    Foreign,
    /// The goroutine is not in a syscall (no gmp_entersyscall before).
    NotInSyscall,
    /// The syscall belongs to a wrapped blocking call (gmp_blocking, gmp_read…) still in
    /// progress: its own `exit` ends it.
    InBlocking,
}

/// `exit` for gmp_exitsyscall: checks, in release builds too, that the calling goroutine
/// is in a syscall that gmp_entersyscall started and no wrapped call is in progress.
pub fn exitsyscall_user() -> Result<(), ExitError> {
    let mp = getm();
    if mp.is_null() {
        return Err(ExitError::Foreign);
    }
    // SAFETY: a non-null TLS slot is this thread's live M.
    let m = unsafe { &*mp };
    let gp = m.curg.load(Ordering::Relaxed);
    if gp.is_null() {
        return Err(ExitError::Foreign);
    }
    // SAFETY: gp runs on this thread.
    if unsafe { (*gp).status.load(Ordering::Relaxed) } != G_SYSCALL {
        return Err(ExitError::NotInSyscall);
    }
    // SAFETY: m's own thread owns inblocking.
    if unsafe { m.inblocking.get() } != 0 {
        return Err(ExitError::InBlocking);
    }
    exitsyscall();
    Ok(())
}

/// Whether the caller is a goroutine holding its P (not a foreign thread, not inside a
/// blocking call): only such a caller may switch (yield or park).
#[inline]
pub fn holds_p() -> bool {
    let gp = getg();
    // SAFETY: a non-null getg() is the goroutine running on this thread; only its own M
    // changes its status between RUNNING and SYSCALL, and that M is us.
    !gp.is_null() && unsafe { (*gp).status.load(Ordering::Relaxed) } == G_RUNNING
}

/// Loom model of a P's ownership passing through `P_SYSCALL`, where the status word is
/// the only edge between owners. A **model** of the real accesses (`entersyscall`,
/// `exitsyscall`'s fast path, sysmon's `retake`, `idle::acquirep`), which loom cannot run:
/// the P's owner-only state (its run queue's tail, `gfree`, its timers) is a cell that
/// each owner reads and writes, so loom reports any two owners not ordered one after the
/// other.
///
/// M1 owns the P and enters a syscall (release store of `P_SYSCALL`, the asymmetric
/// pair's form). sysmon may retake it (CAS `P_SYSCALL` → `P_IDLE`) and hand it to M2 (the
/// `nextp` note: a release/acquire flag here). M2 takes it (`acquirep`: the relaxed check,
/// the release store of `P_RUNNING`, the acquire fence), uses it, and enters a syscall in
/// turn. M1's exit CASes `P_SYSCALL` → `P_RUNNING`: it wins on its own syscall or on M2's
/// (the P went round), and then uses the P. The claims: never two owners at once, and
/// each owner sees its predecessor's writes. `broken_entersyscall_relaxed` publishes M2's
/// syscall with a relaxed store, and M1's fast-path exit then reads the cell with no edge
/// from M2's write: loom must report it.
#[cfg(all(test, loom))]
mod loom_tests {
    use crate::loom::cell::UnsafeCell;
    use crate::loom::sync::Arc;
    use crate::loom::sync::atomic::{AtomicBool, AtomicU32, Ordering, fence};
    use crate::loom::thread;

    const P_IDLE: u32 = 0;
    const P_RUNNING: u32 = 1;
    const P_SYSCALL: u32 = 2;

    struct World {
        status: AtomicU32,
        /// The P's owner-only state: the id of the last owner that wrote it.
        state: UnsafeCell<u32>,
        /// Owners at this moment (a claim as well as loom's own check).
        owners: AtomicU32,
        /// sysmon handed the P over (the `nextp` note).
        handed: AtomicBool,
    }

    impl World {
        /// The owner `me` uses the P: reads its predecessor's write, writes its own.
        fn own(&self, me: u32) -> u32 {
            assert_eq!(
                self.owners.fetch_add(1, Ordering::Relaxed),
                0,
                "two owners of a P"
            );
            // SAFETY: the model's subject: owners are ordered by the protocol.
            let before = self.state.with(|v| unsafe { *v });
            // SAFETY: as above.
            self.state.with_mut(|v| unsafe { *v = me });
            self.owners.fetch_sub(1, Ordering::Relaxed);
            before
        }
    }

    fn check(publish: Ordering) {
        crate::loom::model_bounded(None, move || {
            let w = Arc::new(World {
                status: AtomicU32::new(P_RUNNING),
                state: UnsafeCell::new(0),
                owners: AtomicU32::new(0),
                handed: AtomicBool::new(false),
            });
            // M1 owns the P, then enters its syscall.
            w.own(1);
            w.status.store(P_SYSCALL, Ordering::Release);

            let ws = w.clone();
            let sysmon = thread::spawn(move || {
                if ws.status.load(Ordering::Acquire) == P_SYSCALL
                    && ws
                        .status
                        .compare_exchange(P_SYSCALL, P_IDLE, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    ws.handed.store(true, Ordering::Release);
                }
            });
            let w2 = w.clone();
            let m2 = thread::spawn(move || {
                if !w2.handed.load(Ordering::Acquire) {
                    return;
                }
                // acquirep.
                assert_eq!(
                    w2.status.load(Ordering::Relaxed),
                    P_IDLE,
                    "acquirep: not idle"
                );
                w2.status.store(P_RUNNING, Ordering::Release);
                fence(Ordering::Acquire);
                assert_eq!(w2.own(2), 1, "M2 missed M1's write");
                // entersyscall.
                w2.status.store(P_SYSCALL, publish);
            });
            // M1's exitsyscall fast path.
            if w.status.load(Ordering::Relaxed) == P_SYSCALL
                && w.status
                    .compare_exchange(P_SYSCALL, P_RUNNING, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                w.own(1);
            }
            sysmon.join().unwrap();
            m2.join().unwrap();
        });
    }

    /// Every interleaving: one owner at a time, each after its predecessor.
    #[test]
    fn p_passes_through_syscall_to_one_owner() {
        check(Ordering::Release);
    }

    /// M2's syscall published with a relaxed store: M1's exit may take the P without
    /// seeing M2's writes.
    #[test]
    #[should_panic(expected = "Causality violation")]
    fn broken_entersyscall_relaxed() {
        check(Ordering::Relaxed);
    }
}
