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
    next: *mut Waiter,
}

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
        lock: Lock::new(),
        nwait: AtomicU32::new(0),
        head: Owned::new(null_mut()),
        tail: Owned::new(null_mut()),
    }
}; SEMTAB_SIZE];

fn root(addr: &AtomicU32) -> &'static SemaRoot {
    &SEMTABLE[(addr as *const AtomicU32 as usize >> 3) % SEMTAB_SIZE]
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
    unsafe fn enqueue(&self, w: *mut Waiter) {
        // SAFETY: we hold the lock, the owner of head/tail and of queued waiters' links.
        unsafe {
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

    /// Removes the first waiter for `addr`.
    ///
    /// # Safety
    /// Lock held.
    unsafe fn dequeue(&self, addr: usize) -> *mut Waiter {
        // SAFETY: we hold the lock; every queued waiter is alive until dequeued.
        unsafe {
            let mut prev: *mut Waiter = null_mut();
            let mut cur = self.head.get();
            while !cur.is_null() {
                if (*cur).addr == addr {
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

/// Waits until `*addr > 0`, then decrements it. Parks a goroutine; sleeps a foreign thread.
pub fn semacquire(addr: &AtomicU32, reason: WaitReason) {
    if can_acquire(addr) {
        return;
    }
    let root = root(addr);
    let mut w = Waiter {
        addr: addr as *const AtomicU32 as usize,
        g: rt::getg(),
        note: Note::new(),
        next: null_mut(),
    };
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
        unsafe { root.enqueue(&mut w) };
        if w.g.is_null() {
            root.lock.unlock();
            w.note.sleep();
            w.note.clear();
        } else {
            // SAFETY: on a goroutine (w.g non-null); we are on the root's queue, and the
            // unlock function releases the one lock we hold.
            unsafe { rt::gopark(Some(unlock_root), root as *const SemaRoot as usize, reason) };
        }
        if can_acquire(addr) {
            return;
        }
        // Someone else took the count first (no hand-off): wait again.
    }
}

/// Increments `*addr` and wakes one waiter, if any.
pub fn semrelease(addr: &AtomicU32) {
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
    // SAFETY: lock held.
    let w = unsafe { root.dequeue(addr as *const AtomicU32 as usize) };
    if w.is_null() {
        root.lock.unlock();
        return;
    }
    root.nwait.fetch_sub(1, Ordering::SeqCst);
    // Read the waiter before waking it: its record dies once it runs.
    // SAFETY: w was on the queue, so it is alive; we just removed it under the lock, so it
    // is ours until the wakeup below.
    let g = unsafe { (*w).g };
    if g.is_null() {
        // The note outlives the lock release: the waiter sleeps until this wakeup.
        root.lock.unlock();
        // SAFETY: the waiter does not return before this wakeup, so w is alive.
        unsafe { (*w).note.wakeup() };
    } else {
        root.lock.unlock();
        // SAFETY: g is parked (gopark published it only after marking it waiting and the
        // unlock function released the lock we then took), and we dequeued it, so we alone
        // ready it.
        unsafe { rt::goready(g) };
    }
}
