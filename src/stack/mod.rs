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
//! - this pool ([`trim`]): by the same low-water marks, unused `dirty` stacks are released
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

/// Size of the alternate signal stacks made by [`ensure_altstack`], guard page excluded.
/// The kernel's AT_MINSIGSTKSZ (`getauxval`) is close to 12 KB for the signal frame alone
/// on a CPU with AVX-512 state; the overflow hook and the preemption handler run on it too.
const ALTSTACK_SIZE: usize = 64 * 1024;

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

/// How guard pages are made. Decided once, by the first guard installed.
const GUARD_UNKNOWN: u8 = 0;
const GUARD_MADVISE: u8 = 1;
const GUARD_MPROTECT: u8 = 2;
static GUARD_MODE: AtomicU8 = AtomicU8::new(GUARD_UNKNOWN);

/// Makes `[addr, addr + len)` (whole pages) a guard, with `MADV_GUARD_INSTALL` when the
/// kernel has it and `mprotect(PROT_NONE)` otherwise. Err(errno) on failure.
///
/// # Safety
///
/// `[addr, addr + len)` must be pages of an anonymous private mapping owned by the
/// caller, holding nothing anyone will read.
unsafe fn install_guard(addr: usize, len: usize) -> Result<(), i32> {
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
fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Whether `process_madvise(PIDFD_SELF, ..)` accepts our advice. Decided by the first call.
const BATCH_UNKNOWN: u8 = 0;
const BATCH_YES: u8 = 1;
const BATCH_NO: u8 = 2;
static BATCH_MODE: AtomicU8 = AtomicU8::new(BATCH_UNKNOWN);

/// Applies `advice` to every range of `ranges` with one `process_madvise(2)` call on the
/// calling process. Returns false, having done all, part or none of it, when the kernel
/// refused or stopped early; the caller then falls back to one `madvise` per range (every
/// advice used here is idempotent, so repeating the part already done is harmless).
///
/// # Safety
///
/// Each range must be page-aligned memory of a private anonymous mapping owned by the
/// caller, for which `advice` is sound (as for `madvise`).
unsafe fn madvise_batch(ranges: &[libc::iovec], advice: libc::c_int) -> bool {
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
fn iov(addr: usize, len: usize) -> libc::iovec {
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

/// Free stacks of one size class: their `lo` addresses, and how many of them are promised.
struct Class {
    /// Freed and not released yet, oldest at the front. Reused newest first (LIFO: its top
    /// page is the most likely to be in cache); released oldest first.
    dirty: VecDeque<usize>,
    /// Released, or never used: everything below the top [`KEEP_RESIDENT`] bytes reads as
    /// zeros. Taken when `dirty` is empty.
    clean: Vec<usize>,
    /// Released entirely by [`trim`]: nothing resident. Taken when `clean` is empty too.
    bare: Vec<usize>,
    /// The fewest stacks `dirty` and `clean` held since the last [`trim`]: that many at the
    /// bottom of each went unused for the whole period (see "Trimming").
    dirty_low: usize,
    clean_low: usize,
    /// Slabs mapped by [`reserve`] whose guards are not installed yet, as (base, stacks):
    /// a slab's guards go in when its first stack is handed out (see "Reservations").
    unguarded: Vec<(usize, usize)>,
    /// Stacks in the `unguarded` slabs.
    nunguarded: usize,
    /// Free stacks that a thread took off the lists to work on without the lock (a release
    /// batch, a slab having its guards installed) and will put back on `clean`.
    inflight: usize,
    /// Free stacks promised by [`reserve`] and not yet taken by [`alloc_reserved`] or given
    /// back by [`unreserve`]. Never more than [`Class::free`]: `alloc` leaves them alone.
    reserved: usize,
}

impl Class {
    const fn new() -> Class {
        Class {
            dirty: VecDeque::new(),
            clean: Vec::new(),
            bare: Vec::new(),
            dirty_low: 0,
            clean_low: 0,
            unguarded: Vec::new(),
            nunguarded: 0,
            inflight: 0,
            reserved: 0,
        }
    }

    /// Free stacks of the class, wherever they are.
    fn free(&self) -> usize {
        self.dirty.len() + self.clean.len() + self.bare.len() + self.nunguarded + self.inflight
    }

    /// A free stack that is ready to run on (guarded; not in flight), newest first, warmest
    /// list first.
    fn pop_ready(&mut self) -> Option<usize> {
        if let Some(lo) = self.dirty.pop_back() {
            self.dirty_low = self.dirty_low.min(self.dirty.len());
            return Some(lo);
        }
        if let Some(lo) = self.clean.pop() {
            self.clean_low = self.clean_low.min(self.clean.len());
            return Some(lo);
        }
        self.bare.pop()
    }

    /// Puts the stacks of a slab of `n` (base `base`, stride `stride`) on the clean list but
    /// the lowest, which is returned: consecutive allocations walk up the slab.
    fn add_slab(&mut self, base: usize, n: usize, stride: usize) -> usize {
        let guard = guard_size();
        self.clean.reserve(n - 1);
        self.clean
            .extend((1..n).rev().map(|i| base + i * stride + guard));
        base + guard
    }
}

/// Size class (usable bytes) -> free stacks. Slow path only (see the module doc).
static POOL: Mutex<BTreeMap<usize, Class>> = Mutex::new(BTreeMap::new());

/// Rounds `size` up to whole pages and returns a stack of that usable size, from the free
/// list of its size class, or from a new slab when that list is empty (many stacks per
/// slab for small sizes, fewer for big ones, one for the biggest). Stacks promised by
/// [`reserve`] are not taken.
///
/// Thread-safe. Err(EINVAL) for `size` outside [`MIN_STACK`, `MAX_STACK`], Err(errno) (e.g.
/// ENOMEM) if the slab cannot be mapped or guarded.
pub fn alloc(size: usize) -> Result<Stack, i32> {
    let size = class_size(size)?;
    if let Some(s) = alloc_free(size) {
        return Ok(s);
    }
    // Map a slab without the pool lock: mapping it and installing its guards takes tens of
    // microseconds, during which every other M's stack allocation or free would wait on
    // the mutex in the kernel (skynet at GOMAXPROCS=2: a third of the futex calls). Two Ms
    // that find the class empty at once each map one; both slabs are used.
    let (n, stride) = slab_shape(size);
    let slab = map_slab(n, size, true)?;
    let lo = lock_pool()
        .entry(size)
        .or_insert_with(Class::new)
        .add_slab(slab, n, stride);
    Ok(Stack { lo, size })
}

/// A free stack of `size` bytes (rounded up to whole pages) if its class has one beyond its
/// promises, without mapping a slab: None otherwise, or for a size out of range. [`alloc`]'s
/// first try, and a foreign spawn's before it takes a promise ([`reserve`]).
pub fn alloc_free(size: usize) -> Option<Stack> {
    let size = class_size(size).ok()?;
    let mut pool = lock_pool();
    let class = pool.get_mut(&size)?;
    if class.free() > class.reserved {
        return class.pop_ready().map(|lo| Stack { lo, size });
    }
    None
}

/// `size` rounded up to whole pages, or Err(EINVAL) outside [`MIN_STACK`, `MAX_STACK`].
fn class_size(size: usize) -> Result<usize, i32> {
    if !(MIN_STACK..=MAX_STACK).contains(&size) {
        return Err(libc::EINVAL);
    }
    Ok(size.next_multiple_of(page_size()))
}

/// How many stacks of usable size `size` (whole pages) a slab holds, and their stride.
fn slab_shape(size: usize) -> (usize, usize) {
    let stride = size + guard_size();
    ((SLAB_BYTES / stride).clamp(1, MAX_PER_SLAB), stride)
}

/// Promises `n` stacks of `size` bytes (rounded up to whole pages) to goroutines that will
/// take them later with [`alloc_reserved`] (or give the promise back with [`unreserve`]),
/// mapping slabs until the class's free stacks cover every promise. Where the kernel has
/// `MADV_GUARD_INSTALL`, those slabs get their guards only when their first stack is
/// handed out: a promise costs address space, not memory or page-table work (see
/// "Reservations" in the module doc).
///
/// Err(EINVAL) for a size out of range, Err(errno) (e.g. ENOMEM) if a slab cannot be
/// mapped; nothing is promised then.
pub fn reserve(size: usize, n: usize) -> Result<(), i32> {
    let size = class_size(size)?;
    loop {
        {
            let mut pool = lock_pool();
            let class = pool.entry(size).or_insert_with(Class::new);
            if class.free() >= class.reserved + n {
                class.reserved += n;
                return Ok(());
            }
        }
        // Not enough: map a slab (without the lock, as `alloc` does) and look again.
        let (per, stride) = slab_shape(size);
        let lazy = guards_are_madvise();
        let base = map_slab(per, size, !lazy)?;
        let mut pool = lock_pool();
        let class = pool.entry(size).or_insert_with(Class::new);
        if lazy {
            class.unguarded.push((base, per));
            class.nunguarded += per;
        } else {
            let lo = class.add_slab(base, per, stride);
            class.clean.push(lo);
        }
    }
}

/// Gives back `n` promises of stacks of `size` bytes made by [`reserve`].
pub fn unreserve(size: usize, n: usize) {
    let Ok(size) = class_size(size) else {
        crate::sys::throw("stack::unreserve: bad size");
    };
    let mut pool = lock_pool();
    let class = pool.entry(size).or_insert_with(Class::new);
    if class.reserved < n {
        crate::sys::throw("stack::unreserve: more than was reserved");
    }
    class.reserved -= n;
}

/// Takes a stack promised by [`reserve`]: always succeeds. The first stack handed out of
/// a slab mapped by `reserve` installs that slab's guards; the kernel refusing (out of
/// memory for page tables) aborts with a `gmp:` message, since the goroutine waiting for
/// the stack was promised one.
pub fn alloc_reserved(size: usize) -> Stack {
    let Ok(size) = class_size(size) else {
        crate::sys::throw("stack::alloc_reserved: bad size");
    };
    loop {
        let mut pool = lock_pool();
        let class = pool.entry(size).or_insert_with(Class::new);
        if class.reserved == 0 {
            crate::sys::throw("stack::alloc_reserved: nothing reserved");
        }
        if let Some(lo) = class.pop_ready() {
            class.reserved -= 1;
            return Stack { lo, size };
        }
        if let Some((base, n)) = class.unguarded.pop() {
            // Guard it without the lock; its stacks stay counted as free meanwhile.
            class.nunguarded -= n;
            class.inflight += n;
            drop(pool);
            let (_, stride) = slab_shape(size);
            let mut tries = 0;
            while let Err(e) = install_guards(base, n, stride) {
                tries += 1;
                if !matches!(e, libc::EINTR | libc::EAGAIN) || tries > 100 {
                    crate::sys::throw("cannot install the guard pages of a stack slab");
                }
            }
            let mut pool = lock_pool();
            let class = pool.entry(size).or_insert_with(Class::new);
            class.inflight -= n;
            class.reserved -= 1;
            return Stack {
                lo: class.add_slab(base, n, stride),
                size,
            };
        }
        if class.inflight == 0 {
            crate::sys::throw("stack::alloc_reserved: the reserved stacks are missing");
        }
        // Every free stack is in another thread's hands for a moment (a release batch, a
        // slab being guarded); they come back to `clean`.
        drop(pool);
        crate::sys::osyield();
    }
}

/// Clean stacks per class whose top pages [`trim`] leaves resident however long unused:
/// what a burst of this many goroutines starts on without faults.
const TRIM_CLEAN_FLOOR: usize = 64;

/// Trims the pool (sysmon calls it once a period; see "Trimming"): in each class, the
/// dirty stacks that no allocation took during the whole period since the last call
/// release all their pages, and the clean ones (beyond [`TRIM_CLEAN_FLOOR`]) their top
/// pages too; all of them go to `bare`. Returns whether some class still holds stacks that
/// a later call could release (so sysmon keeps calling while it idles).
pub fn trim() -> bool {
    let mut work: Vec<(usize, Vec<usize>, Vec<usize>)> = Vec::new();
    let mut more = false;
    {
        let mut pool = lock_pool();
        for (&size, class) in pool.iter_mut() {
            let nd = class.dirty_low.min(class.dirty.len());
            let nc = class
                .clean_low
                .min(class.clean.len())
                .saturating_sub(TRIM_CLEAN_FLOOR);
            if nd + nc > 0 {
                let dirty: Vec<usize> = class.dirty.drain(..nd).collect();
                let clean: Vec<usize> = class.clean.drain(..nc).collect();
                class.inflight += nd + nc;
                work.push((size, dirty, clean));
            }
            class.dirty_low = class.dirty.len();
            class.clean_low = class.clean.len();
            more |= !class.dirty.is_empty() || class.clean.len() > TRIM_CLEAN_FLOOR;
        }
    }
    for (size, dirty, clean) in work {
        release_ranges(dirty.iter().map(|&lo| iov(lo, size)));
        let keep = KEEP_RESIDENT.min(size);
        release_ranges(clean.iter().map(|&lo| iov(lo + size - keep, keep)));
        let mut pool = lock_pool();
        let class = pool.entry(size).or_insert_with(Class::new);
        class.inflight -= dirty.len() + clean.len();
        class.bare.extend_from_slice(&dirty);
        class.bare.extend_from_slice(&clean);
    }
    more
}

/// Gives stacks back to the pool with all their pages released (they go to `bare`): for
/// the stacks of dead Gs that the scheduler's trim takes out of its caches.
pub fn free_released(stacks: Vec<Stack>) {
    release_ranges(stacks.iter().map(|s| iov(s.lo, s.size)));
    let mut pool = lock_pool();
    for s in stacks {
        pool.entry(s.size)
            .or_insert_with(Class::new)
            .bare
            .push(s.lo);
    }
}

/// `MADV_DONTNEED` over every range of `ranges`, [`RELEASE_BATCH`] ranges per
/// `process_madvise` call (one `madvise` each where that is refused). Every range must lie
/// in a free stack that only the caller holds.
fn release_ranges(ranges: impl Iterator<Item = libc::iovec>) {
    let mut batch = [iov(0, 0); RELEASE_BATCH];
    let mut n = 0;
    let flush = |b: &[libc::iovec]| {
        // SAFETY: each range lies in a free stack only the caller holds, on which nothing
        // runs any more; DONTNEED on private anonymous memory only drops its contents (the
        // guard markers below the stacks are outside the ranges and survive it anyway).
        if unsafe { madvise_batch(b, libc::MADV_DONTNEED) } {
            return;
        }
        for r in b {
            // SAFETY: as above.
            unsafe { libc::madvise(r.iov_base, r.iov_len, libc::MADV_DONTNEED) };
        }
    };
    for r in ranges {
        batch[n] = r;
        n += 1;
        if n == RELEASE_BATCH {
            flush(&batch);
            n = 0;
        }
    }
    flush(&batch[..n]);
}

/// Locks the pool. A poisoned lock only means another thread panicked holding it; the
/// lists are always consistent (pushes and pops), so keep going.
fn lock_pool() -> MutexGuard<'static, BTreeMap<usize, Class>> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Maps a slab of `n` stacks of `size` bytes, each above a guard gap, the guards
/// installed in one call where the kernel allows it (see "Guard pages" in the module doc)
/// if `guarded`, else left to [`install_guards`]. Returns its base.
fn map_slab(n: usize, size: usize, guarded: bool) -> Result<usize, i32> {
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

/// The address space slabs are carved from (see "Arenas" in the module doc): `[next, end)`
/// is still free; `grow` is the size of the next arena to map.
struct Arena {
    next: usize,
    end: usize,
    grow: usize,
}

static ARENA: Mutex<Arena> = Mutex::new(Arena {
    next: 0,
    end: 0,
    grow: ARENA_FIRST,
});

/// Size of the first arena; each next one is twice the last, up to [`ARENA_MAX`].
const ARENA_FIRST: usize = 64 << 20;
/// Largest arena mapped ahead of need (address space only: nothing is committed).
const ARENA_MAX: usize = 4 << 30;

/// Takes `len` bytes (whole pages) of fresh stack address space: from the current arena,
/// or from a new one, mapped `MAP_NORESERVE | MAP_STACK`, when the arena has less left.
/// Err(errno) if no arena of even `len` bytes can be mapped.
fn carve(len: usize) -> Result<usize, i32> {
    ARENA
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .carve(len, map_arena)
}

impl Arena {
    /// [`carve`] from this arena, mapping new ones with `map`.
    fn carve(
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

/// Maps an arena of `len` bytes of stack address space.
fn map_arena(len: usize) -> Result<usize, i32> {
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

/// Installs the guards of the `n` stacks of the slab at `base` (stride `stride`): one
/// `process_madvise` call where the kernel allows it, else one call per guard.
fn install_guards(base: usize, n: usize, stride: usize) -> Result<(), i32> {
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

/// `VALGRIND_STACK_REGISTER(lo, hi)`, paid once per stack when its slab is mapped.
fn valgrind_stack_register(lo: usize, hi: usize) {
    const VG_USERREQ_STACK_REGISTER: usize = 0x1501;
    valgrind_request(VG_USERREQ_STACK_REGISTER, lo, hi);
}

/// `RUNNING_ON_VALGRIND`: whether the process runs under valgrind (asynchronous
/// preemption stays off there: its handler writes below the interrupted stack pointer,
/// which valgrind reports as invalid writes).
pub fn running_on_valgrind() -> bool {
    const VG_USERREQ_RUNNING_ON_VALGRIND: usize = 0x1001;
    valgrind_request(VG_USERREQ_RUNNING_ON_VALGRIND, 0, 0) != 0
}

/// A valgrind client request: a sequence of rotations of rdi by 128 bits in all (no
/// effect) and `xchg rbx, rbx` that valgrind recognises; natively a few cycles, returning 0.
#[cfg(target_arch = "x86_64")]
fn valgrind_request(req: usize, a1: usize, a2: usize) -> usize {
    let args: [usize; 6] = [req, a1, a2, 0, 0, 0];
    let mut result: usize = 0;
    // SAFETY: the rotations leave rdi as it was and `xchg rbx, rbx` changes nothing;
    // valgrind reads `args` (rax) and writes the result into rdx.
    unsafe {
        core::arch::asm!(
            "rol rdi, 3",
            "rol rdi, 13",
            "rol rdi, 61",
            "rol rdi, 51",
            "xchg rbx, rbx",
            in("rax") args.as_ptr(),
            inout("rdx") result,
            out("rdi") _,
            options(nostack),
        );
    }
    result
}

#[cfg(not(target_arch = "x86_64"))]
fn valgrind_request(_req: usize, _a1: usize, _a2: usize) -> usize {
    0
}

/// Returns a stack to the pool of its size class. The memory stays mapped; it is reused
/// as it is, or, once it is among the oldest of [`DIRTY_MAX`] freed stacks of its class,
/// all but its top [`KEEP_RESIDENT`] bytes are released with `MADV_DONTNEED` (see the
/// module doc), so they read as zeros when the stack is reused.
///
/// The caller must no longer run on it: the goroutine that used it is dead or will never be
/// resumed.
pub fn free(s: Stack) {
    let mut pool = lock_pool();
    let class = pool.entry(s.size).or_insert_with(Class::new);
    class.dirty.push_back(s.lo);
    if class.dirty.len() < DIRTY_MAX {
        return;
    }
    let mut batch = [0usize; RELEASE_BATCH];
    take_oldest_dirty(class, &mut batch);
    drop(pool);
    release_batch(&batch, s.size);
}

/// Moves the oldest [`RELEASE_BATCH`] dirty stacks of `class` into `batch`; they are in no
/// list afterwards (but counted in flight), so the caller owns them until
/// [`release_batch`] puts them back. `class.dirty` must hold at least that many.
fn take_oldest_dirty(class: &mut Class, batch: &mut [usize; RELEASE_BATCH]) {
    for (b, lo) in batch.iter_mut().zip(class.dirty.drain(..RELEASE_BATCH)) {
        *b = lo;
    }
    // They came off the bottom, where the stacks unused since the last trim are.
    class.dirty_low = class.dirty_low.saturating_sub(RELEASE_BATCH);
    class.inflight += RELEASE_BATCH;
}

/// Releases the stacks of `batch` (usable size `size`, taken by [`take_oldest_dirty`]) and
/// puts them on their class's clean list. Called without the pool lock: the syscall takes
/// microseconds for a batch of shallow stacks, much more for deep ones.
fn release_batch(batch: &[usize; RELEASE_BATCH], size: usize) {
    if size > KEEP_RESIDENT {
        release(batch, size);
    }
    let mut pool = lock_pool();
    let class = pool.entry(size).or_insert_with(Class::new);
    class.clean.extend_from_slice(batch);
    class.inflight -= RELEASE_BATCH;
}

/// Releases the pages of the stacks at `los` (usable size `size`) except the top
/// [`KEEP_RESIDENT`] bytes of each: one `process_madvise` call, or one `madvise` per stack.
fn release(los: &[usize], size: usize) {
    release_ranges(los.iter().map(|&lo| iov(lo, size - KEEP_RESIDENT)));
}

/// The hook asked about every SIGSEGV/SIGBUS: an [`OverflowHook`] stored as usize
/// (0 = none yet). Release/acquire: the handler sees a fully published pointer.
static HOOK: AtomicUsize = AtomicUsize::new(0);

/// The handlers installed before ours, for SIGSEGV and SIGBUS, to chain to. Set once before
/// our handler is installed; only read afterwards (OnceLock::get is a single atomic load,
/// async-signal-safe).
static PREVIOUS: OnceLock<[libc::sigaction; 2]> = OnceLock::new();

/// The overflow handler's question to the scheduler: the id of the goroutine running on
/// this thread and the `lo` of its stack, or None when no goroutine runs here.
pub type OverflowHook = fn() -> Option<(u64, usize)>;

/// Installs (once, thread-safe) a SIGSEGV/SIGBUS handler with SA_ONSTACK | SA_SIGINFO that
/// calls `hook()`. If it names a goroutine whose stack the fault overflowed (the fault
/// address and the interrupted stack pointer, by [`Stack::overflowed`]), the handler writes
/// "gmp: goroutine {goid}: stack overflow\n" to fd 2 and aborts; otherwise it chains to the
/// handler installed before (calls it if it was a function, else restores SIG_DFL and
/// returns so that the fault re-raises with the default action).
///
/// A later call replaces the hook; the signal handler itself is installed once. The hook
/// runs in a signal handler, on the thread's alternate stack (see [`ensure_altstack`]): it
/// must be async-signal-safe (no locks, no allocation).
pub fn install_overflow_handler(hook: OverflowHook) {
    HOOK.store(hook as usize, Ordering::Release);
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let mut previous = [empty_sigaction(), empty_sigaction()];
        for (sig, old) in [libc::SIGSEGV, libc::SIGBUS]
            .into_iter()
            .zip(previous.iter_mut())
        {
            // SAFETY: queries the current action into a valid sigaction.
            unsafe { libc::sigaction(sig, std::ptr::null(), old) };
        }
        // Only this closure sets PREVIOUS, and it runs once.
        let _ = PREVIOUS.set(previous);
        let mut act = empty_sigaction();
        act.sa_sigaction = on_fault as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: sa_mask is a valid sigset_t owned by `act`.
        unsafe { libc::sigemptyset(&mut act.sa_mask) };
        for sig in [libc::SIGSEGV, libc::SIGBUS] {
            // SAFETY: installs a valid handler; `on_fault` is async-signal-safe.
            unsafe { libc::sigaction(sig, &act, std::ptr::null_mut()) };
        }
    });
}

fn empty_sigaction() -> libc::sigaction {
    // SAFETY: sigaction is plain old data for which all-zeroes is valid (SIG_DFL, no flags,
    // empty mask).
    unsafe { std::mem::zeroed() }
}

/// The SIGSEGV/SIGBUS handler (see [`install_overflow_handler`]).
extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let hook = HOOK.load(Ordering::Acquire);
    if hook != 0 {
        // SAFETY: HOOK only ever holds an `OverflowHook` stored by install_overflow_handler.
        let hook: OverflowHook = unsafe { std::mem::transmute(hook) };
        if let Some((goid, lo)) = hook()
            // SAFETY: the kernel passes a valid ucontext for an SA_SIGINFO handler.
            && overflowed(lo, addr, unsafe { interrupted_sp(ctx) })
        {
            report_overflow(goid);
        }
    }
    let Some(previous) = PREVIOUS.get() else {
        return;
    };
    let old = &previous[if sig == libc::SIGSEGV { 0 } else { 1 }];
    let h = old.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // Re-executing the faulting instruction raises the signal again, now with the
        // default action (a core dump).
        let dfl = empty_sigaction();
        // SAFETY: installs SIG_DFL; sigaction is async-signal-safe.
        unsafe { libc::sigaction(sig, &dfl, std::ptr::null_mut()) };
    } else if old.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous owner installed this as an SA_SIGINFO handler.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the previous owner installed this as a plain handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

/// The stack pointer of the code the signal interrupted.
///
/// # Safety
/// `ctx` is the `ucontext_t` the kernel passed to an SA_SIGINFO handler.
unsafe fn interrupted_sp(ctx: *mut libc::c_void) -> usize {
    let uc = ctx as *const libc::ucontext_t;
    // SAFETY: caller contract.
    #[cfg(target_arch = "x86_64")]
    let sp = unsafe { (*uc).uc_mcontext.gregs[libc::REG_RSP as usize] as usize };
    // SAFETY: caller contract.
    #[cfg(target_arch = "aarch64")]
    let sp = unsafe { (*uc).uc_mcontext.sp as usize };
    sp
}

/// Writes "gmp: goroutine {goid}: stack overflow\n" to fd 2 and aborts. Async-signal-safe:
/// the message is formatted by hand into a stack buffer, written with write(2).
fn report_overflow(goid: u64) -> ! {
    const HEAD: &[u8] = b"gmp: goroutine ";
    const TAIL: &[u8] = b": stack overflow\n";
    let mut buf = [0u8; HEAD.len() + 20 + TAIL.len()]; // u64::MAX has 20 digits
    let mut len = HEAD.len();
    buf[..len].copy_from_slice(HEAD);
    len += format_u64(goid, &mut buf[len..]);
    buf[len..len + TAIL.len()].copy_from_slice(TAIL);
    len += TAIL.len();
    // SAFETY: write(2) from a valid buffer of `len` bytes, then abort(3); both
    // async-signal-safe.
    unsafe {
        crate::sys::real::write(2, buf.as_ptr().cast(), len);
        libc::abort()
    }
}

/// Writes the decimal digits of `v` at the start of `out` (at least 20 bytes); returns how
/// many.
fn format_u64(mut v: u64, out: &mut [u8]) -> usize {
    let mut digits = [0u8; 20];
    let mut n = 0;
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for (i, d) in digits[..n].iter().rev().enumerate() {
        out[i] = *d;
    }
    n
}

/// Gives the calling thread an alternate signal stack of [`ALTSTACK_SIZE`] bytes (mmap'd,
/// above its own guard page) unless it already has one at least that big. Called by every
/// scheduler thread (M) at start; the overflow handler and the preemption signal run on it.
///
/// A smaller existing one (Rust's std gives its threads one of about 12 KiB on x86_64
/// Linux) is
/// replaced; its owner still frees its own memory. Ours is unmapped when the thread exits.
pub fn ensure_altstack() {
    let mut cur: libc::stack_t = libc::stack_t {
        ss_sp: std::ptr::null_mut(),
        ss_flags: 0,
        ss_size: 0,
    };
    // SAFETY: queries the current alternate stack into a valid stack_t.
    if unsafe { libc::sigaltstack(std::ptr::null(), &mut cur) } != 0 {
        return;
    }
    if cur.ss_flags & libc::SS_DISABLE == 0 && cur.ss_size >= ALTSTACK_SIZE {
        return;
    }
    if cur.ss_flags & libc::SS_ONSTACK != 0 {
        return; // running on it (called from a handler): cannot replace it now
    }
    let page = page_size();
    let len = ALTSTACK_SIZE + page;
    // SAFETY: a fresh private anonymous mapping chosen by the kernel.
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
        return;
    }
    // SAFETY: the lowest page of the mapping just made, holding nothing.
    if unsafe { install_guard(base as usize, page) }.is_err() {
        // SAFETY: unmaps the mapping made above, not yet in use.
        unsafe { libc::munmap(base, len) };
        return;
    }
    let new = libc::stack_t {
        ss_sp: (base as usize + page) as *mut libc::c_void,
        ss_flags: 0,
        ss_size: ALTSTACK_SIZE,
    };
    // SAFETY: `new` describes the mapped, writable range above the guard page.
    if unsafe { libc::sigaltstack(&new, std::ptr::null_mut()) } != 0 {
        // SAFETY: not installed, so not in use: unmap it.
        unsafe { libc::munmap(base, len) };
        return;
    }
    ALTSTACK_OWNER.with(|o| o.set(base as usize, len));
}

/// Unmaps the thread's alternate stack made by [`ensure_altstack`] when the thread exits.
/// (A destructor only: `thread_local!` is fine here because nothing reads it across a
/// goroutine switch.)
struct AltstackOwner {
    mapping: std::cell::Cell<(usize, usize)>,
}

impl AltstackOwner {
    fn set(&self, base: usize, len: usize) {
        let (old_base, old_len) = self.mapping.replace((base, len));
        if old_base != 0 {
            // Only reached if our own stack was replaced by a smaller one in between and we
            // replaced that in turn; ours is no longer installed, so it is unused.
            // SAFETY: the mapping made by a previous ensure_altstack, no longer installed.
            unsafe { libc::munmap(old_base as *mut libc::c_void, old_len) };
        }
    }
}

impl Drop for AltstackOwner {
    fn drop(&mut self) {
        let (base, len) = self.mapping.get();
        if base == 0 {
            return;
        }
        let page = page_size();
        let mut cur: libc::stack_t = libc::stack_t {
            ss_sp: std::ptr::null_mut(),
            ss_flags: 0,
            ss_size: 0,
        };
        // SAFETY: queries the current alternate stack into a valid stack_t.
        unsafe { libc::sigaltstack(std::ptr::null(), &mut cur) };
        if cur.ss_sp as usize == base + page {
            if cur.ss_flags & libc::SS_ONSTACK != 0 {
                return; // cannot happen in a TLS destructor; leak rather than unmap under us
            }
            let off = libc::stack_t {
                ss_sp: std::ptr::null_mut(),
                ss_flags: libc::SS_DISABLE,
                ss_size: 0,
            };
            // SAFETY: disables the thread's alternate stack, which is ours and unused.
            unsafe { libc::sigaltstack(&off, std::ptr::null_mut()) };
        }
        // SAFETY: our mapping, no longer installed as the alternate stack.
        unsafe { libc::munmap(base as *mut libc::c_void, len) };
    }
}

thread_local! {
    static ALTSTACK_OWNER: AltstackOwner = const {
        AltstackOwner { mapping: std::cell::Cell::new((0, 0)) }
    };
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
        const N: usize = 100_000;
        let before = maps_lines();
        let stacks: Vec<Stack> = (0..N).map(|_| alloc(MIN_STACK).expect("alloc")).collect();
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
        assert_eq!(los.len(), N, "distinct stacks");
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

    fn unsafe_zeroed_utsname() -> libc::utsname {
        // SAFETY: utsname is arrays of c_char; all zeroes is valid.
        unsafe { std::mem::zeroed() }
    }

    #[test]
    fn format_u64_digits() {
        let mut b = [0u8; 20];
        for v in [0u64, 7, 42, 1000, u64::MAX] {
            let n = format_u64(v, &mut b);
            assert_eq!(std::str::from_utf8(&b[..n]).expect("ascii"), v.to_string());
        }
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
            assert!(cur.ss_size >= ALTSTACK_SIZE);
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
