//! C API for the network poller: sockets and pipes on which goroutines wait without holding
//! a thread (rt/netpoll.rs).
//!
//! Every operation on a registered fd follows one pattern (`io`): try the non-blocking
//! call; on EAGAIN park on the poller until the fd is ready, the deadline passes or the fd
//! is closed; try again. Concurrent readers (or writers) of one fd take turns on the
//! descriptor's per-direction mutex (Go's fdMutex), so at most one goroutine waits per
//! direction and no wake-up is lost. A thread that is not a goroutine (or a goroutine
//! between gmp_entersyscall and gmp_exitsyscall, which holds no processor) waits in
//! poll(2) instead, with the same results. errno is never changed: each raw call's errno is
//! read and the caller's value put back before anything can switch threads.

use core::ffi::{c_int, c_void};

use super::boundary;
use crate::rt;
use crate::rt::netpoll::{self, MODE_READ, MODE_WRITE, PollDesc, WaitError};
use crate::sync::mutex::Mutex;

/// gmp_fd_wait: wait until the fd is readable (same value as POLLIN).
pub const GMP_POLLIN: u32 = 1;
/// gmp_fd_wait: wait until the fd is writable (same value as POLLOUT).
pub const GMP_POLLOUT: u32 = 4;
const _: () = assert!(GMP_POLLIN == libc::POLLIN as u32 && GMP_POLLOUT == libc::POLLOUT as u32);

/// Runs one raw call that reports failure as -1 + errno, on this thread, and returns its
/// result or -errno, leaving errno as it was.
#[inline]
pub(crate) fn raw(f: impl FnOnce() -> isize) -> i64 {
    // SAFETY: __errno_location returns this thread's errno; nothing in between switches.
    unsafe {
        let e = libc::__errno_location();
        let saved = *e;
        let r = f();
        let r = if r < 0 { -(*e as i64) } else { r as i64 };
        *e = saved;
        r
    }
}

/// The deadline of a C timeout: < 0 none, else relative nanoseconds from now (0: do not
/// wait — reported as timed out, as for channels).
pub(crate) fn deadline_of(timeout_ns: i64) -> Option<i64> {
    (timeout_ns >= 0).then(|| crate::sys::nanotime().saturating_add(timeout_ns))
}

/// Whether the caller can park on the poller: a goroutine holding a processor.
fn on_goroutine_with_p() -> bool {
    let m = rt::getm();
    // SAFETY: a non-null TLS slot is this thread's M; only it writes its `p` and `curg`.
    !m.is_null()
        && unsafe { !(*m).p.load(core::sync::atomic::Ordering::Relaxed).is_null() }
        && !rt::getg().is_null()
}

/// Waits in poll(2) for `events` (POLLIN/POLLOUT) until `deadline`: 0 ready, -ETIMEDOUT,
/// or -errno.
pub(crate) fn poll_wait(fd: c_int, events: u32, deadline: Option<i64>) -> i64 {
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d - crate::sys::nanotime();
                if left <= 0 {
                    return -(libc::ETIMEDOUT as i64);
                }
                (left.saturating_add(999_999) / 1_000_000).min(i32::MAX as i64) as c_int
            }
        };
        let mut p = libc::pollfd {
            fd,
            events: events as i16,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = raw(|| unsafe { crate::sys::real::poll(&mut p, 1, ms) } as isize);
        if r == -(libc::EINTR as i64) || r == 0 {
            continue;
        }
        if r < 0 {
            return r;
        }
        if p.revents & libc::POLLNVAL != 0 {
            return -(libc::EBADF as i64);
        }
        return 0;
    }
}

/// `poll_wait` for a thread holding a reference on `pd`: in slices of at most 20 ms, with
/// a look at `pd` in between, so that `gmp_close` (which waits for every reference to go)
/// is not held up by a thread asleep in poll(2) on an fd with no traffic: -EBADF once the
/// fd is being closed.
fn poll_wait_pd(pd: &PollDesc, seq: u32, fd: c_int, events: u32, deadline: Option<i64>) -> i64 {
    const SLICE_NS: i64 = 20_000_000;
    loop {
        if !pd.registered() || pd.seq() != seq {
            return -(libc::EBADF as i64);
        }
        let now = crate::sys::nanotime();
        let slice_end = now.saturating_add(SLICE_NS);
        let (until, last) = match deadline {
            Some(d) if d <= slice_end => (d, true),
            _ => (slice_end, false),
        };
        let r = poll_wait(fd, events, Some(until));
        if r != -(libc::ETIMEDOUT as i64) || last {
            return r;
        }
    }
}

/// `poll_wait_pd` for a thread that is not an M (C main), which may poll without
/// sleeping a moment first when it is in a quick exchange with goroutines
/// (`sys::foreign_wait`); an idle M then stays awake for its next hand-off too.
fn foreign_poll_wait(
    pd: &PollDesc,
    seq: u32,
    fd: c_int,
    events: u32,
    deadline: Option<i64>,
) -> i64 {
    let r = core::cell::Cell::new(-(libc::ETIMEDOUT as i64));
    let timeout = deadline
        .map(|d| core::time::Duration::from_nanos((d - crate::sys::nanotime()).max(0) as u64));
    crate::sys::foreign_wait(
        timeout,
        |ns| {
            let end = crate::sys::nanotime().saturating_add(ns);
            loop {
                let mut p = libc::pollfd {
                    fd,
                    events: events as i16,
                    revents: 0,
                };
                // SAFETY: one valid pollfd; a zero timeout does not block.
                let n = raw(|| unsafe { crate::sys::real::poll(&mut p, 1, 0) } as isize);
                if n != 0 && n != -(libc::EINTR as i64) {
                    // Ready, or an error the sleeping path reports the same way.
                    r.set(if n < 0 {
                        n
                    } else if p.revents & libc::POLLNVAL != 0 {
                        -(libc::EBADF as i64)
                    } else {
                        0
                    });
                    return true;
                }
                if crate::sys::nanotime() >= end {
                    return false;
                }
            }
        },
        |_| {
            r.set(poll_wait_pd(pd, seq, fd, events, deadline));
            r.get() != -(libc::ETIMEDOUT as i64)
        },
    );
    r.get()
}

/// The descriptor of a registered fd.
pub(crate) fn registered(fd: c_int) -> Option<&'static PollDesc> {
    netpoll::lookup(fd).filter(|pd| pd.registered())
}

/// Runs `op` on `fd` in direction `mode` until it does not report EAGAIN (see the module
/// doc). None if the fd is not registered (the caller then blocks through the syscall
/// hand-off). `op` must not block: it is a per-call non-blocking form (`readv_nowait`,
/// MSG_DONTWAIT…), since the fd itself may be blocking (the hooks leave O_NONBLOCK as the
/// program set it).
pub(crate) fn io(
    fd: c_int,
    mode: u32,
    deadline: Option<i64>,
    op: impl FnMut() -> isize,
) -> Option<i64> {
    io_until(fd, mode, deadline, op, || false)
}

/// Takes one of an fd's turn locks (one waiter per direction at a time, as the poll
/// descriptor has one waiter slot per direction), waiting at most until `deadline` (None:
/// as long as it takes). The holder may wait with no deadline of its own (a read parked
/// without a timeout), so a waiter with one cannot simply queue behind it: it tries again
/// at growing intervals (50 µs up to 5 ms), never past its deadline. False: the deadline
/// passed first.
pub(crate) fn take_turn(turn: &Mutex, deadline: Option<i64>) -> bool {
    let Some(deadline) = deadline else {
        turn.lock();
        return true;
    };
    let mut pause = 50_000;
    loop {
        if turn.try_lock() {
            return true;
        }
        let left = deadline - crate::sys::nanotime();
        if left <= 0 {
            return false;
        }
        rt::timer::sleep(pause.min(left));
        pause = (pause * 2).min(5_000_000);
    }
}

/// `io` that also ends with EAGAIN, instead of parking, when `eagain_is_final` says so
/// (the interposer: the program made the fd non-blocking where the hooks did not see it).
pub(crate) fn io_until(
    fd: c_int,
    mode: u32,
    deadline: Option<i64>,
    mut op: impl FnMut() -> isize,
    eagain_is_final: impl Fn() -> bool,
) -> Option<i64> {
    let pd = registered(fd)?;
    let events = if mode == MODE_READ {
        GMP_POLLIN
    } else {
        GMP_POLLOUT
    };
    if !pd.incref() {
        return Some(-(libc::EBADF as i64));
    }
    let seq = pd.seq();
    let (state, sema) = &pd.op_lock[(mode == MODE_WRITE) as usize];
    let turn = Mutex { state, sema };
    if !take_turn(&turn, deadline) {
        pd.decref();
        return Some(-(libc::ETIMEDOUT as i64));
    }
    let mut checked = false;
    let r = loop {
        let r = raw(&mut op);
        if r == -(libc::EINTR as i64) {
            continue;
        }
        if r != -(libc::EAGAIN as i64) || eagain_is_final() {
            break r;
        }
        if !checked {
            checked = true;
            if !pd.same_file(fd) {
                break STALE;
            }
        }
        let w = if on_goroutine_with_p() {
            // SAFETY: a goroutine holding a P, with a reference on pd taken at `seq`.
            match unsafe { netpoll::wait(pd, seq, mode, deadline) } {
                Ok(_) => 0,
                // Taken off the poller (gmp_fd_unregister), not closed: the call goes on
                // as a blocking one (below).
                Err(WaitError::Closed) if !pd.closing() => UNREGISTERED,
                Err(WaitError::Closed) => -(libc::EBADF as i64),
                Err(WaitError::TimedOut) => -(libc::ETIMEDOUT as i64),
            }
        } else if rt::getm().is_null() {
            foreign_poll_wait(pd, seq, fd, events, deadline)
        } else {
            poll_wait_pd(pd, seq, fd, events, deadline)
        };
        if w < 0 {
            break w;
        }
        if pd.seq() != seq {
            break -(libc::EBADF as i64);
        }
    };
    turn.unlock();
    pd.decref();
    if r == STALE {
        netpoll::forget_stale(fd);
    }
    // Unregistered meanwhile, or a registration of another file: the caller makes the
    // call as for an fd never registered.
    (r != UNREGISTERED && r != STALE).then_some(r)
}

/// `gmp_fd_wait`'s loop result for a registration of another file.
const STALE_WAIT: c_int = i32::MIN + 1;

/// `io_until`'s wait result when `gmp_fd_unregister` took the fd off the poller.
const UNREGISTERED: i64 = i64::MIN;
/// `io_until`'s result when the number names another file than the one registered
/// (`PollDesc::same_file`).
const STALE: i64 = i64::MIN + 1;

/// `io` with the non-blocking form `nowait`, or, for an fd that is not registered, the
/// blocking call `plain` through the syscall hand-off.
fn io_or_blocking(
    fd: c_int,
    mode: u32,
    timeout_ns: i64,
    nowait: impl Fn() -> isize,
    plain: impl Fn() -> isize,
) -> i64 {
    if let Some(r) = io(fd, mode, deadline_of(timeout_ns), &nowait) {
        return r;
    }
    super::syscall::raw_call(|| plain() as i64)
}

/// preadv2/pwritev2's flag that makes one call non-blocking whatever the file's O_NONBLOCK
/// (Linux 4.14 for sockets and regular files; pipes, eventfds and timerfds later).
const RWF_NOWAIT: c_int = 0x8;

/// Whether a call refused RWF_NOWAIT (an older kernel, or a file that does not offer it).
fn nowait_refused(r: isize) -> bool {
    r < 0
        && matches!(
            crate::sys::errno(),
            libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS
        )
}

/// readv(2) that never blocks the thread, whatever the fd's O_NONBLOCK says: RWF_NOWAIT,
/// or, where the kernel or the file refuses it, the call as a blocking one through the
/// syscall hand-off (which is what it is). -1 and errno on failure.
///
/// # Safety
/// As readv(2).
pub(crate) unsafe fn readv_nowait(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    // SAFETY: caller contract; offset -1 is the file position, as readv uses.
    let r = unsafe { libc::preadv2(fd, iov, n, -1, RWF_NOWAIT) };
    if nowait_refused(r) {
        // SAFETY: as above.
        return handed_off(|| unsafe { crate::sys::real::readv(fd, iov, n) });
    }
    r
}

/// writev(2) that never blocks the thread (see `readv_nowait`). A pipe or stream socket
/// may take part of the data, as with O_NONBLOCK.
///
/// # Safety
/// As writev(2).
pub(crate) unsafe fn writev_nowait(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    // SAFETY: caller contract.
    let r = unsafe { libc::pwritev2(fd, iov, n, -1, RWF_NOWAIT) };
    if nowait_refused(r) {
        // SAFETY: as above.
        return handed_off(|| unsafe { crate::sys::real::writev(fd, iov, n) });
    }
    r
}

/// Runs a blocking call through the syscall hand-off; -1 and errno on failure.
fn handed_off(op: impl Fn() -> isize) -> isize {
    let r = super::syscall::raw_call(|| op() as i64);
    if r < 0 {
        // SAFETY: this thread's errno.
        unsafe { *libc::__errno_location() = -r as c_int };
        -1
    } else {
        r as isize
    }
}

/// gmp_read on a registered fd: parks instead of blocking. None: not registered.
pub(crate) fn read(fd: c_int, buf: *mut c_void, n: usize) -> Option<i64> {
    let iov = libc::iovec {
        iov_base: buf,
        iov_len: n,
    };
    // SAFETY: the caller checked buf (writable for n bytes).
    io(fd, MODE_READ, None, || unsafe { readv_nowait(fd, &iov, 1) })
}

/// gmp_write on a registered fd. None: not registered.
pub(crate) fn write(fd: c_int, buf: *const c_void, n: usize) -> Option<i64> {
    let iov = libc::iovec {
        iov_base: buf as *mut c_void,
        iov_len: n,
    };
    // SAFETY: the caller checked buf (readable for n bytes).
    io(fd, MODE_WRITE, None, || unsafe {
        writev_nowait(fd, &iov, 1)
    })
}

/// gmp_close's first half for a registered fd (wakes its waiters with -EBADF, waits for
/// operations in flight, takes it off the poller; see `netpoll::close_begin_deferrable`).
pub(crate) fn close_begin(fd: c_int) -> netpoll::Close {
    netpoll::close_begin_deferrable(fd)
}

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
            // SAFETY: one valid pollfd.
            let r = raw(|| unsafe { crate::sys::real::poll(p, 1, 0) } as isize);
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
            // no per-call non-blocking form, so it blocks, through the hand-off.
            return super::syscall::raw_call(|| connect() as i64) as c_int;
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
            if n == 0 {
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

/// Whether the open file `fd` refers to has O_NONBLOCK set.
pub(crate) fn nonblocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL has no memory preconditions.
    let fl = unsafe { crate::sys::real::fcntl(fd, libc::F_GETFL, 0) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

/// Whether `fd` is readable (or writable: `events`) now, by a zero-timeout poll(2);
/// EAGAIN in errno if not.
pub(crate) fn ready_now(fd: c_int, events: i16) -> bool {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { crate::sys::real::poll(&mut p, 1, 0) };
    if n == 0 || (n < 0 && crate::sys::errno() == libc::EINTR) {
        // SAFETY: this thread's errno, which `raw` reads and restores.
        unsafe { *libc::__errno_location() = libc::EAGAIN };
        return false;
    }
    true
}

/// accept that never blocks the thread on a listening socket that may be blocking (no
/// per-call non-blocking form exists for accept): EAGAIN until poll(2) says a connection
/// waits, then the call through the syscall hand-off (another acceptor may have taken the
/// connection in between: then it blocks there, without the P).
pub(crate) fn accept_when_ready(fd: c_int, accept: &dyn Fn() -> isize) -> isize {
    if !ready_now(fd, libc::POLLIN) {
        return -1;
    }
    handed_off(accept)
}

pub(crate) fn so_error(fd: c_int) -> c_int {
    let mut err: c_int = 0;
    let mut len = core::mem::size_of::<c_int>() as libc::socklen_t;
    // SAFETY: valid out-parameters.
    let r = raw(|| unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            &mut err as *mut c_int as *mut c_void,
            &mut len,
        )
    } as isize);
    if r < 0 {
        return r as c_int;
    }
    -err
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
