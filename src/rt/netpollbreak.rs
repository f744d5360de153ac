//! The poller's wake-up (Go's `netpollBreak`): the eventfd that breaks a blocking
//! `epoll_wait`. Below the poller, so that whoever must wake the M sleeping in it (a
//! timer's owner, a goroutine queued for that M) need not import the poller.

use core::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The eventfd, registered with the epoll instance by `netpoll::init`.
pub(super) static EVFD: AtomicI32 = AtomicI32::new(-1);

/// A break is written and not yet consumed (Go's netpollWakeSig).
pub(super) static BREAK_PENDING: AtomicBool = AtomicBool::new(false);

/// Breaks a blocking `epoll_wait` (Go's netpollBreak). Coalesced.
pub(crate) fn netpoll_break() {
    if BREAK_PENDING.swap(true, Ordering::SeqCst) {
        return;
    }
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a valid buffer to our eventfd.
    unsafe {
        crate::sys::real::write(
            EVFD.load(Ordering::Acquire),
            &one as *const u64 as *const libc::c_void,
            8,
        )
    };
}
