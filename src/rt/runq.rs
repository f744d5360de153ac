//! The per-P local run queue (Go's `runq`, `runqhead`, `runqtail` and `runnext` in
//! runtime2.go; `runqput`, `runqputslow`, `runqget`, `runqgrab`, `runqsteal`, `runqdrain`
//! and `runqempty` in proc.go).
//!
//! # Algorithm
//!
//! A bounded ring of [`RUNQ_SIZE`] slots indexed by two free-running `u32` counters, `head`
//! and `tail` (slot = counter % RUNQ_SIZE; RUNQ_SIZE divides 2^32, so wrap-around of the
//! counters is harmless). It is Go's run queue, a variant of the Chase–Lev work-stealing
//! deque (D. Chase, Y. Lev, "Dynamic circular work-stealing deque", SPAA 2005; the C11
//! orderings follow N. M. Lê et al., "Correct and efficient work-stealing for weak memory
//! models", PPoPP 2013) in which the owner also takes from the head, so the queue is FIFO
//! for everybody and there is only one kind of consumer:
//!
//! - the **producer** is the owner P alone: it writes the slot at `tail`, then publishes it
//!   with a store-release of `tail + 1`;
//! - **consumers** (the owner and thieves) read the slots at `head..head + n`, then commit
//!   with a CAS-release of `head` to `head + n`; the loser of a CAS retries.
//!
//! Beside the ring is `runnext`, a single slot holding the G that the owner should run next
//! (a G readied by the running one, which inherits its time slice). Only the owner stores a
//! G into it; the owner and thieves take it out. A thief takes it only when the ring is
//! empty and its caller asks (Go: the last of the four stealing passes), after a short
//! back-off that gives the victim the chance to run it.
//!
//! When the ring is full, `put` moves half of it plus the new G, in FIFO order, to the
//! caller (who links them onto the global queue under the scheduler lock): Go's
//! `runqputslow`. A thief takes half of the victim's ring (rounded up) into its own ring.
//!
//! # Ownership: who may call what
//!
//! | function | caller |
//! |---|---|
//! | [`RunQueue::put`], [`RunQueue::get`], [`RunQueue::drain`] | the owner of the queue (the M holding the P, or anyone while the P is stopped) |
//! | [`RunQueue::steal`] | the owner of `self` (the thief's own queue); `victim` may be anybody's |
//! | [`RunQueue::len`], [`RunQueue::is_empty`] | any thread (the answer is a snapshot) |
//!
//! # Invariants
//!
//! - `tail - head <= RUNQ_SIZE` (wrapping arithmetic), at every instant;
//! - only the owner advances `tail` and only the owner writes slots or stores a non-null
//!   `runnext`; `head` only moves forward, by CAS;
//! - the slots in `head..tail` hold the queued Gs, oldest first, each exactly once; the
//!   queue never dereferences them.
//!
//! # Why the slots are atomics (the rejected alternative)
//!
//! A consumer reads its slots *before* its CAS on `head`. When the CAS is going to fail
//! (another consumer took those slots first), the owner may already be overwriting the
//! slots that this consumer is reading. Go's memory model tolerates that race (the value
//! read is thrown away); Rust's does not: a non-atomic read racing a write is undefined
//! behaviour even if the value is discarded. So the slots are `AtomicPtr`s accessed with
//! `Relaxed` (a plain `mov` on x86-64 and aarch64: the same code as an `UnsafeCell` slot);
//! their contents are ordered by the acquire/release pairs on `head` and `tail`.
//!
//! The alternative is tokio's: pack a second "steal" index into `head` so that a thief
//! claims its slots with a first CAS, copies them, then releases the claim with a second
//! CAS, and reads nothing it has not claimed; slots can then be plain `UnsafeCell`s. That
//! costs a second CAS per steal and a second state to reason about, only to avoid an
//! ordering (`Relaxed`) that is free on the targets we support. Rejected.
//!
//! Broken invariants abort through [`throw`] with a constant message prefixed `gmp:`.

use core::ptr::{self, NonNull};

use crate::loom::sync::atomic::{AtomicPtr, AtomicU32, Ordering::*};

/// How a thief waits before it takes a victim's `runnext`.
mod backoff {
    /// Gives a victim that is about to run its `runnext` G the time to do so before a thief
    /// takes it. Go sleeps 3 µs ("a sync chan send/recv takes ~50ns as of time of writing,
    /// so 3us gives ~50x overshoot"). 64 reference pauses (`sys::procyield`, calibrated)
    /// are ~1.6 µs; then one `sched_yield` (~1 µs, and it lets the victim run if it shares
    /// our CPU). No timer: nanosleep would sleep 50 µs of timer slack.
    #[cfg(not(all(test, loom)))]
    pub(super) fn runnext_backoff() {
        crate::sys::procyield(64);
        std::thread::yield_now();
    }

    /// Under loom, a yield point: lets the model schedule the victim here.
    #[cfg(all(test, loom))]
    pub(super) fn runnext_backoff() {
        crate::loom::thread::yield_now();
    }
}

/// Capacity of the ring: 256, Go's; 4 under loom, to explore wrap-around and overflow.
#[cfg(not(all(test, loom)))]
pub const RUNQ_SIZE: usize = 256;
/// Capacity of the ring: 256, Go's; 4 under loom, to explore wrap-around and overflow.
#[cfg(all(test, loom))]
pub const RUNQ_SIZE: usize = 4;

// The counters wrap at 2^32: the slot index `counter % RUNQ_SIZE` stays continuous across
// the wrap only when RUNQ_SIZE divides 2^32.
const _: () = assert!(RUNQ_SIZE.is_power_of_two() && RUNQ_SIZE >= 2 && RUNQ_SIZE <= 1 << 31);

/// RUNQ_SIZE as the type of the counters.
const N: u32 = RUNQ_SIZE as u32;

/// A P's local run queue: a ring of [`RUNQ_SIZE`] slots with one producer (the owner P,
/// which alone writes `tail`) and many consumers (the owner and thieves, which CAS `head`),
/// plus the `runnext` slot. See the module documentation for the protocol.
///
/// It holds `NonNull<T>` and never dereferences them, so it is `Send + Sync` whatever `T`
/// is: what a pointer may be used for is the business of whoever takes it out.
pub struct RunQueue<T> {
    /// Next slot to consume. Advanced by CAS, by the owner and by thieves.
    head: AtomicU32,
    /// Next slot to fill. Written by the owner only (store-release).
    tail: AtomicU32,
    /// The G to run next, or null. Set by the owner only; cleared by the owner or a thief.
    runnext: AtomicPtr<T>,
    /// The ring. Written by the owner only; read by consumers (see "Why the slots are atomics").
    slots: [AtomicPtr<T>; RUNQ_SIZE],
}

#[cfg(not(all(test, loom)))]
const _: () = {
    const fn send_sync<Q: Send + Sync>() {}
    // Not Send/Sync themselves, so this checks "whatever T is".
    send_sync::<RunQueue<*mut u8>>();
};

impl<T> RunQueue<T> {
    /// An empty queue.
    #[cfg(not(all(test, loom)))]
    pub const fn new() -> Self {
        RunQueue {
            head: AtomicU32::new(0),
            tail: AtomicU32::new(0),
            runnext: AtomicPtr::new(ptr::null_mut()),
            slots: [const { AtomicPtr::new(ptr::null_mut()) }; RUNQ_SIZE],
        }
    }

    /// An empty queue (loom's atomics cannot be built in a const fn).
    #[cfg(all(test, loom))]
    pub fn new() -> Self {
        RunQueue {
            head: AtomicU32::new(0),
            tail: AtomicU32::new(0),
            runnext: AtomicPtr::new(ptr::null_mut()),
            slots: core::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
        }
    }

    fn slot(&self, counter: u32) -> &AtomicPtr<T> {
        // `% N` keeps the index below RUNQ_SIZE: the bounds check folds away.
        &self.slots[(counter % N) as usize]
    }

    /// Puts `g` at the tail of the ring, or into `runnext` when `next` (the G it displaces
    /// from `runnext`, if any, goes to the tail instead). When the ring is full, takes half
    /// of it plus the G being added and hands them, oldest first, to `overflow` as one batch
    /// (the caller links them onto the global queue under the scheduler lock): Go's
    /// `runqput` + `runqputslow`.
    ///
    /// # Safety
    /// Only the owner of the queue may call it (single producer), with a `g` that is not
    /// already queued anywhere.
    #[inline]
    pub unsafe fn put(&self, g: NonNull<T>, next: bool, overflow: impl FnOnce(&[NonNull<T>])) {
        let mut g = g;
        if next {
            // swap-SeqCst: the release publishes `g` to a thief's load-acquire of runnext
            // in `grab`, and to `len`/`is_empty`; the acquire orders us after the clear by
            // a thief (its CAS on runnext), so the displaced G we get back, if any, is ours.
            // SeqCst rather than AcqRel (the same instruction on x86-64 and aarch64): it is
            // the store half of wakep's StoreLoad pair with a stopping spinner (its SeqCst
            // load of nmspinning follows), which the C++ model orders only between SeqCst
            // operations.
            let old = self.runnext.swap(g.as_ptr(), SeqCst);
            match NonNull::new(old) {
                None => return,
                Some(old) => g = old, // the displaced G goes to the tail
            }
        }
        loop {
            // load-acquire, synchronizes with consumers (pairs with the CAS-release of head
            // in get/grab/take_half/drain): their reads of the slots they took happen
            // before we overwrite those slots below.
            let h = self.head.load(Acquire);
            // Relaxed: only we write tail.
            let t = self.tail.load(Relaxed);
            let n = t.wrapping_sub(h);
            if n < N {
                // Relaxed: ordered by the store-release of tail just below.
                self.slot(t).store(g.as_ptr(), Relaxed);
                // store-release, makes the item available for consumption (pairs with the
                // load-acquire of tail in grab and len).
                self.tail.store(t.wrapping_add(1), Release);
                return;
            }
            if n != N {
                throw("runqput: tail - head > RUNQ_SIZE");
            }
            if let Some(batch) = self.take_half(g, h, t) {
                overflow(&batch);
                return;
            }
            // A consumer moved head: there is room now, take the fast path.
        }
    }

    /// The ring is full (`t - h == RUNQ_SIZE`): takes its older half and returns it followed
    /// by `g`, or `None` when a consumer moved `head` first: Go's `runqputslow`.
    /// Owner only.
    fn take_half(&self, g: NonNull<T>, h: u32, t: u32) -> Option<[NonNull<T>; RUNQ_SIZE / 2 + 1]> {
        let n = t.wrapping_sub(h) / 2;
        if n != N / 2 {
            throw("runqputslow: queue is not full");
        }
        let mut batch = [g; RUNQ_SIZE / 2 + 1];
        for (i, b) in (0..n).zip(batch.iter_mut()) {
            // Relaxed: we wrote these slots ourselves.
            *b = nonnull(
                self.slot(h.wrapping_add(i)).load(Relaxed),
                "runqputslow: empty slot",
            );
        }
        // CAS-release, commits the consumption of slots h..h+n (pairs with the load-acquire
        // of head in put/steal: the owner overwrites these slots only after our reads).
        // Relaxed on failure: we read nothing more and retry from scratch.
        self.head
            .compare_exchange(h, h.wrapping_add(n), Release, Relaxed)
            .ok()?;
        // batch[n] is `g` already.
        Some(batch)
    }

    /// Takes the next G: `runnext` first (returned with `true`: it inherits the current time
    /// slice), then the head of the ring (with `false`). `None` when both are empty: Go's
    /// `runqget`.
    ///
    /// # Safety
    /// Only the owner of the queue may call it.
    pub unsafe fn get(&self) -> Option<(NonNull<T>, bool)> {
        // Relaxed: a peek to avoid dirtying the line when runnext is empty; the swap decides.
        if !self.runnext.load(Relaxed).is_null() {
            // swap-acq-rel. Release: a reader of runnext in `len`/`is_empty` that sees the
            // null then sees the tail stores made before it (the runqempty race: G1 kicked
            // from runnext to the ring, then runnext taken). Acquire: orders us after a
            // thief's clear. A thief may have taken it since the peek: then we get null.
            if let Some(g) = NonNull::new(self.runnext.swap(ptr::null_mut(), AcqRel)) {
                return Some((g, true));
            }
        }
        loop {
            // load-acquire, synchronizes with other consumers (pairs with the CAS-release of
            // head in get/grab/take_half/drain). The owner reads only slots it wrote, so
            // Relaxed would do here; kept as Go has it: every head load is an acquire.
            let h = self.head.load(Acquire);
            // Relaxed: only we write tail.
            let t = self.tail.load(Relaxed);
            if t == h {
                return None;
            }
            // Relaxed: we wrote this slot ourselves.
            let g = self.slot(h).load(Relaxed);
            // CAS-release, commits the consumption (pairs with the load-acquire of head in
            // put/steal before a slot is overwritten).
            if self
                .head
                .compare_exchange(h, h.wrapping_add(1), Release, Relaxed)
                .is_ok()
            {
                return Some((nonnull(g, "runqget: empty slot"), false));
            }
            // A thief took it: retry.
        }
    }

    /// The entry `get` would take from the ring next (ignoring runnext), or null when the
    /// ring is empty: a hint (a thief may take it first), for prefetching.
    ///
    /// # Safety
    /// Only the owner may call it.
    #[inline]
    pub unsafe fn peek_ring(&self) -> *mut T {
        // Relaxed: a hint; only we write tail and the slots from head to tail.
        let h = self.head.load(Relaxed);
        if self.tail.load(Relaxed) == h {
            return ptr::null_mut();
        }
        self.slot(h).load(Relaxed)
    }

    /// Steals from `victim` into `self`: grabs half of `victim`'s ring (rounded up) into
    /// `self`'s ring and returns one of them (the newest) to run, with the number stolen
    /// (that one included), for statistics. When `victim`'s ring is empty and
    /// `steal_runnext`, takes `victim`'s `runnext` instead, after a short back-off that lets
    /// `victim` run it if it is about to. `None` when there was nothing to take: Go's
    /// `runqsteal` + `runqgrab`.
    ///
    /// # Safety
    /// Only the owner of `self` (the thief's own queue) may call it, and `self`'s ring must
    /// have room for half a ring: Go steals only after `get` found the local queue empty.
    /// `victim` may be any other queue.
    pub unsafe fn steal(
        &self,
        victim: &RunQueue<T>,
        steal_runnext: bool,
    ) -> Option<(NonNull<T>, u32)> {
        if ptr::eq(self, victim) {
            throw("runqsteal: stealing from own runq");
        }
        // Relaxed: only we (self's owner) write self's tail.
        let t = self.tail.load(Relaxed);
        // load-acquire, synchronizes with self's consumers (pairs with the CAS-release of
        // head in get/grab/take_half/drain): their reads of self's slots t.. happen before
        // grab overwrites them. Go checks room after the copy; checking before it means a
        // broken caller never clobbers queued Gs. Stale is fine: head only grows.
        let h = self.head.load(Acquire);
        if t.wrapping_sub(h) > N - N / 2 {
            throw("runqsteal: runq overflow");
        }
        let n = victim.grab(self, t, steal_runnext);
        if n == 0 {
            return None;
        }
        let last = n - 1;
        // Relaxed: grab wrote this slot, in this thread.
        let g = nonnull(
            self.slot(t.wrapping_add(last)).load(Relaxed),
            "runqsteal: empty slot",
        );
        if last > 0 {
            // store-release, makes the other stolen Gs available for consumption from self
            // (pairs with the load-acquire of tail in grab and len).
            self.tail.store(t.wrapping_add(last), Release);
        }
        Some((g, n))
    }

    /// Copies half of `self`'s ring (rounded up), oldest first, into `into`'s slots from
    /// `into_tail` on, and commits by moving `self`'s head; or, when the ring is empty and
    /// `steal_runnext`, moves `self`'s runnext to `into`'s slot `into_tail`. Returns how
    /// many it took: Go's `runqgrab`. Called by `steal` only, on the victim, with `into`
    /// owned by the caller and room for RUNQ_SIZE / 2 slots at `into_tail`.
    fn grab(&self, into: &RunQueue<T>, into_tail: u32, steal_runnext: bool) -> u32 {
        loop {
            // load-acquire, synchronizes with other consumers (pairs with the CAS-release of
            // head in get/grab/take_half/drain).
            let h = self.head.load(Acquire);
            // load-acquire, synchronizes with the producer (pairs with the store-release of
            // tail in put/steal): the slots h..t are written before we read them.
            let t = self.tail.load(Acquire);
            let n = t.wrapping_sub(h);
            let n = n - n / 2;
            if n == 0 {
                if !steal_runnext {
                    return 0;
                }
                // load-acquire, pairs with the swap-release in put that stored the G.
                let next = self.runnext.load(Acquire);
                if next.is_null() {
                    return 0;
                }
                // The victim is probably about to run `next` (it was readied by the running
                // G): let it, rather than moving it to another M's cache.
                backoff::runnext_backoff();
                // CAS-acquire, pairs with the swap-release in put (the owner's is the only
                // store of a non-null runnext); on failure the owner ran it or replaced it.
                if self
                    .runnext
                    .compare_exchange(next, ptr::null_mut(), Acquire, Relaxed)
                    .is_err()
                {
                    continue;
                }
                // Relaxed: published by steal's store-release of tail, if at all (a single
                // stolen G is returned without publishing it).
                into.slot(into_tail).store(next, Relaxed);
                return 1;
            }
            if n > N / 2 {
                // h and t were read at different times (head moved, then tail): retry.
                continue;
            }
            for i in 0..n {
                // Relaxed both: the load is ordered by the acquire of tail above and may
                // race with an owner overwriting the slot, in which case our CAS below fails
                // (see "Why the slots are atomics"); the store is published by steal's
                // store-release of into's tail.
                let g = self.slot(h.wrapping_add(i)).load(Relaxed);
                into.slot(into_tail.wrapping_add(i)).store(g, Relaxed);
            }
            // CAS-release, commits the consumption of h..h+n (pairs with the load-acquire of
            // head in put/steal: the owner overwrites these slots only after our reads).
            if self
                .head
                .compare_exchange(h, h.wrapping_add(n), Release, Relaxed)
                .is_ok()
            {
                return n;
            }
            // Another consumer took some of them: what we copied is garbage, retry.
        }
    }

    /// Approximate length: ring plus `runnext`, from a consistent snapshot (Go's retry
    /// pattern of `runqempty`: tail, head, runnext, then tail again, until tail did not
    /// move). May be stale by the time it returns; never more than RUNQ_SIZE + 1.
    /// Any thread.
    pub fn len(&self) -> u32 {
        let (ring, next) = self.snapshot();
        ring + next as u32
    }

    /// Whether the queue (ring and `runnext`) is empty: Go's `runqempty`. A G moving from
    /// `runnext` to the ring concurrently is never missed (see `snapshot`). May be stale by
    /// the time it returns. Any thread.
    pub fn is_empty(&self) -> bool {
        self.snapshot() == (0, false)
    }

    /// (ring length, runnext non-null), consistent with one instant at which tail held.
    ///
    /// Without the second read of tail, "head == tail, then runnext == null" does not mean
    /// empty: between the two reads the owner may kick G1 from runnext to the ring (tail+1)
    /// and then take the new runnext G2. The tail re-read catches it: the owner's clear of
    /// runnext (swap-release in get) is after its tail store, so seeing the null (acquire)
    /// means seeing the new tail.
    fn snapshot(&self) -> (u32, bool) {
        loop {
            // load-acquire, pairs with the store-release of tail in put/steal.
            let t = self.tail.load(Acquire);
            // load-acquire, pairs with the CAS-release of head by consumers. Read after
            // tail, so head <= tail and tail - head <= RUNQ_SIZE: the owner saw a head at
            // least this old before storing t (read-read coherence through the acquire).
            let h = self.head.load(Acquire);
            // load-acquire, pairs with the swap-release of runnext in put/get.
            let next = !self.runnext.load(Acquire).is_null();
            // load-acquire, as the first: retry if the owner moved while we looked.
            if self.tail.load(Acquire) == t {
                let n = t.wrapping_sub(h);
                // Belt and braces: an approximate length must never be absurd.
                return (n.min(N), next);
            }
        }
    }

    /// Removes every G, `runnext` first, then the ring oldest first, passing each to `f`:
    /// Go's `runqdrain`. `f` may put into this queue again.
    ///
    /// # Safety
    /// Only the owner of the queue may call it, or anyone while the P is stopped (the
    /// handover of the P orders the calls).
    pub unsafe fn drain(&self, mut f: impl FnMut(NonNull<T>)) {
        // swap-acq-rel: as in `get`.
        if let Some(g) = NonNull::new(self.runnext.swap(ptr::null_mut(), AcqRel)) {
            f(g);
        }
        let mut batch = [ptr::null_mut::<T>(); RUNQ_SIZE];
        loop {
            // load-acquire, synchronizes with other consumers (pairs with the CAS-release of
            // head in get/grab/take_half/drain).
            let h = self.head.load(Acquire);
            // Relaxed: only the owner writes tail.
            let t = self.tail.load(Relaxed);
            let n = t.wrapping_sub(h);
            if n == 0 {
                return;
            }
            if n > N {
                throw("runqdrain: tail - head > RUNQ_SIZE");
            }
            // Copied before the CAS, so that `f` may put into this queue again.
            for (i, b) in (0..n).zip(batch.iter_mut()) {
                // Relaxed: we wrote these slots ourselves.
                *b = self.slot(h.wrapping_add(i)).load(Relaxed);
            }
            // CAS-release, commits the consumption (pairs with the load-acquire of head in
            // put/steal before a slot is overwritten).
            if self.head.compare_exchange(h, t, Release, Relaxed).is_ok() {
                for &g in &batch[..n as usize] {
                    f(nonnull(g, "runqdrain: empty slot"));
                }
                return;
            }
        }
    }
}

impl<T> Default for RunQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> core::fmt::Debug for RunQueue<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let (ring, next) = self.snapshot();
        f.debug_struct("RunQueue")
            .field("ring", &ring)
            .field("runnext", &next)
            .finish()
    }
}

/// A slot in `head..tail` is never null (only NonNulls are stored there).
fn nonnull<T>(p: *mut T, msg: &str) -> NonNull<T> {
    match NonNull::new(p) {
        Some(g) => g,
        None => throw(msg),
    }
}

/// Reports a broken invariant: `crate::rt::throw` (abort with "gmp: {msg}"), except under
/// loom, where a panic lets the model print the interleaving that broke it.
#[cold]
fn throw(msg: &str) -> ! {
    #[cfg(all(test, loom))]
    panic!("gmp: {msg}");
    #[cfg(not(all(test, loom)))]
    crate::rt::throw(msg)
}

/// Stress tests with real threads. Elements are pointers into one byte array; a G's
/// identity is its index, and conservation is checked with a count per index.
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicBool, AtomicU32 as StdAtomicU32, AtomicUsize, Ordering as O};
    use std::sync::{Arc, Mutex};
    use std::thread;
    use std::time::{Duration, Instant};

    /// `n` distinct fake Gs: element i is `base + i`.
    struct Items {
        bytes: Box<[u8]>,
    }

    impl Items {
        fn new(n: usize) -> Arc<Items> {
            Arc::new(Items {
                bytes: vec![0u8; n].into_boxed_slice(),
            })
        }
        fn g(&self, i: usize) -> NonNull<u8> {
            NonNull::from(&self.bytes[i])
        }
        fn index(&self, g: NonNull<u8>) -> usize {
            let i = (g.as_ptr() as usize).wrapping_sub(self.bytes.as_ptr() as usize);
            assert!(i < self.bytes.len(), "foreign pointer");
            i
        }
        fn len(&self) -> usize {
            self.bytes.len()
        }
    }

    /// Asserts that every index in 0..n appears exactly once across `seen`.
    fn assert_each_once(n: usize, seen: impl IntoIterator<Item = usize>) {
        let mut count = vec![0u32; n];
        for i in seen {
            count[i] += 1;
        }
        for (i, &c) in count.iter().enumerate() {
            assert_eq!(c, 1, "element {i} seen {c} times");
        }
    }

    fn no_overflow(_: &[NonNull<u8>]) {
        panic!("unexpected overflow");
    }

    #[test]
    fn smoke() {
        let it = Items::new(1024);
        let q = RunQueue::<u8>::new();
        assert!(q.is_empty());
        assert_eq!(q.len(), 0);
        // SAFETY (whole test): this thread owns every queue it uses.
        unsafe {
            assert_eq!(q.get(), None);
            // FIFO through the ring.
            for i in 0..3 {
                q.put(it.g(i), false, no_overflow);
            }
            assert_eq!(q.len(), 3);
            for i in 0..3 {
                assert_eq!(q.get(), Some((it.g(i), false)));
            }
            assert_eq!(q.get(), None);

            // runnext first, and a displaced runnext goes to the tail.
            q.put(it.g(0), false, no_overflow);
            q.put(it.g(1), true, no_overflow);
            q.put(it.g(2), true, no_overflow);
            assert_eq!(q.len(), 3);
            assert_eq!(q.get(), Some((it.g(2), true)));
            assert_eq!(q.get(), Some((it.g(0), false)));
            assert_eq!(q.get(), Some((it.g(1), false)));
            assert_eq!(q.get(), None);
            assert!(q.is_empty());

            // Overflow: a full ring gives up its older half plus the new G, in FIFO order.
            for i in 0..RUNQ_SIZE {
                q.put(it.g(i), false, no_overflow);
            }
            assert_eq!(q.len() as usize, RUNQ_SIZE);
            let mut batch = Vec::new();
            q.put(it.g(RUNQ_SIZE), false, |b| {
                batch.extend(b.iter().map(|&g| it.index(g)))
            });
            let expect: Vec<usize> = (0..RUNQ_SIZE / 2).chain([RUNQ_SIZE]).collect();
            assert_eq!(batch, expect);
            assert_eq!(q.len() as usize, RUNQ_SIZE / 2);
            for i in RUNQ_SIZE / 2..RUNQ_SIZE {
                assert_eq!(q.get(), Some((it.g(i), false)));
            }
            assert_eq!(q.get(), None);

            // Steal half, rounded up; the newest stolen one is returned, the rest queued.
            let thief = RunQueue::<u8>::new();
            for i in 0..9 {
                q.put(it.g(i), false, no_overflow);
            }
            q.put(it.g(100), true, no_overflow);
            assert_eq!(thief.steal(&q, true), Some((it.g(4), 5)));
            assert_eq!(thief.len(), 4);
            assert_eq!(q.len(), 5);
            for i in 0..4 {
                assert_eq!(thief.get(), Some((it.g(i), false)));
            }
            assert_eq!(thief.get(), None);
            // runnext is not taken while the ring has Gs, nor without steal_runnext.
            assert_eq!(thief.steal(&q, true), Some((it.g(6), 2)));
            assert_eq!(thief.get(), Some((it.g(5), false)));
            assert_eq!(thief.steal(&q, true), Some((it.g(7), 1)));
            assert_eq!(thief.steal(&q, true), Some((it.g(8), 1)));
            assert_eq!(thief.steal(&q, false), None);
            assert_eq!(thief.steal(&q, true), Some((it.g(100), 1)));
            assert_eq!(thief.steal(&q, true), None);
            assert!(q.is_empty());
            assert!(thief.is_empty());

            // Drain: runnext first, then the ring in order, across the wrap of the ring.
            for i in 0..RUNQ_SIZE - 1 {
                q.put(it.g(i), false, no_overflow);
            }
            q.put(it.g(RUNQ_SIZE), true, no_overflow);
            let mut out = Vec::new();
            q.drain(|g| out.push(it.index(g)));
            let expect: Vec<usize> = [RUNQ_SIZE].into_iter().chain(0..RUNQ_SIZE - 1).collect();
            assert_eq!(out, expect);
            assert!(q.is_empty());
            q.drain(|_| panic!("drained an empty queue"));
        }
    }

    /// Counters near u32::MAX: the ring must not care where the counters wrap.
    #[test]
    fn counter_wrap() {
        let it = Items::new(RUNQ_SIZE * 2);
        let q = RunQueue::<u8>::new();
        let start = u32::MAX - 3;
        q.head.store(start, O::Relaxed);
        q.tail.store(start, O::Relaxed);
        // SAFETY: this thread owns the queue.
        unsafe {
            for i in 0..RUNQ_SIZE {
                q.put(it.g(i), false, no_overflow);
            }
            assert_eq!(q.len() as usize, RUNQ_SIZE);
            let mut n = 0;
            q.put(it.g(RUNQ_SIZE), false, |b| n = b.len());
            assert_eq!(n, RUNQ_SIZE / 2 + 1);
            for i in RUNQ_SIZE / 2..RUNQ_SIZE {
                assert_eq!(q.get(), Some((it.g(i), false)));
            }
            assert_eq!(q.get(), None);
        }
    }

    /// Owner only puts (overflow included); one thief steals; each G comes out once.
    #[test]
    fn spsc() {
        const COUNT: usize = 200_000;
        let it = Items::new(COUNT);
        let q = Arc::new(RunQueue::<u8>::new());
        let done = Arc::new(AtomicBool::new(false));

        let thief = {
            let (it, q, done) = (it.clone(), q.clone(), done.clone());
            thread::spawn(move || {
                let own = RunQueue::<u8>::new();
                let mut seen = Vec::new();
                loop {
                    let finished = done.load(O::Acquire);
                    // SAFETY: this thread owns `own`; it steals only when `own` is empty.
                    unsafe {
                        while let Some((g, _)) = own.get() {
                            seen.push(it.index(g));
                        }
                        match own.steal(&q, true) {
                            Some((g, _)) => seen.push(it.index(g)),
                            None if finished => break,
                            None => thread::yield_now(),
                        }
                    }
                }
                seen
            })
        };

        let mut seen = Vec::new();
        for i in 0..COUNT {
            // SAFETY: this thread owns `q`.
            unsafe {
                q.put(it.g(i), i % 7 == 0, |b| {
                    seen.extend(b.iter().map(|&g| it.index(g)))
                })
            };
        }
        done.store(true, O::Release);
        let stolen = thief.join().unwrap();
        // SAFETY: this thread owns `q`; the thief is gone.
        unsafe { q.drain(|g| seen.push(it.index(g))) };
        assert!(!stolen.is_empty(), "the thief stole nothing");
        assert_each_once(COUNT, seen.into_iter().chain(stolen));
    }

    /// One owner putting and getting, many thieves, 1M elements.
    #[test]
    fn stampede() {
        const COUNT: usize = 1_000_000;
        const THIEVES: usize = 4;
        let it = Items::new(COUNT);
        let q = Arc::new(RunQueue::<u8>::new());
        let done = Arc::new(AtomicBool::new(false));

        let thieves: Vec<_> = (0..THIEVES)
            .map(|_| {
                let (it, q, done) = (it.clone(), q.clone(), done.clone());
                thread::spawn(move || {
                    let own = RunQueue::<u8>::new();
                    let mut seen = Vec::new();
                    loop {
                        let finished = done.load(O::Acquire);
                        // SAFETY: this thread owns `own`; it steals only when `own` is empty.
                        unsafe {
                            while let Some((g, _)) = own.get() {
                                seen.push(it.index(g));
                            }
                            match own.steal(&q, seen.len() % 2 == 0) {
                                Some((g, _)) => seen.push(it.index(g)),
                                None if finished => break,
                                None => thread::yield_now(),
                            }
                        }
                    }
                    seen
                })
            })
            .collect();

        let mut seen = Vec::with_capacity(COUNT);
        for i in 0..COUNT {
            // SAFETY: this thread owns `q`.
            unsafe {
                q.put(it.g(i), i % 5 == 0, |b| {
                    seen.extend(b.iter().map(|&g| it.index(g)))
                });
                if i % 3 == 0
                    && let Some((g, _)) = q.get()
                {
                    seen.push(it.index(g));
                }
            }
        }
        done.store(true, O::Release);
        let mut all = seen;
        for t in thieves {
            all.extend(t.join().unwrap());
        }
        // SAFETY: this thread owns `q`; the thieves are gone.
        unsafe { q.drain(|g| all.push(it.index(g))) };
        assert_each_once(COUNT, all);
    }

    /// Every worker owns a queue: the first produces, all of them get, steal from each
    /// other (runnext on every fourth pass) and re-enqueue each G once into their own queue,
    /// half of them through runnext; overflow goes to a locked global queue. Each G must be
    /// retired exactly once.
    #[test]
    fn stress() {
        const COUNT: usize = 300_000;
        const WORKERS: usize = 4;
        let it = Items::new(COUNT);
        let queues: Arc<Vec<RunQueue<u8>>> =
            Arc::new((0..WORKERS).map(|_| RunQueue::new()).collect());
        let global = Arc::new(Mutex::new(VecDeque::<usize>::new()));
        let requeued: Arc<Vec<AtomicBool>> =
            Arc::new((0..COUNT).map(|_| AtomicBool::new(false)).collect());
        let retired: Arc<Vec<StdAtomicU32>> =
            Arc::new((0..COUNT).map(|_| StdAtomicU32::new(0)).collect());
        let total = Arc::new(AtomicUsize::new(0));

        let workers: Vec<_> = (0..WORKERS)
            .map(|w| {
                let (it, queues, global, requeued, retired, total) = (
                    it.clone(),
                    queues.clone(),
                    global.clone(),
                    requeued.clone(),
                    retired.clone(),
                    total.clone(),
                );
                thread::spawn(move || {
                    let own = &queues[w];
                    let overflow = |b: &[NonNull<u8>]| {
                        global
                            .lock()
                            .unwrap()
                            .extend(b.iter().map(|&g| it.index(g)))
                    };
                    let mut produced = 0;
                    let mut pass = 0usize;
                    let mut rng = 0x9e37_79b9u32.wrapping_mul(w as u32 + 1);
                    // Retires or re-enqueues one G.
                    let run = |i: usize| {
                        if !requeued[i].swap(true, O::Relaxed) {
                            // SAFETY: this thread owns `own`.
                            unsafe { own.put(it.g(i), i.is_multiple_of(2), overflow) };
                        } else {
                            assert_eq!(
                                retired[i].fetch_add(1, O::Relaxed),
                                0,
                                "G {i} retired twice"
                            );
                            total.fetch_add(1, O::Relaxed);
                        }
                    };
                    while total.load(O::Relaxed) < COUNT {
                        if w == 0 && produced < COUNT {
                            for _ in 0..64.min(COUNT - produced) {
                                run(produced);
                                produced += 1;
                            }
                        }
                        // SAFETY: this thread owns `own`.
                        if let Some((g, _)) = unsafe { own.get() } {
                            run(it.index(g));
                            continue;
                        }
                        let from_global = global.lock().unwrap().pop_front();
                        if let Some(i) = from_global {
                            run(i);
                            continue;
                        }
                        pass += 1;
                        rng ^= rng << 13;
                        rng ^= rng >> 17;
                        rng ^= rng << 5;
                        let victim = (w + 1 + rng as usize % (WORKERS - 1)) % WORKERS;
                        // SAFETY: this thread owns `own`, whose ring is empty (get said so).
                        match unsafe { own.steal(&queues[victim], pass.is_multiple_of(4)) } {
                            Some((g, _)) => run(it.index(g)),
                            None => thread::yield_now(),
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        for (i, r) in retired.iter().enumerate() {
            assert_eq!(r.load(O::Relaxed), 1, "G {i}");
        }
        assert!(queues.iter().all(|q| q.is_empty()));
        assert!(global.lock().unwrap().is_empty());
    }

    /// The owner keeps putting and getting; thieves still make progress.
    #[test]
    fn no_starvation() {
        const THIEVES: usize = 2;
        const WANT: usize = 10_000;
        let it = Items::new(1 << 16);
        let q = Arc::new(RunQueue::<u8>::new());
        let done = Arc::new(AtomicBool::new(false));

        let thieves: Vec<_> = (0..THIEVES)
            .map(|_| {
                let (q, done) = (q.clone(), done.clone());
                thread::spawn(move || {
                    let own = RunQueue::<u8>::new();
                    let mut stolen = 0;
                    while stolen < WANT && !done.load(O::Relaxed) {
                        // SAFETY: this thread owns `own`, emptied before each steal.
                        unsafe {
                            if let Some((_, n)) = own.steal(&q, false) {
                                stolen += n as usize;
                                own.drain(|_| {});
                            }
                        }
                    }
                    stolen
                })
            })
            .collect();

        let deadline = Instant::now() + Duration::from_secs(5);
        let mut i = 0;
        while !thieves.iter().all(|t| t.is_finished()) && Instant::now() < deadline {
            // SAFETY: this thread owns `q`.
            unsafe {
                q.put(it.g(i % it.len()), false, |_| {});
                if i % 2 == 0 {
                    q.get();
                }
            }
            i += 1;
        }
        done.store(true, O::Relaxed);
        for t in thieves {
            let stolen = t.join().unwrap();
            assert!(stolen >= WANT, "a thief starved: {stolen} stolen in 5 s");
        }
    }

    /// len/is_empty from another thread never see an absurd or falsely empty queue while
    /// the owner keeps exactly one or two Gs queued, kicking runnext into the ring and
    /// taking runnext back (the race `runqempty` defends against).
    #[test]
    fn len_is_consistent() {
        const ROUNDS: usize = 200_000;
        let it = Items::new(2);
        let q = Arc::new(RunQueue::<u8>::new());
        let done = Arc::new(AtomicBool::new(false));
        // SAFETY: this thread owns `q` (until the owner thread below takes over, after spawn).
        unsafe { q.put(it.g(0), true, no_overflow) };

        let looks = Arc::new(AtomicUsize::new(0));
        let observer = {
            let (q, done, looks) = (q.clone(), done.clone(), looks.clone());
            thread::spawn(move || {
                while !done.load(O::Relaxed) {
                    let n = q.len();
                    assert!((1..=2).contains(&n), "len {n}");
                    assert!(!q.is_empty(), "falsely empty");
                    looks.fetch_add(1, O::Relaxed);
                }
            })
        };

        // `aux` belongs to this thread too; it takes the ring's G to keep one G queued.
        let aux = RunQueue::<u8>::new();
        let (mut a, mut b) = (it.g(0), it.g(1));
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut rounds = 0;
        // Until both have done enough, so that their work overlaps on any scheduling.
        while (rounds < ROUNDS || looks.load(O::Relaxed) < ROUNDS) && Instant::now() < deadline {
            rounds += 1;
            // SAFETY: this thread owns `q` and `aux`.
            unsafe {
                // runnext = a, ring empty.
                q.put(b, true, no_overflow); // runnext = b, ring = [a]
                assert_eq!(q.get(), Some((b, true))); // runnext empty, ring = [a]
                q.put(b, true, no_overflow); // runnext = b, ring = [a]
                assert_eq!(aux.steal(&q, false), Some((a, 1))); // runnext = b, ring empty
            }
            core::mem::swap(&mut a, &mut b);
        }
        done.store(true, O::Relaxed);
        observer.join().unwrap();
        assert!(looks.load(O::Relaxed) > 0, "the observer never looked");
    }
}

/// Loom models, with RUNQ_SIZE = 4 so that wrap-around and overflow are reached in a few
/// operations. Elements are pointers into a static array; every model checks conservation:
/// each element comes out exactly once, from the owner, a thief or the overflow batch.
/// Run by `tests/loom.rs` (`RUSTFLAGS="--cfg loom" cargo test --release --lib loom_tests`).
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::loom::model_bounded as model;
    use crate::loom::sync::Arc;
    use crate::loom::thread;

    static ITEMS: [u8; 16] = [0; 16];

    fn g(i: usize) -> NonNull<u8> {
        NonNull::from(&ITEMS[i])
    }

    fn index(g: NonNull<u8>) -> usize {
        let i = (g.as_ptr() as usize).wrapping_sub(ITEMS.as_ptr() as usize);
        assert!(i < ITEMS.len(), "foreign pointer");
        i
    }

    /// Each of 0..n exactly once.
    fn assert_each_once(n: usize, seen: &[usize]) {
        let mut count = [0u32; 16];
        for &i in seen {
            count[i] += 1;
        }
        for (i, &c) in count[..n].iter().enumerate() {
            assert_eq!(c, 1, "element {i} seen {c} times in {seen:?}");
        }
        assert!(count[n..].iter().all(|&c| c == 0));
    }

    /// A thief: one steal into its own queue, then everything from its own queue.
    fn thief(victim: Arc<RunQueue<u8>>, steal_runnext: bool) -> thread::JoinHandle<Vec<usize>> {
        thread::spawn(move || {
            let own = RunQueue::<u8>::new();
            let mut seen = Vec::new();
            // SAFETY: this thread owns `own`, which is empty when it steals.
            unsafe {
                if let Some((x, n)) = own.steal(&victim, steal_runnext) {
                    assert!(n >= 1 && n as usize <= RUNQ_SIZE / 2);
                    seen.push(index(x));
                }
                while let Some((x, inherit)) = own.get() {
                    assert!(!inherit);
                    seen.push(index(x));
                }
            }
            assert!(own.is_empty());
            seen
        })
    }

    /// (a) The owner puts and gets past the wrap of the ring while a thief steals.
    #[test]
    fn put_get_vs_steal() {
        model(Some(3), || {
            const COUNT: usize = 6;
            let q = Arc::new(RunQueue::<u8>::new());
            let t = thief(q.clone(), false);
            let mut seen = Vec::new();
            // SAFETY: this thread owns `q`.
            unsafe {
                for i in 0..COUNT {
                    q.put(g(i), false, |b| seen.extend(b.iter().map(|&x| index(x))));
                    if i % 2 == 1
                        && let Some((x, _)) = q.get()
                    {
                        seen.push(index(x));
                    }
                }
                while let Some((x, _)) = q.get() {
                    seen.push(index(x));
                }
            }
            seen.extend(t.join().unwrap());
            assert_each_once(COUNT, &seen);
            assert!(q.is_empty());
        });
    }

    /// (b) The owner fills the ring and overflows while a thief steals: the batch is FIFO and
    /// of the right size, or the owner retried the fast path because the thief made room.
    #[test]
    fn overflow_vs_steal() {
        model(Some(3), || {
            const COUNT: usize = RUNQ_SIZE + 2;
            let q = Arc::new(RunQueue::<u8>::new());
            let t = thief(q.clone(), false);
            let mut seen = Vec::new();
            let mut batches = 0;
            // SAFETY: this thread owns `q`.
            unsafe {
                for i in 0..COUNT {
                    q.put(g(i), false, |b| {
                        assert_eq!(b.len(), RUNQ_SIZE / 2 + 1);
                        let ix: Vec<usize> = b.iter().map(|&x| index(x)).collect();
                        assert!(ix.windows(2).all(|w| w[0] < w[1]), "batch not FIFO: {ix:?}");
                        assert_eq!(*ix.last().unwrap(), i, "the new G ends the batch");
                        seen.extend(ix);
                        batches += 1;
                    });
                }
                q.drain(|x| seen.push(index(x)));
            }
            let stolen = t.join().unwrap();
            if stolen.is_empty() {
                assert!(batches >= 1, "a full ring must overflow");
            }
            seen.extend(stolen);
            assert_each_once(COUNT, &seen);
        });
    }

    /// (c) runnext kicked to the ring and taken by the owner while a thief steals with
    /// steal_runnext.
    #[test]
    fn runnext_vs_steal() {
        model(Some(3), || {
            let q = Arc::new(RunQueue::<u8>::new());
            // SAFETY: this thread owns `q` (before and after the thief's lifetime too).
            unsafe { q.put(g(0), true, |_| unreachable!()) };
            let t = thief(q.clone(), true);
            let mut seen = Vec::new();
            // SAFETY: this thread owns `q`.
            unsafe {
                q.put(g(1), true, |_| unreachable!()); // kicks 0 to the ring, if still there
                if let Some((x, _)) = q.get() {
                    seen.push(index(x));
                }
                q.put(g(2), true, |_| unreachable!());
                while let Some((x, _)) = q.get() {
                    seen.push(index(x));
                }
            }
            seen.extend(t.join().unwrap());
            assert_each_once(3, &seen);
            assert!(q.is_empty());
        });
    }

    /// (d) Two thieves against one owner that puts, overflows and gets.
    #[test]
    fn two_thieves() {
        model(Some(2), || {
            const COUNT: usize = RUNQ_SIZE + 1;
            let q = Arc::new(RunQueue::<u8>::new());
            let t1 = thief(q.clone(), true);
            let t2 = thief(q.clone(), false);
            let mut seen = Vec::new();
            // SAFETY: this thread owns `q`.
            unsafe {
                for i in 0..COUNT {
                    q.put(g(i), i == COUNT - 1, |b| {
                        seen.extend(b.iter().map(|&x| index(x)))
                    });
                }
                if let Some((x, _)) = q.get() {
                    seen.push(index(x));
                }
                q.drain(|x| seen.push(index(x)));
            }
            seen.extend(t1.join().unwrap());
            seen.extend(t2.join().unwrap());
            assert_each_once(COUNT, &seen);
        });
    }

    /// The runqempty race: the queue always holds one or two Gs while the owner kicks
    /// runnext into the ring and takes runnext back; an observer must never see it empty.
    #[test]
    fn is_empty_vs_runnext_kick() {
        model(None, || {
            let q = Arc::new(RunQueue::<u8>::new());
            // SAFETY: this thread owns `q`.
            unsafe { q.put(g(0), true, |_| unreachable!()) };
            let observer = {
                let q = q.clone();
                thread::spawn(move || {
                    assert!(!q.is_empty(), "falsely empty");
                    let n = q.len();
                    assert!((1..=2).contains(&n), "len {n}");
                })
            };
            // SAFETY: this thread owns `q`.
            unsafe {
                q.put(g(1), true, |_| unreachable!()); // runnext = 1, ring = [0]
                assert_eq!(q.get(), Some((g(1), true))); // ring = [0]
            }
            observer.join().unwrap();
        });
    }
}
