//! The idle lists (Go's `pidleput`/`pidleget`, `mput`/`mget`): idle Ps, idle Ms, the Ms
//! waiting for a P for work only they can run (`affwait`), and the free Ms of dead
//! threads. All under `SCHED.lock`.

use core::ptr::null_mut;
use core::sync::atomic::{Ordering, fence};

use super::*;

/// Puts an unowned P on the idle list — or retires it if it is beyond GOMAXPROCS.
pub(super) fn pidleput(g: &mut SchedGuard, pp: *mut P) {
    // SAFETY: Ps are never freed; the caller released pp, so only the lock holder touches
    // its link.
    let p = unsafe { &*pp };
    if !p.runq.is_empty() {
        throw("pidleput: P has non-empty run queue");
    }
    if p.id >= SCHED.gomaxprocs.load(Ordering::Relaxed) {
        p.status.store(P_DEAD, Ordering::Release);
        return;
    }
    // An M waiting for a P for work that only it can run comes before idleness.
    if let Some(am) = affwait_get(g) {
        give_p(am, pp);
        return;
    }
    let s = g.synced();
    // SAFETY: we hold SCHED.lock, the owner of `link`.
    unsafe { p.link.set(s.pidle) };
    s.pidle = pp;
    SCHED.npidle.fetch_add(1, Ordering::SeqCst);
}

/// Takes a P off the idle list.
pub(super) fn pidleget(g: &mut SchedGuard) -> Option<*mut P> {
    let s = g.synced();
    let pp = s.pidle;
    if pp.is_null() {
        return None;
    }
    // SAFETY: pp is on the idle list, whose links the lock holder owns.
    s.pidle = unsafe { (*pp).link.get() };
    SCHED.npidle.fetch_sub(1, Ordering::SeqCst);
    SCHED.pidlegets.store(
        SCHED.pidlegets.load(Ordering::Relaxed) + 1,
        Ordering::SeqCst,
    );
    // A P goes to work: sysmon must watch it (it may be in its deep sleep).
    sysmonwake::wake_if_deep();
    Some(pp)
}

/// `pidleget` for an M about to spin: when there is no idle P, record that a spinning M
/// is needed, so the next M about to drop its P spins instead (Go's pidlegetSpinning).
pub(super) fn pidleget_spinning(g: &mut SchedGuard) -> Option<*mut P> {
    let pp = pidleget(g);
    if pp.is_none() {
        SCHED.needspinning.store(1, Ordering::SeqCst);
    }
    pp
}

/// Puts `m` on the idle list.
pub(super) fn mput(g: &mut SchedGuard, m: *mut M) {
    let s = g.synced();
    // SAFETY: m is the caller's own M about to sleep; its links and `mlist`, and those of
    // the list's head, are owned by the lock holder.
    unsafe {
        if (*m).mlist.get() != MLIST_NONE {
            throw("mput: m already on a list");
        }
        (*m).schedlink.set(s.midle);
        (*m).schedprev.set(null_mut());
        if !s.midle.is_null() {
            (*s.midle).schedprev.set(m);
        }
        (*m).mlist.set(MLIST_IDLE);
    }
    s.midle = m;
    SCHED.nmidle.fetch_add(1, Ordering::Relaxed);
}

/// Takes an M off the idle list.
pub(super) fn mget(g: &mut SchedGuard) -> Option<*mut M> {
    let m = g.synced().midle;
    if m.is_null() {
        return None;
    }
    munlink(g, m);
    // SAFETY: Ms are never freed.
    #[cfg(debug_assertions)]
    if unsafe {
        !(*m).p.load(Ordering::Relaxed).is_null() || !(*m).curg.load(Ordering::Relaxed).is_null()
    } {
        throw("mget: idle m has a p or a g"); // an idle M holds neither
    }
    Some(m)
}

/// Takes M `m`, which is on the idle list, off it.
pub(super) fn munlink(g: &mut SchedGuard, m: *mut M) {
    let s = g.synced();
    // SAFETY: m and its neighbours are on the idle list, whose links the lock holder owns.
    unsafe {
        if (*m).mlist.get() != MLIST_IDLE {
            throw("munlink: m not idle");
        }
        let (next, prev) = ((*m).schedlink.get(), (*m).schedprev.get());
        if prev.is_null() {
            s.midle = next;
        } else {
            (*prev).schedlink.set(next);
        }
        if !next.is_null() {
            (*next).schedprev.set(prev);
        }
        (*m).schedlink.set(null_mut());
        (*m).schedprev.set(null_mut());
        (*m).mlist.set(MLIST_NONE);
    }
    SCHED.nmidle.fetch_sub(1, Ordering::Relaxed);
}

/// Puts `m`, which has work only it can run and no P, on the list of Ms waiting for one.
pub(super) fn affwait_put(g: &mut SchedGuard, m: *mut M) {
    // No idle P while work waits, for this list: a P goes idle only after
    // serving it, and an M joins it only after finding no idle P under the same lock.
    if SCHED.npidle.load(Ordering::Relaxed) != 0 {
        throw("affwait_put: idle P available");
    }
    let s = g.synced();
    // SAFETY: m is the caller's own M, or an idle M the caller just took off the idle
    // list; the links are owned by the lock holder.
    unsafe {
        if (*m).mlist.get() != MLIST_NONE {
            throw("affwait_put: m already on a list");
        }
        (*m).schedlink.set(null_mut());
        (*m).mlist.set(MLIST_AFFWAIT);
        if s.affwait_tail.is_null() {
            s.affwait = m;
        } else {
            (*s.affwait_tail).schedlink.set(m);
        }
    }
    s.affwait_tail = m;
    SCHED.naffwait.fetch_add(1, Ordering::SeqCst);
}

/// Takes the longest-waiting M off the affinity wait list.
pub(super) fn affwait_get(g: &mut SchedGuard) -> Option<*mut M> {
    let s = g.synced();
    let m = s.affwait;
    if m.is_null() {
        return None;
    }
    // SAFETY: m is on the list, whose links the lock holder owns.
    unsafe {
        s.affwait = (*m).schedlink.get();
        if s.affwait.is_null() {
            s.affwait_tail = null_mut();
        }
        (*m).schedlink.set(null_mut());
        (*m).mlist.set(MLIST_NONE);
    }
    SCHED.naffwait.fetch_sub(1, Ordering::SeqCst);
    Some(m)
}

/// Puts dead M `m` on `SCHED.mfree`, where `allocm` revives it. Called by the thread-exit
/// destructor of `m`'s thread (os_linux.rs), its last use of `m`: no code of the thread
/// that was `m` may touch it afterwards.
pub(super) fn mfree_put(m: &M) {
    // SAFETY: on m's own (exiting) thread, which owns naffine.
    if unsafe { m.naffine.get() } != 0 || !m.aff.is_empty() {
        // Goroutines are bound to it: a thread ended under them by pthread_exit (mexit
        // refuses to end one). They are stranded, and the M must not serve anyone else.
        return;
    }
    let mut g = lock_sched();
    let s = g.synced();
    // SAFETY: schedlink is owned by the holder of SCHED.lock.
    unsafe { m.schedlink.set(s.mfree) };
    s.mfree = m as *const M as *mut M;
}

/// Takes an idle M that no goroutine is bound to off the idle list (for `lock_move`).
pub(super) fn mget_clean(g: &mut SchedGuard) -> Option<*mut M> {
    let mut m = g.synced().midle;
    while !m.is_null() {
        // SAFETY: Ms are never freed. An M on `midle` sleeps in `stopm` and changed its
        // owner-only `naffine` before it put itself there under the lock we hold; nothing
        // becomes bound to it while it sleeps (binding happens on the M's own thread).
        let clean = unsafe { (*m).naffine.get() == 0 } && unsafe { (*m).aff.len() } == 0;
        if clean {
            munlink(g, m);
            return Some(m);
        }
        // SAFETY: the idle list's links are owned by the lock holder.
        m = unsafe { (*m).schedlink.get() };
    }
    None
}

/// Hands unowned P `pp` to M `am`, which sleeps on its note waiting for one, and wakes it.
pub(super) fn give_p(am: *mut M, pp: *mut P) {
    // SAFETY: Ms are never freed; am sleeps (or is about to) and reads nextp only after the
    // wakeup, which publishes it.
    unsafe {
        if !(*am).nextp.load(Ordering::Relaxed).is_null() {
            throw("give_p: m has p");
        }
        (*am).nextp.store(pp, Ordering::Relaxed);
        (*am).park.wakeup();
    }
}

/// Called by an M that holds no P and whose goroutine can run only on it (the
/// `exitsyscall` slow path): takes an idle P, or waits on the affinity list until one is
/// handed over. Returns holding a P.
///
/// # Safety
/// `m` holds no P and is not spinning.
pub(super) unsafe fn wait_for_p(m: ThisM<'_>) {
    {
        let mut g = lock_sched();
        if let Some(pp) = pidleget(&mut g) {
            drop(g);
            // SAFETY: pp came off the idle list.
            unsafe { acquirep(m, pp) };
            return;
        }
        affwait_put(&mut g, m.m() as *const M as *mut M);
    }
    // SAFETY: no P; whoever takes us off the list hands us one.
    unsafe { sleep_for_p(m) };
}

/// Sleeps on `m.park` until a P is handed over through `m.nextp`, then acquires it.
///
/// # Safety
/// `m` holds no P, somewhere a P hand-over will find it (an idle list,
/// `affwait`, or locked to a goroutine).
pub(super) unsafe fn sleep_for_p(m: ThisM<'_>) {
    m.blocked.store(true, Ordering::Relaxed);
    m.park.sleep();
    m.park.clear();
    m.blocked.store(false, Ordering::Relaxed);
    let pp = m.nextp.swap(null_mut(), Ordering::Acquire);
    // SAFETY: whoever woke us released pp for us and published it with the
    // wakeup.
    unsafe { acquirep(m, pp) };
}

/// Associates P `pp` with M `m`. The P must be idle and unowned.
///
/// # Safety
/// `pp` came off the idle list or was handed over via `nextp`.
pub(super) unsafe fn acquirep(m: ThisM<'_>, pp: *mut P) {
    // SAFETY: Ps are never freed.
    let p = unsafe { &*pp };
    if !p.m.load(Ordering::Relaxed).is_null() || p.status.load(Ordering::Relaxed) != P_IDLE {
        throw("acquirep: invalid p state");
    }
    // release: preemption reads the owner with Acquire and then the M's fields (tid).
    p.m.store(m.m() as *const M as *mut M, Ordering::Release);
    // acquire: pairs with the release in releasep, so we see the previous owner's writes
    // to the P's owner-only fields (gfree, the runq tail).
    p.status.store(P_RUNNING, Ordering::Release);
    fence(Ordering::Acquire);
    m.p.store(pp, Ordering::Relaxed);
}

/// Disassociates `m` from its P and returns the P (now P_IDLE, unowned).
///
/// # Safety
/// `m` holds a P.
pub(super) unsafe fn releasep(m: ThisM<'_>) -> *mut P {
    let pp = m.p.load(Ordering::Relaxed);
    if pp.is_null() {
        throw("releasep: invalid arg");
    }
    // SAFETY: Ps are never freed.
    let p = unsafe { &*pp };
    if !std::ptr::eq(p.m.load(Ordering::Relaxed), m.m())
        || p.status.load(Ordering::Relaxed) != P_RUNNING
    {
        throw("releasep: invalid p state");
    }
    m.p.store(null_mut(), Ordering::Relaxed);
    p.m.store(null_mut(), Ordering::Relaxed);
    // release: publishes our writes to the P's owner-only state to its next owner.
    p.status.store(P_IDLE, Ordering::Release);
    pp
}
