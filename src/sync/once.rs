//! Go's sync.Once over a C struct (`gmp_once`: a `done` word and a [`Mutex`], all zero
//! initially).
//!
//! The fast path is one acquire load of `done`. The slow path serialises callers on the
//! mutex; the first one runs the function and only then sets `done` (release), so every
//! caller returns after the function completed and sees what it wrote: either through
//! `done` (pairs with the release store) or through the mutex (the runner unlocks after
//! the store). Setting `done` before running the function with a CAS, the tempting
//! alternative, would let a second caller return while the function still runs.

use core::sync::atomic::{AtomicU32, Ordering};

use crate::rt;
use crate::sync::mutex::Mutex;

/// The words of a `gmp_once`.
pub struct Once<'a> {
    /// 1 once the function has returned. Written only under `m`.
    pub done: &'a AtomicU32,
    pub m: Mutex<'a>,
}

/// Marks the once done (if the function ran) and unlocks, also when the function unwinds
/// (Go's deferred `done.Store(1)` and `Unlock`: a panicking function counts as done; a
/// function that ends its goroutine too, through `finish_on_goexit`).
struct SlowGuard<'o, 'a> {
    once: &'o Once<'a>,
    ran: bool,
}

impl Drop for SlowGuard<'_, '_> {
    fn drop(&mut self) {
        if self.ran {
            self.once.set_done();
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
        // The same edge for ThreadSanitizer, which sees neither this load nor the mutex
        // (libgmp is not instrumented): what the function wrote happens before the
        // caller's use of it, whichever path the caller took.
        if crate::sys::tsan::on() {
            crate::sys::tsan::acquire(self.done_addr());
        }
    }

    /// The `done` word's address, on which the runner releases and every caller acquires
    /// for ThreadSanitizer.
    fn done_addr(&self) -> usize {
        self.done as *const AtomicU32 as usize
    }

    /// Marks the once done (release), for ThreadSanitizer too.
    fn set_done(&self) {
        if crate::sys::tsan::on() {
            crate::sys::tsan::release(self.done_addr());
        }
        // release: pairs with the acquire load in `call`.
        self.done.store(1, Ordering::Release);
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
            // If `f` ends the goroutine (gmp_goexit), this frame is abandoned and the guard
            // never drops: goexit runs the same two steps instead (Go's deferred store and
            // Unlock run during Goexit, so the once counts as done).
            let mut d = rt::Defer::new(finish_on_goexit, self as *const Once as usize);
            // SAFETY: d lives in this frame until the pop below; if f never returns, goexit
            // runs it while this frame still exists.
            let pushed = unsafe { rt::defer_push(&mut d) };
            f();
            if pushed {
                // SAFETY: pushed above in this frame; f's own pushes were popped (nesting).
                unsafe { rt::defer_pop(&mut d) };
            }
        }
    }
}

/// The guard's work, for a goroutine that ended inside the function (see `call_slow`).
///
/// # Safety
/// `arg` is the `Once` of the `call_slow` frame that pushed the record, still alive (the
/// abandoned frame and the caller's once words outlive the goroutine's exit).
unsafe fn finish_on_goexit(arg: usize) {
    // SAFETY: caller contract.
    let once = unsafe { &*(arg as *const Once) };
    once.set_done();
    once.m.unlock();
}
