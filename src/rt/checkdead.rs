//! Deadlock detection (Go's `checkdead`; HACKING.md, decision 5), made sound for a C
//! process whose threads the runtime does not own.
//!
//! Go's runtime owns every thread that can run Go code, so "no M is running" is enough.
//! Here any thread may wake a goroutine at any time (a C thread sending on a channel, a
//! thread not yet born), so sysmon reports a deadlock only when **nothing can ever wake
//! anything**:
//!
//! 1. the runtime is quiescent: every P idle, the global queue empty, no M running a
//!    goroutine or holding one in a syscall (`m.curg`), no affine work queued, no timer
//!    pending (it would ready a goroutine), nobody waiting on the poller;
//! 2. every thread of the process (`/proc/self/task`) is a runtime thread (an M, sysmon,
//!    the template or schedtrace thread) or a foreign thread asleep in an untimed wait of
//!    ours (channel, select, WaitGroup, mutex, semaphore, cond) whose wake-up has not been
//!    issued (its note is not woken). A thread in any other call — `pthread_join`, `read`,
//!    `sleep`, a timed wait, a gmp wait we do not track — might wake someone: no report;
//! 3. nothing changed while we looked: (1) holds again afterwards, no P left the idle list
//!    in between (`SCHED.pidlegets`, bumped by `pidleget` under the scheduler lock), no
//!    foreign thread started or ended a wait (`foreignwait::FOREIGN_GEN`), and the foreign waiters'
//!    notes are still not woken;
//! 4. no goroutine on `allg` is runnable, running, in a syscall or being created.
//!
//! Except, in (1) and (4): goroutines bound to an M that is locked to a goroutine which
//! waits (`held_by`). LockOSThread keeps that thread for its goroutine alone, so
//! they can run nowhere else and not there before it is woken — which, with everything
//! else asleep, nobody can do. A pinned goroutine that locks its thread and then waits for
//! one bound there (HACKING.md, "Known limits") is such a deadlock; the report says which
//! goroutine holds which (`explain_held`).
//!
//! Why that is enough: after (1) at time t1 and with no P taken from the idle list until
//! the end, no goroutine ran in between; so only foreign threads could act. Every foreign
//! thread that existed during the scan was asleep in a tracked wait and stayed asleep (no
//! registration changed, no note woken), and a thread created after the scan must have
//! been created by an actor that was awake after it — there was none. A thread that acted
//! and exited before the scan left its effects where (1), (3) or (4) see them (a queued
//! goroutine, a woken note, a changed generation).
//!
//! Then it prints `gmp: all goroutines are asleep - deadlock!`, the goroutine dump and the
//! foreign waiters, and exits with status 2, as Go does. `GMP_DEBUG=checkdead=0` turns it
//! off. It runs on sysmon when every P is idle, before sysmon's deep sleep, and again (10
//! ms, doubling to 1 s) while a foreign thread waits and the verdict is "not yet"; a
//! foreign thread starting a wait wakes sysmon for it.

use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use core::time::Duration;

use super::dump::Out;
use super::*;

static ENABLED: AtomicBool = AtomicBool::new(true);
/// The recheck interval while foreign threads wait (owner: sysmon).
static RECHECK_NS: AtomicI64 = AtomicI64::new(0);
static RECHECK_GEN: AtomicU64 = AtomicU64::new(u64::MAX);

const RECHECK_MIN_NS: i64 = 10_000_000;
const RECHECK_MAX_NS: i64 = 1_000_000_000;

/// Reads `GMP_DEBUG=checkdead=0` (from `init_once`).
pub(crate) fn init() {
    ENABLED.store(
        crate::sys::dbgvars::get(crate::sys::dbgvars::Var::Checkdead) != 0,
        Ordering::Relaxed,
    );
}

/// Whether deadlocks are detected (`GMP_DEBUG=checkdead=0` turns it off).
pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Whether the note of a registered waiter may still be asleep. Its record lives on the
/// waiter's stack, which dies when it wakes: read through the non-faulting reader.
fn note_unwoken(note: *mut Note) -> bool {
    !note.is_null() && super::dump::read_u32(note as usize).is_some_and(|k| !Note::key_is_woken(k))
}

/// The goroutine M is locked to, if it waits (not in a syscall, which may return by
/// itself): then the goroutines bound to M cannot run until it is woken, since
/// LockOSThread keeps the thread for it alone. A pinned goroutine that locks its thread
/// holds the goroutines bound there this way (HACKING.md, "Known limits"); readying one
/// of them queues it on the M (`m.aff`), where it stays.
fn waiting_locked_g(m: &M) -> Option<&'static G> {
    let lg = m.lockedg.load(Ordering::SeqCst);
    // SAFETY: Gs are never freed; the status is an atomic.
    let lg = unsafe { lg.as_ref() }?;
    (lg.status.load(Ordering::SeqCst) == G_WAITING).then_some(lg)
}

/// For a goroutine bound to an M that `waiting_locked_g` holds: that M and the waiting
/// goroutine. It can run nowhere else, and not there until that goroutine runs.
fn held_by(g: &G) -> Option<(&'static M, &'static G)> {
    // SAFETY: Ms are never freed.
    let m = unsafe { affinity::affine_m(g).as_ref() }?;
    Some((m, waiting_locked_g(m)?))
}

/// Step 1 of the module doc (with an M's queued bound goroutines counted as asleep while
/// the goroutine it is locked to waits: `waiting_locked_g`).
fn quiescent() -> bool {
    if SCHED.npidle.load(Ordering::SeqCst) < SCHED.gomaxprocs.load(Ordering::SeqCst)
        || SCHED.runqsize.load(Ordering::SeqCst) != 0
        || SCHED.naffwait.load(Ordering::SeqCst) != 0
        || netpoll::WAITERS.load(Ordering::SeqCst) != 0
        || super::offload::INFLIGHT.load(Ordering::SeqCst) != 0
        || timer::earliest() != 0
    {
        return false;
    }
    let mut cur = SCHED.allm.load(Ordering::Acquire);
    while !cur.is_null() {
        // SAFETY: Ms are never freed; alllink never changes once published.
        let m = unsafe { &*cur };
        if !m.dead.load(Ordering::SeqCst)
            && (!m.curg.load(Ordering::SeqCst).is_null()
                || (!m.aff.is_empty() && waiting_locked_g(m).is_none()))
        {
            return false;
        }
        cur = m.alllink.load(Ordering::Acquire);
    }
    true
}

fn is_runtime_thread(tid: i32) -> bool {
    if super::threads::is_registered(tid) || super::offload::is_helper(tid) {
        return true;
    }
    let mut cur = SCHED.allm.load(Ordering::Acquire);
    while !cur.is_null() {
        // SAFETY: as in `quiescent`.
        let m = unsafe { &*cur };
        if m.tid.load(Ordering::SeqCst) == tid && !m.dead.load(Ordering::SeqCst) {
            return true;
        }
        cur = m.alllink.load(Ordering::Acquire);
    }
    false
}

fn foreign_waiter_asleep(tid: i32) -> bool {
    foreignwait::FOREIGN
        .iter()
        .any(|s| s.tid.load(Ordering::SeqCst) == tid && note_unwoken(s.note.load(Ordering::SeqCst)))
}

/// Step 2: every thread is a runtime thread or a foreign waiter asleep. Allocates (the
/// directory listing): sysmon only.
fn all_threads_asleep() -> bool {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return false;
    };
    let mut n = 0;
    for e in dir {
        let Ok(e) = e else { return false };
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            return false;
        };
        if !is_runtime_thread(tid) && !foreign_waiter_asleep(tid) {
            return false;
        }
        n += 1;
    }
    n > 0
}

/// Step 4 (a runnable goroutine that only a waiting locked goroutine's M may run counts
/// as waiting: `held_by`).
fn no_live_goroutine() -> bool {
    super::proc::all_gs().all(|g| {
        let s = g.status.load(Ordering::SeqCst);
        s == G_WAITING || s == G_DEAD || (s == G_RUNNABLE && held_by(g).is_some())
    })
}

fn deadlocked() -> bool {
    if foreignwait::FOREIGN_UNTRACKED.load(Ordering::SeqCst) != 0 {
        return false;
    }
    let generation = foreignwait::FOREIGN_GEN.load(Ordering::SeqCst);
    let gets = SCHED.pidlegets.load(Ordering::SeqCst);
    if !quiescent() || !all_threads_asleep() || !quiescent() {
        return false;
    }
    let notes_unwoken = foreignwait::FOREIGN.iter().all(|s| {
        let note = s.note.load(Ordering::SeqCst);
        note.is_null() || note_unwoken(note)
    });
    notes_unwoken
        && no_live_goroutine()
        && SCHED.pidlegets.load(Ordering::SeqCst) == gets
        && foreignwait::FOREIGN_GEN.load(Ordering::SeqCst) == generation
}

/// Called by sysmon when every P is idle, before its deep sleep (also marks the coarse
/// clock stale, dump.rs). Exits the process (status 2)
/// on a deadlock; otherwise returns how long sysmon may sleep before asking again (None:
/// until woken — no foreign thread waits, and a new wait wakes sysmon).
pub(crate) fn check() -> Option<Duration> {
    super::coarsetime::coarse_now_stale();
    if !ENABLED.load(Ordering::Relaxed) {
        return None;
    }
    // Without a foreign thread in one of our waits, some thread of the program (C main
    // at least) is doing something else, which may wake anything.
    if foreignwait::FOREIGN_WAITING.load(Ordering::SeqCst) == 0 {
        return None;
    }
    if deadlocked() {
        report();
    }
    // Not yet: a thread we cannot see into may still act. Ask again, backing off while
    // nothing changes.
    let generation = foreignwait::FOREIGN_GEN.load(Ordering::Relaxed);
    let mut ns = RECHECK_NS.load(Ordering::Relaxed);
    if RECHECK_GEN.swap(generation, Ordering::Relaxed) != generation || ns == 0 {
        ns = RECHECK_MIN_NS;
    } else {
        ns = (ns * 2).min(RECHECK_MAX_NS);
    }
    RECHECK_NS.store(ns, Ordering::Relaxed);
    Some(Duration::from_nanos(ns as u64))
}

#[cold]
fn report() -> ! {
    let mut out = Out::new(2);
    out.str("gmp: all goroutines are asleep - deadlock!\n\n");
    explain_held(&mut out);
    super::dump::dump_all(&mut out);
    out.flush();
    super::trace::flight_auto(b"deadlock");
    // stdio buffers of the program (its output so far), then exit without running
    // atexit handlers or destructors over objects that parked goroutines still use.
    // SAFETY: fflush(NULL) flushes every open stream; _exit ends the process.
    unsafe {
        libc::fflush(core::ptr::null_mut());
        libc::_exit(2)
    }
}

/// For each goroutine that is runnable but held (`held_by`), the line that says why, before
/// the dump.
fn explain_held(out: &mut Out) {
    let mut any = false;
    for g in super::proc::all_gs() {
        if g.status.load(Ordering::SeqCst) != G_RUNNABLE {
            continue;
        }
        let Some((m, lg)) = held_by(g) else { continue };
        out.str("goroutine ");
        out.dec(g.goid());
        out.str(" is runnable but bound to thread ");
        out.dec(m.tid.load(Ordering::SeqCst) as u64);
        out.str(", which goroutine ");
        out.dec(lg.goid());
        out.str(" keeps locked (gmp_lock_os_thread) while it waits: a goroutine that locks a thread other goroutines are bound to holds them until it unlocks\n");
        any = true;
    }
    if any {
        out.str("\n");
    }
}
