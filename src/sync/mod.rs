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
#[cfg(all(test, loom))]
mod sema_loom;
pub mod waitgroup;

use core::sync::atomic::AtomicU32;

use crate::rt::WaitReason;

/// A semaphore word as the primitives use it: the runtime's address-keyed semaphore
/// ([`sema`]) on an `AtomicU32` of the C struct, a model semaphore in the loom models.
pub trait SemaWord {
    /// Waits until the count is positive and takes one (Go's `semacquire1`; `lifo` queues
    /// at the head).
    fn acquire(&self, lifo: bool, reason: WaitReason);
    /// `acquire` (FIFO) that the caller's scope ends (rt/scope.rs): Err(errno) then, the
    /// count untouched.
    fn acquire_scoped(&self, reason: WaitReason) -> Result<(), i32> {
        self.acquire(false, reason);
        Ok(())
    }
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
    fn acquire_scoped(&self, reason: WaitReason) -> Result<(), i32> {
        sema::semacquire_scoped(self, reason)
    }
}

/// The model semaphore of the loom models (`crate::loom::sema`).
#[cfg(all(test, loom))]
impl SemaWord for crate::loom::sema::ModelSema {
    fn acquire(&self, lifo: bool, _reason: WaitReason) {
        self.down(lifo);
    }
    fn release(&self, handoff: bool) {
        self.up(handoff);
    }
    /// A wait [`ModelSema::cancel`] ends leaves no ghost in the real semaphore (it is taken
    /// off the queue); here the ghost passes any release that reaches it on, which leaves
    /// the count as the removal does.
    fn acquire_scoped(&self, _reason: WaitReason) -> Result<(), i32> {
        self.down_scoped(false, std::sync::Arc::new(|| Some(false)))
    }
}
