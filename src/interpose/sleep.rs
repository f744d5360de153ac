//! Sleeping: nanosleep, clock_nanosleep, sleep and usleep park the goroutine on the
//! timers, bound to its thread.

use super::*;

/// Parks the goroutine for `ns` on the timers, bound to its thread.
pub(super) fn park_sleep(ns: i64) {
    crate::ffi::boundary("interposed sleep", || {
        let bound = rt::bind_current(); // same-thread resume
        rt::timer::sleep(ns.max(1));
        drop(bound);
    })
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
    park_sleep(ns);
    0
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
    park_sleep(ns);
    0
}

/// Interposes sleep(3).
#[unsafe(no_mangle)]
pub extern "C" fn sleep(secs: c_uint) -> c_uint {
    if !on_goroutine() {
        // SAFETY: no preconditions.
        return unsafe { real::sleep(secs) };
    }
    park_sleep(secs as i64 * 1_000_000_000);
    0
}

/// Interposes usleep(3).
#[unsafe(no_mangle)]
pub extern "C" fn usleep(us: libc::useconds_t) -> c_int {
    if !on_goroutine() {
        // SAFETY: no preconditions.
        return unsafe { real::usleep(us) };
    }
    park_sleep(us as i64 * 1000);
    0
}
