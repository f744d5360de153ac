//! AddressSanitizer support: every switch between a goroutine's stack and its M's own
//! stack is announced with `__sanitizer_start_switch_fiber` /
//! `__sanitizer_finish_switch_fiber`, so that ASan knows which stack a thread runs on (its
//! reports then place a stack address in its frame and variable, its no-return handling
//! unpoisons the right range, and its fake stacks follow the goroutine).
//!
//! The two functions are looked up at start-up with `dlsym(RTLD_DEFAULT)`: they exist
//! only in a process with the ASan runtime (a program built with -fsanitize=address).
//! Otherwise every hook is one load of a flag that is false and a predicted branch.
//!
//! Protocol (compiler-rt's `common_interface_defs.h`): before a switch, `start(&save,
//! bottom, size)` with the destination stack (`save` receives the current context's fake
//! stack; NULL when the context is dying, a goroutine's exit); right after it, on the new
//! stack, `finish(save_of_this_context, &old_bottom, &old_size)`. The M's own stack
//! bounds come from the `finish` that starts or resumes a goroutine (the stack it came
//! from), kept in `M::asan_g0` for the switch back.

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::*;

type StartFn = unsafe extern "C" fn(*mut *mut c_void, *const c_void, usize);
type FinishFn = unsafe extern "C" fn(*mut c_void, *mut *const c_void, *mut usize);

#[repr(align(128))]
struct Flag(AtomicBool);
static ON: Flag = Flag(AtomicBool::new(false));
static START: AtomicUsize = AtomicUsize::new(0);
static FINISH: AtomicUsize = AtomicUsize::new(0);
/// `__asan_unpoison_memory_region`, or 0.
static UNPOISON: AtomicUsize = AtomicUsize::new(0);
type UnpoisonFn = unsafe extern "C" fn(*const c_void, usize);

/// Looks the ASan fiber functions up (from `init_once`).
pub(crate) fn init() {
    // SAFETY: dlsym with NUL-terminated names; RTLD_DEFAULT searches the whole process.
    let (s, f) = unsafe {
        (
            libc::dlsym(
                libc::RTLD_DEFAULT,
                c"__sanitizer_start_switch_fiber".as_ptr(),
            ),
            libc::dlsym(
                libc::RTLD_DEFAULT,
                c"__sanitizer_finish_switch_fiber".as_ptr(),
            ),
        )
    };
    // SAFETY: as above.
    let u = unsafe {
        libc::dlsym(
            libc::RTLD_DEFAULT,
            c"__asan_unpoison_memory_region".as_ptr(),
        )
    };
    UNPOISON.store(u as usize, Ordering::Relaxed);
    if !s.is_null() && !f.is_null() {
        START.store(s as usize, Ordering::Relaxed);
        FINISH.store(f as usize, Ordering::Relaxed);
        ON.0.store(true, Ordering::Release);
        super::hookflags::set(super::hookflags::ASAN, true);
    }
}

#[inline(always)]
pub(crate) fn on() -> bool {
    ON.0.load(Ordering::Relaxed)
}

fn start(save: *mut *mut c_void, bottom: usize, size: usize) {
    // SAFETY: START holds __sanitizer_start_switch_fiber (`on` is true only then).
    unsafe {
        let f: StartFn = core::mem::transmute(START.load(Ordering::Relaxed));
        f(save, bottom as *const c_void, size);
    }
}

fn finish(save: *mut c_void) -> (usize, usize) {
    let mut bottom: *const c_void = core::ptr::null();
    let mut size = 0usize;
    // SAFETY: FINISH holds __sanitizer_finish_switch_fiber; valid out-pointers.
    unsafe {
        let f: FinishFn = core::mem::transmute(FINISH.load(Ordering::Relaxed));
        f(save, &mut bottom, &mut size);
    }
    (bottom as usize, size)
}

/// On g0, just before `execute` switches to `g` (whose stack is final by then).
#[cold]
#[inline(never)]
pub(crate) fn enter_goroutine(m: &M, g: &G) {
    // SAFETY: g is ours (execute's caller contract): its stack does not change now.
    let (lo, size) = unsafe {
        (*g.stack.ptr())
            .as_ref()
            .map_or((0, 0), |s| (s.lo(), s.size()))
    };
    // SAFETY: m's own thread owns asan_fake.
    start(unsafe { m.asan_fake.ptr() }.cast(), lo, size);
}

/// On a goroutine's stack, right after it started (`save` null) or resumed (`save` = what
/// it saved when it switched away), on M `m`: records the M's stack for the way back.
#[cold]
#[inline(never)]
pub(crate) fn on_goroutine(m: &M, save: *mut c_void) {
    let g0 = finish(save);
    // SAFETY: m is the M running this goroutine; its thread (us) owns asan_g0.
    unsafe { m.asan_g0.set(g0) };
}

/// On a goroutine, just before it switches to its M's stack; `exiting`: it never comes
/// back (its fake stack is dropped, and its whole stack unpoisoned: frames that
/// gmp_goexit abandoned never ran their epilogues, and their redzones would otherwise
/// still be poisoned when the stack is reused by another goroutine).
#[cold]
#[inline(never)]
pub(crate) fn leave_goroutine(m: &M, g: &G, exiting: bool) {
    // SAFETY: m runs g on this thread; both fields are owned by it now.
    let (lo, size) = unsafe { m.asan_g0.get() };
    let save = if exiting {
        unpoison_stack(g);
        core::ptr::null_mut()
    } else {
        // SAFETY: g is the running goroutine; its own field.
        unsafe { g.ext().asan_fake.ptr() }.cast()
    };
    start(save, lo, size);
}

/// Clears the shadow of dying goroutine `g`'s whole stack (see `leave_goroutine`).
fn unpoison_stack(g: &G) {
    let f = UNPOISON.load(Ordering::Relaxed);
    if f == 0 {
        return;
    }
    // SAFETY: g is the running goroutine; its stack is its own field.
    if let Some((lo, size)) = unsafe { (*g.stack.ptr()).as_ref().map(|s| (s.lo(), s.size())) } {
        // SAFETY: UNPOISON holds __asan_unpoison_memory_region; the range is this
        // goroutine's mapped stack (clearing shadow bytes only loses detection in the few
        // frames of the exit path still running on it).
        unsafe {
            let f: UnpoisonFn = core::mem::transmute(f);
            f(lo as *const c_void, size);
        }
    }
}

/// On g0, right after a goroutine switched back to it (`after_switch`).
#[cold]
#[inline(never)]
pub(crate) fn back_on_g0(m: &M) {
    // SAFETY: m's own thread owns asan_fake.
    finish(unsafe { m.asan_fake.get() } as *mut c_void);
}
