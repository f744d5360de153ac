//! The interposer (HACKING.md, decision 13): libgmp.so exports libc's blocking functions
//! under their own unversioned names, so that under `LD_PRELOAD` — or in a program linked
//! with the library — a goroutine's blocking call parks the goroutine instead of blocking
//! its thread, in the program and in every library it uses.
//!
//! # When a hook acts
//! Only on a goroutine that holds its P (not a foreign thread, not the runtime's own
//! threads, not inside a gmp_blocking call), in a process that did not fork after the
//! runtime started, and unless `GMP_INTERPOSE=0`; never for a call ThreadSanitizer's runtime
//! makes itself (its symbolizer's files, opened and closed with TSan's locks held: a park
//! there would switch fibers under them, `rt::tsan::called_by_runtime`). Everywhere else it
//! calls libc's function (`sys::real`).
//!
//! # The contract
//! Inside a goroutine every hooked call returns what libc returns for the same arguments
//! and fd state — value, errno, partial counts, POLL* bits, timeouts — except that waiting
//! parks the goroutine instead of the thread. The hooks never change an open file's
//! O_NONBLOCK: it is shared by every fd dup'd from it, by children, and by libc's own
//! calls (stdio, sendfile), which must all see what the program set. So an fd stays as
//! blocking as the program made it, and each operation the hooks make on it is
//! non-blocking for that one call: RWF_NOWAIT for read/write/readv/writev
//! (`net::readv_nowait`), MSG_DONTWAIT for the socket calls; accept waits for readiness
//! first; connect on a blocking socket blocks through the hand-off. A blocking write
//! writes everything (a pipe or stream socket takes it in parts, the goroutine parking
//! between them), and MSG_WAITALL waits for everything, as the kernel does for a
//! blocking call.
//!
//! # The fd state (`PollDesc::hook`, rt/netpoll.rs)
//! - `HOOK_BLOCKING`: the fd is under the poller and the program sees it blocking
//!   (O_NONBLOCK clear: the hooks never set it): read/write/… park the goroutine. Set when
//!   a goroutine creates a socket, pipe or socketpair, accepts a connection, or first
//!   blocks on a socket, FIFO or anonymous-inode fd (eventfd, epoll, timerfd) it did not
//!   create; set or cleared by fcntl(F_SETFL) and ioctl(FIONBIO) on a registered fd; copied
//!   to the new number by dup/dup2/dup3/F_DUPFD. A change of O_NONBLOCK the hooks did not
//!   see (another process sharing the file) is found before a goroutine parks: an
//!   operation that reports EAGAIN on an fd the kernel says is non-blocking returns it.
//! - registered without `HOOK_BLOCKING`: non-blocking by the user's choice (or registered
//!   through the gmp C API): calls pass straight through and return EAGAIN; poll(2) on it
//!   still parks the goroutine.
//! - `HOOK_NOPOLL`: epoll cannot watch it (a regular file, a directory, a terminal): a
//!   blocking call goes through the syscall hand-off. fds 0–2 always take the hand-off
//!   (stdio's descriptors, usually shared with the parent process).
//! - close (and dup2/dup3 onto a number) first wakes the goroutines parked on the fd with
//!   EBADF, waits for the operations in flight, and unregisters it (netpoll::close_begin),
//!   then clears the bits. A number the kernel hands out again (socket, accept, open, dup…)
//!   has its stale state dropped first (a close the hooks did not see: fclose).
//!
//! # Signals
//! A parked goroutine is not interrupted by signals: the hooks behave as with SA_RESTART,
//! also for poll, select and epoll_wait (which the kernel never restarts). The readiness
//! checks they make with a zero timeout treat EINTR as "not ready yet": the runtime's own
//! preemption signal may land on the thread during one.
//!
//! # Same-thread resume
//! A goroutine that may park inside a hook is bound to its M for the hook's duration
//! (`g.affm`, the M-affinity queue, rt/affinity.rs): it resumes on the thread it entered
//! on, so the errno the hook writes is the caller's, and `&errno` or `__thread` addresses
//! its compiler keeps in registers stay valid. The thread runs other goroutines meanwhile.

use core::ffi::{c_char, c_int, c_uint, c_void};
use core::sync::atomic::{AtomicI32, AtomicU8, Ordering};

use super::net;
use super::syscall::raw_call;
use crate::rt;
use crate::rt::netpoll::{self, MODE_READ, MODE_WRITE, PollDesc, WaitError};
use crate::sys::{real, tsan};

/// `PollDesc::hook`: the program sees the fd blocking (see the module doc).
pub(crate) const HOOK_BLOCKING: u32 = 1;
/// `PollDesc::hook`: not pollable; blocking calls take the syscall hand-off.
pub(crate) const HOOK_NOPOLL: u32 = 2;
/// `PollDesc::hook`: a TCP socket a goroutine just created, never dup'd nor connected:
/// its first connect may make it non-blocking for the length of the call (`connect`).
pub(crate) const HOOK_FRESH: u32 = 4;

/// `GMP_INTERPOSE`: 0 not read yet, 1 on, 2 off (`GMP_INTERPOSE=0`).
static ENABLED: AtomicU8 = AtomicU8::new(0);

#[cold]
fn read_env() -> bool {
    // SAFETY: getenv with a NUL-terminated name; the value, if any, is a C string.
    let off = unsafe {
        let v = libc::getenv(c"GMP_INTERPOSE".as_ptr());
        !v.is_null() && *v == b'0' as c_char && *v.add(1) == 0
    };
    ENABLED.store(if off { 2 } else { 1 }, Ordering::Relaxed);
    !off
}

#[inline(always)]
fn enabled() -> bool {
    match ENABLED.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => read_env(),
    }
}

/// Whether the hook acts: the caller is a goroutine holding its P, and not TSan's runtime
/// (see the module doc).
#[inline(always)]
fn on_goroutine() -> bool {
    rt::syscall::holds_p() && !rt::os_linux::forked() && enabled() && !rt::tsan::called_by_runtime()
}

/// The process the runtime's fd state belongs to (set when the library is loaded).
static PID: AtomicI32 = AtomicI32::new(0);

/// Whether fd bookkeeping applies: the runtime's state is this process's. Not in a child
/// after fork, nor in a vfork child (which shares the parent's memory and thread pointer,
/// so the hooks cannot tell it from its parent otherwise: dup2 in it must not register the
/// child's fds in the parent's poller). One getpid system call: called only where a
/// hook is about to change fd state, or is about to act on state it found. Nor for TSan's
/// own calls: its files are none of the program's, and the waits of `close_begin` may
/// switch (a number it reuses has its stale state dropped by the next hooked call that
/// gets it, as after a close the hooks did not see).
fn live() -> bool {
    // SAFETY: getpid has no preconditions.
    !rt::os_linux::forked()
        && unsafe { libc::getpid() } == PID.load(Ordering::Relaxed)
        && !rt::tsan::called_by_runtime()
}

/// Resolves libc's functions when the library is loaded, before `main`.
#[used]
#[unsafe(link_section = ".init_array")]
static RESOLVE_AT_LOAD: extern "C" fn() = resolve_at_load;

extern "C" fn resolve_at_load() {
    // SAFETY: getpid has no preconditions.
    PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    real::init();
}

#[inline(always)]
fn errno() -> c_int {
    crate::sys::errno()
}

#[inline(always)]
fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// A result in the C convention: -1 and errno for a negative errno value.
#[inline]
fn ret(r: i64) -> isize {
    if r < 0 {
        set_errno(-r as c_int);
        -1
    } else {
        r as isize
    }
}

/// What the hooks do with an fd on a goroutine.
enum Fd {
    /// Park on the poller (`HOOK_BLOCKING`).
    Managed,
    /// Pass straight through (non-blocking by the user's choice, or not open).
    Native,
    /// Blocks: through the syscall hand-off.
    Handoff,
}

/// Direction index of `PollDesc::timeo` for a netpoll mode.
fn dir(mode: u32) -> usize {
    (mode == MODE_WRITE) as usize
}

/// SO_RCVTIMEO (read) or SO_SNDTIMEO (write) of `fd` as the hooks know it, in ns.
fn timeout_of(fd: c_int, mode: u32) -> Option<i64> {
    let t = netpoll::lookup(fd)?.timeo[dir(mode)].load(Ordering::Relaxed);
    (t > 0).then_some(t)
}

/// Clears the per-number state (bits and timeouts).
fn clear(pd: &PollDesc) {
    pd.hook.store(0, Ordering::Release);
    pd.timeo[0].store(0, Ordering::Relaxed);
    pd.timeo[1].store(0, Ordering::Relaxed);
}

/// Reads a socket's SO_RCVTIMEO and SO_SNDTIMEO from the kernel into `pd`.
fn load_timeouts(fd: c_int, pd: &PollDesc) {
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

fn timeval_ns(tv: &libc::timeval) -> i64 {
    tv.tv_sec
        .saturating_mul(1_000_000_000)
        .saturating_add(tv.tv_usec * 1000)
        .max(0)
}

#[inline]
fn classify(fd: c_int) -> Fd {
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
/// can watch it and it is not shared with the outside world (see the module doc).
#[cold]
fn adopt(fd: c_int) -> Fd {
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
fn forget(fd: c_int) {
    if let Some(pd) = netpoll::lookup(fd) {
        if pd.registered() {
            netpoll::close_begin(fd);
        }
        clear(pd);
    }
}

/// Puts a new fd a goroutine created under the poller, blocking for the program unless
/// it asked otherwise (`user_blocking`).
fn adopt_new(fd: c_int, user_blocking: bool) {
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
fn known(fd: c_int) -> bool {
    netpoll::lookup(fd).is_some_and(|pd| {
        pd.registered()
            || pd.hook.load(Ordering::Relaxed) != 0
            || pd.timeo[0].load(Ordering::Relaxed) != 0
            || pd.timeo[1].load(Ordering::Relaxed) != 0
    })
}

/// The state of `old` for `new`, which now refers to the same open file (dup).
fn dup_state(old: c_int, new: c_int) {
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

/// The body of every read- or write-like hook: `op` is the call as the program made it,
/// `nowait` the same call non-blocking (see the module doc).
#[inline(always)]
fn rw(fd: c_int, mode: u32, op: &dyn Fn() -> isize, nowait: &dyn Fn() -> isize) -> isize {
    if !on_goroutine() {
        return op();
    }
    super::boundary("interposed call", || match classify(fd) {
        Fd::Native => op(),
        Fd::Handoff => ret(blocking_call(&|| op() as i64)),
        Fd::Managed => ret(managed_io(fd, mode, op, nowait)),
    })
}

/// A goroutine's operation on an fd under the poller that the program sees blocking:
/// `nowait` until it does not report EAGAIN, parking in between. Result or -errno.
fn managed_io(fd: c_int, mode: u32, op: &dyn Fn() -> isize, nowait: &dyn Fn() -> isize) -> i64 {
    let deadline = timeout_of(fd, mode).map(|t| crate::sys::nanotime().saturating_add(t));
    let bound = rt::bind_current(); // same-thread resume
    let r = match net::io_until(fd, mode, deadline, nowait, || user_made_nonblocking(fd)) {
        // SO_RCVTIMEO / SO_SNDTIMEO expired: EAGAIN, as POSIX says.
        Some(r) if r == -(libc::ETIMEDOUT as i64) => -(libc::EAGAIN as i64),
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
fn user_made_nonblocking(fd: c_int) -> bool {
    if !net::nonblocking(fd) {
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
fn rw_all(
    fd: c_int,
    mode: u32,
    total: usize,
    op: &dyn Fn() -> isize,
    step: &dyn Fn(usize) -> isize,
) -> isize {
    if !on_goroutine() {
        return op();
    }
    super::boundary("interposed call", || match classify(fd) {
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
fn stream(fd: c_int) -> bool {
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
unsafe fn iov_after(iov: *const libc::iovec, n: c_int, mut skip: usize) -> Vec<libc::iovec> {
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
unsafe fn iov_total(iov: *const libc::iovec, n: c_int) -> usize {
    // SAFETY: caller contract.
    (0..n.max(0) as usize)
        .map(|i| unsafe { (*iov.add(i)).iov_len })
        .sum()
}

/// A blocking call that epoll cannot help with: through the syscall hand-off on a
/// goroutine (or a helper thread: `blocking_call`), directly elsewhere.
#[inline(always)]
fn handoff(op: &dyn Fn() -> i64) -> i64 {
    if !on_goroutine() {
        return op();
    }
    super::boundary("interposed call", || ret(blocking_call(op)) as i64)
}

/// `handoff` for a call whose effect is tied to the calling thread (a signal mask for the
/// length of the wait): always on the caller's own thread.
#[inline(always)]
fn handoff_here(op: &dyn Fn() -> i64) -> i64 {
    if !on_goroutine() {
        return op();
    }
    super::boundary("interposed call", || ret(raw_call(op)) as i64)
}

/// A goroutine's blocking call, as `raw_call` (its result, or -errno): on a helper thread
/// while the goroutine parks bound to its M when goroutines are bound to that M (they can
/// run meanwhile, and the call may be waiting for one of them: rt/offload.rs), else
/// through the syscall hand-off on the caller's thread.
fn blocking_call(op: &dyn Fn() -> i64) -> i64 {
    if rt::offload::wanted() {
        // SAFETY: on a goroutine that wanted() accepted; op is thread-agnostic (a libc
        // call on the caller's arguments, which stay alive while it parks).
        let (r, e) = unsafe { rt::offload::run(op) };
        return if r < 0 { -(e as i64) } else { r };
    }
    raw_call(op)
}

// ---------------------------------------------------------------------------------------
// Reading and writing.

/// Interposes read(2) (see the module doc).
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
        &|| unsafe { net::readv_nowait(fd, &iov, 1) },
    )
}

/// Interposes write(2): a blocking write moves every byte (see the module doc).
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
            unsafe { net::writev_nowait(fd, &iov, 1) }
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
        &|| unsafe { net::readv_nowait(fd, iov, n) },
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
                return unsafe { net::writev_nowait(fd, iov, n) };
            }
            // SAFETY: as above.
            let rest = unsafe { iov_after(iov, n, done) };
            // SAFETY: `rest` points into the caller's buffers.
            unsafe { net::writev_nowait(fd, rest.as_ptr(), rest.len() as c_int) }
        },
    )
}

/// Whether a receive waits for the whole length (MSG_WAITALL on a blocking call).
fn waitall(flags: c_int) -> bool {
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
unsafe fn msg_after(
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

// ---------------------------------------------------------------------------------------
// Creating, connecting and closing descriptors.

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
    let r = rw(fd, MODE_READ, &op, &|| net::accept_when_ready(fd, &op)) as c_int;
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
    super::boundary("interposed connect", || match classify(fd) {
        Fd::Native => op() as c_int,
        Fd::Managed if fresh(fd) => ret(connect_fresh(fd, &op)) as c_int,
        Fd::Managed | Fd::Handoff => ret(blocking_call(&op)) as c_int,
    })
}

/// Whether `fd` is a fresh socket (see `HOOK_FRESH`); it is not any more after this.
fn fresh(fd: c_int) -> bool {
    netpoll::lookup(fd)
        .is_some_and(|pd| pd.hook.fetch_and(!HOOK_FRESH, Ordering::AcqRel) & HOOK_FRESH != 0)
}

/// `connect` of a fresh socket: non-blocking for the call, parking until it is writable
/// (Go's connect: wait for write, then SO_ERROR). Result or -errno.
fn connect_fresh(fd: c_int, op: &dyn Fn() -> i64) -> i64 {
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
        let w = net::io(fd, MODE_WRITE, deadline, || {
            if net::ready_now(fd, libc::POLLOUT) {
                0
            } else {
                -1
            }
        });
        drop(bound);
        r = match w {
            // SO_SNDTIMEO expired: the connection is still in progress (Linux).
            Some(w) if w == -(libc::ETIMEDOUT as i64) => -(libc::EINPROGRESS as i64),
            Some(w) if w < 0 => w,
            _ => net::so_error(fd) as i64,
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
fn dup_onto(old: c_int, new: c_int, f: impl FnOnce() -> c_int) -> c_int {
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
fn record_nonblock(fd: c_int, on: bool) {
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

// ---------------------------------------------------------------------------------------
// Sleeping.

/// Parks the goroutine for `ns` on the timers, bound to its thread.
fn park_sleep(ns: i64) {
    super::boundary("interposed sleep", || {
        let bound = rt::bind_current(); // same-thread resume
        rt::timer::sleep(ns.max(1));
        drop(bound);
    })
}

fn timespec_ns(ts: &libc::timespec) -> Option<i64> {
    if ts.tv_sec < 0 || !(0..1_000_000_000).contains(&ts.tv_nsec) {
        return None;
    }
    Some(
        ts.tv_sec
            .saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec),
    )
}

/// Interposes nanosleep(2): a goroutine parks on a timer.
///
/// # Safety
/// As nanosleep(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nanosleep(req: *const libc::timespec, rem: *mut libc::timespec) -> c_int {
    if !on_goroutine() || req.is_null() {
        // SAFETY: the caller's arguments.
        return unsafe { real::nanosleep(req, rem) };
    }
    // SAFETY: non-null, the caller's timespec.
    let Some(ns) = timespec_ns(unsafe { &*req }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    park_sleep(ns);
    0
}

/// Interposes clock_nanosleep(2) for CLOCK_MONOTONIC and CLOCK_REALTIME, relative or
/// absolute (TIMER_ABSTIME); other clocks pass through.
///
/// # Safety
/// As clock_nanosleep(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn clock_nanosleep(
    clock: libc::clockid_t,
    flags: c_int,
    req: *const libc::timespec,
    rem: *mut libc::timespec,
) -> c_int {
    if !on_goroutine()
        || req.is_null()
        || (clock != libc::CLOCK_MONOTONIC && clock != libc::CLOCK_REALTIME)
    {
        // SAFETY: the caller's arguments.
        return unsafe { real::clock_nanosleep(clock, flags, req, rem) };
    }
    // SAFETY: non-null, the caller's timespec.
    let Some(mut ns) = timespec_ns(unsafe { &*req }) else {
        return libc::EINVAL;
    };
    if flags & libc::TIMER_ABSTIME != 0 {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid out-pointer and a clock that exists.
        unsafe { libc::clock_gettime(clock, &mut now) };
        ns = ns.saturating_sub(timespec_ns(&now).unwrap_or(0));
        if ns <= 0 {
            return 0;
        }
    }
    park_sleep(ns);
    0
}

/// Interposes sleep(3).
#[unsafe(no_mangle)]
pub extern "C" fn sleep(secs: c_uint) -> c_uint {
    if !on_goroutine() {
        // SAFETY: no preconditions.
        return unsafe { real::sleep(secs) };
    }
    park_sleep(secs as i64 * 1_000_000_000);
    0
}

/// Interposes usleep(3).
#[unsafe(no_mangle)]
pub extern "C" fn usleep(us: libc::useconds_t) -> c_int {
    if !on_goroutine() {
        // SAFETY: no preconditions.
        return unsafe { real::usleep(us) };
    }
    park_sleep(us as i64 * 1000);
    0
}

// ---------------------------------------------------------------------------------------
// Waiting for readiness.

/// Parks until the one fd of a poll-like call is ready or `deadline` passes; `check` is
/// the call with a zero timeout (its result: > 0 ready, 0 nothing yet, < 0 -errno).
/// None when the fd cannot be waited for on the poller (the caller takes the hand-off).
fn wait_one(fd: c_int, modes: u32, deadline: Option<i64>, check: &dyn Fn() -> i64) -> Option<i64> {
    let pd = match classify(fd) {
        Fd::Managed | Fd::Native => netpoll::lookup(fd).filter(|pd| pd.registered())?,
        Fd::Handoff => return None,
    };
    if !pd.incref() {
        return None;
    }
    let seq = pd.seq();
    // Each direction waited for takes its turn, in a fixed order (as gmp_fd_wait).
    let turns: [crate::sync::mutex::Mutex; 2] =
        core::array::from_fn(|i| crate::sync::mutex::Mutex {
            state: &pd.op_lock[i].0,
            sema: &pd.op_lock[i].1,
        });
    let bound = rt::bind_current(); // same-thread resume
    let mut taken = [false; 2];
    for (i, t) in turns.iter().enumerate() {
        if modes & (1 << i) != 0 {
            if !super::net::take_turn(t, deadline) {
                // The deadline passed waiting for another waiter's turn: the call's
                // answer now (0 if nothing is ready), as at any timeout.
                for (t, _) in turns.iter().zip(taken).filter(|(_, k)| *k) {
                    t.unlock();
                }
                drop(bound);
                pd.decref();
                return Some(check());
            }
            taken[i] = true;
        }
    }
    let mut checked = false;
    let r = loop {
        let r = check();
        if r != 0 {
            break r;
        }
        if !checked {
            checked = true;
            if !pd.same_file(fd) {
                // Another file under the number than the one registered (closed where
                // the runtime did not see it): the hand-off, after the registration goes.
                break STALE_REGISTRATION;
            }
        }
        // SAFETY: a goroutine holding a P, with a reference on pd taken at `seq`.
        match unsafe { netpoll::wait(pd, seq, modes, deadline) } {
            Ok(_) => continue,
            Err(WaitError::TimedOut) => break 0,
            // Closed meanwhile: the call itself reports it (POLLNVAL, ...) once the close
            // is done; woken by a close still in progress, it finds nothing yet
            // (`CLOSED_WAITING`).
            Err(WaitError::Closed) => match check() {
                0 => break CLOSED_WAITING,
                r => break r,
            },
        }
    };
    for (i, t) in turns.iter().enumerate() {
        if modes & (1 << i) != 0 {
            t.unlock();
        }
    }
    drop(bound);
    pd.decref();
    if r == STALE_REGISTRATION {
        netpoll::forget_stale(fd);
        return None;
    }
    Some(r)
}

/// `wait_one`'s loop result for a stale registration (`PollDesc::same_file`).
const STALE_REGISTRATION: i64 = i64::MIN + 1;

/// `wait_one`'s result when another goroutine's close of the fd woke it before the close
/// was done (the call, made again, still sees the number open). The caller reports the
/// number closed as its call would find it a moment later, or takes the hand-off.
const CLOSED_WAITING: i64 = i64::MIN;

/// Most fds a poll may wait on without the hand-off.
const POLL_MANY_MAX: libc::nfds_t = 64;

/// The readiness bits a multi-fd wait asks its epoll instance for (the poll bits of the
/// same values); POLLERR, POLLHUP and POLLNVAL are reported whatever was asked.
const POLL_EVENTS: u32 = (libc::EPOLLIN
    | libc::EPOLLPRI
    | libc::EPOLLOUT
    | libc::EPOLLRDNORM
    | libc::EPOLLRDBAND
    | libc::EPOLLWRNORM
    | libc::EPOLLWRBAND
    | libc::EPOLLRDHUP) as u32;

/// A wait on several fds: a private epoll instance watching them (level-triggered, the
/// events asked for), which is one pollable fd for `wait_one`. None when one of them
/// cannot be watched, or there are too many (the caller takes the hand-off).
///
/// The instance watches duplicates of the fds, so that it holds their files as libc's
/// poll does while it waits: a file another goroutine closes stays watched, and what
/// happens to it next (a write into its pipe) wakes the wait, which then reports the
/// closed number as poll does (POLLNVAL).
fn poll_many(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    deadline: Option<i64>,
    check: &dyn Fn() -> i64,
) -> Option<i64> {
    if n > POLL_MANY_MAX {
        return None;
    }
    // SAFETY: plain syscall.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return None;
    }
    // At a high number, as the duplicates below: the lowest free number may be that of an
    // fd the program closed and still lists here, which the call must find closed.
    let high = crate::sys::dup_high(ep);
    let ep = if high >= 0 {
        // SAFETY: our own fd, duplicated.
        unsafe { real::close(ep) };
        high
    } else {
        ep
    };
    forget(ep);
    let mut ok = true;
    // The duplicate watched for each entry (-1: none, a negative fd).
    let mut dups = [-1 as c_int; POLL_MANY_MAX as usize];
    for i in 0..n as usize {
        // SAFETY: i < n, the caller's array.
        let p = unsafe { &*fds.add(i) };
        if p.fd < 0 {
            continue;
        }
        // SAFETY: j < i < n, the caller's array.
        let earlier = (0..i).find(|&j| unsafe { (*fds.add(j)).fd } == p.fd);
        let dup = match earlier {
            Some(j) => dups[j],
            None => {
                let d = crate::sys::dup_high(p.fd);
                if d < 0 {
                    ok = false;
                    break;
                }
                forget(d);
                d
            }
        };
        dups[i] = dup;
        // poll's event bits are epoll's (POLLRDNORM is EPOLLRDNORM, ...). An fd listed
        // more than once is watched for what all its entries ask.
        let mut events = 0u32;
        for j in 0..=i {
            // SAFETY: j <= i < n, the caller's array.
            let q = unsafe { &*fds.add(j) };
            if q.fd == p.fd {
                events |= q.events as u16 as u32;
            }
        }
        let mut ev = libc::epoll_event {
            events: events & POLL_EVENTS,
            u64: i as u64,
        };
        let op = if earlier.is_some() {
            libc::EPOLL_CTL_MOD
        } else {
            libc::EPOLL_CTL_ADD
        };
        // SAFETY: a valid event for our own epoll fd and our duplicate.
        if unsafe { libc::epoll_ctl(ep, op, dup, &mut ev) } < 0 {
            ok = false;
            break;
        }
    }
    // Our own epoll fd is closed by nobody else.
    let r = if ok {
        wait_one(ep, MODE_READ, deadline, check).filter(|&r| r != CLOSED_WAITING)
    } else {
        None
    };
    if let Some(pd) = netpoll::lookup(ep)
        && pd.registered()
    {
        netpoll::close_begin(ep);
        pd.hook.store(0, Ordering::Release);
    }
    // SAFETY: our own fds.
    unsafe {
        real::close(ep);
        for (i, &d) in dups.iter().enumerate().take(n as usize) {
            if d >= 0 && !dups[..i].contains(&d) {
                real::close(d);
            }
        }
    }
    r
}

fn poll_modes(events: i16) -> u32 {
    let mut m = 0;
    if events & (libc::POLLIN | libc::POLLPRI | libc::POLLRDNORM | libc::POLLRDBAND) != 0 {
        m |= MODE_READ;
    }
    if events & (libc::POLLOUT | libc::POLLWRNORM | libc::POLLWRBAND) != 0 {
        m |= MODE_WRITE;
    }
    if m == 0 { MODE_READ } else { m }
}

fn deadline_ms(ms: c_int) -> Option<i64> {
    (ms >= 0).then(|| crate::sys::nanotime().saturating_add(ms as i64 * 1_000_000))
}

/// A zero-timeout readiness check's result: EINTR (a signal — the runtime's own preemption
/// signal, say — landed on the thread during the call) counts as "nothing ready yet", as
/// for every wait the hooks park for (see the module doc).
fn intr_as_none(r: i64) -> i64 {
    if r == -(libc::EINTR as i64) { 0 } else { r }
}

/// Runs a raw call on this thread and returns its result or -errno, errno unchanged.
fn raw(f: impl FnOnce() -> isize) -> i64 {
    let saved = errno();
    let r = f();
    let r = if r < 0 { -(errno() as i64) } else { r as i64 };
    set_errno(saved);
    r
}

/// A zero-timeout readiness check made in a goroutine, made again while it fails with
/// EINTR: a signal landed in the call's instant, most likely the runtime's own preemption
/// signal (sent to a thread seen computing, which a loop of such checks is). The check
/// never waits, so the program loses no wait to this; its own handler has run, and only
/// the EINTR of that instant is not seen (the same ambiguity as `intr_as_none`).
fn again_on_eintr(f: impl Fn() -> c_int) -> c_int {
    loop {
        let r = f();
        if r >= 0 || errno() != libc::EINTR {
            return r;
        }
    }
}

/// Interposes poll(2): on a goroutine, a call that would wait on one fd (or on none, a
/// sleep) parks; a wait on several fds takes the syscall hand-off.
///
/// # Safety
/// As poll(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, ms: c_int) -> c_int {
    if !on_goroutine() {
        // SAFETY: the caller's arguments.
        return unsafe { real::poll(fds, n, ms) };
    }
    if ms == 0 {
        // SAFETY: the caller's arguments.
        return again_on_eintr(|| unsafe { real::poll(fds, n, 0) });
    }
    super::boundary("interposed poll", || {
        // SAFETY: the caller's arguments, with a zero timeout.
        let now = || intr_as_none(raw(|| unsafe { real::poll(fds, n, 0) } as isize));
        if n == 0 {
            if ms > 0 {
                park_sleep(ms as i64 * 1_000_000);
                return 0;
            }
        } else {
            let r = now();
            if r != 0 {
                return ret(r) as c_int;
            }
            if n == 1 {
                // SAFETY: n == 1: one pollfd.
                let p = unsafe { &*fds };
                if p.fd >= 0
                    && let Some(r) = wait_one(p.fd, poll_modes(p.events), deadline_ms(ms), &now)
                {
                    if r == CLOSED_WAITING {
                        // SAFETY: n == 1: the caller's one pollfd.
                        unsafe { (*fds).revents = libc::POLLNVAL };
                        return 1;
                    }
                    return ret(r) as c_int;
                }
            } else if let Some(r) = poll_many(fds, n, deadline_ms(ms), &now) {
                return ret(r) as c_int;
            }
        }
        // SAFETY: the caller's arguments.
        ret(blocking_call(&|| unsafe { real::poll(fds, n, ms) } as i64)) as c_int
    })
}

/// Interposes epoll_wait(2): an epoll fd is itself pollable, so a goroutine parks until
/// it is readable.
///
/// # Safety
/// As epoll_wait(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_wait(
    ep: c_int,
    ev: *mut libc::epoll_event,
    n: c_int,
    ms: c_int,
) -> c_int {
    if !on_goroutine() {
        // SAFETY: the caller's arguments.
        return unsafe { real::epoll_wait(ep, ev, n, ms) };
    }
    if ms == 0 {
        // SAFETY: the caller's arguments.
        return again_on_eintr(|| unsafe { real::epoll_wait(ep, ev, n, 0) });
    }
    super::boundary("interposed epoll_wait", || {
        // SAFETY: the caller's arguments, with a zero timeout.
        let now = || intr_as_none(raw(|| unsafe { real::epoll_wait(ep, ev, n, 0) } as isize));
        let r = now();
        if r != 0 {
            return ret(r) as c_int;
        }
        if let Some(r) = wait_one(ep, MODE_READ, deadline_ms(ms), &now)
            && r != CLOSED_WAITING
        {
            return ret(r) as c_int;
        }
        // SAFETY: the caller's arguments.
        ret(blocking_call(
            &|| unsafe { real::epoll_wait(ep, ev, n, ms) } as i64,
        )) as c_int
    })
}

/// A timespec timeout in milliseconds for poll (rounded up; None: invalid).
fn ts_ms(ts: *const libc::timespec) -> Option<c_int> {
    if ts.is_null() {
        return Some(-1);
    }
    // SAFETY: non-null, the caller's timespec.
    let ns = timespec_ns(unsafe { &*ts })?;
    Some((ns.saturating_add(999_999) / 1_000_000).min(i32::MAX as i64) as c_int)
}

/// Interposes ppoll(2): without a signal mask, as poll; with one, the hand-off (the mask
/// must be the thread's while it waits).
///
/// # Safety
/// As ppoll(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ppoll(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    ts: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    if !on_goroutine() {
        // SAFETY: the caller's arguments.
        return unsafe { real::ppoll(fds, n, ts, mask) };
    }
    match ts_ms(ts) {
        // SAFETY: the caller's arguments.
        Some(ms) if mask.is_null() => unsafe { poll(fds, n, ms) },
        // SAFETY: the caller's arguments.
        _ => handoff_here(&|| unsafe { real::ppoll(fds, n, ts, mask) } as i64) as c_int,
    }
}

/// Interposes epoll_pwait(2): without a signal mask, as epoll_wait; with one, the
/// hand-off.
///
/// # Safety
/// As epoll_pwait(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_pwait(
    ep: c_int,
    ev: *mut libc::epoll_event,
    n: c_int,
    ms: c_int,
    mask: *const libc::sigset_t,
) -> c_int {
    if !on_goroutine() {
        // SAFETY: the caller's arguments.
        return unsafe { real::epoll_pwait(ep, ev, n, ms, mask) };
    }
    if mask.is_null() {
        // SAFETY: the caller's arguments.
        return unsafe { epoll_wait(ep, ev, n, ms) };
    }
    // SAFETY: the caller's arguments.
    handoff_here(&|| unsafe { real::epoll_pwait(ep, ev, n, ms, mask) } as i64) as c_int
}

/// select's sets as pollfds for the wait (the answer comes from select itself): None when
/// there are more than `POLL_MANY_MAX` fds (or one beyond FD_SETSIZE).
fn select_pollfds(
    n: c_int,
    sets: [*mut libc::fd_set; 3],
    out: &mut [libc::pollfd; POLL_MANY_MAX as usize],
) -> Option<usize> {
    if n < 0 || n as usize > libc::FD_SETSIZE {
        return None;
    }
    let mut k = 0;
    for fd in 0..n {
        let mut events = 0;
        for (set, ev) in sets
            .iter()
            .zip([libc::POLLIN, libc::POLLOUT, libc::POLLPRI])
        {
            // SAFETY: a non-null caller's fd_set, fd < FD_SETSIZE.
            if !set.is_null() && unsafe { libc::FD_ISSET(fd, *set) } {
                events |= ev;
            }
        }
        if events != 0 {
            if k == out.len() {
                return None;
            }
            out[k] = libc::pollfd {
                fd,
                events,
                revents: 0,
            };
            k += 1;
        }
    }
    Some(k)
}

/// The body of select and pselect on a goroutine: a zero-timeout select on copies of the
/// sets until one is ready, parked in between on the fds; the sets are written back as
/// select leaves them. `deadline`: None waits forever. Returns the count or -errno, None
/// for the hand-off.
fn select_wait(n: c_int, sets: [*mut libc::fd_set; 3], deadline: Option<i64>) -> Option<i64> {
    let mut pfds = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; POLL_MANY_MAX as usize];
    let k = select_pollfds(n, sets, &mut pfds)?;
    // SAFETY: fd_set is plain data.
    let orig: [libc::fd_set; 3] = core::array::from_fn(|i| unsafe {
        if sets[i].is_null() {
            core::mem::zeroed()
        } else {
            *sets[i]
        }
    });
    let last = core::cell::Cell::new(orig);
    let check = || {
        let mut cur = orig;
        let rc = select_now(n, sets, &mut cur);
        last.set(cur);
        rc
    };
    let first = check();
    let mut r = if first != 0 {
        first
    } else if deadline.is_some_and(|d| d <= crate::sys::nanotime()) {
        0
    } else if k == 0 {
        park_sleep(deadline.map_or(i64::MAX, |d| d - crate::sys::nanotime()));
        check()
    } else if k == 1 {
        match wait_one(pfds[0].fd, poll_modes(pfds[0].events), deadline, &check)? {
            CLOSED_WAITING => {
                let (rc, cur) = closed_ready(n, sets, &orig, pfds[0].fd);
                last.set(cur);
                rc
            }
            r => r,
        }
    } else {
        poll_many(pfds.as_mut_ptr(), k as libc::nfds_t, deadline, &check)?
    };
    if r == -(libc::EBADF as i64) && first == 0 {
        // A number another goroutine closed while this select waited. Linux's select
        // holds the file and, at its next scan, reports the closed number ready in every
        // set it was asked in (select(2): closing it "has no effect" on a select in
        // progress). Woken by the close itself, this one reports that at once.
        let (rc, cur) = closed_ready(n, sets, &orig, -1);
        last.set(cur);
        r = rc;
    }
    if r >= 0 {
        let cur = last.get();
        for i in 0..3 {
            if !sets[i].is_null() {
                // SAFETY: the caller's fd_set.
                unsafe { *sets[i] = cur[i] };
            }
        }
    }
    Some(r)
}

/// A zero-timeout select on copies of the sets (`cur`, left as select leaves them; the
/// caller's null sets stay null): the count or -errno, EINTR as nothing ready.
fn select_now(n: c_int, sets: [*mut libc::fd_set; 3], cur: &mut [libc::fd_set; 3]) -> i64 {
    let ptr = |i: usize, cur: &mut [libc::fd_set; 3]| {
        if sets[i].is_null() {
            core::ptr::null_mut()
        } else {
            &mut cur[i] as *mut libc::fd_set
        }
    };
    let (r, w, e) = (ptr(0, cur), ptr(1, cur), ptr(2, cur));
    let mut tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    // SAFETY: valid sets (ours, or null where the caller's are) and timeval.
    intr_as_none(raw(|| unsafe { real::select(n, r, w, e, &mut tv) } as isize))
}

/// select's result when some of the numbers asked for have been closed (`closing`, whose
/// close is under way, counts as closed): those numbers set in each set they were asked
/// in, plus what a zero-timeout select on the others finds. Returns the count (or -errno)
/// and the sets.
fn closed_ready(
    n: c_int,
    sets: [*mut libc::fd_set; 3],
    orig: &[libc::fd_set; 3],
    closing: c_int,
) -> (i64, [libc::fd_set; 3]) {
    let mut open = *orig;
    let mut closed = 0;
    let mut marked = 0;
    for fd in 0..n {
        // SAFETY: fd < n <= FD_SETSIZE (select_pollfds checked), sets are ours.
        let asked = (0..3).any(|i| unsafe { libc::FD_ISSET(fd, &orig[i]) });
        let gone = fd == closing
            // SAFETY: F_GETFD on any number only reads the table.
            || (unsafe { real::fcntl(fd, libc::F_GETFD, 0) } < 0 && errno() == libc::EBADF);
        if asked && gone {
            closed += 1;
            for set in &mut open {
                // SAFETY: as above.
                unsafe {
                    if libc::FD_ISSET(fd, set) {
                        marked += 1;
                        libc::FD_CLR(fd, set);
                    }
                }
            }
        }
    }
    let mut cur = open;
    let found;
    if closed > 0 {
        found = select_now(n, sets, &mut cur);
        if found < 0 {
            return (found, cur);
        }
    } else {
        // Nothing closed after all: the EBADF was the program's own (a number never open).
        return (-(libc::EBADF as i64), cur);
    }
    for fd in 0..n {
        for i in 0..3 {
            // SAFETY: as above.
            unsafe {
                if libc::FD_ISSET(fd, &orig[i]) && !libc::FD_ISSET(fd, &open[i]) {
                    libc::FD_SET(fd, &mut cur[i]);
                }
            }
        }
    }
    (found + marked, cur)
}

/// Interposes select(2): on a goroutine, parks until one of the fds is ready or the
/// timeout passes (at most 64 fds; more take the hand-off). Like Linux, writes the time
/// left into `tv`.
///
/// # Safety
/// As select(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn select(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    tv: *mut libc::timeval,
) -> c_int {
    // SAFETY: the caller's timeval, if any.
    let zero = !tv.is_null() && unsafe { (*tv).tv_sec == 0 && (*tv).tv_usec == 0 };
    if !on_goroutine() {
        // SAFETY: the caller's arguments.
        return unsafe { real::select(n, r, w, e, tv) };
    }
    if zero {
        // SAFETY: the caller's arguments (select leaves the sets alone when it fails).
        return again_on_eintr(|| unsafe { real::select(n, r, w, e, tv) });
    }
    let deadline = if tv.is_null() {
        None
    } else {
        // SAFETY: non-null, the caller's timeval.
        let t = unsafe { &*tv };
        // Linux carries whole seconds out of tv_usec (1,300,000 µs is 1.3 s); only a
        // negative part is invalid.
        if t.tv_sec < 0 || t.tv_usec < 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        Some(crate::sys::nanotime().saturating_add(timeval_ns(t)))
    };
    super::boundary("interposed select", || {
        match select_wait(n, [r, w, e], deadline) {
            Some(rc) => {
                if let Some(d) = deadline {
                    let left = (d - crate::sys::nanotime()).max(0);
                    // SAFETY: non-null (there is a deadline), the caller's timeval.
                    unsafe {
                        (*tv).tv_sec = (left / 1_000_000_000) as libc::time_t;
                        (*tv).tv_usec = ((left % 1_000_000_000) / 1000) as libc::suseconds_t;
                    }
                }
                ret(rc) as c_int
            }
            // SAFETY: the caller's arguments.
            None => ret(blocking_call(
                &|| unsafe { real::select(n, r, w, e, tv) } as i64
            )) as c_int,
        }
    })
}

/// Interposes pselect(2): without a signal mask, as select (the timeout is not written
/// back); with one, the hand-off.
///
/// # Safety
/// As pselect(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pselect(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    ts: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    if !on_goroutine() {
        // SAFETY: the caller's arguments.
        return unsafe { real::pselect(n, r, w, e, ts, mask) };
    }
    let deadline = if ts.is_null() {
        None
    } else {
        // SAFETY: non-null, the caller's timespec.
        match timespec_ns(unsafe { &*ts }) {
            Some(0) => None,
            Some(ns) => Some(crate::sys::nanotime().saturating_add(ns)),
            None => {
                set_errno(libc::EINVAL);
                return -1;
            }
        }
    };
    if !ts.is_null() && deadline.is_none() {
        // A zero timeout: it does not block.
        // SAFETY: the caller's arguments.
        return unsafe { real::pselect(n, r, w, e, ts, mask) };
    }
    if mask.is_null() {
        let rc = super::boundary("interposed pselect", || select_wait(n, [r, w, e], deadline));
        if let Some(rc) = rc {
            return ret(rc) as c_int;
        }
    }
    // SAFETY: the caller's arguments.
    handoff_here(&|| unsafe { real::pselect(n, r, w, e, ts, mask) } as i64) as c_int
}

// ---------------------------------------------------------------------------------------
// Blocking calls epoll cannot help with: the syscall hand-off.

/// Interposes getaddrinfo(3): on a goroutine, through the syscall hand-off (name
/// resolution may wait on the network; glibc's own sockets inside it are not ours).
///
/// # Safety
/// As getaddrinfo(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const libc::addrinfo,
    res: *mut *mut libc::addrinfo,
) -> c_int {
    if !on_goroutine() {
        // SAFETY: the caller's arguments.
        return unsafe { real::getaddrinfo(node, service, hints, res) };
    }
    super::boundary("interposed getaddrinfo", || {
        if rt::offload::wanted() {
            // On a helper (see `blocking_call`); its errno comes back for EAI_SYSTEM.
            // SAFETY: the caller's arguments, alive while it parks.
            let (r, e) = unsafe {
                rt::offload::run(&|| real::getaddrinfo(node, service, hints, res) as i64)
            };
            if r == libc::EAI_SYSTEM as i64 {
                set_errno(e);
            }
            return r as c_int;
        }
        // The goroutine stays on its thread in the hand-off: errno (EAI_SYSTEM) is its own.
        // SAFETY: the caller's arguments.
        rt::syscall::blocking(|| unsafe { real::getaddrinfo(node, service, hints, res) })
    })
}

/// Interposes pread(2).
///
/// # Safety
/// As pread(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: usize, off: libc::off_t) -> isize {
    // SAFETY: the caller's arguments.
    handoff(&|| unsafe { real::pread(fd, buf, n, off) } as i64) as isize
}

/// Interposes pwrite(2).
///
/// # Safety
/// As pwrite(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite(
    fd: c_int,
    buf: *const c_void,
    n: usize,
    off: libc::off_t,
) -> isize {
    // SAFETY: the caller's arguments.
    handoff(&|| unsafe { real::pwrite(fd, buf, n, off) } as i64) as isize
}

/// Interposes open(2) (a FIFO's open blocks). Declared with `mode` always present.
///
/// # Safety
/// As open(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's arguments.
    let fd = handoff(&|| unsafe { real::open(path, flags, mode) } as i64) as c_int;
    if fd >= 0 && known(fd) && live() {
        forget(fd);
    }
    tsan::fd_opened(fd);
    fd
}

/// Interposes openat(2).
///
/// # Safety
/// As openat(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat(
    dir: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: the caller's arguments.
    let fd = handoff(&|| unsafe { real::openat(dir, path, flags, mode) } as i64) as c_int;
    if fd >= 0 && known(fd) && live() {
        forget(fd);
    }
    tsan::fd_opened(fd);
    fd
}

// The names glibc gives the same calls for programs built with 64-bit file offsets
// (`_FILE_OFFSET_BITS=64`: SQLite, CPython, libuv) and under `_FORTIFY_SOURCE` (the
// `__open_2` family, which check that a mode comes with O_CREAT). On x86-64 `off_t` is
// 64 bits, so each is its plain counterpart.

/// Interposes pread64 (pread).
///
/// # Safety
/// As pread(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: usize, off: libc::off_t) -> isize {
    // SAFETY: same contract.
    unsafe { pread(fd, buf, n, off) }
}

/// Interposes pwrite64 (pwrite).
///
/// # Safety
/// As pwrite(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite64(
    fd: c_int,
    buf: *const c_void,
    n: usize,
    off: libc::off_t,
) -> isize {
    // SAFETY: same contract.
    unsafe { pwrite(fd, buf, n, off) }
}

/// Interposes open64 (open).
///
/// # Safety
/// As open(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: same contract.
    unsafe { open(path, flags, mode) }
}

/// Interposes openat64 (openat).
///
/// # Safety
/// As openat(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat64(
    dir: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: same contract.
    unsafe { openat(dir, path, flags, mode) }
}

/// Whether `flags` need a mode argument (glibc's `__OPEN_NEEDS_MODE`).
fn needs_mode(flags: c_int) -> bool {
    flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE
}

/// Interposes `__open_2` (open under _FORTIFY_SOURCE, called without a mode).
///
/// # Safety
/// As open(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    if needs_mode(flags) {
        // SAFETY: glibc's report of a missing mode; does not return.
        unsafe { __chk_fail() }
    }
    // SAFETY: same contract.
    unsafe { open(path, flags, 0) }
}

/// Interposes `__open64_2`.
///
/// # Safety
/// As open(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: same contract.
    unsafe { __open_2(path, flags) }
}

/// Interposes `__openat_2`.
///
/// # Safety
/// As openat(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __openat_2(dir: c_int, path: *const c_char, flags: c_int) -> c_int {
    if needs_mode(flags) {
        // SAFETY: as in `__open_2`.
        unsafe { __chk_fail() }
    }
    // SAFETY: same contract.
    unsafe { openat(dir, path, flags, 0) }
}

/// Interposes `__openat64_2`.
///
/// # Safety
/// As openat(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __openat64_2(dir: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: same contract.
    unsafe { __openat_2(dir, path, flags) }
}

/// Interposes fsync(2).
#[unsafe(no_mangle)]
pub extern "C" fn fsync(fd: c_int) -> c_int {
    // SAFETY: no memory preconditions.
    handoff(&|| unsafe { real::fsync(fd) } as i64) as c_int
}

/// Interposes fdatasync(2).
#[unsafe(no_mangle)]
pub extern "C" fn fdatasync(fd: c_int) -> c_int {
    // SAFETY: no memory preconditions.
    handoff(&|| unsafe { real::fdatasync(fd) } as i64) as c_int
}

/// Interposes flock(2).
#[unsafe(no_mangle)]
pub extern "C" fn flock(fd: c_int, op: c_int) -> c_int {
    // SAFETY: no memory preconditions.
    handoff(&|| unsafe { real::flock(fd, op) } as i64) as c_int
}

/// Interposes waitpid(2).
///
/// # Safety
/// As waitpid(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn waitpid(
    pid: libc::pid_t,
    status: *mut c_int,
    options: c_int,
) -> libc::pid_t {
    // SAFETY: the caller's arguments.
    handoff(&|| unsafe { real::waitpid(pid, status, options) } as i64) as libc::pid_t
}

/// Interposes wait4(2).
///
/// # Safety
/// As wait4(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wait4(
    pid: libc::pid_t,
    status: *mut c_int,
    options: c_int,
    ru: *mut libc::rusage,
) -> libc::pid_t {
    // SAFETY: the caller's arguments.
    handoff(&|| unsafe { real::wait4(pid, status, options, ru) } as i64) as libc::pid_t
}

// ---------------------------------------------------------------------------------------
// _FORTIFY_SOURCE variants: the buffer check, then the hook.

unsafe extern "C" {
    fn __chk_fail() -> !;
}

/// Interposes `__read_chk` (read under _FORTIFY_SOURCE).
///
/// # Safety
/// As read(2); `buflen` is the size of `buf`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, n: usize, buflen: usize) -> isize {
    if n > buflen {
        // SAFETY: glibc's overflow report; does not return.
        unsafe { __chk_fail() }
    }
    // SAFETY: the caller's arguments.
    unsafe { read(fd, buf, n) }
}

/// Interposes `__recv_chk`.
///
/// # Safety
/// As recv(2); `buflen` is the size of `buf`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    buflen: usize,
    flags: c_int,
) -> isize {
    if n > buflen {
        // SAFETY: glibc's overflow report; does not return.
        unsafe { __chk_fail() }
    }
    // SAFETY: the caller's arguments.
    unsafe { recv(fd, buf, n, flags) }
}

/// Interposes `__recvfrom_chk`.
///
/// # Safety
/// As recvfrom(2); `buflen` is the size of `buf`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    buflen: usize,
    flags: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> isize {
    if n > buflen {
        // SAFETY: glibc's overflow report; does not return.
        unsafe { __chk_fail() }
    }
    // SAFETY: the caller's arguments.
    unsafe { recvfrom(fd, buf, n, flags, addr, len) }
}

/// Interposes `__pread_chk`.
///
/// # Safety
/// As pread(2); `buflen` is the size of `buf`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    off: libc::off_t,
    buflen: usize,
) -> isize {
    if n > buflen {
        // SAFETY: glibc's overflow report; does not return.
        unsafe { __chk_fail() }
    }
    // SAFETY: the caller's arguments.
    unsafe { pread(fd, buf, n, off) }
}

/// Interposes `__poll_chk`.
///
/// # Safety
/// As poll(2); `fdslen` is the size of `fds` in bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    ms: c_int,
    fdslen: usize,
) -> c_int {
    if (n as usize).saturating_mul(core::mem::size_of::<libc::pollfd>()) > fdslen {
        // SAFETY: glibc's overflow report; does not return.
        unsafe { __chk_fail() }
    }
    // SAFETY: the caller's arguments.
    unsafe { poll(fds, n, ms) }
}
