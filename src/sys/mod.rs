//! Thin wrappers over the kernel: futex, thread ids, raw writes to stderr, and the two
//! futex-based primitives every scheduler thread uses: [`Note`] (Go's `note`, a one-shot
//! wake-up) and [`Lock`] (Go's runtime `mutex`: spin briefly, then sleep on a futex).
//!
//! Nothing here allocates or touches thread-local storage: these functions run on
//! goroutine stacks that migrate between threads, inside signal handlers' callees, and
//! on the scheduler's own stacks.

use core::sync::atomic::{AtomicU32, Ordering};
use core::time::Duration;

use crate::loom::AtomicWord;

pub(crate) mod dbgvars;
mod fmt;
mod locks;
pub use locks::Rank;
#[cfg(debug_assertions)]
pub(crate) use locks::{locks_add, locks_held, rank_acquire, rank_release};
pub mod real;
pub(crate) mod tsan;
pub(crate) use fmt::{fmt_msg, fmt_u64};

pub mod futex {
    use super::*;

    /// Sleeps while `*word == val`, for at most `timeout`. Spurious wake-ups are allowed:
    /// the caller re-checks its condition.
    pub fn wait(word: &AtomicU32, val: u32, timeout: Option<Duration>) {
        let ts;
        let tsp = match timeout {
            Some(d) => {
                ts = libc::timespec {
                    tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
                    tv_nsec: d.subsec_nanos() as libc::c_long,
                };
                &ts as *const libc::timespec
            }
            None => core::ptr::null(),
        };
        // SAFETY: `word` is a live, aligned u32 for the duration of the call; FUTEX_WAIT only
        // reads it. A private futex suffices: every waiter is in this process. Made by
        // our own `syscall` instruction, not libc's `syscall()`: a thread asleep here is
        // in the runtime, which rt/unseen.rs tells from C code asleep in a pthread mutex
        // by the return address.
        unsafe {
            raw_syscall6(
                libc::SYS_futex as u64,
                word.as_ptr() as u64,
                (libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG) as u64,
                val as u64,
                tsp as u64,
                0,
                0,
            );
        }
    }

    /// Wakes at most `n` threads sleeping on `word`.
    pub fn wake(word: &AtomicU32, n: i32) {
        // SAFETY: FUTEX_WAKE does not dereference `word` beyond using its address as a key.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                n,
            );
        }
    }
}

/// A system call made by an instruction in libgmp's own code: returns rax (a negative
/// errno on failure; errno is not touched).
///
/// # Safety
/// As the system call `nr` with these arguments.
#[inline]
pub unsafe fn raw_syscall6(nr: u64, a0: u64, a1: u64, a2: u64, a3: u64, a4: u64, a5: u64) -> u64 {
    let ret: u64;
    // SAFETY: caller contract; the kernel clobbers rcx and r11 only.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr => ret,
            in("rdi") a0,
            in("rsi") a1,
            in("rdx") a2,
            in("r10") a3,
            in("r8") a4,
            in("r9") a5,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// The asymmetric fence pair behind [`Lock::unlock`] ("The asymmetric unlock" there):
/// `membarrier(2)`'s private expedited barrier on the rare side, a compiler barrier on the
/// hot one.
pub mod membarrier {
    use core::sync::atomic::{AtomicBool, Ordering};

    pub(super) const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    pub(super) const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    /// How long a sleeper waits before it looks at the lock again when the barrier is
    /// refused ([`heavy`]).
    pub const REFUSED_POLL: core::time::Duration = core::time::Duration::from_millis(1);

    /// Whether every `Lock` runs the asymmetric protocol. Decided once, when the library is
    /// loaded (`init`), before any thread can hold a lock; never changes after. Read by
    /// every unlock, so on a cache line of its own: the linker put it beside
    /// `FOREIGN_ACTS`, which a foreign thread bumps on every spawn and send.
    pub(super) static ON: super::FlagLine = super::FlagLine(AtomicBool::new(false));

    /// Runs `init` when the library is loaded (before `main` for a program linked with it
    /// or preloading it; at `dlopen` otherwise), while no runtime thread exists.
    #[used]
    #[unsafe(link_section = ".init_array")]
    static INIT_AT_LOAD: extern "C" fn() = init;

    /// Registers the process for private expedited barriers and turns the asymmetric
    /// unlock on, unless the kernel refuses (before Linux 4.14, a seccomp filter, valgrind)
    /// or `GMP_DEBUG` has `asymlock=0`; the locks then keep Go's exchange.
    extern "C" fn init() {
        #[cfg(debug_assertions)]
        if super::dbgvars::get(super::dbgvars::Var::Lockspin) == 0 {
            super::LOCK_SPIN_OFF.store(true, Ordering::Relaxed);
        }
        if super::dbgvars::get(super::dbgvars::Var::Asymlock) == 0 {
            return;
        }
        // SAFETY: membarrier takes no pointers; registration affects only this process.
        let r =
            unsafe { libc::syscall(libc::SYS_membarrier, CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) };
        if r == 0 {
            ON.0.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the asymmetric pair is in use (decided at load, never changes after): the
    /// light sides may then be compiler barriers, and every heavy side must be made.
    #[inline(always)]
    pub fn on() -> bool {
        ON.0.load(Ordering::Relaxed)
    }

    /// The heavy side: when it returns true, every thread of the process that was running
    /// has passed a full memory barrier, so a store another thread made before its light
    /// side is visible here, or that thread's load after its light side sees what we
    /// stored before this call. False if the kernel refused it after registration (a
    /// seccomp filter installed later): the caller must not rely on the pair, and a
    /// sleeping locker then re-checks every `REFUSED_POLL` (said once on stderr).
    pub fn heavy() -> bool {
        // SAFETY: as in `init`.
        let r = unsafe { libc::syscall(libc::SYS_membarrier, CMD_PRIVATE_EXPEDITED, 0, 0) };
        if r == 0 {
            return true;
        }
        static SAID: AtomicBool = AtomicBool::new(false);
        if !SAID.swap(true, Ordering::Relaxed) {
            super::write_stderr(
                b"gmp: membarrier(2) refused after registration (a seccomp filter?): \
                  contended runtime locks now re-check every millisecond\n",
            );
        }
        false
    }
}

/// The calling thread's kernel thread id.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// Writes all of `buf` to fd 2 with raw write(2): no allocation, no locks, no TLS, so it is
/// usable while the runtime is broken.
/// A close-on-exec duplicate of `fd` for the runtime's own use, at a high number where
/// there is room (three quarters of RLIMIT_NOFILE up), else the lowest free one; -errno
/// on failure (-EBADF: `fd` is not open). The runtime's fds stay out of the low numbers a
/// program reuses: `close(0); open(...)` expects 0, and a call that lists a number the
/// program closed must find it closed, not ours. Raw system calls.
pub fn dup_high(fd: i32) -> i32 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit into a valid struct.
    let min = if unsafe { libc::syscall(libc::SYS_getrlimit, libc::RLIMIT_NOFILE, &mut rl) } == 0 {
        rl.rlim_cur.min(1 << 20) / 4 * 3
    } else {
        0
    };
    // SAFETY: fcntl on a number of this process's table; fails if it is not open.
    let d = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, min) } as i32;
    if d >= 0 || errno() == libc::EBADF {
        return if d >= 0 { d } else { -libc::EBADF };
    }
    // SAFETY: as above (EMFILE or EINVAL up there: the lowest free number).
    let d = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, 0) } as i32;
    if d >= 0 { d } else { -errno() }
}

pub fn write_stderr(mut buf: &[u8]) {
    while !buf.is_empty() {
        // SAFETY: buf is a valid slice; write(2) reads at most buf.len() bytes.
        let n = unsafe { crate::sys::real::write(2, buf.as_ptr().cast(), buf.len()) };
        if n <= 0 {
            // EINTR: retry; anything else: nothing better to do with a diagnostic.
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            return;
        }
        buf = &buf[n as usize..];
    }
}

pub fn errno() -> i32 {
    // SAFETY: __errno_location always returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// Number of CPUs in the calling thread's affinity mask (at least 1).
pub fn affinity_cpus() -> usize {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills at most size_of::<cpu_set_t>().
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        if libc::sched_getaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            let n = libc::CPU_COUNT(&set);
            if n > 0 {
                return n as usize;
            }
        }
    }
    1
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as usize } else { 4096 }
}

/// Monotonic nanoseconds since an arbitrary origin.
pub fn nanotime() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Spins for as long as `n` pause instructions take on the machine the runtime's spin
/// constants were tuned on (Go's procyield, calibrated): `pauses(n)` pauses here.
#[inline]
pub fn procyield(n: u32) {
    for _ in 0..pauses(n) {
        core::hint::spin_loop();
    }
}

/// How long one pause instruction took, in picoseconds, on the machine where every spin
/// count of the runtime was tuned (a 2-vCPU AMD EPYC Zen 4 VM: 63-65 TSC cycles at 2.6
/// GHz). The latency of `pause` differs severalfold between CPU
/// families (~140 cycles on Skylake-derived Intel cores), so a count of pauses tuned on
/// one spins that much longer or shorter on another; [`calibrate_pause`] measures this
/// machine's and [`pauses`] converts.
const REF_PAUSE_PS: u64 = 25_000;

/// Pauses here per pause of the reference machine, in 1/256ths (256: the same latency).
/// Set once by [`calibrate_pause`] at start-up; until then 256.
static PAUSE_SCALE_Q8: AtomicU32 = AtomicU32::new(256);

/// The number of pause instructions that takes here as long as `n` took on the reference
/// machine (at least 1 when `n` is not 0).
#[inline(always)]
pub fn pauses(n: u32) -> u32 {
    let scaled = (n as u64 * PAUSE_SCALE_Q8.load(Ordering::Relaxed) as u64 + 128) >> 8;
    (scaled as u32).max(n.min(1))
}

/// The scale [`pauses`] uses for a machine whose pause takes `measured_ps` picoseconds,
/// in 1/256ths, clamped to [1/16, 16]: a measurement disturbed by the hypervisor (the
/// vCPU descheduled for a while) must not shrink the spins to nothing, nor a bogus tiny
/// one make them endless.
pub fn pause_scale_q8(measured_ps: u64) -> u32 {
    (REF_PAUSE_PS * 256 / measured_ps.max(1)).clamp(16, 4096) as u32
}

/// Measures how long a pause instruction takes on this machine (the fastest of five runs
/// of 200, ~25 µs in all) and sets the scale [`procyield`] and [`pauses`] use. Called
/// once at start-up.
pub fn calibrate_pause() {
    const N: u64 = 200;
    let mut best = i64::MAX;
    for _ in 0..5 {
        let t0 = nanotime();
        for _ in 0..N {
            core::hint::spin_loop();
        }
        best = best.min(nanotime() - t0);
    }
    let ps = best.max(1) as u64 * 1000 / N;
    PAUSE_SCALE_Q8.store(pause_scale_q8(ps), Ordering::Relaxed);
}

/// Gives up the CPU to another runnable thread (Go's osyield).
#[inline]
pub fn osyield() {
    // SAFETY: sched_yield has no preconditions.
    unsafe { libc::sched_yield() };
}

/// A futex word as [`Note`] and [`Lock`] use it: an `AtomicU32` with the kernel's futex in
/// the runtime, a model futex in the loom models (`loom_tests` below), so that a model runs
/// their own code, monomorphized, and not a copy of it.
pub trait FutexWord: AtomicWord<V = u32> {
    /// Polls of a sleeping [`Note`] before it enters the kernel.
    const NOTE_SPINS: u32 = NOTE_SPINS;
    /// Polls of a held [`Lock`] before its locker sleeps.
    const LOCK_SPINS: u32 = LOCK_SPINS;
    /// Sleeps while the word is `val`, for at most `timeout`. Spurious returns are allowed:
    /// the caller re-checks its condition.
    fn futex_wait(&self, val: u32, timeout: Option<Duration>);
    /// Wakes at most `n` threads sleeping on the word.
    fn futex_wake(&self, n: i32);
    /// The clock a timed wait's deadline is kept in ([`nanotime`]).
    fn now(&self) -> i64;
    /// Waits between two polls, `n` reference pauses long ([`procyield`]).
    fn pause(&self, n: u32);
    /// Whether [`Lock`] runs its asymmetric protocol (`membarrier::ON`).
    fn asymmetric(&self) -> bool;
    /// The light side of the asymmetric fence pair: a compiler barrier (the heavy side
    /// makes it a full one when it matters).
    fn light_fence(&self);
    /// The heavy side ([`membarrier::heavy`]); false if it could not be made.
    fn heavy_fence(&self) -> bool;
}

impl FutexWord for AtomicU32 {
    #[inline(always)]
    fn futex_wait(&self, val: u32, timeout: Option<Duration>) {
        futex::wait(self, val, timeout);
    }
    #[inline(always)]
    fn futex_wake(&self, n: i32) {
        futex::wake(self, n);
    }
    #[inline(always)]
    fn now(&self) -> i64 {
        nanotime()
    }
    #[inline(always)]
    fn pause(&self, n: u32) {
        procyield(n);
    }
    #[inline(always)]
    fn asymmetric(&self) -> bool {
        membarrier::ON.0.load(Ordering::Relaxed)
    }
    #[inline(always)]
    fn light_fence(&self) {
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
    }
    #[inline(always)]
    fn heavy_fence(&self) -> bool {
        membarrier::heavy()
    }
}

/// A one-shot wake-up, Go's `note`: one thread sleeps until another wakes it.
///
/// States of `key`: `CLEAR` (nobody woke it yet, sleeper not in the kernel), `SLEEPING`
/// (the sleeper is, or is about to be, in FUTEX_WAIT: the waker must FUTEX_WAKE), `WOKEN`.
/// The sleeper moves CLEAR → SLEEPING, and SLEEPING → CLEAR when its timed sleep gives up;
/// the waker moves CLEAR|SLEEPING → WOKEN and makes the syscall only when it saw SLEEPING
/// (a FUTEX_WAKE with no waiter is still a system call). `clear` (WOKEN → CLEAR) is done
/// by the sleeper after it wakes, before the note is reused. The loom models below run
/// this code over a model futex (`K`).
#[repr(transparent)]
pub struct Note<K = AtomicU32> {
    key: K,
}

const NOTE_CLEAR: u32 = 0;
const NOTE_WOKEN: u32 = 1;
const NOTE_SLEEPING: u32 = 2;

/// How long a sleeper polls before entering the kernel: 16 × 30 = 480 reference pauses
/// (`procyield`, calibrated), ~12 µs: a wake-up that lands in that window costs a fraction
/// of a microsecond instead of a futex wake across CPUs (several microseconds, longer when
/// the sleeper's CPU must leave an idle state); longer spins burn a core that an idle
/// machine should give back.
const NOTE_SPINS: u32 = 16;
const NOTE_SPIN_PAUSES: u32 = 30;

impl Note {
    pub const fn new() -> Note {
        Note {
            key: AtomicU32::new(NOTE_CLEAR),
        }
    }

    /// Whether a note key read from memory (`Note`'s only field, a u32) says the wake-up
    /// was issued (the deadlock detector reads a sleeper's note without a reference).
    pub fn key_is_woken(key: u32) -> bool {
        key == NOTE_WOKEN
    }

    /// `sleep_timeout` for a thread that is not an M (C main, a Python thread) waiting
    /// for a goroutine: spins only as `foreign_wait` decides.
    pub fn sleep_foreign(&self, timeout: Option<Duration>) -> bool {
        let woken = foreign_wait(
            timeout,
            |spin| self.spin_for(spin),
            |left| self.sleep_kernel(left),
        );
        if woken && tsan::on() {
            tsan::acquire(self as *const Note as usize);
        }
        woken
    }

    /// Polls for the wake-up for `ns` nanoseconds; returns whether it came.
    pub fn spin_for(&self, ns: i64) -> bool {
        let deadline = nanotime().saturating_add(ns);
        // A look at the key every pause (the wake-up is seen within ~20-140 cycles of
        // landing), at the clock every 32.
        let mut i = 0u32;
        loop {
            // load-acquire pairs with the swap in `wakeup`.
            if self.key.load(Ordering::Acquire) == NOTE_WOKEN {
                return true;
            }
            i = i.wrapping_add(1);
            if i.is_multiple_of(32) && nanotime() >= deadline {
                return false;
            }
            core::hint::spin_loop();
        }
    }
}

impl<K: FutexWord> Note<K> {
    /// Resets a woken note for its next use. Only the sleeper calls this.
    pub fn clear(&self) {
        self.key.store(NOTE_CLEAR, Ordering::Relaxed);
    }

    /// Wakes the sleeper (now or when it next sleeps). At most once per `clear`.
    pub fn wakeup(&self) {
        if tsan::on() {
            tsan::release(self as *const Note<K> as usize);
        }
        // acq-rel: release publishes what the waker wrote before (m.nextp, a readied G);
        // pairs with the acquire in `sleep`.
        match self.key.swap(NOTE_WOKEN, Ordering::AcqRel) {
            NOTE_CLEAR => {}
            NOTE_SLEEPING => self.key.futex_wake(1),
            _ => throw("notewakeup - double wakeup"),
        }
    }

    /// Sleeps until `wakeup`. Returns immediately if it already happened.
    pub fn sleep(&self) {
        self.sleep_timeout(None);
    }

    /// Sleeps until `wakeup` or until `timeout` passes; returns whether it was woken.
    pub fn sleep_timeout(&self, timeout: Option<Duration>) -> bool {
        let woken = self.spin() || self.sleep_kernel(timeout);
        if woken && tsan::on() {
            tsan::acquire(self as *const Note<K> as usize);
        }
        woken
    }

    /// The first phase of `sleep`: polls for the wake-up a few microseconds; returns
    /// whether it came.
    pub fn spin(&self) -> bool {
        for _ in 0..K::NOTE_SPINS {
            // load-acquire pairs with the swap in `wakeup`.
            if self.key.load(Ordering::Acquire) == NOTE_WOKEN {
                return true;
            }
            self.key.pause(NOTE_SPIN_PAUSES);
        }
        false
    }

    /// The second phase of `sleep_timeout`: sleeps in the kernel (no more spinning).
    pub fn sleep_kernel(&self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|d| {
            self.key
                .now()
                .saturating_add(d.as_nanos().min(i64::MAX as u128) as i64)
        });
        loop {
            // acquire (both outcomes): a WOKEN read here pairs with the swap in `wakeup`.
            match self.key.compare_exchange(
                NOTE_CLEAR,
                NOTE_SLEEPING,
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) | Err(NOTE_SLEEPING) => {}
                Err(_) => return true, // WOKEN
            }
            let left = match deadline {
                None => None,
                Some(dl) => {
                    let left = dl - self.key.now();
                    if left <= 0 {
                        // Withdraw: SLEEPING → CLEAR unless a waker got there first.
                        return self
                            .key
                            .compare_exchange(
                                NOTE_SLEEPING,
                                NOTE_CLEAR,
                                Ordering::Acquire,
                                Ordering::Acquire,
                            )
                            .is_err();
                    }
                    Some(Duration::from_nanos(left as u64))
                }
            };
            self.key.futex_wait(NOTE_SLEEPING, left);
            if self.key.load(Ordering::Acquire) == NOTE_WOKEN {
                return true;
            }
        }
    }
}

impl Default for Note {
    fn default() -> Self {
        Note::new()
    }
}

/// Starts moving the cache lines of `[lo, hi)` into this CPU's caches (a hint: it changes
/// no state, and an address that is not mapped is ignored by the CPU).
#[inline(always)]
pub fn prefetch_range(lo: usize, hi: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let mut a = lo & !63;
        while a < hi {
            // SAFETY: PREFETCHT0 never faults and has no architectural effect.
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                    a as *const i8,
                )
            };
            a += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (lo, hi);
}

/// Set, never cleared, when the C entries' quick paths (`ffi::chan`'s leaf send and
/// receive) must not run: in a child forked after the runtime started (every entry must
/// abort there, `rt::os_linux`) and once TSan's hooks are on (`tsan::enable`; the quick
/// paths do not call them). One byte for both, so that a quick path tests one flag.
/// On a line of its own: every quick operation reads it, and it is written once.
static QUICK_OFF: FlagLine = FlagLine(core::sync::atomic::AtomicBool::new(false));

/// A flag on a cache line of its own, for a flag read on hot paths and written rarely
/// (`membarrier::ON`, `QUICK_OFF`): nothing written often may share its line.
#[repr(align(64))]
pub(crate) struct FlagLine(pub(crate) core::sync::atomic::AtomicBool);

/// Whether the C entries' quick paths are off (see `QUICK_OFF`).
#[inline(always)]
pub(crate) fn quick_off() -> bool {
    QUICK_OFF.0.load(Ordering::Relaxed)
}

/// Turns the quick paths off for good (async-signal-safe: one store).
pub(crate) fn set_quick_off() {
    QUICK_OFF.0.store(true, Ordering::Relaxed);
}

/// How long a thread that is not an M (C main) spins before sleeping, and how long an
/// idle M waits, spinning, for such a thread's next hand-off (`foreign::spin_for_foreign`):
/// about two wake-ups of an idle vCPU (each takes microseconds, more in a VM). In time,
/// not in pause instructions, whose length differs tenfold between CPU families.
pub(crate) const FOREIGN_SPIN_NS: i64 = 20_000;

/// Whether foreign waits and idle Ms may spin for each other (set at start-up: the
/// machine has at least two CPUs).
pub(crate) static FOREIGN_SPIN: core::sync::atomic::AtomicBool =
    core::sync::atomic::AtomicBool::new(false);

/// When a thread that is not an M last began or ended a wait on goroutines, or handed
/// one work in a quick exchange (`nanotime`): an M going idle within
/// `FOREIGN_RECENT_NS` of it waits for the next hand-off (`foreign::spin_for_foreign`).
pub(crate) static FOREIGN_LAST_NS: core::sync::atomic::AtomicI64 =
    core::sync::atomic::AtomicI64::new(i64::MIN / 2);

/// See `FOREIGN_LAST_NS`.
pub(crate) const FOREIGN_RECENT_NS: i64 = 50_000;

/// Hand-offs and waits of threads that are not Ms: bumped at each foreign wait
/// (`foreign_wait`) and when one in a quick exchange readies or spawns a goroutine
/// (`ready::ready_put`). An M going idle that sees it moved stays awake a moment for the
/// next one (`foreign::spin_for_foreign`). No clock read: a hand-off in an exchange pays one
/// relaxed RMW; a spawn outside one pays nothing.
pub(crate) static FOREIGN_ACTS: core::sync::atomic::AtomicU64 =
    core::sync::atomic::AtomicU64::new(0);

/// Records a hand-off or a wait of a thread that is not an M (`FOREIGN_ACTS`).
#[inline]
pub(crate) fn foreign_act() {
    FOREIGN_ACTS.fetch_add(1, Ordering::Relaxed);
}

/// A foreign wait shorter than this makes the thread's next wait spin first.
const FOREIGN_QUICK_NS: i64 = 50_000;

thread_local! {
    /// Whether this (foreign) thread's last wait was quick: it is in an exchange with
    /// goroutines, whose answers come within microseconds.
    static FOREIGN_QUICK: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Whether this thread's last foreign wait was quick (it is in an exchange with
/// goroutines) and spinning is allowed.
pub fn foreign_quick() -> bool {
    FOREIGN_SPIN.load(Ordering::Relaxed) && FOREIGN_QUICK.with(|q| q.get())
}

/// A wait of a thread that is not an M, adaptively: it spins first (`spin(ns)`, true when
/// the wake-up came) only when its previous wait was quick, then sleeps (`sleep(left)`,
/// whether woken before `left` passed). A thread in a ping-pong with a goroutine then
/// answers within the spin and its partner's M, spinning for it too, takes the next
/// message without a wake-up on either side; a thread that waits long (a WaitGroup over
/// the whole program) sleeps at once. Spinning unconditionally is slower on a 2-CPU
/// machine (`scripts/ab.sh -p 2 -a "-shape 1" pingpong`): the kernel places the
/// goroutine's woken M on the spinning thread's CPU.
pub fn foreign_wait(
    timeout: Option<Duration>,
    spin: impl FnOnce(i64) -> bool,
    sleep: impl FnOnce(Option<Duration>) -> bool,
) -> bool {
    foreign_act();
    let start = nanotime();
    FOREIGN_LAST_NS.store(start, Ordering::Relaxed);
    let woken = if foreign_quick() {
        let max = timeout.map_or(FOREIGN_SPIN_NS, |t| {
            t.as_nanos().min(FOREIGN_SPIN_NS as u128) as i64
        });
        spin(max) || {
            let left = timeout.map(|t| t.saturating_sub(Duration::from_nanos(max as u64)));
            sleep(left)
        }
    } else {
        sleep(timeout)
    };
    let end = nanotime();
    FOREIGN_LAST_NS.store(end, Ordering::Relaxed);
    FOREIGN_QUICK.with(|q| q.set(woken && end - start < FOREIGN_QUICK_NS));
    woken
}

/// A mutual-exclusion lock for runtime data, Go's runtime `mutex`: a few rounds of spinning,
/// then sleeping on a futex. Unlike `std::sync::Mutex` it has explicit `lock`/`unlock`, so a
/// lock taken on a goroutine's stack can be released by `gopark`'s unlock function on the
/// scheduler stack. The loom models below run this code over a model futex (`W`).
///
/// Never held across a goroutine switch: the M that takes it releases it before it switches.
///
/// # Two protocols, chosen once per process
/// - **Go's** (Drepper's "mutex 2"), when `membarrier(2)` is not available: `state` is 0
///   unlocked, 1 locked, 2 locked with sleepers. A locker that gives up spinning swaps in
///   2 and sleeps while it reads back anything but 0; `unlock` swaps in 0 and wakes one
///   sleeper if it read 2. Two locked instructions per lock and unlock.
/// - **The asymmetric unlock** (the default): `state` is 0 or 1 and only the holder
///   writes it while it is held; sleepers count themselves in `sleepers`. `unlock` is a
///   plain release store of 0, a compiler barrier, and a plain load of `sleepers`, with a
///   FUTEX_WAKE if it is not 0: one locked instruction per lock and unlock (a locked
///   instruction costs several nanoseconds, a large share of a buffered channel operation
///   that takes the lock: `cargo bench --bench internals chan_send_recv_buffered`). A
///   sleeper adds itself to
///   `sleepers`, then before every futex sleep makes the heavy barrier
///   ([`membarrier::heavy`]) and tries the lock once more; the futex sleeps only while
///   `state` is still 1. This is Dekker's pair with the fence moved to one side: the
///   unlocker stores `state` then loads `sleepers`, the sleeper stores `sleepers` then
///   loads `state`, and the heavy barrier orders the unlocker's two accesses as a full
///   fence would (it interrupts every running thread of the process and makes each pass
///   a full barrier: whichever side of that barrier the unlocker's load is on, either it
///   sees the sleeper, or the sleeper's load sees the store). Without the heavy barrier
///   the unlocker's load may pass its store and both miss each other (loom
///   `lock_broken_asymmetric_without_heavy_fence`). A sleep costs the barrier on top of
///   the futex (a system call, microseconds with other CPUs to interrupt); spinning wins
///   almost always. Should the kernel refuse the barrier after registration (a seccomp
///   filter installed later), a sleeper sleeps at most `membarrier::REFUSED_POLL` at a
///   time and looks again, so a missed wake-up costs a millisecond, not a hang (loom
///   `lock_asymmetric_refused_barrier_polls`).
pub struct Lock<W = AtomicU32> {
    state: W,
    /// Lockers asleep or about to sleep (asymmetric protocol only).
    sleepers: W,
    /// Its place in the lock order, which debug builds check ([`Rank`]).
    #[cfg(debug_assertions)]
    rank: Rank,
}

/// Polls of a held lock before sleeping, with 1, 2, 4 … up to 64 reference pauses between
/// polls (`procyield`, calibrated): ~6,000 pauses, ~150 µs in all. The scheduler's
/// critical sections last tens of nanoseconds and the holder is running on another CPU, so
/// spinning almost always wins; sleeping marks the lock contended, after which every
/// unlock pays a FUTEX_WAKE system call until it drains.
const LOCK_SPINS: u32 = 100;
const LOCK_MAX_PAUSES: u32 = 64;

/// Test hook, debug builds only: `GMP_DEBUG=lockspin=0` makes every contended lock sleep
/// at once instead of spinning first, so that a test drives every contention through the
/// sleeping path (the asymmetric protocol's barrier and sleeper count). Set when the
/// library is loaded (`membarrier::init`).
#[cfg(debug_assertions)]
static LOCK_SPIN_OFF: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Polls of a held lock before its locker sleeps: `W::LOCK_SPINS`, or none with the test
/// hook above.
#[inline(always)]
fn lock_spins<W: FutexWord>() -> u32 {
    #[cfg(debug_assertions)]
    if LOCK_SPIN_OFF.load(Ordering::Relaxed) {
        return 0;
    }
    W::LOCK_SPINS
}

impl Lock {
    /// A free lock of rank `rank` in the lock order.
    #[cfg_attr(not(debug_assertions), allow(unused_variables))]
    pub const fn new(rank: Rank) -> Lock {
        Lock {
            state: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            #[cfg(debug_assertions)]
            rank,
        }
    }
}

impl<W: FutexWord> Lock<W> {
    #[inline]
    pub fn lock(&self) {
        // Debug builds: check the lock order and count what this thread holds (no lock
        // crosses a goroutine switch).
        #[cfg(debug_assertions)]
        {
            rank_acquire(self.rank);
            locks_add(1);
        }
        // acquire: pairs with the release in `unlock`, so the holder sees the previous
        // holder's writes.
        if self
            .state
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
    }

    #[cold]
    fn lock_slow(&self) {
        // Exponential backoff between polls: a fixed short pause lets the releasing CPU,
        // which still owns the cache line, take the lock back again and again while the
        // others hammer the line (chan_mpmc at GOMAXPROCS=2 is the case that shows it:
        // `scripts/ab.sh -p 2 chan_mpmc`).
        let mut pauses = 1;
        for _ in 0..lock_spins::<W>() {
            // Poll with plain loads (the cache line stays shared) and try only when free.
            // Go's protocol: taking it as 1 while sleepers exist is fine: the unlock that
            // freed it woke one of them, which marks the lock contended (2) again before
            // sleeping.
            if self.state.load(Ordering::Relaxed) == 0
                && self
                    .state
                    .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            self.state.pause(pauses);
            pauses = (pauses * 2).min(LOCK_MAX_PAUSES);
        }
        if self.state.asymmetric() {
            self.lock_sleep_asymmetric();
            return;
        }
        // From here on we announce a sleeper (2) whenever we take the lock, so that our
        // unlock wakes whoever queued behind us.
        while self.state.swap(2, Ordering::Acquire) != 0 {
            self.state.futex_wait(2, None);
        }
    }

    /// The sleeping half of `lock_slow` in the asymmetric protocol (see the type's doc).
    fn lock_sleep_asymmetric(&self) {
        // relaxed: the heavy barrier below orders it before our look at `state`.
        self.sleepers.fetch_add(1, Ordering::Relaxed);
        loop {
            let fenced = self.state.heavy_fence();
            if self
                .state
                .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                break;
            }
            // Without the barrier an unlock may miss us: sleep a bounded time only.
            let timeout = (!fenced).then_some(membarrier::REFUSED_POLL);
            self.state.futex_wait(1, timeout);
        }
        self.sleepers.fetch_add(u32::MAX, Ordering::Relaxed);
    }

    #[inline]
    pub fn unlock(&self) {
        #[cfg(debug_assertions)]
        {
            rank_release(self.rank);
            locks_add(-1);
        }
        if self.state.asymmetric() {
            // Only the holder writes `state` while it is held, so it reads back its own 1.
            if self.state.load(Ordering::Relaxed) != 1 {
                throw("unlock of unlocked lock");
            }
            // release: publishes the critical section; pairs with the acquire in `lock`.
            self.state.store(0, Ordering::Release);
            self.state.light_fence();
            if self.sleepers.load(Ordering::Relaxed) != 0 {
                self.state.futex_wake(1);
            }
            return;
        }
        // release: publishes the critical section; pairs with the acquire in `lock`.
        match self.state.swap(0, Ordering::Release) {
            1 => {}
            2 => self.state.futex_wake(1),
            _ => throw("unlock of unlocked lock"),
        }
    }
}

/// The entry function of a thread started by [`spawn_detached`].
pub(crate) type ThreadEntry = extern "C" fn(*mut libc::c_void) -> *mut libc::c_void;

/// Starts a detached OS thread running `entry(arg)` on a `stack`-byte stack (the runtime's
/// Ms, sysmon, the template thread). Aborts with a `gmp:` message naming `who` if the size
/// is refused — pthread would silently give the default 8 MiB stack instead — or if the
/// thread cannot be created.
pub(crate) fn spawn_detached(who: &str, stack: usize, entry: ThreadEntry, arg: *mut libc::c_void) {
    let mut buf = [0u8; 128];
    // SAFETY: plain pthread calls on a zeroed attr, destroyed before we return; `arg` is
    // the caller's to hand over.
    unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        if libc::pthread_attr_setstacksize(&mut attr, stack) != 0 {
            let msg = fmt_msg(
                &mut buf,
                &[
                    who.as_bytes(),
                    b": pthread_attr_setstacksize refused the stack size",
                ],
            );
            throw(core::str::from_utf8(msg).unwrap_or("pthread_attr_setstacksize refused"));
        }
        libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
        let mut tid: libc::pthread_t = 0;
        let rc = libc::pthread_create(&mut tid, &attr, entry, arg);
        libc::pthread_attr_destroy(&mut attr);
        if rc != 0 {
            let msg = fmt_msg(
                &mut buf,
                &[
                    who.as_bytes(),
                    b": failed to create an OS thread (pthread_create)",
                ],
            );
            throw(core::str::from_utf8(msg).unwrap_or("pthread_create failed"));
        }
    }
}

/// A broken invariant: prints `gmp: <msg>` to stderr and aborts (Go's `throw`). It lives
/// at the bottom layer so that every layer can abort with a message.
#[cold]
#[inline(never)]
pub fn throw(msg: &str) -> ! {
    write_stderr(b"gmp: ");
    write_stderr(msg.as_bytes());
    write_stderr(b"\n");
    // SAFETY: abort has no preconditions.
    unsafe { libc::abort() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// The scale is the inverse ratio of pause latencies, clamped to [1/16, 16].
    #[test]
    fn pause_scale_inverts_and_clamps() {
        assert_eq!(pause_scale_q8(REF_PAUSE_PS), 256);
        assert_eq!(pause_scale_q8(2 * REF_PAUSE_PS), 128); // a slower pause: half as many
        assert_eq!(pause_scale_q8(REF_PAUSE_PS / 4), 1024);
        assert_eq!(pause_scale_q8(1), 4096);
        assert_eq!(pause_scale_q8(0), 4096);
        assert_eq!(pause_scale_q8(u64::MAX / 512), 16);
    }

    /// After calibration, a spin lasts about what it lasted on the reference machine:
    /// 1,000 reference pauses are 25 µs, here within [0.5, 2]x (the fastest of 7 runs, so
    /// that a descheduled vCPU does not count). Uncalibrated on a CPU whose pause is
    /// ~140 cycles (Skylake-derived Intel), the same count spins ~50-70 µs.
    #[test]
    fn calibrated_spin_lasts_the_reference_time() {
        calibrate_pause();
        let best = (0..7)
            .map(|_| {
                let t0 = nanotime();
                procyield(1000);
                nanotime() - t0
            })
            .min()
            .unwrap();
        let want = 1000 * REF_PAUSE_PS as i64 / 1000;
        assert!(
            best >= want / 2 && best <= want * 2,
            "1000 reference pauses took {best} ns, want ~{want} (scale {}/256)",
            PAUSE_SCALE_Q8.load(Ordering::Relaxed)
        );
    }

    /// Invariant 8's bookkeeping: each held runtime lock counts on its thread only.
    #[cfg(debug_assertions)]
    #[test]
    fn held_locks_are_counted_per_thread() {
        let (a, b) = (Lock::new(Rank::Sched), Lock::new(Rank::Gfree));
        let base = locks_held();
        a.lock();
        b.lock();
        assert_eq!(locks_held(), base + 2);
        std::thread::scope(|s| {
            s.spawn(|| assert_eq!(locks_held(), 0));
        });
        b.unlock();
        a.unlock();
        assert_eq!(locks_held(), base);
    }

    #[test]
    fn note_wakes_sleeper() {
        let n = Arc::new(Note::new());
        let n2 = n.clone();
        let t = std::thread::spawn(move || {
            n2.sleep();
        });
        std::thread::sleep(Duration::from_millis(20));
        n.wakeup();
        t.join().unwrap();
    }

    #[test]
    fn note_times_out() {
        let n = Note::new();
        let t0 = nanotime();
        assert!(!n.sleep_timeout(Some(Duration::from_millis(20))));
        assert!(nanotime() - t0 >= 20_000_000);
        n.wakeup();
        assert!(n.sleep_timeout(Some(Duration::from_millis(20))));
    }

    /// The asymmetric unlock is on wherever the kernel lets the process register for
    /// private expedited barriers (unless `GMP_DEBUG` says `asymlock=0`): the constructor
    /// ran, and decided as the kernel answers.
    #[test]
    fn asymmetric_lock_follows_the_kernel() {
        let off = dbgvars::get(dbgvars::Var::Asymlock) == 0;
        // SAFETY: membarrier takes no pointers; registering again is harmless.
        let kernel = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                membarrier::CMD_REGISTER_PRIVATE_EXPEDITED,
                0,
                0,
            )
        } == 0;
        assert_eq!(membarrier::ON.0.load(Ordering::Relaxed), kernel && !off);
    }

    /// Holders that keep the lock long enough for every other locker to give up spinning
    /// and sleep: each unlock must wake a sleeper (a lost wake-up leaves one asleep while
    /// the lock is free, and the watchdog fails the test).
    #[test]
    fn lock_sleepers_are_woken() {
        struct Shared(Lock, core::cell::UnsafeCell<u64>);
        // SAFETY: the u64 is only touched under the lock.
        unsafe impl Sync for Shared {}
        let s = Arc::new(Shared(
            Lock::new(Rank::Sched),
            core::cell::UnsafeCell::new(0),
        ));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        for _ in 0..4 {
            let (s, done_tx) = (s.clone(), done_tx.clone());
            std::thread::spawn(move || {
                for _ in 0..100 {
                    s.0.lock();
                    // SAFETY: we hold the lock.
                    unsafe { *s.1.get() += 1 };
                    // Longer than a locker spins (~150 µs): the others sleep.
                    std::thread::sleep(Duration::from_micros(400));
                    s.0.unlock();
                }
                done_tx.send(()).unwrap();
            });
        }
        for _ in 0..4 {
            done_rx
                .recv_timeout(Duration::from_secs(60))
                .expect("a locker never got the lock: lost wake-up");
        }
        // SAFETY: all lockers are done.
        assert_eq!(unsafe { *s.1.get() }, 400);
        assert_eq!(s.0.sleepers.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn lock_excludes() {
        struct Shared(Lock, core::cell::UnsafeCell<u64>);
        // SAFETY: the u64 is only touched under the lock.
        unsafe impl Sync for Shared {}
        let s = Arc::new(Shared(
            Lock::new(Rank::Sched),
            core::cell::UnsafeCell::new(0),
        ));
        let ts: Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for _ in 0..100_000 {
                        s.0.lock();
                        // SAFETY: we hold the lock.
                        unsafe { *s.1.get() += 1 };
                        s.0.unlock();
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        // SAFETY: all threads have joined.
        assert_eq!(unsafe { *s.1.get() }, 400_000);
    }
}

/// The model futex of the loom models (`crate::loom::futex`) as a futex word, and the
/// note the models build on it.
#[cfg(all(test, loom))]
pub(crate) mod loom_futex {
    use super::*;
    pub(crate) use crate::loom::futex::{Heavy, ModelFutex};

    impl<const SPINS: u32> FutexWord for ModelFutex<SPINS> {
        const NOTE_SPINS: u32 = SPINS;
        const LOCK_SPINS: u32 = SPINS;

        fn futex_wait(&self, val: u32, timeout: Option<Duration>) {
            ModelFutex::futex_wait(self, val, timeout)
        }
        fn futex_wake(&self, n: i32) {
            ModelFutex::futex_wake(self, n)
        }
        fn now(&self) -> i64 {
            ModelFutex::now(self)
        }
        fn pause(&self, n: u32) {
            ModelFutex::pause(self, n)
        }
        fn asymmetric(&self) -> bool {
            ModelFutex::asymmetric(self)
        }
        fn light_fence(&self) {
            ModelFutex::light_fence(self)
        }
        fn heavy_fence(&self) -> bool {
            ModelFutex::heavy_fence(self)
        }
    }

    /// A note over the model futex that polls once before it sleeps.
    pub(crate) type ModelNote = Note<ModelFutex<1>>;

    pub(crate) fn model_note() -> ModelNote {
        Note {
            key: ModelFutex::new(NOTE_CLEAR),
        }
    }
}

/// Loom models of [`Note`] and [`Lock`], run over a model futex (`tests/loom.rs` runs them
/// from `cargo test`). Each keeps the data its protocol publishes in a loom `UnsafeCell`,
/// so a wake-up or a lock hand-over that does not order the two sides fails as a data
/// race; a lost wake-up leaves every thread waiting, which loom reports as a deadlock.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::loom_futex::{Heavy, ModelFutex, model_note};
    use super::*;
    use crate::loom::cell::UnsafeCell;
    use crate::loom::model;
    use crate::loom::sync::Arc;

    /// A sleeper and a waker in every order: the sleeper returns (polling, or woken from
    /// the futex), sees what the waker wrote before `wakeup`, and the waker made at most
    /// one FUTEX_WAKE. Then the note is cleared and used again.
    #[test]
    fn note_wakeup_reaches_sleeper() {
        model(|| {
            let note = Arc::new(model_note());
            let data = Arc::new(UnsafeCell::new(0u32));
            for round in 1..=2u32 {
                let waker = {
                    let (note, data) = (note.clone(), data.clone());
                    crate::loom::thread::spawn(move || {
                        // SAFETY: the sleeper reads it only after `wakeup` ordered it.
                        data.with_mut(|p| unsafe { *p = round });
                        note.wakeup();
                    })
                };
                note.sleep();
                // SAFETY: `sleep` returned: the waker's write happened before.
                assert_eq!(data.with(|p| unsafe { *p }), round);
                waker.join().unwrap();
                assert_eq!(note.key.load(Ordering::Relaxed), NOTE_WOKEN);
                assert!(note.key.wakes.swap(0, std::sync::atomic::Ordering::Relaxed) <= 1);
                note.clear();
            }
        });
    }

    /// A timed sleep against a waker: when it says woken, the waker's write is visible;
    /// when it gives up, it left no SLEEPING behind (the waker's swap is the last word,
    /// WOKEN), and a FUTEX_WAKE was made only if the key said SLEEPING at the swap.
    #[test]
    fn note_timed_sleep_wakes_or_withdraws() {
        model(|| {
            let note = Arc::new(model_note());
            let data = Arc::new(UnsafeCell::new(0u32));
            let waker = {
                let (note, data) = (note.clone(), data.clone());
                crate::loom::thread::spawn(move || {
                    // SAFETY: read by the sleeper only once `wakeup` ordered it.
                    data.with_mut(|p| unsafe { *p = 1 });
                    note.wakeup();
                })
            };
            if note.sleep_timeout(Some(Duration::from_millis(1))) {
                // SAFETY: woken: the waker's write happened before.
                assert_eq!(data.with(|p| unsafe { *p }), 1);
            }
            waker.join().unwrap();
            assert_eq!(note.key.load(Ordering::Relaxed), NOTE_WOKEN);
            assert!(note.key.wakes.load(std::sync::atomic::Ordering::Relaxed) <= 1);
        });
    }

    type ModelLock = Lock<ModelFutex<1>>;

    /// Three lockers, each twice (one poll, then the futex path), with Go's protocol or
    /// the asymmetric one (`heavy`: what its heavy barrier does): every critical
    /// section follows the previous one (a shared counter in an `UnsafeCell`), every
    /// sleeper is woken, and the lock ends free with no sleeper left.
    fn lock_model(asym: bool, heavy: Heavy) {
        lock_model_n(asym, heavy, 3);
    }

    /// `lock_model` with `lockers` lockers.
    fn lock_model_n(asym: bool, heavy: Heavy, lockers: u32) {
        model(move || {
            let word = |v| {
                let mut w = ModelFutex::new(v);
                w.asym = asym;
                w.heavy = heavy;
                w
            };
            let lock = Arc::new(ModelLock {
                state: word(0),
                sleepers: word(0),
                #[cfg(debug_assertions)]
                rank: Rank::Sched,
            });
            if heavy != Heavy::Fence {
                // Without the fence a lost sleeper must fail by name (polling sleepers make
                // too many branches for the fenced forms, whose sleepers block).
                lock.state
                    .lockers
                    .store(lockers, std::sync::atomic::Ordering::Relaxed);
            }
            let count = Arc::new(UnsafeCell::new(0u32));
            let locker = |lock: Arc<ModelLock>, count: Arc<UnsafeCell<u32>>| {
                move || {
                    for _ in 0..2 {
                        lock.lock();
                        // SAFETY: the lock is held.
                        count.with_mut(|p| unsafe { *p += 1 });
                        lock.unlock();
                    }
                    lock.state
                        .lockers
                        .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                }
            };
            let others: Vec<_> = (1..lockers)
                .map(|_| crate::loom::thread::spawn(locker(lock.clone(), count.clone())))
                .collect();
            locker(lock.clone(), count.clone())();
            for t in others {
                t.join().unwrap();
            }
            // SAFETY: every locker has been joined.
            assert_eq!(count.with(|p| unsafe { *p }), 2 * lockers);
            assert_eq!(lock.state.load(Ordering::Relaxed), 0);
            assert_eq!(lock.sleepers.load(Ordering::Relaxed), 0);
        });
    }

    #[test]
    fn lock_excludes_and_wakes() {
        lock_model(false, Heavy::Fence);
    }

    /// The asymmetric unlock (a plain store, then a look at `sleepers`).
    #[test]
    fn lock_asymmetric_excludes_and_wakes() {
        lock_model(true, Heavy::Fence);
    }

    /// The barrier refused after registration (a seccomp filter installed later): sleepers
    /// poll with timed waits, so every locker still gets the lock. Two lockers: a poll
    /// loop multiplies loom's branches.
    #[test]
    fn lock_asymmetric_refused_barrier_polls() {
        lock_model_n(true, Heavy::Refused, 2);
    }

    /// Without the heavy barrier the unlocker's look at `sleepers` and the sleeper's at
    /// `state` can both miss: a sleeper is never woken.
    #[test]
    #[should_panic(expected = "lost wake-up")]
    fn lock_broken_asymmetric_without_heavy_fence() {
        lock_model(true, Heavy::Missing);
    }
}
