//! Thin wrappers over the kernel: futex (`futex.rs`), thread ids and threads
//! (`thread.rs`), time and pauses (`time.rs`), raw writes to stderr, and the two
//! futex-based primitives every scheduler thread uses: [`Note`] (Go's `note`, a one-shot
//! wake-up; `note.rs`) and [`Lock`] (Go's runtime `mutex`: spin briefly, then sleep on a
//! futex; `lock.rs`, its order in `lockrank.rs`, its fence pair in `membarrier.rs`); the
//! waits of threads that are not Ms (`foreign.rs`); `GMP_DEBUG` (`dbgvars.rs`); what the
//! dynamic loader knows of an address (`dl.rs`).
//!
//! Nothing here allocates or touches thread-local storage, but `foreign.rs`: these
//! functions run on goroutine stacks that migrate between threads, inside signal
//! handlers' callees, and on the scheduler's own stacks.

use core::sync::atomic::{AtomicU32, Ordering};
use core::time::Duration;

use crate::loom::AtomicWord;

pub(crate) mod dbgvars;
pub(crate) mod dl;
mod fmt;
mod lockrank;
pub use lockrank::Rank;
#[cfg(debug_assertions)]
pub(crate) use lockrank::{locks_add, locks_held, rank_acquire, rank_release};
pub mod real;
pub(crate) mod tsan;
pub(crate) use fmt::{fmt_msg, fmt_u64};

mod foreign;
pub mod futex;
mod lock;
mod note;
mod thread;
mod time;
pub use self::foreign::*;
pub use self::lock::*;
pub use self::note::*;
pub use self::thread::*;
pub use self::time::*;

/// A system call made by an instruction in libgmp's own code: returns rax (x0 on aarch64),
/// a negative errno on failure; errno is not touched.
///
/// # Safety
/// As the system call `nr` with these arguments.
#[inline]
pub unsafe fn raw_syscall6(nr: u64, a0: u64, a1: u64, a2: u64, a3: u64, a4: u64, a5: u64) -> u64 {
    let ret: u64;
    // SAFETY: caller contract; the kernel clobbers rcx and r11 only.
    #[cfg(target_arch = "x86_64")]
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
    // SAFETY: caller contract; the number in x8, the result in x0, nothing else changes.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        core::arch::asm!(
            "svc #0",
            in("x8") nr,
            inlateout("x0") a0 => ret,
            in("x1") a1,
            in("x2") a2,
            in("x3") a3,
            in("x4") a4,
            in("x5") a5,
            options(nostack),
        );
    }
    ret
}

#[cfg(target_arch = "aarch64")]
/// The address of the calling thread's instance of the initial-exec TLS symbol `$sym`:
/// the thread pointer (tpidr_el0) plus the offset the loader put in the symbol's GOT
/// entry. Non-`pure`: each use reads the thread pointer of the thread running it, also
/// after a switch moved the caller to another thread.
macro_rules! tls_addr {
    ($sym:literal) => {{
        let a: usize;
        // SAFETY: reads the thread pointer and the GOT entry the loader filled with the
        // symbol's offset from it (initial-exec); no other memory is touched. (Callers
        // inside an unsafe block of their own make this one redundant there.)
        #[allow(unused_unsafe)]
        unsafe {
            core::arch::asm!(
                "mrs {a}, tpidr_el0",
                concat!("adrp {t}, :gottprel:", $sym),
                concat!("ldr {t}, [{t}, #:gottprel_lo12:", $sym, "]"),
                "add {a}, {a}, {t}",
                a = out(reg) a,
                t = out(reg) _,
                options(nostack, readonly, preserves_flags),
            );
        }
        a
    }};
}
#[cfg(target_arch = "aarch64")]
pub(crate) use tls_addr;

/// Fills `buf` from our own memory at `addr` without faulting: `process_vm_readv` on our
/// own process, which answers EFAULT for an unmapped range instead of raising SIGSEGV.
/// False if any of it is not mapped. Async-signal-safe (two raw system calls, errno
/// untouched): the goroutine dump reads racy frame chains with it, and the profiling
/// signal's handler the interrupted thread's frames.
pub fn read_unfaulting(addr: usize, buf: &mut [u8]) -> bool {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: getpid has no arguments; process_vm_readv gets valid iovecs of the sizes
    // given (the remote one is checked by the kernel, which returns EFAULT instead of
    // faulting), and writes only `buf`.
    let n = unsafe {
        let pid = raw_syscall6(libc::SYS_getpid as u64, 0, 0, 0, 0, 0, 0);
        raw_syscall6(
            libc::SYS_process_vm_readv as u64,
            pid,
            &local as *const libc::iovec as u64,
            1,
            &remote as *const libc::iovec as u64,
            1,
            0,
        )
    };
    n == buf.len() as u64
}

pub mod membarrier;

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

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as usize } else { 4096 }
}

/// A flag on a cache line of its own, for a flag read on hot paths and written rarely
/// (`membarrier::ON`, `QUICK_OFF`): nothing written often may share its line.
#[repr(align(64))]
pub(crate) struct FlagLine(pub(crate) core::sync::atomic::AtomicBool);

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
