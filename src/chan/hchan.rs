//! The channel (Go's hchan, chan.go): a lock, a ring buffer of `cap` elements of
//! `elem_size` bytes, and the queues of blocked receivers and senders.
//!
//! # Invariants (under `lock`)
//! - At least one of `recvq` and `sendq` is empty, except for a select waiting on both
//!   directions of one channel (its own sudogs never match each other: it is parked).
//! - Buffered: `sendq` is non-empty only if the buffer is full; `recvq` only if it is empty.
//! - Unbuffered: `qcount == 0`; a value goes straight from the sender's `elem` to the
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
use core::sync::atomic::{AtomicUsize, Ordering};

use super::waitq::{self, WaitQ};
use crate::rt::sudog::{self, Sudog, Waiter};
use crate::rt::{self, WaitReason};
use crate::sys::{self, Lock};

/// Why an operation did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChanError {
    /// The channel is closed (receive: and drained).
    Closed,
    /// The non-blocking form would have blocked.
    WouldBlock,
    /// The deadline passed first.
    TimedOut,
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

/// The lock-protected half of a channel.
pub(crate) struct Synced {
    qcount: usize,
    sendx: usize,
    recvx: usize,
    /// `CLOSED` and `ORPHANED` bits, in one byte so that the operations' fast paths test
    /// both with the one comparison they made for `closed` alone.
    state: u8,
    pub recvq: WaitQ,
    pub sendq: WaitQ,
    /// Holds by blocked operations (see "Lifetime").
    nheld: usize,
}

/// `Synced::state`: closed (never reverts).
const CLOSED: u8 = 1;
/// `Synced::state`: the last handle is gone; the last hold destroys the channel (see
/// "Lifetime"). Never reverts (until the header is made into a new channel).
const ORPHANED: u8 = 2;

/// An operation, retain or release on a channel whose last handle was released.
#[cold]
fn used_after_release() -> ! {
    crate::rt::throw("channel used after its last gmp_chan_release")
}

impl Synced {
    /// Takes a hold for a blocked operation (a queued sudog, or a select's channel).
    pub(crate) fn hold(&mut self) {
        if self.state & ORPHANED != 0 {
            used_after_release();
        }
        self.nheld += 1;
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
pub struct Chan {
    pub(crate) lock: Lock,
    /// Owner: the holder of `lock`.
    synced: UnsafeCell<Synced>,
    /// Copy of `qcount` for `len` (written under the lock, read without it).
    len: AtomicUsize,
    /// Handles (see "Lifetime").
    refs: AtomicUsize,
    elem_size: usize,
    cap: usize,
    /// `elem_size * cap` bytes (null when that is 0).
    buf: *mut u8,
}

// SAFETY: the mutable state is behind `lock` (Synced), atomics, or immutable after make.
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

const BUF_ALIGN: usize = 16;

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
        let bytes = elem_size.checked_mul(cap).ok_or(libc::EINVAL)?;
        let buf = if bytes == 0 {
            core::ptr::null_mut()
        } else {
            let layout =
                std::alloc::Layout::from_size_align(bytes, BUF_ALIGN).map_err(|_| libc::EINVAL)?;
            // SAFETY: layout has a nonzero size.
            let p = unsafe { std::alloc::alloc(layout) };
            if p.is_null() {
                return Err(libc::ENOMEM);
            }
            p
        };
        let new = Chan {
            lock: Lock::new(),
            synced: UnsafeCell::new(Synced {
                qcount: 0,
                sendx: 0,
                recvx: 0,
                state: 0,
                recvq: WaitQ::new(),
                sendq: WaitQ::new(),
                nheld: 0,
            }),
            len: AtomicUsize::new(0),
            refs: AtomicUsize::new(1),
            elem_size,
            cap,
            buf,
        };
        let reuse = free_headers().pop();
        match reuse {
            Some(c) => {
                let c = c as *mut Chan;
                // SAFETY: a destroyed channel's header: nobody may use it any more (its
                // last handle and hold are gone), and it is never deallocated. Chan has no
                // drop glue, so overwriting it in place leaks nothing.
                unsafe { c.write(new) };
                Ok(c)
            }
            None => Ok(Box::into_raw(Box::new(new))),
        }
    }

    /// Adds a handle. Throws if the channel has none left (a released handle).
    pub fn retain(&self) {
        // relaxed: a new reference is made from an existing one (as Arc::clone).
        if self.refs.fetch_add(1, Ordering::Relaxed) == 0 {
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
        match ch.refs.fetch_sub(1, Ordering::Release) {
            0 => crate::rt::throw("gmp_chan_release: channel released more often than retained"),
            1 => {}
            _ => return,
        }
        core::sync::atomic::fence(Ordering::Acquire);
        ch.lock.lock();
        // SAFETY: lock held.
        let destroy = unsafe {
            let s = ch.synced();
            s.state |= ORPHANED;
            s.nheld == 0
        };
        ch.lock.unlock();
        if destroy {
            // SAFETY: no handle and no hold left; we decided under the lock.
            unsafe { Chan::destroy(c) };
        }
    }

    /// Frees the buffer and puts the header on the free list (see "Lifetime").
    ///
    /// # Safety
    /// Called once, by the party that found the channel orphaned and unheld under its
    /// lock, after releasing the lock.
    pub(crate) unsafe fn destroy(c: *mut Chan) {
        // SAFETY: caller contract: nobody else uses the channel; buf was allocated by make
        // with this layout.
        unsafe {
            let ch = &mut *c;
            if !ch.buf.is_null() {
                let layout =
                    std::alloc::Layout::from_size_align_unchecked(ch.elem_size * ch.cap, BUF_ALIGN);
                std::alloc::dealloc(ch.buf, layout);
                ch.buf = core::ptr::null_mut();
            }
        }
        free_headers().push(c as usize);
    }

    pub fn elem_size(&self) -> usize {
        self.elem_size
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Buffered elements (a snapshot).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
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

    /// Slot `i` of the ring buffer.
    fn slot(&self, i: usize) -> *mut u8 {
        // i < cap, so the offset is inside the buffer (or 0 for zero-size elements).
        self.buf.wrapping_add(i * self.elem_size)
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
                core::ptr::copy(src, dst, self.elem_size);
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
            match self.elem_size {
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
        if self.elem_size != 0 && !dst.is_null() {
            // SAFETY: caller contract.
            unsafe { core::ptr::write_bytes(dst, 0, self.elem_size) };
        }
    }

    /// Sends without blocking (Go's chansend up to the point where it would park).
    ///
    /// # Safety
    /// Lock held, `s` is this channel's `synced()`; `elem` readable for `elem_size` bytes.
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
                // Direct hand-off into the blocked receiver's buffer (Go's sendDirect).
                self.copy(elem, (*sg).elem.get());
                return Now::Done(self.complete(s, sg, true));
            }
            if s.qcount < self.cap {
                self.push(s, elem);
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
    pub(crate) unsafe fn recv_locked(&self, s: &mut Synced, out: *mut u8) -> Now {
        // SAFETY: lock held; a dequeued sudog's waiter is ours until we wake it.
        unsafe {
            if s.state != 0 {
                if s.state & ORPHANED != 0 {
                    used_after_release();
                }
                if s.qcount == 0 {
                    self.zero(out);
                    return Now::Closed;
                }
            } else {
                let sg = s.sendq.dequeue();
                if !sg.is_null() {
                    if self.cap == 0 {
                        // Straight from the blocked sender (Go's recvDirect).
                        self.copy((*sg).elem.get(), out);
                    } else {
                        // The buffer is full: take its head, and put the sender's value in
                        // the freed slot, which becomes the tail.
                        let slot = self.slot(s.recvx);
                        self.copy(slot, out);
                        self.copy((*sg).elem.get(), slot);
                        s.recvx += 1;
                        if s.recvx == self.cap {
                            s.recvx = 0;
                        }
                        s.sendx = s.recvx;
                    }
                    return Now::Done(self.complete(s, sg, true));
                }
            }
            if s.qcount > 0 {
                self.pop(s, out);
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
        if crate::sys::tsan::on() {
            crate::sys::tsan::release(self as *const Chan as usize);
        }
        self.lock.lock();
        self.safepoint_locked();
        // SAFETY: lock held until the unlock below; elem per the caller contract.
        unsafe {
            let s = self.synced();
            // The common case inline: open, no receiver waiting, room in the buffer (what
            // send_locked does for it, without its calls and its result's round trip
            // through memory: chan_mpmc's send and receive went from ~280 instructions
            // per item to ~180).
            if s.qcount < self.cap
                && s.state == 0
                && s.recvq.is_empty()
                && self.copy_small(elem, self.slot(s.sendx))
            {
                self.pushed(s);
                self.lock.unlock();
                return Ok(());
            }
            let now = self.send_locked(s, elem);
            self.finish_or_block(now, elem as *mut u8, mode, true)
        }
    }

    /// Appends `elem` to the buffer, which has room.
    ///
    /// # Safety
    /// Lock held, `s` is this channel's `synced()`, `s.qcount < cap`; `elem` readable for
    /// `elem_size` bytes.
    #[inline(always)]
    unsafe fn push(&self, s: &mut Synced, elem: *const u8) {
        // SAFETY: caller contract: sendx < cap names a free slot.
        unsafe { self.copy(elem, self.slot(s.sendx)) };
        self.pushed(s);
    }

    /// Advances the buffer's tail over the slot `sendx` just filled.
    #[inline(always)]
    fn pushed(&self, s: &mut Synced) {
        s.sendx += 1;
        if s.sendx == self.cap {
            s.sendx = 0;
        }
        s.qcount += 1;
        self.len.store(s.qcount, Ordering::Relaxed);
    }

    /// Takes the buffer's head into `out` (may be null).
    ///
    /// # Safety
    /// Lock held, `s` is this channel's `synced()`, `s.qcount > 0`; `out` writable for
    /// `elem_size` bytes, or null.
    #[inline(always)]
    unsafe fn pop(&self, s: &mut Synced, out: *mut u8) {
        // SAFETY: caller contract: recvx < cap names a full slot.
        unsafe { self.copy(self.slot(s.recvx), out) };
        self.popped(s);
    }

    /// Advances the buffer's head over the slot `recvx` just emptied.
    #[inline(always)]
    fn popped(&self, s: &mut Synced) {
        s.recvx += 1;
        if s.recvx == self.cap {
            s.recvx = 0;
        }
        s.qcount -= 1;
        self.len.store(s.qcount, Ordering::Relaxed);
    }

    /// The safe point of send and receive, with the lock held: a goroutine that never
    /// blocks on a channel is preempted when sysmon asks, before its operation (as Go's
    /// chansend/chanrecv are, at their entry). The request is read under the lock: anything
    /// done between two acquisitions of a contended channel lock, even a few loads, hands
    /// the lock to the other CPU every time (chan_mpmc at GOMAXPROCS=2: 21 ns per item
    /// without a check, 37 ns with it before `lock`; HACKING "Channels"). When it is set,
    /// the lock is dropped for the preemption and taken again.
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
        self.lock.unlock();
        rt::preempt_check();
        self.lock.lock();
    }

    /// Receives into `out` (may be null: discard) (Go's chanrecv).
    ///
    /// # Safety
    /// `out` writable for `elem_size` bytes until this returns, or null.
    #[inline(always)]
    pub unsafe fn recv(&self, out: *mut u8, mode: Mode) -> Result<(), ChanError> {
        self.lock.lock();
        self.safepoint_locked();
        // SAFETY: lock held until the unlock below (or in finish_or_block); out per the
        // caller contract.
        let r = unsafe {
            let s = self.synced();
            // The common case inline (as in `send`): open, no sender waiting (so the
            // buffer's head is the next value in order), something buffered.
            if s.qcount > 0
                && s.state == 0
                && s.sendq.is_empty()
                && self.copy_small(self.slot(s.recvx), out)
            {
                self.popped(s);
                self.lock.unlock();
                Ok(())
            } else {
                let now = self.recv_locked(s, out);
                self.finish_or_block(now, out, mode, false)
            }
        };
        if crate::sys::tsan::on() {
            crate::sys::tsan::acquire(self as *const Chan as usize);
        }
        r
    }

    /// Second half of send/recv: with the lock held and the attempt's outcome `now`,
    /// releases the lock and wakes the peer, or blocks on the send or receive queue.
    ///
    /// # Safety
    /// Lock held; `elem` is the operation's buffer.
    unsafe fn finish_or_block(
        &self,
        now: Now,
        elem: *mut u8,
        mode: Mode,
        is_send: bool,
    ) -> Result<(), ChanError> {
        match now {
            Now::Done(w) => {
                self.lock.unlock();
                if !w.is_null() {
                    // SAFETY: claimed by send_locked/recv_locked; lock released.
                    unsafe { sudog::wake(w) };
                }
                return Ok(());
            }
            Now::Closed => {
                self.lock.unlock();
                return Err(ChanError::Closed);
            }
            Now::Blocked => {}
        }
        let deadline = match mode.wait_for() {
            Ok(d) => d,
            Err(e) => {
                self.lock.unlock();
                return Err(e);
            }
        };
        // With no deadline, only this channel's lock holders can complete the wait.
        let w = Waiter::new(deadline.is_none());
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
            waitq::block(&w, &[me], deadline, reason)
        };
        let result = if !fired {
            self.lock.lock();
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
            self.lock.unlock();
            if destroy {
                // SAFETY: we dropped the last hold of an orphaned channel under its lock,
                // and do not touch it again.
                unsafe { Chan::destroy(me as *mut Chan) };
            }
            Err(ChanError::TimedOut)
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
        self.lock.lock();
        // SAFETY: lock held.
        let s = unsafe { self.synced() };
        if s.state & ORPHANED != 0 {
            used_after_release();
        }
        if s.state & CLOSED != 0 {
            self.lock.unlock();
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
        self.lock.unlock();
        while !list.is_null() {
            // SAFETY: read the link before the wake-up, our last access to that waiter.
            unsafe {
                let next = (*list).wake_link.get();
                sudog::wake(list);
                list = next;
            }
        }
        Ok(())
    }
}

/// Headers of destroyed channels, for `make` to reuse (see "Lifetime"). A leaf lock: taken
/// with no channel lock held.
fn free_headers() -> std::sync::MutexGuard<'static, Vec<usize>> {
    static FREE: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
    // A poisoned lock only means a panic elsewhere while pushing or popping: the list is
    // consistent.
    FREE.lock().unwrap_or_else(|e| e.into_inner())
}
