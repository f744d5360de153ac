//! Go's sync.Once over a C struct (`gmp_once_t`: a `done` word and a [`Mutex`], all zero
//! initially).
//!
//! The fast path is one acquire load of `done`. The slow path serialises callers on the
//! mutex; the first one runs the function and only then sets `done` (release), so every
//! caller returns after the function completed and sees what it wrote: either through
//! `done` (pairs with the release store) or through the mutex (the runner unlocks after
//! the store). Setting `done` before running the function with a CAS, the tempting
//! alternative, would let a second caller return while the function still runs.

use core::sync::atomic::{AtomicU32, Ordering};

use crate::sync::mutex::Mutex;

/// The words of a `gmp_once_t`.
pub struct Once<'a> {
    /// 1 once the function has returned. Written only under `m`.
    pub done: &'a AtomicU32,
    pub m: Mutex<'a>,
}

/// Marks the once done (if the function ran) and unlocks, also when the function unwinds
/// (Go's deferred `done.Store(1)` and `Unlock`: a panicking function counts as done).
struct SlowGuard<'o, 'a> {
    once: &'o Once<'a>,
    ran: bool,
}

impl Drop for SlowGuard<'_, '_> {
    fn drop(&mut self) {
        if self.ran {
            // release: pairs with the acquire load in `call`.
            self.once.done.store(1, Ordering::Release);
        }
        self.once.m.unlock();
    }
}

impl Once<'_> {
    /// Runs `f` if no call on this once has run its function yet; in any case returns only
    /// after the function (whoever ran it) has returned. `f` must not call `call` on the
    /// same once (deadlock, as in Go).
    pub fn call(&self, f: impl FnOnce()) {
        // acquire: pairs with the release store in SlowGuard::drop.
        if self.done.load(Ordering::Acquire) == 0 {
            self.call_slow(f);
        }
    }

    #[cold]
    fn call_slow(&self, f: impl FnOnce()) {
        self.m.lock();
        let mut guard = SlowGuard {
            once: self,
            ran: false,
        };
        // Relaxed: done is written only under m, which we hold.
        if self.done.load(Ordering::Relaxed) == 0 {
            guard.ran = true;
            f();
        }
    }
}
