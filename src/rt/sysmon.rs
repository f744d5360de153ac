//! sysmon: the system monitor (Go's sysmon in proc.go; HACKING.md, decision 5). One
//! dedicated thread without a P (not an M: it runs no goroutine and is not counted in the
//! thread count).
//!
//! It sleeps 20 µs at first; after 50 rounds in which it found nothing to do it doubles
//! the sleep, up to 10 ms. When every P is idle it sleeps until woken. Sleeps of 1 ms and
//! more (and the deep sleep) are on a note, announced by `WAIT`: a goroutine that enters a
//! syscall then wakes it (Go's sysmonwake), so a blocking call is never left holding its
//! P for a whole long sleep. Only the deep sleep is ended by a P going back to work
//! (`pidleget`) or a foreign thread starting to wait (Go: only its deep sleep, `sysmonwait`,
//! is ever woken): a backed-off sleep ends by itself within 10 ms, and waking it on every
//! `pidleget` would cost a futex wake-up in `wakep`'s path and restart the 20 µs polling
//! (`scripts/ab.sh -p 2 skynet` shows the futex calls and the wall time it adds).
//!
//! Each round it `retake`s: a P that has been in the same syscall (same `syscalltick`) for
//! more than one round is taken (CAS P_SYSCALL → P_IDLE) and handed off (`handoffp`) —
//! unless it has no work, somebody is spinning or idle, and the syscall is under 10 ms
//! (Go's rule: then nobody needs it). It also records, per P, the schedtick and since when
//! it has been seen; a P that has run `FORCE_PREEMPT_NS` on one slice is marked for
//! preemption (`P::preempt`). Its deep sleep (every P idle) also ends when a P leaves the
//! idle list (`pidleget`), or nothing would mark a P that then runs a goroutine forever.
//!
//! A slice is measured from the round that first sees it, so the sleeps around its start
//! and end decide its length. Go's sleep is the same 10 ms at both ends once backed off,
//! and every slice of CPU-bound goroutines comes to 20 ms. Ours is shortened while
//! goroutines wait in the global queue, and a slice started in such a stretch would be
//! measured more finely than one started after it: four CPU-bound goroutines at
//! GOMAXPROCS=1 fell into a cycle of 12, 15, 20 and 12 ms slices, the same goroutine
//! always getting the same one (`preempt fair`). So after asking a P to yield, sysmon
//! looks again every `WATCH_DELAY_US` until the new slice is seen (for at most
//! `WATCH_NS`: a goroutine in libc may take longer to stop), and it wakes at the end of
//! the earliest slice that is not yet due: each slice then lasts `FORCE_PREEMPT_NS` and
//! the time to see and stop it, whatever the queues held. It watches only while other
//! goroutines wait (`others_wait`): a goroutine computing alone gets its P straight back
//! (`schedule::idle_behind`), its next slice is seen at the next backed-off round, and
//! sysmon wakes about once per 10 ms, as Go's does, not twice.

use core::sync::atomic::Ordering;
use core::time::Duration;

use super::sysmonwake::{NOTE, SLEEP_UNTIL, WAIT, WAIT_DEEP, WAIT_TIMED};
use super::*;

const MIN_DELAY_US: u64 = 20;
/// Rounds without a retake before the delay starts doubling (Go: 50).
const BACKOFF_ROUNDS: u32 = 50;
const MAX_DELAY_US: u64 = 10_000;
/// The longest sleep while goroutines wait in the global queue.
const WAITING_WORK_MAX_DELAY_US: u64 = 1_000;
/// Sleeps at least this long are wakeable by entersyscall.
const WAKEABLE_US: u64 = 1_000;
/// The longest sleep while hand-off calls a scope's end interrupted may still be inside
/// the kernel (`scopecall::rekick`).
const KICK_DELAY_US: u64 = 1_000;
/// The sleep while a P asked to yield has not been seen starting a new slice.
const WATCH_DELAY_US: u64 = 100;
/// How long after asking sysmon watches so closely.
const WATCH_NS: i64 = 2_000_000;
/// A syscall holding a P with nothing queued is left alone this long (Go: 10 ms).
const SYSCALL_GRACE_NS: i64 = 10_000_000;

/// When the stack caches are trimmed next, and whether they may hold something to trim
/// (then the deep sleep ends for it). Only the sysmon thread uses them.
struct Trim {
    next: i64,
    pending: bool,
    period: i64,
}

impl Trim {
    /// Trims the stack caches if a period has passed since the last time (Go frees dead
    /// Gs' stacks at each GC, and its scavenger returns the memory): first the global
    /// dead-G cache, whose unused stacks go to the pool released, then the pool itself
    /// (docs/internals/stacks.md). Both release only what no goroutine took for a whole period,
    /// so a program that spawns in bursts keeps the stacks it reuses.
    fn maybe(&mut self, now: i64) {
        if now >= self.next && self.period > 0 {
            let more_g = super::proc::trim_gfree();
            let more_pool = crate::stack::trim();
            self.pending = more_g || more_pool;
            self.next = now + self.period;
        }
    }

    /// The deep sleep's timeout given checkdead's: also until the next trim while the
    /// caches may hold something to trim.
    fn deep_timeout(&self, now: i64, other: Option<Duration>) -> Option<Duration> {
        if !self.pending || self.period == 0 {
            return other;
        }
        let left = Duration::from_nanos((self.next - now).max(0) as u64);
        Some(other.map_or(left, |o| o.min(left)))
    }
}

/// Sysmon's thread stack (it runs no goroutine code, only the runtime's own loop).
const SYSMON_STACK: usize = 256 * 1024;

/// Starts the sysmon thread (once, from `init_once`).
pub(super) fn start() {
    crate::sys::spawn_detached("sysmon", SYSMON_STACK, sysmon_main, core::ptr::null_mut());
}

/// Sleeps on the note as `kind` (`WAIT_TIMED` or `WAIT_DEEP`) for `timeout` (None: until
/// woken), unless `still` — checked after the flag is up — says not to. Returns whether
/// there is a reason to look at the Ps now (a waker woke us, or `still` said not to sleep).
fn wakeable_sleep(kind: u32, mut timeout: Option<Duration>, still: impl Fn() -> bool) -> bool {
    WAIT.store(kind, Ordering::SeqCst);
    // `entersyscall` publishes P_SYSCALL with a plain store and reads `WAIT` after only a
    // compiler barrier when the asymmetric fence pair is on: this is the pair's heavy side,
    // after which either `still` sees its P in P_SYSCALL or it sees our flag. (The deep
    // sleep needs no pair: with every P idle, a syscall needs `pidleget` first, whose
    // locked `npidle` update is the barrier.) Should the kernel refuse it, a syscall could
    // go unseen for the whole sleep: cap it at the lock's re-check period.
    if kind == WAIT_TIMED && crate::sys::membarrier::on() && !crate::sys::membarrier::heavy() {
        timeout = timeout.map(|t| t.min(crate::sys::membarrier::REFUSED_POLL));
    }
    if !still() {
        if WAIT.swap(0, Ordering::SeqCst) == 0 {
            // A waker claimed the flag meanwhile: consume its wakeup.
            NOTE.sleep();
            NOTE.clear();
        }
        return true;
    }
    let mut woken = NOTE.sleep_timeout(timeout);
    if !woken && WAIT.swap(0, Ordering::SeqCst) == 0 {
        // A waker claimed the flag: its wakeup is coming; consume it.
        NOTE.sleep();
        woken = true;
    }
    NOTE.clear();
    woken
}

/// Whether some P is in a syscall sysmon has not recorded yet (its `syscalltick` differs
/// from what sysmon saw). Only the sysmon thread calls this (it reads `sysmontick`).
fn syscall_unseen() -> bool {
    all_ps().any(|p| {
        // SAFETY: sysmontick is owned by the sysmon thread, our caller.
        let pd = unsafe { &*p.sysmontick.ptr() };
        p.status.load(Ordering::SeqCst) == P_SYSCALL
            && p.syscalltick.load(Ordering::Relaxed) != pd.syscalltick
    })
}

/// When no M watches the timers — every P is busy (an idle M would be the timer M) — the
/// time sysmon has to step in for them (`timer::busy_deadline`), else 0. Such a timer
/// would run only when a busy P next passes through the scheduler, a whole time slice late
/// behind a goroutine that keeps its P; Go accepts that (its sysmon only starts an M if a
/// P is idle), we step in as the timer M would. The grace (`timer::BUSY_GRACE_NS`): a busy
/// P runs its due timers each time it passes through the scheduler, which a program that
/// switches at all does every few microseconds; without it sysmon would run the timers of
/// many sleepers beside the busy P, contending for its heap lock and sending every
/// wake-up through the global queue (`scripts/ab.sh -a "-shape 1" sleep_many`).
fn unwatched_timer() -> i64 {
    // SeqCst: read in the timed sleep's re-check, the load half of a StoreLoad pair with
    // `timer::wake_for_timer` (it adds the timer, then reads npidle and WAIT; we store
    // WAIT, then read npidle). A Relaxed load could come before the WAIT store on Arm.
    if SCHED.npidle.load(Ordering::SeqCst) != 0 || !SCHED.timer_m.load(Ordering::SeqCst).is_null() {
        return 0;
    }
    timer::busy_deadline()
}

/// Steps in for the timers no M watches (see `unwatched_timer`) once it is time
/// (`schedule::run_busy_overdue`: their P is asked to run them; after a slice, sysmon runs
/// them, readying their goroutines to the global queue since it holds no P, where the next
/// P to pass through the scheduler — or to be preempted at the end of its slice — finds
/// them).
fn run_unwatched_timers(now: i64) {
    let due = unwatched_timer();
    if due != 0 && due <= now {
        schedule::run_busy_overdue(now);
    }
}

/// Whether no P runs a goroutine: every P in service is idle, and none beyond GOMAXPROCS
/// still runs. A shrink retires a P beyond the new count only when it next passes through
/// its scheduler (`retire_p`), and until then its goroutine runs without being counted:
/// one that called `gmp_maxprocs` itself, then computes or blocks in a call the hooks do
/// not see, would otherwise leave sysmon in its deep sleep.
fn all_ps_idle() -> bool {
    let n = SCHED.gomaxprocs.load(Ordering::SeqCst);
    SCHED.npidle.load(Ordering::SeqCst) >= n
        && !all_ps()
            .any(|p| p.id >= n && matches!(p.status.load(Ordering::SeqCst), P_RUNNING | P_SYSCALL))
}

extern "C" fn sysmon_main(_: *mut libc::c_void) -> *mut libc::c_void {
    // A panic here is a runtime bug: never unwind off the thread.
    let r = std::panic::catch_unwind(|| sysmon_loop());
    let _ = r;
    throw("sysmon panicked");
}

fn sysmon_loop() -> ! {
    threads::register();
    let mut idle: u32 = 0;
    let mut delay: u64 = MIN_DELAY_US;
    // How often the stack caches are trimmed (`Trim`): a stack no goroutine took for a
    // whole period gives its memory back. 1 s unless `GMP_DEBUG=stacktrim=MS` sets another
    // period (0: never trim), for tests that want many trims.
    let period = crate::sys::dbgvars::get(crate::sys::dbgvars::Var::Stacktrim).max(0) * 1_000_000;
    let mut trim = Trim {
        next: crate::sys::nanotime() + period,
        pending: true,
        period,
    };
    // The last round's `Slices`: when a slice is due next, whether one is being watched.
    let mut slices = Slices::default();
    loop {
        if idle == 0 {
            delay = MIN_DELAY_US;
        } else if idle > BACKOFF_ROUNDS {
            delay *= 2;
        }
        delay = delay.min(MAX_DELAY_US);
        // Goroutines wait in the global queue while every P is busy: a P past its slice
        // must be seen soon, not after a 10 ms back-off (a goroutine woken behind a CPU hog
        // would wait up to two slices; Go's sysmon backs off regardless).
        if SCHED.runqsize.load(Ordering::Relaxed) > 0 {
            delay = delay.min(WAITING_WORK_MAX_DELAY_US);
        }
        // Calls a scope's end interrupted may have missed the signal: send it again soon.
        if scopecall::kicks_pending() {
            delay = delay.min(KICK_DELAY_US);
        }
        // Timers nobody watches (every P busy, so no M waits for the earliest timer): wake
        // for them ourselves (`run_unwatched_timers`).
        let due = unwatched_timer();
        if due != 0 {
            let left_us = ((due - crate::sys::nanotime()).max(0) / 1000) as u64;
            delay = delay.min(left_us.max(MIN_DELAY_US));
        }
        // The slices (module doc): this sleep only, the back-off goes on as it was.
        let mut sleep = delay;
        if slices.watching {
            sleep = sleep.min(WATCH_DELAY_US);
        }
        if slices.next_due != 0 {
            let left_us = ((slices.next_due - crate::sys::nanotime()).max(0) / 1000) as u64;
            sleep = sleep.min(left_us.max(MIN_DELAY_US));
        }
        if sleep >= WAKEABLE_US {
            let until = crate::sys::nanotime() + sleep as i64 * 1000;
            SLEEP_UNTIL.store(until, Ordering::SeqCst);
            // `syscall_unseen`: a syscall that started after our last look but before the
            // flag went up did not wake us; don't sleep long on it. Nor past a timer that
            // nobody watches, put on a heap meanwhile (`wake_for_timer`).
            if wakeable_sleep(WAIT_TIMED, Some(Duration::from_micros(sleep)), || {
                let due = unwatched_timer();
                !syscall_unseen() && (due == 0 || due >= until)
            }) {
                // A syscall started: look now (this round records it, the next one, 40 µs
                // on, retakes it if it still runs), backing off at once from there: a
                // program making many short syscalls must not keep us polling every
                // 20 µs (a retake resets `idle` to 0, and then we do poll closely).
                idle = BACKOFF_ROUNDS;
                delay = MIN_DELAY_US;
            }
        } else {
            // SAFETY: usleep has no preconditions.
            unsafe { crate::sys::real::usleep(sleep as libc::c_uint) };
        }
        // Nothing runs: sleep until a syscall starts (all Ps idle means no P can be in
        // one; a goroutine must first get a P, then enter a syscall, which wakes us).
        if scopecall::kicks_pending() {
            scopecall::rekick();
        }
        if all_ps_idle() && !scopecall::kicks_pending() {
            let now = crate::sys::nanotime();
            if trim.pending {
                trim.maybe(now);
            }
            let timeout = trim.deep_timeout(now, checkdead::check());
            // The re-check after the flag is up looks at the kicks too: a kick between the
            // look above and the flag found nobody to wake (SeqCst on both sides: kick's
            // increment then WAIT's swap, against our WAIT store then this load). So does
            // a sleep with no timeout at the foreign waits, which `check` saw none of: one
            // that began since found nobody to wake either (its `FOREIGN_WAITING`
            // increment then `wake_if_deep`'s load), and its deadlock would go unreported.
            let untimed = timeout.is_none() && checkdead::enabled();
            let still = || {
                all_ps_idle()
                    && !scopecall::kicks_pending()
                    && !(untimed && foreignwait::FOREIGN_WAITING.load(Ordering::SeqCst) != 0)
            };
            if wakeable_sleep(WAIT_DEEP, timeout, still) {
                // Goroutines ran again: they may leave stacks to trim.
                trim.pending = true;
            }
            // The slices seen before the sleep are over: every P was idle.
            slices = Slices::default();
            idle = 0;
            continue;
        }
        let now = crate::sys::nanotime();
        trim.maybe(now);
        coarsetime::set_coarse_now(now);
        schedlat::sysmon_round(now);
        // Goroutines waiting on fds while every P is busy: nobody else polls.
        netpoll::sysmon_poll(now);
        run_unwatched_timers(now);
        let (taken, s) = retake(now);
        slices = s;
        if taken != 0 || preempt::STRESS.load(Ordering::Relaxed) {
            idle = 0;
        } else {
            idle += 1;
        }
    }
}

/// What `retake` saw of the running slices, for the next sleep (module doc).
#[derive(Default, Clone, Copy)]
struct Slices {
    /// When the earliest slice not yet asked to end reaches `FORCE_PREEMPT_NS` (0: none).
    next_due: i64,
    /// A P was asked to yield less than `WATCH_NS` ago and has not started a new slice.
    watching: bool,
}

/// Takes the Ps blocked in syscalls for more than a round and hands them off; records the
/// running goroutines' slices. Returns how many Ps it took, and what it saw of the slices.
fn retake(now: i64) -> (u32, Slices) {
    let mut n = 0;
    let mut slices = Slices::default();
    // Every P ever created, not only the first GOMAXPROCS: a P removed by a shrink while
    // its M was in a syscall must still be retaken, or its run queue would be stranded
    // (handed off, it is retired by pidleput or by its next M's schedule).
    for p in all_ps() {
        let pp = p as *const P as *mut P;
        // SAFETY: sysmontick is owned by this thread.
        let pd = unsafe { &mut *p.sysmontick.ptr() };
        let s = p.status.load(Ordering::Acquire);
        if s == P_RUNNING || s == P_SYSCALL {
            // A P seen with the same schedtick since `schedwhen` has run that long without
            // starting a new slice: ask it to yield at its next safe point (Go's
            // preemptone). Asked again each round until it does.
            let t = p.schedtick.load(Ordering::Relaxed);
            if pd.schedtick != t {
                pd.schedtick = t;
                pd.schedwhen = now;
                pd.halfway = false;
                pd.preemptwhen = 0;
            } else if s == P_RUNNING {
                if now - pd.schedwhen >= FORCE_PREEMPT_NS || preempt::STRESS.load(Ordering::Relaxed)
                {
                    if pd.preemptwhen == 0 {
                        pd.preemptwhen = now;
                    }
                    preempt::preemptone(p);
                } else if now - pd.schedwhen >= FORCE_PREEMPT_NS / 2 && !pd.halfway {
                    // Halfway through a long slice: the look the end of the slice compares
                    // with (`preempt::computing`).
                    pd.halfway = true;
                    preempt::look(p);
                }
                // The same goroutine for a while: it may be asleep in a blocking call the
                // hooks did not see, keeping the P from the others (unseen.rs).
                if now - pd.schedwhen >= unseen::LOOK_AFTER_NS
                    && now - pd.unseenwhen >= unseen::LOOK_AFTER_NS
                    && work_for(p, now - pd.schedwhen)
                {
                    pd.unseenwhen = now;
                    let m = p.m.load(Ordering::Acquire);
                    // SAFETY: Ms are never freed.
                    if !m.is_null() && unseen::look(unsafe { &*m }) {
                        n += 1;
                    }
                }
            }
        }
        if s == P_RUNNING {
            if pd.preemptwhen == 0 {
                let due = pd.schedwhen + FORCE_PREEMPT_NS;
                if slices.next_due == 0 || due < slices.next_due {
                    slices.next_due = due;
                }
            } else if now - pd.preemptwhen < WATCH_NS && others_wait(p) {
                slices.watching = true;
            }
        }
        if s != P_SYSCALL {
            continue;
        }
        let t = p.syscalltick.load(Ordering::Relaxed);
        if pd.syscalltick != t {
            // A syscall we had not seen: give it a round.
            pd.syscalltick = t;
            pd.syscallwhen = now;
            continue;
        }
        if !work_for(p, now - pd.syscallwhen) {
            continue;
        }
        if p.status
            .compare_exchange(P_SYSCALL, P_IDLE, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            // We own the P now.
            p.syscalltick.store(t.wrapping_add(1), Ordering::Relaxed);
            n += 1;
            if traceevent::on() {
                traceevent::emit(traceevent::kind::HANDOFF, Some(p.id as u32), p.id as u64, 0);
            }
            stopm::handoffp(pp);
        }
    }
    (n, slices)
}

/// Whether goroutines other than the one running on P `p` wait to run: on its local queue,
/// on the global queue, on its M's affinity queue, or on an M that waits for a P (a hint,
/// read without locks). Only then does the moment its next slice starts decide who runs
/// when (module doc).
fn others_wait(p: &P) -> bool {
    let m = p.m.load(Ordering::Acquire);
    !p.runq.is_empty()
        || SCHED.runqsize.load(Ordering::Relaxed) > 0
        || SCHED.naffwait.load(Ordering::Relaxed) > 0
        // SAFETY: Ms are never freed; the queue's counts are atomics any thread may read.
        || (!m.is_null() && unsafe { !(*m).aff.is_empty() })
}

/// Whether P `p`, held for `held` ns by an M that is blocked, should go to another M. Go's
/// rule: not if there is nothing for the P to do and someone is already looking for work
/// (a spinning M or an idle P) — unless it has lasted long. An M waiting for a P
/// (affinity.rs) is work.
fn work_for(p: &P, held: i64) -> bool {
    !(p.runq.is_empty()
        && SCHED.naffwait.load(Ordering::SeqCst) == 0
        && SCHED.nmspinning.load(Ordering::SeqCst) + SCHED.npidle.load(Ordering::SeqCst) > 0
        && held < SYSCALL_GRACE_NS)
}

/// Loom model of sysmon's wakeable sleep against `entersyscall` (no syscall is left unseen
/// for a whole backed-off sleep). A **model**, as `spinning_loom` is: the words are
/// `WAIT`, one P's status, and the note reduced to "a waker claimed the flag". With the
/// asymmetric fence pair on, `entersyscall` stores P_SYSCALL and, after only a compiler
/// barrier, loads `WAIT`; sysmon raises `WAIT`, makes the heavy barrier (membarrier(2)),
/// then looks at the Ps. The pair is modelled as two SeqCst fences, as in `sys`'s lock
/// models (the heavy barrier gives the light side a full barrier's effect). The claim:
/// sysmon sleeps only if the syscall's wake-up claimed its flag.
/// `broken_without_heavy_fence` drops sysmon's barrier and must fail.
/// The same sleep against a timer put on a heap (`TimerWorld`) and, for the deep sleep,
/// against a scope's kick (`KickWorld`) and a foreign thread's new wait (`ForeignWorld`),
/// each with its broken twin, follow.
#[cfg(all(test, loom))]
mod loom_tests {
    use crate::loom::sync::Arc;
    use crate::loom::sync::atomic::{
        AtomicBool, AtomicI64, AtomicU32, AtomicUsize, Ordering::*, fence,
    };
    use crate::loom::thread;

    const P_RUNNING: u32 = 1;
    const P_SYSCALL: u32 = 2;
    const WAIT_TIMED: u32 = 1;
    const WAIT_DEEP: u32 = 2;

    struct World {
        wait: AtomicU32,
        status: AtomicU32,
        /// `wake` swapped the flag to 0: the note's wakeup is on its way.
        woken: AtomicBool,
    }

    /// `entersyscall`'s publication and `wake_if_sleeping`.
    fn enter(w: &World) {
        w.status.store(P_SYSCALL, Release);
        fence(SeqCst);
        if w.wait.load(SeqCst) != 0 && w.wait.swap(0, SeqCst) != 0 {
            w.woken.store(true, Relaxed);
        }
    }

    /// `wakeable_sleep(WAIT_TIMED, .., !syscall_unseen)` up to the sleep. Whether sysmon
    /// goes to sleep (it saw no syscall and kept its flag).
    fn sysmon(w: &World, heavy: bool) -> bool {
        w.wait.store(WAIT_TIMED, SeqCst);
        if heavy {
            fence(SeqCst);
        }
        if w.status.load(SeqCst) == P_SYSCALL {
            // `still` said not to sleep: withdraw the flag (or consume a claimed wakeup).
            w.wait.swap(0, SeqCst);
            return false;
        }
        true
    }

    fn check(heavy: bool) {
        crate::loom::model_bounded(None, move || {
            let w = Arc::new(World {
                wait: AtomicU32::new(0),
                status: AtomicU32::new(P_RUNNING),
                woken: AtomicBool::new(false),
            });
            let w2 = w.clone();
            let s = thread::spawn(move || sysmon(&w2, heavy));
            enter(&w);
            let slept = s.join().unwrap();
            assert!(
                !slept || w.woken.load(Relaxed),
                "sysmon slept through a syscall that did not wake it"
            );
        });
    }

    /// Every interleaving: sysmon sees the syscall, or the syscall wakes sysmon.
    #[test]
    fn syscall_wakes_or_is_seen() {
        check(true);
    }

    /// Without sysmon's heavy barrier both sides can miss each other's store: the model
    /// must find it.
    #[test]
    #[should_panic(expected = "sysmon slept through")]
    fn broken_without_heavy_fence() {
        check(false);
    }

    const GRACE: i64 = 5;
    const WHEN: i64 = 10;
    const UNTIL: i64 = 100;

    /// The timer side: a timer put on a heap while every P is busy and no timer M watches
    /// (`timer::wake_for_timer` into `wake_for_timer`) against sysmon going into a timed
    /// sleep (`SLEEP_UNTIL`, then `WAIT`, then `still`'s look at the heaps through
    /// `unwatched_timer`). The SeqCst stores and loads of the real code are the StoreLoad
    /// barriers, modelled as fences.
    struct TimerWorld {
        wait: AtomicU32,
        until: AtomicI64,
        timer0: AtomicI64,
        woken: AtomicBool,
    }

    fn add_timer(w: &TimerWorld, barrier: bool) {
        w.timer0.store(WHEN, SeqCst);
        if barrier {
            fence(SeqCst);
        }
        if w.wait.load(SeqCst) == WAIT_TIMED
            && WHEN + GRACE < w.until.load(SeqCst)
            && w.wait.swap(0, SeqCst) != 0
        {
            w.woken.store(true, Relaxed);
        }
    }

    /// Whether sysmon goes to sleep until `UNTIL`.
    fn sysmon_timed(w: &TimerWorld) -> bool {
        w.until.store(UNTIL, SeqCst);
        w.wait.store(WAIT_TIMED, SeqCst);
        fence(SeqCst);
        let t = w.timer0.load(SeqCst);
        if t != 0 && t + GRACE < UNTIL {
            w.wait.swap(0, SeqCst);
            return false;
        }
        true
    }

    fn check_timer(barrier: bool) {
        crate::loom::model_bounded(None, move || {
            let w = Arc::new(TimerWorld {
                wait: AtomicU32::new(0),
                until: AtomicI64::new(i64::MAX),
                timer0: AtomicI64::new(0),
                woken: AtomicBool::new(false),
            });
            let w2 = w.clone();
            let s = thread::spawn(move || sysmon_timed(&w2));
            add_timer(&w, barrier);
            let slept = s.join().unwrap();
            assert!(
                !slept || w.woken.load(Relaxed),
                "sysmon slept past a timer that did not wake it"
            );
        });
    }

    /// Every interleaving: sysmon sees the timer, or the timer wakes sysmon.
    #[test]
    fn timer_wakes_or_is_seen() {
        check_timer(true);
    }

    /// Without the adder's barrier its load of `WAIT` may pass its store of the timer.
    #[test]
    #[should_panic(expected = "sysmon slept past a timer")]
    fn broken_timer_without_barrier() {
        check_timer(false);
    }

    /// The scope side: a hand-off call's kick (`scopecall::kick`: `KICKS_PENDING`'s SeqCst
    /// increment, then `sysmonwake::wake`, which swaps `WAIT` to 0 and wakes the note if it
    /// was up) against sysmon going into its deep sleep (the look at `kicks_pending` before
    /// it, then `wakeable_sleep(WAIT_DEEP, .., still)`: `WAIT`, then `still`, which is
    /// `all_ps_idle() && !kicks_pending()`). Every P stays idle. The kicked call stays in
    /// the kernel (its decrement of `KICKS_PENDING` is left out): the kick is pending to the
    /// end. The SeqCst accesses of the real code are the StoreLoad barriers, modelled as
    /// fences. The claim: sysmon sleeps only if the kick's wake-up claimed its flag, so a
    /// pending kick is re-sent (`rekick`) within a round.
    struct KickWorld {
        wait: AtomicU32,
        kicks_pending: AtomicUsize,
        woken: AtomicBool,
    }

    /// `kick`'s count and wake-up.
    fn kick(w: &KickWorld) {
        w.kicks_pending.fetch_add(1, SeqCst);
        fence(SeqCst);
        if w.wait.swap(0, SeqCst) != 0 {
            w.woken.store(true, Relaxed);
        }
    }

    /// The deep sleep up to the note. `recheck`: `still` looks at `kicks_pending` too.
    /// Whether sysmon goes to sleep.
    fn sysmon_deep(w: &KickWorld, recheck: bool) -> bool {
        let kicks_pending = || w.kicks_pending.load(SeqCst) != 0;
        // `all_ps_idle() && !kicks_pending()`, every P idle.
        if kicks_pending() {
            return false;
        }
        w.wait.store(WAIT_DEEP, SeqCst);
        fence(SeqCst);
        let still = !(recheck && kicks_pending());
        if !still {
            // Withdraw the flag (or consume a claimed wakeup).
            w.wait.swap(0, SeqCst);
            return false;
        }
        true
    }

    fn check_kick(recheck: bool) {
        crate::loom::model_bounded(None, move || {
            let w = Arc::new(KickWorld {
                wait: AtomicU32::new(0),
                kicks_pending: AtomicUsize::new(0),
                woken: AtomicBool::new(false),
            });
            let w2 = w.clone();
            let s = thread::spawn(move || sysmon_deep(&w2, recheck));
            kick(&w);
            let slept = s.join().unwrap();
            assert!(
                !slept || w.woken.load(Relaxed),
                "sysmon slept deep with a kick pending and no wake-up on its way"
            );
        });
    }

    /// A foreign thread starting an untimed wait (`ForeignWait::begin`: the SeqCst
    /// increment of `FOREIGN_WAITING`, then `wake_if_deep`, which claims the flag only if
    /// it is `WAIT_DEEP`) against sysmon going into its deep sleep (`checkdead::check`
    /// reads `FOREIGN_WAITING`: a wait makes the sleep timed, none untimed; then sysmon
    /// raises the flag and runs `still`). The claim: sysmon sleeps with no timeout only if
    /// the wait's wake-up claimed its flag, so the new wait gets its deadlock check.
    struct ForeignWorld {
        wait: AtomicU32,
        waiting: AtomicUsize,
        woken: AtomicBool,
    }

    /// `ForeignWait::begin`'s count and `wake_if_deep`.
    fn foreign_wait(w: &ForeignWorld) {
        w.waiting.fetch_add(1, SeqCst);
        fence(SeqCst);
        if w.wait.load(SeqCst) == WAIT_DEEP
            && w.wait
                .compare_exchange(WAIT_DEEP, 0, SeqCst, Relaxed)
                .is_ok()
        {
            w.woken.store(true, Relaxed);
        }
    }

    /// The deep sleep up to the note. `recheck`: an untimed sleep's `still` looks at
    /// `FOREIGN_WAITING` again. Whether sysmon goes to sleep with no timeout.
    fn sysmon_deep_untimed(w: &ForeignWorld, recheck: bool) -> bool {
        if w.waiting.load(SeqCst) != 0 {
            // `check` saw the wait: a timed sleep, after which it looks again.
            return false;
        }
        w.wait.store(WAIT_DEEP, SeqCst);
        fence(SeqCst);
        if recheck && w.waiting.load(SeqCst) != 0 {
            w.wait.swap(0, SeqCst);
            return false;
        }
        true
    }

    fn check_foreign(recheck: bool) {
        crate::loom::model_bounded(None, move || {
            let w = Arc::new(ForeignWorld {
                wait: AtomicU32::new(0),
                waiting: AtomicUsize::new(0),
                woken: AtomicBool::new(false),
            });
            let w2 = w.clone();
            let s = thread::spawn(move || sysmon_deep_untimed(&w2, recheck));
            foreign_wait(&w);
            let slept = s.join().unwrap();
            assert!(
                !slept || w.woken.load(Relaxed),
                "sysmon slept with no timeout past a new foreign wait"
            );
        });
    }

    /// Every interleaving: sysmon sees the new foreign wait, or the wait wakes sysmon.
    #[test]
    fn foreign_wait_wakes_deep_sleep_or_is_seen() {
        check_foreign(true);
    }

    /// Without the look at `FOREIGN_WAITING` after the flag goes up, a wait that begins between sysmon's look and its flag neither is seen nor
    /// wakes it: the model must find it.
    #[test]
    #[should_panic(expected = "sysmon slept with no timeout past a new foreign wait")]
    fn broken_deep_sleep_without_foreign_recheck() {
        check_foreign(false);
    }

    /// Every interleaving: sysmon sees the pending kick, or the kick wakes sysmon.
    #[test]
    fn kick_wakes_deep_sleep_or_is_seen() {
        check_kick(true);
    }

    /// Without the look at `kicks_pending` after the flag goes up, a kick between sysmon's
    /// first look and its flag neither is seen nor wakes it: the model must find it.
    #[test]
    #[should_panic(expected = "sysmon slept deep with a kick pending")]
    fn broken_deep_sleep_without_kick_recheck() {
        check_kick(false);
    }
}
