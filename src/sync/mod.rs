//! Parking synchronisation built on the scheduler: the address-keyed semaphore
//! ([`sema`], Go's runtime/sema.go) and Go's sync package over C structs: [`mutex`],
//! [`rwmutex`], [`cond`] (the runtime's notifyList), [`once`], [`waitgroup`]. All serve
//! goroutines (which park) and foreign threads (which sleep on a futex).
//!
//! Each primitive is a struct of references to the words of its C struct (the C side
//! owns the memory and gives static initializers), so the same code serves the FFI and
//! the crate's own tests.

pub mod cond;
pub mod mutex;
pub mod once;
pub mod rwmutex;
pub mod sema;
pub mod waitgroup;

use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};

use crate::rt::WaitReason;

/// An atomic word as the primitives' protocols use it: the C struct's word in the runtime
/// (`AtomicI32`, `AtomicU64`), loom's in the models ([`loom_support`]), so that a model
/// runs the primitive's own code, monomorphized, and not a copy of it.
pub trait AtomicWord {
    type V: Copy;
    fn load(&self, order: Ordering) -> Self::V;
    fn store(&self, v: Self::V, order: Ordering);
    fn compare_exchange(
        &self,
        current: Self::V,
        new: Self::V,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Self::V, Self::V>;
    /// [`compare_exchange`](Self::compare_exchange) that may fail spuriously (a cheaper
    /// loop on LL/SC machines).
    fn compare_exchange_weak(
        &self,
        current: Self::V,
        new: Self::V,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Self::V, Self::V>;
    /// Wrapping add; returns the previous value.
    fn fetch_add(&self, v: Self::V, order: Ordering) -> Self::V;
    /// Stores `v`; returns the previous value.
    fn swap(&self, v: Self::V, order: Ordering) -> Self::V;
}

/// Implements [`AtomicWord`] for atomic types with the std method set.
macro_rules! atomic_word {
    ($($a:ty => $v:ty),* $(,)?) => {$(
        impl AtomicWord for $a {
            type V = $v;
            #[inline(always)]
            fn load(&self, order: Ordering) -> $v {
                <$a>::load(self, order)
            }
            #[inline(always)]
            fn store(&self, v: $v, order: Ordering) {
                <$a>::store(self, v, order)
            }
            #[inline(always)]
            fn compare_exchange(
                &self,
                current: $v,
                new: $v,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$v, $v> {
                <$a>::compare_exchange(self, current, new, success, failure)
            }
            #[inline(always)]
            fn compare_exchange_weak(
                &self,
                current: $v,
                new: $v,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$v, $v> {
                <$a>::compare_exchange_weak(self, current, new, success, failure)
            }
            #[inline(always)]
            fn fetch_add(&self, v: $v, order: Ordering) -> $v {
                <$a>::fetch_add(self, v, order)
            }
            #[inline(always)]
            fn swap(&self, v: $v, order: Ordering) -> $v {
                <$a>::swap(self, v, order)
            }
        }
    )*};
}
atomic_word!(AtomicI32 => i32, AtomicU32 => u32, AtomicU64 => u64);

/// An atomic flag as a protocol uses it: `AtomicBool` in the runtime, loom's in a model
/// (as [`AtomicWord`]; netpoll's reference count, `rt/netpoll/fdrefs.rs`).
pub trait AtomicFlag {
    fn load(&self, order: Ordering) -> bool;
    fn store(&self, v: bool, order: Ordering);
}

/// Implements [`AtomicFlag`] for atomic flag types with the std method set.
macro_rules! atomic_flag {
    ($($a:ty),* $(,)?) => {$(
        impl AtomicFlag for $a {
            #[inline(always)]
            fn load(&self, order: Ordering) -> bool {
                <$a>::load(self, order)
            }
            #[inline(always)]
            fn store(&self, v: bool, order: Ordering) {
                <$a>::store(self, v, order)
            }
        }
    )*};
}
atomic_flag!(AtomicBool);

/// A semaphore word as the primitives use it: the runtime's address-keyed semaphore
/// ([`sema`]) on an `AtomicU32` of the C struct, a model semaphore in the loom models.
pub trait SemaWord {
    /// Waits until the count is positive and takes one (Go's `semacquire1`; `lifo` queues
    /// at the head).
    fn acquire(&self, lifo: bool, reason: WaitReason);
    /// Adds one and wakes a waiter (Go's `semrelease1`; `handoff` gives the count to the
    /// woken waiter itself).
    fn release(&self, handoff: bool);
}

impl SemaWord for AtomicU32 {
    #[inline(always)]
    fn acquire(&self, lifo: bool, reason: WaitReason) {
        sema::semacquire1(self, lifo, reason);
    }
    #[inline(always)]
    fn release(&self, handoff: bool) {
        sema::semrelease1(self, handoff);
    }
}

/// What the loom models of the primitives share: [`AtomicWord`] and [`AtomicFlag`] for
/// loom's atomics and a model semaphore. Run by `tests/loom.rs`.
#[cfg(all(test, loom))]
pub(crate) mod loom_support {
    use super::*;
    use loom::sync::{Condvar, Mutex};
    use std::collections::VecDeque;

    atomic_word!(
        loom::sync::atomic::AtomicI32 => i32,
        loom::sync::atomic::AtomicU32 => u32,
        loom::sync::atomic::AtomicU64 => u64,
    );
    atomic_flag!(loom::sync::atomic::AtomicBool);

    /// A waiter's state in [`ModelSema`].
    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Slot {
        Queued,
        /// Dequeued by a plain release: tries the count again.
        Woken,
        /// Dequeued by a hand-off: the count is already its own.
        Ticket,
    }

    struct SemaState {
        count: u32,
        queue: VecDeque<usize>,
        /// Per waiter ever queued, by id (ids are never reused).
        slots: Vec<Slot>,
    }

    /// Go's semaphore for one address, as a reference (not the subject: `sema.rs` has its
    /// own tests): a count, a FIFO of waiters, `lifo` re-queueing at the head, `handoff`
    /// giving the count to the dequeued waiter itself; under loom's mutex and condvar, so a
    /// release happens-before the acquire it satisfies, as the real one's atomics make it.
    pub(crate) struct ModelSema {
        st: Mutex<SemaState>,
        cv: Condvar,
    }

    impl ModelSema {
        pub(crate) fn new() -> ModelSema {
            ModelSema {
                st: Mutex::new(SemaState {
                    count: 0,
                    queue: VecDeque::new(),
                    slots: Vec::new(),
                }),
                cv: Condvar::new(),
            }
        }
    }

    impl SemaWord for ModelSema {
        fn acquire(&self, lifo: bool, _reason: WaitReason) {
            let mut st = self.st.lock().unwrap();
            loop {
                if st.count > 0 {
                    st.count -= 1;
                    return;
                }
                let id = st.slots.len();
                st.slots.push(Slot::Queued);
                if lifo {
                    st.queue.push_front(id);
                } else {
                    st.queue.push_back(id);
                }
                while st.slots[id] == Slot::Queued {
                    st = self.cv.wait(st).unwrap();
                }
                if st.slots[id] == Slot::Ticket {
                    return;
                }
            }
        }

        fn release(&self, handoff: bool) {
            let mut st = self.st.lock().unwrap();
            st.count += 1;
            if let Some(w) = st.queue.pop_front() {
                st.slots[w] = if handoff {
                    st.count -= 1;
                    Slot::Ticket
                } else {
                    Slot::Woken
                };
                self.cv.notify_all();
            }
        }
    }

    /// Checks `f` with loom, with a preemption bound of 3 unless `LOOM_MAX_PREEMPTIONS`
    /// sets another.
    pub(crate) fn model(f: impl Fn() + Sync + Send + 'static) {
        model_bounded(Some(3), f);
    }

    /// Checks `f` with loom, with `bound` as the preemption bound unless
    /// `LOOM_MAX_PREEMPTIONS` sets one (every crate's loom model goes through here).
    pub(crate) fn model_bounded(bound: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        if b.preemption_bound.is_none() {
            b.preemption_bound = bound;
        }
        b.check(f);
    }
}
