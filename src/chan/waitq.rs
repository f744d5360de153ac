//! Wait queues (Go's `waitq`, chan.go) and the one function that blocks a caller on them
//! (`block`). The waiters and sudogs themselves, their `done` flag and their caches, are the
//! runtime's (`rt/sudog.rs`, where the protocol is described).

use core::mem::MaybeUninit;
use core::ptr::{null, null_mut};
use core::sync::atomic::Ordering;
use core::time::Duration;

use super::hchan::Chan;
use crate::rt::sudog::{Sudog, Waiter};
use crate::rt::timer::{self, Timer};
use crate::rt::{self, G, WaitReason};
use crate::sys;

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

    /// Whether no sudog is queued (stale ones included).
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.first.is_null()
    }

    /// Appends `sg`.
    ///
    /// # Safety
    /// The channel lock is held; `sg` is on no queue and stays alive while queued.
    pub unsafe fn enqueue(&mut self, sg: *const Sudog) {
        // SAFETY: lock held: we own the links of every queued sudog.
        unsafe {
            // Seed 003 invariant 4, for sudogs: a sudog is on at most one queue, once.
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
                if (*(*sg).waiter.get()).claim_locked() {
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
        // A foreign thread spins first only when its last wait was quick
        // (sys::foreign_wait).
        let woken = match deadline {
            None => {
                rt::checkdead::foreign_sleep(&w.note, reason);
                true
            }
            Some(d) => {
                let left = d - sys::nanotime();
                left > 0
                    && w.note
                        .sleep_foreign(Some(Duration::from_nanos(left as u64)))
            }
        };
        if !woken {
            if w.claim() {
                return false;
            }
            // A waker claimed us first and is about to wake the note.
            w.note.sleep_foreign(None);
        }
        w.note.clear();
        return true;
    }
    // Built only when there is a deadline (most waits have none).
    let mut t = MaybeUninit::<Timer>::uninit();
    let ctx = ParkCtx {
        locks: locks.as_ptr(),
        nlocks: locks.len(),
        timer: if deadline.is_some() {
            t.write(Timer::new(on_timeout, w as *const Waiter as usize))
        } else {
            null_mut()
        },
        when: deadline.unwrap_or(0),
    };
    // SAFETY: on a goroutine (w.g non-null); our sudogs are queued under the locks that
    // park_commit releases, which are the only locks we hold.
    unsafe { rt::gopark(Some(park_commit), &ctx as *const ParkCtx as usize, reason) };
    if deadline.is_some() {
        // After stop returns, the callback is not running and never will: t may die.
        // SAFETY: t was initialised above (there is a deadline) and lives in this frame.
        unsafe { timer::stop(t.as_mut_ptr()) };
    }
    !w.fired.load(Ordering::Acquire).is_null()
}
