//! Loom model of the netpoller's wait record (`IoWait` in netpoll.rs): who completes a
//! parked `wait`, and when its waiter may let its frame die.
//!
//! A **model**, as `spinning_loom` is: `wait` parks a goroutine through gopark, arms a
//! timer on a P's heap and a cancel on a scope, which loom cannot run. The model keeps
//! the record's words (`done`, `fired`), the read slot of the descriptor, and the order
//! and orderings of their accesses:
//!
//! - the waiter (`wait`), parked: its record is in the slot and it holds the descriptor
//!   lock, which `park_commit` (gopark's unlock function, on the parking M) releases after
//!   `timer::start` and `scope::arm`;
//! - the claimants, each `IoWait::claim` (CAS `done` 0 → 1, AcqRel), then OR its bit into
//!   `fired` (Relaxed) and ready the goroutine: an fd event (`netpoll`: under the lock,
//!   the slot record → READY, readies after the unlock) or an eviction (`evict_locked`:
//!   record → NIL), the deadline's timer and a cancel of the scope (both `on_deadline`,
//!   with no descriptor lock);
//! - the waiter once it runs: reads `fired`; if the timer or a cancel woke it, locks and
//!   unlocks the descriptor to wait out `park_commit`; `scope::disarm`, `timer::stop`,
//!   takes its record out of the slot under the lock, reads `fired` again; then its frame
//!   dies.
//!
//! Restated with loom's types: the descriptor lock is a loom mutex holding the slot (the
//! real `Lock` has models of its own in sys). The waiter takes it before it parks and
//! `park_commit`, on another thread, releases it; a loom guard stays on its thread, so
//! here the parking M takes it for the waiter, first, and only then starts the claimants
//! (it spawns them): none of them acts before the waiter held the lock, as in the
//! runtime, where the record is unknown to them before `wait` publishes it. The timer
//! heap is a mutex holding "the timer is here", its callback run under it as `run_due`
//! does (so `stop` waits for a callback in flight); the scope a mutex holding whether it
//! has ended and whether the wait is linked (`arm` calls the callback itself on an ended
//! scope, `cancel` under the scope's lock); `goready` a Release store the waiter spins on
//! with Acquire loads (the run queue's hand-over). The waiter's frame (the `ParkCtx`, the
//! timer, the cancel wait, the record) is a loom cell: every party reads it before it
//! touches the frame, and the waiter writes it when the frame dies, so a touch that is
//! not ordered before the death fails the model. The seq check and the second direction
//! are left out: they change which error `wait` returns, not who claims the record. The
//! timer thread and the event or eviction run once; the cancel always comes, so somebody
//! always claims.
//!
//! The claims: exactly one claimant readies the goroutine; the goroutine sees the
//! winner's `fired` bits, both at its first look and after the slot's clean-up; when it
//! disarms its cancel, `park_commit` has armed it (no cancel can reach the finished wait
//! later); and the slot never points at a finished wait. `broken_claim_with_load_and_store`
//! claims with a load and a store instead of the CAS, `broken_without_the_lock_wait` skips
//! the waiter's lock and unlock: loom finds each failing.
//!
//! Run by `tests/loom.rs`.

#[cfg(all(test, loom))]
mod loom_tests {
    use crate::loom::cell::UnsafeCell;
    use crate::loom::sync::atomic::{AtomicU32, Ordering::*};
    use crate::loom::sync::{Arc, Mutex, MutexGuard};
    use crate::loom::thread;
    use std::sync::atomic::AtomicU32 as PlainU32;

    // netpoll.rs's values.
    const MODE_READ: u32 = 1;
    const FIRED_TIMEOUT: u32 = 4;
    const FIRED_EVICT: u32 = 8;
    const SLOT_NIL: usize = 0;
    const SLOT_READY: usize = 1;
    /// The record's address in the slot.
    const W: usize = 64;

    /// The claimant that takes the descriptor lock.
    #[derive(Clone, Copy, PartialEq)]
    enum Locked {
        Event,
        Evict,
    }

    /// What a broken model leaves out.
    #[derive(Clone, Copy, PartialEq)]
    enum Broken {
        None,
        /// `claim` as a load and a store.
        PlainClaim,
        /// The waiter's lock and unlock after a lock-free wake-up.
        NoLockWait,
    }

    /// The scope: (ended, the wait is linked).
    struct ScopeState {
        ended: bool,
        linked: bool,
    }

    struct World {
        /// `PollDesc::lock` and the slot it guards, `PollDesc::rg`.
        pd: Mutex<usize>,
        /// `IoWait::done`, `IoWait::fired`.
        done: AtomicU32,
        fired: AtomicU32,
        /// The waiter's frame: true while it lives.
        alive: UnsafeCell<bool>,
        /// The deadline's timer is on its heap.
        heap: Mutex<bool>,
        scope: Mutex<ScopeState>,
        /// `goready`: the waiter runs once it sees it non-zero.
        readied: AtomicU32,
        /// The other threads (park_commit, the claimants) that have finished: the waiter,
        /// finding them all done and itself not readied, was lost.
        finished: AtomicU32,
        /// Ghosts (plain: loom runs one thread at a time): goready calls, and the bits
        /// the readying claimant ORed.
        goreadys: PlainU32,
        woken_by: PlainU32,
        broken: Broken,
    }

    impl World {
        /// A party about to touch the waiter's frame: it must still be alive.
        fn touch(&self) {
            // SAFETY: loom checks this read against the waiter's write when it dies.
            self.alive
                .with(|p| assert!(unsafe { *p }, "the waiter's frame touched after it died"));
        }

        /// `IoWait::claim`.
        fn claim(&self) -> bool {
            self.touch();
            if self.broken == Broken::PlainClaim {
                if self.done.load(Acquire) != 0 {
                    return false;
                }
                self.done.store(1, Release);
                return true;
            }
            self.done.compare_exchange(0, 1, AcqRel, Acquire).is_ok()
        }

        /// The winner's `fired.fetch_or`; then it reads `w.g`.
        fn fire(&self, bit: u32) {
            self.fired.fetch_or(bit, Relaxed);
            self.touch();
        }

        fn goready(&self, bit: u32) {
            assert_eq!(
                self.goreadys.fetch_add(1, Relaxed),
                0,
                "two claimants readied the goroutine"
            );
            self.woken_by.store(bit, Relaxed);
            self.readied.store(1, Release);
        }

        /// `on_deadline`: the timer's and the cancel's callback.
        fn on_deadline(&self) {
            if self.claim() {
                self.fire(FIRED_TIMEOUT);
                self.goready(FIRED_TIMEOUT);
            }
        }

        /// `park_commit`: start the timer, arm the cancel, release the descriptor.
        fn park_commit(&self, pd: MutexGuard<'_, usize>) {
            // ctx.timer
            self.touch();
            *self.heap.lock().unwrap() = true;
            // ctx.cancel
            self.touch();
            let mut sc = self.scope.lock().unwrap();
            if sc.ended {
                drop(sc);
                self.on_deadline();
            } else {
                sc.linked = true;
                drop(sc);
            }
            // ctx.pd: the last access.
            self.touch();
            drop(pd);
        }

        /// `netpoll` with a read event on the fd, or `evict_locked` (close, unregister).
        fn locked_claimant(&self, which: Locked) {
            let (to, bit) = match which {
                Locked::Event => (SLOT_READY, MODE_READ),
                Locked::Evict => (SLOT_NIL, FIRED_EVICT),
            };
            let mut rg = self.pd.lock().unwrap();
            let v = core::mem::replace(&mut *rg, to);
            let mut g = false;
            if v > SLOT_READY {
                assert_eq!(v, W);
                if self.claim() {
                    self.fire(bit);
                    g = true;
                }
            }
            drop(rg);
            if g {
                self.goready(bit);
            }
        }

        /// `run_due` with the deadline passed: the callback under the heap lock.
        fn run_due(&self) {
            let mut here = self.heap.lock().unwrap();
            if *here {
                *here = false;
                self.on_deadline();
            }
        }

        /// `scope::cancel` of the waiter's scope.
        fn cancel(&self) {
            let mut sc = self.scope.lock().unwrap();
            if !sc.ended {
                sc.ended = true;
                if sc.linked {
                    self.on_deadline();
                }
            }
        }

        /// `wait` after gopark returned, up to its frame's death.
        fn resume(&self) {
            let woken_by = self.woken_by.load(Relaxed);
            let fired = self.fired.load(Relaxed);
            assert_eq!(
                fired & woken_by,
                woken_by,
                "the goroutine does not see its waker's fired bits"
            );
            if fired & FIRED_TIMEOUT != 0 && self.broken != Broken::NoLockWait {
                drop(self.pd.lock().unwrap());
            }
            // scope::disarm
            self.scope.lock().unwrap().linked = false;
            // timer::stop
            *self.heap.lock().unwrap() = false;
            let mut rg = self.pd.lock().unwrap();
            if *rg == W || *rg == SLOT_READY {
                *rg = SLOT_NIL;
            }
            // park_commit has finished (the lock above): nothing arms the cancel any more.
            assert!(
                !self.scope.lock().unwrap().linked,
                "a cancel wait left linked on its scope by a finished wait"
            );
            drop(rg);
            let fired = self.fired.load(Relaxed);
            assert_eq!(
                fired & woken_by,
                woken_by,
                "the goroutine does not see its waker's fired bits"
            );
            // SAFETY: loom checks this write against every read of the frame.
            self.alive.with_mut(|p| unsafe { *p = false });
        }
    }

    fn check(which: Locked, broken: Broken) {
        crate::loom::model_bounded(Some(2), move || {
            let w = Arc::new(World {
                // The waiter's record is in the slot.
                pd: Mutex::new(W),
                done: AtomicU32::new(0),
                fired: AtomicU32::new(0),
                alive: UnsafeCell::new(true),
                heap: Mutex::new(false),
                scope: Mutex::new(ScopeState {
                    ended: false,
                    linked: false,
                }),
                readied: AtomicU32::new(0),
                finished: AtomicU32::new(0),
                goreadys: PlainU32::new(0),
                woken_by: PlainU32::new(0),
                broken,
            });
            let w2 = w.clone();
            // The parking M: the waiter's lock, the claimants, then park_commit.
            let m = thread::spawn(move || {
                let w = w2;
                let pd = w.pd.lock().unwrap();
                let spawn = |f: Box<dyn Fn(&World) + Send>| {
                    let w = w.clone();
                    thread::spawn(move || {
                        f(&w);
                        w.finished.fetch_add(1, Release);
                    })
                };
                let ts = [
                    spawn(Box::new(move |w: &World| w.locked_claimant(which))),
                    spawn(Box::new(World::run_due)),
                    spawn(Box::new(World::cancel)),
                ];
                w.park_commit(pd);
                w.finished.fetch_add(1, Release);
                for t in ts {
                    t.join().unwrap();
                }
            });
            // The waiter, parked.
            loop {
                if w.readied.load(Acquire) != 0 {
                    break;
                }
                if w.finished.load(Acquire) == 4 {
                    assert!(
                        w.readied.load(Acquire) != 0,
                        "lost wake-up: the wait was claimed and its goroutine never readied"
                    );
                    break;
                }
                thread::yield_now();
            }
            w.resume();
            m.join().unwrap();
            assert_eq!(w.goreadys.load(Relaxed), 1);
            assert_ne!(
                *w.pd.lock().unwrap(),
                W,
                "the slot points at a finished wait"
            );
        });
    }

    /// An fd event, the deadline and a cancel race for the wait: one readies it, the
    /// goroutine sees its bits, and its frame dies with nothing left pointing at it.
    #[test]
    fn event_timer_cancel_claim_once() {
        check(Locked::Event, Broken::None);
    }

    /// The same with an eviction (close, unregister) in place of the event.
    #[test]
    fn evict_timer_cancel_claim_once() {
        check(Locked::Evict, Broken::None);
    }

    /// The claim as a load and a store: two claimants ready the goroutine.
    #[test]
    #[should_panic(expected = "two claimants readied the goroutine")]
    fn broken_claim_with_load_and_store() {
        check(Locked::Event, Broken::PlainClaim);
    }

    /// Without the lock and unlock after a lock-free wake-up, the waiter can disarm its
    /// cancel before `park_commit` armed it: the scope keeps the finished wait.
    #[test]
    #[should_panic(expected = "left linked on its scope")]
    fn broken_without_the_lock_wait() {
        check(Locked::Event, Broken::NoLockWait);
    }
}
