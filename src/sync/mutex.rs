//! Go's sync.Mutex over a C struct (`gmp_mutex`: an `int32_t` state word and a `uint32_t`
//! semaphore word, both zero when unlocked, so `{0, 0}` is a valid static initializer).
//!
//! # The state word
//! ```text
//!   bit 0        LOCKED    someone holds the mutex
//!   bit 1        WOKEN     a waiter was woken (or a spinner announced itself): unlock
//!                          need not wake another
//!   bit 2        STARVING  starvation mode (below)
//!   bits 3..31   waiters   goroutines/threads blocked (or about to block) on `sema`
//! ```
//!
//! # Two modes (Go's mutex.go)
//! - **Normal**: waiters queue FIFO on the semaphore, but a woken waiter does not own the
//!   mutex: it competes with newcomers, which already run on a CPU and usually win. A newly
//!   arriving goroutine may spin a little (`can_spin`) before it blocks. A waiter that lost
//!   goes back to the *head* of the queue (`semacquire1(.., lifo = true, ..)`).
//! - **Starvation**: entered when a waiter has waited more than [`STARVATION_THRESHOLD_NS`]
//!   (1 ms). Unlock hands the mutex directly to the first waiter (`semrelease1(..,
//!   handoff = true)`); newcomers neither spin nor take it, they queue at the tail. The
//!   LOCKED bit stays clear while the mutex is in flight: the waiter that receives it sets
//!   LOCKED and drops its own waiter count in one add. The mode ends when that waiter is the
//!   last one or waited less than 1 ms.
//!
//! Normal mode is much faster (a goroutine can take the mutex several times in a row even
//! with waiters); starvation mode bounds the tail latency.
//!
//! The mutex is not tied to a goroutine or thread: any caller may unlock a locked mutex.
//! Unlocking an unlocked one aborts with Go's panic text.

use core::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use crate::loom::AtomicWord;
use crate::rt::{self, WaitReason, fatal, throw};
use crate::sync::SemaWord;
use crate::sys::{nanotime, procyield};

const MUTEX_LOCKED: i32 = 1;
const MUTEX_WOKEN: i32 = 2;
const MUTEX_STARVING: i32 = 4;
const MUTEX_WAITER_SHIFT: u32 = 3;
const ONE_WAITER: i32 = 1 << MUTEX_WAITER_SHIFT;

/// A waiter that waited longer than this switches the mutex to starvation mode (Go's
/// starvationThresholdNs). 1 ms is ~10^4 uncontended lock/unlock pairs: long enough that
/// normal mode's throughput wins in ordinary contention, short enough to bound a waiter's
/// latency when one goroutine keeps relocking.
const STARVATION_THRESHOLD_NS: i64 = 1_000_000;

/// Spin iterations before blocking, and pauses per iteration (Go's active_spin and
/// active_spin_cnt): 4 × 30 reference pauses (`procyield`, calibrated) ≈ 3 µs, the order
/// of a short critical section held by a goroutine running on another P, and well below a
/// park/unpark round trip.
const ACTIVE_SPIN: u32 = 4;
const ACTIVE_SPIN_CNT: u32 = 30;

/// Go's sync_runtime_canSpin: spinning pays only if the holder may be running on another
/// CPU right now and nobody else needs ours. So: on a goroutine (a foreign thread has no P
/// and its caller decides how it waits), at most [`ACTIVE_SPIN`] iterations, GOMAXPROCS > 1,
/// and at least one other P running (not idle, not a spinning M without work).
///
/// Deviation: Go also requires this P's local run queue to be empty (park and let a
/// runnable goroutine run rather than delay it). Here that check makes contended locking
/// park instead of spin: with more lockers than Ps, the others are queued on the same P
/// in most of the spin decisions (8 goroutines, GOMAXPROCS=2), so a locker parks hundreds
/// of times as often as without the check, and each park and wake-up costs a switch: the
/// contended mutex workload takes about twice as long per pair, slower than Go
/// (`scripts/ab.sh -p 2 mutex . go`). A queued goroutine
/// waits at most one bounded spin per lock call (4 × 30 pauses, a few µs) instead.
/// HACKING.md "Deviations"; `sync_mutex_local` tests that bound.
///
/// Approximation: Go also requires more than one CPU; GOMAXPROCS defaults to the CPU
/// count.
fn can_spin(iter: u32) -> bool {
    if iter >= ACTIVE_SPIN {
        return false;
    }
    let m = rt::getm();
    if m.is_null() {
        return false;
    }
    let procs = rt::SCHED.gomaxprocs.load(Ordering::Relaxed);
    let idle = rt::SCHED.npidle.load(Ordering::Relaxed);
    let spinning = rt::SCHED.nmspinning.load(Ordering::Relaxed);
    if procs <= 1 || procs <= idle + spinning + 1 {
        return false;
    }
    // SAFETY: a non-null TLS slot holds this thread's live M; only this M writes its `p`
    // while it runs a goroutine.
    let pp = unsafe { (*m).p.load(Ordering::Relaxed) };
    // A goroutine in a blocking call (no P) parks at once: it has no P to hold.
    !pp.is_null()
}

/// Test hook, debug builds only: `GMP_DEBUG=mutexspindelay=<µs>` stretches each spin
/// iteration of `lock_slow` by a sleep (the spinner keeps its P), so that a test can
/// unlock the mutex while a spinner spins (c-tests/sync_mutex_spin.c).
#[cfg(debug_assertions)]
fn spin_delay() {
    crate::sys::dbgvars::delay(crate::sys::dbgvars::Var::Mutexspindelay);
}

/// The uncontended lock: one CAS of a free mutex to locked. The C API runs it before (and
/// outside) its panic boundary, so that the common case is a frameless function. (C callers
/// usually never get here: gmp.h inlines this CAS, see docs/internals/sync.md, "The mutex's
/// inline fast paths", which depend on the state word's layout above.)
#[inline(always)]
pub fn lock_fast<S: AtomicWord<V = i32> + ?Sized>(state: &S) -> bool {
    // acquire: pairs with the release in `unlock`.
    state
        .compare_exchange(0, MUTEX_LOCKED, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
}

/// The uncontended unlock: drops the locked bit; returns the new state, which must go to
/// `Mutex::unlock_slow` when it is not 0 (waiters, or a misuse to report).
#[inline(always)]
pub fn unlock_fast<S: AtomicWord<V = i32> + ?Sized>(state: &S) -> i32 {
    // release: publishes the critical section to the next locker (pairs with `lock`).
    state
        .fetch_add(-MUTEX_LOCKED, Ordering::Release)
        .wrapping_sub(MUTEX_LOCKED)
}

/// `Mutex::try_lock` on any state word.
#[inline(always)]
pub(crate) fn try_lock_in<S: AtomicWord<V = i32> + ?Sized>(state: &S) -> bool {
    let old = state.load(Ordering::Relaxed);
    if old & (MUTEX_LOCKED | MUTEX_STARVING) != 0 {
        return false;
    }
    state
        .compare_exchange(
            old,
            old | MUTEX_LOCKED,
            Ordering::Acquire,
            Ordering::Relaxed,
        )
        .is_ok()
}

/// The two words of a `gmp_mutex`.
pub struct Mutex<'a> {
    pub state: &'a AtomicI32,
    pub sema: &'a AtomicU32,
}

impl Mutex<'_> {
    /// Locks the mutex, blocking (a goroutine parks, a foreign thread sleeps) until it is
    /// free.
    #[inline]
    pub fn lock(&self) {
        if !lock_fast(self.state) {
            self.lock_slow();
        }
    }

    /// Takes the mutex if that needs no waiting. Fails when it is locked or in starvation
    /// mode (then it belongs to the first waiter).
    pub fn try_lock(&self) -> bool {
        try_lock_in(self.state)
    }

    #[cold]
    pub(crate) fn lock_slow(&self) {
        // Unscoped: always Ok.
        let _ = lock_slow_in(self.state, &self.waits(), false);
        self.tsan_acquire();
    }

    /// Locks the mutex unless the caller's scope (rt/scope.rs) ends the wait first:
    /// Err(ECANCELED or ETIMEDOUT), the mutex not taken. A free mutex is taken even then.
    #[inline]
    pub fn lock_scoped(&self) -> Result<(), i32> {
        if lock_fast(self.state) {
            return Ok(());
        }
        self.lock_slow_scoped()
    }

    /// The contended half of [`Mutex::lock_scoped`].
    #[cold]
    pub(crate) fn lock_slow_scoped(&self) -> Result<(), i32> {
        lock_slow_in(self.state, &self.waits(), true)?;
        self.tsan_acquire();
        Ok(())
    }

    fn waits(&self) -> RuntimeWaits<'_> {
        RuntimeWaits {
            state: self.state,
            sema: self.sema,
        }
    }

    fn tsan_acquire(&self) {
        if crate::sys::tsan::on() {
            // The unlock's release (unlock_slow, or the inline fast path TSan sees itself).
            crate::sys::tsan::acquire(self.state as *const AtomicI32 as usize);
        }
    }

    /// Unlocks the mutex. Aborts with "gmp: sync: unlock of unlocked mutex" if it is not
    /// locked.
    #[inline]
    pub fn unlock(&self) {
        let new = unlock_fast(self.state);
        if new != 0 {
            // Waiters, or a misuse.
            self.unlock_slow(new);
        }
    }

    #[cold]
    pub(crate) fn unlock_slow(&self, new: i32) {
        if crate::sys::tsan::on() {
            crate::sys::tsan::release(self.state as *const AtomicI32 as usize);
        }
        unlock_slow_in(self.state, new, &self.waits());
    }
}

/// What the slow paths need besides the state word: the spin decision, a spin, the clock
/// and the semaphore. [`RuntimeWaits`] is the runtime's; the loom model has its own.
pub(crate) trait MutexWaits {
    fn can_spin(&self, iter: u32) -> bool;
    /// One spin iteration, between two looks at the state.
    fn spin(&self);
    fn nanotime(&self) -> i64;
    /// Waits for the semaphore (Go's `semacquire1(&m.sema, lifo, ..)`).
    fn semacquire(&self, lifo: bool);
    /// `semacquire` that the caller's scope ends: Err(errno) then, and the wait leaves
    /// [`ghost_woken`] on the mutex's state word in its place (sync/sema.rs, "Ghosts").
    fn semacquire_scoped(&self, lifo: bool) -> Result<(), i32>;
    /// The errno of the caller's scope if it has ended, else 0.
    fn scope_err(&self) -> i32;
    /// Releases the semaphore, to the first waiter in person when `handoff`.
    fn semrelease(&self, handoff: bool);
}

/// The runtime's [`MutexWaits`]: the address-keyed semaphore on the mutex's `sema` word.
struct RuntimeWaits<'a> {
    state: &'a AtomicI32,
    sema: &'a AtomicU32,
}

/// The ghost of a cancelled runtime mutex wait: [`ghost_woken`] on the state word at
/// `args[0]`.
///
/// # Safety
/// `args[0]` is the address of a live mutex's state word.
unsafe fn runtime_ghost(args: &[usize; 4]) -> Option<bool> {
    // SAFETY: caller contract; all access to the word is atomic.
    ghost_woken(unsafe { AtomicI32::from_ptr(args[0] as *mut i32) })
}

impl MutexWaits for RuntimeWaits<'_> {
    #[inline(always)]
    fn can_spin(&self, iter: u32) -> bool {
        can_spin(iter)
    }
    #[inline(always)]
    fn spin(&self) {
        procyield(ACTIVE_SPIN_CNT);
        #[cfg(debug_assertions)]
        spin_delay();
    }
    #[inline(always)]
    fn nanotime(&self) -> i64 {
        nanotime()
    }
    #[inline(always)]
    fn semacquire(&self, lifo: bool) {
        self.sema.acquire(lifo, WaitReason::Semacquire);
    }
    fn semacquire_scoped(&self, lifo: bool) -> Result<(), i32> {
        let ghost = crate::sync::sema::Ghost {
            act: runtime_ghost,
            args: [self.state.as_ptr() as usize, 0, 0, 0],
        };
        crate::sync::sema::semacquire_scoped_ghost(self.sema, lifo, WaitReason::Semacquire, ghost)
    }
    fn scope_err(&self) -> i32 {
        rt::scope::current_err()
    }
    #[inline(always)]
    fn semrelease(&self, handoff: bool) {
        self.sema.release(handoff);
    }
}

/// Go's `lockSlow`: spin, queue, take the mutex or receive it in starvation mode.
/// `scoped`: the caller's scope may end the wait (Err(errno), the mutex not taken): before
/// it queues, or while queued, when the semaphore wait leaves a ghost in its place.
fn lock_slow_in<S: AtomicWord<V = i32> + ?Sized, W: MutexWaits>(
    state: &S,
    w: &W,
    scoped: bool,
) -> Result<(), i32> {
    let mut wait_start: i64 = 0;
    let mut starving = false;
    // We were woken from the semaphore (or set WOKEN while spinning): the WOKEN bit is
    // ours to clear.
    let mut awoke = false;
    let mut iter = 0;
    let mut old = state.load(Ordering::Relaxed);
    loop {
        // Spin only in normal mode while the mutex is held: in starvation mode it goes
        // to the first waiter, so spinning cannot win it.
        if old & (MUTEX_LOCKED | MUTEX_STARVING) == MUTEX_LOCKED && w.can_spin(iter) {
            // Announce ourselves (WOKEN), so that unlock does not wake a sleeper that
            // would only compete with us.
            if !awoke
                && old & MUTEX_WOKEN == 0
                && old >> MUTEX_WAITER_SHIFT != 0
                && state
                    .compare_exchange(old, old | MUTEX_WOKEN, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                awoke = true;
            }
            w.spin();
            iter += 1;
            old = state.load(Ordering::Relaxed);
            continue;
        }
        if scoped && !awoke && old & (MUTEX_LOCKED | MUTEX_STARVING) != 0 {
            // About to queue (nothing of ours in the state word yet): a scope that ended
            // ends the call here.
            let e = w.scope_err();
            if e != 0 {
                return Err(e);
            }
        }
        let mut new = old;
        // Do not take a starving mutex: it belongs to the waiters; queue instead.
        if old & MUTEX_STARVING == 0 {
            new |= MUTEX_LOCKED;
        }
        if old & (MUTEX_LOCKED | MUTEX_STARVING) != 0 {
            new = new.wrapping_add(ONE_WAITER);
        }
        // We waited too long: switch to starvation mode, but only while the mutex is
        // held. If it is free we take it now, and would leave a starving mutex that
        // may have no waiters, while unlock in starvation mode hands it to one.
        if starving && old & MUTEX_LOCKED != 0 {
            new |= MUTEX_STARVING;
        }
        if awoke {
            if new & MUTEX_WOKEN == 0 {
                throw("sync: inconsistent mutex state");
            }
            new &= !MUTEX_WOKEN;
        }
        // acq-rel: acquire when this takes the lock (pairs with unlock's release).
        if let Err(cur) = state.compare_exchange(old, new, Ordering::AcqRel, Ordering::Relaxed) {
            old = cur;
            continue;
        }
        if old & (MUTEX_LOCKED | MUTEX_STARVING) == 0 {
            return Ok(()); // locked it with the CAS
        }
        // A waiter that has already waited goes to the head of the queue.
        let lifo = wait_start != 0;
        if wait_start == 0 {
            wait_start = w.nanotime();
        }
        if scoped {
            // Err: our waiter count and place in the queue are the ghost's now.
            w.semacquire_scoped(lifo)?;
        } else {
            w.semacquire(lifo);
        }
        starving = starving || w.nanotime() - wait_start > STARVATION_THRESHOLD_NS;
        old = state.load(Ordering::Relaxed);
        if old & MUTEX_STARVING != 0 {
            // The mutex was handed to us: it is unlocked (LOCKED clear), nobody else
            // was woken, and we are still counted as a waiter.
            if old & (MUTEX_LOCKED | MUTEX_WOKEN) != 0 || old >> MUTEX_WAITER_SHIFT == 0 {
                throw("sync: inconsistent mutex state");
            }
            let mut delta = MUTEX_LOCKED - ONE_WAITER;
            if !starving || old >> MUTEX_WAITER_SHIFT == 1 {
                // Leave starvation mode: we waited briefly, or we are the last waiter
                // (staying starving with no waiters would hand the next unlock to
                // nobody).
                delta -= MUTEX_STARVING;
            }
            // acq-rel: the hand-off's semaphore already ordered us after the unlocker;
            // release keeps our later critical section after this take.
            state.fetch_add(delta, Ordering::AcqRel);
            return Ok(());
        }
        awoke = true;
        iter = 0;
    }
}

/// What a cancelled waiter's ghost does once a release reached it (sync/sema.rs,
/// "Ghosts"): what `lock_slow_in` does after its `semacquire`, short of keeping the mutex.
/// In starvation mode the mutex was handed to it: it takes it as the woken waiter does
/// and unlocks it at once (which hands it to the next waiter). In normal mode the unlocker
/// took its waiter count off and set WOKEN for it: it clears WOKEN and, if the mutex is
/// free with waiters, wakes the next one, as an unlock would. Returns the release to make
/// (`Some(handoff)`), if any.
pub(crate) fn ghost_woken<S: AtomicWord<V = i32> + ?Sized>(state: &S) -> Option<bool> {
    let mut old = state.load(Ordering::Relaxed);
    if old & MUTEX_STARVING != 0 {
        if old & (MUTEX_LOCKED | MUTEX_WOKEN) != 0 || old >> MUTEX_WAITER_SHIFT == 0 {
            throw("sync: inconsistent mutex state");
        }
        let mut delta = MUTEX_LOCKED - ONE_WAITER;
        if old >> MUTEX_WAITER_SHIFT == 1 {
            // The last waiter: the mode ends, as lock_slow_in ends it.
            delta -= MUTEX_STARVING;
        }
        // Taken (LOCKED) before it is released, so that a waiter that queued meanwhile
        // is woken by the unlock below, not left behind by a mode that ended.
        state.fetch_add(delta, Ordering::AcqRel);
        return unlock_wake(state, unlock_fast(state));
    }
    loop {
        if old & MUTEX_WOKEN == 0 {
            throw("sync: inconsistent mutex state");
        }
        let mut new = old & !MUTEX_WOKEN;
        let wake = new >> MUTEX_WAITER_SHIFT != 0 && new & (MUTEX_LOCKED | MUTEX_STARVING) == 0;
        if wake {
            new = new.wrapping_sub(ONE_WAITER) | MUTEX_WOKEN;
        }
        match state.compare_exchange(old, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return wake.then_some(false),
            Err(cur) => old = cur,
        }
    }
}

/// Go's `unlockSlow`, given the state after our unlock's decrement: wakes a waiter (normal
/// mode) or hands the mutex to the first one (starvation mode).
fn unlock_slow_in<S: AtomicWord<V = i32> + ?Sized, W: MutexWaits>(state: &S, new: i32, w: &W) {
    if let Some(handoff) = unlock_wake(state, new) {
        w.semrelease(handoff);
    }
}

/// The decision of Go's `unlockSlow`: the release of the semaphore to make (`Some(handoff)`)
/// after an unlock's decrement left `new`, with the waiter count and WOKEN updated for it.
fn unlock_wake<S: AtomicWord<V = i32> + ?Sized>(state: &S, new: i32) -> Option<bool> {
    if new.wrapping_add(MUTEX_LOCKED) & MUTEX_LOCKED == 0 {
        fatal("sync: unlock of unlocked mutex");
    }
    if new & MUTEX_STARVING != 0 {
        // Starvation mode: hand the mutex to the first waiter and our P with it. WOKEN
        // stays clear: the waiter sets LOCKED itself, and until then newcomers see
        // STARVING and queue instead of taking it.
        return Some(true);
    }
    let mut old = new;
    loop {
        // Nobody to wake, or someone is already awake / took the lock / the mode
        // changed: that party handles the waiters.
        if old >> MUTEX_WAITER_SHIFT == 0
            || old & (MUTEX_LOCKED | MUTEX_WOKEN | MUTEX_STARVING) != 0
        {
            return None;
        }
        // Take one waiter off the count and mark it woken, then wake it.
        let next = old.wrapping_sub(ONE_WAITER) | MUTEX_WOKEN;
        match state.compare_exchange(old, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return Some(false),
            Err(cur) => old = cur,
        }
    }
}

/// Loom models of this file's slow paths (`lock_slow_in`, `unlock_slow_in`, and the fast
/// paths in front of them), run on loom's atomics with a model semaphore: Go's semantics
/// for one address (a FIFO of waiters, `lifo` re-queueing at the head, `handoff` giving the
/// count to the dequeued waiter itself), under loom's own mutex and condvar. The semaphore
/// is a reference, not the subject: `sync/sema.rs` has its own tests.
///
/// Every model: the critical section is a loom `UnsafeCell` each locker increments, so two
/// holders at once, or a holder that does not see the previous one's write (a missing
/// acquire/release edge), is reported by loom; every locker finishes (loom reports a
/// deadlock if all threads wait); and afterwards the state word is 0: no waiter count,
/// WOKEN or STARVING bit left behind.
///
/// Run by `tests/loom.rs` (`RUSTFLAGS="--cfg loom" cargo test --release --lib loom_tests`).
#[cfg(all(test, loom))]
pub(crate) mod loom_tests {
    use super::*;
    use crate::loom::cell::UnsafeCell;
    use crate::loom::sync::Arc;
    use crate::loom::sync::atomic::AtomicI32 as LoomI32;
    use crate::loom::{model, sema::ModelSema};
    use std::cell::Cell;

    /// One thread's view of a model mutex: the shared state word and semaphore, how many
    /// spin iterations `can_spin` allows, and the thread's own clock. Its `lock`/`unlock`
    /// are `Mutex::lock`/`unlock` on loom's atomics.
    pub(crate) struct ModelMutex {
        state: Arc<LoomI32>,
        sema: Arc<ModelSema>,
        /// Sleeps of waiters that had slept before (`semacquire` with `lifo`), and
        /// hand-offs (`semrelease` with `handoff`), over all threads. Plain std atomics:
        /// only counted, and read after every thread is joined.
        counts: Arc<[std::sync::atomic::AtomicUsize; 2]>,
        spins: u32,
        /// Added to the clock at each reading: above the starvation threshold, every
        /// waiter that slept once is starving.
        clock_step: i64,
        clock: Cell<i64>,
    }

    impl ModelMutex {
        /// A view of a new mutex.
        pub(crate) fn new(spins: u32, clock_step: i64) -> ModelMutex {
            ModelMutex {
                state: Arc::new(LoomI32::new(0)),
                sema: Arc::new(ModelSema::new()),
                counts: Arc::new(Default::default()),
                spins,
                clock_step,
                clock: Cell::new(0),
            }
        }

        /// Another thread's view of the same mutex.
        pub(crate) fn share(&self) -> ModelMutex {
            ModelMutex {
                state: self.state.clone(),
                sema: self.sema.clone(),
                counts: self.counts.clone(),
                spins: self.spins,
                clock_step: self.clock_step,
                clock: Cell::new(0),
            }
        }

        pub(crate) fn lock(&self) {
            if !lock_fast(&*self.state) {
                let _ = lock_slow_in(&*self.state, self, false);
            }
        }

        /// `Mutex::lock_scoped`; the model semaphore's `cancel` is the scope's.
        pub(crate) fn lock_scoped(&self) -> Result<(), i32> {
            if lock_fast(&*self.state) {
                return Ok(());
            }
            lock_slow_in(&*self.state, self, true)
        }

        pub(crate) fn unlock(&self) {
            let new = unlock_fast(&*self.state);
            if new != 0 {
                unlock_slow_in(&*self.state, new, self);
            }
        }

        pub(crate) fn state(&self) -> i32 {
            self.state.load(Ordering::Relaxed)
        }

        /// (sleeps again, hand-offs) so far.
        fn counts(&self) -> (usize, usize) {
            let c = |i: usize| self.counts[i].load(std::sync::atomic::Ordering::Relaxed);
            (c(0), c(1))
        }
    }

    impl crate::sync::rwmutex::WriterLock for ModelMutex {
        fn lock(&self) {
            ModelMutex::lock(self)
        }
        fn unlock(&self) {
            ModelMutex::unlock(self)
        }
        fn try_lock(&self) -> bool {
            try_lock_in(&*self.state)
        }
    }

    impl MutexWaits for ModelMutex {
        fn can_spin(&self, iter: u32) -> bool {
            iter < self.spins
        }
        fn spin(&self) {
            crate::loom::thread::yield_now();
        }
        fn nanotime(&self) -> i64 {
            let t = self.clock.get() + self.clock_step;
            self.clock.set(t);
            t
        }
        fn semacquire(&self, lifo: bool) {
            if lifo {
                self.counts[0].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            self.sema.acquire(lifo, WaitReason::Semacquire);
        }
        fn semacquire_scoped(&self, lifo: bool) -> Result<(), i32> {
            let state = self.state.clone();
            self.sema
                .down_scoped(lifo, std::sync::Arc::new(move || ghost_woken(&*state)))
        }
        fn scope_err(&self) -> i32 {
            if self.sema.cancelled() {
                libc::ECANCELED
            } else {
                0
            }
        }
        fn semrelease(&self, handoff: bool) {
            if handoff {
                self.counts[1].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            self.sema.release(handoff);
        }
    }

    /// `lockers` threads (the model's main thread one of them) each take the mutex
    /// `rounds` times; checks the three things of the module doc. The main thread tries
    /// `try_lock` first each time (which must fail while the mutex is held or handed to a
    /// starving waiter), then locks.
    fn run(lockers: usize, rounds: usize, spins: u32, clock_step: i64) {
        let m = ModelMutex::new(spins, clock_step);
        // Alone: try_lock takes a free mutex, and not a held one.
        assert!(try_lock_in(&*m.state), "try_lock refused a free mutex");
        assert!(!try_lock_in(&*m.state), "try_lock took a held mutex");
        m.unlock();
        let counter = Arc::new(UnsafeCell::new(0usize));
        let body = |m: ModelMutex, counter: Arc<UnsafeCell<usize>>, try_first: bool| {
            move || {
                for _ in 0..rounds {
                    if !(try_first && try_lock_in(&*m.state)) {
                        m.lock();
                    }
                    // SAFETY: the model's subject: only the holder of the mutex gets here,
                    // and loom reports it if that is not so.
                    counter.with_mut(|c| unsafe { *c += 1 });
                    m.unlock();
                }
            }
        };
        let others: Vec<_> = (1..lockers)
            .map(|_| crate::loom::thread::spawn(body(m.share(), counter.clone(), false)))
            .collect();
        body(m.share(), counter.clone(), true)();
        for t in others {
            t.join().unwrap();
        }
        assert_eq!(m.state(), 0, "state word left behind");
        // SAFETY: every locker has been joined.
        assert_eq!(counter.with(|c| unsafe { *c }), lockers * rounds);
        // The mode: with a clock that never moves nobody starves, so nothing is handed
        // off; with one past the threshold at each reading, a waiter that sleeps again
        // has set STARVING first (the mutex was held when it queued), so an unlock hands
        // the mutex off before the end.
        let (again, handoffs) = m.counts();
        if clock_step == 0 {
            assert_eq!(handoffs, 0, "a hand-off without starvation");
        } else if clock_step > STARVATION_THRESHOLD_NS && again > 0 {
            assert!(
                handoffs > 0,
                "a waiter slept again, and no hand-off followed"
            );
        }
    }

    /// Normal mode: lockers queue on the semaphore, woken ones compete with newcomers and
    /// re-queue at the head (lifo) when they lose.
    #[test]
    fn normal_mode_excludes_and_wakes() {
        model(|| run(3, 2, 0, 0));
    }

    /// A spinning locker announces itself (WOKEN) so that unlock wakes nobody, and clears
    /// the bit whether it then takes the mutex or queues.
    #[test]
    fn spinner_announces_woken() {
        model(|| run(3, 1, 1, 0));
    }

    /// Scoped lockers and their scope's cancel (sync/sema.rs, "Ghosts"): `scoped` threads
    /// lock in the scope, `plain` ones outside it, the main thread holds the mutex first
    /// and cancels the scope while they wait or run. Each scoped locker gets the mutex
    /// or Err; the plain ones always get it (a ghost that swallowed their wake-up would
    /// leave them waiting: loom's deadlock); the critical sections never overlap; at the
    /// end the state word and the semaphore's count are 0 (no waiter count, WOKEN,
    /// STARVING or count left behind by a ghost).
    fn run_cancel(scoped: usize, plain: usize, clock_step: i64) {
        let m = ModelMutex::new(0, clock_step);
        let counter = Arc::new(UnsafeCell::new(0usize));
        m.lock();
        let body = |m: ModelMutex, counter: Arc<UnsafeCell<usize>>, in_scope: bool| {
            move || {
                let r = if in_scope {
                    m.lock_scoped()
                } else {
                    Ok(m.lock())
                };
                match r {
                    Ok(()) => {
                        // SAFETY: the model's subject: only the holder gets here.
                        counter.with_mut(|c| unsafe { *c += 1 });
                        m.unlock();
                        1
                    }
                    Err(e) => {
                        assert!(in_scope && e == libc::ECANCELED);
                        0
                    }
                }
            }
        };
        let threads: Vec<_> = (0..scoped + plain)
            .map(|i| crate::loom::thread::spawn(body(m.share(), counter.clone(), i < scoped)))
            .collect();
        m.sema.cancel();
        m.unlock();
        let mut took = 0;
        for (i, t) in threads.into_iter().enumerate() {
            let n = t.join().unwrap();
            assert!(i < scoped || n == 1, "a plain locker did not get the mutex");
            took += n;
        }
        assert_eq!(m.state(), 0, "state word left behind");
        assert_eq!(m.sema.count(), 0, "a semaphore count left behind");
        // SAFETY: every locker has been joined.
        assert_eq!(counter.with(|c| unsafe { *c }), took);
    }

    /// Normal mode: a cancelled waiter's ghost gives WOKEN back and wakes the next.
    #[test]
    fn cancel_normal_mode() {
        model(|| run_cancel(1, 1, 0));
    }

    /// Two scoped waiters (ghosts next to each other in the queue) and a plain one.
    #[test]
    fn cancel_two_ghosts() {
        crate::loom::model_bounded(Some(2), || run_cancel(2, 1, 0));
    }

    /// Starvation mode: the ghost receives the handed-over mutex and hands it on.
    #[test]
    fn cancel_starvation_mode() {
        model(|| run_cancel(1, 1, 2 * STARVATION_THRESHOLD_NS));
    }

    /// Starvation mode: a waiter that waited too long (every one that slept, with this
    /// clock) switches the mutex to hand-offs; the receiver locks it, drops its waiter
    /// count, and ends the mode when it is the last waiter.
    #[test]
    fn starvation_hands_off() {
        model(|| run(3, 2, 0, 2 * STARVATION_THRESHOLD_NS));
    }
}
