//! Operations on descriptors over the network poller, shared by the C API (`ffi`) and the
//! interposer's hooks (`interpose`): Go's `internal/poll` (fd_unix.go, fd_mutex.go,
//! fd_poll_runtime.go) over `rt::netpoll`.
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
use core::sync::atomic::{AtomicBool, Ordering};

use crate::rt;
use crate::rt::netpoll::{self, MODE_READ, MODE_WRITE, PollDesc, WaitError};
use crate::sync::mutex::Mutex;

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
pub(crate) fn on_goroutine_with_p() -> bool {
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
        if rt::timer::sleep(pause.min(left)) != 0 {
            // The caller's scope ended: so does the wait for the turn.
            return false;
        }
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
        libc::POLLIN as u32
    } else {
        libc::POLLOUT as u32
    };
    if !pd.incref() {
        return Some(-(libc::EBADF as i64));
    }
    let seq = pd.seq();
    let (state, sema) = &pd.op_lock[(mode == MODE_WRITE) as usize];
    let turn = Mutex { state, sema };
    if !take_turn(&turn, deadline) {
        pd.decref();
        return Some(-(rt::scope::timeout_errno() as i64));
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
                Err(WaitError::Scope(e)) => -(e as i64),
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
pub(crate) const STALE_WAIT: c_int = i32::MIN + 1;

/// `io_until`'s wait result when `gmp_fd_unregister` took the fd off the poller.
const UNREGISTERED: i64 = i64::MIN;

/// `io_until`'s result when the number names another file than the one registered
/// (`PollDesc::same_file`).
const STALE: i64 = i64::MIN + 1;

/// `io` with the non-blocking form `nowait`, or, for an fd that is not registered, the
/// blocking call `plain` through the syscall hand-off.
pub(crate) fn io_or_blocking(
    fd: c_int,
    mode: u32,
    timeout_ns: i64,
    nowait: impl Fn() -> isize,
    plain: impl Fn() -> isize,
) -> i64 {
    if let Some(r) = io(fd, mode, deadline_of(timeout_ns), &nowait) {
        return r;
    }
    offload_or_here(&|| plain() as i64)
}

/// preadv2/pwritev2's flag that makes one call non-blocking whatever the file's O_NONBLOCK
/// (Linux 4.14 for sockets and regular files; pipes, eventfds and timerfds later).
pub(crate) const RWF_NOWAIT: c_int = 0x8;

/// Whether a call refused RWF_NOWAIT (an older kernel, or a file that does not offer it).
/// ENOSYS (no preadv2 at all: a kernel before 4.6, or an emulator) is remembered, so later
/// calls go straight to the fallback. EINVAL is also the answer of a file that has no such
/// operation at all (a write to a timerfd): the fallback gives it back (`when_ready`).
fn nowait_refused(r: isize) -> bool {
    if r >= 0 {
        return false;
    }
    match crate::sys::errno() {
        libc::ENOSYS => {
            NO_PREADV2.store(true, Ordering::Relaxed);
            true
        }
        libc::EOPNOTSUPP | libc::EINVAL => true,
        _ => false,
    }
}

/// Set once preadv2/pwritev2 answered ENOSYS. Relaxed: a hint; a thread that has not seen
/// it yet makes the call once more and gets ENOSYS again.
static NO_PREADV2: AtomicBool = AtomicBool::new(false);

/// Whether the per-call non-blocking forms go straight to `when_ready`: preadv2 is
/// missing, or `GMP_DEBUG=rwfnowait=0` asks for the fallback (the tests run it on kernels
/// that have RWF_NOWAIT).
fn no_rwf_nowait() -> bool {
    NO_PREADV2.load(Ordering::Relaxed)
        || crate::sys::dbgvars::get(crate::sys::dbgvars::Var::Rwfnowait) == 0
}

/// The call that `readv_nowait`/`writev_nowait` make where RWF_NOWAIT is refused: EAGAIN
/// when the fd is not ready (the caller parks in the poller, whose next edge is for data
/// that comes after this look), else the blocking call through the syscall hand-off. Ready,
/// it takes what there is without waiting (a read) or at most waits for room for the rest
/// (a write, which a blocking write does anyway), unless another reader or writer takes
/// the readiness first; then it blocks, as its P is handed off, which is what the call is.
/// Not ready on an fd the program made non-blocking, the call itself answers (it cannot
/// block): EAGAIN, or its own error where readiness never comes (a write to a timerfd
/// gets EINVAL, as from libc).
fn when_ready(
    fd: c_int,
    events: libc::c_short,
    len: impl FnOnce() -> usize,
    op: impl Fn() -> isize,
) -> isize {
    if !ready_now(fd, events) {
        return if nonblocking(fd) || never_ready(fd, events, len) {
            op()
        } else {
            -1
        };
    }
    handed_off(op)
}

/// Whether a call moving `len` bytes on `fd` (`events`: read or write) is one the file
/// refuses whatever its state, so that it fails at once instead of blocking, and a
/// readiness wait for it would never end: a write to an anonymous-inode file other than
/// an eventfd (timerfd, signalfd, epoll, pidfd…: EINVAL or EBADF from libc), a read of an
/// epoll fd, a read or write of an eventfd shorter than its 8-byte count, a read of a
/// signalfd shorter than one `signalfd_siginfo` (EINVAL).
fn never_ready(fd: c_int, events: libc::c_short, len: impl FnOnce() -> usize) -> bool {
    // SAFETY: fstat writes only into `st`, a local of the right type.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != 0 {
        // Not an anonymous inode (those have no file type).
        return false;
    }
    // "/proc/self/fd/<fd>", NUL-terminated (the buffer starts zeroed), without allocating.
    let mut buf = [0u8; 32];
    let digits = crate::sys::fmt_u64(fd.max(0) as u64);
    let path = crate::sys::fmt_msg(&mut buf[..31], &[b"/proc/self/fd/", &digits]);
    let mut name = [0u8; 64];
    // SAFETY: path is NUL-terminated; readlink writes at most name.len() bytes into name.
    let n = unsafe { libc::readlink(path.as_ptr().cast(), name.as_mut_ptr().cast(), name.len()) };
    if n <= 0 {
        return false;
    }
    let name = &name[..n as usize];
    let write = events & libc::POLLOUT != 0;
    let short = |min: usize| len() < min;
    match name {
        b"anon_inode:[eventfd]" => short(8),
        b"anon_inode:[signalfd]" => write || short(size_of::<libc::signalfd_siginfo>()),
        b"anon_inode:[eventpoll]" => true,
        _ => write,
    }
}

/// readv(2) that never blocks the thread, whatever the fd's O_NONBLOCK says: RWF_NOWAIT,
/// or, where the kernel or the file refuses it (pipes on older kernels, qemu-user), EAGAIN
/// or the call through the syscall hand-off once a poll says the fd is readable
/// (`when_ready`). -1 and errno on failure.
///
/// # Safety
/// As readv(2).
pub(crate) unsafe fn readv_nowait(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    nowait_or_when_ready(
        fd,
        libc::POLLIN,
        iov,
        n,
        // SAFETY: caller contract; offset -1 is the file position, as readv uses.
        || unsafe { crate::sys::real::preadv2(fd, iov, n, -1, RWF_NOWAIT) },
        // SAFETY: as above.
        || unsafe { crate::sys::real::readv(fd, iov, n) },
    )
}

/// writev(2) that never blocks the thread (see `readv_nowait`). A pipe or stream socket
/// may take part of the data, as with O_NONBLOCK.
///
/// # Safety
/// As writev(2).
pub(crate) unsafe fn writev_nowait(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    nowait_or_when_ready(
        fd,
        libc::POLLOUT,
        iov,
        n,
        // SAFETY: caller contract.
        || unsafe { crate::sys::real::pwritev2(fd, iov, n, -1, RWF_NOWAIT) },
        // SAFETY: as above.
        || unsafe { crate::sys::real::writev(fd, iov, n) },
    )
}

/// `nowait` (the RWF_NOWAIT call) unless the kernel refuses it, else `when_ready` with the
/// plain call `blocking`.
fn nowait_or_when_ready(
    fd: c_int,
    events: libc::c_short,
    iov: *const libc::iovec,
    n: c_int,
    nowait: impl FnOnce() -> isize,
    blocking: impl Fn() -> isize,
) -> isize {
    if !no_rwf_nowait() {
        let r = nowait();
        if !nowait_refused(r) {
            return r;
        }
    }
    // SAFETY: the callers' contract: iov is valid for n entries.
    let len = || unsafe { iov_len(iov, n) };
    when_ready(fd, events, len, blocking)
}

/// The bytes `n` iovecs at `iov` describe (0 for a negative `n`).
///
/// # Safety
/// `iov` is valid for `n` entries.
unsafe fn iov_len(iov: *const libc::iovec, n: c_int) -> usize {
    if n <= 0 || iov.is_null() {
        return 0;
    }
    // SAFETY: caller contract.
    let v = unsafe { core::slice::from_raw_parts(iov, n as usize) };
    v.iter().fold(0usize, |t, e| t.saturating_add(e.iov_len))
}

/// Runs a blocking call through the syscall hand-off (`offload_or_here`); -1 and errno on
/// failure.
fn handed_off(op: impl Fn() -> isize) -> isize {
    let r = offload_or_here(&|| op() as i64);
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

/// Whether the open file `fd` refers to has O_NONBLOCK set.
pub(crate) fn nonblocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL has no memory preconditions.
    let fl = unsafe { crate::sys::real::fcntl(fd, libc::F_GETFL, 0) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

/// Whether `fd` is readable (or writable: `events`) now, by a zero-timeout poll(2);
/// EAGAIN in errno if not. EINTR (the runtime's own signals land on the thread) asks
/// again, as `interpose::wait::check_now` says why. An error of poll's own counts as
/// ready: the call that follows reports it.
pub(crate) fn ready_now(fd: c_int, events: i16) -> bool {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd; a zero timeout never blocks.
        let n = unsafe { crate::sys::real::poll(&mut p, 1, 0) };
        if n == 0 {
            // SAFETY: this thread's errno, which `raw` reads and restores.
            unsafe { *libc::__errno_location() = libc::EAGAIN };
            return false;
        }
        if n > 0 || crate::sys::errno() != libc::EINTR {
            return true;
        }
    }
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

#[inline]
fn errno_ptr() -> *mut c_int {
    // SAFETY: __errno_location has no preconditions and returns this thread's errno.
    unsafe { libc::__errno_location() }
}

/// A goroutine's blocking call, as `raw_call` (its result, or -errno): on a helper thread
/// while the goroutine parks bound to its M when other goroutines are bound to that M
/// (they can run meanwhile, and the call may be waiting for one of them, as a write to a
/// pipe waits for its reader: rt/offload.rs), else through the syscall hand-off on the
/// caller's thread. For calls whose effect is not tied to the calling thread.
pub(crate) fn offload_or_here(op: &dyn Fn() -> i64) -> i64 {
    if rt::offload::wanted() {
        // SAFETY: on a goroutine that wanted() accepted; op is thread-agnostic (a libc
        // call on the caller's arguments, which stay alive while it parks).
        let (r, e) = unsafe { rt::offload::run(op) };
        return if r < 0 { -(e as i64) } else { r };
    }
    raw_call(op)
}

/// Runs a raw libc call that reports failure as -1 + errno, as a blocking call, and
/// returns its result or -errno. errno is read right after the call, on the same thread,
/// and the caller's errno is restored (these functions never report through errno).
#[inline]
pub(crate) fn raw_call(f: impl FnOnce() -> i64) -> i64 {
    let e = errno_ptr();
    // SAFETY: e is this thread's errno; the goroutine does not change threads inside a
    // blocking call (HACKING.md, decision 4), so e stays this thread's errno throughout.
    let saved = unsafe { *e };
    let r = rt::syscall::blocking(|| {
        let r = f();
        // SAFETY: as above.
        if r < 0 { -(unsafe { *e } as i64) } else { r }
    });
    // SAFETY: as above.
    unsafe { *e = saved };
    r
}
