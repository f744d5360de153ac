//! C API for blocking calls (syscall hand-off) and LockOSThread.

use core::ffi::{c_char, c_int, c_long, c_void};

use super::boundary;
use crate::rt;

/// A blocking function for gmp_blocking: called once with the argument given.
pub type gmp_blocking_fn = Option<unsafe extern "C" fn(arg: *mut c_void) -> i64>;

/// Makes system call `nr` as a blocking call and returns the kernel's answer (a result or
/// -errno): the `syscall` instruction in the caller's frame, with no libc wrapper between
/// (one function level less, and no errno to save and restore): gmp_syscall and the
/// gmp_read family.
///
/// # Safety
/// The call must be sound for the calling thread (valid pointers, and not one of the
/// calls `gmp_syscall` refuses).
#[inline(always)]
unsafe fn sys_blocking(nr: c_long, a: [c_long; 6]) -> i64 {
    // SAFETY: the caller's contract.
    rt::syscall::blocking(|| unsafe { crate::arch::syscall6(nr, a) })
}

/// Tells the scheduler that the calling goroutine is about to block in the kernel (or in
/// any long call that does not use gmp): its processor stays attached to the thread, and if
/// the call lasts more than ~20 µs while other goroutines wait, the monitor thread hands
/// the processor to another thread so they keep running. Must be paired with
/// gmp_exitsyscall on the same goroutine; in between, call no gmp function that may block
/// or switch (a wait, yield or sleep aborts with a "gmp:" message).
///
/// Returns 0; 0 and nothing else on a thread that is not a goroutine; -EINVAL if the
/// goroutine is inside gmp_entersyscall (or a gmp_blocking function) already.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_entersyscall() -> c_int {
    boundary("gmp_entersyscall", || match rt::syscall::entersyscall() {
        Ok(()) | Err(rt::syscall::EnterError::Foreign) => 0,
        Err(rt::syscall::EnterError::Nested) => -libc::EINVAL,
    })
}

/// Ends what gmp_entersyscall started. The goroutine continues **on the same OS thread**
/// (so `&errno` and `__thread` addresses stay valid across the pair): with its processor
/// if it was not handed off, else with an idle one, else the thread waits until one is
/// handed to it.
///
/// Returns 0; 0 on a thread that is not a goroutine; -EINVAL if the goroutine is not
/// inside gmp_entersyscall, or if it is inside a gmp_blocking function (whose blocking
/// call gmp_blocking itself ends).
#[unsafe(no_mangle)]
pub extern "C" fn gmp_exitsyscall() -> c_int {
    boundary("gmp_exitsyscall", || {
        match rt::syscall::exitsyscall_user() {
            Ok(()) | Err(rt::syscall::ExitError::Foreign) => 0,
            Err(rt::syscall::ExitError::NotInSyscall | rt::syscall::ExitError::InBlocking) => {
                -libc::EINVAL
            }
        }
    })
}

/// Runs `fn(arg)` as a blocking call (between gmp_entersyscall and gmp_exitsyscall, see
/// there) and returns what it returns. The goroutine stays on its OS thread, so errno
/// values `fn` leaves are still there afterwards — but prefer returning -errno from `fn`.
/// On a thread that is not a goroutine, or nested inside another blocking call, it simply
/// calls `fn(arg)`. Returns -EINVAL if `fn` is NULL.
///
/// # Safety
/// `fn(arg)` must be sound to call on the calling thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_blocking(func: gmp_blocking_fn, arg: *mut c_void) -> i64 {
    boundary("gmp_blocking", || {
        let Some(f) = func else {
            return -(libc::EINVAL as i64);
        };
        // SAFETY: the caller's contract.
        let r = rt::syscall::blocking(|| unsafe { f(arg) });
        // A safe point on the way out, as Go's exitsyscall honours a preemption request;
        // the goroutine resumes on this thread (the header's promise: errno stays valid).
        rt::preempt_check_bound();
        r
    })
}

/// Whether gmp_syscall refuses system call `nr`: the calls that would break the thread
/// under the runtime rather than do something for the goroutine. Ending the thread
/// (exit) takes an M and its goroutine with it; a thread or process made by a raw clone,
/// fork or vfork starts on the goroutine's stack outside the runtime (and skips libc's
/// fork handlers); rt_sigreturn, arch_prctl (the TLS base), set_tid_address, rseq and
/// sigaltstack (the stack the preemption signal runs on) replace state libc and the
/// runtime keep for the thread.
#[inline]
fn syscall_refused(nr: c_long) -> bool {
    // x86-64 only: fork, vfork (aarch64 has clone alone) and arch_prctl (aarch64's thread
    // pointer is tpidr_el0, which user code writes with an instruction, not a call).
    #[cfg(target_arch = "x86_64")]
    if matches!(nr, libc::SYS_fork | libc::SYS_vfork | libc::SYS_arch_prctl) {
        return true;
    }
    matches!(
        nr,
        libc::SYS_exit
            | libc::SYS_clone
            | libc::SYS_clone3
            | libc::SYS_rt_sigreturn
            | libc::SYS_set_tid_address
            | libc::SYS_rseq
            | libc::SYS_sigaltstack
    )
}

/// Makes system call `nr` with arguments `a1`..`a6` (pass 0 for those it does not take)
/// as a blocking call, like Go's syscall.Syscall6: other goroutines keep running if it
/// blocks (see gmp_entersyscall). The goroutine stays on its OS thread across the call.
/// Returns what the kernel returns: the result (>= 0), or -errno; errno is left
/// unchanged. It is the `syscall` instruction itself, called from gmp_syscall's own
/// frame, so it costs a few ns over calling libc's wrapper for the same call. On a thread
/// that is not a goroutine, or inside another blocking call, it simply makes the call.
/// As with syscall(2), a signal may interrupt it, and the runtime's preemption signal
/// (SIGURG) is one: a call the kernel does not restart under SA_RESTART (nanosleep, poll,
/// epoll_wait…) may then return -EINTR and is retried by the caller (Go's syscall.Syscall
/// behaves the same).
///
/// Refuses with -EINVAL (without making it) a call that would break the thread under the
/// runtime: exit (use pthread_exit or return from the goroutine), clone, clone3, fork,
/// vfork (use fork(3) or posix_spawn), rt_sigreturn, arch_prctl, set_tid_address, rseq,
/// sigaltstack. Process exit (exit_group) is allowed.
///
/// # Safety
/// The call must be sound for the calling thread, as with syscall(2): memory it reads or
/// writes through its arguments must be valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_syscall(
    nr: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    boundary("gmp_syscall", || {
        if syscall_refused(nr) {
            return -(libc::EINVAL as c_long);
        }
        // SAFETY: the caller's contract; the calls that would break the thread are refused
        // above.
        let r = unsafe { sys_blocking(nr, [a1, a2, a3, a4, a5, a6]) };
        // A safe point on the way out, as in gmp_blocking.
        rt::preempt_check_bound();
        r
    })
}

/// read(2) as a blocking call (see gmp_entersyscall): other goroutines keep running while
/// it blocks. On an fd registered with the poller (gmp_fd_register, gmp_socket, gmp_pipe,
/// gmp_accept) the goroutine parks until the fd is readable instead (no thread blocks),
/// and -EBADF if the fd is closed meanwhile. Returns the byte count, or -errno (-EBADF,
/// -EAGAIN on a non-blocking fd that is not registered…); -EINVAL if `buf` is NULL. errno
/// is left unchanged.
///
/// # Safety
/// `buf` is NULL or writable for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_read(fd: c_int, buf: *mut c_void, n: usize) -> i64 {
    boundary("gmp_read", || {
        if buf.is_null() {
            return -(libc::EINVAL as i64);
        }
        if let Some(r) = crate::poll::read(fd, buf, n) {
            return r;
        }
        // SAFETY: caller contract (buf writable for n bytes).
        unsafe {
            sys_blocking(
                libc::SYS_read,
                [fd as c_long, buf as c_long, n as c_long, 0, 0, 0],
            )
        }
    })
}

/// write(2) as a blocking call (on a registered fd: parks while it is not writable, as
/// gmp_read). Returns the byte count or -errno; -EINVAL if `buf` is NULL.
///
/// # Safety
/// `buf` is NULL or readable for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_write(fd: c_int, buf: *const c_void, n: usize) -> i64 {
    boundary("gmp_write", || {
        if buf.is_null() {
            return -(libc::EINVAL as i64);
        }
        if let Some(r) = crate::poll::write(fd, buf, n) {
            return r;
        }
        // SAFETY: caller contract (buf readable for n bytes).
        unsafe {
            sys_blocking(
                libc::SYS_write,
                [fd as c_long, buf as c_long, n as c_long, 0, 0, 0],
            )
        }
    })
}

/// pread(2) as a blocking call. Returns the byte count or -errno; -EINVAL if `buf` is NULL.
///
/// # Safety
/// `buf` is NULL or writable for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_pread(fd: c_int, buf: *mut c_void, n: usize, off: i64) -> i64 {
    boundary("gmp_pread", || {
        if buf.is_null() {
            return -(libc::EINVAL as i64);
        }
        // SAFETY: caller contract (buf writable for n bytes).
        unsafe {
            sys_blocking(
                libc::SYS_pread64,
                [fd as c_long, buf as c_long, n as c_long, off, 0, 0],
            )
        }
    })
}

/// pwrite(2) as a blocking call. Returns the byte count or -errno; -EINVAL if `buf` is NULL.
///
/// # Safety
/// `buf` is NULL or readable for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_pwrite(fd: c_int, buf: *const c_void, n: usize, off: i64) -> i64 {
    boundary("gmp_pwrite", || {
        if buf.is_null() {
            return -(libc::EINVAL as i64);
        }
        // SAFETY: caller contract (buf readable for n bytes).
        unsafe {
            sys_blocking(
                libc::SYS_pwrite64,
                [fd as c_long, buf as c_long, n as c_long, off, 0, 0],
            )
        }
    })
}

/// open(2) as a blocking call. Returns the new fd or -errno; -EINVAL if `path` is NULL.
/// `mode` is used only with O_CREAT / O_TMPFILE.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_open(path: *const c_char, flags: c_int, mode: c_int) -> c_int {
    boundary("gmp_open", || {
        if path.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: caller contract (path NUL-terminated). open(2) is openat(AT_FDCWD, ...).
        let fd = unsafe {
            sys_blocking(
                libc::SYS_openat,
                [
                    libc::AT_FDCWD as c_long,
                    path as c_long,
                    flags as c_long,
                    mode as c_long,
                    0,
                    0,
                ],
            ) as c_int
        };
        crate::sys::tsan::fd_opened(fd);
        fd
    })
}

/// close(2) as a blocking call (closing can block, e.g. on NFS). On an fd registered with
/// the poller, goroutines parked on it first wake with -EBADF, and the number is released
/// only after every operation on it has returned (so none of them touches a new fd that
/// reuses the number): inside `gmp_blocking`, by the last of them, and this returns 0 at
/// once. Returns 0 or -errno.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_close(fd: c_int) -> c_int {
    boundary("gmp_close", || {
        match crate::poll::close_begin(fd) {
            crate::rt::netpoll::Close::Deferred => return 0,
            crate::rt::netpoll::Close::Pending => return -libc::EBADF,
            _ => {}
        }
        crate::sys::tsan::fd_closing(fd);
        // SAFETY: close has no memory preconditions.
        unsafe { sys_blocking(libc::SYS_close, [fd as c_long, 0, 0, 0, 0, 0]) as c_int }
    })
}

/// fsync(2) as a blocking call. Returns 0 or -errno.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_fsync(fd: c_int) -> c_int {
    boundary("gmp_fsync", || {
        // SAFETY: fsync has no memory preconditions.
        unsafe { sys_blocking(libc::SYS_fsync, [fd as c_long, 0, 0, 0, 0, 0]) as c_int }
    })
}

/// Locks the calling goroutine to its OS thread (Go's runtime.LockOSThread): until the
/// matching gmp_unlock_os_thread, it runs only on this thread and the thread runs nothing
/// else (when it waits, the thread sleeps). Calls nest: the goroutine is unlocked when as
/// many unlocks as locks were made. A goroutine that ends while locked takes its thread
/// with it: the thread exits instead of serving other goroutines, so state the goroutine
/// changed in it (namespaces, credentials, signal mask…) never leaks. New threads are
/// never created from a locked thread.
///
/// The thread is the one the goroutine runs on when the call returns — not always the one
/// it called from. A thread that other goroutines are bound to (started GMP_GO_PINNED
/// there, or stopped there inside an intercepted call or by a preemption) is not locked,
/// since they can run nowhere else: the first (unnested) call then moves the goroutine to
/// a thread nothing is bound to and locks that one. So take gettid(), errno's address or
/// `__thread` addresses after the call, as after any call that may switch. A goroutine
/// started GMP_GO_PINNED never moves: it locks its own thread, and the goroutines bound to
/// that thread wait until it unlocks (it must not wait for them while locked); nor does a
/// call from inside a gmp_blocking function, which cannot switch. To be locked from the
/// goroutine's first instruction, start it with GMP_GO_LOCKED.
///
/// Returns the new nesting count (>= 1); -EPERM on a thread that is not a goroutine;
/// -EOVERFLOW if the count would overflow.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_lock_os_thread() -> c_int {
    boundary("gmp_lock_os_thread", || match rt::lockosthread::lock() {
        Ok(n) => n.min(i32::MAX as u32) as c_int,
        Err(rt::lockosthread::LockError::Foreign) => -libc::EPERM,
        Err(rt::lockosthread::LockError::Overflow) => -libc::EOVERFLOW,
    })
}

/// Undoes one gmp_lock_os_thread (Go's runtime.UnlockOSThread). Returns the remaining
/// count (0: unlocked; also 0, doing nothing, when the goroutine was not locked); -EPERM on
/// a thread that is not a goroutine. A goroutine started with GMP_GO_PINNED stays on its
/// thread regardless.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_unlock_os_thread() -> c_int {
    boundary("gmp_unlock_os_thread", || {
        match rt::lockosthread::unlock() {
            Ok(n) => n.min(i32::MAX as u32) as c_int,
            Err(_) => -libc::EPERM,
        }
    })
}
