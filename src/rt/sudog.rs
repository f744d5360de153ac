//! Waiters and sudogs (Go's `sudog` and `g.selectDone`, runtime2.go) and the sudog caches
//! (Go's `acquireSudog` / `releaseSudog`, proc.go). They live in the runtime beside `G`:
//! channels and select queue them (`chan/waitq.rs`), and the scheduler owns the per-P
//! caches (`P.sudogcache`).
//!
//! A blocked operation is one [`Waiter`] — the blocked goroutine or foreign thread, on its
//! own stack — and one [`Sudog`] per channel queue it sits on: one for a send or receive,
//! one per enabled case for a select.
//!
//! # Sudog caches (Go's acquireSudog / releaseSudog)
//! Sudogs are allocated once and never freed. A free sudog sits in the cache of a P (an
//! owner-only array of [`SUDOG_CACHE`] pointers, `P.sudogcache`: no atomics, no lock) or on
//! the central list (`CENTRAL`, under its own lock). [`acquire_sudog`] pops from the current
//! P's cache; an empty cache is first refilled to half from the central list, and only when
//! that is empty too is a sudog allocated. [`release_sudog`] pushes onto the current P's
//! cache; a full cache first moves half of itself to the central list. A thread without a P
//! (a foreign thread, or an M inside a syscall) uses the central list directly. So a sudog
//! is allocated only when every other sudog is in use or in another P's cache: at most
//! (peak sudogs in use) + Ps × `SUDOG_CACHE` are ever allocated.
//!
//! A released sudog is clear (no waiter, no element, on no queue: the assertions of
//! `release_sudog`, checked in debug builds), so the next user starts from a known state.
//!
//! # The done flag (Go's `g.selectDone`)
//! Several parties may try to complete one waiter: wakers on each channel it waits on (a
//! select), a closer, and its timeout (a timer callback, or the foreign thread's own
//! futex timeout). Exactly one wins, by CASing `Waiter.done` from 0 to 1:
//! - a waker CASes when it takes a sudog off a queue (`WaitQ::dequeue`, chan/waitq.rs); if the CAS fails
//!   the sudog is dropped from that queue and the next one is tried. A waiter with one
//!   sudog and no timeout (`Waiter::exclusive`: a plain send or receive without a
//!   deadline) has no other claimant: every party that could complete it holds the lock
//!   of the one channel whose queue it is on, so its waker marks it with a plain store
//!   (Go's dequeue CASes `selectDone` only for a select);
//! - the winner alone touches the waiter's buffers (the sudog's `elem`), records the sudog
//!   in `Waiter.fired` and then wakes the waiter — after releasing the channel lock;
//! - a timeout that wins leaves `fired` null and wakes the waiter, which then re-locks its
//!   channel(s) and takes its sudogs off whatever queues still hold them.
//!
//! # Lifetime
//! The waiter does not return (its stack frame stays alive) and does not release its
//! sudogs before (a) it was woken by the party that won `done`, and (b) it has re-locked
//! every channel whose queue may still hold one of its sudogs and removed them. So a waker
//! holding a channel lock may always touch a queued sudog and its waiter; the winner may
//! touch them until its wake-up call, which is its last access.
//!
//! The wait queues and the blocking protocol that uses all this are in `chan/waitq.rs`.

use core::cell::{Cell, UnsafeCell};
use core::ptr::{null, null_mut};
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};

use super::{G, P};
use crate::loom::AtomicWord;
use crate::sys::{FutexWord, Lock, Note};

/// A blocked goroutine or foreign thread. Lives on its stack (see the module doc).
///
/// Generic over the words of `done` and `note` (`D`, `K`) only so that the loom model of
/// the claim (`chan/waitq.rs`) runs this code over loom's atomics and a model futex.
pub(crate) struct Waiter<D = AtomicU32, K = AtomicU32> {
    /// The parked goroutine, or null for a foreign thread (which sleeps on `note`).
    pub g: *mut G,
    pub note: Note<K>,
    /// 0 while nobody has claimed the waiter; 1 once a waker or the timeout has.
    pub done: D,
    /// One sudog on one queue and no timeout: only the holders of that channel's lock can
    /// claim it, so they need no CAS (see "The done flag").
    pub exclusive: bool,
    /// The sudog whose operation completed, written by the winning waker before its
    /// wake-up (the wake-up's release publishes it); null if the timeout won.
    pub fired: AtomicPtr<Sudog>,
    /// Link in a closer's list of waiters to wake once the channel lock is released.
    /// Owner: the closer that won `done`.
    pub wake_link: Cell<*const Waiter>,
}

impl Waiter {
    /// A waiter for the calling goroutine or thread; `exclusive` as the field says.
    #[inline]
    pub fn new(exclusive: bool) -> Waiter {
        Waiter {
            g: super::getg(),
            note: Note::new(),
            done: AtomicU32::new(0),
            exclusive,
            fired: AtomicPtr::new(core::ptr::null_mut()),
            wake_link: Cell::new(null()),
        }
    }
}

impl<D: AtomicWord<V = u32>, K: FutexWord> Waiter<D, K> {
    /// Claims the waiter (CAS of `done` 0 → 1). acq-rel: the winner sees the waiter's
    /// set-up, and its later writes are ordered before its wake-up's release.
    pub fn claim(&self) -> bool {
        self.done
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// `claim` for a waker that took the waiter's sudog off a queue, holding that
    /// channel's lock. An exclusive waiter's claimants all hold that lock, which orders
    /// them and the waiter's set-up: a relaxed store marks it (nobody else may try).
    #[inline]
    pub fn claim_locked(&self) -> bool {
        if self.exclusive {
            debug_assert_eq!(
                self.done.load(Ordering::Relaxed),
                0,
                "exclusive waiter claimed twice"
            );
            self.done.store(1, Ordering::Relaxed);
            true
        } else {
            self.claim()
        }
    }

    /// The end of a foreign thread's wait on `note`, which returned `woken` (false: its
    /// deadline passed). A timeout must claim the waiter as any waker does; if a waker
    /// claimed it first, that waker is about to wake the note, so the thread waits for it
    /// (`sleep_untimed`) — it may not return while the waker still holds the waiter. True
    /// if a waker claimed it. Leaves the note clear for the next wait.
    pub fn settle_foreign(&self, woken: bool, sleep_untimed: impl FnOnce(&Note<K>)) -> bool {
        if !woken {
            if self.claim() {
                return false;
            }
            sleep_untimed(&self.note);
        }
        self.note.clear();
        true
    }
}

/// One waiter's place in one channel queue (Go's sudog). Taken from a cache by
/// [`acquire_sudog`] and given back, cleared, by [`release_sudog`]. Aligned to a cache
/// line: the sudogs of goroutines on different Ps are written concurrently. `repr(C)`
/// keeps the fields the owner sets and clears side by side (a few wide stores).
#[repr(C, align(64))]
pub(crate) struct Sudog {
    /// The waiter. Set before the sudog is queued.
    pub waiter: Cell<*const Waiter>,
    /// Send: the element to send; receive: where to store it (may be null: discard).
    pub elem: Cell<*mut u8>,
    /// The select case this sudog stands for (0 for a plain send/receive).
    pub case: Cell<usize>,
    /// Written by the winning waker: true if the value was transferred, false if the
    /// channel was closed.
    pub success: Cell<bool>,
    /// Queue links. Owner: the holder of the channel's lock. A free sudog on the central
    /// list is linked through `next` (owner: the holder of the central lock).
    pub next: Cell<*const Sudog>,
    pub prev: Cell<*const Sudog>,
}

impl Sudog {
    pub(crate) const fn new() -> Sudog {
        Sudog {
            waiter: Cell::new(null()),
            elem: Cell::new(null_mut()),
            case: Cell::new(0),
            success: Cell::new(false),
            next: Cell::new(null()),
            prev: Cell::new(null()),
        }
    }

    /// Sets up a sudog for `w`'s operation on `elem` (select case `case`; a released sudog
    /// has case 0 already).
    #[inline(always)]
    pub fn prepare(&self, w: &Waiter, elem: *mut u8, case: usize) {
        self.waiter.set(w);
        self.elem.set(elem);
        if case != 0 {
            self.case.set(case);
        }
    }

    /// Clears what `prepare` and the waker wrote, once the owner has read the outcome and
    /// the sudog is on no queue.
    #[inline(always)]
    pub fn clear(&self) {
        self.waiter.set(null());
        self.elem.set(null_mut());
        self.case.set(0);
        self.success.set(false);
    }

    pub(crate) fn is_clear(&self) -> bool {
        self.waiter.get().is_null()
            && self.elem.get().is_null()
            && self.case.get() == 0
            && self.next.get().is_null()
            && self.prev.get().is_null()
            && !self.success.get()
    }
}

/// Sudogs a P caches (Go's `len(p.sudogbuf)`): a select rarely has more than a handful
/// of cases, and 128 pointers (1 KiB per P) cover bursts of many blocked operations on one
/// P without touching the central lock; refill and spill move half, so a P that alternates
/// between acquiring and releasing takes the central lock at most once per 64 operations.
pub(crate) const SUDOG_CACHE: usize = 128;

/// A P's free sudogs (Go's `p.sudogcache` / `p.sudogbuf`). Owner: the M holding the P,
/// while it runs a goroutine (a goroutine cannot switch inside acquire or release).
/// `buf[..n]` are free sudogs, `n <= SUDOG_CACHE`; the fast paths index `% SUDOG_CACHE`
/// (a no-op there, which spares the bounds check).
pub(crate) struct SudogCache {
    n: usize,
    buf: [*const Sudog; SUDOG_CACHE],
}

impl SudogCache {
    pub const fn new() -> SudogCache {
        SudogCache {
            n: 0,
            buf: [null(); SUDOG_CACHE],
        }
    }
}

/// The central free list (Go's `sched.sudogcache` under `sched.sudoglock`): free sudogs
/// linked through `next`. A leaf lock: taken under channel locks, nothing is taken under it.
struct Central {
    lock: Lock,
    /// Owner: the holder of `lock`.
    list: UnsafeCell<CentralList>,
}

struct CentralList {
    head: *const Sudog,
    len: usize,
}

// SAFETY: `list` is only touched with `lock` held; the sudogs on it are free (nobody else
// holds a pointer to them).
unsafe impl Sync for Central {}

static CENTRAL: Central = Central {
    lock: Lock::new(crate::sys::Rank::Sudogs),
    list: UnsafeCell::new(CentralList {
        head: null(),
        len: 0,
    }),
};

/// Sudogs ever allocated (for the tests' recycling bound).
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

/// Sudogs ever allocated: every one is in use, in a P's cache or on the central list.
#[cfg(test)]
pub(crate) fn sudogs_allocated() -> usize {
    ALLOCATED.load(Ordering::Relaxed)
}

/// Free sudogs on the central list (a snapshot).
#[cfg(test)]
pub(crate) fn sudogs_central() -> usize {
    CENTRAL.lock.lock();
    // SAFETY: we hold the central lock.
    let n = unsafe { (*CENTRAL.list.get()).len };
    CENTRAL.lock.unlock();
    n
}

/// Sudogs allocated at a time: one allocation of 4 KiB rather than 64 (a 64-byte-aligned
/// allocation each costs twice its size in malloc's bookkeeping, ~0.18 KiB per goroutine
/// with a million parked goroutines).
const SUDOG_CHUNK: usize = 64;

/// A new sudog; never freed. Allocates a chunk: the caller gets the first, the central list
/// the others.
#[cold]
fn alloc_sudog() -> &'static Sudog {
    ALLOCATED.fetch_add(SUDOG_CHUNK, Ordering::Relaxed);
    let chunk: &'static [Sudog] = Box::leak(
        (0..SUDOG_CHUNK)
            .map(|_| Sudog::new())
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    for i in 1..SUDOG_CHUNK - 1 {
        chunk[i].next.set(&chunk[i + 1]);
    }
    // SAFETY: the chain chunk[1] ..= chunk[SUDOG_CHUNK - 1] is new, free and ours.
    unsafe { central_put(&chunk[1], &chunk[SUDOG_CHUNK - 1], SUDOG_CHUNK - 1) };
    &chunk[0]
}

/// The P this thread holds, or null (a foreign thread, or an M in a syscall).
#[inline(always)]
fn current_p() -> *mut P {
    let m = super::getm();
    if m.is_null() {
        return null_mut();
    }
    // SAFETY: a non-null TLS slot holds this thread's live M (Ms are never freed); only
    // this M writes its `p` while it runs a goroutine.
    unsafe { (*m).p.load(Ordering::Relaxed) }
}

/// Pops up to `max` sudogs off the central list, handing each to `push`; returns how many.
fn central_take(max: usize, mut push: impl FnMut(*const Sudog)) -> usize {
    CENTRAL.lock.lock();
    // SAFETY: we hold the central lock, the owner of the list and of its links.
    let got = unsafe {
        let l = &mut *CENTRAL.list.get();
        let mut got = 0;
        while got < max && !l.head.is_null() {
            let s = l.head;
            l.head = (*s).next.get();
            (*s).next.set(null());
            l.len -= 1;
            push(s);
            got += 1;
        }
        got
    };
    CENTRAL.lock.unlock();
    got
}

/// Puts the chain `first ..= last` (linked through `next`, `n` sudogs) on the central list.
///
/// # Safety
/// The chain's sudogs are free and owned by the caller.
#[cold]
unsafe fn central_put(first: *const Sudog, last: *const Sudog, n: usize) {
    CENTRAL.lock.lock();
    // SAFETY: we hold the central lock; the chain is ours (caller contract).
    unsafe {
        let l = &mut *CENTRAL.list.get();
        (*last).next.set(l.head);
        l.head = first;
        l.len += n;
    }
    CENTRAL.lock.unlock();
}

/// Takes a clear sudog (Go's acquireSudog): from the current P's cache, refilled to half
/// from the central list when empty; from the central list on a thread without a P; a new
/// one when no cache has any. It stays the caller's until [`release_sudog`].
#[inline(always)]
pub(crate) fn acquire_sudog() -> &'static Sudog {
    let pp = current_p();
    if pp.is_null() {
        return acquire_central();
    }
    // SAFETY: this M holds pp and runs the calling goroutine, which cannot switch here: we
    // are the cache's owner.
    let c = unsafe { &mut *(*pp).sudogcache.ptr() };
    if c.n == 0 {
        refill(c);
    }
    c.n -= 1;
    // SAFETY: free sudogs are never freed, and this one left the cache: it is ours.
    let s = unsafe { &*c.buf[c.n % SUDOG_CACHE] };
    debug_assert!(s.is_clear(), "acquire_sudog: sudog not clear");
    s
}

/// acquire_sudog on a thread without a P.
#[cold]
fn acquire_central() -> &'static Sudog {
    let mut s = null();
    central_take(1, |x| s = x);
    if s.is_null() {
        return alloc_sudog();
    }
    // SAFETY: free sudogs are never freed, and this one left the central list: it is ours.
    let s = unsafe { &*s };
    debug_assert!(s.is_clear(), "acquire_sudog: sudog not clear");
    s
}

/// Refills an empty P cache to half from the central list, or with one new sudog.
#[cold]
fn refill(c: &mut SudogCache) {
    let n = central_take(SUDOG_CACHE / 2, |s| {
        c.buf[c.n] = s;
        c.n += 1;
    });
    if n == 0 {
        c.buf[0] = alloc_sudog();
        c.n = 1;
    }
}

/// Gives a sudog back (Go's releaseSudog): onto the current P's cache, after moving half of
/// a full one to the central list; onto the central list on a thread without a P.
///
/// # Safety
/// `s` came from [`acquire_sudog`], is on no queue, has been cleared (`Sudog::clear`), and
/// nobody touches it any more: wakers are done with it (see the module doc).
#[inline(always)]
pub(crate) unsafe fn release_sudog(s: &'static Sudog) {
    debug_assert!(
        s.is_clear(),
        "release_sudog: sudog not cleared or still queued"
    );
    let pp = current_p();
    if pp.is_null() {
        // SAFETY: s is free and ours (caller contract).
        unsafe { central_put(s, s, 1) };
        return;
    }
    // SAFETY: as in acquire_sudog, we own pp's cache.
    let c = unsafe { &mut *(*pp).sudogcache.ptr() };
    if c.n == SUDOG_CACHE {
        spill(c);
    }
    c.buf[c.n % SUDOG_CACHE] = s;
    c.n += 1;
}

/// Moves the top half of a full P cache to the central list (one lock round trip).
#[cold]
fn spill(c: &mut SudogCache) {
    let keep = SUDOG_CACHE / 2;
    let (first, last) = (c.buf[keep], c.buf[SUDOG_CACHE - 1]);
    for i in keep..SUDOG_CACHE - 1 {
        // SAFETY: the cache's sudogs are free and ours (we own the cache).
        unsafe { (*c.buf[i]).next.set(c.buf[i + 1]) };
    }
    c.n = keep;
    // SAFETY: the chain first ..= last is the sudogs we just took out of the cache.
    unsafe { central_put(first, last, SUDOG_CACHE - keep) };
}

/// Moves every sudog of a P's cache to the central list: the P is being retired
/// (GOMAXPROCS shrank), so its cache would sit unused (Go's `p.destroy`).
///
/// # Safety
/// The caller owns the cache (holds its P).
pub(crate) unsafe fn flush_p_cache(c: &mut SudogCache) {
    if c.n == 0 {
        return;
    }
    for i in 0..c.n - 1 {
        // SAFETY: the cache's sudogs are free and ours (caller contract).
        unsafe { (*c.buf[i]).next.set(c.buf[i + 1]) };
    }
    let (first, last, n) = (c.buf[0], c.buf[c.n - 1], c.n);
    c.n = 0;
    // SAFETY: the chain first ..= last is the cache's sudogs, now out of it.
    unsafe { central_put(first, last, n) };
}
