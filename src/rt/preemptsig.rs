//! How the preemption signal reaches a thread only while it runs user code.
//!
//! A signal sent with tgkill reaches a thread wherever it is. Inside a blocking system
//! call it changes the call's outcome: the kernel ends a sleeping `nanosleep`, `poll` or
//! `epoll_wait` with EINTR after any handler (SA_RESTART or not), and a pipe write or a
//! MSG_WAITALL receive that moved some bytes returns short. Go accepts this (its release
//! notes for 1.14 tell programs to retry EINTR); C code running in a goroutine does not
//! expect it, and the calls the interposer does not see (a library loaded with `dlopen`,
//! `GMP_INTERPOSE=0`, raw `syscall`) cannot retry for it. Looking first (/proc says the
//! thread is on a CPU and has not slept since the last look) narrows the window but
//! cannot close it: the thread may enter a call between the look and the signal.
//!
//! So sysmon does not send the signal itself; it arms a per-thread source that the
//! kernel fires only when the thread is in user mode:
//!
//! - **A perf software event** (`Source::Perf`): `PERF_COUNT_SW_TASK_CLOCK` on the
//!   thread with `exclude_kernel`, sampling every `PERF_PERIOD_NS` of its CPU time, one
//!   overflow allowed per arming (`PERF_EVENT_IOC_REFRESH`), the fd's owner the thread
//!   and its signal SIGURG (`F_SETOWN_EX`, `F_SETSIG`, `O_ASYNC`). The sample timer fires
//!   while the thread is on a CPU; a firing that finds it in the kernel is not an
//!   overflow. An overflow found in user mode queues the wake-up as irq work, which runs
//!   in the self-interrupt taken at the first user instruction, so the signal is pending
//!   before the thread executes anything else: it lands in user code, never in a call.
//!   The handler knows it by `si_code` `POLL_IN`/`POLL_HUP` and `si_fd`. Needs
//!   `perf_event_open` (refused under `perf_event_paranoid` 3 without CAP_PERFMON, and
//!   by some container seccomp profiles).
//! - **A thread CPU-time timer** (`Source::Timer`): a POSIX timer on the thread's
//!   `CLOCK_THREAD_CPUTIME_ID` clock, notifying the thread itself (`SIGEV_THREAD_ID`),
//!   armed to expire after 1 ns more of its CPU time. The scheduler tick sees it expire;
//!   kernels with `POSIX_CPU_TIMERS_TASK_WORK` (x86-64 and arm64 since Linux 5.10) fire
//!   it from task work on the thread's next return to user mode, after any call in
//!   progress has finished. Needs no privilege; the signal comes at the first tick that
//!   finds the thread on a CPU instead of after `PERF_PERIOD_NS`: within a tick (1–10 ms)
//!   for a thread that computes, but a thread that mostly sleeps in short calls no hook
//!   sees may not meet a tick for seconds (HACKING.md, known limits). The handler knows it by `SI_TIMER`,
//!   `si_value` = `sigpreempt::MAGIC` and the timer id.
//! - **tgkill after a look** (`Source::Tgkill`), when neither can be created: the
//!   narrowed race stays (HACKING.md, known limits).
//!
//! `GMP_DEBUG=asyncpreemptsig=N` picks one (1 perf, 2 timer, 3 tgkill; 0, the default,
//! tries them in that order). The source is chosen once per process, at the first arming.
//!
//! Each M keeps its source in `M::preemptsig`, keyed by the thread id as `M::task_fds`
//! are (a revived M has a new thread: the old source is dropped and a new one made).
//! Arming is done by sysmon, or an M stepping in for it, under `M::task_lock`; the
//! handler only reads the key to recognise the signal.

use core::sync::atomic::{AtomicI64, AtomicU8, AtomicU64, Ordering};

use super::*;

const NONE: u64 = u64::MAX;

impl PreemptSig {
    pub const fn new() -> PreemptSig {
        PreemptSig {
            key: AtomicU64::new(NONE),
            perf_id: AtomicU64::new(0),
            armed_at: AtomicI64::new(0),
        }
    }
}

impl Default for PreemptSig {
    fn default() -> Self {
        Self::new()
    }
}

/// Which source the process uses (`Source as u8`; `UNDECIDED` until the first arming).
static SOURCE: AtomicU8 = AtomicU8::new(UNDECIDED);
const UNDECIDED: u8 = 0;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(super) enum Source {
    Perf = 1,
    Timer = 2,
    Tgkill = 3,
}

/// CPU time a perf-armed thread runs in user mode before its signal (the sample period).
const PERF_PERIOD_NS: u64 = 50_000;

/// An armed source whose signal has not come for this long is armed again (a SIGURG
/// already pending when it fired merges with it, and the signal is lost).
const REARM_AFTER_NS: i64 = 20_000_000;

/// What `arm` did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Armed {
    /// Armed now: the signal comes when the thread next runs user code.
    Now,
    /// Armed recently and not fired yet (the thread sleeps in the kernel).
    Already,
    /// Another looker holds the M's lock: try at the next round.
    Busy,
    /// The process has no such source: send the signal the old way.
    Unavailable,
}

/// The source in use, deciding it on the first call.
fn source() -> Source {
    match SOURCE.load(Ordering::Acquire) {
        1 => Source::Perf,
        2 => Source::Timer,
        3 => Source::Tgkill,
        _ => {
            let forced = crate::sys::dbgvars::get(crate::sys::dbgvars::Var::Asyncpreemptsig);
            let s = match forced {
                1 => Source::Perf,
                2 => Source::Timer,
                3 => Source::Tgkill,
                // Try each on this (sysmon's) thread: the first that works.
                _ => {
                    let tid = crate::sys::gettid();
                    if let Some(fd) = perf_open(tid) {
                        close_fd(fd);
                        Source::Perf
                    } else if let Some(t) = timer_open(tid) {
                        timer_delete(t);
                        Source::Timer
                    } else {
                        Source::Tgkill
                    }
                }
            };
            // Two Ms may decide at once; both decide the same unless forced, and the
            // first store wins either way.
            match SOURCE.compare_exchange(UNDECIDED, s as u8, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => s,
                Err(_) => source(),
            }
        }
    }
}

/// Sysmon: arms M `m`'s source (thread `tid`) to signal its thread at its next user
/// code, at time `now`.
pub(super) fn arm(m: &M, tid: i32, now: i64) -> Armed {
    let src = source();
    if src == Source::Tgkill {
        return Armed::Unavailable;
    }
    if m.task_lock
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return Armed::Busy;
    }
    let r = arm_locked(m, tid, now, src);
    m.task_lock.store(false, Ordering::Release);
    r
}

fn arm_locked(m: &M, tid: i32, now: i64, src: Source) -> Armed {
    let s = &m.preemptsig;
    let mut key = s.key.load(Ordering::Relaxed);
    if key != NONE && (key >> 32) as i32 != tid {
        // A revived M: the old thread's source is dead.
        drop_source(s, key, src);
        key = NONE;
    }
    if key == NONE {
        let handle = match src {
            Source::Perf => perf_open(tid).inspect(|&fd| {
                s.perf_id
                    .store(perf_event_id(fd).unwrap_or(0), Ordering::Relaxed);
            }),
            _ => timer_open(tid),
        };
        let Some(h) = handle else {
            return Armed::Unavailable;
        };
        key = (tid as u32 as u64) << 32 | h as u32 as u64;
        s.armed_at.store(0, Ordering::Relaxed);
        s.key.store(key, Ordering::Release);
    }
    let armed = s.armed_at.load(Ordering::Relaxed);
    if armed != 0 && now - armed < REARM_AFTER_NS {
        return Armed::Already;
    }
    let h = key as u32 as i32;
    // Marked before the arming: the signal may come (and the handler unmark it) before
    // the arming call returns.
    s.armed_at.store(now, Ordering::Relaxed);
    let ok = match src {
        Source::Perf => {
            if perf_event_id(h) != Some(s.perf_id.load(Ordering::Relaxed)) {
                // The number was closed behind our back (closefrom, close_range): it may
                // be the program's now. Forget it, never close it.
                s.armed_at.store(0, Ordering::Relaxed);
                s.key.store(NONE, Ordering::Release);
                return Armed::Unavailable;
            }
            // SAFETY: ioctl on our own perf event fd (its id checked above).
            unsafe { libc::syscall(libc::SYS_ioctl, h, PERF_EVENT_IOC_REFRESH, 1usize) == 0 }
        }
        _ => {
            let its = libc::itimerspec {
                it_interval: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 1,
                },
            };
            // SAFETY: timer_settime on our own timer with a valid itimerspec.
            unsafe {
                libc::syscall(
                    libc::SYS_timer_settime,
                    h,
                    0,
                    &its as *const libc::itimerspec,
                    core::ptr::null_mut::<libc::itimerspec>(),
                ) == 0
            }
        }
    };
    if !ok {
        s.armed_at.store(0, Ordering::Relaxed);
        return Armed::Unavailable;
    }
    Armed::Now
}

/// In the SIGURG handler on M `m`'s thread: whether `info` is the signal of `m`'s armed
/// source (then it is disarmed). A perf signal carries the fd; a timer signal the timer
/// id and `sigpreempt::MAGIC`.
///
/// # Safety
/// `info` is the siginfo the kernel passed to the handler.
pub(super) unsafe fn is_ours(m: &M, info: *const libc::siginfo_t, magic: usize) -> bool {
    let s = &m.preemptsig;
    let key = s.key.load(Ordering::Acquire);
    if key == NONE {
        return false;
    }
    let raw = info as *const u8;
    // SAFETY: caller contract; the offsets are the kernel's siginfo layout on 64-bit
    // Linux: si_code at 8, then the union at 16 (SIGPOLL: si_band at 16, si_fd at 24;
    // timers: si_tid at 16, si_overrun at 20, si_value at 24).
    let (code, at16, at24) = unsafe {
        (
            *(raw.add(8) as *const i32),
            *(raw.add(16) as *const i32),
            *(raw.add(24) as *const i32),
        )
    };
    let handle = key as u32 as i32;
    let ours = match code {
        libc::SI_TIMER => magic == super::sigpreempt::MAGIC && at16 == handle,
        c if (POLL_IN..=POLL_HUP).contains(&c) => at24 == handle,
        _ => false,
    };
    if ours {
        s.armed_at.store(0, Ordering::Relaxed);
    }
    ours
}

const POLL_IN: i32 = 1;
const POLL_HUP: i32 = 6;

/// Closes or deletes a dead thread's source.
fn drop_source(s: &PreemptSig, key: u64, src: Source) {
    let h = key as u32 as i32;
    match src {
        Source::Perf => {
            if perf_event_id(h) == Some(s.perf_id.load(Ordering::Relaxed)) {
                close_fd(h);
            }
        }
        _ => timer_delete(h),
    }
    s.key.store(NONE, Ordering::Release);
}

// perf_event_open(2): the attr's first 64 bytes (PERF_ATTR_SIZE_VER0) are enough.
#[repr(C)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
const PERF_FLAG_FD_CLOEXEC: u64 = 8;
/// attr.flags bits: disabled, exclude_kernel, exclude_hv.
const ATTR_DISABLED: u64 = 1 << 0;
const ATTR_EXCLUDE_KERNEL: u64 = 1 << 5;
const ATTR_EXCLUDE_HV: u64 = 1 << 6;
/// _IO('$', 2) and _IOR('$', 7, u64).
const PERF_EVENT_IOC_REFRESH: u64 = 0x2402;
const PERF_EVENT_IOC_ID: u64 = 0x8008_2407;
const F_SETSIG: i32 = 10;
const F_SETOWN_EX: i32 = 15;
const F_OWNER_TID: i32 = 0;

/// A disabled user-mode task-clock event on thread `tid` whose overflows send SIGURG to
/// it, at a high fd number; None if the kernel refuses.
fn perf_open(tid: i32) -> Option<i32> {
    let attr = PerfEventAttr {
        type_: PERF_TYPE_SOFTWARE,
        size: core::mem::size_of::<PerfEventAttr>() as u32,
        config: PERF_COUNT_SW_TASK_CLOCK,
        sample_period: PERF_PERIOD_NS,
        sample_type: 0,
        read_format: 0,
        flags: ATTR_DISABLED | ATTR_EXCLUDE_KERNEL | ATTR_EXCLUDE_HV,
        wakeup_events: 0,
        bp_type: 0,
        config1: 0,
    };
    // SAFETY: perf_event_open with a valid attr for a thread of this process.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            tid,
            -1,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    } as i32;
    if fd < 0 {
        return None;
    }
    let high = crate::sys::dup_high(fd);
    close_fd(fd);
    if high < 0 {
        return None;
    }
    let owner: [i32; 2] = [F_OWNER_TID, tid];
    // SAFETY: fcntls on our own fd with a valid f_owner_ex; the signal first, so the
    // fd never sends SIGIO (its default action ends the process).
    let ok = unsafe {
        libc::syscall(libc::SYS_fcntl, high, F_SETOWN_EX, owner.as_ptr()) == 0
            && libc::syscall(libc::SYS_fcntl, high, F_SETSIG, libc::SIGURG) == 0
            && libc::syscall(libc::SYS_fcntl, high, libc::F_SETFL, libc::O_ASYNC) == 0
    };
    if !ok {
        close_fd(high);
        return None;
    }
    Some(high)
}

/// The id of perf event `fd`, or None if `fd` is not a perf event.
fn perf_event_id(fd: i32) -> Option<u64> {
    let mut id = 0u64;
    // SAFETY: PERF_EVENT_IOC_ID writes one u64; '$' ioctls belong to perf alone, so
    // another kind of file answers ENOTTY.
    let r = unsafe { libc::syscall(libc::SYS_ioctl, fd, PERF_EVENT_IOC_ID, &mut id as *mut u64) };
    (r == 0).then_some(id)
}

/// A disarmed POSIX timer on thread `tid`'s CPU-time clock that sends it SIGURG carrying
/// `sigpreempt::MAGIC`; its id, or None.
fn timer_open(tid: i32) -> Option<i32> {
    crate::sys::thread_cpu_timer(tid, libc::SIGURG, super::sigpreempt::MAGIC)
}

fn timer_delete(id: i32) {
    crate::sys::timer_delete(id);
}

fn close_fd(fd: i32) {
    // SAFETY: our own fd.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}
