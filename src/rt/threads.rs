//! The runtime's own threads that are not Ms, in one registry: sysmon, the template thread
//! (lockosthread.rs), the schedtrace and execution-trace writers, and the offload helpers.
//! Each marks itself in a thread-local flag (what such a thread readies — sysmon runs
//! timers — is not a foreign thread's hand-off: `ready::ready_put`), and all but the
//! helpers record their thread id for the deadlock detector, which counts them as the
//! runtime's (the helpers, of which there may be many, are in `offload`'s own table).

use core::sync::atomic::{AtomicI32, Ordering};

thread_local! {
    /// Set on the runtime's own threads that are not Ms.
    static RUNTIME_THREAD: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// The registered threads' ids (0: a free slot). The threads registered here live as long
/// as the process, but for trace writers, one per trace, which give their slot back when
/// they end ([`unregister`]): the kernel reuses thread ids, and a program's thread that
/// got a dead writer's id would be taken for the runtime's.
static TIDS: [AtomicI32; 8] = [const { AtomicI32::new(0) }; 8];

/// Registers the calling thread as one of the runtime's own (sysmon, the template thread,
/// a trace writer): marked, and its id recorded while a slot is free.
pub(crate) fn register() {
    RUNTIME_THREAD.with(|r| r.set(true));
    let tid = crate::sys::gettid();
    for s in &TIDS {
        if s.compare_exchange(0, tid, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// Gives back the calling thread's slot (a trace writer about to end).
pub(crate) fn unregister() {
    let tid = crate::sys::gettid();
    for s in &TIDS {
        if s.compare_exchange(tid, 0, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// Marks the calling offload helper as one of the runtime's own threads (its id is in
/// `offload`'s table).
pub(crate) fn register_helper() {
    RUNTIME_THREAD.with(|r| r.set(true));
}

/// Whether the calling thread is one of the runtime's own that are not Ms.
#[inline]
pub(crate) fn on_runtime_thread() -> bool {
    RUNTIME_THREAD.with(|r| r.get())
}

/// Whether thread `tid` registered itself with [`register`].
pub(crate) fn is_registered(tid: i32) -> bool {
    TIDS.iter().any(|t| t.load(Ordering::SeqCst) == tid)
}
