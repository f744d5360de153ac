//! Arenas: the address ranges stacks are carved from, and mapping a slab of stacks in one.

use super::*;

/// Maps a slab of `n` stacks of `size` bytes, each above a guard gap, the guards
/// installed in one call where the kernel allows it (see "Guard pages" in `stack`'s
/// module doc) if `guarded`, else left to [`install_guards`]. Returns its base.
pub(super) fn map_slab(n: usize, size: usize, guarded: bool) -> Result<usize, i32> {
    let guard = guard_size();
    let stride = size + guard;
    let len = n * stride;
    let base = carve(len)?;
    if guarded && let Err(e) = install_guards(base, n, stride) {
        // SAFETY: the slab just carved; no stack of it was handed out. (Its address space
        // is not carved again: the arena's cursor has moved past it. The hole splits the
        // arena's VMA, once, on this error path.)
        unsafe { libc::munmap(base as *mut libc::c_void, len) };
        return Err(e);
    }
    // Under valgrind, every stack is announced once (slabs are never unmapped): a switch
    // to a goroutine then is a change of stack, not a huge "stack pointer change" that
    // valgrind would take for a frame of gigabytes.
    for i in 0..n {
        let lo = base + i * stride + guard;
        valgrind_stack_register(lo, lo + size);
    }
    Ok(base)
}

/// The address space slabs are carved from (see "Arenas" in `stack`'s module doc):
/// `[next, end)` is still free; `grow` is the size of the next arena to map.
pub(super) struct Arena {
    pub(super) next: usize,
    pub(super) end: usize,
    pub(super) grow: usize,
}

pub(super) static ARENA: Mutex<Arena> = Mutex::new(Arena {
    next: 0,
    end: 0,
    grow: ARENA_FIRST,
});

/// Size of the first arena; each next one is twice the last, up to [`ARENA_MAX`].
pub(super) const ARENA_FIRST: usize = 64 << 20;

/// Largest arena mapped ahead of need (address space only: nothing is committed).
pub(super) const ARENA_MAX: usize = 4 << 30;

/// Takes `len` bytes (whole pages) of fresh stack address space: from the current arena,
/// or from a new one, mapped `MAP_NORESERVE | MAP_STACK`, when the arena has less left.
/// Err(errno) if no arena of even `len` bytes can be mapped.
pub(super) fn carve(len: usize) -> Result<usize, i32> {
    ARENA
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .carve(len, map_arena)
}

impl Arena {
    /// [`carve`] from this arena, mapping new ones with `map`.
    pub(super) fn carve(
        &mut self,
        len: usize,
        map: impl Fn(usize) -> Result<usize, i32>,
    ) -> Result<usize, i32> {
        if self.end - self.next < len {
            // What the last arena has left is not used (less than this slab).
            let want = self.grow.max(len);
            let base = match map(want) {
                Ok(base) => {
                    self.grow = (self.grow * 2).min(ARENA_MAX);
                    self.end = base + want;
                    base
                }
                // Refused for its size (RLIMIT_AS, or strict overcommit, which charges
                // even MAP_NORESERVE mappings): map just this slab.
                Err(_) if want > len => {
                    let base = map(len)?;
                    self.end = base + len;
                    base
                }
                Err(e) => return Err(e),
            };
            self.next = base;
        }
        let base = self.next;
        self.next += len;
        Ok(base)
    }
}

/// Names an anonymous mapping of ours in /proc/PID/maps (`[anon:NAME]`, as Go 1.25 names
/// its mappings), for whoever reads a process's memory map: best effort, for kernels with
/// `PR_SET_VMA_ANON_NAME` (5.17 with `CONFIG_ANON_VMA_NAME`); elsewhere the call fails and
/// the mapping keeps no name. It takes the mmap lock for writing: for mappings made once
/// (arenas, signal stacks), not per stack.
pub(crate) fn name_mapping(addr: usize, len: usize, name: &core::ffi::CStr) {
    // SAFETY: prctl on a range of our own mapping with a NUL-terminated name, which the
    // kernel copies; it changes no memory.
    unsafe {
        libc::prctl(
            libc::PR_SET_VMA,
            libc::PR_SET_VMA_ANON_NAME as libc::c_ulong,
            addr as libc::c_ulong,
            len as libc::c_ulong,
            name.as_ptr() as libc::c_ulong,
        )
    };
}

/// Maps an arena of `len` bytes of stack address space.
pub(super) fn map_arena(len: usize) -> Result<usize, i32> {
    // SAFETY: a fresh anonymous mapping; the kernel picks the address, so nothing else is
    // affected.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(errno());
    }
    name_mapping(base as usize, len, c"gmp goroutine stacks");
    // Kernels before 6.7 ignore MAP_STACK for huge pages: tell them (best effort, failure
    // is harmless). A kernel with MADV_GUARD_INSTALL (6.13) needs no telling, and the
    // advice takes the mmap lock for writing, which waits for every page fault of the
    // process in flight (`map_stack_is_nohugepage` checks it on the machine).
    if GUARD_MODE.load(Ordering::Relaxed) != GUARD_MADVISE {
        // SAFETY: advice on our own fresh mapping; it does not change its contents.
        unsafe { libc::madvise(base, len, libc::MADV_NOHUGEPAGE) };
    }
    Ok(base as usize)
}
