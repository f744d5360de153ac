//! The epoll instance (Go's `netpollinited`, `netpollGenericInit`, `netpollBreak`):
//! created on first use, by the first fd put under the poller or the first timer (the idle
//! M that waits for the earliest timer waits in `epoll_wait`), and the eventfd that breaks
//! a blocking `epoll_wait`. Below the poller (netpoll.rs) and the timers, so that they,
//! and whoever must wake the M sleeping in it, need not import each other.

use core::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, Ordering};

use crate::sys::Lock;

/// The eventfd, registered with the epoll instance by `init`.
pub(super) static EVFD: AtomicI32 = AtomicI32::new(-1);

/// A break is written and not yet consumed (Go's netpollWakeSig).
pub(super) static BREAK_PENDING: AtomicBool = AtomicBool::new(false);

/// Timer Ms claimed by a waker while they sleep in (or are on their way into) a blocking
/// `epoll_wait`, that have not left it yet: each is owed a break. The breaks are coalesced
/// (one pending for any number of them) and `epoll_wait` hands one to one waiter, so an M
/// leaving a blocking poll breaks it again while this is above zero
/// (`schedule::sleep_as_timer_m`). The claimer adds before it breaks; the claimed M takes
/// its own off when it leaves, which may come first (then this is briefly one too low,
/// and the claimer's break follows). Model: `schedule::tests::every_claimed_timer_m_leaves_the_poll`.
pub(crate) static OWED: AtomicI32 = AtomicI32::new(0);

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

pub(super) static EPFD: AtomicI32 = AtomicI32::new(-1);

pub(super) static INIT_LOCK: Lock = Lock::new(crate::sys::Rank::NetpollInit);

/// When the poller was last polled (`nanotime`), for sysmon's 10 ms rule.
pub(super) static LAST_POLL: AtomicI64 = AtomicI64::new(0);

/// epoll data of the eventfd (fds are below 2^20, their data is fd | seq << 32).
pub(super) const BREAK_DATA: u64 = u64::MAX;

/// Whether the poller exists (Go's netpollinited).
#[inline]
pub fn inited() -> bool {
    EPFD.load(Ordering::Acquire) >= 0
}

/// Creates the poller if it does not exist yet (Go's netpollGenericInit). The first timer
/// calls it too: from then on the idle M that waits for the earliest timer waits in
/// `epoll_wait`, the one way an M waits for work with a deadline (HACKING.md, decision 12).
pub(crate) fn init() -> Result<(), i32> {
    if inited() {
        return Ok(());
    }
    INIT_LOCK.lock();
    let r = (|| {
        if inited() {
            return Ok(());
        }
        // SAFETY: plain syscalls; the fds are ours.
        unsafe {
            let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
            if ep < 0 {
                return Err(crate::sys::errno());
            }
            let ev = libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC);
            if ev < 0 {
                let e = crate::sys::errno();
                crate::sys::real::close(ep);
                return Err(e);
            }
            let mut e = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: BREAK_DATA,
            };
            if libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, ev, &mut e) < 0 {
                let e = crate::sys::errno();
                crate::sys::real::close(ev);
                crate::sys::real::close(ep);
                return Err(e);
            }
            EVFD.store(ev, Ordering::Release);
            LAST_POLL.store(crate::sys::nanotime(), Ordering::Relaxed);
            EPFD.store(ep, Ordering::Release);
        }
        Ok(())
    })();
    INIT_LOCK.unlock();
    r
}
