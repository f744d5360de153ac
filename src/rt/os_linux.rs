//! What the runtime's threads start with, and the process events the runtime cannot
//! survive (Go's os_linux.go `minit`, and its fork handling).
//!
//! # A clean state for every M (`minit`)
//!
//! `pthread_create` clones the creating thread's signal mask, CPU affinity and name. The
//! first Ms are created by whatever thread first starts goroutines — C `main`, a Python
//! thread — which may have blocked SIGINT (to `sigwait` for it elsewhere), confined
//! itself to one CPU, or renamed itself; every M would inherit that, and GOMAXPROCS=N
//! could end up on one CPU. So each M resets its own state when it starts, before it runs
//! anything: the signal mask of the thread that started the runtime (`INIT_SIGMASK`, read
//! by its first gmp call), less the signals the runtime needs (`ESSENTIAL`: SIGURG for
//! preemption, and the synchronous ones, which the stack-overflow handler catches) — as
//! Go honours the mask a program starts with, so that a C program that blocked SIGTERM
//! or SIGCHLD in `main` for a `sigwait` thread or a signalfd, before starting goroutines,
//! still gets them there and not on an M (an M with an empty mask would take such a
//! signal, and its default action would kill the process) — the affinity the
//! process had when the library was loaded (`PROCESS_CPUS`, read by a constructor before
//! `main`, so `taskset` applies and a later change by `main` does not), and the name
//! `gmp-m<id>`. Resetting in the new thread covers every creator (foreign threads,
//! other Ms, sysmon, the template thread) at the cost of three system calls per thread
//! created; what a reset cannot undo (namespaces, credentials changed by a locked
//! goroutine) is why locked threads still never create Ms (the template thread,
//! lockosthread.rs). Rejected: creating every M from the template thread — a wakep from
//! C main would wait for another thread's pthread_create, and the template thread is
//! itself created by some thread.
//!
//! # pthread_exit in a goroutine
//!
//! It unwinds (or jumps) off the goroutine's stack and ends the M's thread: the goroutine
//! and the P it held would be lost without a word (a hang at GOMAXPROCS=1). Each M's
//! thread carries a pthread key whose destructor runs when the thread exits; an M that
//! exits through `mexit` is `dead` by then. A goroutine locked to its thread
//! (LockOSThread) that ends it is taken as exiting locked, as Go would end it: the
//! goroutine is done, its P goes to another M, the M is dead (CPython's finalization
//! ends the threads of Python goroutines this way). Any other exit aborts naming the
//! goroutine. The key and its destructor are the M's life's, in mstart.rs (`EXIT_KEY`,
//! `thread_exit_guard`).
//!
//! # fork
//!
//! Only the forking thread survives in the child; the runtime's threads, its goroutines
//! and the locks they held do not. A child that calls into the runtime would wait for
//! threads that do not exist, so once the runtime has started a `pthread_atfork` child
//! handler marks the process `FORKED`, and every C API entry (`ffi::boundary`) aborts
//! there with a message. A child that only execs (fork + exec from a goroutine) never
//! calls in. (Rejected: a fresh runtime in the child — every static (allp, allm, the
//! stack pool, the semaphore table, timers) would have to be rebuilt while possibly
//! locked by a thread that no longer exists.)

use core::ffi::c_int;
use core::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use super::*;

/// The CPUs the process may run on, as they were when the library was loaded.
static PROCESS_CPUS: OnceLock<libc::cpu_set_t> = OnceLock::new();

/// The signal mask every M starts with: the mask of the thread that started the runtime,
/// without `ESSENTIAL` (set by `init`).
static INIT_SIGMASK: OnceLock<libc::sigset_t> = OnceLock::new();

/// Signals an M never blocks: preemption's, and the synchronous ones (blocking those is
/// undefined, and a stack overflow must reach its handler).
const ESSENTIAL: [c_int; 7] = [
    libc::SIGURG,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGTRAP,
    libc::SIGSYS,
];

/// Runs `capture_process_cpus` when the library is loaded (before `main` for a program
/// linked with it or preloading it; at `dlopen` otherwise).
#[used]
#[unsafe(link_section = ".init_array")]
static CAPTURE_AT_LOAD: extern "C" fn() = capture_process_cpus;

extern "C" fn capture_process_cpus() {
    process_cpus();
}

/// The process's CPU set (see `PROCESS_CPUS`); read now if the constructor did not run.
fn process_cpus() -> &'static libc::cpu_set_t {
    PROCESS_CPUS.get_or_init(|| {
        // SAFETY: cpu_set_t is plain data; sched_getaffinity fills at most its size.
        unsafe {
            let mut set: libc::cpu_set_t = core::mem::zeroed();
            if libc::sched_getaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0
                || libc::CPU_COUNT(&set) == 0
            {
                // Unknown: leave the threads' affinity alone (an empty set means "skip").
                set = core::mem::zeroed();
            }
            set
        }
    })
}

/// CPUs the process may run on (at least 1): the mask read when the library was loaded.
pub fn num_cpu() -> i32 {
    // SAFETY: CPU_COUNT reads a valid cpu_set_t.
    (unsafe { libc::CPU_COUNT(process_cpus()) } as i32).max(1)
}

/// Set in a child process forked after the runtime started.
static FORKED: AtomicBool = AtomicBool::new(false);

/// Runtime start-up (from `init_once`, before any M exists): the CPUs, the signal mask the
/// Ms start with, and the fork handler.
pub(super) fn init() {
    process_cpus();
    INIT_SIGMASK.get_or_init(|| {
        // SAFETY: sigset_t is plain data; pthread_sigmask with a null set only reads this
        // thread's mask.
        unsafe {
            let mut set: libc::sigset_t = core::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::pthread_sigmask(libc::SIG_SETMASK, core::ptr::null(), &mut set);
            for sig in ESSENTIAL {
                libc::sigdelset(&mut set, sig);
            }
            set
        }
    });
    // SAFETY: registers a handler that only stores to an atomic (async-signal-safe, as a
    // child handler of a multithreaded process must be). The library is never unloaded
    // (-z nodelete), so the handler stays valid.
    if unsafe { libc::pthread_atfork(None, None, Some(fork_child)) } != 0 {
        throw("pthread_atfork failed");
    }
}

extern "C" fn fork_child() {
    FORKED.store(true, Ordering::Relaxed);
    crate::sys::set_quick_off();
}

/// Whether this process is a child forked after the runtime started.
#[inline]
pub fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

/// Aborts a call into the runtime from a forked child (see the module doc).
#[cold]
pub fn throw_forked(api: &str) -> ! {
    let mut buf = [0u8; 256];
    let msg = crate::sys::fmt_msg(
        &mut buf,
        &[
            api.as_bytes(),
            b" called in a child process after fork(): the runtime's threads did not \
              survive the fork (use the runtime in the parent; a child may only exec)",
        ],
    );
    throw(core::str::from_utf8(msg).unwrap_or("runtime used after fork()"))
}

/// Per-thread set-up of a new M, on its own thread before it runs anything (Go's minit):
/// see the module doc.
/// Whether the signal mask `mask` (of an interrupted context) blocks a signal the Ms run
/// with unblocked: a handler of the program's own is running (the kernel blocks its
/// signal meanwhile, and it may have interrupted any code, the runtime's included), or
/// the code blocked signals itself. Only the kernel's 64 signals are compared (the part
/// of a `sigset_t` the kernel fills in a signal frame). Async-signal-safe.
pub(super) fn blocks_more_than_ms(mask: &libc::sigset_t) -> bool {
    let word = |set: &libc::sigset_t| {
        // SAFETY: a sigset_t is at least 8 bytes, and its first 8 hold signals 1..=64.
        unsafe { (set as *const libc::sigset_t as *const u64).read_unaligned() }
    };
    let base = INIT_SIGMASK.get().map_or(0, word);
    word(mask) & !base != 0
}

pub(super) fn minit(m: &M) {
    // Timed waits (the poller's deadline for the earliest timer, the idle Ms' spin-then-
    // futex) wake within the default 50 µs slack otherwise; a 1 µs slack keeps a 1 ms
    // sleep within tens of microseconds.
    // SAFETY: prctl on this thread only.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
    // SAFETY: a mask made by sigemptyset/pthread_sigmask; this thread only.
    unsafe {
        let mask = match INIT_SIGMASK.get() {
            Some(m) => *m,
            None => {
                let mut none: libc::sigset_t = core::mem::zeroed();
                libc::sigemptyset(&mut none);
                none
            }
        };
        libc::pthread_sigmask(libc::SIG_SETMASK, &mask, core::ptr::null_mut());
    }
    let cpus = process_cpus();
    // SAFETY: CPU_COUNT reads a valid cpu_set_t.
    if unsafe { libc::CPU_COUNT(cpus) } > 0 {
        // SAFETY: cpus is a valid cpu_set_t of the size given; this thread only. A CPU
        // gone offline since makes it fail (EINVAL): the thread keeps what it has.
        unsafe { libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), cpus) };
    }
    let mut name = [0u8; 16];
    let id = crate::sys::fmt_u64(m.id as u64);
    crate::sys::fmt_msg(&mut name[..15], &[b"gmp-m", &id]);
    // SAFETY: name is NUL-terminated (its last byte is never written); this thread only.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) };
}
