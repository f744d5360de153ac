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
//! - The runtime's own libc calls (`called_by_runtime`): while TSan builds a report it
//!   holds its thread-registry lock, and its symbolizer (GCC's libbacktrace) opens and
//!   closes the binaries through the libc names on the reporting goroutine. Those calls
//!   reach the interposer's hooks (TSan's interceptor, ignoring them, passes them on to
//!   the next definition: libgmp's). A hook that parks the goroutine there (the
//!   hand-off of a blocking `open`) switches fibers with the lock held: its M's next
//!   fiber creation or helper-thread start, and every other thread's sleep or exit, would
//!   wait for it forever. The hooks call libc directly for the runtime's calls, which
//!   only blocks the thread for the length of a file open or close, as on any thread
//!   where they do not act; TSan's other interceptors pass the program's calls on with
//!   none of its locks held, so those may still park.

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
    if all {
        find_text();
    }
    ON.0.store(all, Ordering::Release);
    super::hookflags::set(super::hookflags::TSAN, all);
}

/// The executable span of the TSan runtime's shared object (0..0 when the runtime is linked
/// into the program, where its code and the program's cannot be told apart by address),
/// and of libgmp's. Set by `init` before `ON`, never changed: neither object is unloaded
/// while goroutines run.
static TSAN_TEXT: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
static OWN_TEXT: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

struct Spans {
    tsan_pc: usize,
    own_pc: usize,
    tsan: (usize, usize),
    own: (usize, usize),
    seen: usize,
}

unsafe extern "C" fn span_callback(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: dl_iterate_phdr passes valid info (dlpi_phnum headers at dlpi_phdr) and our
    // `Spans`.
    unsafe {
        let s = &mut *(data as *mut Spans);
        let info = &*info;
        let phdrs = core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
        let (mut lo, mut hi) = (usize::MAX, 0);
        for ph in phdrs {
            if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 {
                let start = info.dlpi_addr as usize + ph.p_vaddr as usize;
                lo = lo.min(start);
                hi = hi.max(start + ph.p_memsz as usize);
            }
        }
        // The first object is the program itself.
        if s.seen > 0 && (lo..hi).contains(&s.tsan_pc) {
            s.tsan = (lo, hi);
        }
        if (lo..hi).contains(&s.own_pc) {
            s.own = (lo, hi);
        }
        s.seen += 1;
        0
    }
}

/// Records `TSAN_TEXT` and `OWN_TEXT` (from `init`).
fn find_text() {
    let mut s = Spans {
        tsan_pc: CREATE.load(Ordering::Relaxed),
        own_pc: init as *const () as usize,
        tsan: (0, 0),
        own: (0, 0),
        seen: 0,
    };
    // SAFETY: the callback reads the headers dl_iterate_phdr passes and writes our Spans.
    unsafe {
        libc::dl_iterate_phdr(
            Some(span_callback),
            &mut s as *mut Spans as *mut libc::c_void,
        );
    }
    if s.own.1 == 0 {
        return;
    }
    OWN_TEXT[0].store(s.own.0, Ordering::Relaxed);
    OWN_TEXT[1].store(s.own.1, Ordering::Relaxed);
    TSAN_TEXT[0].store(s.tsan.0, Ordering::Relaxed);
    TSAN_TEXT[1].store(s.tsan.1, Ordering::Relaxed);
}

#[allow(non_camel_case_types)]
type _Unwind_Context = core::ffi::c_void;

unsafe extern "C" {
    fn _Unwind_Backtrace(
        trace: unsafe extern "C" fn(*mut _Unwind_Context, *mut core::ffi::c_void) -> i32,
        arg: *mut core::ffi::c_void,
    ) -> i32;
    fn _Unwind_GetIP(ctx: *mut _Unwind_Context) -> usize;
}

/// Whether the interposer's hook running on this thread was called by the TSan runtime
/// itself rather than by the program: see the module doc. The hooks then call libc
/// directly, as they do for glibc's internal calls they never see.
///
/// The two frames above libgmp's own decide: the program's call reaches a hook through
/// TSan's interceptor (libtsan) from the program's code; the runtime's call through the
/// interceptor (or the runtime's own reference to the name) from libtsan's code. Only
/// under TSan with its runtime in a shared object; a walk that cannot see two frames
/// leaves the hook acting. The walk costs a few frames of unwinding per hook call, only
/// in a TSan build.
#[inline(always)]
pub(crate) fn called_by_runtime() -> bool {
    on() && TSAN_TEXT[1].load(Ordering::Relaxed) != 0 && called_by_runtime_walk()
}

#[cold]
#[inline(never)]
fn called_by_runtime_walk() -> bool {
    struct Walk {
        own: (usize, usize),
        pcs: [usize; 2],
        n: usize,
        frames: usize,
    }
    unsafe extern "C" fn step(ctx: *mut _Unwind_Context, arg: *mut core::ffi::c_void) -> i32 {
        const NO_REASON: i32 = 0;
        const NORMAL_STOP: i32 = 4;
        // SAFETY: `arg` is the Walk below; `ctx` is the unwinder's current frame.
        let (w, ip) = unsafe { (&mut *(arg as *mut Walk), _Unwind_GetIP(ctx)) };
        w.frames += 1;
        // A return address points past its call: step back into the calling instruction.
        let pc = ip.wrapping_sub(1);
        if w.n == 0 && (w.own.0..w.own.1).contains(&pc) {
            return if w.frames < 64 {
                NO_REASON
            } else {
                NORMAL_STOP
            };
        }
        w.pcs[w.n] = pc;
        w.n += 1;
        if w.n == w.pcs.len() {
            NORMAL_STOP
        } else {
            NO_REASON
        }
    }
    let mut w = Walk {
        own: (
            OWN_TEXT[0].load(Ordering::Relaxed),
            OWN_TEXT[1].load(Ordering::Relaxed),
        ),
        pcs: [0; 2],
        n: 0,
        frames: 0,
    };
    // SAFETY: `step` only reads the unwinder's context and writes `w`, which outlives the
    // walk.
    unsafe { _Unwind_Backtrace(step, &mut w as *mut Walk as *mut core::ffi::c_void) };
    let tsan = TSAN_TEXT[0].load(Ordering::Relaxed)..TSAN_TEXT[1].load(Ordering::Relaxed);
    w.n == 2 && w.pcs.iter().all(|pc| tsan.contains(pc))
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
