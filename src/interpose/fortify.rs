//! _FORTIFY_SOURCE variants: the buffer check, then the hook.

use super::*;

unsafe extern "C" {
    fn __chk_fail() -> !;
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
