//! The interposer (HACKING.md, decision 13): libgmp.so exports libc's blocking functions
//! under their own unversioned names, so that under `LD_PRELOAD` — or in a program linked
//! with the library — a goroutine's blocking call parks the goroutine instead of blocking
//! its thread, in the program and in every library it uses.
//!
//! # When a hook acts
//! Only on a goroutine that holds its P (not a foreign thread, not the runtime's own
//! threads, not inside a gmp_blocking call), in a process that did not fork after the
//! runtime started, and unless `GMP_INTERPOSE=0`; never for a call ThreadSanitizer's runtime
//! makes itself (its symbolizer's files, opened and closed with TSan's locks held: a park
//! there would switch fibers under them, `rt::tsan::called_by_runtime`). Everywhere else it
//! calls libc's function (`sys::real`).
//!
//! # The contract
//! Inside a goroutine every hooked call returns what libc returns for the same arguments
//! and fd state — value, errno, partial counts, POLL* bits, timeouts — except that waiting
//! parks the goroutine instead of the thread. The hooks never change an open file's
//! O_NONBLOCK: it is shared by every fd dup'd from it, by children, and by libc's own
//! calls (stdio, sendfile), which must all see what the program set. So an fd stays as
//! blocking as the program made it, and each operation the hooks make on it is
//! non-blocking for that one call: RWF_NOWAIT for read/write/readv/writev
//! (`poll::readv_nowait`), MSG_DONTWAIT for the socket calls; accept waits for readiness
//! first; connect on a blocking socket blocks through the hand-off. A blocking write
//! writes everything (a pipe or stream socket takes it in parts, the goroutine parking
//! between them), and MSG_WAITALL waits for everything, as the kernel does for a
//! blocking call.
//!
//! # The fd state (`PollDesc::hook`, rt/netpoll.rs)
//! - `HOOK_BLOCKING`: the fd is under the poller and the program sees it blocking
//!   (O_NONBLOCK clear: the hooks never set it): read/write/… park the goroutine. Set when
//!   a goroutine creates a socket, pipe or socketpair, accepts a connection, or first
//!   blocks on a socket, FIFO or anonymous-inode fd (eventfd, epoll, timerfd) it did not
//!   create; set or cleared by fcntl(F_SETFL) and ioctl(FIONBIO) on a registered fd; copied
//!   to the new number by dup/dup2/dup3/F_DUPFD. A change of O_NONBLOCK the hooks did not
//!   see (another process sharing the file) is found before a goroutine parks: an
//!   operation that reports EAGAIN on an fd the kernel says is non-blocking returns it.
//! - registered without `HOOK_BLOCKING`: non-blocking by the user's choice (or registered
//!   through the gmp C API): calls pass straight through and return EAGAIN; poll(2) on it
//!   still parks the goroutine.
//! - `HOOK_NOPOLL`: epoll cannot watch it (a regular file, a directory, a terminal): a
//!   blocking call goes through the syscall hand-off. fds 0–2 always take the hand-off
//!   (stdio's descriptors, usually shared with the parent process).
//! - close (and dup2/dup3 onto a number) first wakes the goroutines parked on the fd with
//!   EBADF, waits for the operations in flight, and unregisters it (netpoll::close_begin),
//!   then clears the bits. A number the kernel hands out again (socket, accept, open, dup…)
//!   has its stale state dropped first (a close the hooks did not see: fclose).
//!
//! # Signals
//! A parked goroutine is not interrupted by signals: the hooks behave as with SA_RESTART,
//! also for poll, select and epoll_wait (which the kernel never restarts). The readiness
//! checks they make with a zero timeout are made again on EINTR (the runtime's own
//! preemption signal may land on the thread during one), not taken for "not ready": a
//! goroutine parked on a wrong "not ready" waits for the poller's next edge, which never
//! comes for data already there whose edge an earlier wait took.
//!
//! # Same-thread resume
//! A goroutine that may park inside a hook is bound to its M for the hook's duration
//! (`g.affm`, the M-affinity queue, rt/affinity.rs): it resumes on the thread it entered
//! on, so the errno the hook writes is the caller's, and `&errno` or `__thread` addresses
//! its compiler keeps in registers stay valid. The thread runs other goroutines meanwhile.

use core::ffi::{c_char, c_int, c_uint, c_void};
use core::sync::atomic::{AtomicI32, AtomicU8, Ordering};

use crate::poll;
use crate::poll::{offload_or_here, raw, raw_call};
use crate::rt;
use crate::rt::netpoll::{self, MODE_READ, MODE_WRITE, PollDesc, WaitError};
use crate::sys::{real, tsan};

mod descriptors;
mod fd;
mod fortify;
mod handoff;
mod io;
mod sleep;
mod wait;

use self::fd::*;
use self::handoff::*;
use self::io::*;
use self::sleep::*;
use self::wait::*;

/// `PollDesc::hook`: the program sees the fd blocking (see the module doc).
pub(crate) const HOOK_BLOCKING: u32 = 1;
/// `PollDesc::hook`: not pollable; blocking calls take the syscall hand-off.
pub(crate) const HOOK_NOPOLL: u32 = 2;
/// `PollDesc::hook`: a TCP socket a goroutine just created, never dup'd nor connected:
/// its first connect may make it non-blocking for the length of the call (`connect`).
pub(crate) const HOOK_FRESH: u32 = 4;

/// `GMP_INTERPOSE`: 0 not read yet, 1 on, 2 off (`GMP_INTERPOSE=0`).
static ENABLED: AtomicU8 = AtomicU8::new(0);

#[cold]
fn read_env() -> bool {
    // SAFETY: getenv with a NUL-terminated name; the value, if any, is a C string.
    let off = unsafe {
        let v = libc::getenv(c"GMP_INTERPOSE".as_ptr());
        !v.is_null() && *v == b'0' as c_char && *v.add(1) == 0
    };
    ENABLED.store(if off { 2 } else { 1 }, Ordering::Relaxed);
    !off
}

#[inline(always)]
fn enabled() -> bool {
    match ENABLED.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => read_env(),
    }
}

/// Whether the hook acts: the caller is a goroutine holding its P, and not TSan's runtime
/// (see the module doc).
#[inline(always)]
fn on_goroutine() -> bool {
    rt::syscall::holds_p() && !rt::os_linux::forked() && enabled() && !rt::tsan::called_by_runtime()
}

/// The process the runtime's fd state belongs to (set when the library is loaded).
static PID: AtomicI32 = AtomicI32::new(0);

/// Whether fd bookkeeping applies: the runtime's state is this process's. Not in a child
/// after fork, nor in a vfork child (which shares the parent's memory and thread pointer,
/// so the hooks cannot tell it from its parent otherwise: dup2 in it must not register the
/// child's fds in the parent's poller). One getpid system call: called only where a
/// hook is about to change fd state, or is about to act on state it found. Nor for TSan's
/// own calls: its files are none of the program's, and the waits of `close_begin` may
/// switch (a number it reuses has its stale state dropped by the next hooked call that
/// gets it, as after a close the hooks did not see).
fn live() -> bool {
    // SAFETY: getpid has no preconditions.
    !rt::os_linux::forked()
        && unsafe { libc::getpid() } == PID.load(Ordering::Relaxed)
        && !rt::tsan::called_by_runtime()
}

/// Resolves libc's functions when the library is loaded, before `main`.
#[used]
#[unsafe(link_section = ".init_array")]
static RESOLVE_AT_LOAD: extern "C" fn() = resolve_at_load;

extern "C" fn resolve_at_load() {
    // SAFETY: getpid has no preconditions.
    PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    real::init();
}

#[inline(always)]
fn errno() -> c_int {
    crate::sys::errno()
}

#[inline(always)]
fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// A result in the C convention: -1 and errno for a negative errno value.
#[inline]
fn ret(r: i64) -> isize {
    if r < 0 {
        set_errno(-r as c_int);
        -1
    } else {
        r as isize
    }
}

/// A blocking call that epoll cannot help with: through the syscall hand-off on a
/// goroutine (or a helper thread: `blocking_call`), directly elsewhere.
#[inline(always)]
fn handoff(op: &dyn Fn() -> i64) -> i64 {
    if !on_goroutine() {
        return op();
    }
    crate::ffi::boundary("interposed call", || ret(blocking_call(op)) as i64)
}

/// `handoff` for a call whose effect is tied to the calling thread (a signal mask for the
/// length of the wait): always on the caller's own thread.
#[inline(always)]
fn handoff_here(op: &dyn Fn() -> i64) -> i64 {
    if !on_goroutine() {
        return op();
    }
    crate::ffi::boundary("interposed call", || {
        let sc = rt::scope::current();
        let r = if sc.is_null() {
            raw_call(op)
        } else {
            // In a scope: its end interrupts the call, unless the call's own signal mask
            // blocks the interrupting signal.
            rt::scopecall::interruptible(sc, op, &|op| raw_call(op))
        };
        ret(r) as i64
    })
}

/// A goroutine's blocking call, as `raw_call` (its result, or -errno): on a helper thread
/// while the goroutine parks bound to its M when goroutines are bound to that M (they can
/// run meanwhile, and the call may be waiting for one of them: rt/offload.rs), else
/// through the syscall hand-off on the caller's thread.
fn blocking_call(op: &dyn Fn() -> i64) -> i64 {
    let sc = rt::scope::current();
    if !sc.is_null() {
        // In a scope: its end interrupts the call (rt/scopecall.rs).
        return rt::scopecall::interruptible(sc, op, &offload_or_here);
    }
    offload_or_here(op)
}
