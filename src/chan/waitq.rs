//! Wait queues (Go's `waitq`, chan.go) and the one function that blocks a caller on them
//! (`block`). The waiters and sudogs themselves, their `done` flag and their caches, are the
//! runtime's (`rt/sudog.rs`, where the protocol is described).

use core::mem::MaybeUninit;
use core::ptr::{null, null_mut};
use core::sync::atomic::Ordering;
use core::time::Duration;

use crate::rt::scope::{self, CancelWait, Scope};
use crate::rt::sudog::{Sudog, Waiter};
use crate::rt::timer::{self, Timer};
use crate::rt::{self, G, WaitReason};
use crate::sys;

/// A FIFO queue of sudogs (Go's waitq). Owner: the holder of its channel's lock.
///
/// # The waiter's buffer and ThreadSanitizer
/// Whoever dequeues a sudog touches its owner's buffer (`Sudog::elem`): a sender copies
/// into a parked receiver's, a receiver out of a parked sender's, a closer zeroes a parked
/// receiver's (as Go's `closechan` does: `typedmemclr(c.elemtype, sg.elem)`). The owner's
/// earlier accesses to that buffer come before, ordered by the channel lock, which TSan
/// cannot see (libgmp is not instrumented); the copy or the zeroing, a `memmove` or
/// `memset`, TSan sees through its interceptors. So the owner releases the sudog's
/// address when it queues the sudog and the party that claims it acquires that address
/// (`enqueue`, `dequeue`), the edge the lock gives; the wake-up's (the G's, or the
/// `Note`'s) orders the other direction. The edge is also one of Go's memory model: a
/// receive from an unbuffered channel is synchronized before the completion of the
/// corresponding send, and a sender that finds the receiver parked completes at once,
/// with no wake-up of its own to carry it. A sudog's address is used again (the next frame
/// at that depth, the next user of a cached sudog), and TSan joins every release at an
/// address: an acquire may also order a previous user's accesses, which can hide a race
/// but never report one that is not there.
pub(crate) struct WaitQ {
    first: *const Sudog,
    last: *const Sudog,
}

impl WaitQ {
    pub const fn new() -> WaitQ {
        WaitQ {
            first: null(),
            last: null(),
        }
    }

    /// Whether no sudog is queued (stale ones included).
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.first.is_null()
    }

    /// Appends `sg`, the caller's own (see "The waiter's buffer and ThreadSanitizer").
    ///
    /// # Safety
    /// The channel lock is held; `sg` is on no queue and stays alive while queued.
    pub unsafe fn enqueue(&mut self, sg: *const Sudog) {
        if sys::tsan::on() {
            sys::tsan::release(sg as usize);
        }
        // SAFETY: lock held: we own the links of every queued sudog.
        unsafe {
            // A sudog is on at most one wait queue, once.
            #[cfg(debug_assertions)]
            if !(*sg).next.get().is_null() || !(*sg).prev.get().is_null() || self.first == sg {
                rt::throw("waitq: sudog enqueued twice");
            }
            (*sg).next.set(null());
            (*sg).prev.set(self.last);
            if self.last.is_null() {
                self.first = sg;
            } else {
                (*self.last).next.set(sg);
            }
            self.last = sg;
        }
    }

    /// Calls `f` with every queued sudog, first to last.
    ///
    /// # Safety
    /// The channel lock is held.
    pub unsafe fn for_each(&self, mut f: impl FnMut(&Sudog)) {
        let mut sg = self.first;
        while !sg.is_null() {
            // SAFETY: lock held; queued sudogs are alive (module doc).
            unsafe {
                f(&*sg);
                sg = (*sg).next.get();
            }
        }
    }

    /// Takes the first sudog whose waiter this call claims; sudogs of waiters claimed by
    /// someone else (a select that completed elsewhere, a timeout) are dropped on the way.
    /// What the claimed sudog's owner did before it queued the sudog happens before what
    /// the caller does next, for ThreadSanitizer too (see `enqueue`).
    ///
    /// # Safety
    /// The channel lock is held.
    pub unsafe fn dequeue(&mut self) -> *const Sudog {
        // SAFETY: lock held; queued sudogs and their waiters are alive (module doc).
        unsafe {
            loop {
                let sg = self.first;
                if sg.is_null() {
                    return sg;
                }
                let next = (*sg).next.get();
                if next.is_null() {
                    self.first = null();
                    self.last = null();
                } else {
                    (*next).prev.set(null());
                    self.first = next;
                }
                (*sg).next.set(null());
                if (*(*sg).waiter.get()).claim_locked() {
                    if sys::tsan::on() {
                        sys::tsan::acquire(sg as usize);
                    }
                    return sg;
                }
            }
        }
    }

    /// Removes `sg` if it is still queued here (Go's dequeueSudoG).
    ///
    /// # Safety
    /// The channel lock is held; `sg` was enqueued on this queue (it may have been
    /// dequeued since: its links are then null).
    pub unsafe fn remove(&mut self, sg: *const Sudog) {
        // SAFETY: lock held.
        unsafe {
            let (x, y) = ((*sg).prev.get(), (*sg).next.get());
            if !x.is_null() {
                (*x).next.set(y);
            } else if self.first == sg {
                self.first = y;
            } else {
                // Not queued (taken off by a dequeue).
                return;
            }
            if !y.is_null() {
                (*y).prev.set(x);
            } else {
                self.last = x;
            }
            (*sg).next.set(null());
            (*sg).prev.set(null());
        }
    }
}

/// What `block` releases once its caller is parked: the channels' locks (`Chan`'s
/// implementation leaves the ring's exclusive mode on the way out).
pub(crate) trait Unlock {
    /// Releases the lock.
    ///
    /// # Safety
    /// The caller holds it.
    unsafe fn unlock(&self);

    /// Takes the lock and releases it at once: returns after whoever held it released it.
    ///
    /// # Safety
    /// The caller holds no lock.
    unsafe fn barrier(&self);
}

/// What gopark's unlock function needs (Go's chanparkcommit / selparkcommit). On the
/// parking goroutine's stack.
struct ParkCtx<L> {
    /// The locked channels, distinct, in ascending address order.
    locks: *const *const L,
    nlocks: usize,
    /// The timeout timer to arm, or null.
    timer: *mut Timer,
    when: i64,
    /// The wait to publish on the goroutine's scope (rt/scope.rs), or null.
    cancel: *const CancelWait,
}

/// gopark's unlock function: arms the timeout (now that the goroutine is parked, so it
/// cannot fire before), then releases the channel locks.
unsafe fn park_commit<L: Unlock>(_gp: *mut G, arg: usize) -> bool {
    // SAFETY: arg is the parking goroutine's ParkCtx. The goroutine cannot run again before
    // the last lock below is released (every waker, the timeout's included, ends with the
    // goroutine re-locking or a waker locking a channel we hold), and we read the context
    // only before that release.
    unsafe {
        let ctx = &*(arg as *const ParkCtx<L>);
        let (locks, n, t, when) = (ctx.locks, ctx.nlocks, ctx.timer, ctx.when);
        if !t.is_null() {
            // Lock order: channel locks → a P's timer lock. On g0, holding this M's P.
            timer::start(t, when);
        }
        if !ctx.cancel.is_null() {
            // Lock order: channel locks → the scope's lock.
            scope::arm(&*ctx.cancel);
        }
        for i in (0..n).rev() {
            (**locks.add(i)).unlock();
        }
    }
    true
}

/// The timeout timer's callback (runs with its heap lock held: must not block, must not
/// take a channel lock).
unsafe fn on_timeout(w: usize) {
    let w = w as *const Waiter;
    // SAFETY: the waiter stops this timer (timer::stop) before its frame dies, and stop
    // waits for a running callback, so w is alive here.
    unsafe {
        if (*w).claim() {
            rt::goready((*w).g);
        }
    }
}

/// A scope's cancel of a foreign thread's wait: claims it and wakes its note.
unsafe fn on_cancel_foreign(w: usize) {
    let w = w as *const Waiter;
    // SAFETY: the thread disarms its wait before its frame dies, and disarm waits for a
    // cancel in progress (it takes the scope's lock).
    unsafe {
        if (*w).claim() {
            (*w).note.wakeup();
        }
    }
}

/// Blocks the caller, whose sudogs are queued on the channels `locks` (all locked by the
/// caller, distinct, ascending), until a waker, the deadline or a cancel of scope `sc`
/// (null: none; the caller's current scope, whose deadline `deadline` already includes:
/// `scope::clamp`) claims `w`. Releases the locks. Returns true if a waker claimed it
/// (`w.fired` says which sudog), false if the deadline passed or the scope ended it (the
/// caller must then re-lock and remove its sudogs).
///
/// # Safety
/// `w` and its sudogs are on the caller's stack and queued; the caller holds exactly the
/// locks in `locks` and no other lock. `w` is not exclusive if `sc` is not null.
#[inline(always)]
pub(crate) unsafe fn block<L: Unlock>(
    w: &Waiter,
    locks: &[*const L],
    deadline: Option<i64>,
    reason: WaitReason,
    sc: *const Scope,
) -> bool {
    debug_assert!(sc.is_null() || !w.exclusive, "a scoped wait is exclusive");
    if w.g.is_null() {
        // SAFETY: caller contract: we hold these locks.
        unsafe {
            for &c in locks {
                (*c).unlock();
            }
        }
        let cw = CancelWait::new(sc, on_cancel_foreign, w as *const Waiter as usize);
        if !sc.is_null() {
            // SAFETY: cw lives in this frame until disarmed below; sc is our current scope.
            unsafe { scope::arm(&cw) };
        }
        // A foreign thread spins first only when its last wait was quick
        // (sys::foreign_wait).
        let woken = match deadline {
            None => {
                rt::foreignwait::foreign_sleep(&w.note, reason);
                true
            }
            Some(d) => {
                let left = d - sys::nanotime();
                left > 0
                    && w.note
                        .sleep_foreign(Some(Duration::from_nanos(left as u64)))
            }
        };
        let claimed = w.settle_foreign(woken, |note| {
            note.sleep_foreign(None);
        });
        if !sc.is_null() {
            // SAFETY: armed above.
            unsafe { scope::disarm(&cw) };
        }
        // A cancel claims as a timeout does, but wakes the note as a waker does.
        return claimed && !w.fired.load(Ordering::Acquire).is_null();
    }
    // Built only when there is a deadline (most waits have none).
    let mut t = MaybeUninit::<Timer>::uninit();
    let cw = CancelWait::new(sc, on_timeout, w as *const Waiter as usize);
    let ctx = ParkCtx {
        locks: locks.as_ptr(),
        nlocks: locks.len(),
        timer: if deadline.is_some() {
            t.write(Timer::new(on_timeout, w as *const Waiter as usize))
        } else {
            null_mut()
        },
        when: deadline.unwrap_or(0),
        cancel: if sc.is_null() { null() } else { &cw },
    };
    // SAFETY: on a goroutine (w.g non-null); our sudogs are queued under the locks that
    // park_commit releases, which are the only locks we hold.
    unsafe {
        rt::gopark(
            Some(park_commit::<L>),
            &ctx as *const ParkCtx<L> as usize,
            reason,
        )
    };
    if !sc.is_null() {
        if w.fired.load(Ordering::Acquire).is_null() {
            // Woken by the timer or a cancel, which need no channel lock: park_commit may
            // still be arming the other one. It releases locks[0] last, after both.
            // SAFETY: we hold no lock; the channel lives while our sudog is queued.
            unsafe { (*locks[0]).barrier() };
        }
        // After disarm returns, no cancel calls on_timeout for this wait.
        // SAFETY: park_commit armed it.
        unsafe { scope::disarm(&cw) };
    }
    if deadline.is_some() {
        // After stop returns, the callback is not running and never will: t may die.
        // SAFETY: t was initialised above (there is a deadline) and lives in this frame.
        unsafe { timer::stop(t.as_mut_ptr()) };
    }
    !w.fired.load(Ordering::Acquire).is_null()
}

/// Loom models of the claim ("The done flag" and "Lifetime" in `rt/sudog.rs`): the real
/// [`Waiter::claim`], [`Waiter::claim_locked`], [`Waiter::settle_foreign`] and [`Note`]
/// (over the model futex), with the rest restated step for step in loom's types, as the
/// timer model does — a channel is a mutex around its queue, a queued sudog is an entry
/// in it (every sudog here belongs to the one waiter), the timeout timer is a thread with
/// `timer::stop`'s three outcomes (cancelled before it ran, waited for while running,
/// already done).
///
/// The waiter's frame is a pair of loom `UnsafeCell`s: `got`, the receive buffer the
/// winner writes before its wake-up (the sudog's `elem`, and `fired`), and `alive`, which
/// every party that touches the waiter reads first (a waker holding a queued sudog, the
/// timeout's callback, the winner just before its wake-up) and the waiter writes when it
/// returns. So loom fails a model as a
/// data race when a claimant can touch the frame after the waiter returned, or when the
/// waiter can read its result without the wake-up ordering it; two winners fail the
/// `winners` check before either wakes anybody.
///
/// [`Note`]: crate::sys::Note
#[cfg(all(test, loom))]
mod loom_tests {
    use crate::loom::cell::UnsafeCell;
    use crate::loom::model;
    use crate::loom::sync::atomic::AtomicU32;
    use crate::loom::sync::{Arc, Condvar, Mutex};
    use crate::rt::sudog::Waiter;
    use crate::sys::loom_futex::{ModelFutex, model_note};
    use core::time::Duration;
    use std::sync::atomic::AtomicU32 as PlainU32;
    use std::sync::atomic::Ordering::{Acquire, Relaxed};

    type ModelWaiter = Waiter<AtomicU32, ModelFutex<1>>;

    /// A blocked operation's stack frame (see the module doc).
    struct Frame {
        w: ModelWaiter,
        got: UnsafeCell<u32>,
        /// `Waiter::fired` (loom's atomic here): the value the winning waker sent, 0 if
        /// the timeout won.
        fired: AtomicU32,
        alive: UnsafeCell<bool>,
        /// Claimants that won (plain: loom runs one thread at a time).
        winners: PlainU32,
    }

    // SAFETY: `w`'s raw pointer and `Cell`s are never used by these models (a foreign
    // waiter, no closer list); everything else in it is atomic or a loom cell.
    unsafe impl Sync for Frame {}
    // SAFETY: as above.
    unsafe impl Send for Frame {}

    impl Frame {
        fn new(exclusive: bool) -> Frame {
            Frame {
                w: Waiter {
                    g: core::ptr::null_mut(),
                    note: model_note(),
                    done: AtomicU32::new(0),
                    exclusive,
                    fired: Default::default(),
                    wake_link: Default::default(),
                },
                got: UnsafeCell::new(0),
                fired: AtomicU32::new(0),
                alive: UnsafeCell::new(true),
                winners: PlainU32::new(0),
            }
        }

        /// A party about to touch the waiter: the frame must still be alive.
        fn touch(&self) {
            // SAFETY: loom checks this read against the waiter's write when it returns.
            self.alive
                .with(|p| assert!(unsafe { *p }, "waiter touched after return"));
        }

        /// Counts a claim that succeeded; two winners fail here, before a second wake-up.
        fn won(&self) {
            assert_eq!(self.winners.fetch_add(1, Relaxed), 0, "two claimants won");
        }

        /// The waiter returns: its frame dies.
        fn die(&self) {
            // SAFETY: loom checks this write against every claimant's `touch`.
            self.alive.with_mut(|p| unsafe { *p = false });
        }
    }

    /// A channel: its lock around the number of (this waiter's) sudogs in its queue.
    struct Chan(Mutex<usize>);

    impl Chan {
        fn new(queued: usize) -> Chan {
            Chan(Mutex::new(queued))
        }

        fn lock(&self) -> crate::loom::sync::MutexGuard<'_, usize> {
            self.0.lock().unwrap()
        }
    }

    /// A sender of `v` on `ch` (a closer does the same to the waiter): WaitQ::dequeue
    /// (take the first sudog, claim its waiter or drop it), the transfer under the lock,
    /// the wake-up after it. True if it won the waiter.
    fn send(ch: &Chan, f: &Frame, v: u32) -> bool {
        let mut q = ch.lock();
        let mut won = false;
        while *q > 0 {
            *q -= 1;
            // A queued sudog's waiter is alive while its channel's lock is held.
            f.touch();
            if f.w.claim_locked() {
                f.won();
                // SAFETY: the winner alone writes the frame's buffer, before its wake-up.
                f.got.with_mut(|p| unsafe { *p = v });
                // relaxed, as `Chan::complete`: published by the wake-up's release.
                f.fired.store(v, Relaxed);
                won = true;
                break;
            }
        }
        drop(q);
        if won {
            // The winner may touch the waiter until its wake-up, its last access.
            f.touch();
            f.w.note.wakeup();
        }
        won
    }

    /// The timeout timer's state (rt/timer.rs, reduced to what `stop` promises).
    const PENDING: u8 = 0;
    const RUNNING: u8 = 1;
    const DONE: u8 = 2;
    const CANCELLED: u8 = 3;

    struct Timer {
        state: Mutex<u8>,
        cv: Condvar,
    }

    impl Timer {
        fn new() -> Timer {
            Timer {
                state: Mutex::new(PENDING),
                cv: Condvar::new(),
            }
        }

        /// The timer fires: `on_timeout` (claim, and wake if it won) unless stopped first.
        fn fire(&self, f: &Frame) {
            {
                let mut s = self.state.lock().unwrap();
                if *s != PENDING {
                    return;
                }
                *s = RUNNING;
            }
            f.touch();
            if f.w.claim() {
                f.won();
                f.touch();
                f.w.note.wakeup();
            }
            *self.state.lock().unwrap() = DONE;
            self.cv.notify_all();
        }

        /// `timer::stop`: cancels a pending timer, waits for a running callback.
        fn stop(&self) {
            let mut s = self.state.lock().unwrap();
            if *s == PENDING {
                *s = CANCELLED;
            }
            while *s == RUNNING {
                s = self.cv.wait(s).unwrap();
            }
        }
    }

    /// How a select gets off the queues of the cases that did not fire (pass 3).
    #[derive(Clone, Copy)]
    enum Pass3 {
        /// As `selectgo`: re-lock every channel, remove whatever sudog is still queued.
        RelockAll,
        /// Broken: when a waker claimed it, trust that nothing else will look at its
        /// other sudogs, and return at once.
        SkipWhenClaimed,
    }

    /// A select receiving from two channels with a deadline, against a sender on each
    /// and the timeout: `goroutine` parks and its timeout is a timer, a foreign thread
    /// sleeps on its note with a timeout and settles (`Waiter::settle_foreign`). Exactly
    /// one claimant wins; the waiter sees its value, or nothing if the timeout won; no
    /// claimant touches the frame after the waiter returns.
    fn select_two_with_deadline(goroutine: bool, pass3: Pass3) {
        model(move || {
            let f = Arc::new(Frame::new(false));
            let chans = Arc::new([Chan::new(0), Chan::new(0)]);
            // Pass 2: queue a sudog on each channel, under both locks (ascending).
            {
                let mut a = chans[0].lock();
                let mut b = chans[1].lock();
                *a += 1;
                *b += 1;
            }
            let senders: Vec<_> = (0..2)
                .map(|i| {
                    let (f, chans) = (f.clone(), chans.clone());
                    crate::loom::thread::spawn(move || send(&chans[i], &f, 10 + i as u32))
                })
                .collect();
            let timer = goroutine.then(|| {
                let t = Arc::new(Timer::new());
                let (t2, f2) = (t.clone(), f.clone());
                (t, crate::loom::thread::spawn(move || t2.fire(&f2)))
            });
            // Block.
            let claimed = match &timer {
                Some((t, _)) => {
                    f.w.note.sleep();
                    t.stop();
                    f.fired.load(Acquire) != 0
                }
                None => {
                    let woken = f.w.note.sleep_timeout(Some(Duration::from_millis(1)));
                    let claimed = f.w.settle_foreign(woken, |note| note.sleep());
                    if !claimed {
                        // Its own timeout claimed it.
                        f.won();
                    }
                    claimed
                }
            };
            // Pass 3.
            if claimed && matches!(pass3, Pass3::SkipWhenClaimed) {
                // (broken) return without looking at the other queue
            } else {
                let mut a = chans[0].lock();
                let mut b = chans[1].lock();
                *a = 0;
                *b = 0;
            }
            // SAFETY: woken by the winner (or our own timeout): ordered after its write.
            let got = f.got.with(|p| unsafe { *p });
            f.die();
            let won: Vec<bool> = senders.into_iter().map(|s| s.join().unwrap()).collect();
            if let Some((_, t)) = timer {
                t.join().unwrap();
            }
            assert_eq!(f.winners.load(Relaxed), 1, "nobody or several won");
            match won.iter().position(|&w| w) {
                Some(i) => {
                    assert!(claimed);
                    assert_eq!(got, 10 + i as u32);
                }
                None => {
                    assert!(!claimed, "claimed by nobody");
                    assert_eq!(got, 0);
                }
            }
        });
    }

    #[test]
    fn select_foreign_claim_is_unique() {
        select_two_with_deadline(false, Pass3::RelockAll);
    }

    #[test]
    fn select_goroutine_claim_is_unique() {
        select_two_with_deadline(true, Pass3::RelockAll);
    }

    /// Pass 3 cut short: the other channel's sender still holds our sudog and touches the
    /// frame after the select returned.
    #[test]
    #[should_panic(expected = "Causality violation")]
    fn select_broken_without_pass3() {
        select_two_with_deadline(false, Pass3::SkipWhenClaimed);
    }

    /// A plain receive: a sender and a closer on its one channel, and a timeout if
    /// `deadline` (then it is not exclusive: `Waiter::new(deadline.is_none())`, unless
    /// `broken` marks it exclusive anyway). Exactly one wins and the waiter sees it.
    fn plain_recv(deadline: bool, broken: bool) {
        model(move || {
            let f = Arc::new(Frame::new(!deadline || broken));
            let ch = Arc::new(Chan::new(1));
            let parties: Vec<_> = [10u32, 99]
                .into_iter()
                .map(|v| {
                    let (f, ch) = (f.clone(), ch.clone());
                    crate::loom::thread::spawn(move || send(&ch, &f, v))
                })
                .collect();
            let timer = deadline.then(|| {
                let t = Arc::new(Timer::new());
                let (t2, f2) = (t.clone(), f.clone());
                (t, crate::loom::thread::spawn(move || t2.fire(&f2)))
            });
            f.w.note.sleep();
            if let Some((t, _)) = &timer {
                t.stop();
                if f.fired.load(Acquire) == 0 {
                    // The timeout won: re-lock and take the sudog off the queue.
                    *ch.lock() = 0;
                }
            }
            // SAFETY: woken by the winner, whose write the wake-up ordered.
            let got = f.got.with(|p| unsafe { *p });
            f.die();
            let won: Vec<bool> = parties.into_iter().map(|s| s.join().unwrap()).collect();
            if let Some((_, t)) = timer {
                t.join().unwrap();
            }
            assert_eq!(f.winners.load(Relaxed), 1);
            match won.iter().position(|&w| w) {
                Some(i) => assert_eq!(got, [10, 99][i]),
                None => assert_eq!(got, 0),
            }
        });
    }

    /// The exclusive claim (a relaxed store): its claimants all hold the channel's lock.
    #[test]
    fn plain_recv_exclusive_claim() {
        plain_recv(false, false);
    }

    #[test]
    fn plain_recv_with_deadline_claim() {
        plain_recv(true, false);
    }

    /// An exclusive waiter with a timeout: the timer's CAS and a waker's store both win.
    #[test]
    #[should_panic(expected = "two claimants won")]
    fn plain_recv_broken_exclusive_with_deadline() {
        plain_recv(true, true);
    }
}
