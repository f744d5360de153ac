//! ThreadSanitizer's happens-before annotations, reachable from every layer (the Note, the
//! semaphore, channels); `rt::tsan` finds the functions at start-up and does the fibers.
//! Without TSan every hook is one load of a false flag.

use core::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

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
    // `on` is a Relaxed load: a thread that sees the hooks on while `enable` runs may not
    // see the pointers yet (a weakly ordered CPU), and then has nothing to annotate with.
    let f = f.load(Ordering::Acquire);
    if f == 0 {
        return;
    }
    // SAFETY: a non-zero value is what `enable` stored: TSan's
    // `void __tsan_acquire/__tsan_release(void *)`.
    unsafe {
        let f: unsafe extern "C" fn(usize) = core::mem::transmute(f);
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

/// One address per fd number below this, for the edges of `fd_closing` and `fd_opened`
/// (larger numbers get none).
const FD_KEYS: usize = 1 << 16;
static FD_KEY: [AtomicU8; FD_KEYS] = [const { AtomicU8::new(0) }; FD_KEYS];

/// Before a close of `fd` that TSan does not see (`gmp_close`'s system call): releases the
/// number's address, which `fd_opened` acquires when the number is handed out again. Both
/// act once the runtime has started (it looks TSan up then).
///
/// TSan follows fds through its own interceptors and resets a number's state at the
/// closes it intercepts; after a close it misses, the next creation or use of the number
/// through an interceptor looks unordered with the uses before the close, and it reports
/// a race on the fd. The kernel hands a number out again only after its close: the edge
/// is one the program really has, which TSan cannot see.
#[inline(always)]
pub(crate) fn fd_closing(fd: core::ffi::c_int) {
    if on() {
        fd_edge(fd, &RELEASE);
    }
}

/// After the library handed out `fd` (`gmp_socket`, `gmp_pipe`, `gmp_accept`, `gmp_open`,
/// and the interposer's socket, socketpair, pipe, accept, open, dup, whose TSan
/// interceptors record the new fd when they return): follows every earlier
/// `fd_closing` of the number.
#[inline(always)]
pub(crate) fn fd_opened(fd: core::ffi::c_int) {
    if on() {
        fd_edge(fd, &ACQUIRE);
    }
}

#[cold]
#[inline(never)]
fn fd_edge(fd: core::ffi::c_int, f: &AtomicUsize) {
    if let Some(key) = usize::try_from(fd).ok().and_then(|i| FD_KEY.get(i)) {
        call(f, key as *const AtomicU8 as usize);
    }
}
