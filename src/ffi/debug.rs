//! Seeing inside the runtime: the goroutine dump, leak reports and the execution trace.

use core::ffi::{c_char, c_int, c_void};

use super::boundary;
use crate::rt;

/// Writes every goroutine (id, status or wait reason, how long it has waited, locked or
/// pinned, a symbolized backtrace, who started it) to file descriptor `fd`, in the format
/// of Go's traceback (`goroutine 7 [chan receive, 3 minutes]:`), followed by the threads
/// outside the runtime blocked in gmp calls. Returns 0, or -EBADF if fd is negative.
///
/// Backtraces follow frame pointers from each goroutine's saved context: compile with
/// -fno-omit-frame-pointer for complete traces, and link executables with -rdynamic for
/// their function names. A running goroutine's stack is shown only for the caller. The
/// same dump is written to stderr on SIGQUIT (then the process exits with status 2, as
/// Go's runtime does) unless GMP_DEBUG=sigquit=0 or the program installed its own
/// SIGQUIT handler before the runtime started.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_dump(fd: c_int) -> c_int {
    boundary("gmp_dump", || {
        if fd < 0 {
            return -libc::EBADF;
        }
        rt::init();
        rt::dump::dump_to_fd(fd);
        0
    })
}

/// Starts writing an execution trace to the file at `path` (created or truncated): Chrome
/// trace-event JSON, which ui.perfetto.dev and chrome://tracing open. One track per P with
/// a slice for each goroutine run (named after its entry function), instants for spawns,
/// unparks (with the waker), steals, preemptions and syscall hand-offs, one track per
/// thread with its blocking calls, and counters (runnable goroutines, idle Ps, threads).
/// `GMP_TRACE=path` starts one when the runtime starts (finished at exit). Returns 0,
/// -EINVAL if `path` is NULL or not UTF-8, -EBUSY if a trace is running, or the negative
/// errno of creating the file.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_trace_start(path: *const c_char) -> c_int {
    boundary("gmp_trace_start", || {
        if path.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: the caller passes a NUL-terminated string (checked non-null above).
        let Ok(p) = unsafe { core::ffi::CStr::from_ptr(path) }.to_str() else {
            return -libc::EINVAL;
        };
        rt::init();
        match rt::trace::start(p) {
            Ok(()) => 0,
            Err(e) => -e,
        }
    })
}

/// Stops the trace gmp_trace_start (or GMP_TRACE) started and finishes its file (slices
/// still open end at this moment). Returns 0, or -EINVAL if no trace is running.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_trace_stop() -> c_int {
    boundary("gmp_trace_stop", || match rt::trace::stop() {
        Ok(()) => 0,
        Err(e) => -e,
    })
}

/// A goroutine-leak handler (`gmp_set_leak_handler`): the goroutine's id, its wait reason
/// ("chan receive", "chan send"; valid for the call) and the handler's argument.
pub type gmp_leak_fn =
    Option<unsafe extern "C" fn(goid: i64, reason: *const c_char, arg: *mut c_void)>;

/// Sets what happens when the last handle of a channel is released while goroutines wait
/// on it in a plain send or receive without a deadline (nothing can ever wake them):
/// `fn(goid, reason, arg)` is called once per such goroutine, on the thread that released
/// the handle, after the channel is unlocked; it must not block. NULL restores the
/// default, a record per goroutine on stderr in the dump's format (wait reason, backtrace,
/// creator). `GMP_DEBUG=leaks=off` turns the reports off, `leaks=abort` aborts after them.
/// A select, a timed operation and a thread outside the runtime are never reported
/// (another case or the deadline may still end their wait). Returns 0.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_set_leak_handler(f: gmp_leak_fn, arg: *mut c_void) -> c_int {
    boundary("gmp_set_leak_handler", || {
        rt::leaks::set_handler(f, arg);
        0
    })
}

/// Writes the goroutines reported as leaked so far (see `gmp_set_leak_handler`; they wait
/// forever, so they are all still there) to file descriptor `fd`, in the shape of Go's
/// `goroutineleak` profile: `goroutineleak profile: total N`, then a dump record for each
/// (wait reason, backtrace, creator). Goroutines on orphaned channels only: a mutex or a
/// WaitGroup is memory the program owns, and the runtime cannot prove nobody will unlock
/// or finish it. Returns 0, or -EBADF if fd is negative.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_leaks(fd: c_int) -> c_int {
    boundary("gmp_leaks", || {
        if fd < 0 {
            return -libc::EBADF;
        }
        rt::leaks::write_profile(fd);
        0
    })
}
