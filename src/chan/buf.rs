//! A buffered channel's storage: zeroed (the ring's initial state, see `ring`'s "Positions
//! and stamps"), 64-aligned, and lazy when it is large.
//!
//! # Two sources
//! A buffer of [`MAP_MIN`] bytes or more is an anonymous mapping of its own (`mmap`, freed
//! with `munmap`): its pages are the kernel's untouched zero pages until the ring first
//! uses them, so a large channel costs address space, not memory, until it is used, as
//! Go's `make(chan T, n)` of fresh memory does. A channel of 2^30 8-byte elements (a 16
//! GiB buffer of 16-byte slots) is made in microseconds and holds no resident page
//! (`chan_lazy.c`); from the allocator (`posix_memalign`, which the 64-byte alignment
//! needs, and a `memset` to zero it) its make would take about a second per GiB and make
//! every byte resident. Zeroing is the point:
//! the allocator gives no zeroed memory at this alignment but by writing every byte.
//!
//! A smaller buffer comes from the allocator. Below [`MAP_MIN`] the allocator's recycled
//! memory costs less than the `mmap` and `munmap` pair even when the buffer is never
//! used, and a channel made and destroyed again and again (skynet's, by the thousand)
//! would pay the two system calls at each make (a loop of each pair on a 2-vCPU AMD EPYC
//! VM: 64 KiB, `posix_memalign` + `memset` + `free` 1.4 µs, `mmap` + `munmap` 10 µs;
//! 1 MiB, 50 µs against 7.5 µs). At 128 KiB the two cost about the same for an unused
//! buffer; it is
//! also glibc's default `M_MMAP_THRESHOLD`, at which the allocator itself maps fresh
//! pages for such a block, which the `memset` then touches one by one.
//!
//! What the mapping costs in turn: a page fault when the ring first uses each page
//! (a page allocation and zeroing each), paid again by every new channel,
//! since a destroyed channel's mapping goes back to the kernel (Go's heap keeps and clears
//! freed memory instead). Only small buffers (`KEEP_BUF_MAX` in `hchan`) stay with a
//! destroyed channel's header, cleared by one `memset` when they are taken again: never
//! a mapped one (asserted in `hchan`), which that `memset` would make resident whole.
//!
//! No `MAP_NORESERVE`: the mapping is charged to the commit limit as the allocator's
//! memory is, so a buffer the system could never back is -ENOMEM at make (the default
//! heuristic refuses a mapping larger than RAM and swap together; `ulimit -v` any beyond
//! its limit), not an OOM kill at some later send.

use core::ptr::null_mut;

/// Alignment of a buffer: slots of 16 bytes (an 8-byte element and its stamp) never
/// straddle a cache line. (Mapped buffers are page-aligned.)
pub(crate) const ALIGN: usize = 64;

/// Smallest buffer that is mapped rather than allocated (see "Two sources").
pub(crate) const MAP_MIN: usize = 128 << 10;

/// The allocator's layout of a buffer of `bytes` (0 < `bytes` < [`MAP_MIN`]).
fn layout(bytes: usize) -> std::alloc::Layout {
    debug_assert!(bytes != 0 && bytes < MAP_MIN);
    // SAFETY: ALIGN is a power of two, and `bytes`, below MAP_MIN, is far from overflowing
    // isize when rounded up to it.
    unsafe { std::alloc::Layout::from_size_align_unchecked(bytes, ALIGN) }
}

/// Zeroed storage of `bytes` (> 0) bytes, aligned to [`ALIGN`], or null if the system
/// refuses it. Given back with [`free`] and the same `bytes`.
pub(crate) fn alloc(bytes: usize) -> *mut u8 {
    if bytes < MAP_MIN {
        // SAFETY: the layout has a nonzero size.
        return unsafe { std::alloc::alloc_zeroed(layout(bytes)) };
    }
    // SAFETY: a new private anonymous mapping: it overlaps nothing of ours, and its pages
    // read as zero until written.
    let p = unsafe {
        libc::mmap(
            null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        null_mut()
    } else {
        p.cast()
    }
}

/// Gives back a buffer from [`alloc`].
///
/// # Safety
/// `buf` came from `alloc(bytes)` and is not used again.
pub(crate) unsafe fn free(buf: *mut u8, bytes: usize) {
    if bytes < MAP_MIN {
        // SAFETY: caller contract: allocated with this very layout.
        unsafe { std::alloc::dealloc(buf, layout(bytes)) };
        return;
    }
    // SAFETY: caller contract: the whole mapping `alloc` made, which nobody uses any more.
    let r = unsafe { libc::munmap(buf.cast(), bytes) };
    // munmap fails only for a range that is not a mapping (EINVAL), or for lack of a VMA
    // when it splits one (ENOMEM), which unmapping a whole mapping never does.
    debug_assert_eq!(r, 0, "chan: munmap of a channel buffer failed");
}
