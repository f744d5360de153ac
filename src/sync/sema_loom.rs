//! Loom models of the semaphore's waiter protocol (`sema.rs`: its module doc's "Ghosts"
//! and "Invariants"; HACKING.md, the scoped-wait rules, "A lock wait leaves a ghost").
//!
//! A **model**, as `rt/spinning_loom.rs` is: the real functions park goroutines, take the
//! runtime's `Lock` and hash addresses into `SEMTABLE`, which loom cannot run. The model
//! keeps one address and its root: the count (`*addr`), `nwait`, the root's lock with its
//! list (a loom `Mutex` over a queue), and a waiter record's `ticket`, `done`, `parked` and
//! `dequeued`, with the real code's orderings and the order of its accesses:
//!
//! - `can_acquire`: a load, then a weak CAS (Acquire) down by one while it is not 0;
//! - `release_one` (`semrelease1` calls it, then runs the ghost it returns and the
//!   releases that ghost asks for): count `fetch_add` (SeqCst), `nwait` load (SeqCst);
//!   0: return without the lock. Else, under the lock, `nwait` again, then dequeue: a
//!   ghost record is taken (`ghost_take`); a plain waiter, or a scoped one whose `done`
//!   the releaser wins (CAS 0 → 1, AcqRel), is woken after the lock (its `ticket` set
//!   first with `handoff` when `can_acquire` takes the count for it); a scoped waiter whose
//!   cancel won is marked `dequeued` and the release goes on to the next waiter, or to the
//!   ghost the wait leaves (`ghost_take` of a new record);
//! - `ghost_take`: `can_acquire`; else, under the lock, `nwait` up (SeqCst), `can_acquire`
//!   again, and the record back at the head of the list if that fails too;
//! - `semacquire_inner` (a goroutine): `can_acquire`; then, under the lock, `nwait` up
//!   (SeqCst), `can_acquire`, enqueue, gopark with `unlock_root`; woken, `ticket` or
//!   `can_acquire`, else again;
//! - `semacquire_in` (`semacquire_scoped`, and `semacquire_scoped_ghost` with a ghost): a
//!   record per round, armed on the scope before the root's lock; as above up to the park,
//!   whose unlock function is `unlock_root_scoped` (`parked` swapped to `PARK_DONE`,
//!   AcqRel, then the lock released; the park called off if the swap found
//!   `PARK_CANCELLED`); woken, disarm and read the scope's error, then `leave_ghost`
//!   (a ghost wait that the scope ended) or the removal from the list, `ticket` or
//!   `can_acquire`, `Err` if the scope ended, else again;
//! - `cancel_wait` (the scope's cancel under the scope's lock, or `arm` on a scope that
//!   has ended): CAS `done` 0 → 1 (AcqRel), then swap `parked` to `PARK_CANCELLED`
//!   (AcqRel) and goready only if the park had happened (`PARK_DONE`).
//!
//! gopark, goready and the scope are small models of their own: a goroutine is marked
//! waiting before the unlock function runs (as `schedule::after_switch` does); goready
//! of a goroutine that is not waiting, or a second one for the same wait, fails the model,
//! and so does a goroutine that parks when every other live thread is parked too (a lost
//! wake-up). The scope is its lock, its error word (stored under the lock, read without
//! it, as `scope::err`) and the one wait armed on it. Left out: foreign waiters (a note,
//! which keeps a wake-up that comes before the sleep, in place of `parked`), the deadline's
//! timer (another caller of `cancel_wait`, which the `done` CAS serves as it serves the
//! scope's cancel), several addresses on one root (`dequeue` takes the first of the
//! address), `lifo`, and the hand-off's yield.
//!
//! The StoreLoad barriers of the `nwait` pair are written as `fence(SeqCst)`, because loom
//! (like C11) does not order a store before a later load to another location through SeqCst
//! accesses alone (it treats them as acquire/release). In the code, the releaser's is its
//! SeqCst `fetch_add` of the count followed by the SeqCst load of `nwait`; the waiter's (and
//! `ghost_take`'s) its SeqCst `fetch_add` of `nwait` followed by `can_acquire`'s first
//! load, which must be SeqCst for the two to be ordered in the language's model (an Acquire
//! load is outside SeqCst's single total order; on x86 the locked `fetch_add` orders it
//! anyway). The root's lock does not order the pair: the releaser's fast path does not
//! take it.
//!
//! The models and their claims:
//! - `nwait_no_lost_wakeup`: a waiter and a releaser: the waiter either takes the count or
//!   is woken by the releaser, which takes the lock only when `nwait` says so.
//!   `nwait_broken_without_waiter_barrier` (the waiter's load not ordered after its
//!   increment) loses the wake-up.
//! - `scoped_claim_*`: a scoped waiter (with a ghost, without one, and with a hand-off
//!   release) against one release and the scope's cancel: the release is consumed exactly
//!   once (by the waiter, or by its ghost, which passes it on, or left in the count for the
//!   next waiter); the waiter is readied exactly once for each park that happens and never
//!   for one called off; a cancelled waiter returns `Err` without the count (`Ok` with it
//!   when it took it after all). `scoped_broken_cancel_stores_done` (the cancel's `done`
//!   stored, not CAS-ed) readies the waiter twice; `scoped_broken_cancel_without_parked`
//!   (the cancel readies the waiter without the `parked` hand-shake) readies one that has
//!   not parked.
//! - `ghost_passes_the_count_on`: a scoped waiter with a ghost, which releases what it
//!   took (the semaphore as a lock), and a plain waiter, against one release and the
//!   scope's cancel: the plain waiter always gets the count; each release is taken once
//!   (the count left plus the waits that took one is the releases made); afterwards no
//!   waiter is left on the list, `nwait` counts the list, and a ghost left there (queued
//!   again: its waiter was woken and another took the count) has no count beside it.
//!   `ghost_broken_keeping_the_count` (the ghost takes the count and does not pass it on)
//!   loses a release.
//!
//! Run by `tests/loom.rs` (`RUSTFLAGS="--cfg loom" cargo test --release --lib loom_tests`).

#[cfg(all(test, loom))]
mod loom_tests {
    use crate::loom::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering::*, fence};
    use crate::loom::sync::{Arc, Condvar, Mutex, MutexGuard};
    use crate::loom::thread;
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicU32 as StdU32, Ordering as StdOrdering};

    const PARK_NOT_YET: u32 = 0;
    const PARK_DONE: u32 = 1;
    const PARK_CANCELLED: u32 = 2;

    /// The one step a broken twin changes.
    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Mutant {
        /// The protocol as the code has it.
        None,
        /// No StoreLoad barrier between a waiter's `nwait` increment and its
        /// `can_acquire`.
        NoWaiterBarrier,
        /// `cancel_wait` stores `done` instead of CAS-ing it.
        CancelStoresDone,
        /// `cancel_wait` readies the waiter without the `parked` swap.
        CancelWithoutParked,
        /// The ghost takes the count and does not pass it on.
        GhostKeepsCount,
    }

    /// A goroutine's waiter record (`sema::Waiter`).
    struct Waiter {
        /// The goroutine (an index into `Sched::status`).
        g: usize,
        ticket: AtomicU32,
        scoped: bool,
        done: AtomicU32,
        parked: AtomicU32,
        /// Under the root's lock (Relaxed, as in the code).
        dequeued: AtomicBool,
        /// The wait leaves a ghost when its scope ends it (`semacquire_scoped_ghost`).
        ghost: bool,
        /// Bookkeeping, not the subject: goready calls for this wait (plain std atomic).
        readies: StdU32,
    }

    impl Waiter {
        fn new(g: usize, scoped: bool, ghost: bool) -> Waiter {
            Waiter {
                g,
                ticket: AtomicU32::new(0),
                scoped,
                done: AtomicU32::new(0),
                parked: AtomicU32::new(PARK_NOT_YET),
                dequeued: AtomicBool::new(false),
                ghost,
                readies: StdU32::new(0),
            }
        }
    }

    /// An entry of the root's list: a waiter on its stack, or a ghost record (on the heap
    /// in the code, owned by the list).
    enum Entry {
        Waiter(Arc<Waiter>),
        Ghost,
    }

    const RUNNING: u8 = 0;
    const WAITING: u8 = 1;
    const RUNNABLE: u8 = 2;

    /// The scheduler, as much of it as gopark and goready need.
    struct Sched {
        status: [u8; 2],
        /// The goroutine sleeps (its park happened and nobody has readied it yet).
        asleep: [bool; 2],
        /// Threads that have not finished their part.
        live: usize,
        /// Goroutines asleep.
        parked: usize,
    }

    /// One address and its root, the scope, the scheduler.
    struct World {
        mutant: Mutant,
        /// `*addr`.
        count: AtomicU32,
        nwait: AtomicU32,
        /// The root's lock and its list.
        root: Mutex<VecDeque<Entry>>,
        /// The scope's lock and the wait armed on it.
        scope: Mutex<Option<Arc<Waiter>>>,
        /// The scope's errno (`Scope::err`).
        err: AtomicI32,
        sched: Mutex<Sched>,
        cv: Condvar,
        /// Bookkeeping (plain std atomics, read after the joins): releases made by the
        /// model's threads (not by ghosts), ghosts run, waits that returned with the count.
        releases: StdU32,
        ghost_runs: StdU32,
        oks: StdU32,
    }

    impl World {
        fn new(mutant: Mutant, live: usize) -> World {
            World {
                mutant,
                count: AtomicU32::new(0),
                nwait: AtomicU32::new(0),
                root: Mutex::new(VecDeque::new()),
                scope: Mutex::new(None),
                err: AtomicI32::new(0),
                sched: Mutex::new(Sched {
                    status: [RUNNING; 2],
                    asleep: [false; 2],
                    live,
                    parked: 0,
                }),
                cv: Condvar::new(),
                releases: StdU32::new(0),
                ghost_runs: StdU32::new(0),
                oks: StdU32::new(0),
            }
        }

        /// A thread has finished its part: it readies nobody from here on.
        fn exit(&self) {
            self.sched.lock().unwrap().live -= 1;
            self.cv.notify_all();
        }

        /// gopark: goroutine `g` is marked waiting, then `unlockf` runs; false calls the
        /// park off. Whether the goroutine parked.
        fn gopark(&self, g: usize, unlockf: impl FnOnce() -> bool) -> bool {
            self.sched.lock().unwrap().status[g] = WAITING;
            if !unlockf() {
                let mut s = self.sched.lock().unwrap();
                assert_eq!(
                    s.status[g], WAITING,
                    "readied a goroutine whose park was called off"
                );
                s.status[g] = RUNNING;
                return false;
            }
            let mut s = self.sched.lock().unwrap();
            if s.status[g] == WAITING {
                s.asleep[g] = true;
                s.parked += 1;
            }
            while s.status[g] != RUNNABLE {
                assert!(
                    s.parked < s.live,
                    "lost wake-up: a goroutine sleeps on the semaphore and every live thread \
                     is asleep too"
                );
                s = self.cv.wait(s).unwrap();
            }
            s.status[g] = RUNNING;
            true
        }

        /// goready of the goroutine waiting on `w`.
        fn goready(&self, w: &Waiter) {
            assert_eq!(
                w.readies.fetch_add(1, StdOrdering::Relaxed),
                0,
                "a wait readied twice"
            );
            let mut s = self.sched.lock().unwrap();
            assert_eq!(
                s.status[w.g], WAITING,
                "goready of a goroutine that is not parked"
            );
            s.status[w.g] = RUNNABLE;
            if s.asleep[w.g] {
                s.asleep[w.g] = false;
                s.parked -= 1;
            }
            self.cv.notify_all();
        }

        /// The barrier between a waiter's `nwait` increment and its `can_acquire` (module
        /// doc).
        fn waiter_barrier(&self) {
            if self.mutant != Mutant::NoWaiterBarrier {
                fence(SeqCst);
            }
        }

        /// `sema::can_acquire`.
        fn can_acquire(&self) -> bool {
            let mut v = self.count.load(SeqCst);
            while v != 0 {
                match self.count.compare_exchange_weak(v, v - 1, Acquire, Relaxed) {
                    Ok(_) => return true,
                    Err(cur) => v = cur,
                }
            }
            false
        }

        /// `semacquire_inner` on a goroutine.
        fn semacquire(&self, g: usize) {
            if self.can_acquire() {
                return;
            }
            let w = Arc::new(Waiter::new(g, false, false));
            loop {
                let mut q = self.root.lock().unwrap();
                self.nwait.fetch_add(1, SeqCst);
                self.waiter_barrier();
                if self.can_acquire() {
                    self.nwait.fetch_sub(1, SeqCst);
                    return;
                }
                q.push_back(Entry::Waiter(w.clone()));
                // unlock_root.
                self.gopark(g, move || {
                    drop(q);
                    true
                });
                // The record serves every round (as in the code): one readying per park.
                w.readies.store(0, StdOrdering::Relaxed);
                if w.ticket.load(Acquire) != 0 || self.can_acquire() {
                    return;
                }
            }
        }

        /// `semrelease1`: the release, then the ghost it reached and the releases that
        /// ghost asks for.
        fn semrelease(&self, handoff: bool) {
            self.releases.fetch_add(1, StdOrdering::Relaxed);
            let mut ghost = self.release_one(handoff);
            while ghost {
                // The ghost's action: what its waiter would have done woken without wanting
                // the count any more: pass it on (a release of the same address).
                self.ghost_runs.fetch_add(1, StdOrdering::Relaxed);
                ghost = self.mutant != Mutant::GhostKeepsCount && self.release_one(false);
            }
        }

        /// `release_one`: true when it reached a ghost and took the count for it.
        fn release_one(&self, handoff: bool) -> bool {
            self.count.fetch_add(1, SeqCst);
            fence(SeqCst);
            if self.nwait.load(SeqCst) == 0 {
                return false;
            }
            let mut q = self.root.lock().unwrap();
            if self.nwait.load(SeqCst) == 0 {
                return false;
            }
            let w = loop {
                let Some(e) = q.pop_front() else {
                    return false;
                };
                self.nwait.fetch_sub(1, SeqCst);
                let w = match e {
                    Entry::Ghost => {
                        drop(q);
                        return self.ghost_take();
                    }
                    Entry::Waiter(w) => w,
                };
                if !w.scoped || w.done.compare_exchange(0, 1, AcqRel, Acquire).is_ok() {
                    break w;
                }
                // Its scope ended the wait first: the count goes to the next waiter, or to
                // the ghost the wait leaves.
                w.dequeued.store(true, Relaxed);
                if w.ghost {
                    drop(q);
                    return self.ghost_take();
                }
            };
            drop(q);
            assert_eq!(w.ticket.load(Relaxed), 0, "corrupted semaphore ticket");
            if handoff && self.can_acquire() {
                w.ticket.store(1, Release);
            }
            self.goready(&w);
            false
        }

        /// `ghost_take`: true when it took the count for the ghost, false when it queued
        /// the ghost again.
        fn ghost_take(&self) -> bool {
            if self.can_acquire() {
                return true;
            }
            let mut q = self.root.lock().unwrap();
            self.nwait.fetch_add(1, SeqCst);
            fence(SeqCst);
            if self.can_acquire() {
                self.nwait.fetch_sub(1, SeqCst);
                return true;
            }
            q.push_front(Entry::Ghost);
            false
        }

        /// `cancel_wait` of a goroutine's wait.
        fn cancel_wait(&self, w: &Waiter) {
            if self.mutant == Mutant::CancelStoresDone {
                w.done.store(1, Release);
            } else if w.done.compare_exchange(0, 1, AcqRel, Acquire).is_err() {
                return;
            }
            if self.mutant == Mutant::CancelWithoutParked {
                self.goready(w);
            } else if w.parked.swap(PARK_CANCELLED, AcqRel) == PARK_DONE {
                self.goready(w);
            }
        }

        /// The scope's cancel (`scope::cancel_subtree`): the error stored under the scope's
        /// lock, then the armed wait cancelled.
        fn cancel(&self) {
            let s = self.scope.lock().unwrap();
            if self.err.load(Relaxed) == 0 {
                self.err.store(libc::ECANCELED, Release);
                if let Some(w) = s.as_ref() {
                    self.cancel_wait(w);
                }
            }
        }

        /// `scope::arm`: a scope that has ended cancels the wait at once.
        fn arm(&self, w: &Arc<Waiter>) {
            let mut s = self.scope.lock().unwrap();
            if self.err.load(Acquire) != 0 {
                drop(s);
                self.cancel_wait(w);
                return;
            }
            *s = Some(w.clone());
        }

        /// `scope::disarm`: after it no cancel touches the wait.
        fn disarm(&self) {
            *self.scope.lock().unwrap() = None;
        }

        /// `semacquire_in` on a goroutine (`ghost`: `semacquire_scoped_ghost`). Each
        /// round's record, and whether its park happened, goes to `recs`.
        fn semacquire_scoped(
            &self,
            g: usize,
            ghost: bool,
            recs: &mut Vec<(Arc<Waiter>, bool)>,
        ) -> Result<(), i32> {
            if self.can_acquire() {
                return Ok(());
            }
            loop {
                let w = Arc::new(Waiter::new(g, true, ghost));
                self.arm(&w);
                let mut q = self.root.lock().unwrap();
                self.nwait.fetch_add(1, SeqCst);
                self.waiter_barrier();
                if self.can_acquire() {
                    self.nwait.fetch_sub(1, SeqCst);
                    drop(q);
                    self.disarm();
                    recs.push((w, false));
                    return Ok(());
                }
                q.push_back(Entry::Waiter(w.clone()));
                let wp = w.clone();
                let parked = self.gopark(g, move || unlock_root_scoped(&wp, q));
                recs.push((w.clone(), parked));
                self.disarm();
                let e = self.err.load(Acquire);
                if ghost && e != 0 {
                    return self.leave_ghost(&w, e);
                }
                let mut q = self.root.lock().unwrap();
                if !w.dequeued.load(Relaxed) && remove(&mut q, &w) {
                    self.nwait.fetch_sub(1, SeqCst);
                }
                drop(q);
                if w.ticket.load(Acquire) != 0 || self.can_acquire() {
                    return Ok(());
                }
                if e != 0 {
                    return Err(e);
                }
            }
        }

        /// `leave_ghost`.
        fn leave_ghost(&self, w: &Waiter, e: i32) -> Result<(), i32> {
            let mut q = self.root.lock().unwrap();
            if w.dequeued.load(Relaxed) {
                return Err(e);
            }
            if w.ticket.load(Acquire) != 0 {
                return Ok(());
            }
            if self.can_acquire() {
                if remove(&mut q, w) {
                    self.nwait.fetch_sub(1, SeqCst);
                }
                return Ok(());
            }
            if !replace(&mut q, w) {
                self.nwait.fetch_add(1, SeqCst);
                self.waiter_barrier();
                if self.can_acquire() {
                    self.nwait.fetch_sub(1, SeqCst);
                    return Ok(());
                }
                q.push_front(Entry::Ghost);
            }
            Err(e)
        }

        /// After every thread is joined: the count, `nwait`, and what is left on the list
        /// (ghosts only: a live waiter left there sleeps for ever).
        fn end_state(&self) -> (u32, u32, usize) {
            let q = self.root.lock().unwrap();
            assert!(
                q.iter().all(|e| matches!(e, Entry::Ghost)),
                "a waiter left on the list"
            );
            let n = self.nwait.load(Relaxed);
            assert_eq!(n as usize, q.len(), "nwait does not count the list");
            (self.count.load(Relaxed), n, q.len())
        }
    }

    /// gopark's unlock function of a scoped wait (`unlock_root_scoped`).
    fn unlock_root_scoped(w: &Waiter, q: MutexGuard<'_, VecDeque<Entry>>) -> bool {
        let prev = w.parked.swap(PARK_DONE, AcqRel);
        drop(q);
        prev != PARK_CANCELLED
    }

    fn is(e: &Entry, w: &Waiter) -> bool {
        matches!(e, Entry::Waiter(x) if core::ptr::eq(&**x, w))
    }

    /// `SemaRoot::remove`.
    fn remove(q: &mut VecDeque<Entry>, w: &Waiter) -> bool {
        match q.iter().position(|e| is(e, w)) {
            Some(i) => {
                q.remove(i);
                true
            }
            None => false,
        }
    }

    /// `SemaRoot::replace`: a ghost in `w`'s place.
    fn replace(q: &mut VecDeque<Entry>, w: &Waiter) -> bool {
        match q.iter_mut().find(|e| is(e, w)) {
            Some(e) => {
                *e = Entry::Ghost;
                true
            }
            None => false,
        }
    }

    /// Every round's record was readied once if its park happened, else never.
    fn check_readies(recs: &[(Arc<Waiter>, bool)]) {
        for (w, parked) in recs {
            assert_eq!(
                w.readies.load(StdOrdering::Relaxed),
                *parked as u32,
                "a park readied other than once, or one called off readied"
            );
        }
    }

    /// A plain waiter against a releaser (the `nwait` fast path).
    fn check_nwait(mutant: Mutant) {
        crate::loom::model_bounded(None, move || {
            let world = Arc::new(World::new(mutant, 2));
            let w = world.clone();
            let waiter = thread::spawn(move || {
                w.semacquire(0);
                w.exit();
            });
            world.semrelease(false);
            world.exit();
            waiter.join().unwrap();
            assert_eq!(world.end_state(), (0, 0, 0), "the count or a waiter left");
        });
    }

    /// The protocol as the code has it: the waiter takes the count or is woken.
    #[test]
    fn nwait_no_lost_wakeup() {
        check_nwait(Mutant::None);
    }

    /// Without the waiter's StoreLoad barrier the releaser can see `nwait == 0` while the
    /// waiter sees no count: the waiter sleeps for ever.
    #[test]
    #[should_panic(expected = "lost wake-up")]
    fn nwait_broken_without_waiter_barrier() {
        check_nwait(Mutant::NoWaiterBarrier);
    }

    /// A scoped waiter (`ghost`: one that leaves a ghost) against one release (`handoff`:
    /// the releaser takes the count for it) and the scope's cancel.
    fn check_scoped(mutant: Mutant, ghost: bool, handoff: bool) {
        crate::loom::model_bounded(Some(4), move || {
            let world = Arc::new(World::new(mutant, 3));
            let w = world.clone();
            let waiter = thread::spawn(move || {
                let mut recs = Vec::new();
                let r = w.semacquire_scoped(0, ghost, &mut recs);
                w.exit();
                (r, recs)
            });
            let c = world.clone();
            let canceller = thread::spawn(move || {
                c.cancel();
                c.exit();
            });
            world.semrelease(handoff);
            world.exit();
            let (r, recs) = waiter.join().unwrap();
            canceller.join().unwrap();
            check_readies(&recs);
            let (count, _, queued) = world.end_state();
            assert_eq!(queued, 0, "a ghost left with no waiter counted for it");
            let runs = world.ghost_runs.load(StdOrdering::Relaxed);
            match r {
                Ok(()) => {
                    assert_eq!(count, 0, "the waiter returned Ok without the count");
                    assert_eq!(runs, 0, "a ghost ran for a wait that took the count");
                }
                Err(e) => {
                    assert_eq!(e, libc::ECANCELED);
                    // The ghost took the release and passed it on; without a ghost the
                    // release stays in the count for the next waiter.
                    assert_eq!(count, 1, "the cancelled waiter took the count, or lost it");
                    assert_eq!(runs, ghost as u32, "the ghost ran other than once");
                }
            }
        });
    }

    /// `semacquire_scoped_ghost`: the mutex's and rwmutex's scoped wait.
    #[test]
    fn scoped_claim_with_ghost() {
        check_scoped(Mutant::None, true, false);
    }

    /// `semacquire_scoped`: the WaitGroup's scoped wait (no ghost).
    #[test]
    fn scoped_claim_without_ghost() {
        check_scoped(Mutant::None, false, false);
    }

    /// A hand-off release (the mutex's starvation mode) that wins `done` takes the count
    /// for the waiter: the waiter returns Ok with it whatever the scope says.
    #[test]
    fn scoped_claim_handoff() {
        check_scoped(Mutant::None, true, true);
    }

    /// The cancel stores `done`: it and the releaser both win, and both ready the waiter.
    #[test]
    #[should_panic(expected = "readied")]
    fn scoped_broken_cancel_stores_done() {
        check_scoped(Mutant::CancelStoresDone, true, false);
    }

    /// The cancel readies the waiter without the `parked` hand-shake: the waiter may not
    /// have parked yet.
    #[test]
    #[should_panic(expected = "goready of a goroutine that is not parked")]
    fn scoped_broken_cancel_without_parked() {
        check_scoped(Mutant::CancelWithoutParked, true, false);
    }

    /// The semaphore as a lock: a scoped waiter with a ghost takes it and releases it; a
    /// plain waiter takes it (and releases it, with `plain_releases`); one release starts
    /// it, and the scope's cancel races it.
    fn check_pass_on(mutant: Mutant, plain_releases: bool) {
        crate::loom::model_bounded(Some(2), move || {
            let world = Arc::new(World::new(mutant, 4));
            let w = world.clone();
            let scoped = thread::spawn(move || {
                let mut recs = Vec::new();
                let r = w.semacquire_scoped(0, true, &mut recs);
                if r.is_ok() {
                    w.oks.fetch_add(1, StdOrdering::Relaxed);
                    w.semrelease(false);
                }
                w.exit();
                recs
            });
            let p = world.clone();
            let plain = thread::spawn(move || {
                p.semacquire(1);
                p.oks.fetch_add(1, StdOrdering::Relaxed);
                if plain_releases {
                    p.semrelease(false);
                }
                p.exit();
            });
            let c = world.clone();
            let canceller = thread::spawn(move || {
                c.cancel();
                c.exit();
            });
            world.semrelease(false);
            world.exit();
            let recs = scoped.join().unwrap();
            plain.join().unwrap();
            canceller.join().unwrap();
            check_readies(&recs);
            let (count, _, queued) = world.end_state();
            let releases = world.releases.load(StdOrdering::Relaxed);
            let oks = world.oks.load(StdOrdering::Relaxed);
            // Each release taken once: by a waiter (which released it again), by a ghost
            // (which passed it on), or still in the count.
            assert_eq!(count + oks, releases, "a release consumed twice or lost");
            // A ghost queued again (its waiter was woken and another took the count) waits
            // for a release to come; one that waits beside a count has missed it.
            assert!(
                count == 0 || queued == 0,
                "a ghost left on the list beside the count"
            );
        });
    }

    /// A cancelled lock-like wait leaves its ghost, which passes the release it takes on
    /// to the plain waiter.
    #[test]
    fn ghost_passes_the_count_on() {
        check_pass_on(Mutant::None, false);
    }

    /// The plain waiter releases what it took, so a release can land while the cancelled
    /// waiter, woken but beaten to the count, re-queues as a ghost: its second look at the
    /// count after counting itself in `nwait` takes that release.
    #[test]
    fn ghost_requeue_sees_every_release() {
        check_pass_on(Mutant::None, true);
    }

    /// The ghost keeps the count: a release is lost (the plain waiter behind the ghost
    /// sleeps for ever, or the count comes out short).
    #[test]
    #[should_panic(expected = "lost")]
    fn ghost_broken_keeping_the_count() {
        check_pass_on(Mutant::GhostKeepsCount, false);
    }
}
