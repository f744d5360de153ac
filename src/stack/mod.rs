//! Goroutine stacks: mmap'd in slabs, each stack above its own guard gap, recycled through
//! a global free list per size class; the SIGSEGV/SIGBUS handler that turns a fault in a
//! guard gap into "gmp: goroutine N: stack overflow"; the alternate signal stacks it runs
//! on.
//!
//! # Slab layout
//!
//! ```text
//!   slab base                                                     slab end
//!   | guard | stack 0 (size) | guard | stack 1 (size) | ... | guard | stack n-1 |
//!           ^lo              ^top
//! ```
//!
//! # Guard width
//!
//! Each guard is [`GUARD_GAP`] = 64 KiB (at least a page), not one page. A function whose
//! frame is bigger than the guard moves the stack pointer past it in one `sub` and, when
//! it was compiled without stack-clash protection (GCC's and Clang's default outside some
//! distributions, and common in C libraries), its first store lands in the stack below —
//! another goroutine's — with no fault at all: with one 4 KiB page, a 14 KB frame
//! overwrote a parked neighbour, and a 12 KiB `alloca` jumped the guard and faulted only
//! further down, where nothing recognised it. 64 KiB covers the frames C compilers emit in
//! practice (GCC's `-Wframe-larger-than` and stack-clash probing both work at 4 KiB
//! granularity; frames beyond 64 KiB are rare, and `alloca`/VLAs that size are still
//! jumpable: keep them off goroutine stacks). A guard costs no memory either way, and with
//! `MADV_GUARD_INSTALL` no VMA either (below); it costs 64 KiB of address space per stack
//! (a million 256 KiB stacks: 305 GiB of the 128 TiB user space instead of 248 GiB).
//! The `mprotect` fallback uses the same width: a `PROT_NONE` range is one VMA and no
//! memory whatever its length.
//!
//! A fault is a goroutine's overflow ([`Stack::overflowed`]) if its address is in the guard
//! (or up to another guard's width below it: below stack 0 of a slab lies whatever else
//! is mapped there), or if the interrupted stack pointer is below the goroutine's `lo`
//! (within [`OVERFLOW_REACH`]): a frame that jumped even the wide guard and faulted further
//! down is still reported as the overflow it is.
//!
//! Slabs are carved from arenas, each one `mmap(MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE
//! | MAP_STACK)` (see "Arenas"): memory is committed page by page as a goroutine touches
//! it, and nothing is charged to the overcommit accounting up front. `MAP_STACK` (plus
//! `MADV_NOHUGEPAGE` for older kernels) keeps transparent huge pages away, or touching one
//! page of a stack could fault in 2 MiB.
//! A stack grows down from `top`; running past `lo` faults in the guard below it (see
//! "Guard width" for frames that could jump it).
//!
//! # Guard pages and the VMA budget
//!
//! With `MADV_GUARD_INSTALL` (advice 102, Linux ≥ 6.13) a guard is a page-table marker: the
//! arena stays a single VMA whatever the number of stacks in it, and adjacent arenas merge,
//! so a million stacks cost a handful of `/proc/self/maps` lines. Without it (the kernel
//! answers EINVAL) each guard is `mprotect(PROT_NONE)`, which splits the slab: two VMAs per
//! stack, so the default `vm.max_map_count` of 65,530 allows only about 32,000 live stacks
//! before `mmap`/`mprotect` fail with ENOMEM. [`guards_are_madvise`] tells which is in use.
//!
//! The guards of a slab are installed with one `process_madvise(PIDFD_SELF, iov[n],
//! MADV_GUARD_INSTALL)` call, cheaper per stack than one `madvise` each (skynet maps
//! ~64,000 stacks at its peak; `scripts/guard_cost.c` measures the calls). `process_madvise`
//! accepts any advice for the calling process since Linux 6.13, and `PIDFD_SELF` exists
//! since 6.15; on older kernels [`madvise_batch`] reports failure once and the guards go in
//! one `madvise` at a time.
//!
//! The first touch of a fresh stack's top page (`init_stack` writing the first frame) is
//! left to a page fault, nearly all of whose cost is page allocation, zeroing and memcg
//! charging (`scripts/guard_cost.c` measures it). `MADV_POPULATE_WRITE` over a slab's top
//! pages in one call saves a small part of it per stack in isolation and nothing
//! measurable in skynet (likely because 64 pages zeroed ahead of use are out of cache when
//! their goroutines start, where a page faulted in by `init_stack` is hot for the goroutine
//! about to run on it). Doing the same on a background thread takes that kernel work off
//! the M but gains no wall time on a 2-CPU machine, where that thread competes with the Ms
//! (`scripts/ab.sh -p 2 skynet`), so neither is done.
//!
//! # Arenas
//!
//! A slab is address space carved from the current arena ([`carve`]), not a mapping of its
//! own: the first arena is 64 MiB, each next one twice the last, up to 4 GiB (address
//! space only; if the kernel refuses one that big, under `RLIMIT_AS` or strict overcommit,
//! the slab is mapped alone). Mapping each slab would take the mmap lock for writing and,
//! as the kernel merges the new mapping into the adjacent slabs' VMA, that VMA's own lock:
//! every page fault in flight on the other Ms' stacks (the first touch of a starting
//! goroutine's stack) has to finish first, and every fault that comes meanwhile sleeps in
//! the kernel until the mapping is done (`perf record -e sched:sched_switch -g` of
//! sleep_many from C main at GOMAXPROCS=2 shows such waits as C main in
//! `__vma_start_write` under `vma_expand` and the Ms in `rwsem_down_read_slowpath` under
//! `lock_mm_and_find_vma`). Carving takes neither lock; only a new arena pays that cost.
//!
//! # Size classes and freeing
//!
//! A size class is a usable size in whole pages. Each class has two lists of free stacks
//! (`lo` addresses under one global mutex) refilled a slab at a time; slabs are never
//! unmapped. The scheduler keeps its own per-P cache in front of this, so the mutex is
//! taken on the slow path only.
//!
//! A freed stack keeps the memory it touched for a while: [`free`] puts it on its class's
//! `dirty` list, and [`alloc`] takes the most recently freed stack first, so a workload that
//! ends and starts goroutines in waves (skynet) reuses stacks whose top page is resident and
//! warm, without a syscall. When a class holds [`DIRTY_MAX`] dirty stacks, the oldest
//! [`RELEASE_BATCH`] of them are released: every page except each one's top
//! [`KEEP_RESIDENT`] bytes, with `MADV_DONTNEED` (guard markers survive it), in one
//! `process_madvise` call for the batch; they then go to the `clean` list, which `alloc`
//! uses when `dirty` is empty. So the pool holds at most `DIRTY_MAX` stacks' worth of deep
//! pages per class, as the G caches in front of it do (64 per P). `madvise(DONTNEED)` of a
//! 256 KiB stack is cheap when nothing below the kept top was touched (cheaper still in
//! batches), an order of magnitude dearer when 64 KiB were, and dearer again for a fully
//! used stack; `MADV_FREE` is no cheaper and leaves the pages counted in RSS until memory
//! pressure. Not releasing at all would make the pool keep the RSS of every stack that
//! ever ran deep, forever. A page faulted back in costs an allocation and a zeroing, so
//! the top 16 KiB, where a goroutine's first frames live, stay resident and a recycled
//! stack starts without faults.
//!
//! # Trimming
//!
//! Go frees the stacks of dead goroutines at each GC and its scavenger returns the memory
//! to the system; here sysmon does it once a second (`rt::sysmon`, `Trim`), in two steps,
//! each releasing only what nobody took during the whole second:
//!
//! - the scheduler's global dead-G cache (`rt::proc::trim_gfree`): each of its lists
//!   remembers the fewest Gs it held since the last trim (its low-water mark). That many
//!   at the bottom of the LIFO list were not taken. Beyond a floor of 64 per list, their
//!   stacks are released entirely ([`free_released`], one `process_madvise(DONTNEED)` per
//!   32) and go to the `bare` list here; the Gs stay, without a stack.
//! - this pool ([`trim`](fn@trim::trim)): by the same low-water marks, unused `dirty` stacks are released
//!   entirely and unused `clean` ones (beyond [`TRIM_CLEAN_FLOOR`]) lose their top 16 KiB
//!   too; both go to `bare`, which `alloc` takes last.
//!
//! So after a burst the memory goes back within one to two seconds of idleness (~2 s for
//! 2,000 goroutines that each used 64 KiB: `stack_trim idle`), while a program that spawns
//! in bursts more often than that keeps the stacks it keeps reusing (`stack_trim bursts`:
//! bursts 200 ms apart fault in a few hundred pages each, not the 4,000 they write). The Ps' own dead-G caches (64 each) are not
//! trimmed. A program that goes idle keeps sysmon waking once a period until nothing is
//! left above the floors, then sysmon sleeps until woken as before.
//!
//! # Reservations
//!
//! A goroutine spawned by a goroutine gets its stack when it first runs (the scheduler's
//! `take_hot_stack`), mostly the warm stack of one that just died. What it holds until then
//! is a promise: [`reserve`] counts it against the class's free stacks (`dirty`, `clean`,
//! slabs not yet guarded, stacks in flight), mapping slabs until they cover every promise,
//! and [`alloc`] never takes the class below its promises. So running out of address
//! space is still reported at spawn, and [`alloc_reserved`] always finds a stack. A slab
//! mapped for promises gets its guards when its first stack is handed out (with
//! `MADV_GUARD_INSTALL`; the `mprotect` fallback guards it at once, since that can fail
//! for want of VMAs): a queued goroutine costs address space and nothing else, where a
//! stack at spawn would cost it guard work and, often, the fault of a stack nobody else
//! uses (skynet queues ~55,000 goroutines at its peak at GOMAXPROCS=1 and starts ~9,400 at
//! once).
//!
//! # Files
//!
//! `pool.rs` (size classes, reservations, alloc and free), `arena.rs` (the address ranges
//! slabs are carved from), `guard.rs` (the guard gaps), `trim.rs` (giving idle stacks
//! back), `overflow.rs` (the fault handler), `altstack.rs` (the handlers' signal stacks),
//! `valgrind.rs` (client requests); the constants and `Stack` are here.

mod altstack;
mod arena;
mod guard;
mod overflow;
mod pool;
mod trim;
mod valgrind;

pub use self::altstack::*;
use self::arena::*;
pub use self::guard::*;
pub use self::overflow::*;
pub use self::pool::*;
pub use self::trim::*;
pub use self::valgrind::*;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, Once, OnceLock};

/// Smallest stack [`alloc`] accepts.
pub const MIN_STACK: usize = 16 * 1024;
/// Largest stack [`alloc`] accepts.
pub const MAX_STACK: usize = 1 << 30;
/// Stack size used when nobody asked for another one: generous (at least 64 KiB), since a
/// large frame can jump a guard page.
pub const DEFAULT_STACK: usize = 256 * 1024;

/// Bytes at the top of a freed stack left resident (see the module doc).
pub const KEEP_RESIDENT: usize = 16 * 1024;

/// A class releases its oldest dirty stacks once it holds this many (see the module doc).
const DIRTY_MAX: usize = 64;
/// How many dirty stacks one release takes: one `process_madvise` call.
const RELEASE_BATCH: usize = 32;

/// Least size of the alternate signal stacks made by [`ensure_altstack`], guard page
/// excluded. The kernel's AT_MINSIGSTKSZ (`getauxval`) is close to 12 KB for the signal
/// frame alone on a CPU with AVX-512 state; the overflow hook and the preemption handler
/// run on it too. A CPU whose frame is larger (aarch64 with SME: the ZA array alone is
/// up to 64 KiB) gets [`altstack_size`].
const ALTSTACK_SIZE: usize = 64 * 1024;

/// What the handlers need beside the kernel's frame on the alternate stack.
const ALTSTACK_HANDLER: usize = 48 * 1024;

/// The size of the alternate signal stacks: [`ALTSTACK_SIZE`], or the kernel's frame size
/// (AT_MINSIGSTKSZ) and [`ALTSTACK_HANDLER`] where that is more, rounded up to a page.
pub(crate) fn altstack_size() -> usize {
    // SAFETY: getauxval has no preconditions; 0 where the kernel gives no such entry.
    let frame = unsafe { libc::getauxval(libc::AT_MINSIGSTKSZ) } as usize;
    let page = page_size();
    ALTSTACK_SIZE
        .max(frame.saturating_add(ALTSTACK_HANDLER))
        .next_multiple_of(page)
}

/// Bytes of guard below every stack (rounded up to a page; see "Guard width").
const GUARD_GAP: usize = 64 * 1024;

/// How far below a stack's `lo` the interrupted stack pointer may be for a fault to count
/// as that goroutine's overflow (see "Guard width").
const OVERFLOW_REACH: usize = 1 << 20;

/// `MADV_GUARD_INSTALL` (Linux 6.13): turns a range into guard pages without a new VMA.
const MADV_GUARD_INSTALL: libc::c_int = 102;
/// `PIDFD_SELF_THREAD_GROUP` (Linux 6.15): a pidfd argument meaning the calling process,
/// with no file descriptor to open, keep or lose across fork.
const PIDFD_SELF: libc::c_int = -10001;

/// Target virtual size of one slab; a slab holds between 1 and [`MAX_PER_SLAB`] stacks.
const SLAB_BYTES: usize = 64 << 20;
/// Stacks per slab for small classes: 64 × (16 KiB + guard) is 1.25 MiB per slab.
const MAX_PER_SLAB: usize = 64;

/// A goroutine stack: `size` usable bytes at `[lo, lo + size)` above a guard page.
///
/// Owns its region until it is given back with [`free`]; dropping a `Stack` instead leaks
/// the region (it stays mapped, it is never reused). Not `Clone`: two owners of one stack
/// would run two goroutines on it.
#[derive(Debug)]
pub struct Stack {
    /// Lowest usable address, just above the guard page; page-aligned.
    lo: usize,
    /// Usable bytes, a multiple of the page size.
    size: usize,
}

impl Stack {
    /// Highest address (exclusive): where the stack starts growing down. 16-aligned (it is
    /// page-aligned).
    pub fn top(&self) -> usize {
        self.lo + self.size
    }

    /// Lowest usable address, just above the guard page.
    pub fn lo(&self) -> usize {
        self.lo
    }

    /// Usable bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// `[start, end)` of the guard below [`lo`](Self::lo).
    pub fn guard_range(&self) -> (usize, usize) {
        (self.lo - guard_size(), self.lo)
    }

    /// Whether a fault at `addr`, taken with the stack pointer at `sp`, is the overflow of
    /// the goroutine running on this stack (see "Guard width" in the module doc).
    /// Async-signal-safe.
    pub fn overflowed(&self, addr: usize, sp: usize) -> bool {
        overflowed(self.lo, addr, sp)
    }
}

/// [`Stack::overflowed`] for the stack whose lowest usable address is `lo`.
fn overflowed(lo: usize, addr: usize, sp: usize) -> bool {
    let in_guard = addr < lo && addr >= lo.saturating_sub(2 * guard_size());
    let sp_below = sp < lo && sp >= lo.saturating_sub(OVERFLOW_REACH);
    in_guard || sp_below
}

/// Width of the guard below every stack: [`GUARD_GAP`], at least a page.
fn guard_size() -> usize {
    GUARD_GAP.next_multiple_of(page_size())
}

/// `size` rounded up to whole pages: the usable size [`alloc`] gives a stack asked for
/// `size` bytes. (A power of two: a mask, not a division, on the spawn path.)
#[inline]
pub fn round_size(size: usize) -> usize {
    let mask = page_size() - 1;
    (size + mask) & !mask
}

/// The system page size, read once.
fn page_size() -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    match PAGE.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: sysconf has no preconditions.
            let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            let p = if p > 0 { p as usize } else { 4096 };
            PAGE.store(p, Ordering::Relaxed);
            p
        }
        p => p,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch;

    fn maps_lines() -> usize {
        std::fs::read_to_string("/proc/self/maps")
            .expect("read /proc/self/maps")
            .lines()
            .count()
    }

    #[test]
    fn stack_is_send() {
        fn assert_send<T: Send>() {}
        assert_send::<Stack>();
    }

    #[test]
    fn alloc_free_reuse() {
        // A class no other test uses, so the free list is ours.
        let size = MIN_STACK + 3 * page_size();
        let a = alloc(size).expect("alloc");
        let lo = a.lo();
        free(a);
        let b = alloc(size).expect("alloc again");
        assert_eq!(b.lo(), lo, "the freed stack is reused first");
        let c = alloc(size).expect("alloc a second one");
        assert_ne!(c.lo(), b.lo());
        free(b);
        free(c);
    }

    #[test]
    fn alignment_and_layout() {
        let page = page_size();
        for size in [MIN_STACK, MIN_STACK + 1, 100_000, DEFAULT_STACK] {
            let s = alloc(size).expect("alloc");
            assert_eq!(s.lo() % page, 0);
            assert_eq!(s.top() % 16, 0);
            assert_eq!(s.size() % page, 0);
            assert!(s.size() >= size && s.size() < size + page);
            assert_eq!(s.top(), s.lo() + s.size());
            assert_eq!(s.guard_range(), (s.lo() - guard_size(), s.lo()));
            assert!(s.guard_range().1 - s.guard_range().0 >= GUARD_GAP);
            free(s);
        }
    }

    #[test]
    fn size_classes() {
        let page = page_size();
        assert_eq!(alloc(MIN_STACK - 1).err(), Some(libc::EINVAL));
        assert_eq!(alloc(MAX_STACK + 1).err(), Some(libc::EINVAL));
        assert_eq!(alloc(0).err(), Some(libc::EINVAL));
        let small = alloc(MIN_STACK + 5 * page).expect("small");
        let rounded = alloc(MIN_STACK + 5 * page - 100).expect("rounds up to the same class");
        let big = alloc(4 << 20).expect("4 MiB");
        assert_eq!(small.size(), rounded.size());
        assert_eq!(big.size(), 4 << 20);
        // Same class: consecutive stacks of one slab, a guard apart.
        assert_eq!(rounded.lo(), small.top() + guard_size());
        free(small);
        free(rounded);
        free(big);
        let huge = alloc(MAX_STACK).expect("1 GiB, lazily committed");
        assert_eq!(huge.size(), MAX_STACK);
        free(huge);
    }

    #[test]
    fn top_and_bottom_bytes_are_usable() {
        let s = alloc(DEFAULT_STACK).expect("alloc");
        let (lo, hi) = (s.lo() as *mut u8, (s.top() - 1) as *mut u8);
        // SAFETY: both bytes lie inside the stack we own.
        unsafe {
            lo.write_volatile(0xA5);
            hi.write_volatile(0x5A);
            assert_eq!(lo.read_volatile(), 0xA5);
            assert_eq!(hi.read_volatile(), 0x5A);
        }
        free(s);
    }

    #[test]
    fn freed_stacks_are_released_oldest_first_in_batches() {
        // A class no other test uses, so both lists are ours.
        let size = MIN_STACK + 7 * page_size();
        let stacks: Vec<Stack> = (0..DIRTY_MAX)
            .map(|_| alloc(size).expect("alloc"))
            .collect();
        let los: Vec<usize> = stacks.iter().map(Stack::lo).collect();
        for s in &stacks {
            // SAFETY: the lowest and the highest byte of a stack we own.
            unsafe {
                (s.lo() as *mut u8).write_volatile(0xA5);
                ((s.top() - 1) as *mut u8).write_volatile(0x5A);
            }
        }
        // The DIRTY_MAX-th free releases the RELEASE_BATCH freed first.
        for s in stacks {
            free(s);
        }
        for (i, &lo) in los.iter().enumerate() {
            // SAFETY: the stacks are in the pool, which nobody else allocates from in this
            // class; they stay mapped and readable (released pages read as zeros).
            let (low, high) = unsafe {
                (
                    (lo as *const u8).read_volatile(),
                    ((lo + size - 1) as *const u8).read_volatile(),
                )
            };
            assert_eq!(
                high, 0x5A,
                "stack {i}: the top {KEEP_RESIDENT} bytes are kept"
            );
            if i < RELEASE_BATCH {
                assert_eq!(low, 0, "stack {i}: released");
            } else {
                assert_eq!(low, 0xA5, "stack {i}: still dirty");
            }
        }
        // Reuse: the most recently freed first, then the other dirty ones, then the clean.
        let again: Vec<Stack> = (0..DIRTY_MAX)
            .map(|_| alloc(size).expect("alloc"))
            .collect();
        let mut want: Vec<usize> = los[RELEASE_BATCH..].iter().rev().copied().collect();
        want.extend(los[..RELEASE_BATCH].iter().rev());
        assert_eq!(again.iter().map(Stack::lo).collect::<Vec<_>>(), want);
        for s in again {
            free(s);
        }
    }

    /// No page of the guard can be read: write(2) from it fails with EFAULT instead of
    /// crashing the test.
    #[test]
    fn guard_page_is_inaccessible() {
        let s = alloc(MIN_STACK).expect("alloc");
        let mut fds = [0; 2];
        // SAFETY: a valid array of two fds for pipe(2).
        assert_eq!(unsafe { crate::sys::real::pipe(fds.as_mut_ptr()) }, 0);
        let (g0, g1) = s.guard_range();
        for g in (g0..g1).step_by(page_size()) {
            // SAFETY: write(2) only reads the buffer, and reports EFAULT for unreadable
            // memory.
            let r = unsafe { crate::sys::real::write(fds[1], g as *const libc::c_void, 1) };
            assert_eq!(r, -1, "guard page at {g:#x} (guard {g0:#x}..{g1:#x})");
            assert_eq!(errno(), libc::EFAULT);
        }
        // SAFETY: lo is readable: this one succeeds.
        let r = unsafe { crate::sys::real::write(fds[1], s.lo() as *const libc::c_void, 1) };
        assert_eq!(r, 1);
        // SAFETY: closing the two fds made above.
        unsafe {
            crate::sys::real::close(fds[0]);
            crate::sys::real::close(fds[1]);
        }
        free(s);
    }

    /// (free stacks, reserved, in flight, unguarded) of the class of `size`.
    fn class_counts(size: usize) -> (usize, usize, usize, usize) {
        let pool = lock_pool();
        let c = pool.get(&size).expect("class exists");
        (c.free(), c.reserved, c.inflight, c.nunguarded)
    }

    /// write(2) of one byte from `addr`: whether the kernel could read it.
    fn readable(addr: usize) -> bool {
        let mut fds = [0; 2];
        // SAFETY: a valid array of two fds for pipe(2).
        assert_eq!(unsafe { crate::sys::real::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: write(2) only reads the buffer, and reports EFAULT for unreadable memory.
        let r = unsafe { crate::sys::real::write(fds[1], addr as *const libc::c_void, 1) };
        let e = errno();
        // SAFETY: closing the two fds made above.
        unsafe {
            crate::sys::real::close(fds[0]);
            crate::sys::real::close(fds[1]);
        }
        assert!(
            r == 1 || e == libc::EFAULT,
            "write from {addr:#x}: errno {e}"
        );
        r == 1
    }

    /// Promised stacks stay in the pool for their promise: `alloc` maps past them, and
    /// `alloc_reserved` hands them out, guarded, while the promise count goes back to 0.
    #[test]
    fn reserved_stacks_are_kept_for_their_promise() {
        // A class no other test uses.
        let size = MIN_STACK + 13 * page_size();
        // Freed stacks, ready to be handed out again (the rest of their slab is too).
        let first: Vec<Stack> = (0..4).map(|_| alloc(size).expect("alloc")).collect();
        let first_los: Vec<usize> = first.iter().map(Stack::lo).collect();
        for s in first {
            free(s);
        }
        // Promise every free stack of the class.
        let (nfree, reserved, _, _) = class_counts(size);
        assert_eq!(reserved, 0);
        reserve(size, nfree).expect("reserve");
        // Unpromised allocations never leave fewer free stacks than promises: the first
        // maps a slab rather than take a freed one.
        let mut others = Vec::new();
        for i in 0..8 {
            let s = alloc(size).expect("alloc");
            if i == 0 {
                assert!(!first_los.contains(&s.lo()), "alloc took a promised stack");
            }
            others.push(s);
            let (nfree1, reserved, _, _) = class_counts(size);
            assert_eq!(reserved, nfree);
            assert!(
                nfree1 >= reserved,
                "{nfree1} free stacks for {reserved} promises"
            );
        }
        let kept: Vec<Stack> = (0..nfree).map(|_| alloc_reserved(size)).collect();
        assert_eq!(class_counts(size).1, 0);
        for s in &kept {
            assert_eq!(s.size(), size);
            let (g0, g1) = s.guard_range();
            for g in (g0..g1).step_by(page_size()) {
                assert!(!readable(g), "guard page at {g:#x} of a promised stack");
            }
            assert!(readable(s.lo()) && readable(s.top() - 1));
        }
        let mut los: Vec<usize> = kept.iter().chain(&others).map(Stack::lo).collect();
        los.sort_unstable();
        los.dedup();
        assert_eq!(los.len(), kept.len() + others.len(), "distinct stacks");
        reserve(size, 2).expect("reserve");
        unreserve(size, 2);
        assert_eq!(class_counts(size).1, 0);
        for s in kept.into_iter().chain(others) {
            free(s);
        }
    }

    /// A slab mapped for promises gets its guards when its first stack is handed out, not
    /// before (a goroutine that waits in a queue does not pay for guards).
    #[test]
    fn promised_slabs_get_their_guards_when_first_used() {
        if !guards_are_madvise() {
            return; // the mprotect fallback guards every slab when it is mapped
        }
        let size = MIN_STACK + 17 * page_size();
        reserve(size, 1).expect("reserve");
        let (nfree, _, _, unguarded) = class_counts(size);
        assert_eq!(unguarded, nfree, "the slab is mapped unguarded");
        let base = lock_pool().get(&size).expect("class").unguarded[0].0;
        assert!(readable(base), "no guard yet at the slab's base {base:#x}");
        let s = alloc_reserved(size);
        assert_eq!(class_counts(size).3, 0);
        assert_eq!(s.guard_range().0, base, "the slab's lowest stack first");
        assert!(!readable(base), "guard installed at {base:#x}");
        free(s);
    }

    /// Threads promising, taking, freeing (which releases batches: stacks in flight) and
    /// giving back promises at once: every promise is kept, and the counts end balanced.
    #[test]
    fn reservations_stress() {
        let size = MIN_STACK + 19 * page_size();
        std::thread::scope(|sc| {
            for t in 0..4 {
                sc.spawn(move || {
                    let mut held = Vec::new();
                    for i in 0..3000 {
                        reserve(size, 1 + i % 3).expect("reserve");
                        unreserve(size, i % 3);
                        let s = alloc_reserved(size);
                        // SAFETY: the top byte of a stack we own.
                        unsafe { ((s.top() - 1) as *mut u8).write_volatile(t as u8) };
                        held.push(s);
                        if held.len() > 40 || i % 7 == 0 {
                            for s in held.drain(..) {
                                free(s);
                            }
                        }
                    }
                    for s in held {
                        free(s);
                    }
                });
            }
        });
        let (_, reserved, inflight, _) = class_counts(size);
        assert_eq!((reserved, inflight), (0, 0));
    }

    /// Slabs come out of one arena mapping until it is used up; each next arena is twice
    /// the last (up to ARENA_MAX); an arena the kernel refuses falls back to the slab
    /// alone. A fake `map` records what would have been mapped.
    #[test]
    fn slabs_are_carved_from_arenas() {
        use std::cell::RefCell;
        let maps = RefCell::new(Vec::new());
        let refuse_above = std::cell::Cell::new(usize::MAX);
        let map = |len: usize| {
            if len > refuse_above.get() {
                return Err(libc::ENOMEM);
            }
            let mut m = maps.borrow_mut();
            let base = 1 << 40 | m.len() << 34;
            m.push(len);
            Ok(base)
        };
        let mut a = Arena {
            next: 0,
            end: 0,
            grow: ARENA_FIRST,
        };
        let slab = 20 << 20;
        let b0 = a.carve(slab, map).unwrap();
        let b1 = a.carve(slab, map).unwrap();
        let b2 = a.carve(slab, map).unwrap();
        assert_eq!(
            (b1, b2),
            (b0 + slab, b0 + 2 * slab),
            "consecutive slabs, one arena"
        );
        assert_eq!(*maps.borrow(), [ARENA_FIRST], "one mapping for three slabs");
        // The fourth does not fit in 64 MiB: a new arena, twice as big.
        let b3 = a.carve(slab, map).unwrap();
        assert_eq!(*maps.borrow(), [ARENA_FIRST, 2 * ARENA_FIRST]);
        assert_ne!(b3, b2 + slab);
        // A slab bigger than the next arena gets an arena of its own size.
        a.carve(slab, map).unwrap();
        let big = 3 * ARENA_FIRST + 4096;
        let n = maps.borrow().len();
        a.carve(big, map).unwrap();
        assert_eq!(maps.borrow()[n..], [big.max(a.grow / 2)]);
        // Growth stops at ARENA_MAX.
        for _ in 0..16 {
            let left = a.end - a.next;
            a.carve(left + 1, map).unwrap();
        }
        assert_eq!(a.grow, ARENA_MAX);
        assert!(maps.borrow().iter().all(|&l| l <= ARENA_MAX));
        // Use the arena up (no new mapping), then have the kernel refuse anything bigger
        // than one slab: the next slab is mapped alone, a bigger one is refused.
        let left = a.end - a.next;
        let n = maps.borrow().len();
        a.carve(left, map).unwrap();
        assert_eq!(maps.borrow().len(), n, "the arena's last bytes: no mapping");
        refuse_above.set(slab);
        assert_eq!(a.carve(2 * slab, map), Err(libc::ENOMEM));
        let b = a.carve(slab, map).unwrap();
        assert_eq!(
            *maps.borrow().last().unwrap(),
            slab,
            "the slab mapped alone"
        );
        assert_eq!((a.next, a.end), (b + slab, b + slab));
    }

    #[test]
    fn many_live_stacks_keep_maps_small() {
        // mprotect'ed guards cost two VMAs a stack, and the default vm.max_map_count of
        // 65,530 allows about 32,000 (the module doc): those kernels get fewer stacks.
        let n: usize = if guards_are_madvise() {
            100_000
        } else {
            20_000
        };
        let before = maps_lines();
        let stacks: Vec<Stack> = (0..n).map(|_| alloc(MIN_STACK).expect("alloc")).collect();
        let after = maps_lines();
        let grown = after.saturating_sub(before);
        if guards_are_madvise() {
            // 100,000 / 64 = 1,563 slabs, merged by the kernel when adjacent; far from the
            // 200,000 VMAs of mprotect'ed guards.
            assert!(grown < 2_000, "/proc/self/maps grew by {grown} lines");
        } else {
            eprintln!("mprotect guards: /proc/self/maps grew by {grown} lines");
        }
        let mut los: Vec<usize> = stacks.iter().map(Stack::lo).collect();
        los.sort_unstable();
        los.dedup();
        assert_eq!(los.len(), n, "distinct stacks");
        for s in stacks {
            free(s);
        }
    }

    #[test]
    fn guards_use_madvise_on_this_kernel() {
        // Linux has MADV_GUARD_INSTALL from 6.13 on, and process_madvise(PIDFD_SELF) for
        // any advice from 6.15 on.
        let mut u: libc::utsname = unsafe_zeroed_utsname();
        // SAFETY: a valid utsname buffer.
        assert_eq!(unsafe { libc::uname(&mut u) }, 0);
        // SAFETY: uname NUL-terminates release.
        let rel = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }.to_string_lossy();
        let mut it = rel
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|x| x.parse::<u32>().ok());
        let (maj, min) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
        if (maj, min) >= (6, 13) {
            assert!(guards_are_madvise(), "kernel {rel} has MADV_GUARD_INSTALL");
        }
        if (maj, min) >= (6, 15) {
            free(alloc(MIN_STACK + 11 * page_size()).expect("alloc"));
            assert_eq!(
                BATCH_MODE.load(Ordering::Relaxed),
                BATCH_YES,
                "kernel {rel} has process_madvise(PIDFD_SELF) for any advice"
            );
        }
    }

    /// `map_slab` leaves out `MADV_NOHUGEPAGE` once guards are `MADV_GUARD_INSTALL`
    /// markers, trusting the kernel (6.7 and later) to keep huge pages off a `MAP_STACK`
    /// mapping: the slab's VMA must say so (`nh` in smaps' VmFlags).
    #[test]
    fn map_stack_is_nohugepage() {
        free(alloc(DEFAULT_STACK).expect("alloc"));
        if !guards_are_madvise() {
            return;
        }
        let base = map_slab(2, DEFAULT_STACK, true).expect("map_slab");
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let mut in_slab = false;
        let mut flags = None;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((lo, hi)) = range.split_once('-')
                && let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                in_slab = lo <= base && base < hi;
            } else if in_slab && let Some(f) = line.strip_prefix("VmFlags:") {
                flags = Some(f.to_string());
            }
        }
        // SAFETY: the slab mapped above, none of whose stacks was handed out.
        unsafe {
            libc::munmap(
                base as *mut libc::c_void,
                2 * (DEFAULT_STACK + guard_size()),
            )
        };
        let flags = flags.expect("the slab's VMA in smaps");
        assert!(
            flags.split_whitespace().any(|f| f == "nh"),
            "a MAP_STACK slab may get huge pages here (VmFlags:{flags})"
        );
    }

    /// The stacks' arenas and the threads' signal stacks are named in /proc/self/maps where
    /// the kernel names anonymous mappings (probed on a scratch page).
    #[test]
    fn stack_mappings_are_named() {
        let page = page_size();
        // SAFETY: a fresh private anonymous page, named and unmapped here only.
        let named = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            let r = libc::prctl(
                libc::PR_SET_VMA,
                libc::PR_SET_VMA_ANON_NAME as libc::c_ulong,
                p as libc::c_ulong,
                page as libc::c_ulong,
                c"probe".as_ptr() as libc::c_ulong,
            );
            libc::munmap(p, page);
            r == 0
        };
        if !named {
            eprintln!("stack_mappings_are_named: this kernel names no anonymous mapping");
            return;
        }
        free(alloc(DEFAULT_STACK).expect("alloc"));
        ensure_altstack();
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        for name in ["[anon:gmp goroutine stacks]", "[anon:gmp signal stack]"] {
            assert!(
                maps.lines().any(|l| l.ends_with(name)),
                "no {name} mapping:\n{maps}"
            );
        }
    }

    fn unsafe_zeroed_utsname() -> libc::utsname {
        // SAFETY: utsname is arrays of c_char; all zeroes is valid.
        unsafe { std::mem::zeroed() }
    }

    #[test]
    fn altstack_is_installed_and_big_enough() {
        std::thread::spawn(|| {
            ensure_altstack();
            let mut cur = libc::stack_t {
                ss_sp: std::ptr::null_mut(),
                ss_flags: 0,
                ss_size: 0,
            };
            // SAFETY: queries into a valid stack_t.
            assert_eq!(unsafe { libc::sigaltstack(std::ptr::null(), &mut cur) }, 0);
            assert_eq!(cur.ss_flags & libc::SS_DISABLE, 0);
            assert!(cur.ss_size >= altstack_size());
            let sp = cur.ss_sp;
            ensure_altstack(); // idempotent
            // SAFETY: as above.
            assert_eq!(unsafe { libc::sigaltstack(std::ptr::null(), &mut cur) }, 0);
            assert_eq!(cur.ss_sp, sp);
        })
        .join()
        .expect("altstack thread");
    }

    /// The env var that makes `overflow_child` overflow a goroutine stack for real.
    const CHILD_ENV: &str = "GMP_TEST_STACK_OVERFLOW_CHILD";

    /// `lo` of the stack `overflow_child` overflows, for its hook.
    static CHILD_LO: AtomicUsize = AtomicUsize::new(0);

    fn child_hook() -> Option<(u64, usize)> {
        Some((42, CHILD_LO.load(Ordering::Relaxed)))
    }

    #[allow(unconditional_recursion)]
    #[inline(never)]
    fn recurse(depth: usize) -> usize {
        let frame = std::hint::black_box([depth as u8; 256]);
        recurse(depth + 1) + frame[depth % 256] as usize
    }

    unsafe extern "C" fn overflow_entry(_arg: usize) -> ! {
        let n = recurse(0);
        panic!("recursion returned {n}");
    }

    /// Does nothing unless run by `stack_overflow_is_reported` as its child process.
    #[test]
    fn overflow_child() {
        if std::env::var_os(CHILD_ENV).is_none() {
            return;
        }
        ensure_altstack();
        let s = alloc(MIN_STACK).expect("alloc");
        CHILD_LO.store(s.lo(), Ordering::Relaxed);
        install_overflow_handler(child_hook);
        let mut main_sp = 0usize;
        // SAFETY: the stack is ours; the coroutine never switches back (it overflows).
        unsafe {
            let sp = arch::init_stack(s.top(), overflow_entry);
            arch::switch(&mut main_sp, sp, 0);
        }
        unreachable!("the overflow should have aborted the process");
    }

    #[test]
    fn stack_overflow_is_reported() {
        use std::os::unix::process::ExitStatusExt;
        let exe = std::env::current_exe().expect("current_exe");
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "stack::tests::overflow_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, "1")
            .output()
            .expect("run the child");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGABRT),
            "child: {:?}\n{stderr}",
            out.status
        );
        assert!(
            stderr.contains("gmp: goroutine 42: stack overflow\n"),
            "child stderr: {stderr}"
        );
    }
}
