//! Asynchronous preemption (Go's preempt.go + signal_unix.go `doSigPreempt`): a goroutine
//! that runs C code calling nothing of ours for a whole time slice is stopped by a signal.
//!
//! - sysmon marks a P whose goroutines have run `FORCE_PREEMPT_NS` on one slice
//!   (`P::preempt`, the cooperative request) and arms the P's M to get SIGURG when its
//!   thread next runs user code (`preempt_m`; preemptsig.rs: a perf event or a CPU-time
//!   timer, never a signal inside a system call), unless the user replaced our handler.
//!   Without either source it sends the signal itself (`rt_tgsigqueueinfo`, `SI_QUEUE`,
//!   `MAGIC`) to a thread /proc shows computing.
//! - The handler (`on_sigurg`, on the M's alternate signal stack, installed with
//!   SA_RESTART so interrupted restartable syscalls resume) accepts only a safe point:
//!   the request is still current (the M's P is marked and its goroutine RUNNING), the
//!   interrupted PC is in none of libc, ld.so, the vDSO, libgcc_s, libstdc++, libpthread or
//!   libgmp itself (their executable segments, gathered with `dl_iterate_phdr` and
//!   refreshed by sysmon when the set of loaded objects changes), and the goroutine's
//!   stack has room for the saved state. Then it pushes the interrupted PC below the red
//!   zone and points the PC at `arch::__gmp_async_preempt`, which saves every register and
//!   the XSAVE state and calls `async_preempt_park`. Otherwise it returns; sysmon asks
//!   again at its next round.
//! - `async_preempt_park` locks the goroutine to its M for this one stop
//!   (`park::gopreempt_bound`, `g.asyncbound`: the C code it was running may hold `&errno`
//!   or TLS addresses in registers, HACKING.md decision 8, and may hold a pthread mutex or be halfway
//!   through thread-local state) and preempts it (`PREEMPT`): it goes to the global run
//!   queue, the M hands its P off and runs nothing else until the goroutine resumes on it
//!   (`stoplockedm`/`startlockedm`), and `execute` then drops the lock.
//! - Signals that are not ours go to the handler the program had installed before the
//!   runtime started (chained, as Go does for signals it shares).
//!
//! `GMP_DEBUG=asyncpreemptoff=1` turns the signal off (Go's name); the cooperative request
//! stays, and so does the handler, for unseen blocking calls (unseen.rs).

use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::sigpreempt::*;
use super::taskfile::{TaskFile, read_task_file};
use super::*;
use crate::arch;

/// `GMP_DEBUG=asyncpreemptstress=1` (tests): sysmon asks for preemption every round
/// (20 µs) whatever the slice, so that a test sees thousands of preemptions a second.
pub(super) static STRESS: AtomicBool = AtomicBool::new(false);

/// Counters for `gmp_stats`.
pub static SIGNALS: AtomicU64 = AtomicU64::new(0);
pub static DONE: AtomicU64 = AtomicU64::new(0);
/// Refusals: the request was stale (the goroutine had moved on), the PC was in a
/// library we must not interrupt (or in the runtime) or in a signal handler of the
/// program's, the stack had no room; and signals
/// not sent because the thread was blocked in the kernel.
pub static REFUSED_STALE: AtomicU64 = AtomicU64::new(0);
pub static REFUSED_LIB: AtomicU64 = AtomicU64::new(0);
pub static REFUSED_STACK: AtomicU64 = AtomicU64::new(0);
pub static SKIPPED_BLOCKED: AtomicU64 = AtomicU64::new(0);
/// Unseen blocking calls diverted into `__gmp_async_syscall` (unseen.rs).
pub static DONE_UNSEEN: AtomicU64 = AtomicU64::new(0);

/// The action the program had for SIGURG before ours (chained to for signals not ours).
static mut OLD_ACTION: core::mem::MaybeUninit<libc::sigaction> = core::mem::MaybeUninit::zeroed();

/// Sets up asynchronous preemption (from `init_once`): unless `GMP_DEBUG` has
/// `asyncpreemptoff=1`, or the CPU has no XSAVE.
pub(super) fn init() {
    use crate::sys::dbgvars::{Var, get};
    // No handler under valgrind and ThreadSanitizer: valgrind reports the handler's writes
    // below the stack pointer; TSan runs handlers late, not on the interrupted context.
    // `asyncpreemptoff=1` keeps the handler for unseen.rs and sends no preemption signal.
    let off = get(Var::Asyncpreemptoff) != 0;
    let no_handler = crate::stack::running_on_valgrind() || super::tsan::on();
    STRESS.store(get(Var::Asyncpreemptstress) != 0, Ordering::Relaxed);
    if no_handler || !arch::async_preempt_init(async_preempt_park, unseen::wrapped) {
        return;
    }
    refresh_ranges(true);
    // SAFETY: plain sigaction calls on valid structs; OLD_ACTION is written once, here,
    // before the handler that reads it is installed.
    unsafe {
        let old = &raw mut OLD_ACTION;
        libc::sigaction(libc::SIGURG, core::ptr::null(), (*old).as_mut_ptr());
        let mut act: libc::sigaction = core::mem::zeroed();
        act.sa_sigaction = on_sigurg as *const () as usize;
        HANDLER.store(act.sa_sigaction, Ordering::Relaxed);
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        libc::sigemptyset(&mut act.sa_mask);
        if libc::sigaction(libc::SIGURG, &act, null_mut()) != 0 {
            return;
        }
    }
    HANDLER_ON.store(true, Ordering::Release);
    ENABLED.store(!off, Ordering::Release);
}

/// Whether thread `tid` of this process is on a CPU or runnable ('R' in its stat), as
/// opposed to asleep in the kernel, where a signal would only interrupt its call.
fn thread_running(m: &M, tid: i32) -> bool {
    let mut buf = [0u8; 512];
    let Some(n) = read_task_file(m, tid, TaskFile::Stat, &mut buf) else {
        return false;
    };
    let s = &buf[..n];
    // "pid (comm) S ...": the state follows the last ')'.
    match s.iter().rposition(|&b| b == b')') {
        Some(i) if i + 2 < s.len() => s[i + 2] == b'R',
        _ => false,
    }
}

/// Whether thread `tid` (of M `m`) has not slept in the kernel since the last look (its
/// voluntary context switches did not change), and records this look. A signal that
/// reaches a thread inside a system call changes the call's outcome (a pipe write or a
/// MSG_WAITALL receive ends short, a nanosleep or poll returns EINTR): a thread seen
/// runnable at one instant may be about to sleep in the kernel again (woken by the same
/// event that woke sysmon), but one that has not slept since the last look, a few
/// milliseconds ago (`look`, halfway through the slice), is computing. The first look at
/// an M only records.
fn computing(m: &M, tid: i32) -> bool {
    let Some(n) = voluntary_switches(m, tid) else {
        return true;
    };
    let prev = m.vcsw_seen[0].swap(n, Ordering::Relaxed);
    let had = m.vcsw_seen[1].swap(1, Ordering::Relaxed);
    had != 0 && prev == n
}

/// Sysmon, halfway through a long slice on `p`: records its thread's voluntary context
/// switches for `preempt_m`'s look at the end of the slice.
pub(super) fn look(p: &P) {
    let m = p.m.load(Ordering::Acquire);
    if m.is_null() || !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: Ms are never freed.
    let m = unsafe { &*m };
    let tid = m.tid.load(Ordering::Relaxed);
    if tid != 0 {
        computing(m, tid);
    }
}

/// Thread `tid`'s voluntary context switches (its /proc status): how many times it slept.
fn voluntary_switches(m: &M, tid: i32) -> Option<u64> {
    let mut buf = [0u8; 2048];
    let n = read_task_file(m, tid, TaskFile::Status, &mut buf)?;
    const KEY: &[u8] = b"\nvoluntary_ctxt_switches:";
    let s = &buf[..n];
    let at = s.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let mut digits = s[at..]
        .iter()
        .skip_while(|b| b.is_ascii_whitespace())
        .take_while(|b| b.is_ascii_digit())
        .peekable();
    digits.peek()?;
    Some(digits.fold(0u64, |v, &d| {
        v.wrapping_mul(10).wrapping_add((d - b'0') as u64)
    }))
}

/// Asks the M running `p` to stop its goroutine now (Go's preemptM), for
/// `preemptone`: on sysmon's thread, or on an M without a P stepping in for an
/// overdue timer (then `refresh_ranges` may run on two threads at once: each publishes a
/// whole table of the same objects, and the tables are never freed).
pub(super) fn preempt_m(p: &P) {
    if !ENABLED.load(Ordering::Acquire) {
        return;
    }
    let m = p.m.load(Ordering::Acquire);
    if m.is_null() {
        return;
    }
    // SAFETY: Ms are never freed.
    let (tid, dead) = unsafe {
        (
            (*m).tid.load(Ordering::Relaxed),
            (*m).dead.load(Ordering::Relaxed),
        )
    };
    if tid == 0 || dead {
        return;
    }
    // SAFETY: Ms are never freed.
    let m = unsafe { &*m };
    if !handler_still_ours() {
        return;
    }
    match preemptsig::arm(m, tid, crate::sys::nanotime()) {
        preemptsig::Armed::Now => {
            SIGNALS.fetch_add(1, Ordering::Relaxed);
            return;
        }
        preemptsig::Armed::Already | preemptsig::Armed::Busy => return,
        preemptsig::Armed::Unavailable => {}
    }
    // No source that fires in user code only: signal now, if the thread looks as if it
    // computes (preemptsig.rs: the race this leaves).
    if !computing(m, tid) || !thread_running(m, tid) {
        SKIPPED_BLOCKED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if signal_m(tid, MAGIC) {
        SIGNALS.fetch_add(1, Ordering::Relaxed);
    }
}

/// The SIGURG handler (see the module doc). Async-signal-safe: atomics, the TLS slot, and
/// the interrupted context.
extern "C" fn on_sigurg(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: errno is this thread's; the handler must leave it as it found it.
    let saved_errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let (magic, queued) = unsafe {
        match (*info).si_code {
            libc::SI_QUEUE if (*info).si_pid() == libc::getpid() => {
                ((*info).si_value().sival_ptr as usize, true)
            }
            libc::SI_TIMER => ((*info).si_value().sival_ptr as usize, false),
            _ => (0, false),
        }
    };
    let m = getm();
    // SAFETY: a non-null TLS slot is this thread's M; info as above.
    let from_source = !m.is_null() && unsafe { preemptsig::is_ours(&*m, info, magic) };
    if from_source || (magic == MAGIC && queued) {
        // SAFETY: ctx is the interrupted context the kernel passes.
        unsafe { try_preempt(ctx as *mut libc::ucontext_t) };
    } else if magic == MAGIC {
        // A timer of ours whose thread is gone (its M has a new one): nobody's.
        REFUSED_STALE.fetch_add(1, Ordering::Relaxed);
    } else if magic == MAGIC_UNSEEN && queued {
        // SAFETY: a non-null TLS slot is this thread's M; ctx as above.
        if !m.is_null() && unsafe { unseen::divert(&*m, ctx as *mut libc::ucontext_t) } {
            DONE_UNSEEN.fetch_add(1, Ordering::Relaxed);
        }
    } else {
        forward(sig, info, ctx);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
}

/// Passes a SIGURG that is not ours to the program's own handler, if it had one.
fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: OLD_ACTION was written before our handler was installed and never since.
    #[allow(clippy::deref_addrof)]
    let old = unsafe { (*(&raw const OLD_ACTION)).assume_init_ref() };
    let h = old.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        return; // SIGURG's default is to ignore it
    }
    // SAFETY: the program installed this handler for SIGURG with these flags.
    unsafe {
        if old.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                core::mem::transmute(h);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(libc::c_int) = core::mem::transmute(h);
            f(sig);
        }
    }
}

/// Diverts the interrupted goroutine into the trampoline if this is a safe point.
///
/// # Safety
/// In the SIGURG handler, with the interrupted context.
unsafe fn try_preempt(uc: *mut libc::ucontext_t) {
    let m = getm();
    if m.is_null() {
        REFUSED_STALE.fetch_add(1, Ordering::Relaxed);
        return;
    }
    // SAFETY: m is this thread's M; the fields read here are written by this thread (which
    // the signal interrupted in user code) or are atomics.
    unsafe {
        let gp = (*m).curg.load(Ordering::Relaxed);
        let pp = (*m).p.load(Ordering::Relaxed);
        if gp.is_null()
            || pp.is_null()
            || (*gp).status.load(Ordering::Relaxed) != G_RUNNING
            || !(*pp).preempt.load(Ordering::Relaxed)
        {
            REFUSED_STALE.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let pc = arch::ctx_pc(uc);
        let sp = arch::ctx_sp(uc);
        // Inside a handler of the program's own (its signal is blocked while it runs),
        // which may have interrupted the runtime holding a lock or halfway through a
        // state change: its PC says nothing about the code below it.
        if excluded_pc(pc) || os_linux::blocks_more_than_ms(&(*uc).uc_sigmask) {
            REFUSED_LIB.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // Not on its own stack (C code switched stacks), too close to the guard, or (on
        // aarch64) a register state the trampoline cannot carry.
        if !room_on_stack(&*gp, sp) || !arch::can_divert(uc) {
            REFUSED_STACK.fetch_add(1, Ordering::Relaxed);
            return;
        }
        arch::divert_preempt(uc);
    }
    DONE.fetch_add(1, Ordering::Relaxed);
}

/// Called by the trampoline, on the goroutine's stack in ordinary (not signal) context,
/// with every register saved: stop the goroutine here until it is scheduled again, on
/// this same thread.
extern "C" fn async_preempt_park() {
    // SAFETY: the trampoline runs on the goroutine the handler interrupted, on its M,
    // which holds a P (try_preempt checked).
    unsafe { park::gopreempt_bound(getm()) };
}

/// Asks the M running `p` to stop its goroutine (Go's preemptone): the mark
/// (`P::preempt`), honoured at the goroutine's next safe point or pass through the
/// scheduler, and the signal, for code that reaches no safe point (preempt.rs). By sysmon
/// at the end of a slice (`retake`), and by whoever steps in for a timer the P has left
/// due (`run_busy_overdue`).
pub(super) fn preemptone(p: &P) {
    if !p.preempt.swap(true, Ordering::Relaxed) {
        SCHED.preempt_requests.fetch_add(1, Ordering::Relaxed);
    }
    preempt_m(p);
}
