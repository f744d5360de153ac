//! Go's sync.Cond over a C struct (`gmp_cond`), built on the runtime's notifyList
//! (Go's runtime/sema.go, notifyList*): a ticket-based FIFO of waiters.
//!
//! # Protocol
//! - `wait` is the next ticket to hand out. A waiter takes one (`add`, an atomic
//!   increment) while it still holds the user's mutex, then unlocks the mutex and blocks
//!   on its ticket (`wait_ticket`). Taking the ticket before unlocking is what makes a
//!   signal sent after the unlock count for this waiter even if it has not queued yet.
//! - `notify` is the next ticket to wake. `notify_one` wakes ticket `notify` and advances
//!   it; `notify_all` sets it to `wait`. A waiter that finds its ticket already below
//!   `notify` when it gets to the list returns at once (it was signalled in between).
//! - Tickets compare modulo 2^32 ([`less`]): fine while fewer than 2^31 waiters are
//!   outstanding at once.
//!
//! # The list and its lock
//! `head`/`tail` link the waiter records, which live on the waiters' own stacks (a
//! goroutine's or a foreign thread's) while they wait. They and `notify`'s writes are
//! guarded by `lock`, a `uint32_t` inside the C struct; [`ListLock`] is a small futex lock
//! over that word (Drepper's "mutex 2", as [`crate::sys::Lock`], which cannot be placed
//! over C memory). A goroutine parks with the lock still held and `gopark`'s unlock
//! function releases it on the scheduler stack, so a notifier that finds the record on the
//! list knows the goroutine is parked and may `goready` it. A notifier removes records
//! under the lock and reads everything it needs from a record before waking its owner.
//!
//! Go's Cond also panics when copied after first use (copyChecker); a C struct cannot be
//! tracked that way, and copying a `gmp_cond` in use is undefined, as the header says.

use core::ffi::c_void;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use crate::rt::{self, G, WaitReason};
use crate::sys::{Note, futex, procyield};

/// Whether ticket `a` comes before ticket `b` (modulo 2^32).
fn less(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
/// Locked, and a thread may sleep in FUTEX_WAIT: unlock must wake one.
const CONTENDED: u32 = 2;

/// Polls of a held list lock before sleeping: the critical sections are a few list
/// operations (tens of ns), so 100 × 4 reference pauses (`procyield`, calibrated: ~10 µs)
/// nearly always suffice.
const LIST_LOCK_SPINS: u32 = 100;
const LIST_LOCK_SPIN_PAUSES: u32 = 4;

/// A futex lock over the `lock` word of a `gmp_cond`. Never held across a goroutine switch
/// except into `gopark`, whose unlock function releases it.
struct ListLock<'a>(&'a AtomicU32);

impl ListLock<'_> {
    fn lock(&self) {
        // acquire: pairs with the release in `unlock`.
        if self
            .0
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
        for _ in 0..LIST_LOCK_SPINS {
            if self.0.load(Ordering::Relaxed) == UNLOCKED
                && self
                    .0
                    .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            procyield(LIST_LOCK_SPIN_PAUSES);
        }
        // Once we may sleep we take it as CONTENDED, so our unlock wakes whoever queued
        // behind us.
        while self.0.swap(CONTENDED, Ordering::Acquire) != UNLOCKED {
            futex::wait(self.0, CONTENDED, None);
        }
    }

    fn unlock(&self) {
        // release: publishes the list changes; pairs with the acquire in `lock`.
        match self.0.swap(UNLOCKED, Ordering::Release) {
            LOCKED => {}
            CONTENDED => futex::wake(self.0, 1),
            _ => rt::throw("sync: unlock of unlocked cond list lock"),
        }
    }
}

/// A waiter record, on the stack of the waiting goroutine or thread. Opaque outside this
/// module; `pub` only because the list's head/tail pointers name it.
pub struct NotifyWaiter {
    /// The parked goroutine, or null for a foreign thread (which sleeps on `note`).
    g: *mut G,
    note: Note,
    ticket: u32,
    /// Next record on the list. Owner: holder of the list lock (atomic only so that the
    /// record is shared through `&`).
    next: AtomicPtr<NotifyWaiter>,
}

/// The words of a `gmp_cond`.
pub struct NotifyList<'a> {
    /// Next ticket to hand out. Atomic, no lock.
    pub wait: &'a AtomicU32,
    /// Next ticket to wake. Written under `lock`; read without it as a hint.
    pub notify: &'a AtomicU32,
    /// The list lock word (see [`ListLock`]).
    pub lock: &'a AtomicU32,
    /// FIFO of waiter records. Owner: holder of `lock`.
    pub head: &'a AtomicPtr<NotifyWaiter>,
    pub tail: &'a AtomicPtr<NotifyWaiter>,
}

/// gopark's unlock function: releases the list lock once the goroutine is parked.
unsafe fn unlock_list(_gp: *mut G, arg: usize) -> bool {
    // SAFETY: arg is the address of the lock word of the gmp_cond the goroutine waits on,
    // which stays alive while it has waiters (header contract); the goroutine took the lock.
    ListLock(unsafe { &*(arg as *const AtomicU32) }).unlock();
    true
}

/// Wakes the owner of a record the caller removed from the list.
///
/// # Safety
/// `w` was dequeued by the caller (under the lock) and not yet woken.
unsafe fn wake(w: *const NotifyWaiter) {
    // SAFETY: caller contract: the owner waits for this wakeup, so the record is alive.
    let g = unsafe { (*w).g };
    if g.is_null() {
        // SAFETY: as above; the record may die as soon as the note is woken.
        unsafe { (*w).note.wakeup() };
    } else {
        // SAFETY: g parked with the list lock held and its unlock function released it,
        // so g is WAITING; we removed its record, so we alone ready it.
        unsafe { rt::goready(g) };
    }
}

impl NotifyList<'_> {
    /// Takes the next ticket (Go's notifyListAdd). Called with the user's mutex held.
    pub fn add(&self) -> u32 {
        // SeqCst: orders the ticket before the caller's unlock and against the notifiers'
        // lock-free `wait == notify` check.
        self.wait.fetch_add(1, Ordering::SeqCst)
    }

    /// Blocks until ticket `t` is notified (Go's notifyListWait). Returns at once if it
    /// already was.
    pub fn wait_ticket(&self, t: u32) {
        let lock = ListLock(self.lock);
        lock.lock();
        if less(t, self.notify.load(Ordering::Relaxed)) {
            lock.unlock();
            return;
        }
        let w = NotifyWaiter {
            g: rt::getg(),
            note: Note::new(),
            ticket: t,
            next: AtomicPtr::new(null_mut()),
        };
        let wp = &w as *const NotifyWaiter as *mut NotifyWaiter;
        // Relaxed under the lock: the lock orders these accesses.
        let tail = self.tail.load(Ordering::Relaxed);
        if tail.is_null() {
            self.head.store(wp, Ordering::Relaxed);
        } else {
            // SAFETY: records on the list are alive until dequeued; we hold the lock.
            unsafe { (*tail).next.store(wp, Ordering::Relaxed) };
        }
        self.tail.store(wp, Ordering::Relaxed);
        if w.g.is_null() {
            lock.unlock();
            // A notifier dequeues us and then wakes the note; we return only after that.
            rt::checkdead::foreign_sleep(&w.note, WaitReason::Semacquire);
        } else {
            // SAFETY: on a goroutine; our record is on the list, and the unlock function
            // releases the one lock we hold.
            unsafe {
                rt::gopark(
                    Some(unlock_list),
                    self.lock as *const AtomicU32 as usize,
                    WaitReason::Semacquire,
                )
            };
        }
    }

    /// Wakes the waiter with the oldest unnotified ticket, if any (Go's
    /// notifyListNotifyOne).
    pub fn notify_one(&self) {
        // Fast path: no ticket outstanding. A waiter whose `add` we miss took its ticket
        // after this check and will not block on a ticket below `notify`.
        if self.wait.load(Ordering::SeqCst) == self.notify.load(Ordering::SeqCst) {
            return;
        }
        let lock = ListLock(self.lock);
        lock.lock();
        let t = self.notify.load(Ordering::Relaxed);
        if t == self.wait.load(Ordering::SeqCst) {
            lock.unlock();
            return;
        }
        // Ticket t is notified now, whether or not its owner has queued yet: one that has
        // not will see it in wait_ticket and return at once.
        self.notify.store(t.wrapping_add(1), Ordering::SeqCst);
        let mut prev: *mut NotifyWaiter = null_mut();
        let mut cur = self.head.load(Ordering::Relaxed);
        while !cur.is_null() {
            // SAFETY: lock held; records on the list are alive until dequeued.
            let (ticket, next) = unsafe { ((*cur).ticket, (*cur).next.load(Ordering::Relaxed)) };
            if ticket == t {
                if prev.is_null() {
                    self.head.store(next, Ordering::Relaxed);
                } else {
                    // SAFETY: as above.
                    unsafe { (*prev).next.store(next, Ordering::Relaxed) };
                }
                if next.is_null() {
                    self.tail.store(prev, Ordering::Relaxed);
                }
                lock.unlock();
                // SAFETY: we dequeued cur under the lock and have not woken it.
                unsafe { wake(cur) };
                return;
            }
            prev = cur;
            cur = next;
        }
        lock.unlock();
    }

    /// Wakes every waiter that holds a ticket (Go's notifyListNotifyAll).
    pub fn notify_all(&self) {
        if self.wait.load(Ordering::SeqCst) == self.notify.load(Ordering::SeqCst) {
            return;
        }
        let lock = ListLock(self.lock);
        lock.lock();
        let mut cur = self.head.swap(null_mut(), Ordering::Relaxed);
        self.tail.store(null_mut(), Ordering::Relaxed);
        self.notify
            .store(self.wait.load(Ordering::SeqCst), Ordering::SeqCst);
        lock.unlock();
        // The detached records are ours: no one else can reach them.
        while !cur.is_null() {
            // SAFETY: cur was on the list we detached and is not woken yet; read its
            // successor before waking it (the record dies once its owner runs).
            let next = unsafe { (*cur).next.load(Ordering::Relaxed) };
            // SAFETY: as above.
            unsafe { wake(cur) };
            cur = next;
        }
    }
}

/// Reinterprets the `void *` head/tail fields of a `gmp_cond`.
///
/// # Safety
/// `p` is valid and aligned for the returned lifetime, and all concurrent access to it
/// goes through atomics.
pub unsafe fn list_ptr<'a>(p: *mut *mut c_void) -> &'a AtomicPtr<NotifyWaiter> {
    // SAFETY: caller contract; *mut c_void and *mut NotifyWaiter have the same layout.
    unsafe { AtomicPtr::from_ptr(p.cast::<*mut NotifyWaiter>()) }
}
