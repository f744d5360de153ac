//! Timers (Go's time.go): a min-heap of timers per P, run by the scheduler.
//!
//! - `start` puts a timer on the current P's heap; `stop` takes it off whichever heap it is
//!   on. Each heap has its own lock. A timer has a state word (below): `stop` is exact —
//!   when it returns false the callback has run to completion (it waits for a callback in
//!   flight, Go's "running" state), so the timer's memory (often on a goroutine's stack)
//!   may be reused once `stop` returned. Every owner calls `stop` before it reuses the
//!   memory, also when the callback is what woke it (`sleep` does).
//! - Who runs due timers: an M in `schedule` checks its own P (one clock read, only when
//!   that P has a timer); a spinning M runs due timers of the Ps it steals from; and an M
//!   with nothing to do becomes the *timer M*: it sleeps until the earliest deadline of all
//!   heaps (each P publishes its earliest in `timer0_when`) instead of indefinitely
//!   (`schedule::sleep_as_timer_m`, in the poller once it exists). A timer started
//!   earlier than the timer M's wake-up time wakes it to recompute. While every P is
//!   busy, a due timer is its P's to run; the timer M (or sysmon, when there is none)
//!   steps in only for a P that has left it due for `BUSY_GRACE_NS`, by asking that P to
//!   pass through its scheduler, and runs it itself only after a time slice
//!   (`schedule::run_busy_overdue`).
//! - Callbacks run on an M's scheduler stack (g0), possibly without a P (the timer M when
//!   every P is busy); they may call `goready` (which then uses the global queue) and must
//!   not block.
//!
//! # Lock order
//! A P's timer lock → `SCHED.lock` (a callback's goready may take it). Never take a timer
//! lock while holding `SCHED.lock`.
//!
//! # Who may touch a Timer
//! Its owner (the code that started it) until `start`; the heap (under the heap's lock)
//! while it is armed; its owner again once `stop` returned.
//!
//! # The state word (`Timer::state`) — who makes each transition
//! | from → to | by |
//! |---|---|
//! | IDLE → ARMED | `start` (the owner), under the heap lock, with `pp` set |
//! | ARMED → IDLE | `stop` (anyone), under the lock of the heap holding it (true) |
//! | ARMED → RUNNING | `run_due`, under the heap lock, taking it off the heap (`pp` null) |
//! | RUNNING → IDLE | `run_due`, after the callback returned (Release) |
//!
//! Moving a timer to another P's heap (`move_all`, both locks held) keeps it ARMED and
//! changes `pp` directly, so a `stop` that read the old `pp` re-checks under that lock,
//! sees the change and retries. `stop` of a RUNNING timer spins (yielding the CPU) until
//! it is IDLE: callbacks are short and never block.

use core::ptr::null_mut;
use core::sync::atomic::Ordering;

pub use super::timerheap::Timer;
use super::timerheap::{T_ARMED, T_IDLE, T_RUNNING};
use super::*;

/// Arms `t` to run its callback at `when` (`nanotime` clock) or soon after.
///
/// # Safety
/// Called on an M holding a P (a goroutine, or g0 inside gopark's unlock function); `t` is
/// not armed and stays alive and unmoved until its callback has run or `stop` returned true.
pub unsafe fn start(t: *mut Timer, when: i64) {
    let m = getm();
    // SAFETY: caller contract: this thread's M holds a P.
    let pp = unsafe { (*m).p.load(Ordering::Relaxed) };
    if pp.is_null() {
        throw("timer start without a P");
    }
    // The poller is where an idle M waits for the earliest timer (created once; if it
    // cannot be, the timer M waits on its futex instead).
    if !epoll::inited() {
        let _ = epoll::init();
    }
    // SAFETY: Ps are never freed; t is ours (caller contract).
    unsafe {
        if (*t).state.load(Ordering::Relaxed) != T_IDLE {
            throw("timer start: timer already armed or running");
        }
        (*t).when = when;
        let timers = &(*pp).timers;
        timers.lock.lock();
        timers.push(pp, t);
        (*t).state.store(T_ARMED, Ordering::Relaxed);
        timers.lock.unlock();
    }
    wake_for_timer(when);
}

/// Makes sure some M will run a timer due at `when` that was just put on a heap, or whose
/// P is being left without an M (`handoffp`, `procresize`): Go's wakeNetPoller. If the
/// timer M sleeps past `when`, it is woken to recompute its deadline; if there is no timer
/// M, every M without work may be asleep without a deadline, so one is started (`wakep`:
/// it spins, finds nothing to run, and becomes the timer M in `park_idle`), and with
/// every P busy sysmon, which then steps in, is woken if it sleeps past it. The SeqCst
/// loads pair with `schedule::sleep_as_timer_m`, which publishes itself and then re-reads the heaps
/// (`loom_tests::timer_started_while_a_timer_m_publishes_itself`).
pub(crate) fn wake_for_timer(when: i64) {
    if SCHED.timer_m.load(Ordering::SeqCst).is_null() {
        ready::wakep();
        // Every P busy: sysmon steps in for the timer (`schedule::run_busy_overdue`); it must not
        // sleep past it.
        if SCHED.npidle.load(Ordering::SeqCst) == 0 {
            super::sysmonwake::wake_for_timer(when.saturating_add(BUSY_GRACE_NS));
        }
    } else if when < SCHED.timer_m_until.load(Ordering::SeqCst) {
        wake_timer_m();
    }
}

/// Disarms `t`. Returns true if it was armed (its callback will not run), false if it was
/// not armed or its callback already ran — in which case `stop` returns only after the
/// callback has returned, so the caller may reuse `t` and whatever its callback touches.
///
/// # Safety
/// `t` is alive. May be called from any thread, but not from `t`'s own callback.
pub unsafe fn stop(t: *mut Timer) -> bool {
    let mut spins = 0u32;
    loop {
        // SAFETY: t is alive (caller contract).
        let state = unsafe { (*t).state.load(Ordering::Acquire) };
        match state {
            T_IDLE => return false,
            T_RUNNING => {
                // The callback is in flight on another thread: wait for it (it holds that
                // heap's lock and never blocks).
                spins += 1;
                if spins < crate::sys::pauses(64) {
                    core::hint::spin_loop();
                } else {
                    crate::sys::osyield();
                }
                continue;
            }
            _ => {}
        }
        // SAFETY: t is alive.
        let pp = unsafe { (*t).pp.load(Ordering::Acquire) };
        if pp.is_null() {
            // Between ARMED and RUNNING (run_due holds the lock): look again.
            core::hint::spin_loop();
            continue;
        }
        // SAFETY: Ps are never freed.
        let timers = unsafe { &(*pp).timers };
        timers.lock.lock();
        // Re-check under the lock: the timer may have fired or moved to another P.
        // SAFETY: t is alive.
        if unsafe { (*t).pp.load(Ordering::Relaxed) } == pp
            && unsafe { (*t).state.load(Ordering::Relaxed) } == T_ARMED
        {
            // SAFETY: lock held and t is on this heap.
            unsafe {
                timers.remove(t);
                (*t).state.store(T_IDLE, Ordering::Release);
            }
            timers.lock.unlock();
            return true;
        }
        timers.lock.unlock();
    }
}

/// Runs the timers of `p` that are due at `now`; returns how many ran. Lock-free and
/// clock-free when the P has no timer due.
///
/// Called on an M's scheduler stack; the callbacks' goready goes to the M's P if it holds
/// one, else to the global queue.
///
/// On an M holding a P, it stops (after the first) while that P's run queue is full: the
/// next goroutine readied there would send half the queue to the global queue's tail, and
/// the timers still due keep their place on the heap, in deadline order, until the P's
/// next pass through the scheduler makes room. Go's checkTimers runs every due timer; here
/// a due timer waits for the goroutines queued ahead of it on this P either way, and
/// behind the global queue (a foreign thread's spawns: ~60,000 goroutines in sleep_many
/// from C main) it waited for all of those too, keeping its goroutine's stack the while
/// (HACKING.md, "Deviations"). Timers that no P gets to stay due for sysmon and the timer
/// M (`BUSY_GRACE_NS`).
pub(crate) fn run_due(p: &P, now: i64) -> usize {
    let next = p.timers.timer0_when.load(Ordering::SeqCst);
    if next == 0 || next > now {
        return 0;
    }
    let m = getm();
    // SAFETY: a non-null TLS slot is this thread's M, whose `p` only it writes.
    let mine = if m.is_null() {
        null_mut()
    } else {
        unsafe { (*m).p.load(Ordering::Relaxed) }
    };
    let timers = &p.timers;
    let mut n = 0;
    timers.lock.lock();
    // SAFETY (the condition): lock held.
    while let Some((when, _)) = unsafe { timers.first() } {
        if when > now {
            break;
        }
        // SAFETY: Ps are never freed; `len` may be called from any thread.
        if n > 0
            && !mine.is_null()
            && unsafe { (*mine).runq.len() } as usize > super::runq::RUNQ_SIZE
        {
            break;
        }
        // SAFETY: heap entries are armed, live timers.
        unsafe {
            let t = timers.take_at(0);
            // The next timer to fire lives on another parked goroutine's stack, most
            // likely out of the caches: start fetching it now, while this one runs.
            if let Some((_, next)) = timers.first() {
                let a = next as usize;
                crate::sys::prefetch_range(a, a + core::mem::size_of::<Timer>());
            }
            (*t).state.store(T_RUNNING, Ordering::Relaxed);
            // Run with the lock held (a `stop` that looks meanwhile waits for T_IDLE).
            ((*t).f)((*t).arg);
            // The owner may reuse t as soon as it sees this (it waits for it in `stop`).
            (*t).state.store(T_IDLE, Ordering::Release);
        }
        n += 1;
    }
    if n > 0 {
        // SAFETY: lock held; once for the batch (see `take_at`).
        unsafe { timers.publish() };
    }
    timers.lock.unlock();
    n
}

/// The earliest timer deadline of all Ps, 0 if none. Every P ever created, not only those
/// in service: a P retired by a GOMAXPROCS shrink may still hold timers until they move.
pub(crate) fn earliest() -> i64 {
    let mut best = 0i64;
    for p in all_ps() {
        let w = p.timers.timer0_when.load(Ordering::SeqCst);
        if w != 0 && (best == 0 || w < best) {
            best = w;
        }
    }
    best
}

/// Runs every due timer of every P (retired ones included); returns how many ran.
pub(crate) fn run_all_due(now: i64) -> usize {
    all_ps().map(|p| run_due(p, now)).sum()
}

/// Moves all timers of `from` (a P being retired) to `to`.
pub(crate) fn move_all(from: &P, to: *mut P) {
    if core::ptr::eq(from, to) {
        return;
    }
    // SAFETY: Ps are never freed.
    let dst = unsafe { &(*to).timers };
    // Lock order between two heap locks: by address.
    let (a, b) = if (from as *const P as usize) < to as usize {
        (&from.timers, dst)
    } else {
        (dst, &from.timers)
    };
    a.lock.lock();
    b.lock.lock();
    // SAFETY: both locks held; the timers move from one heap to the other and stay ARMED
    // (push overwrites `pp` without ever clearing it, so a concurrent `stop` never sees a
    // null `pp` for an armed timer other than in `run_due`).
    unsafe {
        for t in from.timers.take_all().into_iter().filter(|t| !t.is_null()) {
            dst.push(to, t);
        }
    }
    b.lock.unlock();
    a.lock.unlock();
    let when = dst.timer0_when.load(Ordering::SeqCst);
    if when != 0 {
        wake_for_timer(when);
    }
}

/// How long a due timer of a busy P may wait for that P before an M without a P (the timer
/// M, or sysmon when there is none) steps in (`schedule::run_busy_overdue`). A busy P runs its due
/// timers each time it passes through the scheduler, which a program that switches at all
/// does every few microseconds; only a P held by one goroutine for longer leaves them
/// waiting. Running them at once from outside would send the wake-ups of sleepers through
/// the global queue behind every goroutine queued there: sleep_many driven from C main
/// (which keeps ~60,000 spawned goroutines queued) would wake many of its sleepers tens of
/// milliseconds late, each holding its stack meanwhile (`timer_busy_p.c` and
/// `timer_backlog.c` check the lateness; `scripts/ab.sh -a "-shape 1" sleep_many` the cost).
pub(crate) const BUSY_GRACE_NS: i64 = 500_000;

/// How long a due timer of a P that runs a goroutine may wait in all before an M without a
/// P runs it itself: a time slice. The P was asked to stop its goroutine at
/// `BUSY_GRACE_NS` and has not: the goroutine runs code with no safe point where the
/// signal may not stop it (asynchronous preemption off, or refused there).
pub(crate) const BUSY_RUN_NS: i64 = FORCE_PREEMPT_NS;

/// When `schedule::run_busy_overdue` next has something to do, 0 if no P has a timer: the earliest,
/// over the Ps, of a timer's deadline plus `BUSY_GRACE_NS`, or plus `BUSY_RUN_NS` once
/// the P running a goroutine was asked to run it.
pub(crate) fn busy_deadline() -> i64 {
    let mut best = 0i64;
    for p in all_ps() {
        let w = p.timers.timer0_when.load(Ordering::SeqCst);
        if w == 0 {
            continue;
        }
        let asked = p.timers.kicked.load(Ordering::Relaxed) == w
            && p.status.load(Ordering::Acquire) == P_RUNNING;
        let d = w.saturating_add(if asked { BUSY_RUN_NS } else { BUSY_GRACE_NS });
        if best == 0 || d < best {
            best = d;
        }
    }
    best
}

/// After a P went idle: wakes the timer M if it sleeps past the earliest deadline `next`
/// (it sleeps until `busy_deadline` while every P is busy), so that it takes the idle P
/// and runs the timer on time.
pub(crate) fn wake_timer_m_for_idle_p(next: i64) {
    if next != 0 && next < SCHED.timer_m_until.load(Ordering::SeqCst) {
        wake_timer_m();
    }
}

/// Wakes the timer M (if any) so that it recomputes its deadline.
fn wake_timer_m() {
    let tm = SCHED.timer_m.load(Ordering::SeqCst);
    if !tm.is_null() {
        newm::wake_timer_m_if(tm);
    }
}

// ---------------------------------------------------------------------------------------
// Sleeping.

/// gopark's unlock function for `sleep`: arms the timer now that the goroutine is parked,
/// so that it cannot fire before (Go's resetForSleep).
unsafe fn arm_sleep(_gp: *mut G, t: usize) -> bool {
    let t = t as *mut Timer;
    // SAFETY: t lives on the parked goroutine's stack, which does not run until the timer
    // fires; we are on g0 holding a P.
    unsafe { start(t, (*t).when) };
    true
}

/// The sleep timer's callback: readies the sleeping goroutine.
unsafe fn wake_sleeper(gp: usize) {
    // SAFETY: the goroutine parked in `sleep` and only this timer readies it.
    unsafe { goready(gp as *mut G) };
}

/// Blocks the caller for `ns` nanoseconds: a goroutine parks on a timer; a foreign thread
/// sleeps in the kernel. `ns <= 0` yields. Returns 0, or the errno of the caller's scope
/// (rt/scope.rs) that ended the sleep early: ECANCELED, ETIMEDOUT.
pub fn sleep(ns: i64) -> i32 {
    let sc = scope::current();
    if !sc.is_null() && ns > 0 {
        return sleep_scoped(ns, sc);
    }
    let gp = getg();
    if gp.is_null() {
        if ns <= 0 {
            crate::sys::osyield();
            return 0;
        }
        let deadline = crate::sys::nanotime().saturating_add(ns);
        loop {
            let left = deadline - crate::sys::nanotime();
            if left <= 0 {
                return 0;
            }
            let ts = libc::timespec {
                tv_sec: (left / 1_000_000_000) as libc::time_t,
                tv_nsec: (left % 1_000_000_000) as libc::c_long,
            };
            // SAFETY: ts is valid; a null remainder is allowed. EINTR loops.
            unsafe { crate::sys::real::nanosleep(&ts, null_mut()) };
        }
    }
    if ns <= 0 {
        gosched();
        return 0;
    }
    let mut t = Timer::new(wake_sleeper, gp as usize);
    t.when = crate::sys::nanotime().saturating_add(ns);
    // SAFETY: on a goroutine; the timer lives in this frame until it fired, which is what
    // resumes us.
    unsafe {
        gopark(
            Some(arm_sleep),
            &mut t as *mut Timer as usize,
            WaitReason::Sleep,
        );
        // The callback readied us and may still be returning on another M: wait for it
        // before this frame (and t) dies.
        stop(&mut t);
    }
    0
}

/// A sleep in a scope: its timer and the scope's cancel race to end it (`state`).
struct ScopedSleep {
    /// The sleeping goroutine, or null for a thread outside the runtime (`note`).
    g: *mut G,
    note: crate::sys::Note,
    /// `SLEEP_DONE` once a callback claimed the sleep; `SLEEP_ARMING` while gopark's
    /// unlock function arms the two (a callback that claims meanwhile leaves the wake-up
    /// to it: the goroutine may not run, and its frame may not die, before both are armed).
    state: core::sync::atomic::AtomicU32,
}

const SLEEP_DONE: u32 = 1;
const SLEEP_ARMING: u32 = 2;

/// The timer's and the cancel's callback of a scoped sleep: the first wakes the sleeper,
/// unless the arming is still in progress (then `arm_scoped_sleep` does).
unsafe fn wake_scoped(arg: usize) {
    // SAFETY: the sleeper stops its timer and disarms its cancel before its frame dies;
    // both wait for a callback in flight.
    unsafe {
        let ss = &*(arg as *const ScopedSleep);
        let prev = ss.state.fetch_or(SLEEP_DONE, Ordering::AcqRel);
        if prev & SLEEP_DONE != 0 || prev & SLEEP_ARMING != 0 {
            return;
        }
        if ss.g.is_null() {
            ss.note.wakeup();
        } else {
            goready(ss.g);
        }
    }
}

/// What `arm_scoped_sleep` arms.
struct ScopedCtx {
    t: *mut Timer,
    cw: *const scope::CancelWait,
    ss: *const ScopedSleep,
}

/// gopark's unlock function of a scoped sleep: arms the timer, publishes the wait, and
/// readies the goroutine itself if a callback claimed the sleep meanwhile.
unsafe fn arm_scoped_sleep(gp: *mut G, arg: usize) -> bool {
    // SAFETY: arg is the parked goroutine's ScopedCtx; its frame stays alive until the
    // goroutine runs again, which needs SLEEP_ARMING cleared (below, our last access) or a
    // wake-up after that.
    unsafe {
        let ctx = &*(arg as *const ScopedCtx);
        start(ctx.t, (*ctx.t).when);
        scope::arm(&*ctx.cw);
        let prev = (*ctx.ss).state.fetch_and(!SLEEP_ARMING, Ordering::AcqRel);
        if prev & SLEEP_DONE != 0 {
            goready(gp);
        }
    }
    true
}

/// `sleep` in scope `sc` (the caller's current): until `ns` passed, the scope's deadline
/// passed or a cancel. Returns 0 or the scope's errno. A frame of its own (an unscoped
/// sleep on a small goroutine stack does not carry this one's records).
#[inline(never)]
fn sleep_scoped(ns: i64, sc: *const scope::Scope) -> i32 {
    let end = crate::sys::nanotime().saturating_add(ns);
    let until = scope::clamp(sc, Some(end)).unwrap_or(end);
    let g = getg();
    let ss = ScopedSleep {
        g,
        note: crate::sys::Note::new(),
        state: core::sync::atomic::AtomicU32::new(if g.is_null() { 0 } else { SLEEP_ARMING }),
    };
    let arg = &ss as *const ScopedSleep as usize;
    let cw = scope::CancelWait::new(sc, wake_scoped, arg);
    if ss.g.is_null() {
        // SAFETY: cw lives in this frame until disarmed; sc is our current scope.
        unsafe { scope::arm(&cw) };
        loop {
            let left = until - crate::sys::nanotime();
            if left <= 0
                || ss
                    .note
                    .sleep_foreign(Some(core::time::Duration::from_nanos(left as u64)))
            {
                break;
            }
        }
        // SAFETY: armed above.
        unsafe { scope::disarm(&cw) };
    } else {
        let mut t = Timer::new(wake_scoped, arg);
        t.when = until;
        let ctx = ScopedCtx {
            t: &mut t,
            cw: &cw,
            ss: &ss,
        };
        // SAFETY: on a goroutine; t and cw live in this frame until stopped and disarmed
        // below, which wait for a callback in flight.
        unsafe {
            gopark(
                Some(arm_scoped_sleep),
                &ctx as *const ScopedCtx as usize,
                WaitReason::Sleep,
            );
            scope::disarm(&cw);
            stop(&mut t);
        }
    }
    if crate::sys::nanotime() >= end {
        0
    } else {
        // SAFETY: our current scope is live.
        unsafe { scope::err(sc) }
    }
}

/// A loom model of the timer state word (the table in the module doc): `stop` racing with
/// `run_due` and with `move_all`. The real `Timer` sits on futex locks and `core` atomics,
/// which loom cannot schedule, so the model restates the protocol step for step with
/// loom's types: the heaps are mutexes holding "the timer is here", the waiter's frame is
/// a loom `UnsafeCell` that the callback writes and the owner writes again once `stop`
/// returned — loom fails the model if the two accesses can race (a use after return:
/// `stop` returning while the callback still runs). `scoped_sleep` restates the scoped
/// sleep's one-word claim (`wake_scoped` against `arm_scoped_sleep`) the same way.
#[cfg(all(test, loom))]
mod loom_tests {
    use crate::loom::cell::UnsafeCell;
    use crate::loom::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
    use crate::loom::sync::{Arc, Mutex};

    use super::{T_ARMED, T_IDLE, T_RUNNING};
    use crate::loom::model;

    /// One timer, two heaps (index 1 and 2; `pp` 0 = on none).
    struct World {
        state: AtomicU8,
        pp: AtomicUsize,
        heaps: [Mutex<bool>; 3],
        /// The waiter's frame: what the callback touches (the `Waiter` of a channel op).
        frame: UnsafeCell<u32>,
        /// How many times the callback ran.
        fired: AtomicUsize,
    }

    impl World {
        /// A timer armed on heap 1.
        fn armed() -> Arc<World> {
            Arc::new(World {
                state: AtomicU8::new(T_ARMED),
                pp: AtomicUsize::new(1),
                heaps: [Mutex::new(false), Mutex::new(true), Mutex::new(false)],
                frame: UnsafeCell::new(0),
                fired: AtomicUsize::new(0),
            })
        }

        /// `run_due` of heap `h` with the timer due.
        fn run_due(&self, h: usize) {
            let mut here = self.heaps[h].lock().unwrap();
            if *here {
                *here = false;
                self.pp.store(0, Ordering::Release);
                self.state.store(T_RUNNING, Ordering::Relaxed);
                // The callback, with the heap lock held: it touches the waiter's frame.
                self.frame.with_mut(|f| unsafe { *f += 1 });
                self.fired.fetch_add(1, Ordering::Relaxed);
                self.state.store(T_IDLE, Ordering::Release);
            }
        }

        /// `move_all` from heap 1 to heap 2 (both locks, by address: 1 then 2).
        fn move_1_to_2(&self) {
            let mut a = self.heaps[1].lock().unwrap();
            let mut b = self.heaps[2].lock().unwrap();
            if *a {
                *a = false;
                *b = true;
                self.pp.store(2, Ordering::Release);
            }
        }

        /// `stop`: true if it disarmed the timer.
        fn stop(&self) -> bool {
            loop {
                match self.state.load(Ordering::Acquire) {
                    T_IDLE => return false,
                    T_RUNNING => {
                        crate::loom::thread::yield_now();
                        continue;
                    }
                    _ => {}
                }
                let pp = self.pp.load(Ordering::Acquire);
                if pp == 0 {
                    crate::loom::thread::yield_now();
                    continue;
                }
                let mut here = self.heaps[pp].lock().unwrap();
                if self.pp.load(Ordering::Relaxed) == pp
                    && self.state.load(Ordering::Relaxed) == T_ARMED
                {
                    *here = false;
                    self.state.store(T_IDLE, Ordering::Release);
                    return true;
                }
            }
        }

        /// The owner after `stop`: the frame is reused.
        fn reuse_frame(&self) {
            self.frame.with_mut(|f| unsafe { *f = 99 });
        }
    }

    #[test]
    fn stop_waits_for_a_running_callback() {
        model(|| {
            let w = World::armed();
            let w2 = w.clone();
            let runner = crate::loom::thread::spawn(move || w2.run_due(1));
            let disarmed = w.stop();
            w.reuse_frame();
            runner.join().unwrap();
            // Exactly one of them won: a disarmed timer never fires.
            assert_eq!(w.fired.load(Ordering::Relaxed), usize::from(!disarmed));
        });
    }

    /// The timer M's grace while every P is busy (`schedule::sleep_as_timer_m`) against an M that
    /// makes a P idle and then parks (`park_idle` → `wake_timer_m_for_idle_p`): restated
    /// with loom's atomics, the same SeqCst loads and stores. Whoever ends up sleeping as
    /// the timer M either sleeps until the earliest deadline exactly or is woken: a timer
    /// of an idle P never waits out the grace. The pair that makes it so: the timer M
    /// claims `timer_m` before it reads `npidle`; the parking M adds to `npidle` before it
    /// reads `timer_m` and `timer_m_until` (MAX until a timer M publishes its deadline).
    /// Reading `timer_m_until` before the add fails the model.
    #[test]
    fn idle_p_wakes_a_timer_m_in_its_grace() {
        use crate::loom::sync::atomic::{AtomicBool, AtomicI32, AtomicI64};
        const EARLIEST: i64 = 100;
        const GRACE: i64 = 50;
        struct W {
            npidle: AtomicI32,
            until: AtomicI64,
            timer_m: AtomicUsize,
            woken: AtomicBool,
        }
        impl W {
            /// `sleep_as_timer_m` up to its deadline: None if another M is the timer M.
            fn sleep_as_timer_m(&self, me: usize) -> Option<i64> {
                if self
                    .timer_m
                    .compare_exchange(0, me, Ordering::SeqCst, Ordering::Relaxed)
                    .is_err()
                {
                    return None;
                }
                let with_grace = |d: i64| {
                    if self.npidle.load(Ordering::SeqCst) == 0 {
                        d + GRACE
                    } else {
                        d
                    }
                };
                let d0 = with_grace(EARLIEST);
                self.until.store(d0, Ordering::SeqCst);
                Some(d0.min(with_grace(EARLIEST)))
            }
            /// `wake_timer_m_for_idle_p` (and `wake_timer_m`'s claim).
            fn wake_for_idle_p(&self) {
                if EARLIEST < self.until.load(Ordering::SeqCst) {
                    let tm = self.timer_m.load(Ordering::SeqCst);
                    if tm != 0
                        && self
                            .timer_m
                            .compare_exchange(tm, 0, Ordering::SeqCst, Ordering::Relaxed)
                            .is_ok()
                    {
                        self.woken.store(true, Ordering::SeqCst);
                    }
                }
            }
        }
        model(|| {
            let w = Arc::new(W {
                npidle: AtomicI32::new(0),
                until: AtomicI64::new(i64::MAX),
                timer_m: AtomicUsize::new(0),
                woken: AtomicBool::new(false),
            });
            let w2 = w.clone();
            // An M with nothing to do while the only P is busy: it may become the timer M.
            let timer_m = crate::loom::thread::spawn(move || w2.sleep_as_timer_m(1));
            // The busy P's M runs out of work: its P goes idle (pidleput), then it parks.
            w.npidle.fetch_add(1, Ordering::SeqCst);
            let mine = w.sleep_as_timer_m(2);
            if mine.is_none() {
                w.wake_for_idle_p();
            }
            let theirs = timer_m.join().unwrap();
            for d in [mine, theirs].into_iter().flatten() {
                assert!(
                    d == EARLIEST || w.woken.load(Ordering::SeqCst),
                    "a timer M sleeps past an idle P's timer (deadline {d}) unwoken"
                );
            }
        });
    }

    /// A timer started while an M becomes the timer M (`start` → `publish` →
    /// `wake_for_timer` against `schedule::sleep_as_timer_m`), restated with loom's atomics.
    /// The timer M here is the one with no timer to wait for (only poller waiters: its
    /// deadline is `i64::MAX`, which is `epoll_wait(-1)`), so a timer it misses is missed
    /// for ever.
    ///
    /// The starter stores the P's new earliest in `timer0_when` (`publish`, under the heap
    /// lock), then reads `timer_m`: null sends it to `wakep`, a timer M to `timer_m_until`
    /// and, when the timer is due before it, to `wake_timer_m`'s claim. The would-be timer
    /// M claims `timer_m`, publishes its deadline in `timer_m_until`, then re-reads every
    /// P's `timer0_when` (`earliest`) and lowers its deadline to it. Each side's SeqCst
    /// store and later SeqCst load is a StoreLoad barrier, modelled as a fence.
    ///
    /// The claim: the timer M sleeps no later than the timer, or the starter claimed it (its
    /// wake-up is on its way: `schedule::loom_tests::every_claimed_timer_m_leaves_the_poll`).
    /// The starter's `wakep` does not count: it starts an M only if a P is idle and nobody
    /// spins, and that M cannot become the timer M while this one is. A starter that saw no
    /// timer M read `timer_m` before the claim, so the timer M's re-read comes after the
    /// timer's store and sees it. `publish` leaves `timer0_when` alone when the earliest did
    /// not change; the model's heap is empty before the start, so it always stores: an
    /// unchanged earliest is an earlier timer, whose own `start` made this same check.
    mod timer_m_start {
        use crate::loom::sync::Arc;
        use crate::loom::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering::*, fence};

        struct StartWorld {
            /// The P's `timer0_when`, 0 with no timer.
            timer0: AtomicI64,
            /// `SCHED.timer_m`, 0 for null.
            timer_m: AtomicUsize,
            /// `SCHED.timer_m_until`, `i64::MAX` while nobody published a deadline.
            until: AtomicI64,
            /// The starter claimed the timer M (`wake_timer_m_if`).
            claimed: AtomicBool,
        }

        /// The timer's deadline.
        const START_WHEN: i64 = 10;
        /// The would-be timer M.
        const START_ME: usize = 1;

        /// `start` from the push on: `publish`, then `wake_for_timer`.
        fn start_timer(w: &StartWorld) {
            // `publish`: the earliest changed (the heap was empty).
            w.timer0.store(START_WHEN, SeqCst);
            fence(SeqCst);
            // `wake_for_timer`. Null: `wakep` (and sysmon), which the claim does not count.
            if w.timer_m.load(SeqCst) != 0 && START_WHEN < w.until.load(SeqCst) {
                // `wake_timer_m` → `wake_timer_m_if`.
                let tm = w.timer_m.load(SeqCst);
                if tm != 0 && w.timer_m.compare_exchange(tm, 0, SeqCst, Relaxed).is_ok() {
                    w.until.store(i64::MAX, SeqCst);
                    w.claimed.store(true, Relaxed);
                }
            }
        }

        /// `sleep_as_timer_m` with the deadline `park_idle` found (`i64::MAX`: poller waiters,
        /// no timer), up to the sleep. `reread`: it looks at the heaps again once it published
        /// itself. Its deadline, or None if it is not the timer M.
        fn become_timer_m(w: &StartWorld, reread: bool) -> Option<i64> {
            if w.timer_m
                .compare_exchange(0, START_ME, SeqCst, Relaxed)
                .is_err()
            {
                return None;
            }
            let deadline = i64::MAX;
            w.until.store(deadline, SeqCst);
            fence(SeqCst);
            if !reread {
                return Some(deadline);
            }
            // `earliest()`.
            let e = w.timer0.load(SeqCst);
            Some(if e != 0 && e < deadline { e } else { deadline })
        }

        pub(super) fn check(reread: bool) {
            crate::loom::model_bounded(None, move || {
                let w = Arc::new(StartWorld {
                    timer0: AtomicI64::new(0),
                    timer_m: AtomicUsize::new(0),
                    until: AtomicI64::new(i64::MAX),
                    claimed: AtomicBool::new(false),
                });
                let w2 = w.clone();
                let tm = crate::loom::thread::spawn(move || become_timer_m(&w2, reread));
                start_timer(&w);
                let deadline = tm.join().unwrap().expect("nobody else claims timer_m");
                assert!(
                    deadline <= START_WHEN || w.claimed.load(Relaxed),
                    "the timer M sleeps past a timer started while it publishes itself"
                );
            });
        }
    }

    /// Every interleaving: the timer M sees the new timer, or its starter wakes it.
    #[test]
    fn timer_started_while_a_timer_m_publishes_itself() {
        timer_m_start::check(true);
    }

    /// Without the timer M's re-read of the heaps, a timer started before the claim (its
    /// starter saw no timer M) is left to an M that `wakep` may not start: the model must
    /// find it.
    #[test]
    #[should_panic(expected = "the timer M sleeps past a timer started while it publishes")]
    fn broken_timer_m_without_heap_reread() {
        timer_m_start::check(false);
    }

    #[test]
    fn stop_follows_a_moving_timer() {
        model(|| {
            let w = World::armed();
            let (w2, w3) = (w.clone(), w.clone());
            let mover = crate::loom::thread::spawn(move || w2.move_1_to_2());
            let runner = crate::loom::thread::spawn(move || w3.run_due(2));
            let disarmed = w.stop();
            w.reuse_frame();
            mover.join().unwrap();
            runner.join().unwrap();
            assert_eq!(w.fired.load(Ordering::Relaxed), usize::from(!disarmed));
            // Whatever happened, the timer is on no heap now.
            for h in &w.heaps {
                assert!(!*h.lock().unwrap());
            }
        });
    }

    /// The scoped sleep's one word (`ScopedSleep::state`): `arm_scoped_sleep` (gopark's
    /// unlock function, on the parking M) against its two wakers, the sleep's timer and a
    /// cancel of its scope, both `wake_scoped`. Restated with loom's types: the timer heap
    /// is a mutex holding "the timer is here" (its callback runs under it, as in
    /// `run_due`, so the sleeper's `stop` waits for a callback in flight), the scope a
    /// mutex holding whether it has ended and whether the wait is linked (`scope::arm`
    /// calls the callback itself when the scope has ended already, `cancel` calls it under
    /// the scope's lock, `disarm` unlinks under it), and `goready` a Release store the
    /// sleeper spins on (Acquire: the run queue's hand-over). The sleeper's frame (the
    /// `ScopedCtx`, the timer, the cancel wait, the `ScopedSleep`) is a loom cell that the
    /// unlock function and the callbacks read before each access and that the sleeper
    /// writes once it has run, disarmed and stopped (its frame dies).
    ///
    /// The claim: the sleeper is readied exactly once, never before `arm_scoped_sleep`
    /// cleared `SLEEP_ARMING` (its last access to the frame), and never lost (the cancel
    /// always comes, so somebody always claims the sleep). The timer thread runs due
    /// timers once: before `start` it finds nothing, which is how a sleep whose timer is
    /// not due yet looks. The `scoped_sleep_broken_*` models replace one side's
    /// read-modify-write by a load and a store: loom finds each failing.
    mod scoped_sleep {
        use crate::loom::cell::UnsafeCell;
        use crate::loom::sync::atomic::{AtomicU32, Ordering::*};
        use crate::loom::sync::{Arc, Mutex};
        use crate::loom::thread;
        use std::sync::atomic::AtomicBool as PlainBool;
        use std::sync::atomic::AtomicU32 as PlainU32;

        use super::super::{SLEEP_ARMING, SLEEP_DONE};

        /// Which side's read-modify-write a broken model replaces by a load and a store.
        #[derive(Clone, Copy, PartialEq)]
        pub(super) enum Rmw {
            /// As the runtime: `fetch_or` and `fetch_and`.
            Real,
            /// `arm_scoped_sleep` clears `SLEEP_ARMING` with a load and a store.
            ArmStore,
            /// `wake_scoped` sets `SLEEP_DONE` with a load and a store.
            WakeStore,
        }

        /// The scope: (ended, the sleep's wait is linked).
        struct ScopeState {
            ended: bool,
            linked: bool,
        }

        struct Sleep {
            /// `ScopedSleep::state`, `SLEEP_ARMING` when the sleeper parks.
            state: AtomicU32,
            /// The sleeper's frame: true while it lives.
            alive: UnsafeCell<bool>,
            /// The sleep's timer is on its heap.
            heap: Mutex<bool>,
            scope: Mutex<ScopeState>,
            /// `goready`: the sleeper runs once it sees 1.
            readied: AtomicU32,
            /// The other threads (unlock function, timer, canceller) that have finished:
            /// the sleeper, finding them all done and itself not readied, was lost.
            finished: AtomicU32,
            /// Ghosts (plain: loom runs one thread at a time): goready calls, and
            /// `arm_scoped_sleep` has cleared `SLEEP_ARMING`.
            goreadys: PlainU32,
            armed: PlainBool,
            rmw: Rmw,
        }

        impl Sleep {
            /// A party about to touch the sleeper's frame: it must still be alive.
            fn touch(&self) {
                // SAFETY: loom checks this read against the sleeper's write when it dies.
                self.alive
                    .with(|p| assert!(unsafe { *p }, "the sleeper's frame touched after it died"));
            }

            fn goready(&self) {
                assert_eq!(
                    self.goreadys.fetch_add(1, Relaxed),
                    0,
                    "the sleeper is not readied exactly once: readied twice"
                );
                self.readied.store(1, Release);
            }

            /// `wake_scoped`.
            fn wake_scoped(&self) {
                self.touch();
                let prev = if self.rmw == Rmw::WakeStore {
                    let prev = self.state.load(Acquire);
                    self.state.store(prev | SLEEP_DONE, Release);
                    prev
                } else {
                    self.state.fetch_or(SLEEP_DONE, AcqRel)
                };
                if prev & SLEEP_DONE != 0 || prev & SLEEP_ARMING != 0 {
                    return;
                }
                // ss.g
                self.touch();
                self.goready();
            }

            /// `arm_scoped_sleep`: `start`, `scope::arm`, then clear `SLEEP_ARMING`.
            fn arm(&self) {
                // ctx.t
                self.touch();
                *self.heap.lock().unwrap() = true;
                // ctx.cw
                self.touch();
                let mut sc = self.scope.lock().unwrap();
                if sc.ended {
                    drop(sc);
                    self.wake_scoped();
                } else {
                    sc.linked = true;
                    drop(sc);
                }
                // ctx.ss: the last access.
                self.touch();
                let prev = if self.rmw == Rmw::ArmStore {
                    let prev = self.state.load(Acquire);
                    self.state.store(prev & !SLEEP_ARMING, Release);
                    prev
                } else {
                    self.state.fetch_and(!SLEEP_ARMING, AcqRel)
                };
                self.armed.store(true, Relaxed);
                if prev & SLEEP_DONE != 0 {
                    self.goready();
                }
            }

            /// `run_due` with the sleep's timer due: its callback under the heap lock.
            fn run_due(&self) {
                let mut here = self.heap.lock().unwrap();
                if *here {
                    *here = false;
                    self.wake_scoped();
                }
            }

            /// `cancel` of the sleeper's scope.
            fn cancel(&self) {
                let mut sc = self.scope.lock().unwrap();
                if !sc.ended {
                    sc.ended = true;
                    if sc.linked {
                        self.wake_scoped();
                    }
                }
            }

            /// The sleeper once it runs again: `disarm`, `stop`, and its frame dies.
            fn resume(&self) {
                assert!(
                    self.armed.load(Relaxed),
                    "the sleeper runs before its unlock function has armed the sleep"
                );
                self.scope.lock().unwrap().linked = false;
                *self.heap.lock().unwrap() = false;
                // SAFETY: loom checks this write against every read of the frame.
                self.alive.with_mut(|p| unsafe { *p = false });
            }

            fn done(&self) {
                self.finished.fetch_add(1, Release);
            }
        }

        pub(super) fn check(rmw: Rmw) {
            crate::loom::model_bounded(Some(2), move || {
                let s = Arc::new(Sleep {
                    state: AtomicU32::new(SLEEP_ARMING),
                    alive: UnsafeCell::new(true),
                    heap: Mutex::new(false),
                    scope: Mutex::new(ScopeState {
                        ended: false,
                        linked: false,
                    }),
                    readied: AtomicU32::new(0),
                    finished: AtomicU32::new(0),
                    goreadys: PlainU32::new(0),
                    armed: PlainBool::new(false),
                    rmw,
                });
                let spawn = |f: fn(&Sleep)| {
                    let s = s.clone();
                    thread::spawn(move || {
                        f(&s);
                        s.done();
                    })
                };
                let ts = [
                    spawn(Sleep::arm),
                    spawn(Sleep::run_due),
                    spawn(Sleep::cancel),
                ];
                // The sleeper, parked.
                loop {
                    if s.readied.load(Acquire) != 0 {
                        break;
                    }
                    if s.finished.load(Acquire) == 3 {
                        assert!(
                            s.readied.load(Acquire) != 0,
                            "the sleeper is not readied exactly once: lost wake-up"
                        );
                        break;
                    }
                    thread::yield_now();
                }
                s.resume();
                for t in ts {
                    t.join().unwrap();
                }
                assert_eq!(s.goreadys.load(Relaxed), 1);
            });
        }
    }

    /// The scoped sleep as the runtime has it: readied exactly once, only once armed,
    /// never lost.
    #[test]
    fn scoped_sleep_readied_once() {
        scoped_sleep::check(scoped_sleep::Rmw::Real);
    }

    /// `arm_scoped_sleep` clearing `SLEEP_ARMING` with a load and a store: a cancel that
    /// claims between the two sees ARMING and leaves the wake-up to it, which saw no DONE.
    #[test]
    #[should_panic(expected = "lost wake-up")]
    fn scoped_sleep_broken_arm_with_store() {
        scoped_sleep::check(scoped_sleep::Rmw::ArmStore);
    }

    /// `wake_scoped` claiming with a load and a store: its store can put back the
    /// `SLEEP_ARMING` that `arm_scoped_sleep` cleared meanwhile (nobody readies the
    /// sleeper), or the timer and the cancel both claim (both ready it).
    #[test]
    #[should_panic(expected = "not readied exactly once")]
    fn scoped_sleep_broken_wake_with_store() {
        scoped_sleep::check(scoped_sleep::Rmw::WakeStore);
    }
}
