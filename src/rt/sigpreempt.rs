//! The preemption signal's shared half (preempt.rs has the handler, unseen.rs and
//! preemptsig.rs the other uses): the tags of our SIGURGs, whether our handler is on and
//! still the one installed, sending the signal to an M (`signal_m`), and the safe-point
//! checks (Go's `isAsyncSafePoint`): the interrupted PC is in none of the libraries whose
//! code must not be interrupted, and the goroutine's stack has room for the saved state.

use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

use super::*;
use crate::arch;

/// On: the handler is installed, the CPU has XSAVE, and `asyncpreemptoff` is not set.
pub(super) static ENABLED: AtomicBool = AtomicBool::new(false);

/// The handler is installed (also with `asyncpreemptoff=1`: unseen blocking calls are made
/// seen through it, unseen.rs).
pub(super) static HANDLER_ON: AtomicBool = AtomicBool::new(false);

/// `si_value` of our preemption signals ("gmp pree").
pub(super) const MAGIC: usize = 0x676d_7020_7072_6565;

/// `si_value` of the signals that ask an M to make its unseen blocking call seen
/// (unseen.rs): "gmp unse".
pub(super) const MAGIC_UNSEEN: usize = 0x676d_7020_756e_7365;

/// Stack the trampoline and the park path need besides the XSAVE area: 16 saved words,
/// the pushed PC, alignment, and the frames of the park function, `mcall` and the switch.
const STACK_SLACK: usize = 4096;

/// Executable ranges of the objects whose code must not be interrupted. Published whole
/// (never changed after), replaced by sysmon; old tables are leaked, because a handler
/// may still be reading one (a few KiB per change of the loaded objects).
struct Ranges {
    n: usize,
    r: [(usize, usize); 128],
    /// libgmp's own executable ranges (also in `r`).
    own_n: usize,
    own: [(usize, usize); 4],
    /// The code of libc's `syscall(2)` wrapper (`(0, 0)`: not found), through which Rust's
    /// std makes its futex waits (`runtime_call`).
    syscall_fn: (usize, usize),
    /// `dl_phdr_info`'s load/unload counters when this was built.
    adds: u64,
    subs: u64,
}

static RANGES: AtomicPtr<Ranges> = AtomicPtr::new(null_mut());

/// The address of our SIGURG handler (`preempt::on_sigurg`), stored before it is installed.
pub(super) static HANDLER: AtomicUsize = AtomicUsize::new(0);

/// Whether our handler is still the one installed (a program may install its own later:
/// then we stop sending, or it would see our signals).
fn handler_installed() -> bool {
    // SAFETY: queries the current action into a valid struct.
    unsafe {
        let mut cur: libc::sigaction = core::mem::zeroed();
        libc::sigaction(libc::SIGURG, core::ptr::null(), &mut cur);
        cur.sa_sigaction == HANDLER.load(Ordering::Relaxed)
    }
}

/// The object names whose code is never interrupted. Besides the libraries whose internal
/// state a goroutine switch could break, the ones the runtime itself calls into while it
/// holds a runtime lock or is between a sanitizer's start and finish of a fiber switch:
/// the sanitizer runtimes (their malloc interceptors and fiber calls) and common malloc
/// replacements. A goroutine stopped there is inside the runtime: preempting it would hold
/// the runtime lock across the switch (`asan_suite` under load catches it: "a goroutine
/// yields ... holding a runtime lock", or ASan's "starting fiber switch while in fiber
/// switch").
/// Any other shared object that defines `malloc` is excluded too (`malloc_object`).
const EXCLUDED: &[&[u8]] = &[
    b"libc.so",
    b"ld-linux",
    b"linux-vdso",
    b"linux-gate",
    b"libgcc_s",
    b"libstdc++",
    b"libpthread",
    b"libasan",
    b"libtsan",
    b"liblsan",
    b"libubsan",
    b"libhwasan",
    b"libclang_rt",
    b"libjemalloc",
    b"libtcmalloc",
    b"libmimalloc",
];

struct Collect {
    out: Ranges,
    our_base: usize,
    /// Where `malloc` resolves to (0: unknown): the shared object holding it is excluded,
    /// unless it is the executable, whose code must stay preemptible.
    malloc_addr: usize,
    /// Objects seen so far in this walk (the first one is the executable).
    seen: usize,
    only_counters: bool,
}

unsafe extern "C" fn phdr_callback(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: dl_iterate_phdr passes valid info and our `Collect`.
    unsafe {
        let c = &mut *(data as *mut Collect);
        let info = &*info;
        c.out.adds = info.dlpi_adds;
        c.out.subs = info.dlpi_subs;
        if c.only_counters {
            return 1;
        }
        let name: &[u8] = if info.dlpi_name.is_null() {
            b""
        } else {
            core::ffi::CStr::from_ptr(info.dlpi_name).to_bytes()
        };
        let first = c.seen == 0;
        c.seen += 1;
        let ours = info.dlpi_addr as usize == c.our_base;
        let malloc = !first && c.malloc_addr != 0 && {
            let phdrs = core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
            phdrs.iter().any(|ph| {
                let start = info.dlpi_addr as usize + ph.p_vaddr as usize;
                ph.p_type == libc::PT_LOAD
                    && ph.p_flags & libc::PF_X != 0
                    && (start..start + ph.p_memsz as usize).contains(&c.malloc_addr)
            })
        };
        let excluded = ours
            || malloc
            || EXCLUDED
                .iter()
                .any(|pat| name.windows(pat.len()).any(|w| w == *pat));
        if !excluded {
            return 0;
        }
        for i in 0..info.dlpi_phnum as usize {
            let ph = &*info.dlpi_phdr.add(i);
            if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 && c.out.n < c.out.r.len()
            {
                let start = info.dlpi_addr as usize + ph.p_vaddr as usize;
                c.out.r[c.out.n] = (start, start + ph.p_memsz as usize);
                c.out.n += 1;
                if ours && c.out.own_n < c.out.own.len() {
                    c.out.own[c.out.own_n] = (start, start + ph.p_memsz as usize);
                    c.out.own_n += 1;
                }
            }
        }
        0
    }
}

/// Rebuilds the range table if objects were loaded or unloaded since (or `force`).
pub(super) fn refresh_ranges(force: bool) {
    let mut c = Collect {
        out: Ranges {
            n: 0,
            r: [(0, 0); 128],
            own_n: 0,
            own: [(0, 0); 4],
            syscall_fn: (0, 0),
            adds: 0,
            subs: 0,
        },
        our_base: 0,
        malloc_addr: 0,
        seen: 0,
        only_counters: !force,
    };
    let cur = RANGES.load(Ordering::Acquire);
    if !force {
        // SAFETY: the callback only reads the counters.
        unsafe {
            libc::dl_iterate_phdr(
                Some(phdr_callback),
                &mut c as *mut Collect as *mut libc::c_void,
            )
        };
        // SAFETY: published tables are never freed.
        if !cur.is_null() && unsafe { (*cur).adds == c.out.adds && (*cur).subs == c.out.subs } {
            return;
        }
        c.only_counters = false;
    }
    // Our own load address, found from one of our functions.
    // SAFETY: dladdr with a valid address and out-struct.
    unsafe {
        let mut di: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(refresh_ranges as *const () as *const libc::c_void, &mut di) != 0 {
            c.our_base = di.dli_fbase as usize;
        }
        c.malloc_addr = libc::dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr()) as usize;
        libc::dl_iterate_phdr(
            Some(phdr_callback),
            &mut c as *mut Collect as *mut libc::c_void,
        );
    }
    c.out.syscall_fn = syscall_fn_range();
    RANGES.store(Box::into_raw(Box::new(c.out)), Ordering::Release);
}

/// The code range of the `syscall` function the runtime's std calls (libc's), from its
/// symbol's size; `(0, 0)` if the symbol or its size is not found.
fn syscall_fn_range() -> (usize, usize) {
    // SAFETY: dlsym with a valid name.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"syscall".as_ptr()) } as usize;
    if f == 0 {
        return (0, 0);
    }
    crate::sys::dl::function_range(f).unwrap_or((0, 0))
}

/// Whether the system call that returns to `pc`, in the interrupted context `uc`, is the
/// runtime's own: made from libgmp's code, or from libc's `syscall` wrapper called by it —
/// Rust's std waits on a futex that way (its `Mutex`, `Condvar` and `Once`, which the
/// runtime takes on goroutine stacks: the stack pool, channel headers), and a diverted
/// wait there would hand the P on in the middle of runtime code. The wrapper is a leaf,
/// so its caller is the interrupted context's return address (`arch::ctx_leaf_return`).
/// True while the table is not built yet. Async-signal-safe.
///
/// # Safety
/// `uc` is the context the signal interrupted on this thread, stopped at `pc` or at the
/// system-call instruction before it.
pub(super) unsafe fn runtime_call(pc: usize, uc: *const libc::ucontext_t) -> bool {
    if runtime_pc(pc) {
        return true;
    }
    let t = RANGES.load(Ordering::Acquire);
    if t.is_null() {
        return true;
    }
    // SAFETY: published tables are never freed or changed.
    let (a, b) = unsafe { (*t).syscall_fn };
    // SAFETY: caller contract: the context stopped inside the leaf wrapper.
    pc > a && pc < b && runtime_pc(unsafe { arch::ctx_leaf_return(uc) })
}

/// Whether `pc` is in code we must not interrupt. Async-signal-safe.
pub(super) fn excluded_pc(pc: usize) -> bool {
    let t = RANGES.load(Ordering::Acquire);
    if t.is_null() {
        return true;
    }
    // SAFETY: published tables are never freed or changed.
    let t = unsafe { &*t };
    t.r[..t.n].iter().any(|&(a, b)| pc >= a && pc < b)
}

/// Whether `pc` is in libgmp's own code (true while the table is not built yet).
/// Async-signal-safe.
pub(super) fn runtime_pc(pc: usize) -> bool {
    let t = RANGES.load(Ordering::Acquire);
    if t.is_null() {
        return true;
    }
    // SAFETY: published tables are never freed or changed.
    let t = unsafe { &*t };
    t.own[..t.own_n].iter().any(|&(a, b)| pc >= a && pc < b)
}

/// Whether goroutine `g`'s stack has room below `sp` for the trampoline's save area and
/// the runtime frames it calls (false if `sp` is not on it: C code switched stacks).
pub(super) fn room_on_stack(g: &G, sp: usize) -> bool {
    // SAFETY: the running goroutine's stack descriptor is written only while it is not
    // running.
    let Some(stack) = (unsafe { (*g.stack.ptr()).as_ref() }) else {
        return false;
    };
    let need = arch::async_stack_need() + STACK_SLACK;
    sp <= stack.top() && sp >= stack.lo() + need
}

/// Whether our handler is on and still installed (then the signal's targets' code
/// ranges are fresh); turns preemption off for good when the program replaced it.
pub(super) fn handler_still_ours() -> bool {
    if !HANDLER_ON.load(Ordering::Acquire) {
        return false;
    }
    if !handler_installed() {
        ENABLED.store(false, Ordering::Release);
        HANDLER_ON.store(false, Ordering::Release);
        return false;
    }
    refresh_ranges(false);
    true
}

/// A SIGURG ready to send: the checks done and the siginfo built (`Prepared::new`), so
/// that `send` is the system call alone. `unseen::look` reads what the thread sleeps in
/// between the two: only plain stores and the signal's own call follow that reading.
pub(super) struct Prepared {
    si: libc::siginfo_t,
    pid: i32,
}

impl Prepared {
    /// Checks that preemption is on and our handler still installed, and builds the
    /// siginfo tagged `magic`; None if the signal may not be sent.
    pub(super) fn new(magic: usize) -> Option<Prepared> {
        if !handler_still_ours() {
            return None;
        }
        // SAFETY: a zeroed siginfo filled as rt_tgsigqueueinfo wants it.
        unsafe {
            let pid = libc::getpid();
            let mut si: libc::siginfo_t = core::mem::zeroed();
            let raw = &mut si as *mut libc::siginfo_t as *mut u8;
            // Layout of the queue variant: si_signo, si_errno, si_code, then pid, uid, value.
            *(raw as *mut i32) = libc::SIGURG;
            *(raw.add(8) as *mut i32) = libc::SI_QUEUE;
            *(raw.add(16) as *mut i32) = pid;
            *(raw.add(20) as *mut u32) = libc::getuid();
            *(raw.add(24) as *mut usize) = magic;
            Some(Prepared { si, pid })
        }
    }

    /// Sends the signal to thread `tid` of this process. True if sent.
    pub(super) fn send(&self, tid: i32) -> bool {
        // SAFETY: the kernel copies the siginfo; the target is a thread of this process.
        unsafe {
            libc::syscall(
                libc::SYS_rt_tgsigqueueinfo,
                self.pid,
                tid,
                libc::SIGURG,
                &self.si as *const libc::siginfo_t,
            ) == 0
        }
    }
}

/// Sends SIGURG tagged `magic` to thread `tid` of this process, if preemption is on and
/// our handler is still installed. True if sent.
pub(super) fn signal_m(tid: i32, magic: usize) -> bool {
    Prepared::new(magic).is_some_and(|p| p.send(tid))
}
