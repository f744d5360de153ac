//! Blocking calls in the kernel that a scope's end interrupts (scope.rs is the scope):
//! the interposer's hand-off calls (waitpid, flock, a read of a terminal…) made by a
//! goroutine in a scope.
//!
//! The call's thread (the goroutine's M, or the helper thread offload.rs gives the call)
//! publishes itself in a [`CallWait`], armed on the scope as any wait is. A cancel, or the
//! scope's deadline (a timer: a call has no other wake-up to carry it), marks it and sends
//! the thread `interrupt_signal`, whose handler does nothing and is installed without
//! SA_RESTART, so the call returns EINTR and `interruptible` returns the scope's errno.
//! A signal that lands just before the thread enters the kernel is lost, so a marked call
//! goes on `KICKS`, and sysmon sends the signal again every round (at most 1 ms apart)
//! until the call returns.
//!
//! # Who makes each transition
//! | what | from → to | by |
//! |---|---|---|
//! | `CallWait::tid` | 0 → tid → 0 | the thread making the call, around it |
//! | `CallWait::kicked` | 0 → 1 | `kick` (the cancel, or the deadline's timer) |
//! | on `KICKS` | no → yes | `kick`, under `KICKS.lock` |
//! | on `KICKS` | yes → no | `interruptible` once the call returned and the wait is disarmed and its timer stopped |
//!
//! A kick sent to a thread that has just left the call can interrupt the next system call
//! that thread makes (an M's `epoll_wait`, which the runtime retries; or a call of the
//! program's own, which then sees EINTR): the window is the few instructions between the
//! load of `tid` and the signal.

use core::cell::Cell;
use core::ptr::null;
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use super::scope::{self, CancelWait, Scope};
use super::timer::{self, Timer};
use super::*;
use crate::sys::{Lock, Rank};

/// The signal that interrupts a member's blocking call in the kernel once its scope ends
/// (`SIGRTMAX - 2`, the one the JDK interrupts blocking I/O with): its handler does
/// nothing and is installed without SA_RESTART, so the call returns EINTR.
pub(crate) fn interrupt_signal() -> libc::c_int {
    libc::SIGRTMAX() - 2
}

/// `interrupt_signal`'s handler: `SIG_NONE` not installed yet, `SIG_BUSY` being installed,
/// `SIG_OURS` installed, `SIG_THEIRS` refused (the program has a handler of its own for
/// it: calls are then not interrupted).
static SIG_STATE: AtomicU32 = AtomicU32::new(SIG_NONE);
const SIG_NONE: u32 = 0;
const SIG_BUSY: u32 = 1;
const SIG_OURS: u32 = 2;
const SIG_THEIRS: u32 = 3;

extern "C" fn on_interrupt(_: libc::c_int) {}

/// Installs the interrupt signal's handler once; false if the program owns the signal.
fn interrupt_handler() -> bool {
    loop {
        match SIG_STATE.compare_exchange(SIG_NONE, SIG_BUSY, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break,
            Err(SIG_OURS) => return true,
            Err(SIG_THEIRS) => return false,
            Err(_) => crate::sys::osyield(),
        }
    }
    // SAFETY: sigaction with valid structures; the handler is async-signal-safe (it does
    // nothing).
    let ours = unsafe {
        let mut old: libc::sigaction = core::mem::zeroed();
        libc::sigaction(interrupt_signal(), core::ptr::null(), &mut old);
        if old.sa_sigaction != libc::SIG_DFL {
            false
        } else {
            let mut act: libc::sigaction = core::mem::zeroed();
            act.sa_sigaction = on_interrupt as extern "C" fn(libc::c_int) as usize;
            // No SA_RESTART: the interrupted call returns EINTR.
            act.sa_flags = libc::SA_ONSTACK;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(interrupt_signal(), &act, core::ptr::null_mut()) == 0
        }
    };
    SIG_STATE.store(if ours { SIG_OURS } else { SIG_THEIRS }, Ordering::Release);
    ours
}

/// A member's hand-off call in flight: the thread making it, and whether its scope ended.
struct CallWait {
    /// The thread inside the call (0: not inside). Written by that thread.
    tid: core::sync::atomic::AtomicI32,
    /// Set by the cancel (`kick`), before it signals `tid`.
    kicked: AtomicU32,
    /// Links on `KICKS` (owner: its holder) while kicked and not yet disarmed.
    next: Cell<*const CallWait>,
    prev: Cell<*const CallWait>,
    /// On `KICKS`. Written under `KICKS.lock` by `kick`; read by the caller after its
    /// disarm and timer stop, which order it after any `kick`.
    queued: Cell<bool>,
}

/// The kicked calls that may still be inside the kernel: a signal sent just before the
/// thread entered the call is lost, so sysmon sends it again every round (`rekick`)
/// until the call returns.
struct Kicks {
    lock: Lock,
    head: Cell<*const CallWait>,
}
// SAFETY: `head` and the links are touched only under `lock`.
unsafe impl Sync for Kicks {}
static KICKS: Kicks = Kicks {
    lock: Lock::new(Rank::ScopeKicks),
    head: Cell::new(null()),
};
static KICKS_PENDING: AtomicUsize = AtomicUsize::new(0);

fn signal_thread(tid: i32) {
    // SAFETY: a signal to a thread of this process; its handler does nothing.
    unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, interrupt_signal()) };
}

/// The cancel (or the deadline's timer) of a hand-off call: marks it, signals the thread
/// inside it, and queues it for sysmon's re-sends. A second call (both fired) does nothing.
unsafe fn kick(arg: usize) {
    // SAFETY: the caller disarms (under the scope's lock, which the canceller holds) and
    // takes the wait off KICKS before its frame dies.
    let cw = unsafe { &*(arg as *const CallWait) };
    if cw.kicked.swap(1, Ordering::SeqCst) != 0 {
        return;
    }
    let tid = cw.tid.load(Ordering::SeqCst);
    if tid != 0 {
        signal_thread(tid);
    }
    KICKS.lock.lock();
    let first = KICKS.head.get();
    cw.next.set(first);
    cw.prev.set(null());
    if !first.is_null() {
        // SAFETY: a queued wait is alive (lock held).
        unsafe { (*first).prev.set(cw) };
    }
    KICKS.head.set(cw);
    cw.queued.set(true);
    KICKS_PENDING.fetch_add(1, Ordering::SeqCst);
    KICKS.lock.unlock();
    sysmonwake::wake();
}

/// Whether kicked calls may still be in the kernel (sysmon then stays awake).
pub(crate) fn kicks_pending() -> bool {
    // SeqCst: sysmon's deep-sleep re-check, after its store of WAIT (`kick` increments,
    // then swaps WAIT).
    KICKS_PENDING.load(Ordering::SeqCst) != 0
}

/// Signals again every kicked call still inside the kernel (sysmon, each round).
pub(crate) fn rekick() {
    KICKS.lock.lock();
    let mut w = KICKS.head.get();
    while !w.is_null() {
        // SAFETY: queued waits are alive (lock held).
        unsafe {
            let tid = (*w).tid.load(Ordering::SeqCst);
            if tid != 0 {
                signal_thread(tid);
            }
            w = (*w).next.get();
        }
    }
    KICKS.lock.unlock();
}

/// Makes hand-off call `op` of the calling goroutine, in scope `sc`, through `run` (which
/// calls its argument once, on this thread or a helper), so that the scope's end
/// interrupts it: the thread inside gets `interrupt_signal`, the call EINTR, and this
/// returns the scope's -errno instead. `op` returns its result or -errno. Without the
/// signal (the program owns it), `run(op)` as is.
pub(crate) fn interruptible(
    sc: *const Scope,
    op: &dyn Fn() -> i64,
    run: &dyn Fn(&dyn Fn() -> i64) -> i64,
) -> i64 {
    if !interrupt_handler() {
        return run(op);
    }
    let cw = CallWait {
        tid: core::sync::atomic::AtomicI32::new(0),
        kicked: AtomicU32::new(0),
        next: Cell::new(null()),
        prev: Cell::new(null()),
        queued: Cell::new(false),
    };
    let arg = &cw as *const CallWait as usize;
    let wait = CancelWait::new(sc, kick, arg);
    // SAFETY: wait and cw live in this frame until disarmed and dequeued below.
    unsafe { scope::arm(&wait) };
    // The deadline: nothing else would end the call then.
    // SAFETY: sc is the caller's current scope, live.
    let deadline = unsafe { scope::deadline(sc) };
    let mut t = Timer::new(kick, arg);
    if deadline != i64::MAX {
        // SAFETY: on a goroutine holding its P (the interposer calls us before the
        // hand-off); t lives in this frame until stopped below.
        unsafe { timer::start(&mut t, deadline) };
    }
    let inside = || {
        cw.tid.store(crate::sys::gettid(), Ordering::SeqCst);
        // A kick that found no thread inside comes before this load (both SeqCst): the
        // call is not made; one that finds the thread signals it (again, from sysmon,
        // until the call returns).
        let r = if cw.kicked.load(Ordering::SeqCst) != 0 {
            -(libc::EINTR as i64)
        } else {
            op()
        };
        cw.tid.store(0, Ordering::SeqCst);
        r
    };
    let r = run(&inside);
    if deadline != i64::MAX {
        // SAFETY: started above; after stop returns the callback is not running.
        unsafe { timer::stop(&mut t) };
    }
    // SAFETY: armed above; after this no cancel calls kick.
    unsafe { scope::disarm(&wait) };
    if cw.queued.get() {
        KICKS.lock.lock();
        let (prev, next) = (cw.prev.get(), cw.next.get());
        if prev.is_null() {
            KICKS.head.set(next);
        } else {
            // SAFETY: queued neighbours are alive (lock held).
            unsafe { (*prev).next.set(next) };
        }
        if !next.is_null() {
            // SAFETY: as above.
            unsafe { (*next).prev.set(prev) };
        }
        KICKS_PENDING.fetch_sub(1, Ordering::SeqCst);
        KICKS.lock.unlock();
    }
    // SAFETY: sc is the caller's current scope, live.
    match unsafe { scope::err(sc) } {
        e if e != 0 && r == -(libc::EINTR as i64) => -(e as i64),
        _ => r,
    }
}

/// The scope's deadline for a wait that has no timeout of its own to carry it (a
/// semaphore's, a cond's: scope.rs's `clamp` reaches only waits with a timeout): a
/// runtime timer that calls the wait's cancel function at the deadline, as a cancel
/// would (the wait's one-winner claim makes the two, and any waker, agree). A goroutine
/// holding its P arms it; a foreign thread sleeps with the deadline instead
/// ([`foreign_sleep_scoped`]).
pub(crate) struct WaitDeadline {
    t: Timer,
    armed: bool,
}

impl WaitDeadline {
    /// A deadline that calls `f(arg)`, not armed yet.
    pub(crate) fn new(f: unsafe fn(usize), arg: usize) -> WaitDeadline {
        WaitDeadline {
            t: Timer::new(f, arg),
            armed: false,
        }
    }

    /// Arms it at `sc`'s deadline, if `sc` has one and the caller is a goroutine holding
    /// its P.
    ///
    /// # Safety
    /// `sc` is the caller's current scope; `self` stays in place, and `f(arg)` may be
    /// called, until [`WaitDeadline::stop`] returned.
    pub(crate) unsafe fn start(&mut self, sc: *const Scope) {
        // SAFETY: caller contract.
        let d = unsafe { scope::deadline(sc) };
        if d != i64::MAX && syscall::holds_p() {
            // SAFETY: on a goroutine holding its P; the timer stays in place until stop.
            unsafe { timer::start(&mut self.t, d) };
            self.armed = true;
        }
    }

    /// Disarms it; once it returns the callback is not running and will not run.
    pub(crate) fn stop(&mut self) {
        if self.armed {
            // SAFETY: started above, in place since.
            unsafe { timer::stop(&mut self.t) };
            self.armed = false;
        }
    }
}

/// A foreign thread's sleep on `note` for a wait of scope `sc` that `f(arg)` ends (its
/// cancel function, which claims the wait and wakes `note` unless a waker claimed it
/// first): at the scope's deadline the thread calls `f(arg)` itself, then sleeps on
/// until the note is woken (at once, or by the waker that won).
pub(crate) fn foreign_sleep_scoped(
    note: &crate::sys::Note,
    reason: WaitReason,
    sc: *const Scope,
    f: unsafe fn(usize),
    arg: usize,
) {
    // SAFETY: the caller's current scope is live.
    let d = unsafe { scope::deadline(sc) };
    if d != i64::MAX {
        let left = d.saturating_sub(crate::sys::nanotime());
        if left > 0 && note.sleep_foreign(Some(core::time::Duration::from_nanos(left as u64))) {
            return;
        }
        // SAFETY: f's contract: it claims the wait or finds it claimed; the wait's record
        // lives until this thread returns.
        unsafe { f(arg) };
    }
    foreignwait::foreign_sleep(note, reason);
}
