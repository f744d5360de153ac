//! Loom model of the spinning protocol (no lost wake-ups; HACKING.md, "The spinning
//! protocol"; spinning.rs's module doc).
//!
//! This is a **model**, not the real code: `wakep` and `find_runnable` work on `SCHED`,
//! Ms, notes and futexes, which loom cannot run. The model keeps the protocol's shared
//! words and the order of its accesses, with loom's atomics in place of the real ones:
//!
//! - producer (`ready_put`/`newproc` then `wakep`): publish the G (the ring's tail, a
//!   Release store as in `RunQueue::put`), the StoreLoad barrier, then load `nmspinning`;
//!   only if it is 0, CAS it 0 → 1 and start a spinning M;
//! - consumer (a spinning M in `find_runnable` that found nothing): decrement
//!   `nmspinning` (SeqCst RMW), the StoreLoad barrier, re-check the queues (Acquire
//!   loads); if it finds work it spins again, else it sleeps.
//!
//! The claim checked: whenever work was published, either the producer started a spinner
//! or the consumer's re-check found the work.
//!
//! The StoreLoad barriers are written as `fence(SeqCst)`, because loom does not order a
//! store before a later load to another location through SeqCst accesses alone (it treats
//! them as acquire/release). In the real code they are:
//! - consumer: the SeqCst `fetch_sub` of `nmspinning` and then a `fence(SeqCst)` before
//!   the re-check (find_runnable's step 6);
//! - producer, local queue with `next = true`: the `runnext` swap (SeqCst RMW) followed by
//!   `wakep`'s SeqCst load of `nmspinning`, which C++20 orders as a StoreLoad pair;
//! - producer, global queue: the SeqCst `fetch_add` of `runqsize`, paired with the
//!   consumer's SeqCst load of it;
//! - producer, local queue tail (`next = false`: a yield, the rest of an injected list):
//!   the Release store of the tail and nothing more. Go's `StoreRel` is an `XCHG` on amd64
//!   (a full barrier) and an STLR on arm64, which the LDAR of `wakep`'s load follows in
//!   order, so Go has the barrier on both. Here the store is a plain `mov` on x86-64 and
//!   `wakep`'s SeqCst load another: the pair can reorder there (not on aarch64, where they
//!   are STLR and LDAR too). A wake-up lost there leaves the G on the producer's own P,
//!   which is running and takes it at its next schedule: later, not lost (HACKING.md,
//!   deviations).
//!
//! `broken_without_producer_barrier` shows the model catches the lost wake-up when the
//! producer's barrier is missing.
//!
//! Run by `tests/loom.rs` (`RUSTFLAGS="--cfg loom" cargo test --release --lib loom_tests`).

#[cfg(all(test, loom))]
mod loom_tests {
    use crate::loom::sync::Arc;
    use crate::loom::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering::*, fence};
    use crate::loom::thread;

    /// The shared words of the protocol.
    struct Sched {
        /// A P's run queue reduced to its tail (the consumer's head stays 0).
        tail: AtomicU32,
        /// Spinning Ms.
        nmspinning: AtomicI32,
        /// Spinning Ms started by a producer's `wakep`.
        started: AtomicU32,
    }

    /// Producer: publish one G, then `wakep`.
    fn producer(s: &Sched, barrier: bool) {
        s.tail.store(1, Release);
        if barrier {
            fence(SeqCst);
        }
        // wakep: start a spinning M only if none spins.
        if s.nmspinning.load(SeqCst) != 0 {
            return;
        }
        if s.nmspinning.compare_exchange(0, 1, SeqCst, Relaxed).is_ok() {
            s.started.fetch_add(1, Relaxed);
        }
    }

    /// Consumer: a spinning M that looks, stops spinning, and looks again. Returns whether
    /// it found the G.
    fn spinner(s: &Sched) -> bool {
        if s.tail.load(Acquire) != 0 {
            return true;
        }
        // Nothing: drop the P, stop spinning (SeqCst RMW), then re-check every queue.
        if s.nmspinning.fetch_sub(1, SeqCst) <= 0 {
            panic!("negative nmspinning");
        }
        fence(SeqCst);
        // Found: it would take an idle P and spin again; else it sleeps (stopm).
        s.tail.load(Acquire) != 0
    }

    fn check(barrier: bool) {
        crate::loom::model_bounded(None, move || {
            let s = Arc::new(Sched {
                tail: AtomicU32::new(0),
                // The consumer is spinning when the model starts.
                nmspinning: AtomicI32::new(1),
                started: AtomicU32::new(0),
            });
            let found = Arc::new(AtomicBool::new(false));
            let (s2, f2) = (s.clone(), found.clone());
            let m = thread::spawn(move || f2.store(spinner(&s2), Relaxed));
            producer(&s, barrier);
            m.join().unwrap();
            let found = found.load(Relaxed);
            let started = s.started.load(Relaxed);
            assert!(
                found || started == 1,
                "lost wake-up: the G is queued, the spinner went to sleep without seeing it \
                 and the producer started no spinner"
            );
            // wakep starts a spinner only when none spins: at most one here.
            assert!(started <= 1);
        });
    }

    /// A spinning M that found work (`resetspinning`): it stops spinning and wakes a
    /// successor only if it then sees more work (Go wakes one unconditionally). Whether it
    /// started one. `tail` stands for every word `work_visible` reads: a queue's tail, a
    /// P's earliest timer (`timer0_when`, stored SeqCst before `wake_for_timer` reads
    /// `timer_m` and calls `wakep`), the poller's waiter count.
    fn resetter(s: &Sched, barrier: bool) -> bool {
        if s.nmspinning.fetch_sub(1, SeqCst) <= 0 {
            panic!("negative nmspinning");
        }
        if barrier {
            fence(SeqCst);
        }
        if s.tail.load(Acquire) == 0 {
            return false;
        }
        // wakep.
        if s.nmspinning.load(SeqCst) == 0
            && s.nmspinning.compare_exchange(0, 1, SeqCst, Relaxed).is_ok()
        {
            s.started.fetch_add(1, Relaxed);
        }
        true
    }

    fn check_reset(barrier: bool) {
        crate::loom::model_bounded(None, move || {
            let s = Arc::new(Sched {
                tail: AtomicU32::new(0),
                // The resetter is the one spinning M when the model starts.
                nmspinning: AtomicI32::new(1),
                started: AtomicU32::new(0),
            });
            let s2 = s.clone();
            let m = thread::spawn(move || resetter(&s2, barrier));
            producer(&s, true);
            m.join().unwrap();
            assert!(
                s.started.load(Relaxed) >= 1,
                "lost wake-up: the G is queued, the spinner went to run its own work \
                 without waking a successor and the producer saw it spinning"
            );
        });
    }

    /// The conditional successor wake-up loses nothing: whatever the interleaving, the
    /// queued G gets a spinning M (from its producer or from the resetter).
    #[test]
    fn resetspinning_no_lost_wakeup() {
        check_reset(true);
    }

    /// Without the resetter's StoreLoad barrier the look at the queue can miss the G that
    /// a producer queued while seeing it spin.
    #[test]
    #[should_panic(expected = "lost wake-up")]
    fn resetspinning_broken_without_barrier() {
        check_reset(false);
    }

    /// The protocol as the runtime implements it: no lost wake-up in any interleaving.
    #[test]
    fn spinning_no_lost_wakeup() {
        check(true);
    }

    /// Without the producer's StoreLoad barrier the wake-up can be lost: the model must
    /// find it (a model that cannot fail proves nothing).
    #[test]
    #[should_panic(expected = "lost wake-up")]
    fn broken_without_producer_barrier() {
        check(false);
    }

    /// The words of `wakep`'s no-idle-P branch and of an M giving its P up.
    struct Idle {
        npidle: AtomicI32,
        needspinning: AtomicU32,
        /// Spinning Ms started by the waker.
        started: AtomicU32,
    }

    /// `wakep` when it may find no idle P: ask for a spinner (`needspinning`) without the
    /// scheduler lock (a deviation: Go sets it under `sched.lock`), then look at `npidle`
    /// again. Whether it went on to start a spinning M. In the code both are SeqCst
    /// accesses, ordered by SeqCst's single total order; here the fence.
    fn waker(s: &Idle, barrier: bool) -> bool {
        if s.npidle.load(SeqCst) == 0 {
            if s.needspinning.load(Relaxed) == 0 {
                s.needspinning.store(1, SeqCst);
            }
            if barrier {
                fence(SeqCst);
            }
            if s.npidle.load(SeqCst) == 0 {
                return false;
            }
        }
        s.started.fetch_add(1, Relaxed);
        true
    }

    /// An M dropping its P (`handoffp`, `find_runnable`): `pidleput` (a SeqCst RMW of
    /// `npidle`), then the re-read of `needspinning`. Whether it saw the request (it then
    /// takes an idle P back and spins).
    fn dropper(s: &Idle) -> bool {
        s.npidle.fetch_add(1, SeqCst);
        fence(SeqCst);
        s.needspinning.load(SeqCst) == 1
    }

    fn check_needspinning(barrier: bool) {
        crate::loom::model_bounded(None, move || {
            let s = Arc::new(Idle {
                // Every P is running: the dropper's is about to become the idle one.
                npidle: AtomicI32::new(0),
                needspinning: AtomicU32::new(0),
                started: AtomicU32::new(0),
            });
            let s2 = s.clone();
            let m = thread::spawn(move || dropper(&s2));
            waker(&s, barrier);
            let saw = m.join().unwrap();
            assert!(
                saw || s.started.load(Relaxed) == 1,
                "lost wake-up: the waker asked for a spinner and saw no idle P, and the M \
                 that then idled its P did not see the request"
            );
        });
    }

    /// `wakep`'s lock-free `needspinning` against an M idling its P: either the waker sees
    /// the idle P or the M sees the request.
    #[test]
    fn needspinning_no_lost_wakeup() {
        check_needspinning(true);
    }

    /// Without the waker's StoreLoad barrier both can miss: the model must find it.
    #[test]
    #[should_panic(expected = "lost wake-up")]
    fn needspinning_broken_without_barrier() {
        check_needspinning(false);
    }
}
