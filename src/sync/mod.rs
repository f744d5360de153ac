//! Parking synchronisation built on the scheduler: the address-keyed semaphore
//! ([`sema`], Go's runtime/sema.go) and the WaitGroup ([`waitgroup`], Go's sync.WaitGroup).
//! Both serve goroutines (which park) and foreign threads (which sleep on a futex).

pub mod sema;
pub mod waitgroup;
