//! Loom model of the CPU profile's timer arming (sigprof.rs's module doc, "Arming"): a
//! profile's start and stop against an M's new thread arming itself.
//!
//! This is a **model**, not the real code: `enable`, `disable` and `minit` walk `allm`,
//! create and delete POSIX timers and read the thread id of a real thread, which loom
//! cannot run. The model keeps one M's words (`M::tid`, `M::dead`, `M::proftimer`) and
//! `EPOCH`, and the order of every access to them, with loom's atomics in place of the
//! real ones:
//!
//! - `enable(epoch)`: store `EPOCH`, the StoreLoad barrier, load the M's `tid` (and
//!   `dead`); if the M has a live thread, `arm` it;
//! - `disable`: store `EPOCH` = 0, the barrier, `disarm` the M (swap `proftimer` to 0 and
//!   delete what was there);
//! - the M's new thread (`mstart`): store its `tid`, then `minit`: the barrier, load
//!   `EPOCH`; if a profile runs, `arm`; if none runs, delete the timer of the thread the M
//!   had before — a word whose tid (bits 32..64) is not this thread's, taken with a CAS —
//!   and leave alone a timer of this thread, which is a racing `arm`'s to keep or take
//!   back;
//! - `arm(tid, epoch)`: create a timer, swap its word `tid << 32 | (timer id + 1)` into
//!   `proftimer`, delete the word it replaced, then, if `EPOCH` is no longer `epoch`, take
//!   its own word back with a CAS and delete it (a failed CAS: whoever replaced the word
//!   makes this check itself), and if a newer profile runs, arm again for it.
//!
//! The kernel's timers are a small table of ids, each with its thread and a "deleted"
//! flag. They are plain atomics, not loom's: the table is not one of the protocol's words
//! (its accesses are system calls): a timer is created before its word is published and
//! deleted only after an access to `proftimer` took its word, and no outcome depends on
//! the order in which two threads reach the table (ids handed out in either order give
//! the same executions, and a timer deleted twice is caught in either order), so its
//! accesses are no scheduling points.
//! Left out: the sampling period (a Relaxed word the protocol does not order), a
//! `timer_create` that fails (`arm` then returns before touching `proftimer`), every M but
//! one, and the signal handler.
//!
//! The claims, checked when every thread has finished: every timer deleted was created and
//! is deleted once; if a profile runs (`EPOCH` is not 0), the only live timer is the one
//! in `proftimer`, on the M's current thread; if none runs, `proftimer` is 0 and no timer
//! is live (a dead thread's timer included). The scenarios: a profile starting while a
//! new M's thread starts (`enable` against `minit`); a profile stopping while a revived
//! M's new thread starts with the dead thread's timer still in `proftimer`; a profile
//! starting and stopping while a new M's thread starts; a profile stopping and a new one
//! starting while a revived M's thread arms for the old one.
//!
//! The StoreLoad barriers are written as `fence(SeqCst)`, as in the real code (loom, like
//! C11, does not order a store before a later load to another location through SeqCst
//! loads and stores alone). `broken_minit_disarms_unconditionally` is the same model with
//! `minit` disarming whenever it sees no profile and a nonzero `proftimer`: a `minit` that
//! loaded `EPOCH` = 0 just before `enable` stored it, while `enable` saw the thread id and
//! armed the thread, then deletes the new thread's timer, and the running profile has no
//! timer on the M.
//!
//! Run by `tests/loom.rs` (`RUSTFLAGS="--cfg loom" cargo test --release --lib loom_tests`).

#[cfg(all(test, loom))]
mod loom_tests {
    use core::sync::atomic::{
        AtomicBool as KernelBool, AtomicI32 as KernelI32, AtomicUsize as KernelUsize,
    };

    use crate::loom::sync::Arc;
    use crate::loom::sync::atomic::{
        AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering::*, fence,
    };
    use crate::loom::thread;

    /// The thread the M had before (dead) and its new one.
    const OLD_TID: i32 = 1;
    const NEW_TID: i32 = 2;
    /// Timers the kernel's table holds: more than any scenario creates.
    const TIMERS: usize = 6;

    /// The kernel's timers.
    struct Kernel {
        /// Timers created so far (ids 0..next).
        next: KernelUsize,
        /// Each timer's thread.
        tid: [KernelI32; TIMERS],
        deleted: [KernelBool; TIMERS],
    }

    impl Kernel {
        fn new() -> Kernel {
            Kernel {
                next: KernelUsize::new(0),
                tid: core::array::from_fn(|_| KernelI32::new(0)),
                deleted: core::array::from_fn(|_| KernelBool::new(false)),
            }
        }

        /// `timer_open`: a timer on thread `tid`'s clock; its id.
        fn create(&self, tid: i32) -> usize {
            let id = self.next.fetch_add(1, core::sync::atomic::Ordering::SeqCst);
            assert!(id < TIMERS, "more timers than the model's table");
            self.tid[id].store(tid, core::sync::atomic::Ordering::SeqCst);
            id
        }

        /// `timer_delete` of a `proftimer` word.
        fn delete(&self, word: u64) {
            let id = (word as u32).wrapping_sub(1) as usize;
            assert!(
                id < self.next.load(core::sync::atomic::Ordering::SeqCst),
                "deleted a timer never created: {word:#x}"
            );
            assert!(
                !self.deleted[id].swap(true, core::sync::atomic::Ordering::SeqCst),
                "timer {id} deleted twice"
            );
        }

        /// The live timers: (id, thread).
        fn live(&self) -> Vec<(usize, i32)> {
            let n = self.next.load(core::sync::atomic::Ordering::SeqCst);
            (0..n)
                .filter(|&id| !self.deleted[id].load(core::sync::atomic::Ordering::SeqCst))
                .map(|id| (id, self.tid[id].load(core::sync::atomic::Ordering::SeqCst)))
                .collect()
        }
    }

    /// `EPOCH` and the one M's words.
    struct World {
        epoch: AtomicU32,
        tid: AtomicI32,
        dead: AtomicBool,
        proftimer: AtomicU64,
        kernel: Kernel,
    }

    fn word(tid: i32, id: usize) -> u64 {
        ((tid as u32 as u64) << 32) | (id as u32 as u64 + 1)
    }

    /// `arm`.
    fn arm(w: &World, tid: i32, mut epoch: u32) {
        loop {
            let id = w.kernel.create(tid);
            let word = word(tid, id);
            let old = w.proftimer.swap(word, SeqCst);
            if old != 0 {
                w.kernel.delete(old);
            }
            let now = w.epoch.load(SeqCst);
            if now == epoch {
                return;
            }
            if w.proftimer
                .compare_exchange(word, 0, SeqCst, Relaxed)
                .is_err()
            {
                return;
            }
            w.kernel.delete(word);
            if now == 0 {
                return;
            }
            epoch = now;
        }
    }

    /// `disarm`.
    fn disarm(w: &World) {
        let old = w.proftimer.swap(0, SeqCst);
        if old != 0 {
            w.kernel.delete(old);
        }
    }

    /// `enable` (its walk of `allm` reduced to the one M).
    fn enable(w: &World, epoch: u32) {
        w.epoch.store(epoch, SeqCst);
        fence(SeqCst);
        let tid = w.tid.load(Relaxed);
        if tid != 0 && !w.dead.load(Acquire) {
            arm(w, tid, epoch);
        }
    }

    /// `disable`.
    fn disable(w: &World) {
        w.epoch.store(0, SeqCst);
        fence(SeqCst);
        disarm(w);
    }

    #[derive(Clone, Copy, PartialEq)]
    enum Minit {
        /// Without a profile, deletes only the previous thread's timer (a CAS).
        PreviousThreadOnly,
        /// Without a profile, disarms whatever `proftimer` holds.
        Unconditional,
    }

    /// `mstart`'s store of the thread id, then `minit`.
    fn new_thread(w: &World, minit: Minit) {
        w.tid.store(NEW_TID, Relaxed);
        fence(SeqCst);
        let epoch = w.epoch.load(SeqCst);
        let tid = w.tid.load(Relaxed);
        if epoch != 0 {
            arm(w, tid, epoch);
            return;
        }
        match minit {
            Minit::PreviousThreadOnly => {
                let old = w.proftimer.load(Relaxed);
                if old != 0
                    && (old >> 32) as u32 as i32 != tid
                    && w.proftimer
                        .compare_exchange(old, 0, SeqCst, Relaxed)
                        .is_ok()
                {
                    w.kernel.delete(old);
                }
            }
            Minit::Unconditional => {
                if w.proftimer.load(Relaxed) != 0 {
                    disarm(w);
                }
            }
        }
    }

    #[derive(Clone, Copy)]
    enum Op {
        Enable(u32),
        Disable,
    }

    /// Runs the profiler's `ops` against the M's new thread. `running`: the epoch of the
    /// profile that runs at the start (0: none); if one runs, the M is a revived one whose
    /// dead thread still has its timer in `proftimer`, else a new M.
    fn check(running: u32, ops: &'static [Op], minit: Minit) {
        crate::loom::model_bounded(None, move || {
            let kernel = Kernel::new();
            let proftimer = if running != 0 {
                word(OLD_TID, kernel.create(OLD_TID))
            } else {
                0
            };
            // `allocm` cleared the thread id and the dead flag before starting the thread.
            let w = Arc::new(World {
                epoch: AtomicU32::new(running),
                tid: AtomicI32::new(0),
                dead: AtomicBool::new(false),
                proftimer: AtomicU64::new(proftimer),
                kernel,
            });
            let w2 = w.clone();
            let t = thread::spawn(move || new_thread(&w2, minit));
            for op in ops {
                match *op {
                    Op::Enable(e) => enable(&w, e),
                    Op::Disable => disable(&w),
                }
            }
            t.join().unwrap();
            let epoch = w.epoch.load(Relaxed);
            let word = w.proftimer.load(Relaxed);
            let live = w.kernel.live();
            if epoch != 0 {
                let id = (word as u32).wrapping_sub(1) as usize;
                assert!(
                    word != 0 && live == [(id, NEW_TID)] && word >> 32 == NEW_TID as u64,
                    "a profile runs, but the M's thread does not have exactly one live timer, \
                     the one in proftimer: live {live:?}, proftimer {word:#x}"
                );
            } else {
                assert!(
                    word == 0 && live.is_empty(),
                    "no profile runs, but timers are left: live {live:?}, proftimer {word:#x}"
                );
            }
        });
    }

    /// A profile starts while a new M's thread starts: one of them arms the thread, and an
    /// M armed twice keeps one timer.
    #[test]
    fn enable_races_minit() {
        check(0, &[Op::Enable(1)], Minit::PreviousThreadOnly);
    }

    /// A profile stops while a revived M's thread starts: no timer is left, the dead
    /// thread's included.
    #[test]
    fn disable_races_revived_minit() {
        check(1, &[Op::Disable], Minit::PreviousThreadOnly);
    }

    /// A profile starts and stops while a new M's thread starts: no timer is left.
    #[test]
    fn enable_disable_races_minit() {
        check(0, &[Op::Enable(1), Op::Disable], Minit::PreviousThreadOnly);
    }

    /// A profile stops and a new one starts while a revived M's thread arms for the old
    /// one: its `arm` takes back the timer it made for the ended profile and arms again for
    /// the new one, whose `enable` it may have disarmed with its swap.
    #[test]
    fn restart_races_revived_minit() {
        check(1, &[Op::Disable, Op::Enable(2)], Minit::PreviousThreadOnly);
    }

    /// With `minit` disarming whenever it sees no profile, the new thread's timer that a
    /// racing `enable` armed is deleted: the model must find it.
    #[test]
    #[should_panic(expected = "a profile runs, but")]
    fn broken_minit_disarms_unconditionally() {
        check(0, &[Op::Enable(1)], Minit::Unconditional);
    }
}
