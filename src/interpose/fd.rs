//! The interposer's view of an fd (`PollDesc::hook`, rt/netpoll.rs): how a hook treats it
//! on a goroutine, adopting numbers it did not see created, forgetting stale ones, and
//! the program's SO_RCVTIMEO/SO_SNDTIMEO.

use super::*;

/// What the hooks do with an fd on a goroutine.
pub(super) enum Fd {
    /// Park on the poller (`HOOK_BLOCKING`).
    Managed,
    /// Pass straight through (non-blocking by the user's choice, or not open).
    Native,
    /// Blocks: through the syscall hand-off.
    Handoff,
}

/// Direction index of `PollDesc::timeo` for a netpoll mode.
pub(super) fn dir(mode: u32) -> usize {
    (mode == MODE_WRITE) as usize
}

/// SO_RCVTIMEO (read) or SO_SNDTIMEO (write) of `fd` as the hooks know it, in ns.
pub(super) fn timeout_of(fd: c_int, mode: u32) -> Option<i64> {
    let t = netpoll::lookup(fd)?.timeo[dir(mode)].load(Ordering::Relaxed);
    (t > 0).then_some(t)
}

/// Clears the per-number state (bits and timeouts).
pub(super) fn clear(pd: &PollDesc) {
    pd.hook.store(0, Ordering::Release);
    pd.timeo[0].store(0, Ordering::Relaxed);
    pd.timeo[1].store(0, Ordering::Relaxed);
}

/// Reads a socket's SO_RCVTIMEO and SO_SNDTIMEO from the kernel into `pd`.
pub(super) fn load_timeouts(fd: c_int, pd: &PollDesc) {
    for (i, opt) in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO]
        .into_iter()
        .enumerate()
    {
        let mut tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        };
        let mut len = core::mem::size_of::<libc::timeval>() as libc::socklen_t;
        // SAFETY: valid out-parameters.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                &mut tv as *mut libc::timeval as *mut c_void,
                &mut len,
            )
        };
        let ns = if r == 0 { timeval_ns(&tv) } else { 0 };
        pd.timeo[i].store(ns, Ordering::Relaxed);
    }
}

pub(super) fn timeval_ns(tv: &libc::timeval) -> i64 {
    tv.tv_sec
        .saturating_mul(1_000_000_000)
        .saturating_add(tv.tv_usec * 1000)
        .max(0)
}

#[inline]
pub(super) fn classify(fd: c_int) -> Fd {
    if let Some(pd) = netpoll::lookup(fd) {
        let h = pd.hook.load(Ordering::Acquire);
        if pd.registered() {
            return if h & HOOK_BLOCKING != 0 {
                Fd::Managed
            } else {
                Fd::Native
            };
        }
        if h & HOOK_NOPOLL != 0 {
            return Fd::Handoff;
        }
    }
    adopt(fd)
}

/// First blocking use of an fd the hooks have not seen: put it under the poller if epoll
/// can watch it and it is not shared with the outside world (see `interpose`'s module doc).
#[cold]
pub(super) fn adopt(fd: c_int) -> Fd {
    if (0..=2).contains(&fd) {
        return Fd::Handoff;
    }
    if !live() {
        // A vfork child on a goroutine's thread: touch nothing of the parent's.
        return Fd::Native;
    }
    // SAFETY: F_GETFL and fstat on any number only report EBADF if it is not open.
    let (flags, st) = unsafe {
        let flags = real::fcntl(fd, libc::F_GETFL, 0);
        let mut st: libc::stat = core::mem::zeroed();
        if flags < 0 || libc::fstat(fd, &mut st) < 0 {
            return Fd::Native;
        }
        (flags, st)
    };
    let Some(pd) = netpoll::pd_of(fd) else {
        return Fd::Handoff;
    };
    let kind = st.st_mode & libc::S_IFMT;
    // An anonymous inode (eventfd, epoll, timerfd, signalfd) has no file type bits.
    if kind != libc::S_IFSOCK && kind != libc::S_IFIFO && kind != 0 {
        pd.hook.store(HOOK_NOPOLL, Ordering::Release);
        return Fd::Handoff;
    }
    let blocking = flags & libc::O_NONBLOCK == 0;
    if kind == libc::S_IFSOCK {
        load_timeouts(fd, pd);
    } else {
        clear(pd);
    }
    pd.hook
        .store(if blocking { HOOK_BLOCKING } else { 0 }, Ordering::Release);
    match netpoll::register_with(fd, false) {
        Ok(true) if blocking => Fd::Managed,
        Ok(true) => Fd::Native,
        Ok(false) => {
            pd.hook.store(HOOK_NOPOLL, Ordering::Release);
            Fd::Handoff
        }
        Err(_) => {
            pd.hook.store(0, Ordering::Release);
            Fd::Handoff
        }
    }
}

/// Drops what the table says about a number the kernel just handed out (the fd it
/// described was closed without the hooks seeing it).
pub(super) fn forget(fd: c_int) {
    if let Some(pd) = netpoll::lookup(fd) {
        if pd.registered() {
            netpoll::close_begin(fd);
        }
        clear(pd);
    }
}

/// Puts a new fd a goroutine created under the poller, blocking for the program unless
/// it asked otherwise (`user_blocking`).
pub(super) fn adopt_new(fd: c_int, user_blocking: bool) {
    forget(fd);
    let Some(pd) = netpoll::pd_of(fd) else {
        return;
    };
    pd.hook.store(
        if user_blocking { HOOK_BLOCKING } else { 0 },
        Ordering::Release,
    );
    match netpoll::register_with(fd, false) {
        Ok(true) => {}
        Ok(false) => pd.hook.store(HOOK_NOPOLL, Ordering::Release),
        Err(_) => pd.hook.store(0, Ordering::Release),
    }
}

/// Whether the table says anything about `fd`.
pub(super) fn known(fd: c_int) -> bool {
    netpoll::lookup(fd).is_some_and(|pd| {
        pd.registered()
            || pd.hook.load(Ordering::Relaxed) != 0
            || pd.timeo[0].load(Ordering::Relaxed) != 0
            || pd.timeo[1].load(Ordering::Relaxed) != 0
    })
}

/// The state of `old` for `new`, which now refers to the same open file (dup).
pub(super) fn dup_state(old: c_int, new: c_int) {
    let opd = netpoll::lookup(old).filter(|pd| pd.registered());
    if (opd.is_none() && !known(new)) || !live() {
        return;
    }
    forget(new);
    let Some(opd) = opd else {
        return;
    };
    // Shared now: no longer fresh.
    opd.hook.fetch_and(!HOOK_FRESH, Ordering::AcqRel);
    let Some(pd) = netpoll::pd_of(new) else {
        return;
    };
    for i in 0..2 {
        pd.timeo[i].store(opd.timeo[i].load(Ordering::Relaxed), Ordering::Relaxed);
    }
    pd.hook.store(
        opd.hook.load(Ordering::Acquire) & HOOK_BLOCKING,
        Ordering::Release,
    );
    if !matches!(netpoll::register_with(new, false), Ok(true)) {
        pd.hook.store(0, Ordering::Release);
    }
}
