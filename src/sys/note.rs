//! [`Note`] (Go's `note`, a one-shot wake-up) over a [`FutexWord`]: the word and the
//! futex in the runtime, a model futex in the loom models.

use super::*;

/// A futex word as [`Note`] and [`Lock`] use it: an `AtomicU32` with the kernel's futex in
/// the runtime, a model futex in the loom models (`loom_tests` below), so that a model runs
/// their own code, monomorphized, and not a copy of it.
pub trait FutexWord: AtomicWord<V = u32> {
    /// Polls of a sleeping [`Note`] before it enters the kernel.
    const NOTE_SPINS: u32 = NOTE_SPINS;
    /// Polls of a held [`Lock`] before its locker sleeps.
    const LOCK_SPINS: u32 = LOCK_SPINS;
    /// Sleeps while the word is `val`, for at most `timeout`. Spurious returns are allowed:
    /// the caller re-checks its condition.
    fn futex_wait(&self, val: u32, timeout: Option<Duration>);
    /// Wakes at most `n` threads sleeping on the word.
    fn futex_wake(&self, n: i32);
    /// The clock a timed wait's deadline is kept in ([`nanotime`]).
    fn now(&self) -> i64;
    /// Waits between two polls, `n` reference pauses long ([`procyield`]).
    fn pause(&self, n: u32);
    /// Whether [`Lock`] runs its asymmetric protocol (`membarrier::ON`).
    fn asymmetric(&self) -> bool;
    /// The light side of the asymmetric fence pair: a compiler barrier (the heavy side
    /// makes it a full one when it matters).
    fn light_fence(&self);
    /// The heavy side ([`membarrier::heavy`]); false if it could not be made.
    fn heavy_fence(&self) -> bool;
}

impl FutexWord for AtomicU32 {
    #[inline(always)]
    fn futex_wait(&self, val: u32, timeout: Option<Duration>) {
        futex::wait(self, val, timeout);
    }
    #[inline(always)]
    fn futex_wake(&self, n: i32) {
        futex::wake(self, n);
    }
    #[inline(always)]
    fn now(&self) -> i64 {
        nanotime()
    }
    #[inline(always)]
    fn pause(&self, n: u32) {
        procyield(n);
    }
    #[inline(always)]
    fn asymmetric(&self) -> bool {
        membarrier::ON.0.load(Ordering::Relaxed)
    }
    #[inline(always)]
    fn light_fence(&self) {
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
    }
    #[inline(always)]
    fn heavy_fence(&self) -> bool {
        membarrier::heavy()
    }
}

/// A one-shot wake-up, Go's `note`: one thread sleeps until another wakes it.
///
/// States of `key`: `CLEAR` (nobody woke it yet, sleeper not in the kernel), `SLEEPING`
/// (the sleeper is, or is about to be, in FUTEX_WAIT: the waker must FUTEX_WAKE), `WOKEN`.
/// The sleeper moves CLEAR → SLEEPING, and SLEEPING → CLEAR when its timed sleep gives up;
/// the waker moves CLEAR|SLEEPING → WOKEN and makes the syscall only when it saw SLEEPING
/// (a FUTEX_WAKE with no waiter is still a system call). `clear` (WOKEN → CLEAR) is done
/// by the sleeper after it wakes, before the note is reused. The loom models below run
/// this code over a model futex (`K`).
#[repr(transparent)]
pub struct Note<K = AtomicU32> {
    pub(super) key: K,
}

pub(super) const NOTE_CLEAR: u32 = 0;

pub(super) const NOTE_WOKEN: u32 = 1;

pub(super) const NOTE_SLEEPING: u32 = 2;

/// How long a sleeper polls before entering the kernel: 16 × 30 = 480 reference pauses
/// (`procyield`, calibrated), ~12 µs: a wake-up that lands in that window costs a fraction
/// of a microsecond instead of a futex wake across CPUs (several microseconds, longer when
/// the sleeper's CPU must leave an idle state); longer spins burn a core that an idle
/// machine should give back.
pub(super) const NOTE_SPINS: u32 = 16;

pub(super) const NOTE_SPIN_PAUSES: u32 = 30;

impl Note {
    pub const fn new() -> Note {
        Note {
            key: AtomicU32::new(NOTE_CLEAR),
        }
    }

    /// Whether a note key read from memory (`Note`'s only field, a u32) says the wake-up
    /// was issued (the deadlock detector reads a sleeper's note without a reference).
    pub fn key_is_woken(key: u32) -> bool {
        key == NOTE_WOKEN
    }

    /// `sleep_timeout` for a thread that is not an M (C main, a Python thread) waiting
    /// for a goroutine: spins only as `foreign_wait` decides.
    pub fn sleep_foreign(&self, timeout: Option<Duration>) -> bool {
        let woken = foreign_wait(
            timeout,
            |spin| self.spin_for(spin),
            |left| self.sleep_kernel(left),
        );
        if woken && tsan::on() {
            tsan::acquire(self as *const Note as usize);
        }
        woken
    }

    /// Polls for the wake-up for `ns` nanoseconds; returns whether it came.
    pub fn spin_for(&self, ns: i64) -> bool {
        let deadline = nanotime().saturating_add(ns);
        // A look at the key every pause (the wake-up is seen within ~20-140 cycles of
        // landing), at the clock every 32.
        let mut i = 0u32;
        loop {
            // load-acquire pairs with the swap in `wakeup`.
            if self.key.load(Ordering::Acquire) == NOTE_WOKEN {
                return true;
            }
            i = i.wrapping_add(1);
            if i.is_multiple_of(32) && nanotime() >= deadline {
                return false;
            }
            core::hint::spin_loop();
        }
    }
}

impl<K: FutexWord> Note<K> {
    /// Resets a woken note for its next use. Only the sleeper calls this.
    pub fn clear(&self) {
        self.key.store(NOTE_CLEAR, Ordering::Relaxed);
    }

    /// Wakes the sleeper (now or when it next sleeps). At most once per `clear`.
    pub fn wakeup(&self) {
        if tsan::on() {
            tsan::release(self as *const Note<K> as usize);
        }
        // acq-rel: release publishes what the waker wrote before (m.nextp, a readied G);
        // pairs with the acquire in `sleep`.
        match self.key.swap(NOTE_WOKEN, Ordering::AcqRel) {
            NOTE_CLEAR => {}
            NOTE_SLEEPING => self.key.futex_wake(1),
            _ => throw("notewakeup - double wakeup"),
        }
    }

    /// Sleeps until `wakeup`. Returns immediately if it already happened.
    pub fn sleep(&self) {
        self.sleep_timeout(None);
    }

    /// Sleeps until `wakeup` or until `timeout` passes; returns whether it was woken.
    pub fn sleep_timeout(&self, timeout: Option<Duration>) -> bool {
        let woken = self.spin() || self.sleep_kernel(timeout);
        if woken && tsan::on() {
            tsan::acquire(self as *const Note<K> as usize);
        }
        woken
    }

    /// The first phase of `sleep`: polls for the wake-up a few microseconds; returns
    /// whether it came.
    pub fn spin(&self) -> bool {
        for _ in 0..K::NOTE_SPINS {
            // load-acquire pairs with the swap in `wakeup`.
            if self.key.load(Ordering::Acquire) == NOTE_WOKEN {
                return true;
            }
            self.key.pause(NOTE_SPIN_PAUSES);
        }
        false
    }

    /// The second phase of `sleep_timeout`: sleeps in the kernel (no more spinning).
    pub fn sleep_kernel(&self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|d| {
            self.key
                .now()
                .saturating_add(d.as_nanos().min(i64::MAX as u128) as i64)
        });
        loop {
            // acquire (both outcomes): a WOKEN read here pairs with the swap in `wakeup`.
            match self.key.compare_exchange(
                NOTE_CLEAR,
                NOTE_SLEEPING,
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) | Err(NOTE_SLEEPING) => {}
                Err(_) => return true, // WOKEN
            }
            let left = match deadline {
                None => None,
                Some(dl) => {
                    let left = dl - self.key.now();
                    if left <= 0 {
                        // Withdraw: SLEEPING → CLEAR unless a waker got there first.
                        return self
                            .key
                            .compare_exchange(
                                NOTE_SLEEPING,
                                NOTE_CLEAR,
                                Ordering::Acquire,
                                Ordering::Acquire,
                            )
                            .is_err();
                    }
                    Some(Duration::from_nanos(left as u64))
                }
            };
            self.key.futex_wait(NOTE_SLEEPING, left);
            if self.key.load(Ordering::Acquire) == NOTE_WOKEN {
                return true;
            }
        }
    }
}

impl Default for Note {
    fn default() -> Self {
        Note::new()
    }
}
