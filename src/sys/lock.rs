//! [`Lock`], Go's runtime `mutex`: spin briefly, then sleep on a futex; the asymmetric
//! unlock where the kernel has `membarrier`.

use super::*;

/// A mutual-exclusion lock for runtime data, Go's runtime `mutex`: a few rounds of spinning,
/// then sleeping on a futex. Unlike `std::sync::Mutex` it has explicit `lock`/`unlock`, so a
/// lock taken on a goroutine's stack can be released by `gopark`'s unlock function on the
/// scheduler stack. The loom models below run this code over a model futex (`W`).
///
/// Never held across a goroutine switch: the M that takes it releases it before it switches.
///
/// # Two protocols, chosen once per process
/// - **Go's** (Drepper's "mutex 2"), when `membarrier(2)` is not available: `state` is 0
///   unlocked, 1 locked, 2 locked with sleepers. A locker that gives up spinning swaps in
///   2 and sleeps while it reads back anything but 0; `unlock` swaps in 0 and wakes one
///   sleeper if it read 2. Two locked instructions per lock and unlock.
/// - **The asymmetric unlock** (the default): `state` is 0 or 1 and only the holder
///   writes it while it is held; sleepers count themselves in `sleepers`. `unlock` is a
///   plain release store of 0, a compiler barrier, and a plain load of `sleepers`, with a
///   FUTEX_WAKE if it is not 0: one locked instruction per lock and unlock (a locked
///   instruction costs several nanoseconds, a large share of a buffered channel operation
///   that takes the lock: `cargo bench --bench internals chan_send_recv_buffered`). A
///   sleeper adds itself to
///   `sleepers`, then before every futex sleep makes the heavy barrier
///   ([`membarrier::heavy`]) and tries the lock once more; the futex sleeps only while
///   `state` is still 1. This is Dekker's pair with the fence moved to one side: the
///   unlocker stores `state` then loads `sleepers`, the sleeper stores `sleepers` then
///   loads `state`, and the heavy barrier orders the unlocker's two accesses as a full
///   fence would (it interrupts every running thread of the process and makes each pass
///   a full barrier: whichever side of that barrier the unlocker's load is on, either it
///   sees the sleeper, or the sleeper's load sees the store). Without the heavy barrier
///   the unlocker's load may pass its store and both miss each other (loom
///   `lock_broken_asymmetric_without_heavy_fence`). A sleep costs the barrier on top of
///   the futex (a system call, microseconds with other CPUs to interrupt); spinning wins
///   almost always. Should the kernel refuse the barrier after registration (a seccomp
///   filter installed later), a sleeper sleeps at most `membarrier::REFUSED_POLL` at a
///   time and looks again, so a missed wake-up costs a millisecond, not a hang (loom
///   `lock_asymmetric_refused_barrier_polls`).
pub struct Lock<W = AtomicU32> {
    pub(super) state: W,
    /// Lockers asleep or about to sleep (asymmetric protocol only).
    pub(super) sleepers: W,
    /// Its place in the lock order, which debug builds check ([`Rank`]).
    #[cfg(debug_assertions)]
    pub(super) rank: Rank,
}

/// Polls of a held lock before sleeping, with 1, 2, 4 … up to 64 reference pauses between
/// polls (`procyield`, calibrated): ~6,000 pauses, ~150 µs in all. The scheduler's
/// critical sections last tens of nanoseconds and the holder is running on another CPU, so
/// spinning almost always wins; sleeping marks the lock contended, after which every
/// unlock pays a FUTEX_WAKE system call until it drains.
pub(super) const LOCK_SPINS: u32 = 100;

pub(super) const LOCK_MAX_PAUSES: u32 = 64;

/// Test hook, debug builds only: `GMP_DEBUG=lockspin=0` makes every contended lock sleep
/// at once instead of spinning first, so that a test drives every contention through the
/// sleeping path (the asymmetric protocol's barrier and sleeper count). Set when the
/// library is loaded (`membarrier::init`).
#[cfg(debug_assertions)]
pub(super) static LOCK_SPIN_OFF: core::sync::atomic::AtomicBool =
    core::sync::atomic::AtomicBool::new(false);

/// Polls of a held lock before its locker sleeps: `W::LOCK_SPINS`, or none with the test
/// hook above.
#[inline(always)]
pub(super) fn lock_spins<W: FutexWord>() -> u32 {
    #[cfg(debug_assertions)]
    if LOCK_SPIN_OFF.load(Ordering::Relaxed) {
        return 0;
    }
    W::LOCK_SPINS
}

impl Lock {
    /// A free lock of rank `rank` in the lock order.
    #[cfg_attr(not(debug_assertions), allow(unused_variables))]
    pub const fn new(rank: Rank) -> Lock {
        Lock {
            state: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            #[cfg(debug_assertions)]
            rank,
        }
    }
}

impl<W: FutexWord> Lock<W> {
    #[inline]
    pub fn lock(&self) {
        // Debug builds: check the lock order and count what this thread holds (no lock
        // crosses a goroutine switch).
        #[cfg(debug_assertions)]
        {
            rank_acquire(self.rank);
            locks_add(1);
        }
        // acquire: pairs with the release in `unlock`, so the holder sees the previous
        // holder's writes.
        if self
            .state
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
    }

    #[cold]
    fn lock_slow(&self) {
        // Exponential backoff between polls: a fixed short pause lets the releasing CPU,
        // which still owns the cache line, take the lock back again and again while the
        // others hammer the line (chan_mpmc at GOMAXPROCS=2 is the case that shows it:
        // `scripts/ab.sh -p 2 chan_mpmc`).
        let mut pauses = 1;
        for _ in 0..lock_spins::<W>() {
            // Poll with plain loads (the cache line stays shared) and try only when free.
            // Go's protocol: taking it as 1 while sleepers exist is fine: the unlock that
            // freed it woke one of them, which marks the lock contended (2) again before
            // sleeping.
            if self.state.load(Ordering::Relaxed) == 0
                && self
                    .state
                    .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            self.state.pause(pauses);
            pauses = (pauses * 2).min(LOCK_MAX_PAUSES);
        }
        if self.state.asymmetric() {
            self.lock_sleep_asymmetric();
            return;
        }
        // From here on we announce a sleeper (2) whenever we take the lock, so that our
        // unlock wakes whoever queued behind us.
        while self.state.swap(2, Ordering::Acquire) != 0 {
            self.state.futex_wait(2, None);
        }
    }

    /// The sleeping half of `lock_slow` in the asymmetric protocol (see the type's doc).
    fn lock_sleep_asymmetric(&self) {
        // relaxed: the heavy barrier below orders it before our look at `state`.
        self.sleepers.fetch_add(1, Ordering::Relaxed);
        loop {
            let fenced = self.state.heavy_fence();
            if self
                .state
                .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                break;
            }
            // Without the barrier an unlock may miss us: sleep a bounded time only.
            let timeout = (!fenced).then_some(membarrier::REFUSED_POLL);
            self.state.futex_wait(1, timeout);
        }
        self.sleepers.fetch_add(u32::MAX, Ordering::Relaxed);
    }

    #[inline]
    pub fn unlock(&self) {
        #[cfg(debug_assertions)]
        {
            rank_release(self.rank);
            locks_add(-1);
        }
        if self.state.asymmetric() {
            // Only the holder writes `state` while it is held, so it reads back its own 1.
            if self.state.load(Ordering::Relaxed) != 1 {
                throw("unlock of unlocked lock");
            }
            // release: publishes the critical section; pairs with the acquire in `lock`.
            self.state.store(0, Ordering::Release);
            self.state.light_fence();
            if self.sleepers.load(Ordering::Relaxed) != 0 {
                self.state.futex_wake(1);
            }
            return;
        }
        // release: publishes the critical section; pairs with the acquire in `lock`.
        match self.state.swap(0, Ordering::Release) {
            1 => {}
            2 => self.state.futex_wake(1),
            _ => throw("unlock of unlocked lock"),
        }
    }
}
