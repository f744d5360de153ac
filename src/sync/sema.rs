//! An address-keyed semaphore (Go's runtime/sema.go): `semacquire(addr)` waits until
//! `*addr > 0` and decrements it; `semrelease(addr)` increments it and wakes one waiter.
//!
//! Waiters are kept in a fixed table of `SEMTAB_SIZE` roots hashed by address, each a FIFO
//! list under its own lock, so the semaphore word itself is just a `u32` in user memory
//! (inside a `gmp_wg`, for instance) and needs no initialisation.
//!
//! A waiter record lives on the waiter's own stack — a goroutine's or a foreign thread's —
//! for as long as it waits. A goroutine parks (gopark, the root's lock released by the
//! unlock function); a foreign thread sleeps on the record's futex [`Note`]. The releaser
//! takes the record off the list under the lock and reads what it needs *before* waking
//! the waiter, because the record dies as soon as the waiter runs again.
//!
//! # Mutex support: LIFO queueing and hand-off (Go's semacquire1/semrelease1)
//! - `lifo`: a waiter that has already waited once (the mutex re-queues a woken waiter that
//!   lost the race for the lock) goes to the head of the list, so it is the first of its
//!   address to be woken next time.
//! - `handoff`: the releaser takes the count on behalf of the waiter it dequeued (sets
//!   the waiter's `ticket`), so that no newcomer can steal it between the wakeup and the
//!   waiter running; a releasing goroutine then yields so that the waiter, which `goready`
//!   put in this P's `runnext`, runs at once and inherits the rest of the time slice (only
//!   a goroutine holding its P yields: not a foreign thread, nor a goroutine inside a
//!   blocking call, where switching is illegal). Go does this only in the mutex's
//!   starvation mode: otherwise another waiter may take the count while we yield, and the
//!   yield is wasted (Go issue 33747).
//!
//! # Invariants
//! - `root.nwait` counts the waiters on that root's list plus those about to enqueue; it is
//!   incremented before the waiter's last `can_acquire` (both under the lock), so a releaser
//!   that sees `nwait == 0` after its increment may skip the lock: no waiter can miss it.

use core::ptr::null_mut;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::rt::{self, G, Owned, WaitReason};
use crate::sys::{Lock, Note};

const SEMTAB_SIZE: usize = 251;

/// A waiter on the stack of the waiting goroutine or thread.
struct Waiter {
    addr: usize,
    /// The parked goroutine, or null for a foreign thread (which sleeps on `note`).
    g: *mut G,
    note: Note,
    /// 1 when the releaser took the count for us (hand-off). Written by the releaser after
    /// dequeueing us and before waking us (the wakeup publishes it); read by us after.
    ticket: AtomicU32,
    next: *mut Waiter,
    /// A wait its scope may end (`semacquire_scoped`): a releaser must then win `done`
    /// against the cancel before it wakes us.
    scoped: bool,
    /// 0 until a releaser or the cancel claims the wait (`scoped` waits only).
    done: AtomicU32,
    /// Whether it is parked yet: `PARK_NOT_YET`, `PARK_DONE` (gopark's unlock function),
    /// `PARK_CANCELLED` (the cancel claimed it before: the park is called off).
    parked: AtomicU32,
    /// Taken off the list by a releaser that lost `done` to the cancel. Written and read
    /// under the root's lock.
    dequeued: core::sync::atomic::AtomicBool,
}

impl Waiter {
    /// The calling goroutine's or thread's wait on `addr`; `scoped` as the field says.
    fn new(addr: &AtomicU32, scoped: bool) -> Waiter {
        Waiter {
            addr: addr as *const AtomicU32 as usize,
            g: rt::getg(),
            note: Note::new(),
            ticket: AtomicU32::new(0),
            next: null_mut(),
            scoped,
            done: AtomicU32::new(0),
            parked: AtomicU32::new(PARK_NOT_YET),
            dequeued: core::sync::atomic::AtomicBool::new(false),
        }
    }
}

const PARK_NOT_YET: u32 = 0;
const PARK_DONE: u32 = 1;
const PARK_CANCELLED: u32 = 2;

#[repr(align(64))]
struct SemaRoot {
    lock: Lock,
    nwait: AtomicU32,
    /// FIFO list of waiters. Owner: holder of `lock`.
    head: Owned<*mut Waiter>,
    tail: Owned<*mut Waiter>,
}

static SEMTABLE: [SemaRoot; SEMTAB_SIZE] = [const {
    SemaRoot {
        lock: Lock::new(crate::sys::Rank::SemaRoot),
        nwait: AtomicU32::new(0),
        head: Owned::new(null_mut()),
        tail: Owned::new(null_mut()),
    }
}; SEMTAB_SIZE];

fn root(addr: &AtomicU32) -> &'static SemaRoot {
    root_of(addr as *const AtomicU32 as usize)
}

/// Decrements `*addr` if it is positive.
fn can_acquire(addr: &AtomicU32) -> bool {
    let mut v = addr.load(Ordering::Acquire);
    while v != 0 {
        // acquire: pairs with the release increment in semrelease.
        match addr.compare_exchange_weak(v, v - 1, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(cur) => v = cur,
        }
    }
    false
}

impl SemaRoot {
    /// # Safety
    /// Lock held; `w` lives until it is dequeued.
    unsafe fn enqueue(&self, w: *mut Waiter, lifo: bool) {
        // SAFETY: we hold the lock, the owner of head/tail and of queued waiters' links.
        unsafe {
            if lifo {
                // At the head of the whole list, hence first among the waiters for its
                // address (dequeue takes the first match).
                (*w).next = self.head.get();
                if (*w).next.is_null() {
                    self.tail.set(w);
                }
                self.head.set(w);
                return;
            }
            (*w).next = null_mut();
            let tail = self.tail.get();
            if tail.is_null() {
                self.head.set(w);
            } else {
                (*tail).next = w;
            }
            self.tail.set(w);
        }
    }

    /// Takes waiter `w` off the list if it is on it.
    ///
    /// # Safety
    /// Lock held.
    unsafe fn remove(&self, w: *mut Waiter) -> bool {
        // SAFETY: caller contract.
        !unsafe { self.unlink_first(|cur| cur == w) }.is_null()
    }

    /// Removes the first waiter for `addr`.
    ///
    /// # Safety
    /// Lock held.
    unsafe fn dequeue(&self, addr: usize) -> *mut Waiter {
        // SAFETY: caller contract; `matches` reads waiters on the list, alive.
        unsafe { self.unlink_first(|cur| (*cur).addr == addr) }
    }

    /// Takes the first waiter for which `matches` holds off the list; null if none does.
    ///
    /// # Safety
    /// Lock held.
    unsafe fn unlink_first(&self, matches: impl Fn(*mut Waiter) -> bool) -> *mut Waiter {
        // SAFETY: we hold the lock; every queued waiter is alive until dequeued.
        unsafe {
            let mut prev: *mut Waiter = null_mut();
            let mut cur = self.head.get();
            while !cur.is_null() {
                if matches(cur) {
                    let next = (*cur).next;
                    if prev.is_null() {
                        self.head.set(next);
                    } else {
                        (*prev).next = next;
                    }
                    if self.tail.get() == cur {
                        self.tail.set(prev);
                    }
                    return cur;
                }
                prev = cur;
                cur = (*cur).next;
            }
        }
        null_mut()
    }
}

/// gopark's unlock function: releases the root's lock once the goroutine is parked.
unsafe fn unlock_root(_gp: *mut G, arg: usize) -> bool {
    // SAFETY: arg is the address of a static SemaRoot whose lock the parking goroutine took.
    unsafe { (*(arg as *const SemaRoot)).lock.unlock() };
    true
}

/// gopark's unlock function of a scoped wait: marks it parked (or calls the park off if
/// the cancel claimed it first), then releases the root's lock.
unsafe fn unlock_root_scoped(_gp: *mut G, arg: usize) -> bool {
    // SAFETY: arg is the parking goroutine's Waiter, alive until it runs again, which
    // needs the lock released below or a wake-up after it.
    unsafe {
        let w = &*(arg as *const Waiter);
        let root = root_of(w.addr);
        let prev = w.parked.swap(PARK_DONE, Ordering::AcqRel);
        root.lock.unlock();
        prev != PARK_CANCELLED
    }
}

fn root_of(addr: usize) -> &'static SemaRoot {
    &SEMTABLE[(addr >> 3) % SEMTAB_SIZE]
}

/// The scope's cancel of a scoped wait (rt/scope.rs; its lock held): claims the wait and
/// wakes the waiter, or, not parked yet, calls its park off.
unsafe fn cancel_wait(arg: usize) {
    // SAFETY: the waiter disarms (taking the scope's lock, which our caller holds) before
    // its frame dies.
    unsafe {
        let w = &*(arg as *const Waiter);
        if w.done
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        if w.g.is_null() {
            w.note.wakeup();
        } else if w.parked.swap(PARK_CANCELLED, Ordering::AcqRel) == PARK_DONE {
            rt::goready(w.g);
        }
    }
}

/// `semacquire1` (not lifo) for a wait its caller's scope ends (rt/scope.rs): Ok once the
/// count was taken, Err(errno) once the scope ended the wait first (the count untouched).
/// Without a scope, `semacquire1`.
pub fn semacquire_scoped(addr: &AtomicU32, reason: WaitReason) -> Result<(), i32> {
    let sc = rt::scope::current();
    if sc.is_null() {
        semacquire1(addr, false, reason);
        return Ok(());
    }
    semacquire_in(addr, reason, sc)
}

/// `semacquire_scoped` in scope `sc`: a frame of its own, so that an unscoped wait (on a
/// small goroutine stack) does not carry this one's records.
#[inline(never)]
fn semacquire_in(
    addr: &AtomicU32,
    reason: WaitReason,
    sc: *const rt::scope::Scope,
) -> Result<(), i32> {
    if can_acquire(addr) {
        return Ok(());
    }
    let root = root(addr);
    loop {
        let mut w = Waiter::new(addr, true);
        let wp = &mut w as *mut Waiter;
        let cw = rt::scope::CancelWait::new(sc, cancel_wait, wp as usize);
        // SAFETY: cw and w live in this frame until disarmed below; sc is our current
        // scope. Armed before the root's lock: the cancel takes no root lock.
        unsafe { rt::scope::arm(&cw) };
        root.lock.lock();
        root.nwait.fetch_add(1, Ordering::SeqCst);
        if can_acquire(addr) {
            root.nwait.fetch_sub(1, Ordering::SeqCst);
            root.lock.unlock();
            // SAFETY: armed above.
            unsafe { rt::scope::disarm(&cw) };
            // A cancel that claimed meanwhile changes nothing: the count is ours.
            return Ok(());
        }
        // SAFETY: lock held; w lives until a releaser dequeued it or we removed it.
        unsafe { root.enqueue(wp, false) };
        if w.g.is_null() {
            root.lock.unlock();
            rt::foreignwait::foreign_sleep(&w.note, reason);
        } else {
            // SAFETY: on a goroutine; we are on the root's queue, and the unlock function
            // releases the one lock we hold.
            unsafe { rt::gopark(Some(unlock_root_scoped), wp as usize, reason) };
        }
        // Woken by a releaser that won `done`, or by the cancel (or the park called off).
        // SAFETY: armed above; after this no cancel touches w.
        unsafe { rt::scope::disarm(&cw) };
        root.lock.lock();
        // Still queued if the cancel won and no releaser took us off since.
        // SAFETY: lock held.
        if !w.dequeued.load(Ordering::Relaxed) && unsafe { root.remove(wp) } {
            root.nwait.fetch_sub(1, Ordering::SeqCst);
        }
        root.lock.unlock();
        // A releaser that won woke us for the count it added (someone may have taken it
        // first: then we wait again, as semacquire1 does); the count may also be there
        // after a cancel, and is then ours as for any wait that need not wait.
        if w.ticket.load(Ordering::Acquire) != 0 || can_acquire(addr) {
            return Ok(());
        }
        // SAFETY: our current scope is live.
        let e = unsafe { rt::scope::err(sc) };
        if e != 0 {
            return Err(e);
        }
    }
}

/// Waits until `*addr > 0`, then decrements it (Go's semacquire1). Parks a goroutine;
/// sleeps a foreign thread. FIFO among the waiters for `addr`, unless `lifo`: queue at the
/// head of them (the mutex passes true for a waiter that has already waited, see the
/// module doc). Returns once the count was decremented for us — by us, or by a hand-off
/// releaser. (The primitives reach it through `SemaWord`.)
pub fn semacquire1(addr: &AtomicU32, lifo: bool, reason: WaitReason) {
    semacquire_inner(addr, lifo, reason);
    if crate::sys::tsan::on() {
        crate::sys::tsan::acquire(addr as *const AtomicU32 as usize);
    }
}

fn semacquire_inner(addr: &AtomicU32, lifo: bool, reason: WaitReason) {
    if can_acquire(addr) {
        return;
    }
    let root = root(addr);
    let mut w = Waiter::new(addr, false);
    loop {
        root.lock.lock();
        // Count ourselves before the last check, so a concurrent semrelease either sees
        // nwait > 0 or its increment is visible to our can_acquire (SeqCst: StoreLoad).
        root.nwait.fetch_add(1, Ordering::SeqCst);
        if can_acquire(addr) {
            root.nwait.fetch_sub(1, Ordering::SeqCst);
            root.lock.unlock();
            return;
        }
        // SAFETY: lock held; w lives on our stack until a releaser dequeues it, and we do
        // not return before that (we wait for its wakeup below).
        unsafe { root.enqueue(&mut w, lifo) };
        if w.g.is_null() {
            root.lock.unlock();
            rt::foreignwait::foreign_sleep(&w.note, reason);
            w.note.clear();
        } else {
            // SAFETY: on a goroutine (w.g non-null); we are on the root's queue, and the
            // unlock function releases the one lock we hold.
            unsafe { rt::gopark(Some(unlock_root), root as *const SemaRoot as usize, reason) };
        }
        // acquire: pairs with the releaser's store (also ordered by the wakeup itself).
        if w.ticket.load(Ordering::Acquire) != 0 || can_acquire(addr) {
            return;
        }
        // Someone else took the count first (no hand-off): wait again.
    }
}

/// Increments `*addr` and wakes one waiter, if any. With `handoff` (the mutex in
/// starvation mode), the count goes straight to that waiter, and a releasing goroutine
/// yields its P to it (see the module doc).
pub fn semrelease1(addr: &AtomicU32, handoff: bool) {
    if crate::sys::tsan::on() {
        crate::sys::tsan::release(addr as *const AtomicU32 as usize);
    }
    // release: publishes the releaser's writes to the acquirer (pairs with can_acquire).
    // SeqCst: the StoreLoad before reading nwait (pairs with semacquire's increment).
    addr.fetch_add(1, Ordering::SeqCst);
    let root = root(addr);
    if root.nwait.load(Ordering::SeqCst) == 0 {
        return;
    }
    root.lock.lock();
    if root.nwait.load(Ordering::SeqCst) == 0 {
        root.lock.unlock();
        return;
    }
    let w = loop {
        // SAFETY: lock held.
        let w = unsafe { root.dequeue(addr as *const AtomicU32 as usize) };
        if w.is_null() {
            root.lock.unlock();
            return;
        }
        root.nwait.fetch_sub(1, Ordering::SeqCst);
        // SAFETY: a waiter is alive while on the list, and while we hold the lock after
        // taking it off (a cancelled one removes itself, or finds it was, under the lock).
        unsafe {
            if !(*w).scoped
                || (*w)
                    .done
                    .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                break w;
            }
            // Its scope ended the wait first: the count goes to the next waiter.
            (*w).dequeued.store(true, Ordering::Relaxed);
        }
    };
    root.lock.unlock();
    // Everything we need from the waiter is read or written before waking it: its record
    // dies once it runs.
    // SAFETY: we dequeued w under the lock, so it is ours alone until the wakeup below,
    // and its owner does not return before that wakeup.
    let (g, ticket) = unsafe { ((*w).g, &(*w).ticket) };
    if ticket.load(Ordering::Relaxed) != 0 {
        rt::throw("corrupted semaphore ticket");
    }
    let handed = handoff && can_acquire(addr);
    if handed {
        // Published by the wakeup below (note release / goready's queue release).
        ticket.store(1, Ordering::Release);
    }
    if g.is_null() {
        // SAFETY: the waiter sleeps on its note until this wakeup, so w is alive.
        unsafe { (*w).note.wakeup() };
    } else {
        // SAFETY: g is parked (gopark published it only after marking it waiting and the
        // unlock function released the lock we then took), and we dequeued it, so we alone
        // ready it.
        unsafe { rt::goready(g) };
    }
    if handed && rt::syscall::holds_p() {
        // Direct hand-off: goready put the waiter in our P's runnext; yielding (to the back
        // of our P's queue, Go's goyield) runs it now. A foreign thread has no P to give,
        // nor has a goroutine inside a blocking call (an unlock in a gmp_blocking
        // function): it must not switch there, and goready sent the waiter to the global
        // queue. (Go hands off only from a running goroutine; its syscalls run no user
        // code that could unlock.)
        rt::gosched();
    }
}
