//! Blocking calls epoll cannot help with (name resolution, files, locks, child
//! processes): the syscall hand-off.

use super::*;

/// Interposes getaddrinfo(3): on a goroutine, the runtime's resolver (`crate::net`),
/// which waits for DNS servers on the poller, when the configuration lets it answer as
/// libc would ("go" mode); else libc's, through the syscall hand-off ("cgo" mode: glibc's
/// own sockets inside it are not ours).
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
    crate::ffi::boundary("interposed getaddrinfo", || {
        let bound = rt::bind_current(); // same-thread resume
        // SAFETY: the caller's arguments.
        let ours = unsafe { crate::net::getaddrinfo(node, service, hints, res) };
        drop(bound);
        if let Some(r) = ours {
            return r;
        }
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

/// Interposes getnameinfo(3): on a goroutine, the runtime's resolver (reverse lookups
/// in /etc/hosts and PTR queries on the poller) when the configuration lets it answer as
/// libc would; else libc's, through the syscall hand-off (as `getaddrinfo`).
///
/// # Safety
/// As getnameinfo(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getnameinfo(
    sa: *const libc::sockaddr,
    salen: libc::socklen_t,
    host: *mut c_char,
    hostlen: libc::socklen_t,
    serv: *mut c_char,
    servlen: libc::socklen_t,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's arguments.
    let plain = || unsafe { real::getnameinfo(sa, salen, host, hostlen, serv, servlen, flags) };
    if !on_goroutine() {
        return plain();
    }
    crate::ffi::boundary("interposed getnameinfo", || {
        let bound = rt::bind_current(); // same-thread resume
        // SAFETY: the caller's arguments.
        let ours =
            unsafe { crate::net::getnameinfo(sa, salen, host, hostlen, serv, servlen, flags) };
        drop(bound);
        if let Some(r) = ours {
            return r;
        }
        if rt::offload::wanted() {
            // On a helper (see `blocking_call`); its errno comes back for EAI_SYSTEM.
            // SAFETY: the caller's arguments, alive while it parks.
            let (r, e) = unsafe { rt::offload::run(&|| plain() as i64) };
            if r == libc::EAI_SYSTEM as i64 {
                set_errno(e);
            }
            return r as c_int;
        }
        rt::syscall::blocking(plain)
    })
}

/// A resolver call in a goroutine: `ours` (the runtime's resolver, None when libc must
/// answer) with the goroutine kept on its thread, else `plain` through the syscall
/// hand-off (on a helper when goroutines are bound to this thread; its errno comes
/// back). `T` is the call's result.
fn resolve_call<T: Copy + Default>(
    what: &'static str,
    ours: &dyn Fn() -> Option<T>,
    plain: &dyn Fn() -> T,
) -> T {
    crate::ffi::boundary(what, || {
        let bound = rt::bind_current(); // same-thread resume
        let r = ours();
        drop(bound);
        if let Some(r) = r {
            return r;
        }
        if rt::offload::wanted() {
            let out = core::cell::Cell::new(T::default());
            // SAFETY: `plain` is a libc call on the caller's arguments, alive while the
            // goroutine parks; its result comes back through `out`.
            let (_, e) = unsafe {
                rt::offload::run(&|| {
                    out.set(plain());
                    0
                })
            };
            set_errno(e);
            return out.get();
        }
        rt::syscall::blocking(plain)
    })
}

/// Interposes gethostbyname(3): on a goroutine the runtime's resolver where it may
/// answer (`crate::net::hostent`), else libc's through the hand-off.
///
/// # Safety
/// As gethostbyname(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gethostbyname(name: *const c_char) -> *mut libc::hostent {
    // SAFETY: the caller's arguments.
    unsafe { gethostbyname2(name, libc::AF_INET) }
}

/// Interposes gethostbyname2(3) (see `gethostbyname`).
///
/// # Safety
/// As gethostbyname2(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gethostbyname2(name: *const c_char, af: c_int) -> *mut libc::hostent {
    // SAFETY: the caller's arguments.
    let plain = || unsafe {
        if af == libc::AF_INET {
            real::gethostbyname(name)
        } else {
            real::gethostbyname2(name, af)
        }
    };
    if !on_goroutine() {
        return plain();
    }
    resolve_call(
        "interposed gethostbyname2",
        // SAFETY: the caller's arguments.
        &|| unsafe { crate::net::gethostbyname2(name, af) },
        &plain,
    )
}

/// Interposes gethostbyname_r(3) (see `gethostbyname`).
///
/// # Safety
/// As gethostbyname_r(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gethostbyname_r(
    name: *const c_char,
    ret: *mut libc::hostent,
    buf: *mut c_char,
    buflen: usize,
    result: *mut *mut libc::hostent,
    h_errnop: *mut c_int,
) -> c_int {
    // SAFETY: the caller's arguments.
    let plain = || unsafe { real::gethostbyname_r(name, ret, buf, buflen, result, h_errnop) };
    if !on_goroutine() {
        return plain();
    }
    resolve_call(
        "interposed gethostbyname_r",
        // SAFETY: the caller's arguments.
        &|| unsafe {
            crate::net::gethostbyname2_r(name, libc::AF_INET, ret, buf, buflen, result, h_errnop)
        },
        &plain,
    )
}

/// Interposes gethostbyname2_r(3) (see `gethostbyname`).
///
/// # Safety
/// As gethostbyname2_r(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gethostbyname2_r(
    name: *const c_char,
    af: c_int,
    ret: *mut libc::hostent,
    buf: *mut c_char,
    buflen: usize,
    result: *mut *mut libc::hostent,
    h_errnop: *mut c_int,
) -> c_int {
    // SAFETY: the caller's arguments.
    let plain = || unsafe { real::gethostbyname2_r(name, af, ret, buf, buflen, result, h_errnop) };
    if !on_goroutine() {
        return plain();
    }
    resolve_call(
        "interposed gethostbyname2_r",
        // SAFETY: the caller's arguments.
        &|| unsafe { crate::net::gethostbyname2_r(name, af, ret, buf, buflen, result, h_errnop) },
        &plain,
    )
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

/// Interposes sendfile64 (sendfile).
///
/// # Safety
/// As sendfile(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile64(
    out: c_int,
    input: c_int,
    off: *mut libc::off_t,
    n: usize,
) -> isize {
    // SAFETY: same contract.
    unsafe { sendfile(out, input, off, n) }
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

/// Interposes sendfile(2). It has no non-blocking form for one call (the output's
/// O_NONBLOCK decides, and that is the program's): the syscall hand-off, so that the
/// goroutine that drains the pipe or socket it fills can run meanwhile.
///
/// # Safety
/// As sendfile(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile(
    out: c_int,
    input: c_int,
    off: *mut libc::off_t,
    n: usize,
) -> isize {
    // SAFETY: the caller's arguments.
    handoff(&|| unsafe { real::sendfile(out, input, off, n) } as i64) as isize
}

/// Interposes splice(2): the syscall hand-off, as `sendfile` (SPLICE_F_NONBLOCK makes
/// only the pipe's side non-blocking).
///
/// # Safety
/// As splice(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn splice(
    fd_in: c_int,
    off_in: *mut libc::loff_t,
    fd_out: c_int,
    off_out: *mut libc::loff_t,
    n: usize,
    flags: c_uint,
) -> isize {
    // SAFETY: the caller's arguments.
    handoff(&|| unsafe { real::splice(fd_in, off_in, fd_out, off_out, n, flags) } as i64) as isize
}

/// Interposes tee(2): the syscall hand-off, as `splice`.
#[unsafe(no_mangle)]
pub extern "C" fn tee(fd_in: c_int, fd_out: c_int, n: usize, flags: c_uint) -> isize {
    // SAFETY: no memory preconditions.
    handoff(&|| unsafe { real::tee(fd_in, fd_out, n, flags) } as i64) as isize
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
