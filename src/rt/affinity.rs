//! M-affinity (HACKING.md, decision 8): goroutines that must resume on one particular thread
//! without taking the whole thread for themselves.
//!
//! LockOSThread is the strict form (the M runs only its goroutine; lockosthread.rs). The
//! loose form is for goroutines whose C code may keep `&errno` or `__thread` addresses in
//! registers across a switch: they must come back on the thread they left, but that
//! thread may run anything else meanwhile. A goroutine started with `GMP_GO_PINNED` is
//! bound (`g.affm`) to the first M that runs it, for its whole life.
//!
//! - Readying an affine goroutine (`ready`) puts it on its M's affinity queue (`m.aff`),
//!   never on a P's run queue: thieves never see it, and no other M can run it.
//! - The M looks at its affinity queue first each time it schedules (`schedule`), and
//!   again before it steals or sleeps (`find_runnable`). An affine goroutine that yields
//!   goes back to the same queue, and the M's next pass looks everywhere else first
//!   (`m.affskip`), so a yield loop does not starve the other goroutines: a pinned
//!   goroutine that yields gets every other turn on its thread.
//! - An affine goroutine that is preempted at the end of its time slice, in a `gmp_*` call,
//!   waits apart, on the queue's preempted list (`put_preempted`). (An asynchronous stop
//!   locks the goroutine to its M for that stop instead: `park::gopreempt_bound`.) Go puts a preempted goroutine on the global run
//!   queue, which a P serves only when its local queue is empty or on its 61st tick; the
//!   preempted list is this M's share of that queue and is served there, in turn with it
//!   (`ready::globrunqget_or_preempted`). Served first, as the rest of the queue is, the
//!   preempted goroutine would get its P back after a single other goroutine has run, and
//!   a goroutine pair handing its slice on through `runnext` would keep the P for good.
//! - An M that has nothing to run and must sleep without a P marks its queue idle
//!   (`go_idle`, under the queue's lock, after seeing it empty). Whoever then readies a
//!   goroutine affine to it finds the mark, clears it (so exactly one readier claims the
//!   M) and wakes it with a P (`newm::wake_affine_m`): an idle P if there is one, else
//!   the M joins `SCHED.affwait`, the Ms waiting for a P for work only they can run, which
//!   are served before the idle list by every P that goes idle (`pidleput`), by
//!   `handoffp`, and by the busy Ps' 61-tick fairness check (so a program whose Ps never
//!   go idle still serves them).
//! - The `exitsyscall` slow path is the same mechanism in its simplest case: the M holds
//!   no P and its goroutine is on its own stack, so it waits on `SCHED.affwait` directly
//!   (syscall.rs).
//!
//! Who may do what with `m.aff`: any thread pushes (under its lock); only the M's own
//! thread pops, marks it idle or active. The idle mark goes from true to false exactly
//! once per idle period: by the claiming readier, or by the M when it holds a P again.

use core::sync::atomic::{AtomicU32, Ordering};

use super::*;
use crate::sys::Lock;

impl AffQueue {
    pub const fn new() -> AffQueue {
        AffQueue {
            lock: Lock::new(crate::sys::Rank::AffQueue),
            inner: Owned::new(AffInner {
                q: GQueue::new(),
                preempted: GQueue::new(),
                idle: false,
            }),
            nready: AtomicU32::new(0),
            npreempted: AtomicU32::new(0),
        }
    }

    /// Goroutines queued, on both lists (a hint, as the counts are).
    #[inline]
    pub fn len(&self) -> u32 {
        self.nready.load(Ordering::Relaxed) + self.npreempted.load(Ordering::Relaxed)
    }

    /// Whether nothing is queued (a hint, as `len`).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Preempted goroutines queued (a hint).
    #[inline]
    pub fn npreempted(&self) -> u32 {
        self.npreempted.load(Ordering::Relaxed)
    }

    fn with<R>(&self, f: impl FnOnce(&mut AffInner) -> R) -> R {
        self.lock.lock();
        // SAFETY: we hold `lock`, which guards `inner`; the reference does not escape f.
        let r = f(unsafe { &mut *self.inner.ptr() });
        self.lock.unlock();
        r
    }
}

impl AffQueue {
    /// Back to the state of `new` (a dead M revived by `allocm`; the queue is empty).
    pub fn reset(&self) {
        self.with(|a| {
            if !a.q.is_empty() || !a.preempted.is_empty() {
                throw("AffQueue::reset: goroutines queued");
            }
            a.idle = false;
        });
    }
}

impl Default for AffQueue {
    fn default() -> Self {
        AffQueue::new()
    }
}

/// The M that goroutine `g` must be queued on by affinity, or null: its `affm`, unless it
/// is locked to it (then `lockedm`, the strict form, decides: the M waits for that one
/// goroutine in `stoplockedm`, not at its affinity queue).
#[inline]
pub(super) fn affine_m(g: &G) -> *mut M {
    let am = g.affm.load(Ordering::Relaxed);
    if am.is_null() || !g.lockedm.load(Ordering::Relaxed).is_null() {
        return core::ptr::null_mut();
    }
    am
}

/// Makes RUNNABLE goroutine `gp`, affine to `am`, runnable on `am` only. Any thread.
///
/// # Safety
/// `gp` is RUNNABLE, on no queue, and owned by the caller; `am` is a live M.
pub(super) unsafe fn ready(gp: *mut G, am: *mut M) {
    enqueued(gp);
    // SAFETY: Ms are never freed.
    let m = unsafe { &*am };
    let claimed = m.aff.with(|a| {
        // SAFETY: we own gp (caller contract) and hold the queue's lock.
        unsafe { a.q.push_back(gp) };
        m.aff.nready.fetch_add(1, Ordering::Relaxed);
        core::mem::replace(&mut a.idle, false)
    });
    if claimed {
        newm::wake_affine_m(am);
    }
}

/// Binds the running goroutine to its M until dropped: the same-thread resume of a call
/// that parks where its C code did not expect a switch (an interposed call, a blocking
/// call made on a helper thread: offload.rs). A goroutine already bound (pinned) or locked
/// is left as it is. Dropped on the M it was made on (a resume elsewhere throws).
pub struct Bound(*mut M);

/// `Bound` for the goroutine running on this thread. Call it on a goroutine only.
pub fn bind_current() -> Bound {
    let m = getm();
    // SAFETY: called on a goroutine: m is this thread's M and curg is us; affm and naffine
    // are ours to change while we run on it (as preempt.rs does).
    unsafe {
        let g = &*(*m).curg.load(Ordering::Relaxed);
        if g.affm.load(Ordering::Relaxed).is_null() && g.lockedm.load(Ordering::Relaxed).is_null() {
            g.affm.store(m, Ordering::Relaxed);
            (*m).naffine.set((*m).naffine.get() + 1);
            return Bound(m);
        }
    }
    Bound(core::ptr::null_mut())
}

impl Drop for Bound {
    fn drop(&mut self) {
        if self.0.is_null() {
            return;
        }
        let m = getm();
        if m != self.0 {
            throw("a goroutine bound to its thread resumed on another");
        }
        // SAFETY: we are the goroutine bound to m, running on it.
        unsafe {
            let g = &*(*m).curg.load(Ordering::Relaxed);
            g.affm.store(core::ptr::null_mut(), Ordering::Relaxed);
            (*m).naffine.set((*m).naffine.get() - 1);
        }
    }
}

/// The M's own affine goroutine `gp` yielded: queue it behind the local run queue's next
/// goroutine.
///
/// # Safety
/// `m` holds a P; `gp` is RUNNABLE, affine to `m`, on no queue.
pub(super) unsafe fn put_own(m: ThisM<'_>, gp: *mut G) {
    enqueued(gp);
    m.aff.with(|a| {
        // SAFETY: we own gp and hold the queue's lock.
        unsafe { a.q.push_back(gp) };
        m.aff.nready.fetch_add(1, Ordering::Relaxed);
    });
    // SAFETY: m's own thread owns affskip.
    unsafe { m.affskip.set(true) };
}

/// The M's own affine goroutine `gp` was preempted: queue it on the preempted list, which
/// waits as Go's global run queue does (module doc).
///
/// # Safety
/// `m` holds a P; `gp` is RUNNABLE, affine to `m`, on no queue.
pub(super) unsafe fn put_preempted(m: ThisM<'_>, gp: *mut G) {
    #[cfg(debug_assertions)]
    // SAFETY: Gs are never freed.
    if !core::ptr::eq(affine_m(unsafe { &*gp }), m.m()) {
        throw("affinity::put_preempted: goroutine not affine to this M");
    }
    enqueued(gp);
    m.aff.with(|a| {
        // SAFETY: we own gp and hold the queue's lock.
        unsafe { a.preempted.push_back(gp) };
        m.aff.npreempted.fetch_add(1, Ordering::Relaxed);
    });
}

/// Takes the next readied or yielded affine goroutine queued for `m` (the caller marks it
/// dequeued). Never a preempted one (`get_preempted`).
///
/// # Safety
/// `m` holds a P.
#[inline]
pub(super) unsafe fn get(m: ThisM<'_>) -> Option<*mut G> {
    if m.aff.nready.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let gp = m.aff.with(|a| {
        // SAFETY: we hold the queue's lock; its Gs are ours to dequeue.
        let gp = unsafe { a.q.pop_front() };
        if gp.is_some() {
            m.aff.nready.fetch_sub(1, Ordering::Relaxed);
        }
        gp
    });
    // A goroutine stopped by an asynchronous preemption is locked to its M for that stop:
    // it never comes back through an affinity queue.
    #[cfg(debug_assertions)]
    if let Some(gp) = gp {
        // SAFETY: we dequeued gp on its M's thread, which owns `asyncbound`.
        if unsafe { (*gp).asyncbound.get() } {
            throw("affinity::get: a preempted goroutine on the ready list");
        }
    }
    gp
}

/// Takes the next preempted goroutine queued for `m` (the caller marks it dequeued).
///
/// # Safety
/// `m` holds a P.
#[inline]
pub(super) unsafe fn get_preempted(m: ThisM<'_>) -> Option<*mut G> {
    if m.aff.npreempted() == 0 {
        return None;
    }
    m.aff.with(|a| {
        // SAFETY: we hold the queue's lock; its Gs are ours to dequeue.
        let gp = unsafe { a.preempted.pop_front() };
        if gp.is_some() {
            m.aff.npreempted.fetch_sub(1, Ordering::Relaxed);
        }
        gp
    })
}

/// `schedule`'s look at the affinity queue: first, unless an affine goroutine just
/// yielded (then this one pass takes from the local queue, or from the global queue and
/// the other Ps in `find_runnable`, before the affinity queue).
///
/// # Safety
/// `m` holds a P.
#[inline]
pub(super) unsafe fn get_first(m: ThisM<'_>) -> Option<*mut G> {
    if m.aff.nready.load(Ordering::Relaxed) == 0 {
        return None;
    }
    // SAFETY: m's own thread owns affskip.
    if unsafe { m.affskip.get() } {
        // SAFETY: as above.
        unsafe { m.affskip.set(false) };
        return None;
    }
    // SAFETY: caller contract.
    unsafe { get(m) }
}

/// The M is about to sleep without a P. Returns true if affine work is queued (then it
/// must get a P rather than sleep idle); otherwise marks the queue idle, so that the next
/// readier gets the M a P.
///
/// # Safety
/// `m` holds no P.
pub(super) unsafe fn go_idle(m: ThisM<'_>) -> bool {
    m.aff.with(|a| {
        if a.q.is_empty() && a.preempted.is_empty() {
            a.idle = true;
            false
        } else {
            true
        }
    })
}

/// The M holds a P again: readiers just queue.
///
/// # Safety
/// `m` holds a P.
pub(super) unsafe fn set_active(m: ThisM<'_>) {
    m.aff.with(|a| a.idle = false);
}
