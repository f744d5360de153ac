//! The guard gaps below the stacks: `MADV_GUARD_INSTALL` where the kernel has it (no VMA
//! split), `mprotect` elsewhere, batched with `process_madvise` when it can be.

use super::*;

/// How guard pages are made. Decided once, by the first guard installed.
pub(super) const GUARD_UNKNOWN: u8 = 0;

pub(super) const GUARD_MADVISE: u8 = 1;

pub(super) const GUARD_MPROTECT: u8 = 2;

pub(super) static GUARD_MODE: AtomicU8 = AtomicU8::new(GUARD_UNKNOWN);

/// Makes `[addr, addr + len)` (whole pages) a guard, with `MADV_GUARD_INSTALL` when the
/// kernel has it and `mprotect(PROT_NONE)` otherwise. Err(errno) on failure.
///
/// # Safety
///
/// `[addr, addr + len)` must be pages of an anonymous private mapping owned by the
/// caller, holding nothing anyone will read.
pub(super) unsafe fn install_guard(addr: usize, len: usize) -> Result<(), i32> {
    if GUARD_MODE.load(Ordering::Relaxed) != GUARD_MPROTECT {
        // SAFETY: the caller owns the pages and nothing lives in them.
        let r = unsafe { libc::madvise(addr as *mut libc::c_void, len, MADV_GUARD_INSTALL) };
        if r == 0 {
            GUARD_MODE.store(GUARD_MADVISE, Ordering::Relaxed);
            return Ok(());
        }
        let e = errno();
        // EINVAL: unknown advice, the kernel is older than 6.13. Any other error is real.
        if e != libc::EINVAL || GUARD_MODE.load(Ordering::Relaxed) == GUARD_MADVISE {
            return Err(e);
        }
        GUARD_MODE.store(GUARD_MPROTECT, Ordering::Relaxed);
    }
    // SAFETY: as above; PROT_NONE on pages the caller owns.
    if unsafe { libc::mprotect(addr as *mut libc::c_void, len, libc::PROT_NONE) } != 0 {
        return Err(errno());
    }
    Ok(())
}

/// The calling thread's errno (read right after a failed libc call).
pub(super) fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Whether `process_madvise(PIDFD_SELF, ..)` accepts our advice. Decided by the first call.
pub(super) const BATCH_UNKNOWN: u8 = 0;

pub(super) const BATCH_YES: u8 = 1;

pub(super) const BATCH_NO: u8 = 2;

pub(super) static BATCH_MODE: AtomicU8 = AtomicU8::new(BATCH_UNKNOWN);

/// Applies `advice` to every range of `ranges` with one `process_madvise(2)` call on the
/// calling process. Returns false, having done all, part or none of it, when the kernel
/// refused or stopped early; the caller then falls back to one `madvise` per range (every
/// advice used here is idempotent, so repeating the part already done is harmless).
///
/// # Safety
///
/// Each range must be page-aligned memory of a private anonymous mapping owned by the
/// caller, for which `advice` is sound (as for `madvise`).
pub(super) unsafe fn madvise_batch(ranges: &[libc::iovec], advice: libc::c_int) -> bool {
    if ranges.is_empty() {
        return true;
    }
    if BATCH_MODE.load(Ordering::Relaxed) == BATCH_NO {
        return false;
    }
    let want: usize = ranges.iter().map(|r| r.iov_len).sum();
    // SAFETY: the iovec array is valid for `ranges.len()` entries (at most
    // MAX_PER_SLAB, below UIO_MAXIOV); the caller vouches for the ranges themselves.
    let r = unsafe {
        libc::syscall(
            libc::SYS_process_madvise,
            PIDFD_SELF,
            ranges.as_ptr(),
            ranges.len(),
            advice,
            0,
        )
    };
    if r >= 0 && r as usize == want {
        BATCH_MODE.store(BATCH_YES, Ordering::Relaxed);
        return true;
    }
    if r < 0 && BATCH_MODE.load(Ordering::Relaxed) == BATCH_UNKNOWN {
        // No process_madvise (ENOSYS), no PIDFD_SELF (EBADF), or only the advice meant for
        // other processes (EINVAL, before 6.13): stop trying. Once a call has worked, a
        // failure is about the ranges, and the per-range fallback reports it.
        if matches!(
            errno(),
            libc::ENOSYS | libc::EBADF | libc::EINVAL | libc::EPERM
        ) {
            BATCH_MODE.store(BATCH_NO, Ordering::Relaxed);
        }
    }
    false
}

/// An iovec for `[addr, addr + len)`.
pub(super) fn iov(addr: usize, len: usize) -> libc::iovec {
    libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    }
}

/// True when guard pages are installed with `MADV_GUARD_INSTALL` (advice 102, kernel ≥
/// 6.13) and so cost no extra VMA; false when the `mprotect` fallback is in use.
///
/// Probes the kernel with a scratch page if no guard has been installed yet.
pub fn guards_are_madvise() -> bool {
    if GUARD_MODE.load(Ordering::Relaxed) == GUARD_UNKNOWN {
        let page = page_size();
        // SAFETY: a fresh private anonymous page, unmapped again below; nothing else
        // refers to it.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            if p != libc::MAP_FAILED {
                let _ = install_guard(p as usize, page);
                libc::munmap(p, page);
            }
        }
    }
    GUARD_MODE.load(Ordering::Relaxed) == GUARD_MADVISE
}

/// Installs the guards of the `n` stacks of the slab at `base` (stride `stride`): one
/// `process_madvise` call where the kernel allows it, else one call per guard.
pub(super) fn install_guards(base: usize, n: usize, stride: usize) -> Result<(), i32> {
    let guard = guard_size();
    let mut ranges = [iov(0, 0); MAX_PER_SLAB];
    for (i, r) in ranges[..n].iter_mut().enumerate() {
        *r = iov(base + i * stride, guard);
    }
    // SAFETY: the guard gaps of a slab of ours, holding nothing (no stack of it is in use
    // yet: its stacks are either unmapped-new or in the caller's hands).
    let batched = GUARD_MODE.load(Ordering::Relaxed) != GUARD_MPROTECT
        && unsafe { madvise_batch(&ranges[..n], MADV_GUARD_INSTALL) };
    if batched {
        GUARD_MODE.store(GUARD_MADVISE, Ordering::Relaxed);
        return Ok(());
    }
    for i in 0..n {
        // SAFETY: the guard gap of stack i of the slab, holding nothing.
        unsafe { install_guard(base + i * stride, guard) }?;
    }
    Ok(())
}
