//! libgmp: Go's M:P:G goroutine scheduler as a library with a C ABI.
//!
//! Layers point down only (HACKING.md, "The layers"; `tests/layers.rs` checks it):
//!
//! ```text
//!   interpose/      libc's blocking calls, hooked (LD_PRELOAD, or linked)
//!   ffi/            extern "C" boundary: argument checks, panic catching, -errno
//!   net/            the resolver of goroutines' getaddrinfo (Go's net: DNS on the poller)
//!   poll/ signal    operations on descriptors over the network poller (Go's internal/poll);
//!                   signals relayed to channels (Go's os/signal)
//!   chan/ sync/     channels and select; sema, Go's sync package
//!   rt/             the scheduler: G, M, P, run queues, park, timers, netpoll, sysmon
//!   stack/ arch/    goroutine stacks; the context switch and the signal trampolines
//!   sys/            futex, Note and Lock, time, threads, raw writes
//!   loom/           the one switch between core's atomics and loom's, and the models
//! ```
//!
//! The C API lives in `include/gmp-sched/gmp.h`, generated from `src/ffi` by `build.rs`.

#![deny(unsafe_op_in_unsafe_fn)]
// The crate's documentation is for contributors (`cargo doc --document-private-items`):
// the product is the C API, and the Rust items are `pub` for the tests and benchmarks, so
// their docs link to the private items they are built on.
#![allow(rustdoc::private_intra_doc_links)]

pub mod arch;
pub mod chan;
pub mod ffi;
pub mod interpose;
pub mod loom;
pub mod net;
pub mod poll;
pub mod rt;
pub mod signal;
pub mod stack;
pub mod sync;
pub mod sys;
