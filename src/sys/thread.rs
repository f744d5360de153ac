//! Threads: ids, detached runtime threads with a stack of our size, the CPU mask, and a
//! descriptor number above the program's.

use super::*;

/// The calling thread's kernel thread id.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// Writes all of `buf` to fd 2 with raw write(2): no allocation, no locks, no TLS, so it is
/// usable while the runtime is broken.
/// A close-on-exec duplicate of `fd` for the runtime's own use, at a high number where
/// there is room (three quarters of RLIMIT_NOFILE up), else the lowest free one; -errno
/// on failure (-EBADF: `fd` is not open). The runtime's fds stay out of the low numbers a
/// program reuses: `close(0); open(...)` expects 0, and a call that lists a number the
/// program closed must find it closed, not ours. Raw system calls.
pub fn dup_high(fd: i32) -> i32 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit into a valid struct.
    let min = if unsafe { libc::syscall(libc::SYS_getrlimit, libc::RLIMIT_NOFILE, &mut rl) } == 0 {
        rl.rlim_cur.min(1 << 20) / 4 * 3
    } else {
        0
    };
    // SAFETY: fcntl on a number of this process's table; fails if it is not open.
    let d = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, min) } as i32;
    if d >= 0 || errno() == libc::EBADF {
        return if d >= 0 { d } else { -libc::EBADF };
    }
    // SAFETY: as above (EMFILE or EINVAL up there: the lowest free number).
    let d = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, 0) } as i32;
    if d >= 0 { d } else { -errno() }
}

/// Number of CPUs in the calling thread's affinity mask (at least 1).
pub fn affinity_cpus() -> usize {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills at most size_of::<cpu_set_t>().
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        if libc::sched_getaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            let n = libc::CPU_COUNT(&set);
            if n > 0 {
                return n as usize;
            }
        }
    }
    1
}

/// The entry function of a thread started by [`spawn_detached`].
pub(crate) type ThreadEntry = extern "C" fn(*mut libc::c_void) -> *mut libc::c_void;

/// Starts a detached OS thread running `entry(arg)` on a `stack`-byte stack, or
/// `PTHREAD_STACK_MIN` if that is more (the runtime's Ms, sysmon, the template thread). Aborts with a `gmp:` message naming `who` if the size
/// is refused — pthread would silently give the default 8 MiB stack instead — or if the
/// thread cannot be created.
pub(crate) fn spawn_detached(who: &str, stack: usize, entry: ThreadEntry, arg: *mut libc::c_void) {
    let mut buf = [0u8; 128];
    // SAFETY: plain pthread calls on a zeroed attr, destroyed before we return; `arg` is
    // the caller's to hand over.
    unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        // At least the platform's minimum: 16 KiB on x86-64, 128 KiB on aarch64 (glibc
        // allows 64 KiB pages there), where the signal forwarder's 64 KiB is refused.
        if libc::pthread_attr_setstacksize(&mut attr, stack.max(libc::PTHREAD_STACK_MIN)) != 0 {
            let msg = fmt_msg(
                &mut buf,
                &[
                    who.as_bytes(),
                    b": pthread_attr_setstacksize refused the stack size",
                ],
            );
            throw(core::str::from_utf8(msg).unwrap_or("pthread_attr_setstacksize refused"));
        }
        libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
        let mut tid: libc::pthread_t = 0;
        let rc = libc::pthread_create(&mut tid, &attr, entry, arg);
        libc::pthread_attr_destroy(&mut attr);
        if rc != 0 {
            let msg = fmt_msg(
                &mut buf,
                &[
                    who.as_bytes(),
                    b": failed to create an OS thread (pthread_create)",
                ],
            );
            throw(core::str::from_utf8(msg).unwrap_or("pthread_create failed"));
        }
    }
}

/// A disarmed POSIX timer on thread `tid`'s CPU-time clock that sends that thread `signo`
/// carrying `value` in `si_value` (`SIGEV_THREAD_ID`); its id, or None. The raw system
/// call: glibc's `timer_create` wrapper has no `SIGEV_THREAD_ID` before 2.35's headers.
pub(crate) fn thread_cpu_timer(tid: i32, signo: i32, value: usize) -> Option<i32> {
    // The kernel's thread CPU clock id (CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED).
    let clock = (!tid) << 3 | 6;
    // struct sigevent: sigev_value (8), sigev_signo, sigev_notify, then the thread id.
    let mut sev = [0u8; 64];
    // SAFETY: writes within the 64-byte sigevent.
    unsafe {
        *(sev.as_mut_ptr() as *mut usize) = value;
        *(sev.as_mut_ptr().add(8) as *mut i32) = signo;
        *(sev.as_mut_ptr().add(12) as *mut i32) = libc::SIGEV_THREAD_ID;
        *(sev.as_mut_ptr().add(16) as *mut i32) = tid;
    }
    let mut id: i32 = -1;
    // SAFETY: timer_create with a valid sigevent and out-pointer.
    let r = unsafe {
        libc::syscall(
            libc::SYS_timer_create,
            clock,
            sev.as_ptr(),
            &mut id as *mut i32,
        )
    };
    (r == 0).then_some(id)
}

/// Deletes a timer `thread_cpu_timer` made (a signal of it still pending is delivered).
pub(crate) fn timer_delete(id: i32) {
    // SAFETY: deletes our own timer; an id that is not one fails with EINVAL.
    unsafe { libc::syscall(libc::SYS_timer_delete, id) };
}
