//! The futex system call: wait while a word holds a value, wake its sleepers.

use super::*;

/// Sleeps while `*word == val`, for at most `timeout`. Spurious wake-ups are allowed:
/// the caller re-checks its condition.
pub fn wait(word: &AtomicU32, val: u32, timeout: Option<Duration>) {
    let ts;
    let tsp = match timeout {
        Some(d) => {
            ts = libc::timespec {
                tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            };
            &ts as *const libc::timespec
        }
        None => core::ptr::null(),
    };
    // SAFETY: `word` is a live, aligned u32 for the duration of the call; FUTEX_WAIT only
    // reads it. A private futex suffices: every waiter is in this process. Made by
    // our own `syscall` instruction, not libc's `syscall()`: a thread asleep here is
    // in the runtime, which rt/unseen.rs tells from C code asleep in a pthread mutex
    // by the return address.
    unsafe {
        raw_syscall6(
            libc::SYS_futex as u64,
            word.as_ptr() as u64,
            (libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG) as u64,
            val as u64,
            tsp as u64,
            0,
            0,
        );
    }
}

/// Wakes at most `n` threads sleeping on `word`.
pub fn wake(word: &AtomicU32, n: i32) {
    // SAFETY: FUTEX_WAKE does not dereference `word` beyond using its address as a key.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            n,
        );
    }
}
