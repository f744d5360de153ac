//! GOMAXPROCS (Go's `procresize`) and a P's association with an M (`acquirep`,
//! `releasep`): growing the Ps, retiring the ones past the new count with their caches.

use core::ptr::null_mut;
use core::sync::atomic::Ordering;

use super::*;
use super::{idle::*, ready::*, stopm::*};

/// Creates or revives Ps `from..to` and puts them on the idle list.
pub(super) fn grow_procs(g: &mut SchedGuard, from: i32, to: i32) {
    for i in from..to {
        let mut pp = SCHED.allp[i as usize].load(Ordering::Acquire);
        if pp.is_null() {
            pp = Box::into_raw(Box::new(P {
                id: i,
                status: AtomicU32::new(P_DEAD),
                m: AtomicPtr::new(null_mut()),
                runq: RunQueue::new(),
                schedtick: AtomicU32::new(0),
                link: Owned::new(null_mut()),
                gfree: Owned::new(GList::new()),
                gfree_cold: Owned::new(GList::new()),
                gfreecnt: AtomicI32::new(0),
                preempt: AtomicBool::new(false),
                goidcache: Owned::new((0, 0)),
                stack_tickets: Owned::new(Tickets::default()),
                nexited: AtomicU64::new(0),
                nspawned: AtomicU64::new(0),
                timers: timerheap::Timers::new(),
                syscalltick: AtomicU32::new(0),
                sysmontick: Owned::new(SysmonTick::new()),
                sudogcache: Owned::new(sudog::SudogCache::new()),
                schedlat: schedlat::Histogram::new(),
            }));
            SCHED.allp[i as usize].store(pp, Ordering::Release);
        }
        // SAFETY: Ps are never freed.
        let p = unsafe { &*pp };
        // A P still P_RUNNING was being retired and its M has not noticed yet: it simply
        // stays in service.
        if p.status.load(Ordering::Acquire) == P_DEAD {
            p.status.store(P_IDLE, Ordering::Release);
            // pidleput retires Ps beyond gomaxprocs; the new value is stored after this
            // loop, so link directly.
            let s = g.synced();
            // SAFETY: we hold SCHED.lock, the owner of `link`.
            unsafe { p.link.set(s.pidle) };
            s.pidle = pp;
            SCHED.npidle.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Changes GOMAXPROCS to `n` (1..=MAX_PROCS) while goroutines run; returns the old value.
///
/// Growing creates idle Ps and wakes an M to use them. Shrinking retires idle Ps at once
/// and running ones at their M's next pass through the scheduler: that M moves the P's
/// runnable Gs to the global queue and goes idle. Without preemption, a P whose goroutine
/// never yields keeps running until it does (Go stops the world, which needs preemption).
pub(super) fn procresize(n: i32) -> i32 {
    if n < 1 || n as usize > MAX_PROCS {
        throw("procresize: invalid arg");
    }
    // One resize at a time: a P this call retires stays DEAD (nobody else revives it)
    // while we empty its caches below, after SCHED.lock is released.
    RESIZE_LOCK.lock();
    let old;
    let mut retired: Vec<*mut P> = Vec::new();
    {
        let mut g = lock_sched();
        old = SCHED.gomaxprocs.load(Ordering::Relaxed);
        if n > old {
            grow_procs(&mut g, old, n);
            SCHED.gomaxprocs.store(n, Ordering::SeqCst);
            // The new Ps serve the Ms waiting for one before they count as idle.
            while SCHED.naffwait.load(Ordering::Relaxed) != 0 {
                let Some(pp) = pidleget(&mut g) else { break };
                let am = affwait_get(&mut g).unwrap_or_else(|| throw("procresize: affwait"));
                give_p(am, pp);
            }
        } else if n < old {
            // Retire idle Ps beyond n now, before the new count is published: `npidle`
            // still counts them, and for a moment `npidle >= gomaxprocs` would say every P
            // is idle while one runs, which sends sysmon into its deep sleep, from which
            // only a P leaving the idle list wakes it (no preemption, no retake, no look
            // at unseen calls meanwhile).
            let s = g.synced();
            let mut keep: *mut P = null_mut();
            let mut cur = s.pidle;
            s.pidle = null_mut();
            while !cur.is_null() {
                // SAFETY: idle-list Ps; their links are ours under the lock.
                let next = unsafe { (*cur).link.get() };
                // SAFETY: as above.
                let p = unsafe { &*cur };
                if p.id >= n {
                    SCHED.npidle.fetch_sub(1, Ordering::SeqCst);
                    p.status.store(P_DEAD, Ordering::Release);
                    retired.push(cur);
                } else {
                    // SAFETY: as above.
                    unsafe { p.link.set(keep) };
                    keep = cur;
                }
                cur = next;
            }
            s.pidle = keep;
            SCHED.gomaxprocs.store(n, Ordering::SeqCst);
        }
    }
    // Go's procresize destroys a removed P: its timers go to a P in service (P0; they
    // would otherwise wait for the timer M alone), its dead Gs and free sudogs to the
    // central lists.
    for &pp in &retired {
        // SAFETY: Ps are never freed; pp is DEAD, and only procresize (serialised by
        // RESIZE_LOCK, which we hold) revives a DEAD P, so its owner-only caches are ours.
        unsafe {
            drain_p_caches(&*pp);
            timer::move_all(&*pp, SCHED.allp[0].load(Ordering::Acquire));
        }
    }
    RESIZE_LOCK.unlock();
    if n > old {
        wakep();
    }
    // The Ps in service may all run now where sysmon last saw them all idle.
    sysmonwake::wake_if_deep();
    old
}

/// Serialises `procresize`.
pub(super) static RESIZE_LOCK: Lock = Lock::new(crate::sys::Rank::Resize);

/// Gives a P's free sudogs and dead Gs to the central lists (a P leaving service).
///
/// # Safety
/// The caller owns `p`'s owner-only fields: it holds `p`, or `p` is DEAD and cannot be
/// revived meanwhile.
pub(super) unsafe fn drain_p_caches(p: &P) {
    // SAFETY: caller contract: the sudog cache and gfree list are ours.
    unsafe {
        sudog::flush_p_cache(&mut *p.sudogcache.ptr());
        let (hot, cold) = super::proc::gfree_lists(p);
        let (mut hot, mut cold) = (core::mem::take(hot), core::mem::take(cold));
        p.gfreecnt.store(0, Ordering::Relaxed);
        let t = core::mem::take(&mut *p.stack_tickets.ptr());
        if t.count > 0 {
            crate::stack::unreserve(t.size, t.count);
        }
        // Their lock ranks below SCHED.lock, so never while holding it.
        with_gfree(|gf| {
            // SAFETY: the lists were ours; the global list is locked. put_global files a
            // G whose stack gfput gave back under `nostack`.
            while let Some(gp) = cold.pop() {
                super::proc::put_global(gf, gp, false);
            }
            while let Some(gp) = hot.pop() {
                super::proc::put_global(gf, gp, true);
            }
        });
    }
}

/// Our P is beyond GOMAXPROCS: move its runnable and dead Gs to the global lists, retire
/// it, and stop. Returns false if GOMAXPROCS grew back in the meantime (the P stays).
///
/// # Safety
/// `m` holds the P.
pub(super) unsafe fn retire_p(m: ThisM<'_>) -> bool {
    let pp = m.p.load(Ordering::Relaxed);
    // SAFETY: we hold pp.
    let p = unsafe { &*pp };
    // Free sudogs and dead Gs first (their locks rank below SCHED.lock).
    // SAFETY: we hold pp.
    unsafe { drain_p_caches(p) };
    {
        let mut g = lock_sched();
        if p.id < SCHED.gomaxprocs.load(Ordering::Relaxed) {
            return false;
        }
        // SAFETY: we own pp's queue; the Gs move to the global queue keeping their
        // "queued" mark.
        unsafe { p.runq.drain(|gp| globrunqput(&mut g, gp.as_ptr())) };
        // SAFETY: holding pp.
        unsafe { releasep(m) };
        p.status.store(P_DEAD, Ordering::Release);
    }
    // Its timers go to P0, which is always in service (GOMAXPROCS >= 1).
    timer::move_all(p, SCHED.allp[0].load(Ordering::Acquire));
    if m.spinning.load(Ordering::Relaxed) {
        m.spinning.store(false, Ordering::Relaxed);
        SCHED.nmspinning.fetch_sub(1, Ordering::SeqCst);
    }
    wakep();
    // SAFETY: no P, not spinning.
    unsafe { stopm(m) };
    true
}
