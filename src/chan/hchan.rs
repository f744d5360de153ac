//! The channel (Go's hchan, chan.go): a lock, a ring buffer of `cap` elements of
//! `elem_size` bytes, and the queues of blocked receivers and senders.
//!
//! # The ring and the lock
//! Go takes the lock for every operation. Here a buffered channel's send and receive first
//! try the ring without it ([`super::ring`]), which succeeds while nobody waits on the
//! channel and it is open; everything else takes the lock with [`Chan::lock_excl`], which
//! puts the ring in exclusive mode (fast operations then go to the lock too), and from
//! there on the channel is Go's. [`Chan::unlock_excl`] leaves exclusive mode when nobody
//! waits and the channel is open. So a fast operation never sees a blocked peer: a
//! receiver blocks, and a sender fills the buffer, only in exclusive mode, which lasts
//! until the queues are empty again.
//!
//! # Invariants (under `lock`, in exclusive mode)
//! - At least one of `recvq` and `sendq` is empty, except for a select waiting on both
//!   directions of one channel (its own sudogs never match each other: it is parked).
//! - Buffered: `sendq` is non-empty only if the buffer is full; `recvq` only if it is empty.
//! - Exclusive mode whenever a queue is non-empty or `state != 0`.
//! - Unbuffered: no ring; a value goes straight from the sender's `elem` to the
//!   receiver's `out` (one copy, done by whichever side arrives second).
//! - `CLOSED` never reverts; once set, both queues are empty (the closer drained them) and
//!   nobody enqueues again.
//!
//! A blocked operation is woken by the party that claims its waiter (see `sudog`); the
//! transfer is done by that party under the lock, and the wake-up after the lock is
//! released, as Go does.
//!
//! # Lifetime (Go has a garbage collector; we count)
//! - `refs` counts the handles: one from `make`, one per `retain`, minus one per `release`
//!   (atomic RMWs, without the lock). The caller of an operation holds a handle for its
//!   whole duration (the C contract), so an operation that does not block costs nothing
//!   more.
//! - A blocked operation must outlive the handle it came with (a goroutine blocked in a
//!   receive with a timeout, whose owner releases the channel meanwhile): it holds the
//!   channel itself, counted in `Synced::nheld` (plain arithmetic under the lock it holds
//!   anyway, no atomic RMW): +1 per sudog queued, and for a select +1 per channel until its
//!   pass 3 is done. The hold of a sudog is dropped by whoever finishes with it under the
//!   lock: the peer or closer that completes it (`complete`), or its owner once it has
//!   taken it off the queue (a timeout, a select's other cases).
//! - The release that takes `refs` to 0 marks the channel `ORPHANED` under the lock; the
//!   channel is destroyed by that release if nothing is held, else by whoever drops the
//!   last hold under the lock (`unhold` says so). Both decisions are under the lock, so
//!   exactly one party destroys it. Orphaned, only blocked operations may still finish:
//!   any new operation, retain or release is a use of a released handle and throws.
//! - Destroyed channels free their buffer but not their header, which goes to a free list
//!   that `make` takes from (type-stable memory, as the sudogs): a late `unlock` (its
//!   futex wake) touches valid memory, and a release too many finds `refs` at 0 and
//!   throws — unless the header was already made into a new channel, whose reference it
//!   then drops (a limit: handles are plain pointers).

use core::cell::UnsafeCell;
use core::ptr::null;
use core::sync::atomic::Ordering;

use super::buf;
pub(crate) use super::ring::Fast;
use super::ring::Ring;
use super::waitq::{self, WaitQ};
use crate::rt::sudog::{Sudog, Waiter};
use crate::rt::{self, WaitReason};
use crate::sys::{self, Lock};

/// Why an operation did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChanError {
    /// The channel is closed (receive: and drained).
    Closed,
    /// The non-blocking form would have blocked.
    WouldBlock,
    /// The deadline passed first (the caller's, or its scope's: rt/scope.rs).
    TimedOut,
    /// The caller's scope was cancelled while it waited.
    Canceled,
}

impl ChanError {
    /// What a wait that its timer or its scope ended reports.
    pub(crate) fn ended() -> ChanError {
        if rt::scope::timeout_errno() == libc::ECANCELED {
            ChanError::Canceled
        } else {
            ChanError::TimedOut
        }
    }
}

/// How long an operation may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Block,
    /// Never wait: `WouldBlock`.
    Try,
    /// Wait until this `nanotime` deadline: then `TimedOut`.
    Until(i64),
}

impl Mode {
    /// The mode of a C timeout: < 0 none, 0 do not wait (reported as timed out), else
    /// relative nanoseconds.
    pub fn from_timeout(ns: i64) -> Mode {
        if ns < 0 {
            Mode::Block
        } else {
            Mode::Until(sys::nanotime().saturating_add(ns))
        }
    }

    /// The error for "would have to wait" if this mode may not, else the deadline to wait
    /// for (None: forever).
    pub(crate) fn wait_for(self) -> Result<Option<i64>, ChanError> {
        match self {
            Mode::Block => Ok(None),
            Mode::Try => Err(ChanError::WouldBlock),
            Mode::Until(d) if d <= sys::nanotime() => Err(ChanError::TimedOut),
            Mode::Until(d) => Ok(Some(d)),
        }
    }
}

/// The lock-protected half of a channel (56 bytes: it shares a line with the lock).
#[repr(C)]
pub(crate) struct Synced {
    /// The ring is in exclusive mode (buffered channels; see "The ring and the lock"),
    /// whose positions are `head` and `tail` (the ring's words hold stale ones meanwhile).
    excl: bool,
    /// `CLOSED` and `ORPHANED` bits, in one byte so that the operations' fast paths test
    /// both with the one comparison they made for `closed` alone.
    state: u8,
    /// Operations done under the lock in a row that neither waited nor woke a waiter
    /// (saturating).
    calm: u16,
    /// Holds by blocked operations (see "Lifetime").
    nheld: u32,
    head: u64,
    tail: u64,
    pub recvq: WaitQ,
    pub sendq: WaitQ,
}

/// `Synced::state`: closed (never reverts).
const CLOSED: u8 = 1;
/// `Synced::state`: the last handle is gone; the last hold destroys the channel (see
/// "Lifetime"). Never reverts (until the header is made into a new channel).
const ORPHANED: u8 = 2;

/// Copies one element of `size` bytes, one of 0, 4, 8 and 16 (others: nothing).
///
/// # Safety
/// `src` readable and `dst` writable for `size` bytes. One unaligned load and store, as
/// in `Chan::copy_small`.
#[inline(always)]
unsafe fn copy_sized(size: usize, src: *const u8, dst: *mut u8) {
    // SAFETY: caller contract.
    unsafe {
        match size {
            4 => dst
                .cast::<u32>()
                .write_unaligned(src.cast::<u32>().read_unaligned()),
            8 => dst
                .cast::<u64>()
                .write_unaligned(src.cast::<u64>().read_unaligned()),
            16 => dst
                .cast::<u128>()
                .write_unaligned(src.cast::<u128>().read_unaligned()),
            _ => {}
        }
    }
}

/// An operation, retain or release on a channel whose last handle was released.
#[cold]
fn used_after_release() -> ! {
    crate::rt::throw("channel used after its last gmp_chan_release")
}

impl Synced {
    /// Takes a hold for a blocked operation (a queued sudog, or a select's channel); the
    /// channel is not calm (see `CALM_RUN`).
    pub(crate) fn hold(&mut self) {
        if self.state & ORPHANED != 0 {
            used_after_release();
        }
        self.nheld = match self.nheld.checked_add(1) {
            Some(n) => n,
            None => crate::rt::throw("chan: hold count overflow"),
        };
        self.calm = 0;
    }

    /// Counts an operation done under the lock that did not wait: calm unless it woke a
    /// waiter (see `CALM_RUN`).
    #[inline(always)]
    pub(crate) fn count_op(&mut self, woke: bool) {
        self.calm = if woke { 0 } else { self.calm.saturating_add(1) };
    }

    /// Drops a hold; true if the caller must destroy the channel once it has released the
    /// lock (the last hold of an orphaned channel).
    #[must_use]
    pub(crate) fn unhold(&mut self) -> bool {
        if self.nheld == 0 {
            crate::rt::throw("chan: hold count underflow");
        }
        self.nheld -= 1;
        self.nheld == 0 && self.state & ORPHANED != 0
    }
}

/// A channel. Reference counted; destroyed by the last `release` or the last hold of a
/// blocked operation (see "Lifetime").
///
/// Four cache lines: the lock with all it guards, and the ring's three (the sizes with
/// the handle count, `head`, `tail`). An operation touches the sizes' line, the slot's,
/// and `head`'s or `tail`'s without the lock or the lock's under it.
#[repr(C, align(64))]
pub struct Chan {
    lock: Lock,
    /// Owner: the holder of `lock`.
    synced: UnsafeCell<Synced>,
    /// The buffer (buffered channels), the sizes, and the handle count (`ring.refs`, see
    /// "Lifetime").
    ring: Ring,
}

// The lock and all it guards fill the first line; the ring takes the other three (debug
// builds' locks carry their rank, `sys::Rank`, and take a fifth line).
#[cfg(not(any(all(test, loom), debug_assertions)))]
const _: () = assert!(
    core::mem::size_of::<Lock>() + core::mem::size_of::<Synced>() == 64
        && core::mem::size_of::<Chan>() == 256
);

impl Chan {
    /// Where the ring's exclusive-mode hint (`looks_lock_free`) is in a channel: the C
    /// entries test it before anything else (`ffi::chan`).
    pub(crate) const EXCL_HINT_OFFSET: usize =
        core::mem::offset_of!(Chan, ring) + super::ring::EXCL_HINT_OFFSET;
}

// SAFETY: the mutable state is behind `lock` (Synced), the ring's protocol, atomics, or
// immutable after make.
unsafe impl Sync for Chan {}
// SAFETY: as above; the buffer is owned by the channel.
unsafe impl Send for Chan {}

/// Outcome of an operation attempted with the lock held.
pub(crate) enum Now {
    /// Done; the waiter to wake once the lock is released (null if none).
    Done(*const Waiter),
    /// The channel is closed (receive: drained, `out` zeroed).
    Closed,
    /// It would block.
    Blocked,
}

/// Largest buffer a destroyed channel's header keeps for the next make of its size.
const KEEP_BUF_MAX: usize = 4096;

// A kept buffer is the allocator's, and its clearing at make (one `memset`) small: a mapped
// one is never kept (see `buf`).
const _: () = assert!(KEEP_BUF_MAX < buf::MAP_MIN);

/// Operations under the lock in a row, without a wait or a wake-up, after which a
/// buffered channel leaves exclusive mode. Entering it costs two locked RMWs: a channel
/// whose parties block often (skynet's: ten sends and ten receives, the receiver
/// blocking on most) stays under the lock as Go's; one that flows without waiting
/// (chan_mpmc's between the rare full and empty rings) goes lock-free after a few dozen.
pub(crate) const CALM_RUN: u16 = 64;

// Limits (private: cbindgen would copy any `pub` constant, even an associated one, into
// the C header; the C names are in ffi).
/// Largest element size.
const MAX_ELEM: usize = 65536;
/// Largest capacity.
const MAX_CAP: usize = 1 << 31;

impl Chan {
    /// Largest element size (GMP_CHAN_MAX_ELEM).
    pub const fn max_elem() -> usize {
        MAX_ELEM
    }

    /// A new channel holding one reference, or the reason it cannot be made.
    pub fn make(elem_size: usize, cap: usize) -> Result<*mut Chan, i32> {
        if elem_size > MAX_ELEM || cap > MAX_CAP {
            return Err(libc::EINVAL);
        }
        let bytes = Ring::stride(elem_size)
            .checked_mul(cap)
            .ok_or(libc::EINVAL)?;
        if std::alloc::Layout::from_size_align(bytes, buf::ALIGN).is_err() {
            return Err(libc::EINVAL);
        }
        let reuse = headers().free.pop().map(|c| c as *mut Chan);
        // A dead header keeps a small buffer (see `destroy`): take it if it is the size
        // we need (channels made by the thousand are alike: skynet's).
        let mut buf = core::ptr::null_mut();
        // The positions a kept buffer left empty continues from: its stamps are right for
        // them, and the ring's words already hold them (stale) in exclusive mode, so
        // neither the buffer nor the words' lines are written (skynet's channels then
        // touch two lines of their header, as a 128-byte header would).
        let mut resume = None;
        if let Some(c) = reuse {
            // SAFETY: a destroyed channel's header: nobody may use it any more, and its
            // buffer (if any) came from `buf::alloc` of `buf_bytes` bytes.
            unsafe {
                let old = &mut *c;
                let kept = old.ring.buf();
                if !kept.is_null() {
                    if old.buf_bytes() == bytes {
                        let ds = old.synced.get_mut();
                        if ds.excl && old.ring.resumes_at(cap, ds.head, ds.tail) {
                            resume = Some((ds.head, ds.tail));
                        } else {
                            core::ptr::write_bytes(kept, 0, bytes);
                        }
                        buf = kept;
                    } else {
                        buf::free(kept, old.buf_bytes());
                        old.ring.forget_buf();
                    }
                }
            }
        }
        if buf.is_null() && bytes != 0 {
            // Zeroed, the ring's initial state; a large buffer is untouched zero pages.
            buf = buf::alloc(bytes);
            if buf.is_null() {
                if let Some(c) = reuse {
                    headers().free.push(c as usize);
                }
                return Err(libc::ENOMEM);
            }
        }
        let new = Chan {
            // SAFETY: buf holds cap zeroed slots, aligned, and is freed only by destroy.
            ring: unsafe { Ring::new(buf, cap, elem_size) },
            lock: Lock::new(crate::sys::Rank::Chan),
            synced: UnsafeCell::new(Synced {
                // The ring starts in exclusive mode.
                excl: cap != 0,
                head: resume.map_or(0, |(h, _)| h),
                tail: resume.map_or(0, |(_, t)| t),
                calm: 0,
                state: 0,
                recvq: WaitQ::new(),
                sendq: WaitQ::new(),
                nheld: 0,
            }),
        };
        match reuse {
            Some(c) => {
                // SAFETY: a destroyed channel's header: nobody may use it any more (its
                // last handle and hold are gone), and it is never deallocated. Chan has no
                // drop glue, so overwriting it in place leaks nothing. Field by field: a
                // whole-struct write copies the padding of the ring's lines too.
                unsafe {
                    let Chan { lock, synced, ring } = new;
                    (*c).lock = lock;
                    (*c).synced = synced;
                    (*c).ring.renew(ring, resume.is_none());
                }
                Ok(c)
            }
            None => {
                let Some(c) = headers().carve() else {
                    if !buf.is_null() {
                        // SAFETY: from `buf::alloc(bytes)` above (or kept with that size),
                        // and nobody else has it.
                        unsafe { buf::free(buf, bytes) };
                    }
                    return Err(libc::ENOMEM);
                };
                // SAFETY: `carve` gives memory for one Chan, aligned, that nobody uses.
                unsafe { c.write(new) };
                Ok(c)
            }
        }
    }

    /// Adds a handle. Throws if the channel has none left (a released handle).
    pub fn retain(&self) {
        // relaxed: a new reference is made from an existing one (as Arc::clone).
        if self.ring.refs.fetch_add(1, Ordering::Relaxed) == 0 {
            crate::rt::throw("gmp_chan_retain: channel already released");
        }
    }

    /// Drops a handle; at zero, the channel is destroyed now or, if blocked operations
    /// hold it, by the last of them (see "Lifetime"). Throws if no handle is left (released
    /// more often than made and retained).
    ///
    /// # Safety
    /// `c` came from `make`; the caller owns one handle, and no operation of its own on
    /// the channel is in progress (others' may be: blocked ones hold the channel; one that
    /// has not blocked yet must have a handle of its own).
    pub unsafe fn release(c: *mut Chan) {
        // SAFETY: headers are never deallocated; the caller owns a handle.
        let ch = unsafe { &*c };
        // release/acquire: every use of the channel happens before its destruction (as Arc).
        match ch.ring.refs.fetch_sub(1, Ordering::Release) {
            0 => crate::rt::throw("gmp_chan_release: channel released more often than retained"),
            1 => {}
            _ => return,
        }
        core::sync::atomic::fence(Ordering::Acquire);
        let mut leaked = Vec::new();
        ch.lock.lock();
        // SAFETY: lock held.
        let destroy = unsafe {
            let s = ch.synced();
            s.state |= ORPHANED;
            if s.nheld != 0 && rt::leaks::enabled() {
                s.recvq.for_each(|sg| leaked_waiter(sg, &mut leaked));
                s.sendq.for_each(|sg| leaked_waiter(sg, &mut leaked));
            }
            // An orphaned channel is in exclusive mode (a use after release goes to the
            // lock and throws). One with blocked operations is already; one without is
            // destroyed below, which enters it if need be: no need to pay for it here.
            debug_assert!(
                s.nheld == 0 || s.excl || ch.cap() == 0,
                "chan: orphaned outside exclusive mode"
            );
            s.nheld == 0
        };
        ch.lock.unlock();
        if destroy {
            // SAFETY: no handle and no hold left; we decided under the lock.
            unsafe { Chan::destroy(c) };
        }
        if !leaked.is_empty() {
            rt::leaks::report(&leaked);
        }
    }

    /// Frees the buffer and puts the header on the free list (see "Lifetime").
    ///
    /// # Safety
    /// Called once, by the party that found the channel orphaned and unheld under its
    /// lock, after releasing the lock.
    pub(crate) unsafe fn destroy(c: *mut Chan) {
        // SAFETY: caller contract: nobody else uses the channel; buf came from
        // `buf::alloc` of `buf_bytes` bytes.
        unsafe {
            let ch = &mut *c;
            // Released outside exclusive mode: enter it, so that a use after release goes
            // to the lock and finds the channel orphaned, and the positions are `Synced`'s
            // for the next make (see `resume` there).
            ch.enter_excl_locked();
            let buf = ch.ring.buf();
            if !buf.is_null() {
                // A small buffer stays with the header for the next make of the same size
                // (glibc's malloc consolidates freed chunks above 128 bytes, a cost skynet
                // would pay for every channel's buffer: `scripts/ab.sh skynet`); a large one,
                // mapped, goes back to the kernel.
                if ch.buf_bytes() > KEEP_BUF_MAX {
                    buf::free(buf, ch.buf_bytes());
                    ch.ring.forget_buf();
                }
            }
        }
        headers().free.push(c as usize);
    }

    /// The size of the ring's buffer, from `elem_size` and `cap` (which a destroyed header
    /// keeps): what make gave `buf::alloc`.
    fn buf_bytes(&self) -> usize {
        Ring::stride(self.elem_size()) * self.cap()
    }

    #[inline(always)]
    pub fn elem_size(&self) -> usize {
        self.ring.elem_size()
    }

    #[inline(always)]
    pub fn cap(&self) -> usize {
        self.ring.cap()
    }

    /// Whether the ring is in exclusive mode (tests).
    #[cfg(test)]
    pub(crate) fn in_exclusive_mode(&self) -> bool {
        self.ring.in_excl()
    }

    /// Buffered elements (a snapshot).
    pub fn len(&self) -> usize {
        if self.cap() == 0 {
            return 0;
        }
        if let Some(n) = self.ring.len() {
            return n;
        }
        // Exclusive mode: the positions are the lock holder's.
        self.lock.lock();
        // SAFETY: lock held.
        let s = unsafe { self.synced() };
        let n = if s.excl {
            self.ring.len_at(s.head, s.tail)
        } else {
            self.ring.len().unwrap_or(0)
        };
        self.lock.unlock();
        n
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// # Safety
    /// `lock` is held, and the returned borrow ends before it is released.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn synced(&self) -> &mut Synced {
        // SAFETY: caller holds the lock that owns it.
        unsafe { &mut *self.synced.get() }
    }

    /// Takes the lock and puts the ring in exclusive mode (see "The ring and the lock"):
    /// every use of the lock goes through here and [`Chan::unlock_excl`].
    #[inline]
    pub(crate) fn lock_excl(&self) {
        // No lock-free retry: enter the mode whatever the ring holds.
        let retried = self.lock_excl_or(|| Fast::Locked);
        debug_assert!(!retried);
    }

    /// `lock_excl` for an operation whose lock-free attempt failed: outside exclusive
    /// mode the ring may have changed since, so the attempt (`retry`) is made once more
    /// with the lock held, before paying the mode's two RMWs (no party can start waiting
    /// meanwhile: waiting takes the lock). True if it succeeded: the lock is released.
    /// (Under contention the ring is often full or empty only for a moment: without the
    /// retry, chan_mpmc at GOMAXPROCS=2 would enter the mode many times for every wait.)
    #[inline(always)]
    fn lock_excl_or(&self, retry: impl FnOnce() -> Fast) -> bool {
        self.lock_keep_mode();
        // SAFETY: lock held.
        if unsafe { self.lock_free_now() } {
            if retry() == Fast::Done {
                self.lock.unlock();
                return true;
            }
            // SAFETY: lock held, the ring outside the mode.
            unsafe { self.enter_mode() };
        }
        false
    }

    /// Takes the lock and leaves the ring's mode as it is (a select's first look; see
    /// `select_fast`). Released with `unlock_excl`, which leaves a ring outside the mode
    /// alone.
    #[inline(always)]
    pub(crate) fn lock_keep_mode(&self) {
        self.lock.lock();
        // Only lock holders set or clear the bits, so the flag and the ring agree.
        debug_assert!(
            // SAFETY: lock held.
            self.cap() == 0 || unsafe { self.synced() }.excl == self.ring.in_excl(),
            "chan: exclusive mode out of step with the ring"
        );
    }

    /// With the lock held: whether the channel is buffered and its ring outside exclusive
    /// mode, so that lock-free operations may still run on it (`select_fast`).
    ///
    /// # Safety
    /// Lock held, or the channel is the caller's alone.
    #[inline(always)]
    pub(crate) unsafe fn lock_free_now(&self) -> bool {
        // SAFETY: caller contract.
        self.cap() != 0 && !unsafe { self.synced() }.excl
    }

    /// With the lock held: puts the ring in exclusive mode if it is not (`lock_excl`'s
    /// second half).
    ///
    /// # Safety
    /// Lock held, or the channel is the caller's alone (`destroy`).
    pub(crate) unsafe fn enter_excl_locked(&self) {
        // SAFETY: caller contract.
        if unsafe { self.lock_free_now() } {
            // SAFETY: lock held, the ring outside the mode.
            unsafe { self.enter_mode() };
        }
    }

    /// Puts the ring in exclusive mode: its positions go to `Synced` (the one place that
    /// enters the mode).
    ///
    /// # Safety
    /// Lock held (or the channel is the caller's alone); buffered, outside the mode.
    #[inline(always)]
    unsafe fn enter_mode(&self) {
        // SAFETY: caller contract.
        let s = unsafe { self.synced() };
        (s.head, s.tail) = self.ring.enter();
        s.excl = true;
    }

    /// The lock for a send or receive whose lock-free attempt (`retry`) failed or was not
    /// made: `lock_excl_or`, then an unbuffered channel's safe point. True if the retry
    /// succeeded (the lock is released).
    #[inline(always)]
    fn lock_op(&self, retry: impl FnOnce() -> Fast) -> bool {
        if self.lock_excl_or(retry) {
            return true;
        }
        if self.cap() == 0 {
            self.safepoint_locked();
        }
        false
    }

    /// Unlocks after an operation that neither waited nor woke anyone (see `CALM_RUN`).
    #[inline(always)]
    fn unlock_calm(&self, s: &mut Synced) {
        s.calm = s.calm.saturating_add(1);
        self.unlock_excl();
    }

    /// Leaves exclusive mode if nobody waits, the channel is open and the last
    /// [`CALM_RUN`] operations under the lock neither waited nor woke anyone; unlocks.
    #[inline]
    pub(crate) fn unlock_excl(&self) {
        // SAFETY: lock held.
        let s = unsafe { self.synced() };
        if s.excl && s.calm >= CALM_RUN && s.state == 0 && s.recvq.is_empty() && s.sendq.is_empty()
        {
            self.ring.leave(s.head, s.tail);
            s.excl = false;
            s.calm = 0;
        }
        self.lock.unlock();
    }

    /// Copies one element; no-op for zero-size elements or a null destination.
    ///
    /// # Safety
    /// `src` readable and `dst` writable for `elem_size` bytes (unless null/zero).
    #[inline(always)]
    unsafe fn copy(&self, src: *const u8, dst: *mut u8) {
        // SAFETY: caller contract.
        unsafe {
            if !self.copy_small(src, dst) {
                core::ptr::copy(src, dst, self.elem_size());
            }
        }
    }

    /// `copy` for the sizes that need no call: 0, 4, 8 and 16 bytes (an int, a pointer, a
    /// pair of them), or a null destination; false, having copied nothing, for the others.
    /// The operations' inline fast paths take only these, so that they make no call and
    /// need no callee-saved registers.
    ///
    /// # Safety
    /// As `copy`.
    #[inline(always)]
    unsafe fn copy_small(&self, src: *const u8, dst: *mut u8) -> bool {
        if dst.is_null() {
            return true;
        }
        // SAFETY: caller contract. One unaligned load and store; each reads the whole
        // element before writing, so overlap is fine, as with `ptr::copy` (not
        // `copy_nonoverlapping`: a C caller may send from the buffer another thread
        // receives into).
        unsafe {
            match self.elem_size() {
                0 => {}
                4 => dst
                    .cast::<u32>()
                    .write_unaligned(src.cast::<u32>().read_unaligned()),
                8 => dst
                    .cast::<u64>()
                    .write_unaligned(src.cast::<u64>().read_unaligned()),
                16 => dst
                    .cast::<u128>()
                    .write_unaligned(src.cast::<u128>().read_unaligned()),
                _ => return false,
            }
        }
        true
    }

    /// Zeroes one element at `dst` (if non-null).
    ///
    /// # Safety
    /// `dst` writable for `elem_size` bytes, or null.
    pub(crate) unsafe fn zero(&self, dst: *mut u8) {
        if self.elem_size() != 0 && !dst.is_null() {
            // SAFETY: caller contract.
            unsafe { core::ptr::write_bytes(dst, 0, self.elem_size()) };
        }
    }

    /// Sends without blocking (Go's chansend up to the point where it would park).
    ///
    /// # Safety
    /// Lock held, `s` is this channel's `synced()`; `elem` readable for `elem_size` bytes.
    #[inline(always)]
    pub(crate) unsafe fn send_locked(&self, s: &mut Synced, elem: *const u8) -> Now {
        if s.state != 0 {
            if s.state & ORPHANED != 0 {
                used_after_release();
            }
            return Now::Closed;
        }
        // SAFETY: lock held; a dequeued sudog's waiter is ours until we wake it.
        unsafe {
            let sg = s.recvq.dequeue();
            if !sg.is_null() {
                debug_assert!(
                    self.cap() == 0 || Ring::is_empty_at(s.head, s.tail),
                    "chan: a receiver waits beside buffered values"
                );
                // Direct hand-off into the blocked receiver's buffer (Go's sendDirect).
                self.copy(elem, (*sg).elem.get());
                return Now::Done(self.complete(s, sg, true));
            }
            if self.cap() != 0 && !self.ring.is_full_at(s.head, s.tail) {
                self.ring.push_excl(&mut s.tail, |dst| self.copy(elem, dst));
                return Now::Done(null());
            }
        }
        Now::Blocked
    }

    /// Receives without blocking (Go's chanrecv up to the point where it would park).
    ///
    /// # Safety
    /// Lock held, `s` is this channel's `synced()`; `out` writable for `elem_size` bytes,
    /// or null.
    #[inline(always)]
    pub(crate) unsafe fn recv_locked(&self, s: &mut Synced, out: *mut u8) -> Now {
        // SAFETY: lock held; a dequeued sudog's waiter is ours until we wake it.
        unsafe {
            if s.state != 0 {
                if s.state & ORPHANED != 0 {
                    used_after_release();
                }
                if self.cap() == 0 || Ring::is_empty_at(s.head, s.tail) {
                    self.zero(out);
                    return Now::Closed;
                }
            } else {
                let sg = s.sendq.dequeue();
                if !sg.is_null() {
                    if self.cap() == 0 {
                        // Straight from the blocked sender (Go's recvDirect).
                        self.copy((*sg).elem.get(), out);
                    } else {
                        debug_assert!(
                            self.ring.is_full_at(s.head, s.tail),
                            "chan: a sender waits beside free slots"
                        );
                        // The buffer is full: take its head, and put the sender's value in
                        // the freed slot, which becomes the tail.
                        self.ring.pop_excl(&mut s.head, |src| self.copy(src, out));
                        let elem = (*sg).elem.get();
                        self.ring.push_excl(&mut s.tail, |dst| self.copy(elem, dst));
                    }
                    return Now::Done(self.complete(s, sg, true));
                }
            }
            if self.cap() != 0 && !Ring::is_empty_at(s.head, s.tail) {
                self.ring.pop_excl(&mut s.head, |src| self.copy(src, out));
                return Now::Done(null());
            }
        }
        Now::Blocked
    }

    /// Records the outcome in a claimed sudog and drops its hold (its owner will not touch
    /// this channel for it again); returns its waiter, to wake after unlock.
    ///
    /// # Safety
    /// Lock held, `s` is this channel's `synced()`; `sg` was just dequeued and its waiter
    /// claimed by the caller.
    unsafe fn complete(&self, s: &mut Synced, sg: *const Sudog, success: bool) -> *const Waiter {
        // The caller operates with a handle of its own, so this is never the last hold of
        // an orphaned channel (recv_locked/send_locked/close throw on one): no need to ask.
        debug_assert!(s.nheld > 0, "chan: completing an unheld sudog");
        s.nheld -= 1;
        // SAFETY: caller contract: sg and its waiter are alive until the wake-up.
        unsafe {
            (*sg).success.set(success);
            let w = (*sg).waiter.get();
            // relaxed: published by the wake-up's release (goready / Note::wakeup).
            (*w).fired.store(sg as *mut Sudog, Ordering::Relaxed);
            w
        }
    }

    /// Sends `elem` (Go's chansend).
    ///
    /// # Safety
    /// `elem` readable for `elem_size` bytes until this returns.
    #[inline(always)]
    pub unsafe fn send(&self, elem: *const u8, mode: Mode) -> Result<(), ChanError> {
        // SAFETY: caller contract.
        unsafe { self.send_from(elem, mode, false) }
    }

    /// `send` (waiting) for the C entry, with `sys::quick_off` clear (so without TSan's
    /// hooks, which are off), on a channel in exclusive mode or after `send_quick`
    /// failed: the lock-free attempt then starts with the retry loop rather than another
    /// first look, which would touch the contended position and stamp once more without
    /// a pause.
    ///
    /// # Safety
    /// As `send`.
    #[inline(always)]
    pub(crate) unsafe fn send_after_quick(&self, elem: *const u8) -> Result<(), ChanError> {
        // SAFETY: caller contract.
        unsafe { self.send_from(elem, Mode::Block, true) }
    }

    /// `send`; if `quick_tried`, the lock-free attempt skips the first look and TSan's
    /// hooks are known to be off (`send_after_quick`).
    ///
    /// # Safety
    /// As `send`.
    #[inline(always)]
    unsafe fn send_from(
        &self,
        elem: *const u8,
        mode: Mode,
        quick_tried: bool,
    ) -> Result<(), ChanError> {
        if !quick_tried && crate::sys::tsan::on() {
            crate::sys::tsan::release(self as *const Chan as usize);
        }
        if self.cap() != 0 {
            // The safe point: a goroutine that never blocks on a channel is preempted when
            // sysmon asks, before its operation (as Go's chansend is, at its entry).
            if rt::preempt_wanted() {
                rt::preempt_check();
            }
            // The common case, without the lock: open, nobody waiting, room in the ring.
            if !self.ring.looks_exclusive() {
                let fill = |dst| {
                    // SAFETY: the ring gives us the slot's element bytes; elem per the
                    // caller.
                    unsafe { self.copy(elem, dst) }
                };
                // SAFETY: fill writes one element.
                let fast = unsafe {
                    if quick_tried {
                        self.ring.send_retry(fill)
                    } else {
                        self.ring.send_fast(fill)
                    }
                };
                match fast {
                    Fast::Done => return Ok(()),
                    Fast::WouldBlock if mode == Mode::Try => return Err(ChanError::WouldBlock),
                    _ => {}
                }
            }
        }
        // SAFETY: as above.
        if self.lock_op(|| unsafe { self.ring.send_fast(|dst| self.copy(elem, dst)) }) {
            return Ok(());
        }
        // SAFETY: lock held until the unlock below or finish_or_block's; elem per the caller
        // contract.
        unsafe {
            let s = self.synced();
            // The common case under the lock inline: open, no receiver waiting, room in
            // the ring (what send_locked does for it, without its calls and its result's
            // round trip through memory, which costs chan_mpmc's send and receive about 100
            // instructions per item: cachegrind of `bench/c/chan_mpmc`; skynet, whose
            // channels stay under the lock, feels it too: `scripts/ab.sh skynet`).
            if self.cap() != 0
                && s.state == 0
                && s.recvq.is_empty()
                && !self.ring.is_full_at(s.head, s.tail)
            {
                self.ring.push_excl(&mut s.tail, |dst| self.copy(elem, dst));
                self.unlock_calm(s);
                return Ok(());
            }
            let now = self.send_locked(s, elem);
            self.finish_or_block(now, elem as *mut u8, mode, true)
        }
    }

    /// The C entry's quick send (`ffi::chan`), for a channel whose exclusive-mode hint was
    /// clear (`EXCL_HINT_OFFSET`; an unbuffered channel's is always set) with
    /// `sys::quick_off` clear: the lock-free first look of `send` for the common case
    /// alone (an element of 0, 4, 8 or 16 bytes, no preemption asked, the first claim
    /// won). False for anything else, with nothing done: the caller then makes the rest
    /// of `send` (`send_after_quick`). Apart from `send` so that the C function for the
    /// common case is a leaf, without the six saved registers and the frame that `send`'s
    /// calls and locked path need: chan_mpmc at GOMAXPROCS=1 takes ~180 instructions per
    /// item this way, ~220 with the quick path inside `send` (cachegrind of
    /// `bench/c/chan_mpmc`; about what a channel that takes its lock for every operation,
    /// as Go's does, costs).
    ///
    /// # Safety
    /// As `send`; `elem` is not null.
    #[inline(always)]
    pub(crate) unsafe fn send_quick(&self, elem: *const u8) -> bool {
        let Some(size) = self.quick_size() else {
            return false;
        };
        // SAFETY: the ring gives us the slot's element bytes; elem per the caller.
        unsafe { self.ring.send_first(|dst| copy_sized(size, elem, dst)) }
    }

    /// The C entry's quick receive (as `send_quick`); `out` may be null (discard).
    ///
    /// # Safety
    /// As `recv`.
    #[inline(always)]
    pub(crate) unsafe fn recv_quick(&self, out: *mut u8) -> bool {
        let Some(size) = self.quick_size() else {
            return false;
        };
        // SAFETY: the ring gives us the slot's element bytes; out per the caller.
        unsafe {
            self.ring.recv_first(|src| {
                if !out.is_null() {
                    copy_sized(size, src, out)
                }
            })
        }
    }

    /// The element size, when a quick operation may go on: one `copy_sized` copies inline
    /// (0, 4, 8 or 16 bytes), and no preemption is asked (the safe point `send` and `recv`
    /// make at their entry is theirs to take).
    #[inline(always)]
    fn quick_size(&self) -> Option<usize> {
        let size = self.elem_size();
        (matches!(size, 0 | 4 | 8 | 16) && !rt::preempt_wanted()).then_some(size)
    }

    /// A select case's lock-free attempt (see `select`'s "Pass 0"): a send of `buf` (or a
    /// receive into it, which may be null) on a buffered channel outside exclusive mode.
    /// `Fast::Locked` for an unbuffered channel or one in (or entering) the mode: only the
    /// lock can tell whether its case can proceed.
    ///
    /// # Safety
    /// As `send` (`buf` readable) or `recv` (`buf` writable or null), for one element.
    #[inline(always)]
    pub(crate) unsafe fn select_fast(&self, send: bool, buf: *mut u8) -> Fast {
        if self.cap() == 0 || self.ring.looks_exclusive() {
            return Fast::Locked;
        }
        // SAFETY: caller contract.
        unsafe { self.ring_fast(send, buf) }
    }

    /// `select_fast` on a channel known to be buffered (`cap() != 0`).
    ///
    /// # Safety
    /// As `select_fast`; the channel is buffered.
    #[inline(always)]
    pub(crate) unsafe fn ring_fast(&self, send: bool, buf: *mut u8) -> Fast {
        // SAFETY: the ring gives us the slot's element bytes; buf per the caller.
        unsafe {
            if send {
                self.ring.send_fast(|dst| self.copy(buf, dst))
            } else {
                self.ring.recv_fast(|src| self.copy(src, buf))
            }
        }
    }

    /// The safe point of an unbuffered channel's send and receive, with the lock held (see
    /// `send`'s). The request is read under the lock: anything done between two
    /// acquisitions of a contended channel lock, even a few loads, hands the lock to the
    /// other CPU every time (a check before `lock` makes a contended unbuffered channel's
    /// operation markedly slower: `scripts/ab.sh -p 2 -a "-cap 0" chan_mpmc`).
    /// When it is set, the lock is dropped for the preemption and taken again.
    #[inline(always)]
    fn safepoint_locked(&self) {
        if rt::preempt_wanted() {
            self.preempt_unlocked();
        }
    }

    /// `safepoint_locked`'s rare half: drop the lock, be preempted, take it again.
    #[cold]
    #[inline(never)]
    fn preempt_unlocked(&self) {
        self.unlock_excl();
        rt::preempt_check();
        self.lock_excl();
    }

    /// Receives into `out` (may be null: discard) (Go's chanrecv).
    ///
    /// # Safety
    /// `out` writable for `elem_size` bytes until this returns, or null.
    #[inline(always)]
    pub unsafe fn recv(&self, out: *mut u8, mode: Mode) -> Result<(), ChanError> {
        // SAFETY: caller contract.
        unsafe { self.recv_from(out, mode, false) }
    }

    /// `recv` (waiting) for the C entry, with `sys::quick_off` clear (as
    /// `send_after_quick`).
    ///
    /// # Safety
    /// As `recv`.
    #[inline(always)]
    pub(crate) unsafe fn recv_after_quick(&self, out: *mut u8) -> Result<(), ChanError> {
        // SAFETY: caller contract.
        unsafe { self.recv_from(out, Mode::Block, true) }
    }

    /// `recv`; `quick_tried` as in `send_from`.
    ///
    /// # Safety
    /// As `recv`.
    #[inline(always)]
    unsafe fn recv_from(
        &self,
        out: *mut u8,
        mode: Mode,
        quick_tried: bool,
    ) -> Result<(), ChanError> {
        let r = 'op: {
            if self.cap() != 0 {
                // The safe point, as in `send`.
                if rt::preempt_wanted() {
                    rt::preempt_check();
                }
                // The common case, without the lock: open, nobody waiting (so the ring's
                // head is the next value in order), something buffered.
                if !self.ring.looks_exclusive() {
                    let drain = |src| {
                        // SAFETY: the ring gives us the slot's element bytes; out per the
                        // caller.
                        unsafe { self.copy(src, out) }
                    };
                    // SAFETY: drain reads one element.
                    let fast = unsafe {
                        if quick_tried {
                            self.ring.recv_retry(drain)
                        } else {
                            self.ring.recv_fast(drain)
                        }
                    };
                    match fast {
                        Fast::Done => break 'op Ok(()),
                        Fast::WouldBlock if mode == Mode::Try => {
                            break 'op Err(ChanError::WouldBlock);
                        }
                        _ => {}
                    }
                }
            }
            // SAFETY: as above.
            if self.lock_op(|| unsafe { self.ring.recv_fast(|src| self.copy(src, out)) }) {
                break 'op Ok(());
            }
            // SAFETY: lock held until the unlock below or finish_or_block's; out per the
            // caller contract.
            unsafe {
                let s = self.synced();
                // The common case under the lock inline (as in `send`): open, no sender
                // waiting (so the ring's head is the next value in order), something
                // buffered.
                if self.cap() != 0
                    && s.state == 0
                    && s.sendq.is_empty()
                    && !Ring::is_empty_at(s.head, s.tail)
                {
                    self.ring.pop_excl(&mut s.head, |src| self.copy(src, out));
                    self.unlock_calm(s);
                    break 'op Ok(());
                }
                let now = self.recv_locked(s, out);
                self.finish_or_block(now, out, mode, false)
            }
        };
        if !quick_tried && crate::sys::tsan::on() {
            crate::sys::tsan::acquire(self as *const Chan as usize);
        }
        r
    }

    /// Second half of send/recv: with the lock held and the attempt's outcome `now`,
    /// releases the lock and wakes the peer, or blocks on the send or receive queue.
    ///
    /// # Safety
    /// Lock held; `elem` is the operation's buffer.
    #[inline(always)]
    unsafe fn finish_or_block(
        &self,
        now: Now,
        elem: *mut u8,
        mode: Mode,
        is_send: bool,
    ) -> Result<(), ChanError> {
        match now {
            Now::Done(w) => {
                // SAFETY: lock held.
                let s = unsafe { self.synced() };
                s.count_op(!w.is_null());
                self.unlock_excl();
                if !w.is_null() {
                    // SAFETY: claimed by send_locked/recv_locked; lock released.
                    unsafe { rt::wake_waiter(w) };
                }
                Ok(())
            }
            Now::Closed => {
                self.unlock_excl();
                Err(ChanError::Closed)
            }
            // SAFETY: lock held (caller contract).
            Now::Blocked => unsafe { self.block_op(elem, mode, is_send) },
        }
    }

    /// `finish_or_block`'s blocking half, out of line: its frame holds the waiter and the
    /// sudog, 64-aligned, which an operation that completes at once (a ping-pong's every
    /// other one) paid for in the same function (~35 instructions of prologue and
    /// epilogue).
    ///
    /// # Safety
    /// As `finish_or_block`, which found the operation must wait.
    #[inline(never)]
    unsafe fn block_op(&self, elem: *mut u8, mode: Mode, is_send: bool) -> Result<(), ChanError> {
        let deadline = match mode.wait_for() {
            Ok(d) => d,
            Err(e) => {
                self.unlock_excl();
                return Err(e);
            }
        };
        let sc = rt::scope::current();
        let deadline = rt::scope::clamp(sc, deadline);
        // With no deadline and no scope, only this channel's lock holders can complete
        // the wait.
        let w = Waiter::new(deadline.is_none() && sc.is_null());
        // On our stack, beside the waiter (a select, with a sudog per case, takes them from
        // the caches): the frame outlives every access to it (the lifetime rules in
        // rt/sudog.rs), and a parked goroutine then costs no runtime memory for it.
        let sgv = Sudog::new();
        let sg = &sgv;
        sg.prepare(&w, elem, 0);
        let me: *const Chan = self;
        // SAFETY: lock held; w lives in this frame until block returns and, on a timeout,
        // until we removed sg again below; sg is ours until we release it.
        let fired = unsafe {
            let s = self.synced();
            // The channel must outlive this wait even if its handles go (see "Lifetime").
            s.hold();
            if is_send {
                s.sendq.enqueue(sg);
            } else {
                s.recvq.enqueue(sg);
            }
            let reason = if is_send {
                WaitReason::ChanSend
            } else {
                WaitReason::ChanRecv
            };
            waitq::block(&w, &[me], deadline, reason, sc)
        };
        let result = if !fired {
            self.lock_excl();
            // SAFETY: lock held; sg was queued on this queue. Our hold keeps the channel.
            let destroy = unsafe {
                let s = self.synced();
                if is_send {
                    s.sendq.remove(sg);
                } else {
                    s.recvq.remove(sg);
                }
                s.unhold()
            };
            self.unlock_excl();
            if destroy {
                // SAFETY: we dropped the last hold of an orphaned channel under its lock,
                // and do not touch it again.
                unsafe { Chan::destroy(me as *mut Chan) };
            }
            Err(ChanError::ended())
        } else if sg.success.get() {
            Ok(())
        } else {
            Err(ChanError::Closed)
        };
        // sg is on no queue (dequeued by its waker, or removed above) and the waker's last
        // access to it preceded our wake-up: the frame may go.
        debug_assert!(
            sg.next.get().is_null() && sg.prev.get().is_null(),
            "chan: returning with a queued sudog"
        );
        result
    }

    /// Closes the channel (Go's closechan): every blocked receiver gets the zero value and
    /// `Closed`, every blocked sender `Closed`.
    pub fn close(&self) -> Result<(), ChanError> {
        if crate::sys::tsan::on() {
            crate::sys::tsan::release(self as *const Chan as usize);
        }
        self.lock_excl();
        // SAFETY: lock held.
        let s = unsafe { self.synced() };
        if s.state & ORPHANED != 0 {
            used_after_release();
        }
        if s.state & CLOSED != 0 {
            self.unlock_excl();
            return Err(ChanError::Closed);
        }
        s.state |= CLOSED;
        // Claim every waiter under the lock; wake them after releasing it.
        let mut list: *const Waiter = null();
        // SAFETY: lock held; dequeued sudogs' waiters are claimed by us and alive until
        // woken; the list links through claimed waiters only.
        unsafe {
            loop {
                let sg = s.recvq.dequeue();
                if sg.is_null() {
                    break;
                }
                self.zero((*sg).elem.get());
                let w = self.complete(s, sg, false);
                (*w).wake_link.set(list);
                list = w;
            }
            loop {
                let sg = s.sendq.dequeue();
                if sg.is_null() {
                    break;
                }
                let w = self.complete(s, sg, false);
                (*w).wake_link.set(list);
                list = w;
            }
        }
        self.unlock_excl();
        while !list.is_null() {
            // SAFETY: read the link before the wake-up, our last access to that waiter.
            unsafe {
                let next = (*list).wake_link.get();
                rt::wake_waiter(list);
                list = next;
            }
        }
        Ok(())
    }
}

/// Adds the goroutine of `sg`'s waiter to `out` if nothing can wake it once the channel's
/// last handle is gone (rt/leaks.rs): a plain operation without a deadline
/// (`Waiter::exclusive`: this sudog is its only one and no timer can claim it) of a
/// goroutine, not yet claimed.
///
/// # Safety
/// The channel lock is held and `sg` is on one of its queues.
unsafe fn leaked_waiter(sg: &Sudog, out: &mut Vec<*mut rt::G>) {
    // SAFETY: caller contract: a queued sudog's waiter is alive while the lock is held.
    let w = unsafe { &*sg.waiter.get() };
    if w.exclusive && !w.g.is_null() && w.done.load(Ordering::Relaxed) == 0 {
        out.push(w.g);
    }
}

impl waitq::Unlock for Chan {
    /// `unlock_excl`: the lock of a channel whose sudog was queued in exclusive mode.
    #[inline(always)]
    unsafe fn unlock(&self) {
        self.unlock_excl();
    }

    /// The bare lock: the holder's critical section is over when it returns.
    unsafe fn barrier(&self) {
        self.lock.lock();
        self.lock.unlock();
    }
}

/// Channel headers: those of destroyed channels, for `make` to reuse (see "Lifetime"),
/// and a slab that new ones are carved from. Headers are never freed, so a slab of
/// [`HEADERS_PER_SLAB`] is one allocation instead of one `posix_memalign` per header (Chan
/// is 64-aligned, which glibc serves by splitting a larger chunk and freeing the rest).
/// On skynet (1M leaves, GOMAXPROCS=1; cachegrind and `perf stat`) slabs take slightly
/// fewer instructions, last-level misses and page faults, and about 1 MB less peak RSS,
/// than a `Box` per header.
struct Headers {
    free: Vec<usize>,
    /// The slab's next uncarved header and its end (both 0 before the first slab).
    next: usize,
    end: usize,
}

/// Headers carved from one allocation (16 KiB).
const HEADERS_PER_SLAB: usize = 64;

impl Headers {
    /// Memory for one new header, or None if no slab could be allocated.
    fn carve(&mut self) -> Option<*mut Chan> {
        if self.next == self.end {
            let layout = std::alloc::Layout::array::<Chan>(HEADERS_PER_SLAB).ok()?;
            // SAFETY: the layout has a nonzero size. Never freed (headers are type-stable).
            let slab = unsafe { std::alloc::alloc(layout) };
            if slab.is_null() {
                return None;
            }
            self.next = slab as usize;
            self.end = self.next + layout.size();
        }
        let c = self.next as *mut Chan;
        self.next += core::mem::size_of::<Chan>();
        Some(c)
    }
}

/// The header lists. A leaf lock: taken with no channel lock held.
fn headers() -> std::sync::MutexGuard<'static, Headers> {
    static HEADERS: std::sync::Mutex<Headers> = std::sync::Mutex::new(Headers {
        free: Vec::new(),
        next: 0,
        end: 0,
    });
    // A poisoned lock only means a panic elsewhere while pushing, popping or carving: the
    // lists are consistent.
    HEADERS.lock().unwrap_or_else(|e| e.into_inner())
}
