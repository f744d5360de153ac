//! ThreadSanitizer's happens-before annotations, reachable from every layer (the Note, the
//! semaphore, channels); `rt::tsan` finds the functions at start-up and does the fibers.
//! Without TSan every hook is one load of a false flag.

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

#[repr(align(128))]
struct Flag(AtomicBool);
static ON: Flag = Flag(AtomicBool::new(false));
static ACQUIRE: AtomicUsize = AtomicUsize::new(0);
static RELEASE: AtomicUsize = AtomicUsize::new(0);

/// Installs `__tsan_acquire` and `__tsan_release` (both non-null) and turns the hooks on.
pub(crate) fn enable(acquire: usize, release: usize) {
    ACQUIRE.store(acquire, Ordering::Relaxed);
    RELEASE.store(release, Ordering::Relaxed);
    // First: whoever sees the hooks on sees the quick paths off (`sys::quick_off`).
    super::set_quick_off();
    ON.0.store(true, Ordering::Release);
}

#[inline(always)]
pub(crate) fn on() -> bool {
    ON.0.load(Ordering::Relaxed)
}

fn call(f: &AtomicUsize, addr: usize) {
    // SAFETY: `enable` stored TSan's `void __tsan_acquire/__tsan_release(void *)`.
    unsafe {
        let f: unsafe extern "C" fn(usize) = core::mem::transmute(f.load(Ordering::Acquire));
        f(addr);
    }
}

/// `__tsan_release(addr)`: what the caller did before happens before what a later
/// `acquire(addr)` does after.
#[cold]
#[inline(never)]
pub(crate) fn release(addr: usize) {
    call(&RELEASE, addr);
}

/// `__tsan_acquire(addr)`.
#[cold]
#[inline(never)]
pub(crate) fn acquire(addr: usize) {
    call(&ACQUIRE, addr);
}
