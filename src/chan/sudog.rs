//! Waiters, sudogs and wait queues (Go's `sudog`, `waitq` and `g.selectDone`), and the one
//! function that blocks a caller on them (`block`).
//!
//! A blocked operation is one [`Waiter`] — the blocked goroutine or foreign thread — and one
//! [`Sudog`] per channel queue it sits on: one for a send or receive, one per enabled case
//! for a select. Both live **on the waiter's own stack** (a goroutine's or a thread's) for
//! as long as it waits, as `sync::sema` does; Go allocates sudogs from a per-P cache
//! instead, because a Go stack may move. Ours never moves, so the stack costs nothing and
//! needs no free list.
//!
//! # The done flag (Go's `g.selectDone`)
//! Several parties may try to complete one waiter: wakers on each channel it waits on (a
//! select), a closer, and its timeout (a timer callback, or the foreign thread's own
//! futex timeout). Exactly one wins, by CASing `Waiter.done` from 0 to 1:
//! - a waker CASes when it takes a sudog off a queue ([`WaitQ::dequeue`]); if the CAS fails
//!   the sudog is dropped from that queue and the next one is tried;
//! - the winner alone touches the waiter's buffers (the sudog's `elem`), records the sudog
//!   in `Waiter.fired` and then wakes the waiter — after releasing the channel lock;
//! - a timeout that wins leaves `fired` null and wakes the waiter, which then re-locks its
//!   channel(s) and takes its sudogs off whatever queues still hold them.
//!
//! # Lifetime
//! The waiter does not return (its stack frame stays alive) before (a) it was woken by the
//! party that won `done`, and (b) it has re-locked every channel whose queue may still hold
//! one of its sudogs and removed them. So a waker holding a channel lock may always touch a
//! queued sudog and its waiter; the winner may touch them until its wake-up call, which is
//! its last access.

use core::cell::Cell;
use core::ptr::null;
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use core::time::Duration;

use super::hchan::Chan;
use crate::rt::timer::{self, Timer};
use crate::rt::{self, G, WaitReason};
use crate::sys::{self, Note};

/// A blocked goroutine or foreign thread. Lives on its stack (see the module doc).
pub(crate) struct Waiter {
    /// The parked goroutine, or null for a foreign thread (which sleeps on `note`).
    pub g: *mut G,
    pub note: Note,
    /// 0 while nobody has claimed the waiter; 1 once a waker or the timeout has.
    pub done: AtomicU32,
    /// The sudog whose operation completed, written by the winning waker before its
    /// wake-up (the wake-up's release publishes it); null if the timeout won.
    pub fired: AtomicPtr<Sudog>,
    /// Link in a closer's list of waiters to wake once the channel lock is released.
    /// Owner: the closer that won `done`.
    pub wake_link: Cell<*const Waiter>,
}

impl Waiter {
    pub fn new() -> Waiter {
        Waiter {
            g: rt::getg(),
            note: Note::new(),
            done: AtomicU32::new(0),
            fired: AtomicPtr::new(core::ptr::null_mut()),
            wake_link: Cell::new(null()),
        }
    }

    /// Claims the waiter (CAS of `done` 0 → 1). acq-rel: the winner sees the waiter's
    /// set-up, and its later writes are ordered before its wake-up's release.
    pub fn claim(&self) -> bool {
        self.done
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// Wakes a waiter claimed by the caller. The caller holds no channel lock.
///
/// # Safety
/// `w` was claimed by the caller, who has not woken it yet; this is its last access to `w`.
pub(crate) unsafe fn wake(w: *const Waiter) {
    // SAFETY: caller contract: w is alive until woken, and we won `done`.
    unsafe {
        let g = (*w).g;
        if g.is_null() {
            (*w).note.wakeup();
        } else {
            // The goroutine is parked: it queued itself under a channel lock that gopark's
            // unlock function released after marking it waiting, and we took the lock since.
            rt::goready(g);
        }
    }
}

/// One waiter's place in one channel queue (Go's sudog).
pub(crate) struct Sudog {
    /// The waiter. Set before the sudog is queued.
    pub waiter: Cell<*const Waiter>,
    /// Send: the element to send; receive: where to store it (may be null: discard).
    pub elem: Cell<*mut u8>,
    /// The select case this sudog stands for (0 for a plain send/receive).
    pub case: Cell<usize>,
    /// Queue links. Owner: the holder of the channel's lock.
    pub next: Cell<*const Sudog>,
    pub prev: Cell<*const Sudog>,
    /// Written by the winning waker: true if the value was transferred, false if the
    /// channel was closed.
    pub success: Cell<bool>,
}

impl Sudog {
    pub fn new() -> Sudog {
        Sudog {
            waiter: Cell::new(null()),
            elem: Cell::new(core::ptr::null_mut()),
            case: Cell::new(0),
            next: Cell::new(null()),
            prev: Cell::new(null()),
            success: Cell::new(false),
        }
    }
}

/// A FIFO queue of sudogs (Go's waitq). Owner: the holder of its channel's lock.
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

    /// Appends `sg`.
    ///
    /// # Safety
    /// The channel lock is held; `sg` is on no queue and stays alive while queued.
    pub unsafe fn enqueue(&mut self, sg: *const Sudog) {
        // SAFETY: lock held: we own the links of every queued sudog.
        unsafe {
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

    /// Takes the first sudog whose waiter this call claims; sudogs of waiters claimed by
    /// someone else (a select that completed elsewhere, a timeout) are dropped on the way.
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
                if (*(*sg).waiter.get()).claim() {
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

/// What gopark's unlock function needs (Go's chanparkcommit / selparkcommit). On the
/// parking goroutine's stack.
struct ParkCtx {
    /// The locked channels, distinct, in ascending address order.
    locks: *const *const Chan,
    nlocks: usize,
    /// The timeout timer to arm, or null.
    timer: *mut Timer,
    when: i64,
}

/// gopark's unlock function: arms the timeout (now that the goroutine is parked, so it
/// cannot fire before), then releases the channel locks.
unsafe fn park_commit(_gp: *mut G, arg: usize) -> bool {
    // SAFETY: arg is the parking goroutine's ParkCtx. The goroutine cannot run again before
    // the last lock below is released (every waker, the timeout's included, ends with the
    // goroutine re-locking or a waker locking a channel we hold), and we read the context
    // only before that release.
    unsafe {
        let ctx = &*(arg as *const ParkCtx);
        let (locks, n, t, when) = (ctx.locks, ctx.nlocks, ctx.timer, ctx.when);
        if !t.is_null() {
            // Lock order: channel locks → a P's timer lock. On g0, holding this M's P.
            timer::start(t, when);
        }
        for i in (0..n).rev() {
            (**locks.add(i)).lock.unlock();
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

/// Blocks the caller, whose sudogs are queued on the channels `locks` (all locked by the
/// caller, distinct, ascending), until a waker or the deadline claims `w`. Releases the
/// locks. Returns true if a waker claimed it (`w.fired` says which sudog), false if the
/// deadline passed (the caller must then re-lock and remove its sudogs).
///
/// # Safety
/// `w` and its sudogs are on the caller's stack and queued; the caller holds exactly the
/// locks in `locks` and no other lock.
pub(crate) unsafe fn block(
    w: &Waiter,
    locks: &[*const Chan],
    deadline: Option<i64>,
    reason: WaitReason,
) -> bool {
    if w.g.is_null() {
        // SAFETY: caller contract: we hold these locks.
        unsafe {
            for &c in locks {
                (*c).lock.unlock();
            }
        }
        let woken = match deadline {
            None => {
                w.note.sleep();
                true
            }
            Some(d) => {
                let left = d - sys::nanotime();
                left > 0
                    && w.note
                        .sleep_timeout(Some(Duration::from_nanos(left as u64)))
            }
        };
        if !woken {
            if w.claim() {
                return false;
            }
            // A waker claimed us first and is about to wake the note.
            w.note.sleep();
        }
        w.note.clear();
        return true;
    }
    let mut t = Timer::new(on_timeout, w as *const Waiter as usize);
    let ctx = ParkCtx {
        locks: locks.as_ptr(),
        nlocks: locks.len(),
        timer: if deadline.is_some() {
            &mut t
        } else {
            core::ptr::null_mut()
        },
        when: deadline.unwrap_or(0),
    };
    // SAFETY: on a goroutine (w.g non-null); our sudogs are queued under the locks that
    // park_commit releases, which are the only locks we hold.
    unsafe { rt::gopark(Some(park_commit), &ctx as *const ParkCtx as usize, reason) };
    if deadline.is_some() {
        // After stop returns, the callback is not running and never will: t may die.
        // SAFETY: t is alive (this frame).
        unsafe { timer::stop(&mut t) };
    }
    !w.fired.load(Ordering::Acquire).is_null()
}
