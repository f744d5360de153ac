//! libgmp: Go's M:P:G goroutine scheduler as a library with a C ABI.
//!
//! Layers point down only (HACKING.md, "The layers"):
//!
//! ```text
//!   ffi/            extern "C" boundary: argument checks, panic catching, -errno
//!   sync/           sema (address-keyed semaphore), WaitGroup
//!   rt/             the scheduler: g, m, p, runq, sched, park, proc, trace
//!   stack/ arch/ sys/   goroutine stacks, the context switch, futex and friends
//! ```
//!
//! The C API lives in `include/gmp-sched/gmp.h`, generated from `src/ffi` by `build.rs`.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod arch;
pub mod chan;
pub mod ffi;
pub mod rt;
pub mod stack;
pub mod sync;
pub mod sys;
