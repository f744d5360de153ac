//! Signals as channels (Go's `os/signal`): src/signal.rs.

use core::ffi::c_int;

use super::boundary;
use super::chan::gmp_chan;
use crate::chan::hchan::Chan;

/// Relays each of the `n` signals `sigs` names, when the process receives it, to channel
/// `c`, whose elements are `int`s (Go's `signal.Notify`): the signal number is sent
/// without waiting, so a channel with no room misses it (give it a buffer), and signals
/// that arrive together may be relayed once. Several channels may watch one signal;
/// calling again with the same channel adds signals to it. The channel keeps a reference
/// of its own until `gmp_signal_stop`. The first call for a signal replaces its action
/// (SIGINT no longer ends the process, SIGQUIT no longer dumps); `gmp_signal_stop` of its
/// last channel gives the earlier action back.
///
/// -EINVAL: `c` or `sigs` NULL, `n` 0 or more than 64, a channel whose elements are not
/// `int`s, or a signal the runtime keeps (SIGURG), that cannot be caught (SIGKILL,
/// SIGSTOP), a synchronous fault (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS) or one
/// of glibc's internal real-time signals (32, 33).
///
/// # Safety
/// `c` is NULL or a live channel the caller holds a reference to; `sigs` is NULL or
/// points to `n` ints.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_signal_notify(
    c: *mut gmp_chan,
    sigs: *const c_int,
    n: usize,
) -> c_int {
    boundary("gmp_signal_notify", || {
        if c.is_null() || sigs.is_null() || n == 0 || n > 64 {
            return -libc::EINVAL;
        }
        // SAFETY: caller contract: `sigs` points to `n` ints.
        let sigs = unsafe { core::slice::from_raw_parts(sigs, n) };
        // SAFETY: caller contract: `c` is a live channel.
        let r = crate::signal::mask_of(sigs)
            .and_then(|m| unsafe { crate::signal::notify(c as *mut Chan, m) });
        match r {
            Ok(()) => 0,
            Err(e) => -e,
        }
    })
}

/// Stops relaying signals to `c` (Go's `signal.Stop`): once it returns, `c` receives no
/// more, and a signal no channel watches any more gets back the action it had before
/// `gmp_signal_notify`. Drops the reference `gmp_signal_notify` took. Returns 0 (also
/// for a channel that watched nothing), or -EINVAL if `c` is NULL.
///
/// # Safety
/// `c` is NULL or a live channel the caller holds a reference to.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_signal_stop(c: *mut gmp_chan) -> c_int {
    boundary("gmp_signal_stop", || {
        if c.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: caller contract.
        unsafe { crate::signal::stop(c as *mut Chan) };
        0
    })
}
