//! C API for time: the monotonic clock and sleeping.

use core::ffi::c_int;

use super::boundary;
use crate::rt;

/// Monotonic time in nanoseconds (CLOCK_MONOTONIC): the clock of every timeout in this
/// library.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_now() -> i64 {
    boundary("gmp_now", crate::sys::nanotime)
}

/// Sleeps for `ns` nanoseconds. A goroutine parks on a timer (its processor runs other
/// goroutines meanwhile); any other thread sleeps in the kernel. `ns <= 0` only yields.
/// Returns 0; in a scope (`gmp_scope_begin`), -ECANCELED or -ETIMEDOUT when the scope
/// is cancelled or its deadline passes first.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_sleep(ns: i64) -> c_int {
    boundary("gmp_sleep", || {
        rt::init();
        -rt::timer::sleep(ns)
    })
}
