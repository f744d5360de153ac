//! A model of the kernel's futex on one word, for the loom models of everything built on
//! `sys::Note` and `sys::Lock` (their own models in `sys`, the channels' waiter claim in
//! `chan/waitq.rs`); `sys` makes it a `FutexWord`.

use core::sync::atomic::Ordering;
use core::time::Duration;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64 as PlainI64, AtomicU32 as PlainU32};

use super::AtomicWord;
use super::sync::atomic::AtomicU32 as LoomU32;
use super::sync::{Condvar, Mutex};

/// Sleepers queued on the model futex, and whether each (by id) has been woken.
struct Queue {
    waiting: VecDeque<usize>,
    woken: Vec<bool>,
}

/// The kernel's futex on one word, as a reference (the subject is the code built on it):
/// `futex_wait` compares the word and queues under one lock, `futex_wake` dequeues at
/// most `n` under the same lock, so a wake that follows a change of the word reaches
/// every sleeper that saw the old value. A timed wait does not sleep: it lets its whole
/// timeout pass on the model's clock (which moves only then) and returns, so a model
/// explores a timeout at every point where a sleeper can reach one. `SPINS` polls
/// before a note or a lock sleeps.
pub(crate) struct ModelFutex<const SPINS: u32> {
    word: LoomU32,
    queue: Mutex<Queue>,
    cv: Condvar,
    /// The model's clock, ns. Plain atomics: not a subject, and loom runs one model
    /// thread at a time, so their values follow the explored schedule.
    pub(crate) clock: PlainI64,
    /// FUTEX_WAKE calls made: a waker that saw nobody sleeping must not make one.
    pub(crate) wakes: PlainU32,
    /// `FutexWord::asymmetric`: which protocol a `Lock` on this word runs.
    pub(crate) asym: bool,
    /// What `heavy_fence` does.
    pub(crate) heavy: Heavy,
    /// Lockers of a `Lock` on this word that have not finished, when the model counts
    /// them (0: it does not). A sleeper left alone with nobody to wake it then fails.
    pub(crate) lockers: PlainU32,
}

impl<const SPINS: u32> ModelFutex<SPINS> {
    pub(crate) fn new(v: u32) -> Self {
        ModelFutex {
            word: LoomU32::new(v),
            queue: Mutex::new(Queue {
                waiting: VecDeque::new(),
                woken: Vec::new(),
            }),
            cv: Condvar::new(),
            clock: PlainI64::new(0),
            wakes: PlainU32::new(0),
            asym: false,
            heavy: Heavy::Fence,
            lockers: PlainU32::new(0),
        }
    }
}

impl<const SPINS: u32> AtomicWord for ModelFutex<SPINS> {
    type V = u32;
    fn load(&self, order: Ordering) -> u32 {
        self.word.load(order)
    }
    fn store(&self, v: u32, order: Ordering) {
        self.word.store(v, order)
    }
    fn compare_exchange(
        &self,
        current: u32,
        new: u32,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u32, u32> {
        self.word.compare_exchange(current, new, success, failure)
    }
    fn compare_exchange_weak(
        &self,
        current: u32,
        new: u32,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u32, u32> {
        self.word
            .compare_exchange_weak(current, new, success, failure)
    }
    fn fetch_add(&self, v: u32, order: Ordering) -> u32 {
        self.word.fetch_add(v, order)
    }
    fn swap(&self, v: u32, order: Ordering) -> u32 {
        self.word.swap(v, order)
    }
}

impl<const SPINS: u32> ModelFutex<SPINS> {
    pub(crate) fn futex_wait(&self, val: u32, timeout: Option<Duration>) {
        let mut q = self.queue.lock().unwrap();
        // Relaxed, as the kernel's compare promises nothing more: a wake that follows
        // a change of the word took this lock after the change, so coherence makes
        // the compare see it.
        if self.word.load(Ordering::Relaxed) != val {
            return;
        }
        if let Some(t) = timeout {
            self.clock
                .fetch_add(t.as_nanos() as i64, std::sync::atomic::Ordering::Relaxed);
            drop(q);
            // The time passed lets the others run: a caller that polls with timed
            // waits is not a spin loop to loom.
            super::thread::yield_now();
            return;
        }
        let id = q.woken.len();
        q.woken.push(false);
        q.waiting.push_back(id);
        if self.lockers.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            while !q.woken[id] {
                q = self.cv.wait(q).unwrap();
            }
            return;
        }
        // Counting lockers: poll instead, so that a sleeper nobody will wake fails the
        // model by name instead of as a deadlock (loom aborts the whole test binary on
        // one).
        while !q.woken[id] {
            if self.lockers.load(std::sync::atomic::Ordering::Relaxed) == 1 {
                panic!("lost wake-up: every other locker has finished");
            }
            drop(q);
            super::thread::yield_now();
            q = self.queue.lock().unwrap();
        }
    }

    pub(crate) fn futex_wake(&self, n: i32) {
        self.wakes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut q = self.queue.lock().unwrap();
        for _ in 0..n {
            let Some(id) = q.waiting.pop_front() else {
                break;
            };
            q.woken[id] = true;
        }
        self.cv.notify_all();
    }

    pub(crate) fn now(&self) -> i64 {
        self.clock.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn pause(&self, _n: u32) {
        super::hint::spin_loop();
    }

    pub(crate) fn asymmetric(&self) -> bool {
        self.asym
    }

    /// The pair is modelled as two SeqCst fences: the heavy barrier gives the light
    /// side's compiler barrier that effect (membarrier(2)'s promise).
    pub(crate) fn light_fence(&self) {
        super::sync::atomic::fence(Ordering::SeqCst);
    }

    pub(crate) fn heavy_fence(&self) -> bool {
        match self.heavy {
            Heavy::Fence => {
                super::sync::atomic::fence(Ordering::SeqCst);
                true
            }
            Heavy::Missing => true,
            Heavy::Refused => false,
        }
    }
}

/// What the model's `heavy_fence` does.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Heavy {
    /// A SeqCst fence, and says so (membarrier(2) worked).
    Fence,
    /// Nothing, but claims a fence: the broken form the models must catch.
    Missing,
    /// Nothing, and says so (membarrier(2) refused): sleepers must poll.
    Refused,
}
