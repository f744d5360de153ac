//! Asynchronous preemption (Go's preempt.go + signal_unix.go `doSigPreempt`): a goroutine
//! that runs C code calling nothing of ours for a whole time slice is stopped by a signal.
//!
//! - sysmon marks a P whose goroutines have run `FORCE_PREEMPT_NS` on one slice
//!   (`P::preempt`, the cooperative request) and arms the P's M to get SIGURG when its
//!   thread next runs user code (`preempt_m`; preemptsig.rs: a perf event or a CPU-time
//!   timer, never a signal inside a system call), unless the user replaced our handler.
//!   Without either source it sends the signal itself (`rt_tgsigqueueinfo`, `SI_QUEUE`,
//!   `MAGIC`) to a thread /proc shows computing.
//! - The handler (`on_sigurg`, on the M's alternate signal stack, installed with
//!   SA_RESTART so interrupted restartable syscalls resume) accepts only a safe point:
//!   the request is still current (the M's P is marked and its goroutine RUNNING), the
//!   interrupted PC is in none of libc, ld.so, the vDSO, libgcc_s, libstdc++, libpthread or
//!   libgmp itself (their executable segments, gathered with `dl_iterate_phdr` and
//!   refreshed by sysmon when the set of loaded objects changes), and the goroutine's
//!   stack has room for the saved state. Then it pushes the interrupted PC below the red
//!   zone and points the PC at `arch::__gmp_async_preempt`, which saves every register and
//!   the XSAVE state and calls `async_preempt_park`. Otherwise it returns; sysmon asks
//!   again at its next round.
//! - `async_preempt_park` locks the goroutine to its M for this one stop
//!   (`park::gopreempt_bound`, `g.asyncbound`: the C code it was running may hold `&errno`
//!   or TLS addresses in registers, HACKING.md decision 8, and may hold a pthread mutex or be halfway
//!   through thread-local state) and preempts it (`PREEMPT`): it goes to the global run
//!   queue, the M hands its P off and runs nothing else until the goroutine resumes on it
//!   (`stoplockedm`/`startlockedm`), and `execute` then drops the lock.
//! - Signals that are not ours go to the handler the program had installed before the
//!   runtime started (chained, as Go does for signals it shares).
//!
//! `GMP_DEBUG=asyncpreemptoff=1` turns the signal off (Go's name); the cooperative request
//! stays, and so does the handler, for unseen blocking calls (unseen.rs).

use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use super::*;
use crate::arch;

/// On: the handler is installed, the CPU has XSAVE, and `asyncpreemptoff` is not set.
static ENABLED: AtomicBool = AtomicBool::new(false);
/// The handler is installed (also with `asyncpreemptoff=1`: unseen blocking calls are made
/// seen through it, unseen.rs).
static HANDLER_ON: AtomicBool = AtomicBool::new(false);
/// `GMP_DEBUG=asyncpreemptstress=1` (tests): sysmon asks for preemption every round
/// (20 µs) whatever the slice, so that a test sees thousands of preemptions a second.
pub(super) static STRESS: AtomicBool = AtomicBool::new(false);

/// Counters for `gmp_stats`.
pub static SIGNALS: AtomicU64 = AtomicU64::new(0);
pub static DONE: AtomicU64 = AtomicU64::new(0);
/// Refusals: the request was stale (the goroutine had moved on), the PC was in a
/// library we must not interrupt (or in the runtime), the stack had no room; and signals
/// not sent because the thread was blocked in the kernel.
pub static REFUSED_STALE: AtomicU64 = AtomicU64::new(0);
pub static REFUSED_LIB: AtomicU64 = AtomicU64::new(0);
pub static REFUSED_STACK: AtomicU64 = AtomicU64::new(0);
pub static SKIPPED_BLOCKED: AtomicU64 = AtomicU64::new(0);
/// Unseen blocking calls diverted into `__gmp_async_syscall` (unseen.rs).
pub static DONE_UNSEEN: AtomicU64 = AtomicU64::new(0);

/// `si_value` of our preemption signals.
pub(super) const MAGIC: usize = 0x676d_7020_7072_6565; // "gmp pree"
/// `si_value` of the signals that ask an M to make its unseen blocking call seen
/// (unseen.rs).
pub(super) const MAGIC_UNSEEN: usize = 0x676d_7020_756e_7365; // "gmp unse"

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
    /// `dl_phdr_info`'s load/unload counters when this was built.
    adds: u64,
    subs: u64,
}

static RANGES: AtomicPtr<Ranges> = AtomicPtr::new(null_mut());

/// The action the program had for SIGURG before ours (chained to for signals not ours).
static mut OLD_ACTION: core::mem::MaybeUninit<libc::sigaction> = core::mem::MaybeUninit::zeroed();

/// Sets up asynchronous preemption (from `init_once`): unless `GMP_DEBUG` has
/// `asyncpreemptoff=1`, or the CPU has no XSAVE.
pub(super) fn init() {
    use crate::sys::dbgvars::{Var, get};
    // No handler under valgrind and ThreadSanitizer: valgrind reports the handler's writes
    // below the stack pointer; TSan runs handlers late, not on the interrupted context.
    // `asyncpreemptoff=1` keeps the handler for unseen.rs and sends no preemption signal.
    let off = get(Var::Asyncpreemptoff) != 0;
    let no_handler = crate::stack::running_on_valgrind() || super::tsan::on();
    STRESS.store(get(Var::Asyncpreemptstress) != 0, Ordering::Relaxed);
    if no_handler || !arch::async_preempt_init(async_preempt_park, unseen::wrapped) {
        return;
    }
    refresh_ranges(true);
    // SAFETY: plain sigaction calls on valid structs; OLD_ACTION is written once, here,
    // before the handler that reads it is installed.
    unsafe {
        let old = &raw mut OLD_ACTION;
        libc::sigaction(libc::SIGURG, core::ptr::null(), (*old).as_mut_ptr());
        let mut act: libc::sigaction = core::mem::zeroed();
        act.sa_sigaction = on_sigurg as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        libc::sigemptyset(&mut act.sa_mask);
        if libc::sigaction(libc::SIGURG, &act, null_mut()) != 0 {
            return;
        }
    }
    HANDLER_ON.store(true, Ordering::Release);
    ENABLED.store(!off, Ordering::Release);
}

/// Whether our handler is still the one installed (a program may install its own later:
/// then we stop sending, or it would see our signals).
fn handler_installed() -> bool {
    // SAFETY: queries the current action into a valid struct.
    unsafe {
        let mut cur: libc::sigaction = core::mem::zeroed();
        libc::sigaction(libc::SIGURG, core::ptr::null(), &mut cur);
        cur.sa_sigaction == on_sigurg as *const () as usize
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
fn refresh_ranges(force: bool) {
    let mut c = Collect {
        out: Ranges {
            n: 0,
            r: [(0, 0); 128],
            own_n: 0,
            own: [(0, 0); 4],
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
        if libc::dladdr(init as *const () as *const libc::c_void, &mut di) != 0 {
            c.our_base = di.dli_fbase as usize;
        }
        c.malloc_addr = libc::dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr()) as usize;
        libc::dl_iterate_phdr(
            Some(phdr_callback),
            &mut c as *mut Collect as *mut libc::c_void,
        );
    }
    RANGES.store(Box::into_raw(Box::new(c.out)), Ordering::Release);
}

/// Whether `pc` is in code we must not interrupt. Async-signal-safe.
fn excluded_pc(pc: usize) -> bool {
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
    let need = 128 + 8 + arch::ASYNC_XSAVE_SIZE.load(Ordering::Relaxed) as usize + 64 + STACK_SLACK;
    sp <= stack.top() && sp >= stack.lo() + need
}

/// The files of a thread's /proc task directory that sysmon reads.
#[derive(Clone, Copy)]
pub(super) enum TaskFile {
    Stat = 0,
    Status = 1,
    Syscall = 2,
}

impl TaskFile {
    fn name(self) -> &'static [u8] {
        match self {
            TaskFile::Stat => b"/stat\0",
            TaskFile::Status => b"/status\0",
            TaskFile::Syscall => b"/syscall\0",
        }
    }
}

/// Reads M `m`'s thread's `/proc/self/task/<tid>/<file>` into `buf`; the byte count, or
/// None if it cannot be read or is empty. For sysmon and the Ms that step in for it. Raw
/// system calls, not the libc wrappers the interposer hooks.
///
/// Each M keeps its three files open at high numbers (`sys::dup_high`) and reads them
/// with pread at offset 0, which makes procfs generate them afresh: an open for each look
/// would take the lowest free fd number for a moment, every few milliseconds, under the
/// program's feet (`close(0); open(...)` expecting 0; a poll listing a number the program
/// just closed). A slot holds the thread id in the high half, the fd in the low one. A
/// looker that finds the M's slots busy (another looker) reads without caching.
pub(super) fn read_task_file(m: &M, tid: i32, file: TaskFile, buf: &mut [u8]) -> Option<usize> {
    if m.task_lock
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return read_task_file_once(tid, file, buf);
    }
    let slot = &m.task_fds[file as usize];
    let mut cached = slot.load(Ordering::Relaxed);
    if cached != NO_TASK_FD && (cached >> 32) as i32 != tid {
        // The M serves another thread now: the old file reads ESRCH; close it unless the
        // number was closed behind our back (then it may be the program's).
        let old = cached as u32 as i32;
        let mut b = [0u8; 1];
        if pread_fd(old, &mut b) == -(libc::ESRCH as isize) {
            // SAFETY: our own fd (it answers as a dead thread's task file).
            unsafe { libc::syscall(libc::SYS_close, old) };
        }
        slot.store(NO_TASK_FD, Ordering::Relaxed);
        cached = NO_TASK_FD;
    }
    if cached == NO_TASK_FD {
        match open_task_file(tid, file) {
            Some(fd) => {
                cached = (tid as u32 as u64) << 32 | fd as u32 as u64;
                slot.store(cached, Ordering::Relaxed);
            }
            None => {
                m.task_lock.store(false, Ordering::Release);
                return None;
            }
        }
    }
    let fd = cached as u32 as i32;
    let n = pread_fd(fd, buf);
    if n <= 0 {
        // The thread is gone (ESRCH: our fd, closed here), or the number was closed
        // behind our back (forgotten, never closed: it may be the program's now).
        if n == -(libc::ESRCH as isize) {
            // SAFETY: our own fd.
            unsafe { libc::syscall(libc::SYS_close, fd) };
        }
        slot.store(NO_TASK_FD, Ordering::Relaxed);
    }
    m.task_lock.store(false, Ordering::Release);
    (n > 0).then_some(n as usize)
}

/// pread(fd, buf, 0): the count, or -errno.
fn pread_fd(fd: i32, buf: &mut [u8]) -> isize {
    // SAFETY: a raw pread into a valid buffer.
    let n =
        unsafe { libc::syscall(libc::SYS_pread64, fd, buf.as_mut_ptr(), buf.len(), 0) } as isize;
    if n < 0 {
        -(crate::sys::errno() as isize)
    } else {
        n
    }
}

/// Opens `/proc/self/task/<tid><name>` read-only (raw openat); the fd, or -1.
fn open_task_path(tid: i32, file: TaskFile) -> i32 {
    let mut path = [0u8; 48];
    let msg = crate::sys::fmt_msg(
        &mut path,
        &[
            b"/proc/self/task/",
            &crate::sys::fmt_u64(tid as u64),
            file.name(),
        ],
    );
    // SAFETY: a raw openat of a NUL-terminated path.
    unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            msg.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        ) as i32
    }
}

/// Opens a task file and moves it to a high number.
fn open_task_file(tid: i32, file: TaskFile) -> Option<i32> {
    let fd = open_task_path(tid, file);
    if fd < 0 {
        return None;
    }
    let high = crate::sys::dup_high(fd);
    // SAFETY: our own fd, duplicated (or not) above.
    unsafe { libc::syscall(libc::SYS_close, fd) };
    (high >= 0).then_some(high)
}

/// `read_task_file` without the M's cache: open, read, close.
fn read_task_file_once(tid: i32, file: TaskFile, buf: &mut [u8]) -> Option<usize> {
    let fd = open_task_path(tid, file);
    if fd < 0 {
        return None;
    }
    let n = pread_fd(fd, buf);
    // SAFETY: our own fd.
    unsafe { libc::syscall(libc::SYS_close, fd) };
    (n > 0).then_some(n as usize)
}

/// Whether thread `tid` of this process is on a CPU or runnable ('R' in its stat), as
/// opposed to asleep in the kernel, where a signal would only interrupt its call.
fn thread_running(m: &M, tid: i32) -> bool {
    let mut buf = [0u8; 512];
    let Some(n) = read_task_file(m, tid, TaskFile::Stat, &mut buf) else {
        return false;
    };
    let s = &buf[..n];
    // "pid (comm) S ...": the state follows the last ')'.
    match s.iter().rposition(|&b| b == b')') {
        Some(i) if i + 2 < s.len() => s[i + 2] == b'R',
        _ => false,
    }
}

/// Whether thread `tid` (of M `m`) has not slept in the kernel since the last look (its
/// voluntary context switches did not change), and records this look. A signal that
/// reaches a thread inside a system call changes the call's outcome (a pipe write or a
/// MSG_WAITALL receive ends short, a nanosleep or poll returns EINTR): a thread seen
/// runnable at one instant may be about to sleep in the kernel again (woken by the same
/// event that woke sysmon), but one that has not slept since the last look, a few
/// milliseconds ago (`look`, halfway through the slice), is computing. The first look at
/// an M only records.
fn computing(m: &M, tid: i32) -> bool {
    let Some(n) = voluntary_switches(m, tid) else {
        return true;
    };
    let prev = m.vcsw_seen[0].swap(n, Ordering::Relaxed);
    let had = m.vcsw_seen[1].swap(1, Ordering::Relaxed);
    had != 0 && prev == n
}

/// Sysmon, halfway through a long slice on `p`: records its thread's voluntary context
/// switches for `preempt_m`'s look at the end of the slice.
pub(super) fn look(p: &P) {
    let m = p.m.load(Ordering::Acquire);
    if m.is_null() || !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: Ms are never freed.
    let m = unsafe { &*m };
    let tid = m.tid.load(Ordering::Relaxed);
    if tid != 0 {
        computing(m, tid);
    }
}

/// Thread `tid`'s voluntary context switches (its /proc status): how many times it slept.
fn voluntary_switches(m: &M, tid: i32) -> Option<u64> {
    let mut buf = [0u8; 2048];
    let n = read_task_file(m, tid, TaskFile::Status, &mut buf)?;
    const KEY: &[u8] = b"\nvoluntary_ctxt_switches:";
    let s = &buf[..n];
    let at = s.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let mut digits = s[at..]
        .iter()
        .skip_while(|b| b.is_ascii_whitespace())
        .take_while(|b| b.is_ascii_digit())
        .peekable();
    digits.peek()?;
    Some(digits.fold(0u64, |v, &d| {
        v.wrapping_mul(10).wrapping_add((d - b'0') as u64)
    }))
}

/// Asks the M running `p` to stop its goroutine now (Go's preemptM), for
/// `preemptone`: on sysmon's thread, or on an M without a P stepping in for an
/// overdue timer (then `refresh_ranges` may run on two threads at once: each publishes a
/// whole table of the same objects, and the tables are never freed).
pub(super) fn preempt_m(p: &P) {
    if !ENABLED.load(Ordering::Acquire) {
        return;
    }
    let m = p.m.load(Ordering::Acquire);
    if m.is_null() {
        return;
    }
    // SAFETY: Ms are never freed.
    let (tid, dead) = unsafe {
        (
            (*m).tid.load(Ordering::Relaxed),
            (*m).dead.load(Ordering::Relaxed),
        )
    };
    if tid == 0 || dead {
        return;
    }
    // SAFETY: Ms are never freed.
    let m = unsafe { &*m };
    if !handler_still_ours() {
        return;
    }
    match preemptsig::arm(m, tid, crate::sys::nanotime()) {
        preemptsig::Armed::Now => {
            SIGNALS.fetch_add(1, Ordering::Relaxed);
            return;
        }
        preemptsig::Armed::Already | preemptsig::Armed::Busy => return,
        preemptsig::Armed::Unavailable => {}
    }
    // No source that fires in user code only: signal now, if the thread looks as if it
    // computes (preemptsig.rs: the race this leaves).
    if !computing(m, tid) || !thread_running(m, tid) {
        SKIPPED_BLOCKED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if signal_m(tid, MAGIC) {
        SIGNALS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether our handler is on and still installed (then the signal's targets' code
/// ranges are fresh); turns preemption off for good when the program replaced it.
fn handler_still_ours() -> bool {
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

/// Sends SIGURG tagged `magic` to thread `tid` of this process, if preemption is on and
/// our handler is still installed. True if sent.
pub(super) fn signal_m(tid: i32, magic: usize) -> bool {
    if !handler_still_ours() {
        return false;
    }
    // SAFETY: a zeroed siginfo filled as rt_tgsigqueueinfo wants it; the target is a
    // thread of this process.
    unsafe {
        let mut si: libc::siginfo_t = core::mem::zeroed();
        let raw = &mut si as *mut libc::siginfo_t as *mut u8;
        // Layout of the queue variant: si_signo, si_errno, si_code, then pid, uid, value.
        *(raw as *mut i32) = libc::SIGURG;
        *(raw.add(8) as *mut i32) = libc::SI_QUEUE;
        *(raw.add(16) as *mut i32) = libc::getpid();
        *(raw.add(20) as *mut u32) = libc::getuid();
        *(raw.add(24) as *mut usize) = magic;
        libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            libc::getpid(),
            tid,
            libc::SIGURG,
            &mut si as *mut libc::siginfo_t,
        ) == 0
    }
}

/// The SIGURG handler (see the module doc). Async-signal-safe: atomics, the TLS slot, and
/// the interrupted context.
extern "C" fn on_sigurg(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: errno is this thread's; the handler must leave it as it found it.
    let saved_errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let (magic, queued) = unsafe {
        match (*info).si_code {
            libc::SI_QUEUE if (*info).si_pid() == libc::getpid() => {
                ((*info).si_value().sival_ptr as usize, true)
            }
            libc::SI_TIMER => ((*info).si_value().sival_ptr as usize, false),
            _ => (0, false),
        }
    };
    let m = getm();
    // SAFETY: a non-null TLS slot is this thread's M; info as above.
    let from_source = !m.is_null() && unsafe { preemptsig::is_ours(&*m, info, magic) };
    if from_source || (magic == MAGIC && queued) {
        // SAFETY: ctx is the interrupted context the kernel passes.
        unsafe { try_preempt(ctx as *mut libc::ucontext_t) };
    } else if magic == MAGIC {
        // A timer of ours whose thread is gone (its M has a new one): nobody's.
        REFUSED_STALE.fetch_add(1, Ordering::Relaxed);
    } else if magic == MAGIC_UNSEEN && queued {
        // SAFETY: a non-null TLS slot is this thread's M; ctx as above.
        if !m.is_null() && unsafe { unseen::divert(&*m, ctx as *mut libc::ucontext_t) } {
            DONE_UNSEEN.fetch_add(1, Ordering::Relaxed);
        }
    } else {
        forward(sig, info, ctx);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
}

/// Passes a SIGURG that is not ours to the program's own handler, if it had one.
fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: OLD_ACTION was written before our handler was installed and never since.
    #[allow(clippy::deref_addrof)]
    let old = unsafe { (*(&raw const OLD_ACTION)).assume_init_ref() };
    let h = old.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        return; // SIGURG's default is to ignore it
    }
    // SAFETY: the program installed this handler for SIGURG with these flags.
    unsafe {
        if old.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                core::mem::transmute(h);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(libc::c_int) = core::mem::transmute(h);
            f(sig);
        }
    }
}

/// Diverts the interrupted goroutine into the trampoline if this is a safe point.
///
/// # Safety
/// In the SIGURG handler, with the interrupted context.
unsafe fn try_preempt(uc: *mut libc::ucontext_t) {
    let m = getm();
    if m.is_null() {
        REFUSED_STALE.fetch_add(1, Ordering::Relaxed);
        return;
    }
    // SAFETY: m is this thread's M; the fields read here are written by this thread (which
    // the signal interrupted in user code) or are atomics.
    unsafe {
        let gp = (*m).curg.load(Ordering::Relaxed);
        let pp = (*m).p.load(Ordering::Relaxed);
        if gp.is_null()
            || pp.is_null()
            || (*gp).status.load(Ordering::Relaxed) != G_RUNNING
            || !(*pp).preempt.load(Ordering::Relaxed)
        {
            REFUSED_STALE.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let gregs = &mut (*uc).uc_mcontext.gregs;
        let pc = gregs[libc::REG_RIP as usize] as usize;
        let sp = gregs[libc::REG_RSP as usize] as usize;
        if excluded_pc(pc) {
            REFUSED_LIB.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if !room_on_stack(&*gp, sp) {
            // Not on its own stack (C code switched stacks), or too close to the guard.
            REFUSED_STACK.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let new_sp = sp - 128 - 8;
        *(new_sp as *mut usize) = pc;
        gregs[libc::REG_RSP as usize] = new_sp as i64;
        gregs[libc::REG_RIP as usize] = arch::async_preempt_entry() as i64;
    }
    DONE.fetch_add(1, Ordering::Relaxed);
}

/// Called by the trampoline, on the goroutine's stack in ordinary (not signal) context,
/// with every register saved: stop the goroutine here until it is scheduled again, on
/// this same thread.
extern "C" fn async_preempt_park() {
    // SAFETY: the trampoline runs on the goroutine the handler interrupted, on its M,
    // which holds a P (try_preempt checked).
    unsafe { park::gopreempt_bound(getm()) };
}

/// Asks the M running `p` to stop its goroutine (Go's preemptone): the mark
/// (`P::preempt`), honoured at the goroutine's next safe point or pass through the
/// scheduler, and the signal, for code that reaches no safe point (preempt.rs). By sysmon
/// at the end of a slice (`retake`), and by whoever steps in for a timer the P has left
/// due (`run_busy_overdue`).
pub(super) fn preemptone(p: &P) {
    if !p.preempt.swap(true, Ordering::Relaxed) {
        SCHED.preempt_requests.fetch_add(1, Ordering::Relaxed);
    }
    preempt_m(p);
}
