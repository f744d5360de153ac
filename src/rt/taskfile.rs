//! A thread's /proc task files (`/proc/self/task/<tid>/{stat,status,syscall}`), which
//! sysmon and the Ms stepping in for it read to tell a computing thread from one asleep
//! in the kernel, and which system call it sleeps in (preempt.rs, unseen.rs).

use core::sync::atomic::Ordering;

use super::*;

/// The files of a thread's /proc task directory that sysmon reads.
#[derive(Clone, Copy)]
pub(super) enum TaskFile {
    Stat = 0,
    Status = 1,
    Syscall = 2,
}

impl TaskFile {
    fn name(self) -> &'static [u8] {
        match self {
            TaskFile::Stat => b"/stat\0",
            TaskFile::Status => b"/status\0",
            TaskFile::Syscall => b"/syscall\0",
        }
    }
}

/// Reads M `m`'s thread's `/proc/self/task/<tid>/<file>` into `buf`; the byte count, or
/// None if it cannot be read or is empty. For sysmon and the Ms that step in for it. Raw
/// system calls, not the libc wrappers the interposer hooks.
///
/// Each M keeps its three files open at high numbers (`sys::dup_high`) and reads them
/// with pread at offset 0, which makes procfs generate them afresh: an open for each look
/// would take the lowest free fd number for a moment, every few milliseconds, under the
/// program's feet (`close(0); open(...)` expecting 0; a poll listing a number the program
/// just closed). A slot holds the thread id in the high half, the fd in the low one. A
/// looker that finds the M's slots busy (another looker) reads without caching.
pub(super) fn read_task_file(m: &M, tid: i32, file: TaskFile, buf: &mut [u8]) -> Option<usize> {
    if m.task_lock
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return read_task_file_once(tid, file, buf);
    }
    let slot = &m.task_fds[file as usize];
    let mut cached = slot.load(Ordering::Relaxed);
    if cached != NO_TASK_FD && (cached >> 32) as i32 != tid {
        // The M serves another thread now: the old file reads ESRCH; close it unless the
        // number was closed behind our back (then it may be the program's).
        let old = cached as u32 as i32;
        let mut b = [0u8; 1];
        if pread_fd(old, &mut b) == -(libc::ESRCH as isize) {
            // SAFETY: our own fd (it answers as a dead thread's task file).
            unsafe { libc::syscall(libc::SYS_close, old) };
        }
        slot.store(NO_TASK_FD, Ordering::Relaxed);
        cached = NO_TASK_FD;
    }
    if cached == NO_TASK_FD {
        match open_task_file(tid, file) {
            Some(fd) => {
                cached = (tid as u32 as u64) << 32 | fd as u32 as u64;
                slot.store(cached, Ordering::Relaxed);
            }
            None => {
                m.task_lock.store(false, Ordering::Release);
                return None;
            }
        }
    }
    let fd = cached as u32 as i32;
    let n = pread_fd(fd, buf);
    if n <= 0 {
        // The thread is gone (ESRCH: our fd, closed here), or the number was closed
        // behind our back (forgotten, never closed: it may be the program's now).
        if n == -(libc::ESRCH as isize) {
            // SAFETY: our own fd.
            unsafe { libc::syscall(libc::SYS_close, fd) };
        }
        slot.store(NO_TASK_FD, Ordering::Relaxed);
    }
    m.task_lock.store(false, Ordering::Release);
    (n > 0).then_some(n as usize)
}

/// pread(fd, buf, 0): the count, or -errno.
fn pread_fd(fd: i32, buf: &mut [u8]) -> isize {
    // SAFETY: a raw pread into a valid buffer.
    let n =
        unsafe { libc::syscall(libc::SYS_pread64, fd, buf.as_mut_ptr(), buf.len(), 0) } as isize;
    if n < 0 {
        -(crate::sys::errno() as isize)
    } else {
        n
    }
}

/// Opens `/proc/self/task/<tid><name>` read-only (raw openat); the fd, or -1.
fn open_task_path(tid: i32, file: TaskFile) -> i32 {
    let mut path = [0u8; 48];
    let msg = crate::sys::fmt_msg(
        &mut path,
        &[
            b"/proc/self/task/",
            &crate::sys::fmt_u64(tid as u64),
            file.name(),
        ],
    );
    // SAFETY: a raw openat of a NUL-terminated path.
    unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            msg.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        ) as i32
    }
}

/// Opens a task file and moves it to a high number.
fn open_task_file(tid: i32, file: TaskFile) -> Option<i32> {
    let fd = open_task_path(tid, file);
    if fd < 0 {
        return None;
    }
    let high = crate::sys::dup_high(fd);
    // SAFETY: our own fd, duplicated (or not) above.
    unsafe { libc::syscall(libc::SYS_close, fd) };
    (high >= 0).then_some(high)
}

/// `read_task_file` without the M's cache: open, read, close.
fn read_task_file_once(tid: i32, file: TaskFile, buf: &mut [u8]) -> Option<usize> {
    let fd = open_task_path(tid, file);
    if fd < 0 {
        return None;
    }
    let n = pread_fd(fd, buf);
    // SAFETY: our own fd.
    unsafe { libc::syscall(libc::SYS_close, fd) };
    (n > 0).then_some(n as usize)
}
