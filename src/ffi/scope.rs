//! Scopes: cancellation and deadlines for goroutines and everything they wait for
//! (rt/scope.rs).

use core::ffi::c_int;

use super::boundary;
use crate::rt;
use crate::rt::scope::{self, Scope};

/// A scope (Go's `context.Context` from `WithCancel` / `WithTimeout`, carried by the
/// goroutine instead of passed as an argument): a deadline and a cancel that reach every
/// wait of the goroutines started in it, including the blocking calls of unmodified C
/// libraries under the interposer. Opaque; the handle gmp_scope_begin returns is valid
/// until gmp_scope_end.
pub struct gmp_scope {
    _opaque: [u8; 0],
}

/// The scope behind a handle from C, if it is one.
///
/// # Safety
/// `s` is NULL or a handle gmp_scope_begin returned that was not ended.
unsafe fn get(s: *const gmp_scope) -> Option<*const Scope> {
    let s = s as *const Scope;
    // SAFETY: caller contract.
    unsafe { scope::valid(s) }.then_some(s)
}

/// Begins a scope, a child of the caller's current scope (if any), and makes it the
/// caller's current scope (the caller: a goroutine or any other thread). Goroutines the
/// caller starts while it is current belong to it, as do theirs.
///
/// Inside a scope, every wait — channel send, receive and select, gmp_sleep,
/// gmp_wg_wait, gmp_cond_wait, the fd waits and socket calls of this library, and, under
/// the interposer, the hooked blocking calls that park (read, write, recv, send, connect,
/// accept, poll, select, epoll_wait, nanosleep, sleep, usleep, getaddrinfo's queries) and
/// those that take the blocking-call hand-off (waitpid, flock, a read of a terminal…,
/// interrupted in the kernel by SIGRTMAX-2 unless the program has its own handler for
/// it) — ends early once the scope is cancelled (gmp_scope_cancel, gmp_scope_end, or the
/// cancel of an enclosing scope): gmp functions return -ECANCELED, hooked calls fail with
/// errno ECANCELED. Once the deadline passes (`timeout_ns` from now; < 0: none but the
/// enclosing scope's), they return -ETIMEDOUT / errno ETIMEDOUT instead. An operation that
/// can complete without waiting still completes. Mutex and rwmutex locks are not ended
/// (as Go's sync.Mutex ignores contexts): a cancel frees the holder instead.
///
/// Writes the handle to `*out`. Returns 0, -EINVAL if `out` is NULL.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_scope_begin(out: *mut *mut gmp_scope, timeout_ns: i64) -> c_int {
    boundary("gmp_scope_begin", || {
        if out.is_null() {
            return -libc::EINVAL;
        }
        rt::init();
        let s = scope::begin(timeout_ns);
        // SAFETY: caller contract: out is writable.
        unsafe { *out = s as *mut gmp_scope };
        0
    })
}

/// Cancels scope `s` and every scope begun inside it (Go's `cancel()`): the waits of
/// their goroutines end with -ECANCELED, now and from then on. Cancelling twice is
/// harmless. May be called from any goroutine or thread while the handle is valid.
/// Returns 0, -EINVAL for a NULL or ended handle.
///
/// # Safety
/// `s` is NULL or a handle gmp_scope_begin returned (ended handles are refused while
/// their memory has not been reused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_scope_cancel(s: *mut gmp_scope) -> c_int {
    boundary("gmp_scope_cancel", || {
        // SAFETY: caller contract.
        let Some(s) = (unsafe { get(s) }) else {
            return -libc::EINVAL;
        };
        // SAFETY: a valid handle is a live scope.
        unsafe { scope::cancel(s, libc::ECANCELED) };
        0
    })
}

/// Why scope `s` has ended (Go's `ctx.Err()`): 0 while it has not, -ECANCELED once it
/// (or an enclosing scope) was cancelled, -ETIMEDOUT once its deadline passed; -EINVAL
/// for a NULL or ended handle.
///
/// # Safety
/// As gmp_scope_cancel.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_scope_err(s: *mut gmp_scope) -> c_int {
    boundary("gmp_scope_err", || {
        // SAFETY: caller contract.
        match unsafe { get(s) } {
            // SAFETY: a valid handle is a live scope.
            Some(s) => -unsafe { scope::err(s) },
            None => -libc::EINVAL,
        }
    })
}

/// The deadline of scope `s` on gmp_now's clock (the earliest of its own and its
/// enclosing scopes'), or INT64_MAX if it has none; -EINVAL for a NULL or ended handle.
///
/// # Safety
/// As gmp_scope_cancel.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_scope_deadline(s: *mut gmp_scope) -> i64 {
    boundary("gmp_scope_deadline", || {
        // SAFETY: caller contract.
        match unsafe { get(s) } {
            // SAFETY: a valid handle is a live scope.
            Some(s) => unsafe { scope::deadline(s) },
            None => -(libc::EINVAL as i64),
        }
    })
}

/// Waits until every goroutine started in scope `s` (or in a scope begun inside it) has
/// returned. The wait itself is not ended by `s`: cancel `s` first to make its goroutines
/// return sooner. Returns 0, -EINVAL for a NULL or ended handle.
///
/// # Safety
/// As gmp_scope_cancel; the handle stays valid for the whole call (gmp_scope_end is not
/// called meanwhile).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_scope_wait(s: *mut gmp_scope) -> c_int {
    boundary("gmp_scope_wait", || {
        // SAFETY: caller contract.
        let Some(s) = (unsafe { get(s) }) else {
            return -libc::EINVAL;
        };
        // SAFETY: a valid handle is a live scope, for the whole call (caller contract).
        unsafe { scope::wait_members(s) };
        0
    })
}

/// Ends scope `s`, which must be the caller's current scope (scopes nest: the innermost
/// ends first): the enclosing scope becomes current again, and `s` is cancelled, as Go's
/// deferred `cancel()` — its goroutines still running see -ECANCELED at their next wait
/// (call gmp_scope_wait first to let them finish). The handle is invalid afterwards.
/// A goroutine that returns inside scopes it began ends them the same way.
///
/// Returns 0, or -EINVAL for a NULL or ended handle, or one that is not the caller's
/// current scope (also the scope a goroutine was started in, which it did not begin).
///
/// # Safety
/// As gmp_scope_cancel.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_scope_end(s: *mut gmp_scope) -> c_int {
    boundary("gmp_scope_end", || {
        // SAFETY: caller contract.
        let Some(s) = (unsafe { get(s) }) else {
            return -libc::EINVAL;
        };
        // SAFETY: a valid handle is a live scope.
        match unsafe { scope::end(s) } {
            Ok(()) => 0,
            Err(e) => -e,
        }
    })
}

/// The caller's current scope, or NULL if it runs in none. A goroutine started in a
/// scope returns that scope (borrowed: valid while the goroutine runs in it; it may be
/// cancelled or checked, not ended).
#[unsafe(no_mangle)]
pub extern "C" fn gmp_scope_current() -> *mut gmp_scope {
    boundary("gmp_scope_current", || scope::current() as *mut gmp_scope)
}
