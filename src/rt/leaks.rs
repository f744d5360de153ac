//! Leak reports: goroutines that wait forever because nobody can reach what they wait on.
//! Go finds them with a garbage-collection cycle (the `goroutineleak` profile); a channel
//! here is reference counted and knows the moment its last handle is released. A
//! goroutine blocked then in a plain send or receive on it without a deadline
//! (`Waiter::exclusive`) can never be woken: no handle is left to send, receive or close
//! with. `chan::Chan::release` collects such goroutines under the channel's lock and
//! reports them here, after unlocking.
//!
//! Nothing else is reported: a select may still complete through another case, a timed
//! operation ends at its deadline, and a thread outside the runtime is not a goroutine
//! (the dump shows it).
//!
//! `GMP_DEBUG=leaks=off|report|abort` (or 0, 1, 2; `report` is the default). The report goes
//! to the handler the program set (`gmp_set_leak_handler`: goroutine id and wait reason,
//! from the thread that released the channel), or else to stderr, one dump record per
//! goroutine (dump.rs: wait reason, backtrace, creator). The leaked goroutines are also
//! kept (they never end), for `gmp_leaks(fd)`: Go's `goroutineleak` profile, in the dump's
//! records.
//!
//! Mutexes and WaitGroups are not covered: they are plain memory the program owns, with
//! no count of who can still reach them, so the runtime cannot prove that nobody will
//! unlock or finish one.

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicPtr, Ordering};

use super::dump::{Out, dump_g, status_str};
use super::*;
use crate::sys::dbgvars::{self, Var};
use crate::sys::{Lock, Rank};

/// Every goroutine reported so far (they stay parked until the process exits). Owner: the
/// holder of `LEAKED_LOCK`.
static LEAKED: Owned<Vec<usize>> = Owned::new(Vec::new());
static LEAKED_LOCK: Lock = Lock::new(Rank::Leaks);

/// A leak handler: the goroutine's id, its wait reason (a NUL-terminated string valid
/// for the call), and the argument given with the handler.
pub type LeakHandler = unsafe extern "C" fn(goid: i64, reason: *const c_char, arg: *mut c_void);

/// The handler and its argument, published together (null: report on stderr).
struct Handler {
    f: LeakHandler,
    arg: *mut c_void,
}

static HANDLER: AtomicPtr<Handler> = AtomicPtr::new(core::ptr::null_mut());

/// Whether releases look for leaked goroutines (`GMP_DEBUG=leaks`, not `off`).
#[inline]
pub fn enabled() -> bool {
    dbgvars::get(Var::Leaks) != 0
}

/// Sets the handler (None: stderr). The previous record is leaked, not freed: a report
/// may be reading it on another thread (a few words per call, and programs set it once).
pub fn set_handler(f: Option<LeakHandler>, arg: *mut c_void) {
    let new = match f {
        Some(f) => Box::into_raw(Box::new(Handler { f, arg })),
        None => core::ptr::null_mut(),
    };
    HANDLER.store(new, Ordering::Release);
}

/// Reports the goroutines in `gs` (blocked forever on a channel whose last handle was
/// just released); aborts afterwards under `leaks=abort`.
pub fn report(gs: &[*mut G]) {
    LEAKED_LOCK.lock();
    // SAFETY: we hold LEAKED_LOCK.
    unsafe { (*LEAKED.ptr()).extend(gs.iter().map(|&g| g as usize)) };
    LEAKED_LOCK.unlock();
    let h = HANDLER.load(Ordering::Acquire);
    let now = crate::sys::nanotime();
    let mut out = Out::new(2);
    for &gp in gs {
        // SAFETY: Gs are never freed; a leaked goroutine stays parked (nothing can wake it),
        // and the dump's reads tolerate a racy view anyway.
        let g = unsafe { &*gp };
        let reason = status_str(g, g.status.load(Ordering::Acquire));
        if h.is_null() {
            out.str("gmp: goroutine leak: the last handle of its channel was released\n");
            dump_g(&mut out, g, now, None);
        } else {
            let mut c = [0u8; 64];
            let n = reason.len().min(c.len() - 1);
            c[..n].copy_from_slice(&reason.as_bytes()[..n]);
            // SAFETY: h was published whole by `set_handler` and is never freed; the
            // program's handler gets a NUL-terminated string that lives for the call.
            unsafe { ((*h).f)(g.goid() as i64, c.as_ptr().cast(), (*h).arg) };
        }
    }
    out.flush();
    if dbgvars::get(Var::Leaks) >= 2 {
        throw("goroutine leak (GMP_DEBUG=leaks=abort)");
    }
}

/// `gmp_leaks(fd)`: the goroutines reported so far, in the shape of Go's `goroutineleak`
/// profile (`goroutineleak profile: total N`, then a dump record for each).
pub fn write_profile(fd: c_int) {
    LEAKED_LOCK.lock();
    // SAFETY: we hold LEAKED_LOCK; the copy lets the records be written without it.
    let gs = unsafe { (*LEAKED.ptr()).clone() };
    LEAKED_LOCK.unlock();
    let mut out = Out::new(fd);
    out.str("goroutineleak profile: total ");
    out.dec(gs.len() as u64);
    out.str("\n\n");
    let now = crate::sys::nanotime();
    for g in gs {
        // SAFETY: Gs are never freed, and a leaked one never ends (module doc).
        dump_g(&mut out, unsafe { &*(g as *const G) }, now, None);
    }
    out.flush();
}
