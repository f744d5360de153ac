//! The profiling signal (Go's `sigprof` and `setThreadCPUProfiler`): per-thread CPU-time
//! timers on every M send it SIGPROF, and its handler records the interrupted stack, the
//! goroutine's id and a reference to its labels into the sample ring (profbuf.rs), which
//! the profile's writer (cpuprof.rs) drains.
//!
//! **Per-thread timers, as Go on Linux since 1.18.** Each M gets a POSIX timer on its own
//! `CLOCK_THREAD_CPUTIME_ID` clock that notifies the thread itself (`SIGEV_THREAD_ID`)
//! every `1e9/hz` ns of its CPU time. A process-wide `setitimer(ITIMER_PROF)` is simpler
//! but biased: the kernel checks it at the scheduler tick against the whole process's CPU
//! time and sends one signal to whichever thread the tick caught, so a busy process on
//! many CPUs loses samples (at most one per tick) and the threads the tick favours get
//! more. The thread timers also keep SIGPROF out of blocking calls: a thread CPU-time
//! timer expires only while its thread runs, and kernels with
//! `POSIX_CPU_TIMERS_TASK_WORK` (x86-64 since Linux 5.10) fire it on the way back to user
//! mode, after any system call in progress (preemptsig.rs relies on the same), where the
//! process-wide timer's signal can land on a thread just entering a sleep and end it with
//! EINTR. The cost: threads that are not Ms (C `main`, threads outside the runtime) are
//! not sampled; Go samples them with the process-wide timer, which we do not arm for the
//! EINTR it would bring into goroutines' C code.
//!
//! **Arming.** `enable` publishes the profile's epoch, then arms every live M; a new
//! or revived M arms itself in `mstart` (`minit`), after storing its thread id. Each side
//! stores, fences (SeqCst) and reads the other's word, so at least one of them arms the
//! M; an M armed twice keeps one timer (`M::proftimer` is swapped, and the loser's timer
//! deleted). `disable` clears the epoch, then disarms every M; an M that armed itself
//! with an epoch that has ended meanwhile disarms itself again, and arms again if a newer
//! profile began (whose `enable` its swap may have disarmed). A new thread that sees no
//! profile deletes only its M's previous thread's timer, never one a racing `enable` made
//! for it. The loom model is `sigprof_loom.rs`.
//!
//! **The handler** is async-signal-safe: it reads atomics, the TLS slot and the
//! interrupted context, walks the frame-pointer chain with `sys::read_unfaulting` (a bad
//! frame pointer ends the walk instead of faulting), and takes a reference to the
//! goroutine's label set with one atomic increment (releasing one may free the set, which
//! a handler must not do: the writer gives the references back). A sample lands on a
//! goroutine when the interrupted stack pointer is inside the stack of the M's current
//! goroutine; otherwise it is the M's own (the scheduler), without id or labels.
//!
//! **A program's own SIGPROF handler** is never replaced: `install` refuses (EBUSY) while
//! one is installed, or while the process-wide profiling timer runs (another profiler,
//! such as gperftools, uses both). Ours, once installed, stays (a signal of a timer being
//! deleted may still be pending), and ignores SIGPROFs that are not ours or that arrive
//! while no profile runs.

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering, fence};

use super::profbuf::ProfBuf;
use super::*;

/// Most frames a sample keeps (Go's `maxCPUProfStack`).
pub(crate) const MAX_STACK: usize = 64;

/// Words of a sample record: `epoch << 32 | frames`, the goroutine id (0: none), the
/// label set (a reference the writer gives back; 0: none), then the frames (the
/// interrupted PC, then return addresses).
pub(crate) const REC_WORDS: usize = 3 + MAX_STACK;

/// Records the ring holds: ~350 KiB, ten seconds of one thread at 50 Hz, or a writer's
/// 100 ms drain interval for 50 threads at 100 Hz.
const RING: usize = 512;

pub(crate) type Buf = ProfBuf<RING, REC_WORDS>;

/// The ring, allocated by the first profile and never freed (a late handler may still
/// write into it).
static BUF: AtomicPtr<Buf> = AtomicPtr::new(core::ptr::null_mut());

/// The running profile's epoch (0: none runs). Nonzero after `BUF` is set.
static EPOCH: AtomicU32 = AtomicU32::new(0);

/// The sampling period of the running profile, in ns of a thread's CPU time.
static PERIOD_NS: AtomicU64 = AtomicU64::new(0);

/// Samples dropped because the ring was full (Go's profBuf overflow count).
static LOST: AtomicU64 = AtomicU64::new(0);

/// Our handler is installed.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// `si_value` of our timers' signals ("gmp prof").
const MAGIC: usize = 0x676d_7020_7072_6f66;

/// The ring (allocating it on the first call). Not from a signal handler.
pub(crate) fn buf() -> &'static Buf {
    let b = BUF.load(Ordering::Acquire);
    if !b.is_null() {
        // SAFETY: published once, never freed.
        return unsafe { &*b };
    }
    let new = Box::into_raw(Box::new(Buf::new()));
    match BUF.compare_exchange(
        core::ptr::null_mut(),
        new,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        // SAFETY: just published; never freed.
        Ok(_) => unsafe { &*new },
        Err(cur) => {
            // SAFETY: ours, never published.
            drop(unsafe { Box::from_raw(new) });
            // SAFETY: published once, never freed.
            unsafe { &*cur }
        }
    }
}

/// Samples the ring dropped since the last call.
pub(crate) fn take_lost() -> u64 {
    LOST.swap(0, Ordering::Relaxed)
}

/// Installs the SIGPROF handler unless the program has a SIGPROF handler or a running
/// `ITIMER_PROF` of its own. Err(EBUSY) then.
pub(crate) fn install() -> Result<(), i32> {
    // SAFETY: plain queries and an install of a handler on valid structs.
    unsafe {
        let mut it: libc::itimerval = core::mem::zeroed();
        if libc::getitimer(libc::ITIMER_PROF, &mut it) == 0
            && (it.it_value.tv_sec != 0 || it.it_value.tv_usec != 0)
        {
            return Err(libc::EBUSY);
        }
        let mut cur: libc::sigaction = core::mem::zeroed();
        libc::sigaction(libc::SIGPROF, core::ptr::null(), &mut cur);
        let ours = on_sigprof as *const () as usize;
        if cur.sa_sigaction == ours && INSTALLED.load(Ordering::Relaxed) {
            return Ok(());
        }
        if cur.sa_sigaction != libc::SIG_DFL && cur.sa_sigaction != libc::SIG_IGN {
            return Err(libc::EBUSY);
        }
        let mut act: libc::sigaction = core::mem::zeroed();
        act.sa_sigaction = ours;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        libc::sigemptyset(&mut act.sa_mask);
        if libc::sigaction(libc::SIGPROF, &act, core::ptr::null_mut()) != 0 {
            return Err(crate::sys::errno());
        }
    }
    INSTALLED.store(true, Ordering::Relaxed);
    Ok(())
}

/// Starts sampling every M every `period_ns` of its CPU time for profile `epoch` (not 0).
/// The ring must exist (`buf`).
pub(crate) fn enable(epoch: u32, period_ns: u64) {
    PERIOD_NS.store(period_ns, Ordering::Relaxed);
    EPOCH.store(epoch, Ordering::SeqCst);
    // Pairs with `minit`'s fence: an M whose thread id we miss sees the epoch.
    fence(Ordering::SeqCst);
    for_each_m(|m| {
        let tid = m.tid.load(Ordering::Relaxed);
        if tid != 0 && !m.dead.load(Ordering::Acquire) {
            arm(m, tid, epoch);
        }
    });
}

/// Stops sampling: no handler records from now on, and every M's timer is deleted.
pub(crate) fn disable() {
    EPOCH.store(0, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    for_each_m(disarm);
}

/// On M `m`'s new thread (`mstart`), after its thread id is stored: arms its timer if a
/// profile runs, dropping the timer of the thread it had before (a revived M).
pub(super) fn minit(m: &M) {
    // Pairs with `enable`'s fence (see the module doc, "Arming").
    fence(Ordering::SeqCst);
    let epoch = EPOCH.load(Ordering::SeqCst);
    let tid = m.tid.load(Ordering::Relaxed);
    if epoch != 0 {
        arm(m, tid, epoch);
        return;
    }
    // The timer of the thread this M had before goes. One for this thread stays: an
    // `enable` that began after our look at EPOCH found our tid and armed it.
    let old = m.proftimer.load(Ordering::SeqCst);
    if old != 0
        && (old >> 32) as u32 != tid as u32
        && m.proftimer
            .compare_exchange(old, 0, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    {
        timer_delete(old);
    }
}

fn for_each_m(mut f: impl FnMut(&M)) {
    let mut cur = SCHED.allm.load(Ordering::Acquire);
    while !cur.is_null() {
        // SAFETY: Ms are never freed; allm is append-only.
        let m = unsafe { &*cur };
        f(m);
        cur = m.alllink.load(Ordering::Acquire);
    }
}

/// Gives M `m` (thread `tid`) a running timer for profile `epoch`.
fn arm(m: &M, tid: i32, mut epoch: u32) {
    loop {
        let Some(id) = timer_open(tid, PERIOD_NS.load(Ordering::Relaxed)) else {
            return;
        };
        let word = ((tid as u32 as u64) << 32) | (id as u32 as u64 + 1);
        let old = m.proftimer.swap(word, Ordering::SeqCst);
        if old != 0 {
            timer_delete(old);
        }
        let now = EPOCH.load(Ordering::SeqCst);
        if now == epoch {
            return;
        }
        // The profile ended, or ended and began again, while we armed: take ours back.
        // Someone who replaced it meanwhile (`disable`, or an `arm` for the newer profile)
        // owns the word now and makes this check itself.
        if m.proftimer
            .compare_exchange(word, 0, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        timer_delete(word);
        if now == 0 {
            return;
        }
        // A newer profile's `enable` may have armed this M before our swap deleted its
        // timer: arm again, for it.
        epoch = now;
    }
}

fn disarm(m: &M) {
    let old = m.proftimer.swap(0, Ordering::SeqCst);
    if old != 0 {
        timer_delete(old);
    }
}

/// A running timer on thread `tid`'s CPU-time clock that sends it SIGPROF carrying `MAGIC`
/// every `period_ns` of its CPU time; its id, or None.
fn timer_open(tid: i32, period_ns: u64) -> Option<i32> {
    let id = crate::sys::thread_cpu_timer(tid, libc::SIGPROF, MAGIC)?;
    let ts = libc::timespec {
        tv_sec: (period_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (period_ns % 1_000_000_000) as libc::c_long,
    };
    let spec = libc::itimerspec {
        it_interval: ts,
        it_value: ts,
    };
    // SAFETY: our own timer; a valid itimerspec.
    let r = unsafe {
        libc::syscall(
            libc::SYS_timer_settime,
            id,
            0,
            &spec as *const libc::itimerspec,
            core::ptr::null_mut::<libc::itimerspec>(),
        )
    };
    if r != 0 {
        crate::sys::timer_delete(id);
        return None;
    }
    Some(id)
}

/// Deletes the timer of an `M::proftimer` word (not 0).
fn timer_delete(word: u64) {
    // A pending signal of it is ignored by the handler.
    crate::sys::timer_delete((word as u32).wrapping_sub(1) as i32);
}

/// The SIGPROF handler (module doc). Async-signal-safe.
extern "C" fn on_sigprof(_sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: errno is this thread's; the handler must leave it as it found it.
    let saved_errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo and the interrupted context to an
    // SA_SIGINFO handler.
    unsafe { sigprof(info, ctx as *const libc::ucontext_t) };
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
}

/// Records one sample of the interrupted context `uc` (Go's `sigprof` + `cpuprof.add`).
///
/// # Safety
/// In the SIGPROF handler, with the kernel's `info` and `uc`.
unsafe fn sigprof(info: *const libc::siginfo_t, uc: *const libc::ucontext_t) {
    // Acquire: pairs with `buf`'s publication, which happens before the epoch's.
    let epoch = EPOCH.load(Ordering::Acquire);
    if epoch == 0 {
        return;
    }
    // SAFETY: caller contract.
    let ours = unsafe {
        (*info).si_code == libc::SI_TIMER && (*info).si_value().sival_ptr as usize == MAGIC
    };
    let m = getm();
    let b = BUF.load(Ordering::Acquire);
    if !ours || m.is_null() || b.is_null() {
        return;
    }
    // SAFETY: a non-null TLS slot is this thread's M (never freed); the ring is never
    // freed; `uc` is the interrupted context (caller contract).
    let (m, b, pc, sp, fp) = unsafe {
        (
            &*m,
            &*b,
            crate::arch::ctx_pc(uc),
            crate::arch::ctx_sp(uc),
            crate::arch::ctx_fp(uc),
        )
    };
    let gp = m.curg.load(Ordering::Relaxed);
    // The goroutine's stack, if the signal interrupted it (not the M's g0 code).
    let mut on_g = None;
    if !gp.is_null() {
        // SAFETY: the M's current G (Gs are never freed). Its stack changes only on this
        // thread (the G's start and end, on g0), which the signal interrupted: the field
        // is as this thread left it. A G whose stack was just given up (gp on g0 in
        // goexit0) fails the bound check, since sp is then on g0's stack.
        let g = unsafe { &*gp };
        // SAFETY: as above.
        if let Some(st) = unsafe { (*g.stack.ptr()).as_ref() }
            && sp >= st.lo()
            && sp < st.top()
        {
            on_g = Some((g, st.lo(), st.top()));
        }
    }
    let pushed = b.push(|r| {
        let (lo, hi) = match on_g {
            Some((g, lo, hi)) => {
                r[1] = g.goid();
                // SAFETY: on g's M, interrupting g itself: its set is alive (the only
                // thread that drops it is this one, and only on g0; a replacement
                // stores the new set before it releases the old one).
                r[2] = unsafe { labels::retained_of(g) } as u64;
                (lo, hi)
            }
            None => (0, usize::MAX),
        };
        let n = walk(pc, fp, lo, hi, &mut r[3..]);
        r[0] = (u64::from(epoch) << 32) | n as u64;
    });
    if !pushed {
        LOST.fetch_add(1, Ordering::Relaxed);
    }
}

/// Fills `out` with `pc` and the return addresses of the frame-pointer chain from `fp`,
/// staying inside `[lo, hi)`; returns how many. Reads without faulting.
fn walk(pc: usize, mut fp: usize, lo: usize, hi: usize, out: &mut [u64]) -> usize {
    out[0] = pc as u64;
    let mut n = 1;
    while n < out.len() {
        // Any word may be garbage (code without frame pointers uses rbp as it likes): no
        // arithmetic on it may overflow.
        if fp == 0 || fp < lo || fp > hi.saturating_sub(16) || fp & 7 != 0 {
            break;
        }
        let mut w = [0u8; 16];
        if !crate::sys::read_unfaulting(fp, &mut w) {
            break;
        }
        let next = usize::from_ne_bytes(w[..8].try_into().unwrap_or([0; 8]));
        let ret = usize::from_ne_bytes(w[8..].try_into().unwrap_or([0; 8]));
        if ret == 0 {
            break;
        }
        out[n] = ret as u64;
        n += 1;
        if next <= fp {
            break;
        }
        fp = next;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn frame_pointer() -> usize {
        crate::arch::frame_pointer()
    }

    #[test]
    fn walk_follows_our_own_frames_and_stops_on_garbage() {
        let mut out = [0u64; MAX_STACK];
        let n = walk(0x1234, frame_pointer(), 0, usize::MAX, &mut out);
        assert!(n >= 3, "only {n} frames");
        assert_eq!(out[0], 0x1234);
        assert_eq!(walk(1, 8, 0, usize::MAX, &mut out), 1);
        assert_eq!(walk(1, usize::MAX - 7, 0, usize::MAX, &mut out), 1);
        assert_eq!(walk(1, 0x7fff_0000_1233, 0, usize::MAX, &mut out), 1);
    }
}
