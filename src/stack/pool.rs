//! The stack pool: size classes of free stacks, the reservations that promise a stack to a
//! goroutine spawned before it runs, allocation and freeing.

use super::*;

/// Free stacks of one size class: their `lo` addresses, and how many of them are promised.
pub(super) struct Class {
    /// Freed and not released yet, oldest at the front. Reused newest first (LIFO: its top
    /// page is the most likely to be in cache); released oldest first.
    pub(super) dirty: VecDeque<usize>,
    /// Released, or never used: everything below the top [`KEEP_RESIDENT`] bytes reads as
    /// zeros. Taken when `dirty` is empty.
    pub(super) clean: Vec<usize>,
    /// Released entirely by [`trim`](fn@super::trim::trim): nothing resident. Taken when `clean` is empty too.
    pub(super) bare: Vec<usize>,
    /// The fewest stacks `dirty` and `clean` held since the last [`trim`](fn@super::trim::trim): that many at the
    /// bottom of each went unused for the whole period (see "Trimming").
    pub(super) dirty_low: usize,
    pub(super) clean_low: usize,
    /// Slabs mapped by [`reserve`] whose guards are not installed yet, as (base, stacks):
    /// a slab's guards go in when its first stack is handed out (see "Reservations").
    pub(super) unguarded: Vec<(usize, usize)>,
    /// Stacks in the `unguarded` slabs.
    pub(super) nunguarded: usize,
    /// Free stacks that a thread took off the lists to work on without the lock (a release
    /// batch, a slab having its guards installed) and will put back on `clean`.
    pub(super) inflight: usize,
    /// Free stacks promised by [`reserve`] and not yet taken by [`alloc_reserved`] or given
    /// back by [`unreserve`]. Never more than [`Class::free`]: `alloc` leaves them alone.
    pub(super) reserved: usize,
}

impl Class {
    pub(super) const fn new() -> Class {
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
    pub(super) fn free(&self) -> usize {
        self.dirty.len() + self.clean.len() + self.bare.len() + self.nunguarded + self.inflight
    }

    /// A free stack that is ready to run on (guarded; not in flight), newest first, warmest
    /// list first.
    pub(super) fn pop_ready(&mut self) -> Option<usize> {
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
    pub(super) fn add_slab(&mut self, base: usize, n: usize, stride: usize) -> usize {
        let guard = guard_size();
        self.clean.reserve(n - 1);
        self.clean
            .extend((1..n).rev().map(|i| base + i * stride + guard));
        base + guard
    }
}

/// Size class (usable bytes) -> free stacks. Slow path only (see `stack`'s module doc).
pub(super) static POOL: Mutex<BTreeMap<usize, Class>> = Mutex::new(BTreeMap::new());

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
pub(super) fn class_size(size: usize) -> Result<usize, i32> {
    if !(MIN_STACK..=MAX_STACK).contains(&size) {
        return Err(libc::EINVAL);
    }
    Ok(size.next_multiple_of(page_size()))
}

/// How many stacks of usable size `size` (whole pages) a slab holds, and their stride.
pub(super) fn slab_shape(size: usize) -> (usize, usize) {
    let stride = size + guard_size();
    ((SLAB_BYTES / stride).clamp(1, MAX_PER_SLAB), stride)
}

/// Promises `n` stacks of `size` bytes (rounded up to whole pages) to goroutines that will
/// take them later with [`alloc_reserved`] (or give the promise back with [`unreserve`]),
/// mapping slabs until the class's free stacks cover every promise. Where the kernel has
/// `MADV_GUARD_INSTALL`, those slabs get their guards only when their first stack is
/// handed out: a promise costs address space, not memory or page-table work (see
/// "Reservations" in `stack`'s module doc).
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

/// Locks the pool. A poisoned lock only means another thread panicked holding it; the
/// lists are always consistent (pushes and pops), so keep going.
pub(super) fn lock_pool() -> MutexGuard<'static, BTreeMap<usize, Class>> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Returns a stack to the pool of its size class. The memory stays mapped; it is reused
/// as it is, or, once it is among the oldest of [`DIRTY_MAX`] freed stacks of its class,
/// all but its top [`KEEP_RESIDENT`] bytes are released with `MADV_DONTNEED` (see
/// `stack`'s module doc), so they read as zeros when the stack is reused.
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
pub(super) fn take_oldest_dirty(class: &mut Class, batch: &mut [usize; RELEASE_BATCH]) {
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
pub(super) fn release_batch(batch: &[usize; RELEASE_BATCH], size: usize) {
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
pub(super) fn release(los: &[usize], size: usize) {
    release_ranges(los.iter().map(|&lo| iov(lo, size - KEEP_RESIDENT)));
}
