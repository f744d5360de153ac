//! Creating, connecting and closing descriptors: accept, connect, socket, socketpair,
//! pipe, close, dup, fcntl, ioctl, setsockopt.

use super::*;

/// Interposes accept4(2): on a goroutine, parks until a connection arrives; the new
/// socket goes under the poller (blocking for the program unless SOCK_NONBLOCK).
///
/// # Safety
/// As accept4(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's arguments.
    let op = || unsafe { real::accept4(fd, addr, len, flags) } as isize;
    if !on_goroutine() {
        let r = op() as c_int;
        if r >= 0 && known(r) && live() {
            forget(r);
        }
        tsan::fd_opened(r);
        return r;
    }
    let r = rw(fd, MODE_READ, &op, &|| poll::accept_when_ready(fd, &op)) as c_int;
    if r >= 0 && live() {
        adopt_new(r, flags & libc::SOCK_NONBLOCK == 0);
        // The new socket inherits the listener's timeouts (Linux copies them).
        if let (Some(l), Some(pd)) = (netpoll::lookup(fd), netpoll::lookup(r)) {
            for i in 0..2 {
                pd.timeo[i].store(l.timeo[i].load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
    }
    tsan::fd_opened(r);
    r
}

/// Interposes accept(2) (accept4 without flags).
///
/// # Safety
/// As accept(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    // SAFETY: same contract.
    unsafe { accept4(fd, addr, len, 0) }
}

/// Interposes connect(2). Connecting has no per-call non-blocking form. On a goroutine, the
/// first connect of a TCP socket the goroutine created and never shared (`HOOK_FRESH`)
/// makes it non-blocking for the length of the call and parks until the connection is
/// made or fails (the flag is back before the call returns, and nobody else holds the
/// file meanwhile — unless the process forked in between: the child's copy sees the flag
/// for that long). Any other socket the program sees blocking connects through the
/// syscall hand-off, exactly as libc's blocking connect; a non-blocking one gets
/// EINPROGRESS, as the program asked.
///
/// # Safety
/// As connect(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn connect(
    fd: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    // SAFETY: the caller's arguments.
    let op = || unsafe { real::connect(fd, addr, len) } as i64;
    if !on_goroutine() {
        return op() as c_int;
    }
    crate::ffi::boundary("interposed connect", || match classify(fd) {
        Fd::Native => op() as c_int,
        Fd::Managed if fresh(fd) => ret(connect_fresh(fd, &op)) as c_int,
        Fd::Managed | Fd::Handoff => ret(blocking_call(&op)) as c_int,
    })
}

/// Whether `fd` is a fresh socket (see `HOOK_FRESH`); it is not any more after this.
pub(super) fn fresh(fd: c_int) -> bool {
    netpoll::lookup(fd)
        .is_some_and(|pd| pd.hook.fetch_and(!HOOK_FRESH, Ordering::AcqRel) & HOOK_FRESH != 0)
}

/// `connect` of a fresh socket: non-blocking for the call, parking until it is writable
/// (Go's connect: wait for write, then SO_ERROR). Result or -errno.
pub(super) fn connect_fresh(fd: c_int, op: &dyn Fn() -> i64) -> i64 {
    // SAFETY: F_GETFL/F_SETFL on the caller's fd.
    let fl = unsafe { real::fcntl(fd, libc::F_GETFL, 0) };
    if fl < 0 || fl & libc::O_NONBLOCK != 0 {
        return blocking_call(op);
    }
    // SAFETY: as above.
    unsafe { real::fcntl(fd, libc::F_SETFL, (fl | libc::O_NONBLOCK) as usize) };
    let mut r = raw(|| op() as isize);
    if r == -(libc::EINPROGRESS as i64) {
        let deadline = timeout_of(fd, MODE_WRITE).map(|t| crate::sys::nanotime().saturating_add(t));
        let bound = rt::bind_current(); // same-thread resume
        let w = poll::io(fd, MODE_WRITE, deadline, || {
            if poll::ready_now(fd, libc::POLLOUT) {
                0
            } else {
                -1
            }
        });
        drop(bound);
        r = match w {
            // SO_SNDTIMEO expired: the connection is still in progress (Linux).
            Some(w) if w == -(libc::ETIMEDOUT as i64) && rt::scope::current_err() == 0 => {
                -(libc::EINPROGRESS as i64)
            }
            Some(w) if w < 0 => w,
            _ => poll::so_error(fd) as i64,
        };
    }
    // SAFETY: as above: the program's flags back.
    unsafe { real::fcntl(fd, libc::F_SETFL, fl as usize) };
    r
}

/// Interposes socket(2): on a goroutine the socket goes under the poller at once.
///
/// # Safety
/// As socket(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int {
    if !on_goroutine() {
        // SAFETY: plain syscall.
        let fd = unsafe { real::socket(domain, ty, proto) };
        if fd >= 0 && known(fd) && live() {
            forget(fd);
        }
        tsan::fd_opened(fd);
        return fd;
    }
    // SAFETY: plain syscall.
    let fd = unsafe { real::socket(domain, ty, proto) };
    if fd >= 0 && live() {
        adopt_new(fd, ty & libc::SOCK_NONBLOCK == 0);
        let tcp = (domain == libc::AF_INET || domain == libc::AF_INET6)
            && ty & 0xf == libc::SOCK_STREAM
            && ty & libc::SOCK_NONBLOCK == 0;
        if let Some(pd) = netpoll::lookup(fd).filter(|pd| tcp && pd.registered()) {
            pd.hook.fetch_or(HOOK_FRESH, Ordering::AcqRel);
        }
    }
    tsan::fd_opened(fd);
    fd
}

/// Interposes socketpair(2).
///
/// # Safety
/// As socketpair(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn socketpair(
    domain: c_int,
    ty: c_int,
    proto: c_int,
    fds: *mut c_int,
) -> c_int {
    let go = on_goroutine();
    // SAFETY: the caller's arguments.
    let r = unsafe { real::socketpair(domain, ty, proto, fds) };
    if r == 0 {
        // SAFETY: the call succeeded, so fds holds two ints.
        let (a, b) = unsafe { (*fds, *fds.add(1)) };
        let live = (go || known(a) || known(b)) && live();
        for fd in [a, b] {
            if go && live {
                adopt_new(fd, ty & libc::SOCK_NONBLOCK == 0);
            } else if live {
                forget(fd);
            }
            tsan::fd_opened(fd);
        }
    }
    r
}

/// Interposes pipe2(2).
///
/// # Safety
/// As pipe2(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pipe2(fds: *mut c_int, flags: c_int) -> c_int {
    let go = on_goroutine();
    // SAFETY: the caller's arguments.
    let r = unsafe { real::pipe2(fds, flags) };
    if r == 0 {
        // SAFETY: the call succeeded, so fds holds two ints.
        let (a, b) = unsafe { (*fds, *fds.add(1)) };
        let live = (go || known(a) || known(b)) && live();
        for fd in [a, b] {
            if go && live {
                adopt_new(fd, flags & libc::O_NONBLOCK == 0);
            } else if live {
                forget(fd);
            }
            tsan::fd_opened(fd);
        }
    }
    r
}

/// Interposes pipe(2).
///
/// # Safety
/// As pipe(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pipe(fds: *mut c_int) -> c_int {
    // SAFETY: same contract.
    unsafe { pipe2(fds, 0) }
}

/// Interposes close(2): goroutines parked on the fd wake with EBADF and the fd leaves the
/// poller before the number can be reused. Inside `gmp_blocking`, where the caller may not
/// wait for them, the last operation in flight makes the close (`close_begin_deferrable`).
#[unsafe(no_mangle)]
pub extern "C" fn close(fd: c_int) -> c_int {
    if known(fd)
        && let Some(pd) = netpoll::lookup(fd)
        && live()
    {
        if pd.registered() || pd.close_pending() {
            let bound = on_goroutine().then(rt::bind_current);
            let how = netpoll::close_begin_deferrable(fd);
            drop(bound);
            match how {
                netpoll::Close::Deferred => {
                    clear(pd);
                    return 0;
                }
                netpoll::Close::Pending => {
                    // SAFETY: errno is this thread's.
                    unsafe { *libc::__errno_location() = libc::EBADF };
                    return -1;
                }
                _ => {}
            }
        }
        clear(pd);
    }
    // SAFETY: close has no memory preconditions.
    unsafe { real::close(fd) }
}

/// Interposes dup(2): the new fd inherits the old one's state.
#[unsafe(no_mangle)]
pub extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: no memory preconditions.
    let r = unsafe { real::dup(fd) };
    if r >= 0 {
        dup_state(fd, r);
    }
    tsan::fd_opened(r);
    r
}

/// dup2/dup3's shared part: `new` is closed first as close(2) would.
pub(super) fn dup_onto(old: c_int, new: c_int, f: impl FnOnce() -> c_int) -> c_int {
    if old != new && netpoll::lookup(new).is_some_and(|pd| pd.registered()) && live() {
        // Whether `old` is open decides whether `new` gets closed at all.
        // SAFETY: F_GETFL has no memory preconditions.
        if unsafe { real::fcntl(old, libc::F_GETFL, 0) } >= 0 {
            let bound = on_goroutine().then(rt::bind_current);
            netpoll::close_begin(new);
            drop(bound);
        }
    }
    let r = f();
    if r >= 0 && old != new {
        dup_state(old, r);
    }
    tsan::fd_opened(r);
    r
}

/// Interposes dup2(2).
#[unsafe(no_mangle)]
pub extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    // SAFETY: no memory preconditions.
    dup_onto(old, new, || unsafe { real::dup2(old, new) })
}

/// Interposes dup3(2).
#[unsafe(no_mangle)]
pub extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    // SAFETY: no memory preconditions.
    dup_onto(old, new, || unsafe { real::dup3(old, new, flags) })
}

/// Records the program's O_NONBLOCK for registered fd `fd` (the kernel has it already).
pub(super) fn record_nonblock(fd: c_int, on: bool) {
    if let Some(pd) = netpoll::lookup(fd).filter(|pd| pd.registered() && live()) {
        if on {
            pd.hook.fetch_and(!HOOK_BLOCKING, Ordering::AcqRel);
        } else {
            pd.hook.fetch_or(HOOK_BLOCKING, Ordering::AcqRel);
        }
    }
}

/// Interposes fcntl(2): F_SETFL passes to the kernel as the program gave it and records
/// its O_NONBLOCK for the hooks; F_DUPFD and F_DUPFD_CLOEXEC copy the state as dup does;
/// F_SETLKW waits through the hand-off. Declared with its optional argument always present
/// (it travels in the same register either way).
///
/// # Safety
/// As fcntl(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    match cmd {
        libc::F_SETFL => {
            // SAFETY: no memory preconditions.
            let r = unsafe { real::fcntl(fd, cmd, arg) };
            if r >= 0 {
                record_nonblock(fd, arg as c_int & libc::O_NONBLOCK != 0);
            }
            r
        }
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            // SAFETY: no memory preconditions.
            let r = unsafe { real::fcntl(fd, cmd, arg) };
            if r >= 0 {
                dup_state(fd, r);
            }
            tsan::fd_opened(r);
            r
        }
        // SAFETY: the caller's arguments (F_SETLKW blocks: the hand-off).
        libc::F_SETLKW | libc::F_OFD_SETLKW => {
            handoff(&|| unsafe { real::fcntl(fd, cmd, arg) } as i64) as c_int
        }
        // SAFETY: the caller's arguments.
        _ => unsafe { real::fcntl(fd, cmd, arg) },
    }
}

/// Interposes fcntl64, the name glibc gives fcntl for programs built with 64-bit file
/// offsets (the same call on x86-64).
///
/// # Safety
/// As fcntl(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: same contract.
    unsafe { fcntl(fd, cmd, arg) }
}

/// Interposes ioctl(2): FIONBIO passes to the kernel and records the program's
/// non-blocking flag for the hooks, as fcntl(F_SETFL); every other request passes through.
///
/// # Safety
/// As ioctl(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ioctl(fd: c_int, req: libc::c_ulong, arg: usize) -> c_int {
    // SAFETY: the caller's arguments.
    let r = unsafe { real::ioctl(fd, req, arg) };
    if r >= 0 && req == libc::FIONBIO && arg != 0 {
        // SAFETY: FIONBIO's argument points to an int (the caller's contract).
        record_nonblock(fd, unsafe { *(arg as *const c_int) } != 0);
    }
    r
}

/// Interposes setsockopt(2): SO_RCVTIMEO and SO_SNDTIMEO become the deadlines of the
/// hooks' waits (EAGAIN when they pass, as the kernel does for a blocking socket).
///
/// # Safety
/// As setsockopt(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: libc::socklen_t,
) -> c_int {
    // SAFETY: the caller's arguments.
    let r = unsafe { real::setsockopt(fd, level, name, val, len) };
    if r == 0
        && level == libc::SOL_SOCKET
        && (name == libc::SO_RCVTIMEO || name == libc::SO_SNDTIMEO)
        && !val.is_null()
        && len as usize >= core::mem::size_of::<libc::timeval>()
        && live()
        && let Some(pd) = netpoll::pd_of(fd)
    {
        // SAFETY: the kernel accepted it as a timeval.
        let ns = timeval_ns(unsafe { &*(val as *const libc::timeval) });
        pd.timeo[(name == libc::SO_SNDTIMEO) as usize].store(ns, Ordering::Relaxed);
    }
    r
}
