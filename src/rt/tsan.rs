//! ThreadSanitizer support: goroutines are TSan fibers, and the runtime's synchronisation
//! (which TSan cannot see: libgmp is not instrumented) is announced as happens-before
//! edges.
//!
//! Found at start-up with `dlsym(RTLD_DEFAULT)` (the TSan runtime exists only in a program
//! built with -fsanitize=thread); otherwise every hook is one load of a false flag.
//!
//! - Fibers: a goroutine gets a fiber (`__tsan_create_fiber`) the first time it runs, kept
//!   with its G for reuse; `execute` switches to it, `mcall`/`goexit` back to the M's own
//!   (`__tsan_get_current_fiber` on g0, kept in the M). TSan then sees one goroutine as one
//!   thread of execution whichever M runs it.
//! - Edges (`__tsan_release` before, `__tsan_acquire` after, on the same address): spawn
//!   (the G), every wake-up (`goready` releases the G, the parked goroutine acquires it when
//!   it resumes — channels, select, sema, mutex, WaitGroup, cond and sleep all wake this
//!   way), a channel operation that completes without waiting (send releases the channel,
//!   receive acquires it), a blocked channel operation's sudog (its owner releases it when
//!   it queues it, the party that dequeues it acquires it before it touches the owner's
//!   buffer: `chan/waitq.rs`), WaitGroup done/wait, and the mutex's slow paths (the inline fast
//!   paths in gmp.h are compiled into the program, so TSan sees their atomics itself).

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::*;

#[repr(align(128))]
struct Flag(AtomicBool);
static ON: Flag = Flag(AtomicBool::new(false));

static CREATE: AtomicUsize = AtomicUsize::new(0);
static SWITCH: AtomicUsize = AtomicUsize::new(0);
static CURRENT: AtomicUsize = AtomicUsize::new(0);
static ACQUIRE: AtomicUsize = AtomicUsize::new(0);
static RELEASE: AtomicUsize = AtomicUsize::new(0);

pub(crate) use crate::sys::tsan::{acquire, release};

/// Looks the TSan interface up (from `init_once`).
pub(crate) fn init() {
    let names: [(&core::ffi::CStr, &AtomicUsize); 5] = [
        (c"__tsan_create_fiber", &CREATE),
        (c"__tsan_switch_to_fiber", &SWITCH),
        (c"__tsan_get_current_fiber", &CURRENT),
        (c"__tsan_acquire", &ACQUIRE),
        (c"__tsan_release", &RELEASE),
    ];
    let mut all = true;
    for (name, slot) in names {
        // SAFETY: dlsym with a NUL-terminated name; RTLD_DEFAULT searches the process.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
        all &= !p.is_null();
        slot.store(p as usize, Ordering::Relaxed);
    }
    if all {
        crate::sys::tsan::enable(
            ACQUIRE.load(Ordering::Relaxed),
            RELEASE.load(Ordering::Relaxed),
        );
    }
    ON.0.store(all, Ordering::Release);
    super::hooks::set(super::hooks::TSAN, all);
}

#[inline(always)]
pub(crate) fn on() -> bool {
    ON.0.load(Ordering::Relaxed)
}

fn call1(f: &AtomicUsize, a: usize) -> usize {
    // SAFETY: `on` is true only when every slot holds its TSan function; each takes one
    // pointer-sized argument (or an unsigned flag) and returns a pointer or nothing, which
    // the System V ABI lets us treat alike.
    unsafe {
        let f: unsafe extern "C" fn(usize) -> usize =
            core::mem::transmute(f.load(Ordering::Relaxed));
        f(a)
    }
}

fn switch_to(fiber: usize) {
    // SAFETY: as in `call1`; flags 0: the switch synchronises the two fibers.
    unsafe {
        let f: unsafe extern "C" fn(usize, u32) =
            core::mem::transmute(SWITCH.load(Ordering::Relaxed));
        f(fiber, 0);
    }
}

/// On g0, just before `execute` switches to `g`.
#[cold]
#[inline(never)]
pub(crate) fn enter_goroutine(m: &M, g: &G) {
    // SAFETY: m's own thread owns tsan_g0; g is ours (execute's caller contract).
    unsafe {
        if m.tsan_g0.get() == 0 {
            m.tsan_g0.set(call1(&CURRENT, 0));
        }
        let ext = g.ext();
        if ext.tsan_fiber.get() == 0 {
            ext.tsan_fiber.set(call1(&CREATE, 0));
        }
        switch_to(ext.tsan_fiber.get());
    }
}

/// On a goroutine, just before it switches to its M's stack.
#[cold]
#[inline(never)]
pub(crate) fn leave_goroutine(m: &M) {
    // SAFETY: m runs the caller on this thread; tsan_g0 was set by its execute.
    switch_to(unsafe { m.tsan_g0.get() });
}

/// The stack's low address, the key of the edge between the goroutines that use a stack
/// one after the other (a dead G's stack is reused, also by another G: `take_hot_stack`).
fn stack_key(g: &G) -> usize {
    // SAFETY: called by the goroutine itself, which owns its stack.
    unsafe { (*g.stack.ptr()).as_ref().map_or(0, |s| s.lo()) }
}

/// First thing a goroutine does (`goentry`): it follows its spawn and whoever used its
/// stack before.
#[cold]
#[inline(never)]
pub(crate) fn goroutine_started(g: &G) {
    acquire(g as *const G as usize);
    acquire(stack_key(g));
}

/// Last thing a goroutine does before its final switch (`goexit`).
#[cold]
#[inline(never)]
pub(crate) fn goroutine_exits(g: &G) {
    release(stack_key(g));
}
