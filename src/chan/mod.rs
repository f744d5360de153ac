//! Channels and select (Go's chan.go and select.go).
//!
//! - [`hchan`]: the channel — wait queues, send/receive/close with direct
//!   hand-off between a sender and a blocked receiver (and back);
//! - [`ring`]: a buffered channel's ring, lock-free while nobody waits;
//! - [`buf`]: the ring's storage, mapped (lazy) when it is large;
//! - [`select`]: selectgo — random poll order, address lock order, one sudog per case;
//! - [`waitq`]: the wait queues and blocking (gopark for goroutines, a futex `Note` for
//!   foreign threads). The waiter records, the sudogs, their caches and the done flag that
//!   arbitrates between wakers and timeouts are the runtime's (`rt/sudog.rs`): sema and the
//!   scheduler use them too, as in Go.
//!
//! # Locks
//! A channel's lock has `sys::Rank::Chan` in the one lock order (HACKING.md, "The lock
//! order"): several are held only in select, in ascending address order, each once. A
//! timer callback never takes a channel lock; wake-ups (goready, Note::wakeup) happen after
//! the channel locks are released, except a timeout's goready, which runs under the timer
//! lock.

mod buf;
pub mod hchan;
pub(crate) mod ring;
pub mod select;
#[cfg(test)]
mod tests;
pub(crate) mod waitq;

pub use hchan::{Chan, ChanError, Mode};
