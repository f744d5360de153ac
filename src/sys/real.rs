//! libc's own versions of the functions the interposer replaces (interpose/).
//!
//! libgmp.so exports `read`, `write`, `close`, … (the hooks), so a plain `libc::read` in
//! the library's own code would call the hook. The runtime therefore calls these instead:
//! each goes to the next definition after ours in the lookup order (`dlsym(RTLD_NEXT)`,
//! glibc's), resolved once for all of them on first use and cached. Until that is done —
//! other libraries' constructors running before ours, or a call made from inside `dlsym`
//! itself — and for a name no later object defines, the raw system call stands in: same
//! result, same errno. Nothing here allocates or takes a lock. `preadv2` and `pwritev2`,
//! newer than glibc 2.17, go through here too (not hooked): the library links for glibc
//! 2.17 and runs there on the raw calls.

use core::ffi::{c_char, c_int, c_uint, c_void};
use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use libc::{size_t, socklen_t, ssize_t};

const UNRESOLVED: u8 = 0;
const RESOLVING: u8 = 1;
const RESOLVED: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNRESOLVED);

/// The cached address in `slot`, resolving every name first if nobody has; 0 while another
/// call (or this thread, from inside dlsym) is resolving, or when nothing defines the name.
#[cold]
fn resolve(slot: &AtomicUsize) -> usize {
    match STATE.compare_exchange(UNRESOLVED, RESOLVING, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            resolve_all();
            STATE.store(RESOLVED, Ordering::Release);
            slot.load(Ordering::Acquire)
        }
        Err(RESOLVED) => slot.load(Ordering::Acquire),
        Err(_) => 0,
    }
}

/// Resolves every name now (the library's constructor calls it, so that the first hooked
/// call does not pay for it).
pub fn init() {
    if STATE.load(Ordering::Acquire) == UNRESOLVED {
        resolve(&slot::read);
    }
}

fn lookup(slot: &AtomicUsize, name: &[u8]) {
    // SAFETY: name is NUL-terminated; RTLD_NEXT asks for the definition after ours.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr() as *const c_char) };
    slot.store(p as usize, Ordering::Release);
}

#[inline(always)]
fn addr(slot: &AtomicUsize) -> usize {
    let p = slot.load(Ordering::Acquire);
    if p != 0 { p } else { resolve(slot) }
}

macro_rules! real {
    ($( fn $name:ident($($a:ident: $t:ty),*) -> $r:ty = $fallback:expr; )*) => {
        #[allow(non_upper_case_globals)]
        mod slot {
            use core::sync::atomic::AtomicUsize;
            $( pub static $name: AtomicUsize = AtomicUsize::new(0); )*
        }

        fn resolve_all() {
            $( lookup(&slot::$name, concat!(stringify!($name), "\0").as_bytes()); )*
            lookup(&slot_var::fcntl, b"fcntl\0");
            lookup(&slot_var::ioctl, b"ioctl\0");
            lookup(&slot_var::open, b"open\0");
            lookup(&slot_var::openat, b"openat\0");
        }

        $(
            #[doc = concat!("libc's `", stringify!($name), "`.")]
            ///
            /// # Safety
            /// As the libc function.
            #[inline]
            pub unsafe fn $name($($a: $t),*) -> $r {
                let p = addr(&slot::$name);
                if p != 0 {
                    // SAFETY: p is libc's definition of this very name, whose C prototype
                    // is the signature spelled here.
                    unsafe {
                        let f: unsafe extern "C" fn($($t),*) -> $r = core::mem::transmute(p);
                        f($($a),*)
                    }
                } else {
                    // SAFETY: the raw system call with the caller's arguments.
                    #[allow(unused_unsafe)]
                    unsafe { $fallback }
                }
            }
        )*
    };
}

use libc::syscall as sc;

/// A `timespec` from milliseconds (poll's timeout; negative: none).
fn ms_timespec(ms: c_int) -> libc::timespec {
    libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
    }
}

/// Sleeps `ts` with the raw call; returns what nanosleep(3) returns.
unsafe fn sys_nanosleep(ts: *const libc::timespec, rem: *mut libc::timespec) -> c_int {
    // SAFETY: caller contract.
    unsafe { sc(libc::SYS_nanosleep, ts, rem) as c_int }
}

real! {
    fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t = sc(libc::SYS_read, fd, buf, n) as ssize_t;
    fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t = sc(libc::SYS_write, fd, buf, n) as ssize_t;
    fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t = sc(libc::SYS_readv, fd, iov, n) as ssize_t;
    fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t = sc(libc::SYS_writev, fd, iov, n) as ssize_t;
    fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t =
        sc(libc::SYS_recvfrom, fd, buf, n, flags, 0usize, 0usize) as ssize_t;
    fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t =
        sc(libc::SYS_sendto, fd, buf, n, flags, 0usize, 0usize) as ssize_t;
    fn recvfrom(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int, addr: *mut libc::sockaddr, len: *mut socklen_t) -> ssize_t =
        sc(libc::SYS_recvfrom, fd, buf, n, flags, addr, len) as ssize_t;
    fn sendto(fd: c_int, buf: *const c_void, n: size_t, flags: c_int, addr: *const libc::sockaddr, len: socklen_t) -> ssize_t =
        sc(libc::SYS_sendto, fd, buf, n, flags, addr, len) as ssize_t;
    fn recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> ssize_t = sc(libc::SYS_recvmsg, fd, msg, flags) as ssize_t;
    fn sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> ssize_t = sc(libc::SYS_sendmsg, fd, msg, flags) as ssize_t;
    fn accept(fd: c_int, addr: *mut libc::sockaddr, len: *mut socklen_t) -> c_int =
        sc(libc::SYS_accept4, fd, addr, len, 0) as c_int;
    fn accept4(fd: c_int, addr: *mut libc::sockaddr, len: *mut socklen_t, flags: c_int) -> c_int =
        sc(libc::SYS_accept4, fd, addr, len, flags) as c_int;
    fn connect(fd: c_int, addr: *const libc::sockaddr, len: socklen_t) -> c_int = sc(libc::SYS_connect, fd, addr, len) as c_int;
    fn close(fd: c_int) -> c_int = sc(libc::SYS_close, fd) as c_int;
    fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int = sc(libc::SYS_socket, domain, ty, proto) as c_int;
    fn socketpair(domain: c_int, ty: c_int, proto: c_int, fds: *mut c_int) -> c_int =
        sc(libc::SYS_socketpair, domain, ty, proto, fds) as c_int;
    fn pipe(fds: *mut c_int) -> c_int = sc(libc::SYS_pipe2, fds, 0) as c_int;
    fn pipe2(fds: *mut c_int, flags: c_int) -> c_int = sc(libc::SYS_pipe2, fds, flags) as c_int;
    fn dup(fd: c_int) -> c_int = sc(libc::SYS_dup, fd) as c_int;
    fn dup2(old: c_int, new: c_int) -> c_int = if old == new {
        if sc(libc::SYS_fcntl, old, libc::F_GETFL) < 0 { -1 } else { old }
    } else {
        sc(libc::SYS_dup3, old, new, 0) as c_int
    };
    fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int = sc(libc::SYS_dup3, old, new, flags) as c_int;
    fn nanosleep(req: *const libc::timespec, rem: *mut libc::timespec) -> c_int = sys_nanosleep(req, rem);
    fn clock_nanosleep(clock: libc::clockid_t, flags: c_int, req: *const libc::timespec, rem: *mut libc::timespec) -> c_int =
        if sc(libc::SYS_clock_nanosleep, clock, flags, req, rem) < 0 { *libc::__errno_location() } else { 0 };
    fn sleep(secs: c_uint) -> c_uint = {
        let ts = libc::timespec { tv_sec: secs as libc::time_t, tv_nsec: 0 };
        let mut rem = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        if sys_nanosleep(&ts, &mut rem) < 0 { rem.tv_sec as c_uint + (rem.tv_nsec > 0) as c_uint } else { 0 }
    };
    fn usleep(us: libc::useconds_t) -> c_int = {
        let ts = libc::timespec { tv_sec: (us / 1_000_000) as libc::time_t, tv_nsec: (us % 1_000_000) as libc::c_long * 1000 };
        sys_nanosleep(&ts, core::ptr::null_mut())
    };
    fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, ms: c_int) -> c_int = {
        let ts = ms_timespec(ms);
        let tsp = if ms < 0 { core::ptr::null() } else { &ts as *const libc::timespec };
        sc(libc::SYS_ppoll, fds, n, tsp, 0usize, 8usize) as c_int
    };
    fn epoll_wait(ep: c_int, ev: *mut libc::epoll_event, n: c_int, ms: c_int) -> c_int =
        sc(libc::SYS_epoll_pwait, ep, ev, n, ms, 0usize, 8usize) as c_int;
    fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: libc::off_t) -> ssize_t = sc(libc::SYS_pread64, fd, buf, n, off) as ssize_t;
    fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: libc::off_t) -> ssize_t = sc(libc::SYS_pwrite64, fd, buf, n, off) as ssize_t;
    // Not hooked, but newer (glibc 2.26) than the glibc 2.17 the Python wheel's library is
    // linked for: looked up at run time, not linked; the raw call on an older glibc.
    fn preadv2(fd: c_int, iov: *const libc::iovec, n: c_int, off: libc::off_t, flags: c_int) -> ssize_t =
        sc(libc::SYS_preadv2, fd, iov, n, off, 0usize, flags) as ssize_t;
    fn pwritev2(fd: c_int, iov: *const libc::iovec, n: c_int, off: libc::off_t, flags: c_int) -> ssize_t =
        sc(libc::SYS_pwritev2, fd, iov, n, off, 0usize, flags) as ssize_t;
    fn fsync(fd: c_int) -> c_int = sc(libc::SYS_fsync, fd) as c_int;
    fn fdatasync(fd: c_int) -> c_int = sc(libc::SYS_fdatasync, fd) as c_int;
    fn waitpid(pid: libc::pid_t, status: *mut c_int, options: c_int) -> libc::pid_t =
        sc(libc::SYS_wait4, pid, status, options, 0usize) as libc::pid_t;
    fn wait4(pid: libc::pid_t, status: *mut c_int, options: c_int, ru: *mut libc::rusage) -> libc::pid_t =
        sc(libc::SYS_wait4, pid, status, options, ru) as libc::pid_t;
    fn flock(fd: c_int, op: c_int) -> c_int = sc(libc::SYS_flock, fd, op) as c_int;
    fn sendfile(out: c_int, input: c_int, off: *mut libc::off_t, n: size_t) -> ssize_t =
        sc(libc::SYS_sendfile, out, input, off, n) as ssize_t;
    fn splice(fd_in: c_int, off_in: *mut libc::loff_t, fd_out: c_int, off_out: *mut libc::loff_t, n: size_t,
        flags: c_uint) -> ssize_t = sc(libc::SYS_splice, fd_in, off_in, fd_out, off_out, n, flags) as ssize_t;
    fn tee(fd_in: c_int, fd_out: c_int, n: size_t, flags: c_uint) -> ssize_t =
        sc(libc::SYS_tee, fd_in, fd_out, n, flags) as ssize_t;
    fn setsockopt(fd: c_int, level: c_int, name: c_int, val: *const c_void, len: socklen_t) -> c_int =
        sc(libc::SYS_setsockopt, fd, level, name, val, len) as c_int;
    fn ppoll(fds: *mut libc::pollfd, n: libc::nfds_t, ts: *const libc::timespec, mask: *const libc::sigset_t) -> c_int =
        sc(libc::SYS_ppoll, fds, n, ts, mask, 8usize) as c_int;
    fn epoll_pwait(ep: c_int, ev: *mut libc::epoll_event, n: c_int, ms: c_int, mask: *const libc::sigset_t) -> c_int =
        sc(libc::SYS_epoll_pwait, ep, ev, n, ms, mask, 8usize) as c_int;
    fn select(n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, tv: *mut libc::timeval) -> c_int =
        sys_select(n, r, w, e, tv);
    fn pselect(n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, ts: *const libc::timespec,
        mask: *const libc::sigset_t) -> c_int = {
        // The kernel's pselect6 takes the mask as {pointer, size}.
        let m: [usize; 2] = [mask as usize, 8];
        let mp = if mask.is_null() { core::ptr::null() } else { m.as_ptr() };
        sc(libc::SYS_pselect6, n, r, w, e, ts, mp) as c_int
    };
    fn getaddrinfo(node: *const c_char, service: *const c_char, hints: *const libc::addrinfo,
        res: *mut *mut libc::addrinfo) -> c_int = {
        // No system call resolves names: only reachable if libc defines no getaddrinfo.
        let _ = (node, service, hints, res);
        libc::EAI_SYSTEM
    };
    fn gethostbyname(name: *const c_char) -> *mut libc::hostent = {
        // As getaddrinfo: only reachable if libc defines none.
        let _ = name;
        core::ptr::null_mut()
    };
    fn gethostbyname2(name: *const c_char, af: c_int) -> *mut libc::hostent = {
        let _ = (name, af);
        core::ptr::null_mut()
    };
    fn gethostbyname_r(name: *const c_char, ret: *mut libc::hostent, buf: *mut c_char, buflen: size_t,
        result: *mut *mut libc::hostent, h_errnop: *mut c_int) -> c_int = {
        let _ = (name, ret, buf, buflen, result, h_errnop);
        libc::ENOSYS
    };
    fn gethostbyname2_r(name: *const c_char, af: c_int, ret: *mut libc::hostent, buf: *mut c_char,
        buflen: size_t, result: *mut *mut libc::hostent, h_errnop: *mut c_int) -> c_int = {
        let _ = (name, af, ret, buf, buflen, result, h_errnop);
        libc::ENOSYS
    };
    fn getnameinfo(sa: *const libc::sockaddr, salen: socklen_t, host: *mut c_char, hostlen: socklen_t,
        serv: *mut c_char, servlen: socklen_t, flags: c_int) -> c_int = {
        // As getaddrinfo: only reachable if libc defines no getnameinfo.
        let _ = (sa, salen, host, hostlen, serv, servlen, flags);
        libc::EAI_SYSTEM
    };
}

/// select(2) with the raw pselect6 call (updates `tv` with the time left, as Linux does).
unsafe fn sys_select(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    tv: *mut libc::timeval,
) -> c_int {
    // SAFETY: the caller's arguments; ts is a valid timespec when tv is not null.
    unsafe {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let tsp = if tv.is_null() {
            core::ptr::null_mut()
        } else {
            ts.tv_sec = (*tv).tv_sec;
            ts.tv_nsec = (*tv).tv_usec * 1000;
            &mut ts as *mut libc::timespec
        };
        let rc = sc(libc::SYS_pselect6, n, r, w, e, tsp, 0usize) as c_int;
        if !tv.is_null() {
            (*tv).tv_sec = ts.tv_sec;
            (*tv).tv_usec = ts.tv_nsec / 1000;
        }
        rc
    }
}

/// The variadic ones: called with their optional argument always present (an integer or
/// a pointer, passed in the same register as a fixed argument on x86_64 and aarch64).
#[allow(non_upper_case_globals)]
mod slot_var {
    use core::sync::atomic::AtomicUsize;
    pub static fcntl: AtomicUsize = AtomicUsize::new(0);
    pub static ioctl: AtomicUsize = AtomicUsize::new(0);
    pub static open: AtomicUsize = AtomicUsize::new(0);
    pub static openat: AtomicUsize = AtomicUsize::new(0);
}

/// libc's `fcntl(fd, cmd, arg)`.
///
/// # Safety
/// As the libc function (`arg` is ignored by commands that take none).
#[inline]
pub unsafe fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    let p = addr(&slot_var::fcntl);
    // SAFETY: p is libc's fcntl; otherwise the raw call with the same arguments.
    unsafe {
        if p != 0 {
            let f: unsafe extern "C" fn(c_int, c_int, ...) -> c_int = core::mem::transmute(p);
            f(fd, cmd, arg)
        } else {
            sc(libc::SYS_fcntl, fd, cmd, arg) as c_int
        }
    }
}

/// libc's `ioctl(fd, req, arg)`.
///
/// # Safety
/// As the libc function.
#[inline]
pub unsafe fn ioctl(fd: c_int, req: libc::c_ulong, arg: usize) -> c_int {
    let p = addr(&slot_var::ioctl);
    // SAFETY: p is libc's ioctl; otherwise the raw call with the same arguments.
    unsafe {
        if p != 0 {
            let f: unsafe extern "C" fn(c_int, libc::c_ulong, ...) -> c_int =
                core::mem::transmute(p);
            f(fd, req, arg)
        } else {
            sc(libc::SYS_ioctl, fd, req, arg) as c_int
        }
    }
}

/// libc's `open(path, flags, mode)`.
///
/// # Safety
/// As the libc function.
#[inline]
pub unsafe fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    let p = addr(&slot_var::open);
    // SAFETY: p is libc's open; otherwise the raw call with the same arguments.
    unsafe {
        if p != 0 {
            let f: unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int =
                core::mem::transmute(p);
            f(path, flags, mode)
        } else {
            sc(libc::SYS_openat, libc::AT_FDCWD, path, flags, mode) as c_int
        }
    }
}

/// libc's `openat(dir, path, flags, mode)`.
///
/// # Safety
/// As the libc function.
#[inline]
pub unsafe fn openat(dir: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    let p = addr(&slot_var::openat);
    // SAFETY: p is libc's openat; otherwise the raw call with the same arguments.
    unsafe {
        if p != 0 {
            let f: unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int =
                core::mem::transmute(p);
            f(dir, path, flags, mode)
        } else {
            sc(libc::SYS_openat, dir, path, flags, mode) as c_int
        }
    }
}
