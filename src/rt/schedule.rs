//! The scheduler loop (Go's `schedule`, `execute`, `findRunnable`): what an M does between
//! goroutines — what g0 does with the goroutine that just switched to it (`after_switch`:
//! Go's park_m, gosched_m, goexit0), and where it looks for the next one (steal.rs has the
//! places it looks).

use core::ptr::null_mut;
use core::sync::atomic::Ordering;

use super::*;
use super::{
    foreign::*, idle::*, lockedm::*, procresize::*, ready::*, spinning::*, steal::*, stopm::*,
};
use crate::arch;

/// Runs goroutines until the M must exit (`m.exiting`). Each iteration finds a G, switches to it, and handles what it
/// asked for when it switched back (park, gosched, exit).
///
/// # Safety
/// Called once per M, on its scheduler stack (g0), holding a P.
pub(super) unsafe fn schedule_loop(m: ThisM<'_>) {
    let mut next: Option<(*mut G, bool)> = None;
    loop {
        // SAFETY: on g0 (the caller's contract).
        let (gp, inherit) = match next.take() {
            Some(x) => x,
            None => unsafe { schedule(m) },
        };
        // SAFETY: gp is RUNNABLE and ours to run; we hold a P.
        let act = unsafe { execute(m, gp, inherit) };
        // SAFETY: gp switched back to us with `act`; we are m's thread.
        next = unsafe { after_switch(m, act) };
        // SAFETY: m's own thread owns `exiting`.
        if unsafe { m.exiting.get() } {
            return;
        }
    }
}

/// Finds a runnable G for this M (Go's schedule minus execute). Blocks until there is one.
///
/// # Safety
/// On `m`'s scheduler stack (g0).
pub(super) unsafe fn schedule(m: ThisM<'_>) -> (*mut G, bool) {
    // An M locked to a G runs nothing else: wait for it to become runnable.
    let lg = m.lockedg.load(Ordering::Relaxed);
    if !lg.is_null() {
        // Handed its goroutine with a P by `lock_move` (a new M), or its goroutine stopped
        // running and the M waits until someone finds it runnable again.
        if !take_lockstart(m) {
            // SAFETY: on g0.
            unsafe { stoplockedm(m) };
        }
        return (lg, false);
    }
    // Every `continue` below follows a path that may have stopped this M (`stopm`): if it
    // was idle there and `lock_move` took it and handed it a goroutine to lock to, with a
    // P, that goroutine runs now. Checked only on those rounds (a register test, not a
    // load of `lockstart` every round, which the yield workload would pay per switch).
    let mut again = false;
    loop {
        if again && take_lockstart(m) {
            return (m.lockedg.load(Ordering::Relaxed), false);
        }
        again = true;
        let pp = m.p.load(Ordering::Relaxed);
        // SAFETY: this M holds pp (P–M reciprocity is checked in debug builds).
        let p = unsafe { &*pp };
        debug_assert!(
            std::ptr::eq(p.m.load(Ordering::Relaxed), m.m()),
            "gmp: P-M reciprocity"
        );
        // SAFETY: holding pp.
        if p.id >= SCHED.gomaxprocs.load(Ordering::Relaxed) && unsafe { retire_p(m) } {
            continue;
        }
        check_timers(p);
        // sysmon asked for preemption: the goroutines of this P have run a whole slice
        // (maybe handing it on through runnext, as a channel ping-pong does). Serve the
        // global queue first, where preempted goroutines and foreign threads' spawns wait
        // (or this M's own preempted goroutines, in turn with it), and start a new slice
        // whatever runs next.
        let preempted =
            p.preempt.load(Ordering::Relaxed) && p.preempt.swap(false, Ordering::Relaxed);
        // Goroutines that can run only on this M come first (affinity.rs), the preempted
        // ones excepted: they wait as the global queue does.
        // SAFETY: holding pp.
        let mut found = unsafe { affinity::get_first(m) }.map(|gp| (gp, false));
        // Fairness: check the global queue (and this M's preempted goroutines) once in a
        // while, so that two goroutines re-spawning each other on the local queue cannot
        // starve it; and serve an M that waits for a P to run what only it can run, so
        // that it does not wait for a P to go idle.
        if found.is_none() && (preempted || p.schedtick.load(Ordering::Relaxed) % 61 == 0) {
            // Also when goroutines affine to this M are queued (a pinned goroutine in a
            // yield loop, waiting for one pinned elsewhere): `stopm` then puts this M on
            // affwait in turn, and the Ms take turns with the P.
            if SCHED.naffwait.load(Ordering::Relaxed) > 0
                && !m.spinning.load(Ordering::Relaxed)
                // SAFETY: holding a P, not spinning.
                && unsafe { handoff_to_affwait(m) }
            {
                continue;
            }
            // SAFETY: owning pp; max = 1 puts nothing on the local queue.
            found = unsafe { globrunqget_or_preempted(m, p, 1) }.map(|gp| (gp, false));
        }
        if found.is_none() {
            // SAFETY: we own pp.
            found = unsafe { p.runq.get() }.map(|(gp, inherit)| (gp.as_ptr(), inherit));
            // With one P nobody steals: the G queued next is ours to run, and in a program
            // that spawns far ahead of running (skynet keeps tens of thousands queued) it
            // was written by its spawner long ago, so that our first look at it
            // (`lockedm`, below) would miss the cache every time. Start fetching it now,
            // while this one runs. With more Ps the prefetch does as much harm as good (the
            // G may be stolen: `scripts/ab.sh -p 2 spawn` shows it).
            if found.is_some() && SCHED.gomaxprocs.load(Ordering::Relaxed) == 1 {
                // SAFETY: we own pp.
                super::proc::prefetch_g(unsafe { p.runq.peek_ring() });
            }
        }
        let (gp, inherit) = match found {
            Some((gp, inherit)) => (gp, inherit && !preempted),
            // A request consumed above ends the slice whatever find_runnable found (its
            // local-queue pick may be runnext, which would inherit the old slice and leave
            // sysmon asking again every round).
            // SAFETY: holding a P.
            None => match unsafe { find_runnable(m) } {
                Some((gp, inherit)) => (gp, inherit && !preempted),
                // P retired (we got another one), or handed a locked G: start over.
                None => continue,
            },
        };
        dequeued(gp);
        // This thread is going to run a G now, so it is no longer spinning; if it was the
        // last spinning M, another one must start looking.
        if m.spinning.load(Ordering::Relaxed) {
            resetspinning(&m);
        }
        // A G locked to another M: hand that M our P and wait for new work ourselves. (Or
        // one started GMP_GO_LOCKED, not locked to an M yet: `LOCK_AT_START`.)
        // SAFETY: Gs are never freed.
        let lm = unsafe { (*gp).lockedm.load(Ordering::Relaxed) };
        if !lm.is_null() && !std::ptr::eq(lm, m.m()) {
            if lm == LOCK_AT_START {
                // SAFETY: holding a P, not spinning; we dequeued gp.
                if unsafe { start_locked(m, gp) } {
                    return (gp, inherit);
                }
            } else {
                // SAFETY: holding a P.
                unsafe { startlockedm(m, lm) };
            }
            continue;
        }
        return (gp, inherit);
    }
}

/// Switches to `gp` and runs it until it switches back; returns what it asked for.
///
/// # Safety
/// `m` holds a P; `gp` is RUNNABLE, taken off every run queue, and ours.
pub(super) unsafe fn execute(m: ThisM<'_>, gp: *mut G, inherit: bool) -> usize {
    // No runtime lock is held across a switch to a goroutine (gopark's
    // unlock function has released the parking goroutine's locks by now).
    #[cfg(debug_assertions)]
    if crate::sys::locks_held() != 0 {
        throw("execute: switching to a goroutine while holding a runtime lock");
    }
    let pp = m.p.load(Ordering::Relaxed);
    // SAFETY: gp is ours (caller contract); Ps and Gs are never freed.
    unsafe {
        let g = &*gp;
        m.curg.store(gp, Ordering::Relaxed);
        g.m.store(m.m() as *const M as *mut M, Ordering::Relaxed);
        casgstatus(g, G_RUNNABLE, G_RUNNING);
        // Its labels for profilers outside the process (customlabels.rs): one store.
        customlabels::set_current(labels::abi_of(g));
        if !inherit {
            let p = &*pp;
            p.schedtick.store(
                p.schedtick.load(Ordering::Relaxed).wrapping_add(1),
                Ordering::Relaxed,
            );
        }
        if g.pinned.get() && g.affm.load(Ordering::Relaxed).is_null() {
            // Started pinned: bound to this M from now on (affinity.rs).
            g.affm.store(m.m() as *const M as *mut M, Ordering::Relaxed);
            m.naffine.set(m.naffine.get() + 1);
        }
        #[cfg(debug_assertions)]
        {
            let am = g.affm.load(Ordering::Relaxed);
            if !am.is_null() && !std::ptr::eq(am, m.m()) {
                throw("execute: affine goroutine on another M");
            }
        }
        if g.asyncbound.get() {
            // Resumed after an asynchronous preemption, on the M it was stopped on: the
            // lock was for that one stop (`park::gopreempt_bound`).
            #[cfg(debug_assertions)]
            if !std::ptr::eq(g.lockedm.load(Ordering::Relaxed), m.m()) || m.lockedext.get() != 0 {
                throw("execute: a goroutine stopped by preemption resumes on another M");
            }
            g.asyncbound.set(false);
            g.lockedm.store(null_mut(), Ordering::Relaxed);
            m.lockedg.store(null_mut(), Ordering::Relaxed);
        }
        #[cfg(debug_assertions)]
        {
            // The triangle G ↔ M ↔ P and P–M reciprocity (HACKING.md, "Invariants checked
            // in debug builds").
            if !std::ptr::eq(g.m.load(Ordering::Relaxed), m.m())
                || m.curg.load(Ordering::Relaxed) != gp
                || pp.is_null()
                || !std::ptr::eq((*pp).m.load(Ordering::Relaxed), m.m())
            {
                throw("execute: triangle invariant broken");
            }
            if g.queued.load(Ordering::Relaxed) {
                throw("execute: running G is still on a run queue");
            }
        }
        // The scheduler's FP control state is constant, so the switch need not read it.
        let sp = g.sp.get();
        if unstarted(sp) {
            // Never ran: start it at the top of its stack (newproc prepared nothing).
            take_hot_stack(&*pp, g, sp & !SP_UNSTARTED);
            let st = (*g.stack.ptr())
                .as_ref()
                .unwrap_or_else(|| throw("execute: G without stack"));
            if stackhwm::sample(m.m()) {
                // SAFETY: the G has not started and is ours; we run on g0.
                stackhwm::release(st);
                g.hwm.set(true);
            }
            let top = st.top();
            if hookflags::any() {
                hooks::execute(&m, g);
            }
            return arch::start_from_g0_balanced(
                m.g0_sp.ptr(),
                top,
                super::proc::goentry,
                m.g0_fpenv.get(),
            );
        }
        if hookflags::any() {
            hooks::execute(&m, g);
        }
        arch::switch_from_g0_balanced(m.g0_sp.ptr(), sp, 0, m.g0_fpenv.get())
    }
}

/// Runs on the scheduler stack after the goroutine `m.curg` switched to it with `act`.
/// Returns a G to run at once (a park whose unlock function declined), else None.
///
/// # Safety
/// Right after `execute` returned `act`.
#[inline]
pub(super) unsafe fn after_switch(m: ThisM<'_>, act: usize) -> Option<(*mut G, bool)> {
    // The goroutine left the thread: so do its labels (customlabels.rs).
    customlabels::set_current(core::ptr::null());
    let gp = m.curg.load(Ordering::Relaxed);
    // SAFETY: gp just ran on this M and is ours until we publish it below.
    let g = unsafe { &*gp };
    if hookflags::any() {
        hooks::after_switch(&m, g, act);
    }
    match act {
        action::PARK => {
            casgstatus(g, G_RUNNING, G_WAITING);
            dropg(&m, g);
            // SAFETY: `m` is this thread's M, the owner of these fields.
            let (f, arg) = unsafe { (m.waitunlockf.get(), m.waitlock.get()) };
            // SAFETY: as above.
            unsafe {
                m.waitunlockf.set(None);
                m.waitlock.set(0);
            }
            if let Some(f) = f {
                // SAFETY: the parking goroutine supplied f and arg for exactly this call.
                if !unsafe { f(gp, arg) } {
                    casgstatus(g, G_WAITING, G_RUNNABLE);
                    return Some((gp, true));
                }
            }
            None
        }
        action::GOSCHED => {
            casgstatus(g, G_RUNNING, G_RUNNABLE);
            dropg(&m, g);
            // To the back of the local queue, as Go's goyield does, not to the global queue
            // as Go's Gosched does: the global queue's lock is the one lock every P contends
            // for, and a yield loop on two Ps would spend much of its time there, in
            // `lock_slow` (`scripts/ab.sh -p 2 yield2 . go`). Nothing starves: thieves take from
            // the local queue, and the 61-tick check keeps serving the global queue.
            if !affinity::affine_m(g).is_null() {
                // SAFETY: holding a P; gp is RUNNABLE, ours, and bound to m.
                unsafe { affinity::put_own(m, gp) };
                return None;
            }
            // SAFETY: we hold m's P; gp is RUNNABLE and ours.
            unsafe { ready::runqput(&*m.p.load(Ordering::Relaxed), gp, false) };
            ready::wakep();
            None
        }
        action::PREEMPT => {
            casgstatus(g, G_RUNNING, G_RUNNABLE);
            dropg(&m, g);
            // The mark is honoured: the new slice starts with what waits on this P (as
            // after Go's gopreempt_m, whose schedule looks at the local queue first).
            // Left set, `schedule` would serve the global queue first and take this very
            // goroutine straight back, while the local queue starved behind it.
            // SAFETY: m holds its P; Ps are never freed.
            let p = unsafe { &*m.p.load(Ordering::Relaxed) };
            p.preempt.store(false, Ordering::Relaxed);
            // A goroutine that can resume only on this M (stopped asynchronously, or
            // locked) with nothing else waiting: Go's schedule would take it straight
            // back off the global queue. Through the queue, this M would hand its P away
            // (`stoplockedm`) and the M that dequeued the goroutine would hand the P back
            // (`startlockedm`): two sleeps and two wake-ups per slice for nothing.
            // SAFETY: m holds p.
            if std::ptr::eq(g.lockedm.load(Ordering::Relaxed), m.m())
                && unsafe { idle_behind(m, p) }
            {
                return Some((gp, false));
            }
            // Where Go's gopreempt_m puts it: the global run queue's tail, or, for a
            // goroutine that can resume only on this M, the M's own share of that queue.
            if !affinity::affine_m(g).is_null() {
                // SAFETY: holding a P; gp is RUNNABLE, ours, and bound to m.
                unsafe { affinity::put_preempted(m, gp) };
                return None;
            }
            ready::ready_put_global(gp);
            None
        }
        action::LOCKMOVE => {
            casgstatus(g, G_RUNNING, G_RUNNABLE);
            dropg(&m, g);
            // SAFETY: holding a P; gp stopped here, is RUNNABLE, on no queue,
            // unbound (lockosthread::lock checked), and ours.
            unsafe { lockedm::lock_move(m, gp) };
            None
        }
        action::EXIT => {
            // SAFETY: g is finished.
            unsafe { proc::goexit0(&m, gp) };
            None
        }
        _ => throw("schedule: unknown action"),
    }
}

/// Whether nothing but the goroutine `m` just stopped waits for P `p` (`after_switch`):
/// `p` is not being retired, and once its due timers have run, its local queue, the global
/// queue, `m`'s affinity queue and the Ms waiting for a P are all empty — everything
/// `schedule` would look at before it found that goroutine on the global queue.
///
/// # Safety
/// On `m`'s scheduler stack, holding `p`.
unsafe fn idle_behind(m: ThisM<'_>, p: &P) -> bool {
    if p.id >= SCHED.gomaxprocs.load(Ordering::Relaxed) {
        return false;
    }
    check_timers(p);
    p.runq.is_empty()
        && SCHED.runqsize.load(Ordering::Relaxed) == 0
        && m.aff.is_empty()
        && SCHED.naffwait.load(Ordering::Relaxed) == 0
}

/// Breaks the M–G association of a G that stopped running.
fn dropg(m: &M, g: &G) {
    m.curg.store(null_mut(), Ordering::Relaxed);
    g.m.store(null_mut(), Ordering::Relaxed);
}

/// A goroutine about to run for the first time trades its stack for the one of the G that
/// died most recently on this P, if they are alike: that stack's top lines are still in
/// the cache (and its pages mapped), whereas the stack the new G got at spawn time — maybe
/// tens of thousands of goroutines ago, in a program that spawns far ahead of running —
/// has long left it, or was never touched. The dead G keeps the cold stack for a later
/// spawn, which does not touch it (newproc writes nothing to a stack), and moves to the
/// cold list: the next goroutine to start takes the next hot stack. (With one list, the
/// traded G stayed on top and only one start per exit found a hot stack; sleep_many from
/// C main, whose M starts goroutines in batches between batches of exits, faulted in a new
/// stack for nearly every start.) Nothing else refers to either stack: both Gs are ours
/// (one just dequeued, never run; one on our P's free list).
///
/// A goroutine that was promised a stack at spawn instead of getting one (`promised`, the
/// size; 0 for one that holds its stack; `proc::take_ticket`) takes the hot stack outright,
/// and its promise goes back to the P's tickets; with no hot stack of that size at hand it
/// takes the one the pool kept for the promise.
///
/// # Safety
/// On the M holding `p`, which dequeued `g` (never run; without a stack iff `promised`).
pub(super) unsafe fn take_hot_stack(p: &P, g: &G, promised: usize) {
    // SAFETY: p's free lists, tickets and their Gs belong to the holding M (caller
    // contract); g is ours.
    unsafe {
        if (*p.gfree.ptr()).is_empty() {
            super::proc::refill_hot(p);
        }
        let (list, cold_list) = super::proc::gfree_lists(p);
        let dead = list.peek();
        let mine = &mut *g.stack.ptr();
        #[cfg(debug_assertions)]
        if mine.is_some() == (promised != 0) {
            throw("take_hot_stack: a G with both a stack and a promise, or neither");
        }
        let want = if promised != 0 {
            promised
        } else {
            mine.as_ref().map_or(0, crate::stack::Stack::size)
        };
        if !dead.is_null() {
            #[cfg(debug_assertions)]
            if (*dead).status.load(Ordering::Relaxed) != G_DEAD || (*(*dead).stack.ptr()).is_none()
            {
                throw("take_hot_stack: a G on the hot list is not dead or has no stack");
            }
            let hot = &mut *(*dead).stack.ptr();
            if hot.as_ref().is_some_and(|h| h.size() == want) {
                // A promised G has no stack: the dead one is left without.
                core::mem::swap(hot, mine);
                list.pop();
                cold_list.push(dead);
                if promised != 0 {
                    super::proc::return_ticket(&mut *p.stack_tickets.ptr(), promised);
                }
                return;
            }
        }
        if promised != 0 {
            *mine = Some(crate::stack::alloc_reserved(promised));
        }
    }
}

/// The slow path of `schedule`: the local queue is empty. Looks in the global queue, steals
/// from other Ps, and if there is nothing, drops the P and parks the M. Returns `None` when
/// the M woke up holding a different P that must be re-checked by `schedule`.
///
/// # Safety
/// `m` holds a P.
pub(super) unsafe fn find_runnable(m: ThisM<'_>) -> Option<(*mut G, bool)> {
    // SAFETY: m's own thread owns foreign_handoff.
    let mut handed = unsafe { m.foreign_handoff.get() };
    if handed {
        // SAFETY: as above.
        unsafe { m.foreign_handoff.set(false) };
    }
    loop {
        let pp = m.p.load(Ordering::Relaxed);
        // SAFETY: we hold pp.
        let p = unsafe { &*pp };
        // Our P was retired, or `lock_move` handed us a goroutine to run locked (woken
        // in `park_idle`): `schedule` starts over.
        // SAFETY: m's own thread owns lockstart.
        if p.id >= SCHED.gomaxprocs.load(Ordering::Relaxed) || unsafe { m.lockstart.get() } {
            return None;
        }

        // 0-2. Due timers, the local run queue, the global run queue or this M's
        // preempted goroutines.
        // SAFETY: we own pp.
        if let Some(x) = unsafe { timers_and_queues(m, p) } {
            return Some(x);
        }

        // 2a. Readied goroutines that can run only on this M (`schedule` looks at them
        // first, so we get here with some queued only right after one of them yielded).
        // SAFETY: holding pp.
        if let Some(gp) = unsafe { affinity::get(m) } {
            return Some((gp, false));
        }

        // 3. The poller, without blocking.
        // SAFETY: we hold pp.
        if unsafe { poll_network(p) } {
            continue;
        }

        let procs = SCHED.gomaxprocs.load(Ordering::Relaxed);
        // 4a. A thread that is not an M (C main) handed goroutines work, or began to wait
        // for them, since this M last went idle: it is likely in an exchange with them,
        // and its next hand-off follows their answer within microseconds. Stay awake for
        // it, spinning (so that its wakep finds nothing to wake), instead of sleeping:
        // waking an idle CPU costs microseconds (more in a VM), the spin ends at the first
        // work.
        // One M at a time does this: one foreign thread's exchange needs one partner, and
        // on a small machine more spinners would take the CPUs the work needs. Before
        // step 4's steal: the foreign thread's next hand-off goes to this M's mailbox only
        // once it is open, and a steal over the other Ps first would keep it closed long
        // enough for many of C main's hand-offs to miss it (`scripts/ab.sh -p 2 -a
        // "-shape 1" pingpong` compares the two orders). The spinner steals as step 4 would every
        // 64 polls (`spin_for_foreign_open`). The mailbox opens first, then the M counts
        // as spinning: the foreign thread's next hand-off may come at any moment.
        if (handed || foreign_moved(m) || foreign_recent())
            && crate::sys::FOREIGN_SPIN.load(Ordering::Relaxed)
            && (m.spinning.load(Ordering::Relaxed)
                || 2 * SCHED.nmspinning.load(Ordering::SeqCst)
                    < procs - SCHED.npidle.load(Ordering::SeqCst))
            && open_mailbox()
        {
            if !m.spinning.load(Ordering::Relaxed) {
                become_spinning(&m);
            }
            // Once per hand-off: a spin that ends with nothing found does not repeat.
            handed = false;
            // SAFETY: we own pp, are spinning and opened the mailbox.
            let found = unsafe { spin_for_foreign(m, p) };
            if let Some((gp, inherit)) = found {
                // A foreign thread's next hand-off calls wakep itself.
                resetspinning_foreign(&m);
                return Some((gp, inherit));
            }
            continue;
        }

        // 4. Steal, if spinning is allowed: limit the number of spinning Ms to half the
        // busy Ps, so that a machine with GOMAXPROCS=64 and one busy goroutine does not
        // burn 63 cores looking for work.
        if m.spinning.load(Ordering::Relaxed)
            || 2 * SCHED.nmspinning.load(Ordering::SeqCst)
                < procs - SCHED.npidle.load(Ordering::SeqCst)
        {
            if !m.spinning.load(Ordering::Relaxed) {
                become_spinning(&m);
            }
            // SAFETY: we own pp.
            if let Some(gp) = unsafe { steal_work(m, p) } {
                return Some((gp, false));
            }
        }

        // 5. Nothing found: drop the P.
        let was_spinning;
        {
            let mut g = lock_sched();
            if SCHED.runqsize.load(Ordering::Relaxed) != 0 {
                // SAFETY: we own pp and its queue is empty.
                if let Some(gp) = unsafe { globrunqget(&mut g, p, 0) } {
                    return Some((gp, false));
                }
            }
            if !m.spinning.load(Ordering::Relaxed) && SCHED.needspinning.load(Ordering::SeqCst) == 1
            {
                // A wakeup found no idle P and asked for a spinner: be it.
                become_spinning(&m);
                continue;
            }
            // SAFETY: holding pp.
            let released = unsafe { releasep(m) };
            debug_assert!(released == pp);
            pidleput(&mut g, pp);
            was_spinning = m.spinning.load(Ordering::Relaxed);
        }

        // 6. The delicate dance: we stop spinning, then look everywhere once more. If we did
        // it the other way round, work submitted after our last look but before our
        // decrement would find nmspinning > 0, not wake anyone, and sit until someone else
        // happened to look. The StoreLoad barrier pairing with wakep's: the SeqCst RMW and,
        // for the Acquire loads of the Ps' queues in `check_runqs_no_p` (which the C++
        // model does not order after an RMW of another word), a SeqCst fence. This path
        // goes to sleep next, so the fence costs nothing that matters.
        if was_spinning {
            stop_spinning(&m);
            core::sync::atomic::fence(Ordering::SeqCst);
            if SCHED.runqsize.load(Ordering::SeqCst) != 0 {
                let mut g = lock_sched();
                if SCHED.runqsize.load(Ordering::Relaxed) != 0
                    && let Some(pp2) = pidleget_spinning(&mut g)
                {
                    // SAFETY: we are m's thread and took pp2 off the idle list.
                    unsafe { acquirep(m, pp2) };
                    become_spinning(&m);
                    // SAFETY: we own pp2 and an idle P's queue is empty.
                    if let Some(gp) = unsafe { globrunqget(&mut g, &*pp2, 0) } {
                        return Some((gp, false));
                    }
                    continue;
                }
            }
            if let Some(pp2) = check_runqs_no_p() {
                // SAFETY: we are m's thread and took pp2 off the idle list.
                unsafe { acquirep(m, pp2) };
                become_spinning(&m);
                continue;
            }
        }

        // A wakep that saw no idle P may have asked for a spinner after we checked
        // needspinning under the lock (see wakep): with our P now idle, look again.
        if SCHED.needspinning.load(Ordering::SeqCst) == 1 {
            let pp2 = {
                let mut g = lock_sched();
                pidleget_spinning(&mut g)
            };
            if let Some(pp2) = pp2 {
                // SAFETY: we are m's thread and took pp2 off the idle list.
                unsafe { acquirep(m, pp2) };
                become_spinning(&m);
                continue;
            }
        }

        // 7. Park until someone hands us a P (or, as the timer M, until a timer is due).
        // SAFETY: no P, not spinning.
        unsafe { park_idle(m) };
        // Woken with a P (and maybe spinning): loop, re-checking that P.
    }
}

/// Parks an M that holds no P until it is handed one. While any timer is pending or any
/// goroutine waits on the poller, one such M (the timer M) sleeps only until the earliest
/// deadline — in `epoll_wait` once the poller exists (Go's blocking netpoll in
/// findRunnable: HACKING.md, decision 12, one way to wait for work), else on its note — then runs
/// the due timers and readies what the poller reported, holding an idle P if it can get
/// one, so the goroutines come to it.
///
/// # Safety
/// `m` holds no P and is not spinning.
pub(super) unsafe fn park_idle(m: ThisM<'_>) {
    loop {
        let mut next = timer::earliest();
        if next == 0 && epoll::inited() && netpoll::any_waiters() {
            next = i64::MAX;
        }
        // Work that only this M can run (queued, or claimed for us by a readier while we
        // slept as the timer M; affinity.rs): stopm gets us a P for it. Otherwise, mark
        // ourselves idle before a timed sleep, as stopm does before sleeping.
        #[cfg(debug_assertions)]
        idle_delay();
        // SAFETY: no P.
        let affine = m.affwanted.load(Ordering::SeqCst) || unsafe { affinity::go_idle(m) };
        // SAFETY: no P.
        let mut ready = netpoll::Ready::new();
        if next == 0 || affine || !unsafe { sleep_as_timer_m(&m, next, &mut ready) } {
            if !affine {
                // Another M is the timer M; it may sleep past `next` if it found every P
                // busy, and we just made one idle.
                timer::wake_timer_m_for_idle_p(next);
            }
            // SAFETY: no P, not spinning.
            unsafe { stopm(m) };
            return;
        }
        let pp = {
            let mut g = lock_sched();
            pidleget(&mut g)
        };
        match pp {
            Some(pp) => {
                // SAFETY: pp came off the idle list.
                unsafe {
                    acquirep(m, pp);
                    affinity::set_active(m);
                }
                timer::run_all_due(crate::sys::nanotime());
                // What the poll found comes to our P (Go: findRunnable after a blocking
                // netpoll acquires an idle P, runs one and injects the rest).
                // SAFETY: we hold pp.
                unsafe { ready.run_first_ready_rest(&*pp) };
                return;
            }
            // Every P is busy: ready what the poll found anyway (to the global queue, where
            // the busy Ps find them, as Go's injectglist), and step in for the timers their
            // Ps have left overdue for `BUSY_GRACE_NS` (a P held by one goroutine: asked to
            // pass through its scheduler, or run here after a slice); the others are their
            // Ps' to run at their next pass through the scheduler, which sends their
            // goroutines to a local queue rather than behind the global one.
            None => {
                run_busy_overdue(crate::sys::nanotime());
                ready.ready_all();
            }
        }
    }
}

/// Sleeps as the timer M until `deadline` or until `wake_timer_m`. Returns false when
/// another M is the timer M already (the caller parks normally).
///
/// # Safety
/// On `m`'s own thread, holding no P.
pub(super) unsafe fn sleep_as_timer_m(m: &M, deadline: i64, ready: &mut netpoll::Ready) -> bool {
    let me = m as *const M as *mut M;
    // How we sleep, published before we are (a waker reads it after claiming us).
    let poll = epoll::inited();
    m.timer_poll.store(poll, Ordering::SeqCst);
    if SCHED
        .timer_m
        .compare_exchange(null_mut(), me, Ordering::SeqCst, Ordering::Relaxed)
        .is_err()
    {
        return false;
    }
    // With every P busy, a due timer is its P's to run (`check_timers`, at the P's next
    // pass through the scheduler): we would have to send its goroutine through the global
    // queue, behind whatever waits there. So sleep until `schedule::run_busy_overdue` has something
    // to do (`busy_deadline`: a timer `BUSY_GRACE_NS` overdue, which only a P held by one
    // goroutine for that long leaves it). Our SeqCst loads of `npidle` after claiming
    // `timer_m` pair with a P going idle (`pidleput`'s SeqCst add, then `park_idle` reads
    // `timer_m` and `timer_m_until` and wakes us to recompute):
    // `loom_tests::idle_p_wakes_a_timer_m_in_its_grace`.
    let with_grace = |d: i64| {
        if d != 0 && d != i64::MAX && SCHED.npidle.load(Ordering::SeqCst) == 0 {
            // Never earlier than `d` plus the grace: `d` is the earliest deadline, or one
            // that has gone since (then the timers that are left decide).
            match timer::busy_deadline() {
                0 => d.saturating_add(timer::BUSY_GRACE_NS),
                b => b,
            }
        } else {
            d
        }
    };
    let deadline = with_grace(deadline);
    SCHED.timer_m_until.store(deadline, Ordering::SeqCst);
    // A timer may have been started before we published our deadline, without seeing us.
    let e = with_grace(timer::earliest());
    let deadline = if e != 0 && e < deadline { e } else { deadline };
    // Affine work may have been queued for us before we published ourselves (affinity.rs;
    // SeqCst pairs with wake_affine_m's store-then-load): then do not sleep.
    let left = if m.affwanted.load(Ordering::SeqCst) {
        0
    } else {
        deadline.saturating_sub(crate::sys::nanotime())
    };
    m.blocked.store(true, Ordering::Relaxed);
    if poll {
        // Block in the poller (it readies what became ready, to the global queue: we hold
        // no P). A waker breaks it with the eventfd instead of our note.
        //
        // epoll wakes one of the Ms blocked in it, and a waker that claims a timer M breaks
        // the poll without naming an M, so a break may reach the wrong one: the claimed M
        // may still be on its way into (or out of) `epoll_wait` when the next timer M
        // blocks there and is claimed in turn, and the two claims' breaks coalesce into
        // one. Hence: counted in BLOCKED before looking whether a waker claimed us already
        // (then do not block); and every M leaving the poll breaks it again while a
        // claimed M has not left it (`epoll::OWED`).
        netpoll::BLOCKED.fetch_add(1, Ordering::SeqCst);
        let claimed = SCHED.timer_m.load(Ordering::SeqCst) != me;
        netpoll::netpoll(
            if left <= 0 || claimed {
                0
            } else if deadline == i64::MAX {
                -1
            } else {
                left
            },
            ready,
        );
        netpoll::BLOCKED.fetch_sub(1, Ordering::SeqCst);
        if SCHED
            .timer_m
            .compare_exchange(me, null_mut(), Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
        {
            SCHED.timer_m_until.store(i64::MAX, Ordering::SeqCst);
        } else {
            // A waker claimed us and broke the poll (or will: the break stays pending and
            // costs the next poll one early return).
            epoll::OWED.fetch_sub(1, Ordering::SeqCst);
        }
        // The break we may have taken was for another claimed M still in the poll.
        if epoll::OWED.load(Ordering::SeqCst) > 0 {
            epoll::netpoll_break();
        }
    } else {
        let woken = left > 0
            && m.park
                .sleep_timeout(Some(core::time::Duration::from_nanos(left as u64)));
        if SCHED
            .timer_m
            .compare_exchange(me, null_mut(), Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
        {
            SCHED.timer_m_until.store(i64::MAX, Ordering::SeqCst);
        } else if !woken {
            // wake_timer_m claimed us and is about to wake (or woke) the note: consume it.
            m.park.sleep();
        }
        m.park.clear();
    }
    m.blocked.store(false, Ordering::Relaxed);
    true
}

/// After dropping our P: if any P's local queue has work, take an idle P to go get it.
pub(super) fn check_runqs_no_p() -> Option<*mut P> {
    let procs = SCHED.gomaxprocs.load(Ordering::SeqCst) as usize;
    for i in 0..procs {
        let pp = SCHED.allp[i].load(Ordering::Acquire);
        // SAFETY: entries of allp are never freed.
        if !pp.is_null() && unsafe { !(*pp).runq.is_empty() } {
            let mut g = lock_sched();
            return pidleget_spinning(&mut g);
        }
    }
    None
}

/// Steps in for the timers that busy Ps have left due for `BUSY_GRACE_NS` (the timer M
/// while every P is busy, and sysmon while no M watches the timers). Returns how many it
/// ran.
///
/// A P that runs a goroutine is asked to pass through its scheduler instead
/// (`preempt::preemptone`, the request of a slice's end, once per deadline): it runs the
/// timer there and the woken goroutine goes to its `runnext`, as in Go, where only a P
/// runs its timers. Run from here, the timer readies its goroutine to the global queue,
/// which that P serves only when its local queue is empty or on its 61st tick: behind two
/// goroutine pairs that hand their slices on through `runnext` (`pingpong_hog.c`), a
/// 100 ms sleep would come back up to two slices late, where the P running the timer
/// itself is late by a fraction of one. A P on its way to another M is left to it. A P
/// that has not run it after `BUSY_RUN_NS`, or that is in a syscall, has its due
/// timers run here.
pub(super) fn run_busy_overdue(now: i64) -> usize {
    let mut n = 0;
    for p in all_ps() {
        let w = p.timers.timer0_when.load(Ordering::SeqCst);
        if w == 0 || now < w.saturating_add(timer::BUSY_GRACE_NS) {
            continue;
        }
        let s = p.status.load(Ordering::Acquire);
        if now < w.saturating_add(timer::BUSY_RUN_NS) && s != P_SYSCALL {
            // A P between two Ms (its goroutine just stopped: `handoffp` passes it on)
            // is about to pass through a scheduler too.
            if s == P_RUNNING && p.timers.kicked.swap(w, Ordering::Relaxed) != w {
                preempt::preemptone(p);
            }
            continue;
        }
        n += timer::run_due(p, now - timer::BUSY_GRACE_NS);
    }
    n
}

/// The timer M's poll and its claimers (`sleep_as_timer_m`, `newm::wake_timer_m_if`),
/// restated with loom's atomics and the same SeqCst operations; `epoll_wait` is a lock and
/// a condition variable over the eventfd's readiness (level-triggered, one waiter takes a
/// break), `netpoll_break` is coalesced as the real one is.
#[cfg(all(test, loom))]
mod loom_tests {
    use crate::loom::model;
    use crate::loom::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
    use crate::loom::sync::{Arc, Condvar, Mutex};

    /// What the waker watches (it waits, never spins, in a model).
    #[derive(Default)]
    struct Events {
        /// Ms that became the timer M.
        became: usize,
        /// Ms done with their one sleep.
        done: usize,
        /// Ms asleep in `epoll_wait` with nothing readable.
        asleep: usize,
    }

    struct Poller {
        timer_m: AtomicUsize,
        owed: AtomicI32,
        pending: AtomicBool,
        /// The eventfd's readiness (and, at the end of a run, the order to give up), and
        /// `epoll_wait`'s waiters.
        readable: Mutex<(bool, bool)>,
        cv: Condvar,
        events: Mutex<Events>,
        ev: Condvar,
        /// An M left `epoll_wait` only because the run ended: nothing would have woken it.
        stranded: AtomicBool,
    }

    impl Poller {
        /// `epoll::netpoll_break`. A compare-exchange where the runtime swaps: the same
        /// coalescing, and loom 0.7 lets a later read see a value older than a `swap`
        /// it ordered after (tokio-rs/loom#254), which a compare-exchange does not.
        fn netpoll_break(&self) {
            if self
                .pending
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                return;
            }
            self.readable.lock().unwrap().0 = true;
            self.cv.notify_one();
        }

        fn event(&self, f: impl FnOnce(&mut Events)) {
            f(&mut self.events.lock().unwrap());
            self.ev.notify_all();
        }

        /// `sleep_as_timer_m` in the poller, with no timer and no fd: only a break ends it.
        fn sleep_as_timer_m(&self, me: usize, repass: bool) {
            if self
                .timer_m
                .compare_exchange(0, me, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
            {
                self.event(|e| e.became += 1);
                let claimed = self.timer_m.load(Ordering::SeqCst) != me;
                let mut r = self.readable.lock().unwrap();
                if !claimed {
                    while !r.0 {
                        if r.1 {
                            self.stranded.store(true, Ordering::Relaxed);
                            break;
                        }
                        self.event(|e| e.asleep += 1);
                        r = self.cv.wait(r).unwrap();
                        self.event(|e| e.asleep -= 1);
                    }
                    r.0 = false;
                    self.pending.store(false, Ordering::SeqCst);
                }
                drop(r);
                if self
                    .timer_m
                    .compare_exchange(me, 0, Ordering::SeqCst, Ordering::Relaxed)
                    .is_err()
                {
                    self.owed.fetch_sub(1, Ordering::SeqCst);
                }
                if repass && self.owed.load(Ordering::SeqCst) > 0 {
                    self.netpoll_break();
                }
            }
            self.event(|e| e.done += 1);
        }

        /// `wake_timer_m_if` for whichever M is the timer M.
        fn claim(&self) {
            let tm = self.timer_m.load(Ordering::SeqCst);
            if tm != 0
                && self
                    .timer_m
                    .compare_exchange(tm, 0, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok()
            {
                self.owed.fetch_add(1, Ordering::SeqCst);
                self.netpoll_break();
            }
        }
    }

    /// Two Ms sleep as the timer M in turn; a waker claims each timer M it sees appear (work
    /// queued that only it can run). The run ends when both Ms are done, or when every M
    /// not done sleeps in `epoll_wait` with no break pending and nothing left to claim:
    /// then those Ms are told to give up, and one that does is stranded.
    fn two_claimed_sleeps(repass: bool) {
        model(move || {
            let p = Arc::new(Poller {
                timer_m: AtomicUsize::new(0),
                owed: AtomicI32::new(0),
                pending: AtomicBool::new(false),
                readable: Mutex::new((false, false)),
                cv: Condvar::new(),
                events: Mutex::new(Events::default()),
                ev: Condvar::new(),
                stranded: AtomicBool::new(false),
            });
            let ms: Vec<_> = (1..=2)
                .map(|me| {
                    let p = p.clone();
                    crate::loom::thread::spawn(move || p.sleep_as_timer_m(me, repass))
                })
                .collect();
            let mut claims = 0;
            loop {
                let mut e = p.events.lock().unwrap();
                let stuck = loop {
                    if e.done == 2 {
                        break false;
                    }
                    if e.became > claims {
                        break false;
                    }
                    if e.done + e.asleep == 2 && !p.pending.load(Ordering::SeqCst) {
                        break true;
                    }
                    e = p.ev.wait(e).unwrap();
                };
                if e.done == 2 {
                    break;
                }
                if stuck {
                    drop(e);
                    p.readable.lock().unwrap().1 = true;
                    p.cv.notify_all();
                    break;
                }
                claims = e.became;
                drop(e);
                p.claim();
            }
            for m in ms {
                m.join().unwrap();
            }
            assert!(
                !p.stranded.load(Ordering::Relaxed),
                "a claimed timer M sleeps on in epoll_wait"
            );
        });
    }

    /// The two claims' breaks coalesce into one, which one M takes. Every M leaves, because
    /// the one that leaves breaks the poll again while a claimed M is owed a break.
    #[test]
    fn every_claimed_timer_m_leaves_the_poll() {
        two_claimed_sleeps(true);
    }

    /// Without that second break the other claimed M sleeps on: the model must find it.
    #[test]
    #[should_panic(expected = "a claimed timer M sleeps on")]
    fn every_claimed_timer_m_broken_without_the_second_break() {
        two_claimed_sleeps(false);
    }
}
