//! Go's sync.WaitGroup over a C struct: a 64-bit state word (high 32 bits: the counter;
//! low 32 bits: the number of waiters) and a semaphore word on which waiters sleep.
//!
//! `add` that brings the counter to zero with waiters present resets the state and
//! releases the semaphore once per waiter. A waiter increments the waiter count with a CAS
//! only while the counter is non-zero, then acquires the semaphore.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::loom::AtomicWord;
use crate::rt::{WaitReason, fatal};
use crate::sync::SemaWord;

/// The two words of a `gmp_wg` (the C struct's in the runtime; loom's and a model
/// semaphore in `loom_tests`).
pub struct WaitGroup<'a, W: ?Sized = AtomicU64, S: ?Sized = AtomicU32> {
    pub state: &'a W,
    pub sema: &'a S,
}

impl<W: AtomicWord<V = u64> + ?Sized, S: SemaWord + ?Sized> WaitGroup<'_, W, S> {
    /// Adds `delta` (which may be negative) to the counter.
    pub fn add(&self, delta: i32) {
        if delta < 0 && crate::sys::tsan::on() {
            crate::sys::tsan::release(self.state as *const W as *const () as usize);
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
            self.sema.release(false);
        }
    }

    /// Blocks until the counter is zero. Err(errno) if the caller's scope ended the wait
    /// first (rt/scope.rs).
    pub fn wait(&self) -> Result<(), i32> {
        self.wait_inner()?;
        if crate::sys::tsan::on() {
            crate::sys::tsan::acquire(self.state as *const W as *const () as usize);
        }
        Ok(())
    }

    fn wait_inner(&self) -> Result<(), i32> {
        loop {
            let state = self.state.load(Ordering::Acquire);
            if (state >> 32) as i32 == 0 {
                return Ok(());
            }
            if self
                .state
                .compare_exchange(state, state + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                if let Err(e) = self.sema.acquire_scoped(WaitReason::WaitGroupWait) {
                    return self.leave(e);
                }
                if self.state.load(Ordering::Acquire) != 0 {
                    fatal("sync: WaitGroup is reused before previous Wait has returned");
                }
                return Ok(());
            }
        }
    }

    /// A waiter its scope ended: takes itself out of the waiter count while the counter is
    /// not zero (Err(errno)). Once it is zero, `add` has released the semaphore once per
    /// counted waiter, this one included: it takes its release (which is there or comes
    /// at once) and the wait succeeded after all.
    fn leave(&self, e: i32) -> Result<(), i32> {
        loop {
            let state = self.state.load(Ordering::Acquire);
            if (state >> 32) as i32 != 0 && state as u32 != 0 {
                if self
                    .state
                    .compare_exchange(state, state - 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return Err(e);
                }
                continue;
            }
            self.sema.acquire(false, WaitReason::WaitGroupWait);
            return Ok(());
        }
    }
}

/// Loom models of `add` and `wait` on loom's atomics with a model semaphore
/// (`crate::loom::sema`). Run by `tests/loom.rs`.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::loom::cell::UnsafeCell;
    use crate::loom::sync::Arc;
    use crate::loom::sync::atomic::AtomicU64 as LoomU64;
    use crate::loom::{model, sema::ModelSema};

    struct Shared {
        state: LoomU64,
        sema: ModelSema,
        /// One result per worker, written before its `done`.
        results: [UnsafeCell<u32>; 2],
    }

    impl Shared {
        fn wg(&self) -> WaitGroup<'_, LoomU64, ModelSema> {
            WaitGroup {
                state: &self.state,
                sema: &self.sema,
            }
        }

        /// Waits, then reads both results: loom reports a read not ordered after the
        /// worker's write (a wait that returned early or without the edge).
        fn wait_and_read(&self, round: u32) {
            self.wg().wait().expect("no scope in the model");
            for r in &self.results {
                // SAFETY: the model's subject: the workers wrote before `done`.
                assert_eq!(r.with(|v| unsafe { *v }), round);
            }
        }
    }

    /// Two workers each write a result and call done; two waiters (one of them the thread
    /// that added) wait and read both results. Then a second round with the same
    /// WaitGroup (it may be reused once every Wait of the previous round has returned):
    /// one worker writes both results, the adder waits. After each round the state word
    /// is 0 (no waiter count left). (Loom allows 4 threads besides the model's own.)
    #[test]
    fn waiters_see_every_done() {
        model(|| {
            let sh = Arc::new(Shared {
                state: LoomU64::new(0),
                sema: ModelSema::new(),
                results: [UnsafeCell::new(0), UnsafeCell::new(0)],
            });
            sh.wg().add(2);
            let workers: Vec<_> = (0..2)
                .map(|i| {
                    let sh = sh.clone();
                    crate::loom::thread::spawn(move || {
                        // SAFETY: only this worker writes its result in this round.
                        sh.results[i].with_mut(|v| unsafe { *v = 1 });
                        sh.wg().add(-1);
                    })
                })
                .collect();
            let sh2 = sh.clone();
            let waiter = crate::loom::thread::spawn(move || sh2.wait_and_read(1));
            sh.wait_and_read(1);
            waiter.join().unwrap();
            for w in workers {
                w.join().unwrap();
            }
            assert_eq!(
                sh.state.load(Ordering::Relaxed),
                0,
                "state word left behind"
            );

            sh.wg().add(1);
            let sh2 = sh.clone();
            let worker = crate::loom::thread::spawn(move || {
                for r in &sh2.results {
                    // SAFETY: the only writer of this round; the waiter reads after done.
                    r.with_mut(|v| unsafe { *v = 2 });
                }
                sh2.wg().add(-1);
            });
            sh.wait_and_read(2);
            worker.join().unwrap();
            assert_eq!(
                sh.state.load(Ordering::Relaxed),
                0,
                "state word left behind"
            );
        });
    }

    /// A scoped Wait its scope ends (`leave`) racing the last `done`: one worker writes
    /// its result and calls done, the scope is cancelled, and `waiters` threads wait (the
    /// one that added, and one more when 2). Each wait returns Ok with the result visible,
    /// or ECANCELED; after every thread is done the state word is 0 (no waiter count left)
    /// and the semaphore holds no count (no release left for a later round's waiter to
    /// take).
    fn cancel_races_done(waiters: usize) {
        model(move || {
            let sh = Arc::new(Shared {
                state: LoomU64::new(0),
                sema: ModelSema::new(),
                results: [UnsafeCell::new(0), UnsafeCell::new(0)],
            });
            sh.wg().add(1);
            let sh2 = sh.clone();
            let worker = crate::loom::thread::spawn(move || {
                // SAFETY: the only writer of this round; a waiter reads after done.
                sh2.results[0].with_mut(|v| unsafe { *v = 1 });
                sh2.wg().add(-1);
            });
            let sh2 = sh.clone();
            let canceller = crate::loom::thread::spawn(move || sh2.sema.cancel());
            let wait = |sh: &Shared| match sh.wg().wait() {
                // SAFETY: the model's subject: the worker wrote before done.
                Ok(()) => assert_eq!(sh.results[0].with(|v| unsafe { *v }), 1),
                Err(e) => assert_eq!(e, libc::ECANCELED),
            };
            let other = (waiters == 2).then(|| {
                let sh2 = sh.clone();
                crate::loom::thread::spawn(move || wait(&sh2))
            });
            wait(&sh);
            if let Some(o) = other {
                o.join().unwrap();
            }
            worker.join().unwrap();
            canceller.join().unwrap();
            assert_eq!(
                sh.state.load(Ordering::Relaxed),
                0,
                "a waiter count left behind"
            );
            assert_eq!(sh.sema.count(), 0, "a release left in the semaphore");
        });
    }

    #[test]
    fn cancelled_wait_races_done() {
        cancel_races_done(1);
    }

    #[test]
    fn cancelled_waits_race_done() {
        cancel_races_done(2);
    }
}
