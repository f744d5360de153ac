//! Reading and writing: read, write, readv, writev, and the socket calls send, recv,
//! sendto, recvfrom, sendmsg, recvmsg, over `crate::poll`.

use super::*;

/// The body of every read- or write-like hook: `op` is the call as the program made it,
/// `nowait` the same call non-blocking (see `interpose`'s module doc).
#[inline(always)]
pub(super) fn rw(
    fd: c_int,
    mode: u32,
    op: &dyn Fn() -> isize,
    nowait: &dyn Fn() -> isize,
) -> isize {
    if !on_goroutine() {
        return op();
    }
    crate::ffi::boundary("interposed call", || match classify(fd) {
        Fd::Native => op(),
        Fd::Handoff => ret(blocking_call(&|| op() as i64)),
        Fd::Managed => ret(managed_io(fd, mode, op, nowait)),
    })
}

/// A goroutine's operation on an fd under the poller that the program sees blocking:
/// `nowait` until it does not report EAGAIN, parking in between. Result or -errno.
pub(super) fn managed_io(
    fd: c_int,
    mode: u32,
    op: &dyn Fn() -> isize,
    nowait: &dyn Fn() -> isize,
) -> i64 {
    let deadline = timeout_of(fd, mode).map(|t| crate::sys::nanotime().saturating_add(t));
    let bound = rt::bind_current(); // same-thread resume
    let r = match poll::io_until(fd, mode, deadline, nowait, || user_made_nonblocking(fd)) {
        // SO_RCVTIMEO / SO_SNDTIMEO expired: EAGAIN, as POSIX says (the goroutine's scope
        // ending the wait is reported as the scope's errno).
        Some(r) if r == -(libc::ETIMEDOUT as i64) && rt::scope::current_err() == 0 => {
            -(libc::EAGAIN as i64)
        }
        Some(r) => r,
        // Closed or unregistered meanwhile: as a plain blocking call.
        None => blocking_call(&|| op() as i64),
    };
    drop(bound);
    r
}

/// Whether the program made registered fd `fd` non-blocking where the hooks did not see
/// it (through another process sharing the open file, or a call not interposed): then an
/// EAGAIN is the program's answer, and the fd's state says so from now on. Asked only
/// before a goroutine would park.
pub(super) fn user_made_nonblocking(fd: c_int) -> bool {
    if !poll::nonblocking(fd) {
        return false;
    }
    if let Some(pd) = netpoll::lookup(fd) {
        pd.hook.fetch_and(!HOOK_BLOCKING, Ordering::AcqRel);
    }
    true
}

/// A write-like hook whose blocking form moves every byte (write, writev, send, sendto,
/// sendmsg; and MSG_WAITALL receives, `mode` READ): `step(done)` makes the non-blocking
/// call for what is left after `done` of `total` bytes. On a pipe or stream socket the
/// goroutine parks and continues until all is moved, or an error, EOF or a timeout ends
/// it (then the bytes moved so far, if any, as the kernel returns them); elsewhere (a
/// datagram) one call decides.
pub(super) fn rw_all(
    fd: c_int,
    mode: u32,
    total: usize,
    op: &dyn Fn() -> isize,
    step: &dyn Fn(usize) -> isize,
) -> isize {
    if !on_goroutine() {
        return op();
    }
    crate::ffi::boundary("interposed call", || match classify(fd) {
        Fd::Native => op(),
        Fd::Handoff => ret(blocking_call(&|| op() as i64)),
        Fd::Managed => {
            let first = managed_io(fd, mode, op, &|| step(0));
            if first <= 0 || first as usize >= total || !stream(fd) {
                return ret(first);
            }
            let mut done = first as usize;
            // Closed meanwhile: what was moved is the result.
            let closed = || {
                set_errno(libc::EBADF);
                -1
            };
            while done < total {
                let r = managed_io(fd, mode, &closed, &|| step(done));
                if r <= 0 {
                    break;
                }
                done += r as usize;
            }
            done as isize
        }
    })
}

/// Whether `fd` moves a byte stream that a call may take in part: a pipe, FIFO or
/// SOCK_STREAM socket.
pub(super) fn stream(fd: c_int) -> bool {
    // SAFETY: fstat and getsockopt into valid buffers.
    unsafe {
        let mut st: libc::stat = core::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            return false;
        }
        match st.st_mode & libc::S_IFMT {
            libc::S_IFIFO => true,
            libc::S_IFSOCK => {
                let mut ty: c_int = 0;
                let mut len = core::mem::size_of::<c_int>() as libc::socklen_t;
                libc::getsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_TYPE,
                    &mut ty as *mut c_int as *mut c_void,
                    &mut len,
                ) == 0
                    && ty == libc::SOCK_STREAM
            }
            _ => false,
        }
    }
}

/// The part of `iov` (`n` entries) after its first `skip` bytes.
///
/// # Safety
/// `iov` is valid for `n` entries.
pub(super) unsafe fn iov_after(
    iov: *const libc::iovec,
    n: c_int,
    mut skip: usize,
) -> Vec<libc::iovec> {
    let mut out = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: caller contract.
        let v = unsafe { *iov.add(i) };
        if skip >= v.iov_len {
            skip -= v.iov_len;
            continue;
        }
        out.push(libc::iovec {
            // SAFETY: within the entry's buffer.
            iov_base: unsafe { (v.iov_base as *mut u8).add(skip) } as *mut c_void,
            iov_len: v.iov_len - skip,
        });
        skip = 0;
    }
    out
}

/// Total bytes of `iov` (`n` entries).
///
/// # Safety
/// `iov` is valid for `n` entries.
pub(super) unsafe fn iov_total(iov: *const libc::iovec, n: c_int) -> usize {
    // SAFETY: caller contract.
    (0..n.max(0) as usize)
        .map(|i| unsafe { (*iov.add(i)).iov_len })
        .sum()
}

/// Interposes read(2) (see `interpose`'s module doc).
///
/// # Safety
/// As read(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: usize) -> isize {
    let iov = libc::iovec {
        iov_base: buf,
        iov_len: n,
    };
    // SAFETY: the caller's arguments, as libc would get them.
    rw(
        fd,
        MODE_READ,
        &|| unsafe { real::read(fd, buf, n) },
        &|| unsafe { poll::readv_nowait(fd, &iov, 1) },
    )
}

/// Interposes write(2): a blocking write moves every byte (see `interpose`'s module doc).
///
/// # Safety
/// As write(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: usize) -> isize {
    // SAFETY: the caller's arguments.
    rw_all(
        fd,
        MODE_WRITE,
        n,
        &|| unsafe { real::write(fd, buf, n) },
        &|done| {
            let iov = libc::iovec {
                // SAFETY: within the caller's buffer.
                iov_base: unsafe { buf.add(done) } as *mut c_void,
                iov_len: n - done,
            };
            // SAFETY: as above.
            unsafe { poll::writev_nowait(fd, &iov, 1) }
        },
    )
}

/// Interposes readv(2).
///
/// # Safety
/// As readv(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    // SAFETY: the caller's arguments.
    rw(
        fd,
        MODE_READ,
        &|| unsafe { real::readv(fd, iov, n) },
        &|| unsafe { poll::readv_nowait(fd, iov, n) },
    )
}

/// Interposes writev(2): a blocking writev moves every byte.
///
/// # Safety
/// As writev(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    // SAFETY: the caller's arguments.
    let total = unsafe { iov_total(iov, n) };
    rw_all(
        fd,
        MODE_WRITE,
        total,
        &|| unsafe { real::writev(fd, iov, n) },
        &|done| {
            if done == 0 {
                // SAFETY: as above.
                return unsafe { poll::writev_nowait(fd, iov, n) };
            }
            // SAFETY: as above.
            let rest = unsafe { iov_after(iov, n, done) };
            // SAFETY: `rest` points into the caller's buffers.
            unsafe { poll::writev_nowait(fd, rest.as_ptr(), rest.len() as c_int) }
        },
    )
}

/// Whether a receive waits for the whole length (MSG_WAITALL on a blocking call).
pub(super) fn waitall(flags: c_int) -> bool {
    flags & libc::MSG_WAITALL != 0
}

/// Interposes recv(2) (MSG_WAITALL: every byte, or EOF, an error or a timeout).
///
/// # Safety
/// As recv(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: usize, flags: c_int) -> isize {
    if flags & libc::MSG_DONTWAIT != 0 {
        // SAFETY: the caller's arguments.
        return unsafe { real::recv(fd, buf, n, flags) };
    }
    // SAFETY: the caller's arguments, the bytes after `done` of the caller's buffer.
    let step = |done: usize| unsafe {
        real::recv(fd, buf.add(done), n - done, flags | libc::MSG_DONTWAIT)
    };
    // SAFETY: the caller's arguments.
    let op = || unsafe { real::recv(fd, buf, n, flags) };
    if waitall(flags) {
        return rw_all(fd, MODE_READ, n, &op, &step);
    }
    rw(fd, MODE_READ, &op, &|| step(0))
}

/// Interposes send(2): a blocking send on a stream socket queues every byte.
///
/// # Safety
/// As send(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: usize, flags: c_int) -> isize {
    if flags & libc::MSG_DONTWAIT != 0 {
        // SAFETY: the caller's arguments.
        return unsafe { real::send(fd, buf, n, flags) };
    }
    // SAFETY: the caller's arguments.
    rw_all(
        fd,
        MODE_WRITE,
        n,
        &|| unsafe { real::send(fd, buf, n, flags) },
        &|done| unsafe { real::send(fd, buf.add(done), n - done, flags | libc::MSG_DONTWAIT) },
    )
}

/// Interposes recvfrom(2).
///
/// # Safety
/// As recvfrom(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    flags: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> isize {
    if flags & libc::MSG_DONTWAIT != 0 {
        // SAFETY: the caller's arguments.
        return unsafe { real::recvfrom(fd, buf, n, flags, addr, len) };
    }
    // SAFETY: the caller's arguments, the bytes after `done` of the caller's buffer.
    let step = |done: usize| unsafe {
        real::recvfrom(
            fd,
            buf.add(done),
            n - done,
            flags | libc::MSG_DONTWAIT,
            addr,
            len,
        )
    };
    // SAFETY: the caller's arguments.
    let op = || unsafe { real::recvfrom(fd, buf, n, flags, addr, len) };
    if waitall(flags) {
        return rw_all(fd, MODE_READ, n, &op, &step);
    }
    rw(fd, MODE_READ, &op, &|| step(0))
}

/// Interposes sendto(2).
///
/// # Safety
/// As sendto(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: usize,
    flags: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> isize {
    if flags & libc::MSG_DONTWAIT != 0 {
        // SAFETY: the caller's arguments.
        return unsafe { real::sendto(fd, buf, n, flags, addr, len) };
    }
    // SAFETY: the caller's arguments.
    let op = || unsafe { real::sendto(fd, buf, n, flags, addr, len) };
    // SAFETY: the caller's arguments, the bytes after `done` of the caller's buffer.
    rw_all(fd, MODE_WRITE, n, &op, &|done| unsafe {
        real::sendto(
            fd,
            buf.add(done),
            n - done,
            flags | libc::MSG_DONTWAIT,
            addr,
            len,
        )
    })
}

/// `msg` with its data vector replaced by what is left after `done` bytes (and, after
/// the first part, without ancillary data: it went with the first byte).
///
/// # Safety
/// `msg` is a valid msghdr.
pub(super) unsafe fn msg_after(
    msg: *const libc::msghdr,
    done: usize,
    rest: &mut Vec<libc::iovec>,
) -> libc::msghdr {
    // SAFETY: caller contract.
    let mut m = unsafe { *msg };
    if done > 0 {
        // SAFETY: as above.
        *rest = unsafe { iov_after(m.msg_iov, m.msg_iovlen as c_int, done) };
        m.msg_iov = rest.as_mut_ptr();
        m.msg_iovlen = rest.len() as _;
        m.msg_control = core::ptr::null_mut();
        m.msg_controllen = 0;
    }
    m
}

/// Interposes recvmsg(2).
///
/// # Safety
/// As recvmsg(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> isize {
    if flags & libc::MSG_DONTWAIT != 0 || msg.is_null() {
        // SAFETY: the caller's arguments.
        return unsafe { real::recvmsg(fd, msg, flags) };
    }
    // SAFETY: the caller's arguments.
    let op = || unsafe { real::recvmsg(fd, msg, flags) };
    let nowait = || unsafe { real::recvmsg(fd, msg, flags | libc::MSG_DONTWAIT) };
    if !waitall(flags) {
        return rw(fd, MODE_READ, &op, &nowait);
    }
    // SAFETY: a valid msghdr (caller contract).
    let total = unsafe { iov_total((*msg).msg_iov, (*msg).msg_iovlen as c_int) };
    rw_all(fd, MODE_READ, total, &op, &|done| {
        if done == 0 {
            return nowait();
        }
        let mut rest = Vec::new();
        // SAFETY: as above.
        let mut m = unsafe { msg_after(msg, done, &mut rest) };
        // SAFETY: `m` points into the caller's buffers.
        let r = unsafe { real::recvmsg(fd, &mut m, flags | libc::MSG_DONTWAIT) };
        // SAFETY: as above: the flags the kernel reports go back to the caller's header.
        unsafe { (*msg).msg_flags = m.msg_flags };
        r
    })
}

/// Interposes sendmsg(2): a blocking sendmsg on a stream socket queues every byte.
///
/// # Safety
/// As sendmsg(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> isize {
    if flags & libc::MSG_DONTWAIT != 0 || msg.is_null() {
        // SAFETY: the caller's arguments.
        return unsafe { real::sendmsg(fd, msg, flags) };
    }
    // SAFETY: a valid msghdr (caller contract).
    let total = unsafe { iov_total((*msg).msg_iov, (*msg).msg_iovlen as c_int) };
    // SAFETY: the caller's arguments.
    rw_all(
        fd,
        MODE_WRITE,
        total,
        &|| unsafe { real::sendmsg(fd, msg, flags) },
        &|done| {
            let mut rest = Vec::new();
            // SAFETY: as above.
            let m = unsafe { msg_after(msg, done, &mut rest) };
            // SAFETY: `m` points into the caller's buffers.
            unsafe { real::sendmsg(fd, &m, flags | libc::MSG_DONTWAIT) }
        },
    )
}
