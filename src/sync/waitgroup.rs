//! Go's sync.WaitGroup over a C struct: a 64-bit state word (high 32 bits: the counter;
//! low 32 bits: the number of waiters) and a semaphore word on which waiters sleep.
//!
//! `add` that brings the counter to zero with waiters present resets the state and
//! releases the semaphore once per waiter. A waiter increments the waiter count with a CAS
//! only while the counter is non-zero, then acquires the semaphore.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::rt::{WaitReason, fatal};
use crate::sync::sema::{semacquire, semrelease};

/// The two words of a `gmp_wg`.
pub struct WaitGroup<'a> {
    pub state: &'a AtomicU64,
    pub sema: &'a AtomicU32,
}

impl WaitGroup<'_> {
    /// Adds `delta` (which may be negative) to the counter.
    pub fn add(&self, delta: i32) {
        if delta < 0 && crate::sys::tsan::on() {
            crate::sys::tsan::release(self.state as *const AtomicU64 as usize);
        }
        let state = self
            .state
            .fetch_add((delta as i64 as u64) << 32, Ordering::AcqRel)
            .wrapping_add((delta as i64 as u64) << 32);
        let v = (state >> 32) as i32;
        let w = state as u32;
        if v < 0 {
            fatal("sync: negative WaitGroup counter");
        }
        if w != 0 && delta > 0 && v == delta {
            fatal("sync: WaitGroup misuse: Add called concurrently with Wait");
        }
        if v > 0 || w == 0 {
            return;
        }
        // Counter reached 0 with waiters: nobody may change the state now but us.
        if self.state.load(Ordering::Acquire) != state {
            fatal("sync: WaitGroup misuse: Add called concurrently with Wait");
        }
        self.state.store(0, Ordering::Release);
        for _ in 0..w {
            semrelease(self.sema);
        }
    }

    /// Blocks until the counter is zero.
    pub fn wait(&self) {
        self.wait_inner();
        if crate::sys::tsan::on() {
            crate::sys::tsan::acquire(self.state as *const AtomicU64 as usize);
        }
    }

    fn wait_inner(&self) {
        loop {
            let state = self.state.load(Ordering::Acquire);
            if (state >> 32) as i32 == 0 {
                return;
            }
            if self
                .state
                .compare_exchange(state, state + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                semacquire(self.sema, WaitReason::WaitGroupWait);
                if self.state.load(Ordering::Acquire) != 0 {
                    fatal("sync: WaitGroup is reused before previous Wait has returned");
                }
                return;
            }
        }
    }
}
