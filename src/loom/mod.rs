//! The one switch between the runtime's atomics and loom's (as `tokio/src/loom`): every
//! protocol that has a loom model imports its atomics, cells, threads and the model runner
//! from here, as `crate::loom::…`, and runs its own code under the model, monomorphized,
//! not a copy of it. The bottom floor of the crate: it imports nothing of the crate.
//!
//! - [`sync::atomic`]: core's atomics in the runtime, loom's under `--cfg loom`.
//! - [`AtomicWord`] and [`AtomicFlag`]: an atomic word or flag as a protocol uses it, for
//!   protocols written once over both kinds (the sync primitives, `Note` and `Lock`, the
//!   channel waiters' claim, netpoll's reference counts).
//! - Models of what the subjects stand on, under `--cfg loom` only: `futex::ModelFutex`
//!   (the kernel's futex), `sema::ModelSema` (Go's semaphore), and `model` /
//!   `model_bounded`, through which every model runs. `tests/loom.rs` runs them.

use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};

#[cfg(all(test, loom))]
pub(crate) mod futex;
#[cfg(all(test, loom))]
pub(crate) mod sema;

/// Atomics (and, in the models, loom's lock and condition variable).
pub(crate) mod sync {
    /// core's atomics, or loom's in a model.
    pub(crate) mod atomic {
        #[cfg(all(test, loom))]
        pub(crate) use ::loom::sync::atomic::*;

        #[cfg(not(all(test, loom)))]
        pub(crate) use core::sync::atomic::*;
    }

    #[cfg(all(test, loom))]
    pub(crate) use ::loom::sync::{Arc, Condvar, Mutex, MutexGuard};
}

/// Loom's cells, threads and hints, for the models.
#[cfg(all(test, loom))]
pub(crate) use ::loom::{cell, hint, thread};

/// An atomic word as the primitives' protocols use it: the C struct's word in the runtime
/// (`AtomicI32`, `AtomicU64`), loom's in the models, so that a model runs the primitive's
/// own code, monomorphized, and not a copy of it.
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
#[cfg(all(test, loom))]
atomic_word!(
    ::loom::sync::atomic::AtomicI32 => i32,
    ::loom::sync::atomic::AtomicU32 => u32,
    ::loom::sync::atomic::AtomicU64 => u64,
);

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
#[cfg(all(test, loom))]
atomic_flag!(::loom::sync::atomic::AtomicBool);

/// Checks `f` with loom, with a preemption bound of 3 unless `LOOM_MAX_PREEMPTIONS`
/// sets another.
#[cfg(all(test, loom))]
pub(crate) fn model(f: impl Fn() + Sync + Send + 'static) {
    model_bounded(Some(3), f);
}

/// Checks `f` with loom, with `bound` as the preemption bound unless
/// `LOOM_MAX_PREEMPTIONS` sets one (every crate's loom model goes through here).
#[cfg(all(test, loom))]
pub(crate) fn model_bounded(bound: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let mut b = ::loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = bound;
    }
    b.check(f);
}
