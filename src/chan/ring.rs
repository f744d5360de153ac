//! A buffered channel's ring: lock-free for senders and receivers while nobody waits on
//! the channel, a plain ring under the channel's lock otherwise.
//!
//! # Why not only the lock, as Go
//! Go's buffered channel takes its lock for every send and receive. Contended from two
//! CPUs, the cost is the lock's cache line moving and the pollers waiting for the holder,
//! not the work under it (with a lock per operation, chan_mpmc at GOMAXPROCS=2 spends
//! about half its time in `Lock::lock_slow`: `perf record` of `bench/c/chan_mpmc`). Here a
//! send claims a slot with one CAS on `tail` and a receive with one CAS on `head` (the
//! array flavour of crossbeam-channel, after Vyukov's bounded queue): senders and
//! receivers do not wait for each other.
//!
//! # Positions and stamps
//! `head` (next slot to receive) and `tail` (next slot to fill) are positions: a lap
//! number times `one_lap` (the power of two above `cap`) plus an index below `cap`, so a
//! position never repeats. Each slot has a stamp: equal to position `p` when the slot is
//! free for the send at `p`, to `p + 1` when it holds the value sent at `p`. A sender at
//! `tail == p` whose slot's stamp is `p` claims the slot by moving `tail` on with a CAS,
//! copies its value in and stores the stamp `p + 1` (release); a receiver at `head == p`
//! whose slot's stamp is `p + 1` claims it by moving `head` on, copies the value out and
//! stores the stamp `p + one_lap` (release): free for the sender one lap later. The
//! stamp's release/acquire pair hands the slot's bytes from one side to the other.
//!
//! Stamps are stored minus their slot's index, so that a zeroed buffer (`chan::buf`: the
//! allocator's, zeroed, or fresh zero pages of a mapping, or a kept buffer cleared with one
//! `memset`) is the initial state.
//!
//! # Exclusive mode: the lock's half
//! Everything that waits, closes or needs Go's order between a blocked peer and the ring
//! (a blocked sender's value enters the ring when a receiver frees a slot, before any
//! newer send) runs under the channel lock, as in Go. The lock holder first puts the ring
//! in exclusive mode: it sets the [`EXCL`] bit in `head` and in `tail`, each with one RMW,
//! which also returns the positions. From then on every fast operation sees the bit (or
//! fails its CAS: the word it expects has no bit) and goes to the lock. An operation that
//! claimed a position before the bit landed may still be copying: its position is below
//! the `tail` (or `head`) the holder's RMW returned, so the holder counts it and, when it
//! needs that very slot, waits for its stamp. Nothing else moves. The holder keeps the
//! positions beside the lock (`Synced::head`, `tail`) and writes the words again only when
//! it leaves: under the lock a channel touches the lock's line and the slots', as Go's,
//! and a fast operation's look at a word in exclusive mode reads a line nobody writes.
//!
//! A ring starts in exclusive mode. The holder leaves it (plain stores of the positions,
//! without the bit) when it unlocks with nobody waiting on the channel, the channel open,
//! and the last operations under the lock neither waited nor woke anyone
//! (`Chan::unlock_excl`, `CALM_RUN`). While anybody waits, or once the channel is closed
//! or orphaned, the bit stays: the waiters' queues and the ring are then Go's, under the
//! lock.
//!
//! Who writes what:
//! - `head`: fast receivers (CAS, bit clear); the lock holder (an RMW to set the bit, a
//!   store of the position it kept to clear it).
//! - `tail`: the same, with fast senders.
//! - `Synced::head`, `Synced::tail`: the lock holder, in exclusive mode.
//! - a slot's stamp and bytes: whoever claimed its position (a fast operation, or the lock
//!   holder in exclusive mode), until it stores the next stamp.
//!
//! A claimed position is always finished: fast operations run in the runtime's own code,
//! which asynchronous preemption never stops (rt/preempt.rs), so a wait for a stamp only
//! waits for another CPU's copy, or for a thread the kernel descheduled (it yields then).

use crate::loom::sync::atomic::{AtomicU64, Ordering::*};

/// Bit 63 of `head` and `tail`: the ring is in exclusive mode (see the module doc).
/// Positions never reach it: they grow by at most 2 per operation (`one_lap` is at most
/// twice `cap`), so after 2^62 operations.
pub(crate) const EXCL: u64 = 1 << 63;

/// Outcome of a fast (lock-free) operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fast {
    /// Done.
    Done,
    /// The ring is full (send) or empty (receive), and not in exclusive mode when looked at.
    WouldBlock,
    /// In exclusive mode: take the channel lock.
    Locked,
}

/// `head` or `tail`, on a line of its own: senders write one, receivers the other, and
/// neither the line with the sizes that both read.
#[repr(align(64))]
struct Line(AtomicU64);

/// The ring of a buffered channel (`cap > 0`; an unbuffered channel has one of capacity
/// 0, which only gives its element size). See the module documentation.
///
/// Three cache lines: the sizes (which every operation reads and only `make` and the mode
/// changes write, with the channel's handle count), `head` and `tail`. On one line with
/// the sizes, `head` and `tail` make chan_mpmc at GOMAXPROCS=2 several times slower
/// (every CAS takes the line from the other CPU's reads). The lines cost channels that are
/// made by the thousand (docs/internals/channels.md, "The header and the free list"): a
/// channel under its lock reads only the sizes' line of the three.
#[repr(C)]
pub(crate) struct Ring {
    /// Slots, `cap` of them.
    cap: u64,
    /// The power of two above `cap`: one lap's step in a position.
    one_lap: u64,
    /// Bytes per element.
    elem_size: usize,
    /// Bytes per slot, as a shift ([`Ring::stride`] of `elem_size` is `1 << shift`).
    shift: u32,
    /// The slots' storage.
    slots: Slots,
    /// Not the ring's: its channel's handle count, which shares the sizes' line (written
    /// by retain and release only).
    pub(crate) refs: core::sync::atomic::AtomicUsize,
    /// A copy of the mode on the sizes' line, set by `enter` and cleared by `leave`: an
    /// operation that finds it set goes to the lock without reading `head` or `tail`, so
    /// that a channel under its lock touches the lines Go's does (the sizes' and the
    /// lock's), not four. Only a hint: the words decide.
    excl_hint: core::sync::atomic::AtomicBool,
    head: Line,
    tail: Line,
}

/// Where `excl_hint` is in a ring, for the C entries' first test (`Chan::EXCL_HINT_OFFSET`).
pub(crate) const EXCL_HINT_OFFSET: usize = core::mem::offset_of!(Ring, excl_hint);

/// The storage: `cap` slots of [`Ring::stride`] bytes, each a stamp (u64, minus the
/// slot's index) followed by the element. Under loom the stamps are loom atomics and the
/// elements (u64) loom cells instead, so that the models check the stamps' hand-off of
/// the bytes.
struct Slots {
    buf: *mut u8,
    #[cfg(all(test, loom))]
    stamps: Vec<AtomicU64>,
    #[cfg(all(test, loom))]
    elems: Vec<crate::loom::cell::UnsafeCell<u64>>,
}

/// Where a slot's element lives, in bytes after its stamp.
const ELEM_OFFSET: usize = 8;

/// A slot, found once per operation: its address (under loom, its index into the
/// model's stamps and elements).
#[derive(Clone, Copy)]
struct SlotRef(
    #[cfg(not(all(test, loom)))] *mut u8,
    #[cfg(all(test, loom))] usize,
);

/// The ring's shape ([`Ring::geo`]): the fields an operation uses, copied out once.
#[derive(Clone, Copy)]
struct Geo {
    // Under loom a slot is an index into the model's vectors (`Geo::slot`).
    #[cfg_attr(all(test, loom), allow(dead_code))]
    buf: *mut u8,
    #[cfg_attr(all(test, loom), allow(dead_code))]
    shift: u32,
    /// `one_lap - 1`: a position's index bits.
    mask: u64,
    cap: u64,
    one_lap: u64,
}

impl Geo {
    /// The slot index of a position.
    #[inline(always)]
    fn index(self, pos: u64) -> usize {
        (pos & self.mask) as usize
    }

    /// The position after `pos` (no [`EXCL`] bit).
    #[inline(always)]
    fn next(self, pos: u64) -> u64 {
        // At the last index the next lap's index 0: `pos - index + one_lap`, which is
        // `pos + 1` and the lap's unused indices (a form that needs fewer registers).
        let skip = if (pos & self.mask) + 1 == self.cap {
            self.one_lap - self.cap
        } else {
            0
        };
        pos + 1 + skip
    }

    /// Slot `i` (< cap).
    #[cfg(not(all(test, loom)))]
    #[inline(always)]
    fn slot(self, i: usize) -> SlotRef {
        SlotRef(self.buf.wrapping_add(i << self.shift))
    }

    #[cfg(all(test, loom))]
    fn slot(self, i: usize) -> SlotRef {
        SlotRef(i)
    }
}

/// How a waiter for a stamp or a losing CAS backs off: exponentially more pauses (two CPUs
/// hammering one line hand it back and forth at every poll otherwise), then yields.
struct Backoff(u32);

impl Backoff {
    fn new() -> Backoff {
        Backoff(0)
    }

    /// Pauses 1, 2, 4 .. 64 reference pauses (~1.6 µs in all), then yields the CPU.
    #[cfg(not(all(test, loom)))]
    fn snooze(&mut self) {
        const YIELD_AFTER: u32 = 7;
        if self.0 < YIELD_AFTER {
            crate::sys::procyield(1 << self.0);
            self.0 += 1;
        } else {
            crate::sys::osyield();
        }
    }

    #[cfg(all(test, loom))]
    fn snooze(&mut self) {
        self.0 += 1;
        crate::loom::thread::yield_now();
    }
}

// SAFETY: the slots are reached only through the stamp protocol (module doc), which gives
// each slot's bytes to one party at a time; the rest are atomics or immutable.
unsafe impl Sync for Ring {}
// SAFETY: as above; the ring owns its storage.
unsafe impl Send for Ring {}

impl Ring {
    /// The power of two above `cap` (positions' lap step).
    fn lap_of(cap: usize) -> u64 {
        (cap as u64 + 1).next_power_of_two()
    }

    /// A ring over `buf`, which holds `cap` slots of [`Ring::stride`] bytes and is zeroed,
    /// in exclusive mode. (Under loom, `buf` is kept but not used: the slots are the
    /// model's, of 8 bytes.)
    ///
    /// # Safety
    /// `buf` is valid for `cap * stride(elem_size)` bytes, aligned to 8, zeroed, and owned
    /// by the ring until it is dropped by its channel (which frees it).
    pub(crate) unsafe fn new(buf: *mut u8, cap: usize, elem_size: usize) -> Ring {
        Ring {
            head: Line(AtomicU64::new(EXCL)),
            tail: Line(AtomicU64::new(EXCL)),
            refs: core::sync::atomic::AtomicUsize::new(1),
            excl_hint: core::sync::atomic::AtomicBool::new(true),
            cap: cap as u64,
            one_lap: Ring::lap_of(cap),
            elem_size,
            shift: Ring::stride(elem_size).trailing_zeros(),
            slots: Slots {
                buf,
                #[cfg(all(test, loom))]
                stamps: (0..cap).map(|_| AtomicU64::new(0)).collect(),
                #[cfg(all(test, loom))]
                elems: (0..cap)
                    .map(|_| crate::loom::cell::UnsafeCell::new(0))
                    .collect(),
            },
        }
    }

    /// Whether a ring of `cap` slots made over this destroyed ring's kept buffer may
    /// continue from this ring's positions `head` and `tail` (kept by its channel in
    /// exclusive mode) instead of starting at 0 over a cleared buffer: only if it is empty
    /// there and has the same number of slots. A position's slot index and its lap step
    /// both depend on `cap`, and so do the stamps the buffer holds: two shapes of one
    /// byte size (8-byte elements in 2 slots, 24-byte ones in 1) read another ring's
    /// positions as slots it does not have, and an operation then waits forever for a
    /// stamp nobody will store, or writes past the buffer.
    pub(crate) fn resumes_at(&self, cap: usize, head: u64, tail: u64) -> bool {
        self.cap == cap as u64 && Ring::is_empty_at(head, tail)
    }

    /// Takes the place of a destroyed channel's ring (`make` reusing its header): `new`'s
    /// fields, written one by one (the padding of `head`'s and `tail`'s lines is not), and
    /// `head` and `tail` only if `words` (else they keep the old ring's bit and stale
    /// positions, the channel its positions, and the ring its slots: see
    /// [`Ring::resumes_at`], which must have said yes).
    pub(crate) fn renew(&mut self, new: Ring, words: bool) {
        let Ring {
            cap,
            one_lap,
            elem_size,
            shift,
            slots,
            refs,
            excl_hint,
            head,
            tail,
        } = new;
        if words {
            self.slots = slots;
            self.head.0 = head.0;
            self.tail.0 = tail.0;
        } else {
            debug_assert!(self.in_excl(), "chan: a kept ring outside exclusive mode");
            debug_assert!(
                self.cap == cap && self.one_lap == one_lap,
                "chan: a kept ring resumed with another shape"
            );
            // The same storage (under loom, the same model slots with their stamps).
            debug_assert!(core::ptr::eq(self.slots.buf, slots.buf));
        }
        (self.cap, self.one_lap, self.elem_size, self.shift) = (cap, one_lap, elem_size, shift);
        self.refs = refs;
        self.excl_hint = excl_hint;
    }

    /// Whether the ring looked to be in exclusive mode (a hint: see `excl_hint`).
    #[inline(always)]
    pub(crate) fn looks_exclusive(&self) -> bool {
        self.excl_hint.load(Relaxed)
    }

    /// Drops the ring's buffer, which its destroyed channel freed.
    pub(crate) fn forget_buf(&mut self) {
        self.slots.buf = core::ptr::null_mut();
    }

    /// Bytes per slot for elements of `elem_size` bytes: the stamp and the element,
    /// rounded up to a power of two, so that a slot's address is a shift of its index
    /// rather than a multiply, which every operation waits for before it can read the
    /// stamp and claim the slot (chan_mpmc at GOMAXPROCS=1 on an AMD Zen 4: ~3% of its
    /// time, `scripts/ab.sh chan_mpmc`). What it costs: slots of 8-byte and smaller elements are 16 bytes either
    /// way, 16-byte ones 32 instead of 24, 32-byte ones 64 instead of 40.
    pub(crate) const fn stride(elem_size: usize) -> usize {
        (ELEM_OFFSET + elem_size).next_power_of_two()
    }

    /// Slots (0: an unbuffered channel's).
    #[inline(always)]
    pub(crate) fn cap(&self) -> usize {
        self.cap as usize
    }

    /// Bytes per element.
    #[inline(always)]
    pub(crate) fn elem_size(&self) -> usize {
        self.elem_size
    }

    /// The storage the ring was made over (for its channel to free).
    pub(crate) fn buf(&self) -> *mut u8 {
        self.slots.buf
    }

    /// The ring's shape, for one operation to keep in registers: it never changes while a
    /// handle is held, but the compiler reloads and recomputes fields after every atomic
    /// and call otherwise (the stamp's address three times per operation; with the retry
    /// loop out of line, ~9 of a fast operation's instructions, ~18 per item of chan_mpmc:
    /// cachegrind of `bench/c/chan_mpmc`).
    #[inline(always)]
    fn geo(&self) -> Geo {
        Geo {
            buf: self.slots.buf,
            shift: self.shift,
            mask: self.one_lap - 1,
            cap: self.cap,
            one_lap: self.one_lap,
        }
    }

    /// The slot index of a position.
    #[inline(always)]
    fn index(&self, pos: u64) -> usize {
        self.geo().index(pos)
    }

    /// Slot `i` (< cap), from the fields as they are read now.
    #[inline(always)]
    fn slot(&self, i: usize) -> SlotRef {
        self.geo().slot(i)
    }

    #[cfg(not(all(test, loom)))]
    #[inline(always)]
    fn stamp_cell(&self, s: SlotRef) -> &AtomicU64 {
        // SAFETY: a SlotRef is a slot inside the buffer (`Geo::slot`: i < cap); its first
        // 8 bytes, aligned (buffer and stride are multiples of 8), are only ever used as
        // this atomic.
        unsafe { &*(s.0 as *const AtomicU64) }
    }

    #[cfg(all(test, loom))]
    fn stamp_cell(&self, s: SlotRef) -> &AtomicU64 {
        &self.slots.stamps[s.0]
    }

    /// Slot `i`'s stamp (stored minus `i`: see the module doc); `s` is that slot.
    #[inline(always)]
    fn stamp(&self, s: SlotRef, i: usize, order: core::sync::atomic::Ordering) -> u64 {
        self.stamp_cell(s).load(order).wrapping_add(i as u64)
    }

    #[inline(always)]
    fn set_stamp(&self, s: SlotRef, i: usize, stamp: u64) {
        // release: hands the slot's bytes to whoever acquires this stamp.
        self.stamp_cell(s)
            .store(stamp.wrapping_sub(i as u64), Release);
    }

    /// Lets `fill` write the element of slot `s`.
    ///
    /// # Safety
    /// The caller claimed the slot's position for a send.
    #[cfg(not(all(test, loom)))]
    #[inline(always)]
    unsafe fn fill(&self, s: SlotRef, fill: impl FnOnce(*mut u8)) {
        fill(s.0.wrapping_add(ELEM_OFFSET))
    }

    #[cfg(all(test, loom))]
    unsafe fn fill(&self, s: SlotRef, fill: impl FnOnce(*mut u8)) {
        self.slots.elems[s.0].with_mut(|p| fill(p.cast()))
    }

    /// Lets `drain` read the element of slot `s`.
    ///
    /// # Safety
    /// The caller claimed the slot's position for a receive.
    #[cfg(not(all(test, loom)))]
    #[inline(always)]
    unsafe fn drain(&self, s: SlotRef, drain: impl FnOnce(*const u8)) {
        drain(s.0.wrapping_add(ELEM_OFFSET))
    }

    #[cfg(all(test, loom))]
    unsafe fn drain(&self, s: SlotRef, drain: impl FnOnce(*const u8)) {
        self.slots.elems[s.0].with(|p| drain(p.cast()))
    }

    /// The slot of a position a retry loop claimed, its index and the position: the loop
    /// returns the position alone, in a register (three words came back through memory,
    /// which gave every caller a stack frame).
    #[inline(always)]
    fn claimed(&self, pos: u64) -> (SlotRef, usize, u64) {
        let g = self.geo();
        let i = g.index(pos);
        (g.slot(i), i, pos)
    }

    /// Sends without the lock: claims the slot at `tail` and lets `fill` write it.
    ///
    /// # Safety
    /// `fill` writes at most the element's bytes at the pointer it is given.
    #[inline(always)]
    pub(crate) unsafe fn send_fast(&self, fill: impl FnOnce(*mut u8)) -> Fast {
        let claim = match self.claim_send_first() {
            Some(claim) => claim,
            None => match self.claim_send_retry() {
                Ok(tail) => self.claimed(tail),
                Err(f) => return f,
            },
        };
        // SAFETY: claimed just above; fill per the caller.
        unsafe { self.send_claimed(claim, fill) };
        Fast::Done
    }

    /// `send_fast` without its first look: the retry loop at once (for a caller whose own
    /// first look failed: `Chan::send_after_quick`).
    ///
    /// # Safety
    /// As `send_fast`.
    #[inline(always)]
    pub(crate) unsafe fn send_retry(&self, fill: impl FnOnce(*mut u8)) -> Fast {
        let claim = match self.claim_send_retry() {
            Ok(tail) => self.claimed(tail),
            Err(f) => return f,
        };
        // SAFETY: claimed just above; fill per the caller.
        unsafe { self.send_claimed(claim, fill) };
        Fast::Done
    }

    /// `send_fast`'s first look alone: true if it sent; false if it did not claim a slot
    /// at once (exclusive mode, full, stale or a lost race), which the caller sorts out
    /// with `send_fast` or the lock. For a C entry point whose common case is then a
    /// leaf function (`ffi::chan`).
    ///
    /// # Safety
    /// As `send_fast`.
    #[inline(always)]
    pub(crate) unsafe fn send_first(&self, fill: impl FnOnce(*mut u8)) -> bool {
        let Some(claim) = self.claim_send_first() else {
            return false;
        };
        // SAFETY: claimed just above; fill per the caller.
        unsafe { self.send_claimed(claim, fill) };
        true
    }

    /// A send's second half, after its claim `(slot, index, tail)`: `fill` writes the
    /// element, then the stamp hands the slot to receivers.
    ///
    /// # Safety
    /// The caller claimed position `tail` (whose slot is then free); `fill` as in
    /// `send_fast`.
    #[inline(always)]
    unsafe fn send_claimed(
        &self,
        (slot, i, tail): (SlotRef, usize, u64),
        fill: impl FnOnce(*mut u8),
    ) {
        // SAFETY: caller contract.
        unsafe { self.fill(slot, fill) };
        self.set_stamp(slot, i, tail + 1);
    }

    /// Claims the slot at `tail` for a send if the first look finds it free and the CAS
    /// wins: the slot, its index and the position. The rest (`claim_send_retry`) is out
    /// of line: its backoff calls sched_yield, which made every send save and spill the
    /// ring's shape around the loop (chan_mpmc at GOMAXPROCS=1: ~240 instructions per
    /// item with the loop inline, 195 for the lock the ring replaced). Neither takes the
    /// element's copy, so that `send_fast` has the copy once, inline.
    #[inline(always)]
    fn claim_send_first(&self) -> Option<(SlotRef, usize, u64)> {
        let tail = self.tail.0.load(Relaxed);
        if tail & EXCL != 0 {
            return None;
        }
        let g = self.geo();
        let i = g.index(tail);
        let slot = g.slot(i);
        // acquire, relaxed: as in the loop of `claim_send_retry`.
        if self.stamp(slot, i, Acquire) == tail
            && self
                .tail
                .0
                .compare_exchange_weak(tail, g.next(tail), Relaxed, Relaxed)
                .is_ok()
        {
            return Some((slot, i, tail));
        }
        None
    }

    /// `claim_send_first` did not claim a slot: in exclusive mode, full, stale, or lost a
    /// race.
    #[inline(never)]
    fn claim_send_retry(&self) -> Result<u64, Fast> {
        let g = self.geo();
        let mut backoff = Backoff::new();
        let mut tail = self.tail.0.load(Relaxed);
        loop {
            if tail & EXCL != 0 {
                return Err(Fast::Locked);
            }
            let i = g.index(tail);
            let slot = g.slot(i);
            // acquire: the receiver that freed the slot is done with its bytes.
            let stamp = self.stamp(slot, i, Acquire);
            if stamp == tail {
                // relaxed: the position is ordered with the lock holder's RMW by being an
                // RMW on the same word; the bytes travel with the stamp.
                match self
                    .tail
                    .0
                    .compare_exchange_weak(tail, g.next(tail), Relaxed, Relaxed)
                {
                    Ok(_) => return Ok(tail),
                    Err(now) => {
                        tail = now;
                        backoff.snooze();
                    }
                }
            } else if stamp.wrapping_add(g.one_lap) == tail + 1 {
                // The slot still holds the previous lap's value: the ring is full, unless
                // a receiver claimed that value and is still copying it out.
                let head = self.head.0.load(Relaxed);
                if head & EXCL != 0 {
                    return Err(Fast::Locked);
                }
                if head.wrapping_add(g.one_lap) == tail {
                    return Err(Fast::WouldBlock);
                }
                backoff.snooze();
                tail = self.tail.0.load(Relaxed);
            } else {
                // Another sender took this position: our `tail` is stale.
                backoff.snooze();
                tail = self.tail.0.load(Relaxed);
            }
        }
    }

    /// Receives without the lock: claims the slot at `head` and lets `drain` read it.
    ///
    /// # Safety
    /// `drain` reads at most the element's bytes at the pointer it is given.
    #[inline(always)]
    pub(crate) unsafe fn recv_fast(&self, drain: impl FnOnce(*const u8)) -> Fast {
        let claim = match self.claim_recv_first() {
            Some(claim) => claim,
            None => match self.claim_recv_retry() {
                Ok(head) => self.claimed(head),
                Err(f) => return f,
            },
        };
        // SAFETY: claimed just above; drain per the caller.
        unsafe { self.recv_claimed(claim, drain) };
        Fast::Done
    }

    /// `recv_fast` without its first look (as `send_retry`).
    ///
    /// # Safety
    /// As `recv_fast`.
    #[inline(always)]
    pub(crate) unsafe fn recv_retry(&self, drain: impl FnOnce(*const u8)) -> Fast {
        let claim = match self.claim_recv_retry() {
            Ok(head) => self.claimed(head),
            Err(f) => return f,
        };
        // SAFETY: claimed just above; drain per the caller.
        unsafe { self.recv_claimed(claim, drain) };
        Fast::Done
    }

    /// `recv_fast`'s first look alone (as `send_first`).
    ///
    /// # Safety
    /// As `recv_fast`.
    #[inline(always)]
    pub(crate) unsafe fn recv_first(&self, drain: impl FnOnce(*const u8)) -> bool {
        let Some(claim) = self.claim_recv_first() else {
            return false;
        };
        // SAFETY: claimed just above; drain per the caller.
        unsafe { self.recv_claimed(claim, drain) };
        true
    }

    /// A receive's second half, after its claim `(slot, index, head)`: `drain` reads the
    /// element, then the stamp frees the slot for the sender one lap later.
    ///
    /// # Safety
    /// The caller claimed position `head` (whose slot then holds a value); `drain` as in
    /// `recv_fast`.
    #[inline(always)]
    unsafe fn recv_claimed(
        &self,
        (slot, i, head): (SlotRef, usize, u64),
        drain: impl FnOnce(*const u8),
    ) {
        // SAFETY: caller contract.
        unsafe { self.drain(slot, drain) };
        self.set_stamp(slot, i, head.wrapping_add(self.one_lap));
    }

    /// Claims the value at `head` for a receive if the first look finds it and the CAS
    /// wins (as `claim_send_first`).
    #[inline(always)]
    fn claim_recv_first(&self) -> Option<(SlotRef, usize, u64)> {
        let head = self.head.0.load(Relaxed);
        if head & EXCL != 0 {
            return None;
        }
        let g = self.geo();
        let i = g.index(head);
        let slot = g.slot(i);
        // acquire, relaxed: as in the loop of `claim_recv_retry`.
        if self.stamp(slot, i, Acquire) == head + 1
            && self
                .head
                .0
                .compare_exchange_weak(head, g.next(head), Relaxed, Relaxed)
                .is_ok()
        {
            return Some((slot, i, head));
        }
        None
    }

    /// `claim_recv_first` did not claim a value: in exclusive mode, empty, stale, or lost
    /// a race.
    #[inline(never)]
    fn claim_recv_retry(&self) -> Result<u64, Fast> {
        let g = self.geo();
        let mut backoff = Backoff::new();
        let mut head = self.head.0.load(Relaxed);
        loop {
            if head & EXCL != 0 {
                return Err(Fast::Locked);
            }
            let i = g.index(head);
            let slot = g.slot(i);
            // acquire: the sender's bytes are in the slot.
            let stamp = self.stamp(slot, i, Acquire);
            if stamp == head + 1 {
                // relaxed: as in claim_send_retry.
                match self
                    .head
                    .0
                    .compare_exchange_weak(head, g.next(head), Relaxed, Relaxed)
                {
                    Ok(_) => return Ok(head),
                    Err(now) => {
                        head = now;
                        backoff.snooze();
                    }
                }
            } else if stamp == head {
                // Nothing sent at this position yet: empty, unless a sender claimed it
                // and is still copying its value in. A closed channel is in exclusive
                // mode: the lock says whether it is drained.
                let tail = self.tail.0.load(Relaxed);
                if tail & EXCL != 0 {
                    return Err(Fast::Locked);
                }
                if tail == head {
                    return Err(Fast::WouldBlock);
                }
                backoff.snooze();
                head = self.head.0.load(Relaxed);
            } else {
                // Another receiver took this position: our `head` is stale.
                backoff.snooze();
                head = self.head.0.load(Relaxed);
            }
        }
    }

    /// Puts the ring in exclusive mode (channel lock held, not in exclusive mode) and
    /// returns its positions `(head, tail)`, which the lock holder keeps from then on
    /// (the words keep the bit and stale positions: a fast operation's look at them then
    /// reads a line nobody writes).
    pub(crate) fn enter(&self) -> (u64, u64) {
        // acq_rel RMWs: ordered after every fast operation that claimed a position before
        // (their CAS precedes ours on the word), and before every one that tries after.
        // An add sets the bit, which is clear (only lock holders set it): one `lock xadd`
        // each, where a `fetch_or` whose result is used is a CAS loop.
        let head = self.head.0.fetch_add(EXCL, AcqRel);
        let tail = self.tail.0.fetch_add(EXCL, AcqRel);
        debug_assert!((head | tail) & EXCL == 0, "chan: ring entered twice");
        self.excl_hint.store(true, Relaxed);
        (head, tail)
    }

    /// Leaves exclusive mode (channel lock held, in exclusive mode, with positions
    /// `head` and `tail`): fast operations may run again.
    pub(crate) fn leave(&self, head: u64, tail: u64) {
        // release: what we did to the slots precedes fast operations that see the bit gone
        // (they also acquire each stamp they rely on). Nobody else writes either word
        // while the bit is set.
        self.excl_hint.store(false, Relaxed);
        self.head.0.store(head, Release);
        self.tail.0.store(tail, Release);
    }

    /// Whether both words carry the exclusive-mode bit (for the channel's debug checks).
    pub(crate) fn in_excl(&self) -> bool {
        self.head.0.load(Relaxed) & self.tail.0.load(Relaxed) & EXCL != 0
    }

    /// No value at positions `head`, `tail` (counting values still being copied in).
    #[inline(always)]
    pub(crate) fn is_empty_at(head: u64, tail: u64) -> bool {
        head == tail
    }

    /// No free slot at positions `head`, `tail` (counting values still being copied out).
    #[inline(always)]
    pub(crate) fn is_full_at(&self, head: u64, tail: u64) -> bool {
        head.wrapping_add(self.one_lap) == tail
    }

    /// Waits until slot `i`'s stamp is `want`: an operation that claimed its position
    /// before exclusive mode began is still copying.
    #[inline(always)]
    fn await_stamp(&self, s: SlotRef, i: usize, want: u64) {
        // acquire: that operation's bytes (or its reading of them) precede ours.
        if self.stamp(s, i, Acquire) != want {
            self.await_stamp_slow(s, i, want);
        }
    }

    #[cold]
    #[inline(never)]
    fn await_stamp_slow(&self, s: SlotRef, i: usize, want: u64) {
        let mut backoff = Backoff::new();
        while self.stamp(s, i, Acquire) != want {
            backoff.snooze();
        }
    }

    /// In exclusive mode, not full: appends a value that `fill` writes at position
    /// `*tail`, and advances it.
    ///
    /// # Safety
    /// As `send_fast`; the channel lock is held, the ring is in exclusive mode and `tail`
    /// is its tail.
    #[inline(always)]
    pub(crate) unsafe fn push_excl(&self, tail: &mut u64, fill: impl FnOnce(*mut u8)) {
        // The slot is found again at each use: kept across `fill`, which may call memmove,
        // it took one more saved register in every caller (`Chan::send_locked`: ~4
        // instructions per call, channels that stay under their lock included).
        let i = self.index(*tail);
        self.await_stamp(self.slot(i), i, *tail);
        // SAFETY: in exclusive mode position `tail` is ours, and its slot is free.
        unsafe { self.fill(self.slot(i), fill) };
        self.set_stamp(self.slot(i), i, *tail + 1);
        *tail = self.geo().next(*tail);
    }

    /// In exclusive mode, not empty: takes the oldest value, at position `*head`, which
    /// `drain` reads, and advances it.
    ///
    /// # Safety
    /// As `recv_fast`; the channel lock is held, the ring is in exclusive mode and `head`
    /// is its head.
    #[inline(always)]
    pub(crate) unsafe fn pop_excl(&self, head: &mut u64, drain: impl FnOnce(*const u8)) {
        // As in `push_excl`.
        let i = self.index(*head);
        self.await_stamp(self.slot(i), i, *head + 1);
        // SAFETY: in exclusive mode position `head` is ours, and its slot holds a value.
        unsafe { self.drain(self.slot(i), drain) };
        self.set_stamp(self.slot(i), i, head.wrapping_add(self.one_lap));
        *head = self.geo().next(*head);
    }

    /// Values at positions `head`, `tail`.
    pub(crate) fn len_at(&self, head: u64, tail: u64) -> usize {
        let (hix, tix) = (self.index(head) as u64, self.index(tail) as u64);
        let n = if hix < tix {
            tix - hix
        } else if hix > tix {
            self.cap - hix + tix
        } else if tail == head {
            0
        } else {
            self.cap
        };
        n as usize
    }

    /// Values in the ring (a snapshot: claimed positions count); None in exclusive mode,
    /// whose positions the lock holder keeps.
    pub(crate) fn len(&self) -> Option<usize> {
        loop {
            let tail = self.tail.0.load(SeqCst);
            let head = self.head.0.load(SeqCst);
            if self.tail.0.load(SeqCst) != tail {
                continue;
            }
            if (head | tail) & EXCL != 0 {
                return None;
            }
            return Some(self.len_at(head, tail));
        }
    }
}

/// Loom models of the ring with the channel's lock around it. The ring (both fast paths,
/// exclusive mode and its operations, the stamps) is the real code over loom atomics and
/// cells; the channel's half is restated: `lock_excl`/`unlock_excl` as in `Chan`, a wait
/// queue of at most one receiver and one sender, and a blocked party that polls its
/// outcome under the lock (a parked goroutine) and fails by name when nobody is left to
/// complete it: a lost wake-up, or a value stranded in the ring past a blocked receiver.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::loom::sync::{Arc, Mutex, MutexGuard};
    use crate::loom::thread;

    #[derive(Default)]
    struct Synced {
        excl: bool,
        /// The positions while in exclusive mode.
        head: u64,
        tail: u64,
        closed: bool,
        /// A receiver is queued; `delivered` is its sudog's outcome (None: closed).
        recvq: bool,
        delivered: Option<Option<u64>>,
        /// A sender is queued with this value; `taken` says a receiver completed it.
        sendq: Option<u64>,
        taken: Option<bool>,
        /// Parties still running (a blocked one needs one of them to complete it).
        senders: usize,
        receivers: usize,
        closers: usize,
    }

    impl Synced {
        /// A new channel's: in exclusive mode at positions `head`, `tail`, with `parties`
        /// (senders, receivers, closers) still to run.
        fn at(head: u64, tail: u64, parties: [usize; 3]) -> Self {
            let [senders, receivers, closers] = parties;
            Synced {
                excl: true,
                head,
                tail,
                senders,
                receivers,
                closers,
                ..Synced::default()
            }
        }
    }

    struct ModelChan {
        ring: Ring,
        lock: Mutex<Synced>,
        /// The mutant: leave exclusive mode while a party waits.
        broken_leave: bool,
    }

    impl ModelChan {
        fn new(cap: usize, parties: [usize; 3], broken_leave: bool) -> Self {
            ModelChan {
                // SAFETY: under loom the slots are the model's own.
                ring: unsafe { Ring::new(core::ptr::null_mut(), cap, 8) },
                lock: Mutex::new(Synced::at(0, 0, parties)),
                broken_leave,
            }
        }

        /// A channel that has left the exclusive mode it starts in.
        fn new_fast(cap: usize, parties: [usize; 3], broken_leave: bool) -> Self {
            let ch = ModelChan::new(cap, parties, broken_leave);
            let s = ch.lock_excl();
            ch.unlock_excl(s);
            ch
        }

        /// `Chan::destroy` and then `Chan::make` of a channel of `cap` slots over the same
        /// header and kept buffer: the destroy puts the ring in exclusive mode, and the make
        /// continues from its positions where [`Ring::resumes_at`] says so (the ring keeps
        /// its slots and their stamps, the words their bit), or starts over a cleared
        /// buffer at position 0.
        fn remake(self, cap: usize, parties: [usize; 3]) -> Self {
            let (head, tail) = {
                let s = self.lock_excl();
                (s.head, s.tail)
            };
            let ModelChan { mut ring, .. } = self;
            let resume = ring.resumes_at(cap, head, tail);
            // SAFETY: under loom the slots are the model's own.
            ring.renew(unsafe { Ring::new(core::ptr::null_mut(), cap, 8) }, !resume);
            let (head, tail) = if resume { (head, tail) } else { (0, 0) };
            ModelChan {
                ring,
                lock: Mutex::new(Synced::at(head, tail, parties)),
                broken_leave: false,
            }
        }

        fn lock_excl(&self) -> MutexGuard<'_, Synced> {
            let mut s = self.lock.lock().unwrap();
            if !s.excl {
                (s.head, s.tail) = self.ring.enter();
                s.excl = true;
            }
            s
        }

        /// As `Chan::unlock_excl`, leaving as soon as nobody waits (the channel waits for
        /// a run of calm operations first: a policy, not a condition of correctness).
        fn unlock_excl(&self, mut s: MutexGuard<'_, Synced>) {
            let waiters = s.recvq || s.sendq.is_some();
            if s.excl && !s.closed && (!waiters || self.broken_leave) {
                self.ring.leave(s.head, s.tail);
                s.excl = false;
            }
        }

        fn push(&self, s: &mut Synced, v: u64) {
            // SAFETY: the model's slots are u64s; lock held, exclusive mode.
            unsafe {
                self.ring
                    .push_excl(&mut s.tail, |p| p.cast::<u64>().write(v))
            }
        }

        fn pop(&self, s: &mut Synced) -> u64 {
            let mut v = 0;
            // SAFETY: as above.
            unsafe {
                self.ring
                    .pop_excl(&mut s.head, |p| v = p.cast::<u64>().read())
            };
            v
        }

        /// Blocking send; false if the channel was closed. The lock-free part as the C
        /// entry makes it (`ffi::chan`): the first look, then the retry loop (together
        /// they are `send_fast`).
        fn send(&self, v: u64) -> bool {
            // SAFETY: as above.
            if unsafe { self.ring.send_first(|p| p.cast::<u64>().write(v)) } {
                return true;
            }
            // SAFETY: as above.
            if unsafe { self.ring.send_retry(|p| p.cast::<u64>().write(v)) } == Fast::Done {
                return true;
            }
            let mut s = self.lock_excl();
            if s.closed {
                self.unlock_excl(s);
                return false;
            }
            if s.recvq {
                assert!(
                    Ring::is_empty_at(s.head, s.tail),
                    "lost wake-up: a receiver waits beside values in the ring"
                );
                s.recvq = false;
                s.delivered = Some(Some(v));
                self.unlock_excl(s);
                return true;
            }
            if !self.ring.is_full_at(s.head, s.tail) {
                self.push(&mut s, v);
                self.unlock_excl(s);
                return true;
            }
            s.sendq = Some(v);
            // As park_commit: the channel's unlock, in exclusive mode still.
            self.unlock_excl(s);
            loop {
                thread::yield_now();
                let mut s = self.lock.lock().unwrap();
                if let Some(ok) = s.taken.take() {
                    return ok;
                }
                assert!(
                    s.receivers > 0,
                    "lost wake-up: a blocked sender outlived the receivers"
                );
            }
        }

        /// `gmp_chan_try_send`: Some(true) if sent, Some(false) if the channel is
        /// closed, None if it would block.
        fn try_send(&self, v: u64) -> Option<bool> {
            // SAFETY: as above.
            if unsafe { self.ring.send_fast(|p| p.cast::<u64>().write(v)) } == Fast::Done {
                return Some(true);
            }
            let mut s = self.lock_excl();
            let r = if s.closed {
                Some(false)
            } else if s.recvq {
                s.recvq = false;
                s.delivered = Some(Some(v));
                Some(true)
            } else if !self.ring.is_full_at(s.head, s.tail) {
                self.push(&mut s, v);
                Some(true)
            } else {
                None
            };
            self.unlock_excl(s);
            r
        }

        /// Blocking receive; None once closed and drained.
        fn recv(&self) -> Option<u64> {
            let mut v = 0;
            // SAFETY: as above.
            if unsafe { self.ring.recv_first(|p| v = p.cast::<u64>().read()) } {
                return Some(v);
            }
            // SAFETY: as above.
            if unsafe { self.ring.recv_retry(|p| v = p.cast::<u64>().read()) } == Fast::Done {
                return Some(v);
            }
            let mut s = self.lock_excl();
            if let Some(w) = s.sendq.take() {
                assert!(
                    self.ring.is_full_at(s.head, s.tail),
                    "lost wake-up: a sender waits beside free slots"
                );
                let v = self.pop(&mut s);
                self.push(&mut s, w);
                s.taken = Some(true);
                self.unlock_excl(s);
                return Some(v);
            }
            if !Ring::is_empty_at(s.head, s.tail) {
                let v = self.pop(&mut s);
                self.unlock_excl(s);
                return Some(v);
            }
            if s.closed {
                self.unlock_excl(s);
                return None;
            }
            s.recvq = true;
            self.unlock_excl(s);
            loop {
                thread::yield_now();
                let mut s = self.lock.lock().unwrap();
                if let Some(got) = s.delivered.take() {
                    return got;
                }
                assert!(
                    s.senders + s.closers > 0,
                    "lost wake-up: a blocked receiver outlived the senders"
                );
            }
        }

        fn close(&self) {
            let mut s = self.lock_excl();
            s.closed = true;
            s.closers -= 1;
            if s.recvq {
                s.recvq = false;
                s.delivered = Some(None);
            }
            if s.sendq.take().is_some() {
                s.taken = Some(false);
            }
            self.unlock_excl(s);
        }

        /// Closes the channel as its one receiver, drains it and leaves: the values that
        /// were in it.
        fn close_and_drain(&self) -> Vec<u64> {
            self.close();
            let mut got = Vec::new();
            while let Some(v) = self.recv() {
                got.push(v);
            }
            self.receiver_done();
            got
        }

        fn sender_done(&self) {
            self.lock.lock().unwrap().senders -= 1;
        }

        fn receiver_done(&self) {
            self.lock.lock().unwrap().receivers -= 1;
        }
    }

    /// Runs a model with at most 3 preemptions per execution unless `LOOM_MAX_PREEMPTIONS`
    /// says otherwise: the blocked parties' polling makes the unbounded space too large.
    use crate::loom::model;

    /// One sender, one receiver, one slot: the sender fills the ring and blocks, the
    /// receiver empties it and blocks, positions wrap at every send. Values arrive once,
    /// in order.
    fn one_slot(broken_leave: bool) {
        model(move || {
            let ch = Arc::new(ModelChan::new_fast(1, [1, 1, 0], broken_leave));
            let tx = ch.clone();
            let sender = thread::spawn(move || {
                for v in 1..=2 {
                    assert!(tx.send(v));
                }
                tx.sender_done();
            });
            let got: Vec<u64> = (0..2).map(|_| ch.recv().expect("not closed")).collect();
            ch.receiver_done();
            sender.join().unwrap();
            assert_eq!(got, [1, 2]);
        });
    }

    #[test]
    fn one_slot_in_order() {
        one_slot(false);
    }

    /// The mutant: a lock holder that leaves exclusive mode while a receiver waits lets a
    /// fast send fill the ring behind it.
    #[test]
    #[should_panic(expected = "lost wake-up")]
    fn one_slot_broken_leaving_beside_a_waiter() {
        one_slot(true);
    }

    /// A fast receive races a lock holder that sends: the holder's exclusive mode may
    /// begin after the receive claimed the only slot and before it copied the value out;
    /// the holder's send into that slot then waits for the receive's stamp.
    #[test]
    fn recv_in_flight_vs_exclusive_send() {
        model(|| {
            let ch = Arc::new(ModelChan::new_fast(1, [1, 1, 0], false));
            // SAFETY: the model's slots are u64s; nobody else runs yet.
            assert_eq!(
                unsafe { ch.ring.send_fast(|p| p.cast::<u64>().write(1)) },
                Fast::Done
            );
            let rx = ch.clone();
            let receiver = thread::spawn(move || {
                let mut v = 0;
                // SAFETY: as above.
                let r = unsafe { rx.ring.recv_fast(|p| v = p.cast::<u64>().read()) };
                (r == Fast::Done).then_some(v)
            });
            let mut s = ch.lock_excl();
            let pushed = !ch.ring.is_full_at(s.head, s.tail);
            if pushed {
                ch.push(&mut s, 2);
            }
            ch.unlock_excl(s);
            let first = receiver.join().unwrap();
            let mut got: Vec<u64> = first.into_iter().collect();
            let mut s = ch.lock_excl();
            while !Ring::is_empty_at(s.head, s.tail) {
                got.push(ch.pop(&mut s));
            }
            ch.unlock_excl(s);
            assert_eq!(got, if pushed { vec![1, 2] } else { vec![1] });
        });
    }

    /// A fast send races a close, after which the closing thread drains the channel: a
    /// send that claimed its slot before the close lands and is received (the drain waits
    /// for its stamp), one that did not fails. Two slots: the send may find one taken.
    #[test]
    fn send_races_close() {
        model(|| {
            let ch = Arc::new(ModelChan::new_fast(2, [1, 1, 1], false));
            // SAFETY: the model's slots are u64s; nobody else runs yet.
            assert_eq!(
                unsafe { ch.ring.send_fast(|p| p.cast::<u64>().write(1)) },
                Fast::Done
            );
            let tx = ch.clone();
            let sender = thread::spawn(move || {
                let ok = tx.send(2);
                tx.sender_done();
                ok
            });
            let got = ch.close_and_drain();
            let sent = sender.join().unwrap();
            assert_eq!(got, if sent { vec![1, 2] } else { vec![1] });
        });
    }

    /// A channel made over a destroyed one's kept buffer (`remake`), then a try-send
    /// racing a close, then a drain; the old ring of `old_cap` slots is left empty at a
    /// position whose index is beyond a ring of `new_cap` slots when the shapes differ.
    /// The try-send lands (and is drained) or finds the channel closed; a second round
    /// of sends fills exactly `new_cap` slots.
    fn remade_try_send_races_close(old_cap: usize, new_cap: usize) {
        model(move || {
            let old = ModelChan::new_fast(old_cap, [1, 1, 0], false);
            // One value through the fast path: position 1, or the next lap's 0 in one slot.
            // SAFETY: the model's slots are u64s; nobody else runs yet.
            unsafe {
                assert_eq!(old.ring.send_fast(|p| p.cast::<u64>().write(9)), Fast::Done);
                assert_eq!(old.ring.recv_fast(|_| {}), Fast::Done);
            }
            let ch = Arc::new(old.remake(new_cap, [1, 1, 1]));
            let tx = ch.clone();
            let sender = thread::spawn(move || {
                let sent = tx.try_send(5);
                tx.sender_done();
                sent
            });
            let got = ch.close_and_drain();
            let sent = sender.join().unwrap();
            assert_eq!(got, if sent == Some(true) { vec![5] } else { vec![] });
            // The same header and buffer again, open this time: exactly `new_cap` sends
            // fit, and they come back in order.
            let ch = Arc::try_unwrap(ch)
                .ok()
                .expect("one owner")
                .remake(new_cap, [1, 1, 0]);
            for v in 0..new_cap as u64 {
                assert_eq!(ch.try_send(v), Some(true));
            }
            assert_eq!(ch.try_send(99), None);
            for v in 0..new_cap as u64 {
                assert_eq!(ch.recv(), Some(v));
            }
        });
    }

    #[test]
    fn remade_same_shape_try_send_races_close() {
        remade_try_send_races_close(2, 2);
    }

    /// Two shapes of one byte size (`Chan::make`: 24-byte elements in 1 slot, 8-byte ones
    /// in 2): the new ring must not continue from the old one's positions.
    #[test]
    fn remade_other_shape_try_send_races_close() {
        remade_try_send_races_close(1, 2);
    }
}
