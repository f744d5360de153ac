//! The C ABI: every `extern "C"` function of the library, and nothing else.
//!
//! Each function checks its arguments, runs its body inside [`boundary`] (a Rust panic
//! never crosses into C: it aborts with a `gmp:` message), and reports failure as a
//! negative errno value (HACKING.md, decision 7). The doc comments become
//! `include/gmp-sched/gmp.h`.

#![allow(non_camel_case_types)]

use core::ffi::{CStr, c_char, c_int, c_void};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub mod chan;
pub mod debug;
pub mod net;
pub mod prof;
pub mod scope;
pub mod signal;
pub mod sync;
mod syscall;
pub mod time;

use crate::rt;
use crate::stack;
use crate::sync::waitgroup::WaitGroup;

/// Runs `f`; a panic inside it is a bug in the library, reported as `gmp: panic in NAME`
/// before aborting (unwinding into C is undefined behaviour). In a child forked after the
/// runtime started, aborts instead of running `f` (rt/os_linux.rs).
#[inline(always)]
pub(crate) fn boundary<R>(name: &str, f: impl FnOnce() -> R) -> R {
    if crate::rt::os_linux::forked() {
        // A child forked after the runtime started: its threads are gone (os_linux.rs).
        crate::rt::os_linux::throw_forked(name);
    }
    guard(name, f)
}

/// `boundary` without the forked-child check, for a quick path that tested
/// `sys::quick_off` (set in a forked child) instead.
#[inline(always)]
pub(crate) fn guard<R>(name: &str, f: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            crate::sys::write_stderr(b"gmp: panic in ");
            crate::sys::write_stderr(name.as_bytes());
            crate::sys::write_stderr(b"\n");
            // SAFETY: abort has no preconditions.
            unsafe { libc::abort() }
        }
    }
}

/// A goroutine's function: called once with the argument given to gmp_go.
pub type gmp_func = Option<unsafe extern "C" fn(arg: *mut c_void)>;

/// Flag for `gmp_attr.flags`: the goroutine runs only on the first OS thread that runs it
/// (its `gettid()` never changes), so it may keep the address of `errno` or of `__thread`
/// variables across calls that switch. The thread keeps running other goroutines while
/// this one waits; when it becomes runnable it queues on that thread alone (no other
/// thread runs or steals it), and an idle thread is woken for it. (For a thread that
/// serves only one goroutine, use gmp_lock_os_thread or GMP_GO_LOCKED.)
pub const GMP_GO_PINNED: u32 = 1;

/// Flag for `gmp_attr.flags`: the goroutine starts locked to the OS thread that runs it,
/// as if its first call were gmp_lock_os_thread (count 1; gmp_unlock_os_thread releases
/// it, and a goroutine that ends locked takes its thread with it), before any of its code
/// runs. For code that ties state to its thread from its first instruction (a Python
/// callback: CPython binds a thread state to the thread that enters it). The thread is one
/// no other goroutine is bound to (see gmp_lock_os_thread).
pub const GMP_GO_LOCKED: u32 = 2;

/// Smallest and largest stack size `gmp_attr.stack_size` accepts (bytes).
pub const GMP_MIN_STACK: usize = 16384;
pub const GMP_MAX_STACK: usize = 1073741824;
const _: () = assert!(GMP_MIN_STACK == stack::MIN_STACK && GMP_MAX_STACK == stack::MAX_STACK);

/// Largest value `gmp_maxprocs` accepts.
pub const GMP_MAX_PROCS: c_int = 1024;
const _: () = assert!(GMP_MAX_PROCS as usize == rt::MAX_PROCS);

/// Attributes for `gmp_go_attr`. Zero-initialise it (`gmp_attr a = {0};`) and set what
/// you need.
#[repr(C)]
pub struct gmp_attr {
    /// Usable stack bytes; 0 means the default (256 KiB, or GMP_STACK_SIZE, or
    /// gmp_set_default_stack_size). Rounded up to whole pages. A 64 KiB guard below the
    /// stack turns an overflow into "gmp: goroutine N: stack overflow" and an abort, also
    /// for frames or alloca blocks of up to 64 KiB compiled without stack-clash protection;
    /// a bigger one can jump the guard into another goroutine's stack.
    pub stack_size: usize,
    /// 0, or GMP_GO_PINNED and/or GMP_GO_LOCKED.
    pub flags: u32,
}

/// A WaitGroup (Go's sync.WaitGroup): a counter of outstanding work and the waiters for it
/// to reach zero. Initialise with GMP_WG_INIT (or zero it); it needs no destruction. It must
/// not be copied or moved while in use. Any thread may add, finish or wait.
#[repr(C)]
pub struct gmp_wg {
    /// Private: counter (high 32 bits) and waiter count (low 32 bits).
    pub state: u64,
    /// Private: the semaphore waiters sleep on.
    pub sema: u32,
    /// Private: zero.
    pub reserved: u32,
}

/// Scheduler statistics, as in Go's schedtrace line, plus counters since start.
#[repr(C)]
pub struct gmp_sched_stats {
    /// Current GOMAXPROCS.
    pub gomaxprocs: i32,
    /// Ps without an M (idle).
    pub idleprocs: i32,
    /// OS threads the scheduler created (Ms).
    pub threads: i32,
    /// Ms looking for work.
    pub spinningthreads: i32,
    /// 1 when a wakeup found no idle P and asked for a spinning M.
    pub needspinning: i32,
    /// Ms asleep with nothing to do.
    pub idlethreads: i32,
    /// Length of the global run queue.
    pub runqueue: i64,
    /// Live goroutines.
    pub goroutines: i64,
    /// Goroutines taken by work stealing since start.
    pub steals: u64,
    /// Goroutines created since start.
    pub spawned: u64,
    /// Sum of all Ps' schedtick (goroutines scheduled).
    pub schedticks: u64,
    /// Goroutine records ever allocated (Go's allglen). Records are never freed but are
    /// reused: this stays near the peak number of live goroutines plus the per-processor
    /// and global caches of dead ones, whatever stack sizes are asked for.
    pub allg: u64,
    /// Preemption requests the monitor thread made (a goroutine held its processor for a
    /// whole 10 ms time slice).
    pub preempt_requests: u64,
    /// Polls of the network poller (epoll_wait calls), and goroutines they made ready.
    pub netpoll_polls: u64,
    pub netpoll_readied: u64,
    /// Asynchronous preemption: signals sent to threads running a goroutine past its
    /// slice, goroutines stopped by them, and signals that found no safe point (the
    /// request was stale; the code was in libc, the loader, the vDSO, libgcc, libstdc++ or
    /// this library; the stack had no room) or were not sent (the thread was blocked in
    /// the kernel).
    pub preempt_signals: u64,
    pub async_preempts: u64,
    pub async_refused_stale: u64,
    pub async_refused_lib: u64,
    pub async_refused_stack: u64,
    pub async_skipped_blocked: u64,
    /// Blocking calls the hooks did not see (a pthread mutex, a raw read, a sleep in a
    /// library loaded without the interposer): signals sysmon sent to have such a call give
    /// its P up, and calls made again (or resumed) between entering and leaving a syscall.
    pub unseen_signals: u64,
    pub unseen_wrapped: u64,
    /// Closes of registered fds that a closer inside `gmp_blocking` handed to the last
    /// operation in flight.
    pub deferred_closes: u64,
    /// Stack high-water marks (`gmp_stack_usage`): goroutines measured, and the deepest
    /// mark of all in bytes.
    pub stack_samples: u64,
    pub stack_high_water: u64,
}

fn start(f: gmp_func, arg: *mut c_void, stack_size: usize, flags: u32) -> i64 {
    let Some(f) = f else {
        return -(libc::EINVAL as i64);
    };
    // SAFETY: gmp_go's contract: the caller promises fn may be called with arg on a
    // goroutine.
    let (pinned, locked) = (flags & GMP_GO_PINNED != 0, flags & GMP_GO_LOCKED != 0);
    // The first goroutine starts the runtime.
    rt::init();
    // SAFETY: as above; the runtime is started.
    match unsafe { rt::newproc(f, arg, stack_size, pinned, locked) } {
        Ok(id) => id as i64,
        Err(rt::StartError::BadStackSize) => -(libc::EINVAL as i64),
        Err(rt::StartError::NoMemory) => -(libc::ENOMEM as i64),
    }
}

/// Cargo.toml's version, which build.rs also writes into the header (GMP_SCHED_VERSION).
const VERSION: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(v) => v,
        Err(_) => panic!("the package version contains a NUL"),
    };

/// The library's version, "MAJOR.MINOR.PATCH" (a static string). A program compares it
/// with GMP_SCHED_VERSION, the version of the header it was compiled with. (GNU MP's
/// version is `gmp_version`, a string variable of its own header.)
#[unsafe(no_mangle)]
pub extern "C" fn gmp_sched_version() -> *const c_char {
    boundary("gmp_sched_version", || VERSION.as_ptr())
}

/// Starts `fn(arg)` as a new goroutine.
///
/// Returns the goroutine's id (> 0), -EINVAL if `fn` is NULL, -ENOMEM if no stack could
/// be allocated. The caller keeps ownership of whatever `arg` points to and must keep it
/// alive until the goroutine is done with it. From a goroutine, the new one runs next on
/// the caller's processor (unless another processor steals it first); from any other
/// thread it goes to the global run queue. The runtime starts on the first call.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_go(func: gmp_func, arg: *mut c_void) -> i64 {
    boundary("gmp_go", || start(func, arg, 0, 0))
}

/// Starts `fn(arg)` as a new goroutine with attributes (`attr` may be NULL: defaults).
///
/// Returns the goroutine's id (> 0); -EINVAL if `fn` is NULL, `attr->flags` has unknown
/// bits, or `attr->stack_size` is nonzero and outside [GMP_MIN_STACK, GMP_MAX_STACK];
/// -ENOMEM if the stack could not be allocated. `attr` is only read during the call.
///
/// # Safety
/// `attr` is NULL or points to a readable `gmp_attr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_go_attr(
    func: gmp_func,
    arg: *mut c_void,
    attr: *const gmp_attr,
) -> i64 {
    boundary("gmp_go_attr", || {
        // SAFETY: the caller passes NULL or a readable gmp_attr.
        let (size, flags) = match unsafe { attr.as_ref() } {
            None => (0, 0),
            Some(a) => (a.stack_size, a.flags),
        };
        if flags & !(GMP_GO_PINNED | GMP_GO_LOCKED) != 0 {
            return -(libc::EINVAL as i64);
        }
        if size != 0 && !(GMP_MIN_STACK..=GMP_MAX_STACK).contains(&size) {
            return -(libc::EINVAL as i64);
        }
        start(func, arg, size, flags)
    })
}

/// Yields the processor (Go's runtime.Gosched): the calling goroutine goes to the back of
/// its processor's local run queue (not the global queue Go's Gosched uses, whose lock
/// every processor contends for; other processors may still steal it from there) and the
/// goroutines queued before it run first. Returns 0. On a thread that is not a goroutine,
/// yields the OS thread (sched_yield). The goroutine may resume on another OS thread.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_yield() -> c_int {
    boundary("gmp_yield", || {
        rt::gosched();
        0
    })
}

/// Ends the calling goroutine (Go's runtime.Goexit); does not return. C frames between the
/// goroutine's function and this call are abandoned, not unwound: release what they hold
/// first. On a thread that is not a goroutine, returns -EPERM.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_goexit() -> c_int {
    boundary("gmp_goexit", || {
        if rt::getg().is_null() {
            return -libc::EPERM;
        }
        rt::goexit()
    })
}

/// The calling goroutine's id (> 0), or 0 on a thread that is not a goroutine.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_goid() -> i64 {
    boundary("gmp_goid", || {
        let gp = rt::getg();
        if gp.is_null() {
            0
        } else {
            // SAFETY: getg() returned the live G running on this thread.
            unsafe { (*gp).goid() as i64 }
        }
    })
}

/// Queries (n <= 0) or sets GOMAXPROCS, the number of OS threads that run goroutines at
/// once. Returns the previous value, or -EINVAL if n > GMP_MAX_PROCS.
///
/// Changing it takes effect while goroutines run: new processors start work at once; a
/// removed processor moves its runnable goroutines to the global queue and stops when its
/// current goroutine next enters the scheduler (yields, waits or ends).
#[unsafe(no_mangle)]
pub extern "C" fn gmp_maxprocs(n: c_int) -> c_int {
    boundary("gmp_maxprocs", || {
        rt::init();
        if n > GMP_MAX_PROCS {
            return -libc::EINVAL;
        }
        if n <= 0 {
            return rt::SCHED.gomaxprocs.load(Ordering::Relaxed);
        }
        rt::gomaxprocs(n)
    })
}

/// Number of live goroutines.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_num_goroutine() -> i64 {
    boundary("gmp_num_goroutine", rt::goroutine_count)
}

/// Number of CPUs the process may run on (its affinity mask).
#[unsafe(no_mangle)]
pub extern "C" fn gmp_num_cpu() -> c_int {
    boundary("gmp_num_cpu", rt::num_cpu)
}

/// Sets the stack size of goroutines started without an explicit size. Returns 0, or
/// -EINVAL if `bytes` is outside [GMP_MIN_STACK, GMP_MAX_STACK]. Goroutines already running
/// keep their stacks.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_set_default_stack_size(bytes: usize) -> c_int {
    boundary("gmp_set_default_stack_size", || {
        if !(GMP_MIN_STACK..=GMP_MAX_STACK).contains(&bytes) {
            return -libc::EINVAL;
        }
        rt::init();
        let page = crate::sys::page_size();
        rt::SCHED
            .default_stack
            .store(bytes.div_ceil(page) * page, Ordering::Relaxed);
        0
    })
}

/// Sets the thread-count fuse (default 10,000; GMP_MAX_THREADS): creating more OS threads
/// than this aborts with "gmp: thread exhaustion", as Go does. Returns the previous value,
/// or -EINVAL if n < 1.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_set_max_threads(n: c_int) -> c_int {
    boundary("gmp_set_max_threads", || {
        if n < 1 {
            return -libc::EINVAL;
        }
        rt::init();
        rt::SCHED.maxmcount.swap(n, Ordering::Relaxed)
    })
}

/// Borrows the two atomic words of a gmp_wg.
///
/// # Safety
/// `wg` is non-null, aligned and valid for the returned lifetime.
unsafe fn wg_ref<'a>(wg: *mut gmp_wg) -> WaitGroup<'a> {
    // SAFETY: caller contract; the fields are plain integers with the alignment of the
    // corresponding atomics, and all concurrent access to them goes through atomics.
    unsafe {
        WaitGroup {
            state: AtomicU64::from_ptr(core::ptr::addr_of_mut!((*wg).state)),
            sema: AtomicU32::from_ptr(core::ptr::addr_of_mut!((*wg).sema)),
        }
    }
}

/// Adds `delta` (may be negative) to the WaitGroup counter. When it reaches zero, all
/// waiters are released. Returns 0; -EINVAL if `wg` is NULL or misaligned, or |delta| >
/// INT32_MAX. Aborts with "gmp: sync: negative WaitGroup counter" if the
/// counter would go below zero (Go panics).
///
/// # Safety
/// `wg` is NULL or points to a live gmp_wg.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_wg_add(wg: *mut gmp_wg, delta: i64) -> c_int {
    boundary("gmp_wg_add", || {
        if wg.is_null() || !wg.is_aligned() || delta < -(i32::MAX as i64) || delta > i32::MAX as i64
        {
            return -libc::EINVAL;
        }
        // SAFETY: checked non-null and aligned; the caller promises it is live.
        unsafe { wg_ref(wg) }.add(delta as i32);
        0
    })
}

/// Decrements the WaitGroup counter by one (gmp_wg_add(wg, -1)).
///
/// # Safety
/// `wg` is NULL or points to a live gmp_wg.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_wg_done(wg: *mut gmp_wg) -> c_int {
    // SAFETY: same contract as gmp_wg_add.
    unsafe { gmp_wg_add(wg, -1) }
}

/// Blocks until the WaitGroup counter is zero: a goroutine parks, any other thread sleeps
/// on a futex. Returns 0; -EINVAL if `wg` is NULL or misaligned; in a scope
/// (gmp_scope_begin), -ECANCELED or -ETIMEDOUT if the scope ends first (the WaitGroup is
/// as if this call had not waited).
///
/// # Safety
/// `wg` is NULL or points to a live gmp_wg.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_wg_wait(wg: *mut gmp_wg) -> c_int {
    boundary("gmp_wg_wait", || {
        if wg.is_null() || !wg.is_aligned() {
            return -libc::EINVAL;
        }
        rt::init();
        // A safe point even when the count is zero already (see rt::preempt_check).
        rt::preempt_check();
        // SAFETY: checked non-null and aligned; the caller promises it is live.
        match unsafe { wg_ref(wg) }.wait() {
            Ok(()) => 0,
            Err(e) => -e,
        }
    })
}

/// Fills `*out` with scheduler statistics and, when `runq_lens` is not NULL, writes the
/// local run queue length of each processor (up to `n` of them) to `runq_lens[0..]`.
/// Returns how many lengths were written (min(n, GOMAXPROCS), 0 if `runq_lens` is NULL),
/// or -EINVAL if `out` is NULL. The numbers are a snapshot taken without stopping anything.
///
/// # Safety
/// `out` is NULL or writable; `runq_lens` is NULL or writable for `n` elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_stats(
    out: *mut gmp_sched_stats,
    runq_lens: *mut u32,
    n: usize,
) -> c_int {
    boundary("gmp_stats", || {
        if out.is_null() {
            return -libc::EINVAL;
        }
        let lens: &mut [u32] = if runq_lens.is_null() || n == 0 {
            &mut []
        } else {
            // SAFETY: the caller promises runq_lens is writable for n elements.
            unsafe { core::slice::from_raw_parts_mut(runq_lens, n) }
        };
        let mut s = rt::schedtrace::Stats::default();
        rt::init();
        let written = rt::schedtrace::stats(&mut s, lens);
        // SAFETY: out is non-null and writable (caller contract).
        unsafe {
            out.write(gmp_sched_stats {
                gomaxprocs: s.gomaxprocs,
                idleprocs: s.idleprocs,
                threads: s.threads,
                spinningthreads: s.spinningthreads,
                needspinning: s.needspinning,
                idlethreads: s.idlethreads,
                runqueue: s.runqueue,
                goroutines: s.goroutines,
                steals: s.steals,
                spawned: s.spawned,
                schedticks: s.schedticks,
                allg: s.allg,
                preempt_requests: s.preempt_requests,
                netpoll_polls: s.netpoll_polls,
                netpoll_readied: s.netpoll_readied,
                preempt_signals: s.preempt_signals,
                async_preempts: s.async_preempts,
                async_refused_stale: s.async_refused_stale,
                async_refused_lib: s.async_refused_lib,
                async_refused_stack: s.async_refused_stack,
                async_skipped_blocked: s.async_skipped_blocked,
                unseen_signals: s.unseen_signals,
                unseen_wrapped: s.unseen_wrapped,
                deferred_closes: s.deferred_closes,
                stack_samples: s.stack_samples,
                stack_high_water: s.stack_high_water,
            })
        };
        written as c_int
    })
}
