//! C API for the network poller: sockets and pipes on which goroutines wait without holding
//! a thread (rt/netpoll.rs), over the descriptor operations of `crate::poll`.

use core::ffi::{c_int, c_void};

use super::boundary;
use crate::poll::*;
use crate::rt;
use crate::rt::netpoll::{self, MODE_READ, MODE_WRITE, WaitError};
use crate::sync::mutex::Mutex;

/// gmp_fd_wait: wait until the fd is readable (same value as POLLIN).
pub const GMP_POLLIN: u32 = 1;
/// gmp_fd_wait: wait until the fd is writable (same value as POLLOUT).
pub const GMP_POLLOUT: u32 = 4;
const _: () = assert!(GMP_POLLIN == libc::POLLIN as u32 && GMP_POLLOUT == libc::POLLOUT as u32);

/// Puts `fd` under the poller: it is made non-blocking, and gmp_read, gmp_write, gmp_recv,
/// gmp_send, … on it park the calling goroutine (not the thread) until it is ready. Sockets,
/// pipes, FIFOs, terminals, eventfds and the like qualify; a regular file or a directory
/// cannot be polled and stays as it is (0 too: the calls on it keep blocking through the
/// syscall hand-off). Idempotent. Returns 0, or -EBADF if `fd` is not open (or beyond
/// 1,048,576), or another -errno from epoll.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_fd_register(fd: c_int) -> c_int {
    boundary("gmp_fd_register", || {
        rt::init();
        match netpoll::register(fd) {
            Ok(_) => 0,
            Err(e) => -e,
        }
    })
}

/// Takes `fd` off the poller and makes it blocking again if the registration made it
/// non-blocking (gmp_fd_register on a blocking fd, or an fd gmp_socket, gmp_pipe or
/// gmp_accept created); an O_NONBLOCK the program set stays. Goroutines parked on it wake
/// up and finish their call as a blocking one. 0 (also for an fd that was not
/// registered), or -EBADF for a negative fd.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_fd_unregister(fd: c_int) -> c_int {
    boundary("gmp_fd_unregister", || {
        if fd < 0 {
            return -libc::EBADF;
        }
        match netpoll::unregister(fd) {
            Ok(()) => 0,
            Err(e) => -e,
        }
    })
}

/// Parks until `fd` is readable (GMP_POLLIN) and/or writable (GMP_POLLOUT), the timeout
/// passes (`timeout_ns` < 0: none) or the fd is closed. Returns the ready events (a
/// non-zero subset of `events`); -ETIMEDOUT; -EBADF if the fd is not open or was closed
/// meanwhile; -EINVAL for an empty or unknown event mask. Works on any fd; one that is not
/// registered is waited for with poll(2) (the thread blocks).
#[unsafe(no_mangle)]
pub extern "C" fn gmp_fd_wait(fd: c_int, events: u32, timeout_ns: i64) -> c_int {
    boundary("gmp_fd_wait", || {
        if events == 0 || events & !(GMP_POLLIN | GMP_POLLOUT) != 0 {
            return -libc::EINVAL;
        }
        if fd < 0 {
            return -libc::EBADF;
        }
        let deadline = deadline_of(timeout_ns);
        // Level-triggered answer first (the poller's edges say only what changed).
        let mut p = libc::pollfd {
            fd,
            events: events as i16,
            revents: 0,
        };
        let now = |p: &mut libc::pollfd| {
            // A signal (the runtime's preemption, or the program's) can end even a poll
            // that does not wait with EINTR: it is asked again.
            let r = loop {
                // SAFETY: one valid pollfd.
                let r = raw(|| unsafe { crate::sys::real::poll(p, 1, 0) } as isize);
                if r != -(libc::EINTR as i64) {
                    break r;
                }
            };
            if r < 0 {
                return r as c_int;
            }
            if p.revents & libc::POLLNVAL != 0 {
                return -libc::EBADF;
            }
            let mut ready = 0;
            if p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                ready |= events & GMP_POLLIN;
            }
            if p.revents & (libc::POLLOUT | libc::POLLHUP | libc::POLLERR) != 0 {
                ready |= events & GMP_POLLOUT;
            }
            ready as c_int
        };
        // An fd not under the poller: poll(2) on this thread.
        let unpolled = |p: &mut libc::pollfd| loop {
            let r = now(p);
            if r != 0 {
                return r;
            }
            let w = poll_wait(fd, events, deadline);
            if w < 0 {
                return w as c_int;
            }
        };
        let Some(pd) = registered(fd).filter(|_| on_goroutine_with_p()) else {
            return unpolled(&mut p);
        };
        if !pd.incref() {
            return -libc::EBADF;
        }
        let seq = pd.seq();
        let mut modes = 0;
        if events & GMP_POLLIN != 0 {
            modes |= MODE_READ;
        }
        if events & GMP_POLLOUT != 0 {
            modes |= MODE_WRITE;
        }
        // Each direction waited for takes its turn lock, in a fixed order.
        let turns: [Mutex; 2] = core::array::from_fn(|i| Mutex {
            state: &pd.op_lock[i].0,
            sema: &pd.op_lock[i].1,
        });
        let mut taken = [false; 2];
        for (i, t) in turns.iter().enumerate() {
            if modes & (1 << i) != 0 {
                if !take_turn(t, deadline) {
                    for (t, _) in turns.iter().zip(taken).filter(|(_, k)| *k) {
                        t.unlock();
                    }
                    pd.decref();
                    // The deadline passed waiting for the turn: what is ready now, or
                    // the timeout.
                    let r = now(&mut p);
                    return if r != 0 { r } else { -libc::ETIMEDOUT };
                }
                taken[i] = true;
            }
        }
        let mut checked = false;
        let r = loop {
            let r = now(&mut p);
            if r != 0 {
                break r;
            }
            if !checked {
                checked = true;
                // Another file under the number than the one registered: poll(2), below.
                if !pd.same_file(fd) {
                    break STALE_WAIT;
                }
            }
            // SAFETY: a goroutine holding a P (checked above; nothing since could move it
            // off its P but a park, after which it holds one again), with a reference.
            match unsafe { netpoll::wait(pd, seq, modes, deadline) } {
                Ok(_) => continue,
                // Unregistered meanwhile (not closed): waited for with poll(2), below.
                Err(WaitError::Closed) if !pd.closing() => break i32::MIN,
                Err(WaitError::Closed) => break -libc::EBADF,
                Err(WaitError::TimedOut) => break -libc::ETIMEDOUT,
                Err(WaitError::Scope(e)) => break -e,
            }
        };
        for (i, t) in turns.iter().enumerate() {
            if modes & (1 << i) != 0 {
                t.unlock();
            }
        }
        pd.decref();
        match r {
            i32::MIN => unpolled(&mut p),
            STALE_WAIT => {
                netpoll::forget_stale(fd);
                unpolled(&mut p)
            }
            r => r,
        }
    })
}

/// socket(2) for goroutines: the new socket is registered with the poller (and
/// SOCK_CLOEXEC is added). Returns the fd or -errno.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    boundary("gmp_socket", || {
        rt::init();
        // SAFETY: plain syscall.
        let fd = raw(|| unsafe {
            crate::sys::real::socket(
                domain,
                ty | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                protocol,
            )
        } as isize);
        if fd < 0 {
            return fd as c_int;
        }
        register_new(fd as c_int)
    })
}

/// Registers an fd the library just created; closes it on failure.
fn register_new(fd: c_int) -> c_int {
    match netpoll::register_created(fd) {
        Ok(_) => {
            crate::sys::tsan::fd_opened(fd);
            fd
        }
        Err(e) => {
            // SAFETY: fd is ours, just created.
            unsafe { crate::sys::real::close(fd) };
            -e
        }
    }
}

/// pipe(2) for goroutines: both ends are registered with the poller (O_CLOEXEC). Returns 0
/// and the fds in `fds[0]` (read end) and `fds[1]`, or -errno; -EINVAL if `fds` is NULL.
///
/// # Safety
/// `fds` is NULL or points to two writable ints.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_pipe(fds: *mut c_int) -> c_int {
    boundary("gmp_pipe", || {
        if fds.is_null() {
            return -libc::EINVAL;
        }
        rt::init();
        let mut p = [0 as c_int; 2];
        // SAFETY: p is a valid two-int array.
        let r = raw(|| unsafe {
            crate::sys::real::pipe2(p.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC)
        } as isize);
        if r < 0 {
            return r as c_int;
        }
        for &fd in &p {
            if let Err(e) = netpoll::register_created(fd) {
                // SAFETY: both fds are ours, just created.
                unsafe {
                    crate::sys::real::close(p[0]);
                    crate::sys::real::close(p[1]);
                }
                return -e;
            }
        }
        crate::sys::tsan::fd_opened(p[0]);
        crate::sys::tsan::fd_opened(p[1]);
        // SAFETY: caller contract.
        unsafe {
            *fds = p[0];
            *fds.add(1) = p[1];
        }
        0
    })
}

/// accept4(2) for goroutines with a timeout (`timeout_ns` < 0: none): parks until a
/// connection arrives. The new socket is registered with the poller. `addr`/`addrlen` as
/// for accept (both may be NULL); `flags`: SOCK_CLOEXEC (SOCK_NONBLOCK is implied
/// underneath). Returns the new fd, -ETIMEDOUT, -EBADF (also when `fd` is closed
/// meanwhile) or -errno.
///
/// # Safety
/// `addr` is NULL or writable for `*addrlen` bytes; `addrlen` is NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_accept_timeout(
    fd: c_int,
    addr: *mut libc::sockaddr,
    addrlen: *mut libc::socklen_t,
    flags: c_int,
    timeout_ns: i64,
) -> c_int {
    boundary("gmp_accept", || {
        if addr.is_null() != addrlen.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: caller contract.
        let plain = || unsafe {
            crate::sys::real::accept4(fd, addr, addrlen, flags | libc::SOCK_NONBLOCK) as isize
        };
        let r = io_or_blocking(
            fd,
            MODE_READ,
            timeout_ns,
            || accept_when_ready(fd, &plain),
            plain,
        );
        if r < 0 {
            return r as c_int;
        }
        register_new(r as c_int)
    })
}

/// gmp_accept_timeout without a timeout.
///
/// # Safety
/// As gmp_accept_timeout.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_accept(
    fd: c_int,
    addr: *mut libc::sockaddr,
    addrlen: *mut libc::socklen_t,
    flags: c_int,
) -> c_int {
    // SAFETY: same contract.
    unsafe { gmp_accept_timeout(fd, addr, addrlen, flags, -1) }
}

/// connect(2) for goroutines: parks until the connection is established or fails, or the
/// timeout passes (`timeout_ns` < 0: none). Returns 0, -ETIMEDOUT, or -errno
/// (-ECONNREFUSED…). On a socket that is not registered, blocks through the hand-off.
///
/// # Safety
/// `addr` is valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_connect(
    fd: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
    timeout_ns: i64,
) -> c_int {
    boundary("gmp_connect", || {
        if addr.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: caller contract.
        let connect = || unsafe { crate::sys::real::connect(fd, addr, len) } as isize;
        if registered(fd).is_some() && !nonblocking(fd) {
            // A blocking socket (the interposer registers without O_NONBLOCK): connect has
            // no per-call non-blocking form, so it blocks, through the hand-off (on a
            // helper when goroutines are bound to this thread: the listener's acceptor
            // may be one of them).
            return offload_or_here(&|| connect() as i64) as c_int;
        }
        let r = raw(connect);
        if r != -(libc::EINPROGRESS as i64) || registered(fd).is_none() {
            if r == -(libc::EINPROGRESS as i64) {
                // Not ours, and non-blocking by the user's choice: wait like poll(2).
                let w = poll_wait(fd, GMP_POLLOUT, deadline_of(timeout_ns));
                if w < 0 {
                    return w as c_int;
                }
                return so_error(fd);
            }
            return r as c_int;
        }
        // In progress: writable means done (Go's connect: wait for write, then SO_ERROR).
        let w = io(fd, MODE_WRITE, deadline_of(timeout_ns), || {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLOUT,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { crate::sys::real::poll(&mut p, 1, 0) };
            // A signal can end even this poll with EINTR: not known yet, so wait.
            if n == 0 || (n < 0 && crate::sys::errno() == libc::EINTR) {
                // SAFETY: sets this thread's errno, which `raw` reads and restores.
                unsafe { *libc::__errno_location() = libc::EAGAIN };
                -1
            } else {
                n as isize
            }
        });
        match w {
            Some(w) if w < 0 => w as c_int,
            _ => so_error(fd),
        }
    })
}

/// Checks a buffer argument: NULL is allowed only with length 0.
fn bad_buf(p: *const c_void, n: usize) -> bool {
    p.is_null() && n != 0
}

/// recv(2) with a timeout (`timeout_ns` < 0: none): parks until data arrives. Returns the
/// byte count (0 at end of stream), -ETIMEDOUT, -EBADF when the fd is closed meanwhile, or
/// -errno; -EINVAL if `buf` is NULL with `n` > 0.
///
/// # Safety
/// `buf` is writable for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_recv_timeout(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    flags: c_int,
    timeout_ns: i64,
) -> i64 {
    boundary("gmp_recv", || {
        if bad_buf(buf, n) {
            return -(libc::EINVAL as i64);
        }
        // SAFETY: caller contract.
        let call = |f: c_int| unsafe { crate::sys::real::recv(fd, buf, n, f) };
        io_or_blocking(
            fd,
            MODE_READ,
            timeout_ns,
            || call(flags | libc::MSG_DONTWAIT),
            || call(flags),
        )
    })
}

/// gmp_recv_timeout without a timeout.
///
/// # Safety
/// As gmp_recv_timeout.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_recv(fd: c_int, buf: *mut c_void, n: usize, flags: c_int) -> i64 {
    // SAFETY: same contract.
    unsafe { gmp_recv_timeout(fd, buf, n, flags, -1) }
}

/// send(2) with a timeout: parks while the socket's buffer is full. Returns the byte count
/// (possibly partial), -ETIMEDOUT, -EBADF, -EPIPE… (MSG_NOSIGNAL is added: no SIGPIPE).
///
/// # Safety
/// `buf` is readable for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_send_timeout(
    fd: c_int,
    buf: *const c_void,
    n: usize,
    flags: c_int,
    timeout_ns: i64,
) -> i64 {
    boundary("gmp_send", || {
        if bad_buf(buf, n) {
            return -(libc::EINVAL as i64);
        }
        // SAFETY: caller contract.
        let call = |f: c_int| unsafe {
            crate::sys::real::send(fd, buf, n, flags | f | libc::MSG_NOSIGNAL)
        };
        io_or_blocking(
            fd,
            MODE_WRITE,
            timeout_ns,
            || call(libc::MSG_DONTWAIT),
            || call(0),
        )
    })
}

/// gmp_send_timeout without a timeout.
///
/// # Safety
/// As gmp_send_timeout.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_send(fd: c_int, buf: *const c_void, n: usize, flags: c_int) -> i64 {
    // SAFETY: same contract.
    unsafe { gmp_send_timeout(fd, buf, n, flags, -1) }
}

/// recvfrom(2) with a timeout (see gmp_recv_timeout). `addr`/`addrlen` may be NULL.
///
/// # Safety
/// `buf` writable for `n` bytes; `addr` NULL or writable for `*addrlen` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_recvfrom_timeout(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    flags: c_int,
    addr: *mut libc::sockaddr,
    addrlen: *mut libc::socklen_t,
    timeout_ns: i64,
) -> i64 {
    boundary("gmp_recvfrom", || {
        if bad_buf(buf, n) || addr.is_null() != addrlen.is_null() {
            return -(libc::EINVAL as i64);
        }
        // SAFETY: caller contract.
        let call =
            |f: c_int| unsafe { crate::sys::real::recvfrom(fd, buf, n, flags | f, addr, addrlen) };
        io_or_blocking(
            fd,
            MODE_READ,
            timeout_ns,
            || call(libc::MSG_DONTWAIT),
            || call(0),
        )
    })
}

/// gmp_recvfrom_timeout without a timeout.
///
/// # Safety
/// As gmp_recvfrom_timeout.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    flags: c_int,
    addr: *mut libc::sockaddr,
    addrlen: *mut libc::socklen_t,
) -> i64 {
    // SAFETY: same contract.
    unsafe { gmp_recvfrom_timeout(fd, buf, n, flags, addr, addrlen, -1) }
}

/// sendto(2) with a timeout (see gmp_send_timeout).
///
/// # Safety
/// `buf` readable for `n` bytes; `addr` NULL or valid for `addrlen` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_sendto_timeout(
    fd: c_int,
    buf: *const c_void,
    n: usize,
    flags: c_int,
    addr: *const libc::sockaddr,
    addrlen: libc::socklen_t,
    timeout_ns: i64,
) -> i64 {
    boundary("gmp_sendto", || {
        if bad_buf(buf, n) {
            return -(libc::EINVAL as i64);
        }
        // SAFETY: caller contract.
        let call = |f: c_int| unsafe {
            crate::sys::real::sendto(fd, buf, n, flags | f | libc::MSG_NOSIGNAL, addr, addrlen)
        };
        io_or_blocking(
            fd,
            MODE_WRITE,
            timeout_ns,
            || call(libc::MSG_DONTWAIT),
            || call(0),
        )
    })
}

/// gmp_sendto_timeout without a timeout.
///
/// # Safety
/// As gmp_sendto_timeout.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_sendto(
    fd: c_int,
    buf: *const c_void,
    n: usize,
    flags: c_int,
    addr: *const libc::sockaddr,
    addrlen: libc::socklen_t,
) -> i64 {
    // SAFETY: same contract.
    unsafe { gmp_sendto_timeout(fd, buf, n, flags, addr, addrlen, -1) }
}

/// recvmsg(2) with a timeout (see gmp_recv_timeout); -EINVAL if `msg` is NULL.
///
/// # Safety
/// `msg` is a valid msghdr whose buffers are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_recvmsg_timeout(
    fd: c_int,
    msg: *mut libc::msghdr,
    flags: c_int,
    timeout_ns: i64,
) -> i64 {
    boundary("gmp_recvmsg", || {
        if msg.is_null() {
            return -(libc::EINVAL as i64);
        }
        // SAFETY: caller contract.
        let call = |f: c_int| unsafe { crate::sys::real::recvmsg(fd, msg, flags | f) };
        io_or_blocking(
            fd,
            MODE_READ,
            timeout_ns,
            || call(libc::MSG_DONTWAIT),
            || call(0),
        )
    })
}

/// gmp_recvmsg_timeout without a timeout.
///
/// # Safety
/// As gmp_recvmsg_timeout.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> i64 {
    // SAFETY: same contract.
    unsafe { gmp_recvmsg_timeout(fd, msg, flags, -1) }
}

/// sendmsg(2) with a timeout (see gmp_send_timeout); -EINVAL if `msg` is NULL.
///
/// # Safety
/// `msg` is a valid msghdr whose buffers are readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_sendmsg_timeout(
    fd: c_int,
    msg: *const libc::msghdr,
    flags: c_int,
    timeout_ns: i64,
) -> i64 {
    boundary("gmp_sendmsg", || {
        if msg.is_null() {
            return -(libc::EINVAL as i64);
        }
        // SAFETY: caller contract.
        let call = |f: c_int| unsafe {
            crate::sys::real::sendmsg(fd, msg, flags | f | libc::MSG_NOSIGNAL)
        };
        io_or_blocking(
            fd,
            MODE_WRITE,
            timeout_ns,
            || call(libc::MSG_DONTWAIT),
            || call(0),
        )
    })
}

/// gmp_sendmsg_timeout without a timeout.
///
/// # Safety
/// As gmp_sendmsg_timeout.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> i64 {
    // SAFETY: same contract.
    unsafe { gmp_sendmsg_timeout(fd, msg, flags, -1) }
}
