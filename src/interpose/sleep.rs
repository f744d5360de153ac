//! Sleeping: nanosleep, clock_nanosleep, sleep and usleep park the goroutine on the
//! timers, bound to its thread.

use super::*;

/// Parks the goroutine for `ns` on the timers, bound to its thread. Ok, or the errno of
/// the goroutine's scope that ended the sleep early (rt/scope.rs) and the time left.
pub(super) fn park_sleep(ns: i64) -> Result<(), (c_int, i64)> {
    crate::ffi::boundary("interposed sleep", || {
        let bound = rt::bind_current(); // same-thread resume
        let start = crate::sys::nanotime();
        let r = rt::timer::sleep(ns.max(1));
        drop(bound);
        match r {
            0 => Ok(()),
            e => Err((e, ns - (crate::sys::nanotime() - start).min(ns))),
        }
    })
}

/// Writes `ns` into `rem` if it is not null (nanosleep's remaining time).
fn set_rem(rem: *mut libc::timespec, ns: i64) {
    if !rem.is_null() {
        // SAFETY: the caller's out-pointer, non-null.
        unsafe {
            (*rem).tv_sec = (ns / 1_000_000_000) as libc::time_t;
            (*rem).tv_nsec = (ns % 1_000_000_000) as libc::c_long;
        }
    }
}

pub(super) fn timespec_ns(ts: &libc::timespec) -> Option<i64> {
    if ts.tv_sec < 0 || !(0..1_000_000_000).contains(&ts.tv_nsec) {
        return None;
    }
    Some(
        ts.tv_sec
            .saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec),
    )
}

/// Interposes nanosleep(2): a goroutine parks on a timer.
///
/// # Safety
/// As nanosleep(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nanosleep(req: *const libc::timespec, rem: *mut libc::timespec) -> c_int {
    if !on_goroutine() || req.is_null() {
        // SAFETY: the caller's arguments.
        return unsafe { real::nanosleep(req, rem) };
    }
    // SAFETY: non-null, the caller's timespec.
    let Some(ns) = timespec_ns(unsafe { &*req }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    match park_sleep(ns) {
        Ok(()) => 0,
        Err((e, left)) => {
            // As an interrupted sleep: the time left, and the scope's errno.
            set_rem(rem, left);
            set_errno(e);
            -1
        }
    }
}

/// Interposes clock_nanosleep(2) for CLOCK_MONOTONIC and CLOCK_REALTIME, relative or
/// absolute (TIMER_ABSTIME); other clocks pass through.
///
/// # Safety
/// As clock_nanosleep(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn clock_nanosleep(
    clock: libc::clockid_t,
    flags: c_int,
    req: *const libc::timespec,
    rem: *mut libc::timespec,
) -> c_int {
    if !on_goroutine()
        || req.is_null()
        || (clock != libc::CLOCK_MONOTONIC && clock != libc::CLOCK_REALTIME)
    {
        // SAFETY: the caller's arguments.
        return unsafe { real::clock_nanosleep(clock, flags, req, rem) };
    }
    // SAFETY: non-null, the caller's timespec.
    let Some(mut ns) = timespec_ns(unsafe { &*req }) else {
        return libc::EINVAL;
    };
    if flags & libc::TIMER_ABSTIME != 0 {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid out-pointer and a clock that exists.
        unsafe { libc::clock_gettime(clock, &mut now) };
        ns = ns.saturating_sub(timespec_ns(&now).unwrap_or(0));
        if ns <= 0 {
            return 0;
        }
    }
    match park_sleep(ns) {
        Ok(()) => 0,
        Err((e, left)) => {
            if flags & libc::TIMER_ABSTIME == 0 {
                set_rem(rem, left);
            }
            e
        }
    }
}

/// Interposes sleep(3).
#[unsafe(no_mangle)]
pub extern "C" fn sleep(secs: c_uint) -> c_uint {
    if !on_goroutine() {
        // SAFETY: no preconditions.
        return unsafe { real::sleep(secs) };
    }
    match park_sleep(secs as i64 * 1_000_000_000) {
        Ok(()) => 0,
        Err((e, left)) => {
            // As sleep(3) cut short: the whole seconds left, rounded up.
            set_errno(e);
            ((left + 999_999_999) / 1_000_000_000) as c_uint
        }
    }
}

/// Interposes usleep(3).
#[unsafe(no_mangle)]
pub extern "C" fn usleep(us: libc::useconds_t) -> c_int {
    if !on_goroutine() {
        // SAFETY: no preconditions.
        return unsafe { real::usleep(us) };
    }
    match park_sleep(us as i64 * 1000) {
        Ok(()) => 0,
        Err((e, _)) => {
            set_errno(e);
            -1
        }
    }
}
