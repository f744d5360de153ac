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
