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
//! # Ghosts: scoped waits whose count someone must still consume
//! A scoped wait (`semacquire_scoped*`) that its scope ends returns at once. For the
//! WaitGroup that is all: a release that reaches it passes the count to the next waiter.
//! The mutex and the rwmutex keep waiter counts of their own beside the semaphore, and an
//! unlocker may already have counted a release for the wait (taken its waiter off the
//! state word, set WOKEN, handed the lock over in starvation mode) before the cancel won.
//! Such a wait gives a [`Ghost`]: what its owner would have done, woken, without wanting
//! the lock any more (give WOKEN back and wake another; take the handed lock and unlock
//! it; leave as a reader). The cancelled waiter leaves the ghost in its place in the
//! queue, on the heap (or, if a releaser dequeued it between the cancel and its return,
//! that releaser keeps the ghost). A release that reaches a ghost takes the count for it
//! (or re-queues it at the head if another waiter took the count first, as a woken waiter
//! waits again) and runs it after dropping the root's lock; a ghost that asks for another
//! release of the same address is served in the same loop, so a chain of ghosts costs no
//! stack. The waiter counts of the primitive thus stay exact: every unit of them belongs
//! to a live waiter or a ghost on the queue (HACKING.md, "Scoped waits").
//!
//! # Invariants
//! - `root.nwait` counts the waiters on that root's list plus those about to enqueue; it is
//!   incremented before the waiter's last `can_acquire` (both under the lock), so a releaser
//!   that sees `nwait == 0` after its increment may skip the lock: no waiter can miss it.

use core::ptr::null_mut;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::rt::scopecall::{WaitDeadline, foreign_sleep_scoped};
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
    /// What a cancelled scoped wait leaves in its place (module doc, "Ghosts"); for a
    /// ghost record, its action.
    ghost: Option<Ghost>,
    /// A ghost record: on the heap, no waiter behind it; owned by the list, then by the
    /// releaser that dequeues it.
    heap: bool,
}

/// The action of a cancelled mutex or rwmutex wait (module doc, "Ghosts"): `act(&args)`
/// runs once a release reached it and took the count for it, and does what the woken
/// waiter would have done, short of keeping the lock. It returns `Some(handoff)` when
/// that means releasing the same semaphore again (the caller's loop does it), or `None`.
#[derive(Clone, Copy)]
pub struct Ghost {
    pub act: unsafe fn(&[usize; 4]) -> Option<bool>,
    /// The addresses of the primitive's words `act` works on.
    pub args: [usize; 4],
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
            ghost: None,
            heap: false,
        }
    }

    /// A ghost record for `addr`, to be queued in a cancelled wait's place.
    fn ghost(addr: usize, ghost: Ghost) -> Box<Waiter> {
        Box::new(Waiter {
            addr,
            g: null_mut(),
            note: Note::new(),
            ticket: AtomicU32::new(0),
            next: null_mut(),
            scoped: false,
            done: AtomicU32::new(0),
            parked: AtomicU32::new(PARK_NOT_YET),
            dequeued: core::sync::atomic::AtomicBool::new(false),
            ghost: Some(ghost),
            heap: true,
        })
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
    // SeqCst: a waiter's second half of the StoreLoad pair with semrelease (the waiter
    // adds to nwait, then reads the count; the releaser adds to the count, then reads
    // nwait): with an Acquire load the C++ model lets both read the old values, the
    // releaser skip the wake-up and the waiter park for good.
    let mut v = addr.load(Ordering::SeqCst);
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

    /// Puts `with` in `w`'s place on the list if `w` is on it.
    ///
    /// # Safety
    /// Lock held; `with` is not on any list and lives until dequeued.
    unsafe fn replace(&self, w: *mut Waiter, with: *mut Waiter) -> bool {
        // SAFETY: caller contract.
        !unsafe { self.splice_first(|cur| cur == w, with) }.is_null()
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
        // SAFETY: caller contract.
        unsafe { self.splice_first(matches, null_mut()) }
    }

    /// Takes the first waiter for which `matches` holds off the list and puts `with` (if
    /// not null) in its place; returns the waiter taken off, null if none matched.
    ///
    /// # Safety
    /// Lock held; a non-null `with` is not on any list and lives until dequeued.
    unsafe fn splice_first(
        &self,
        matches: impl Fn(*mut Waiter) -> bool,
        with: *mut Waiter,
    ) -> *mut Waiter {
        // SAFETY: we hold the lock; every queued waiter is alive until dequeued.
        unsafe {
            let mut prev: *mut Waiter = null_mut();
            let mut cur = self.head.get();
            while !cur.is_null() {
                if matches(cur) {
                    let next = (*cur).next;
                    let rep = if with.is_null() {
                        next
                    } else {
                        (*with).next = next;
                        with
                    };
                    if prev.is_null() {
                        self.head.set(rep);
                    } else {
                        (*prev).next = rep;
                    }
                    if self.tail.get() == cur {
                        self.tail.set(if with.is_null() { prev } else { with });
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

/// The scope's cancel of a scoped wait (rt/scope.rs; its lock held), or its deadline
/// (`WaitDeadline`'s timer, or the foreign waiter itself): claims the wait and wakes the
/// waiter, or, not parked yet, calls its park off.
unsafe fn cancel_wait(arg: usize) {
    // SAFETY: the waiter disarms (taking the scope's lock, which a cancel holds) and stops
    // the deadline's timer (which waits for a callback in flight) before its frame dies;
    // a foreign waiter calls this itself.
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
/// count was taken, Err(errno) once the scope ended the wait first (the count untouched;
/// a release that reaches the wait passes the count on). Without a scope, `semacquire1`.
pub fn semacquire_scoped(addr: &AtomicU32, reason: WaitReason) -> Result<(), i32> {
    let sc = rt::scope::current();
    if sc.is_null() {
        semacquire1(addr, false, reason);
        return Ok(());
    }
    semacquire_in(addr, false, reason, sc, None)
}

/// `semacquire1` for a mutex or rwmutex wait its caller's scope ends: as
/// [`semacquire_scoped`], but a wait the scope ended leaves `ghost` in its place (module
/// doc, "Ghosts"), which consumes the count meant for it.
pub fn semacquire_scoped_ghost(
    addr: &AtomicU32,
    lifo: bool,
    reason: WaitReason,
    ghost: Ghost,
) -> Result<(), i32> {
    let sc = rt::scope::current();
    if sc.is_null() {
        semacquire1(addr, lifo, reason);
        return Ok(());
    }
    let r = semacquire_in(addr, lifo, reason, sc, Some(ghost));
    if r.is_ok() && crate::sys::tsan::on() {
        crate::sys::tsan::acquire(addr as *const AtomicU32 as usize);
    }
    r
}

/// The scoped waits in scope `sc`: a frame of its own, so that an unscoped wait (on a
/// small goroutine stack) does not carry this one's records.
#[inline(never)]
fn semacquire_in(
    addr: &AtomicU32,
    lifo: bool,
    reason: WaitReason,
    sc: *const rt::scope::Scope,
    ghost: Option<Ghost>,
) -> Result<(), i32> {
    if can_acquire(addr) {
        return Ok(());
    }
    let root = root(addr);
    loop {
        let mut w = Waiter::new(addr, true);
        w.ghost = ghost;
        let wp = &mut w as *mut Waiter;
        let cw = rt::scope::CancelWait::new(sc, cancel_wait, wp as usize);
        let mut dl = WaitDeadline::new(cancel_wait, wp as usize);
        // SAFETY: cw, dl and w live in this frame until disarmed and stopped below; sc is
        // our current scope. Armed before the root's lock: the cancel takes no root lock,
        // and the deadline is a cancel at a time.
        unsafe {
            rt::scope::arm(&cw);
            dl.start(sc);
        }
        root.lock.lock();
        root.nwait.fetch_add(1, Ordering::SeqCst);
        if can_acquire(addr) {
            root.nwait.fetch_sub(1, Ordering::SeqCst);
            root.lock.unlock();
            dl.stop();
            // SAFETY: armed above.
            unsafe { rt::scope::disarm(&cw) };
            // A cancel that claimed meanwhile changes nothing: the count is ours.
            return Ok(());
        }
        // SAFETY: lock held; w lives until a releaser dequeued it or we removed it.
        unsafe { root.enqueue(wp, lifo) };
        if w.g.is_null() {
            root.lock.unlock();
            foreign_sleep_scoped(&w.note, reason, sc, cancel_wait, wp as usize);
        } else {
            // SAFETY: on a goroutine; we are on the root's queue, and the unlock function
            // releases the one lock we hold.
            unsafe { rt::gopark(Some(unlock_root_scoped), wp as usize, reason) };
        }
        // Woken by a releaser that won `done`, or by the cancel or the deadline (or the
        // park called off).
        dl.stop();
        // SAFETY: armed above; after this no cancel touches w.
        unsafe { rt::scope::disarm(&cw) };
        // SAFETY: our current scope is live.
        let e = unsafe { rt::scope::err(sc) };
        if let (Some(gh), true) = (ghost, e != 0) {
            // The record is made before the root's lock: no allocation under it.
            let spare = Waiter::ghost(addr as *const _ as usize, gh);
            return leave_ghost(root, addr, &w, spare, e);
        }
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
        if e != 0 {
            return Err(e);
        }
    }
}

/// The end of a ghost-leaving wait `w` (disarmed) whose scope ended with `e`: Ok if the
/// count is ours after all (handed to us, or there to take), else Err(e) with `spare` in
/// our place.
fn leave_ghost(
    root: &SemaRoot,
    addr: &AtomicU32,
    w: &Waiter,
    spare: Box<Waiter>,
    e: i32,
) -> Result<(), i32> {
    let wp = w as *const Waiter as *mut Waiter;
    root.lock.lock();
    if w.dequeued.load(Ordering::Relaxed) {
        // A releaser reached us after the cancel: it took our ghost and runs it.
        root.lock.unlock();
        return Err(e);
    }
    if w.ticket.load(Ordering::Acquire) != 0 {
        // A releaser won `done` and handed us the count before the scope ended.
        root.lock.unlock();
        return Ok(());
    }
    if can_acquire(addr) {
        // SAFETY: lock held.
        if unsafe { root.remove(wp) } {
            root.nwait.fetch_sub(1, Ordering::SeqCst);
        }
        root.lock.unlock();
        return Ok(());
    }
    let gp = Box::into_raw(spare);
    // SAFETY: lock held; gp is a fresh record the list now owns.
    if !unsafe { root.replace(wp, gp) } {
        // Woken by a releaser whose count another waiter took: we were a waiter again,
        // and the ghost waits in our stead, at the head as a woken waiter re-queues. We
        // count it first and look at the count again, as semacquire does: a release
        // after the look above saw nwait at 0 and woke nobody (SeqCst: StoreLoad).
        root.nwait.fetch_add(1, Ordering::SeqCst);
        if can_acquire(addr) {
            root.nwait.fetch_sub(1, Ordering::SeqCst);
            root.lock.unlock();
            // SAFETY: gp is the record made above, never published.
            drop(unsafe { Box::from_raw(gp) });
            return Ok(());
        }
        // SAFETY: as above.
        unsafe { root.enqueue(gp, true) };
    }
    root.lock.unlock();
    Err(e)
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
/// yields its P to it (see the module doc). A ghost that the release reaches runs here,
/// and so do the releases it asks for (module doc, "Ghosts").
pub fn semrelease1(addr: &AtomicU32, handoff: bool) {
    let mut next = release_one(addr, handoff);
    while let Some(gh) = next {
        // SAFETY: a ghost's args name the words of the primitive this release belongs to,
        // live while its operation runs; the count was taken for the ghost.
        next = unsafe { (gh.act)(&gh.args) }.and_then(|h| release_one(addr, h));
    }
}

/// One release: adds the count and wakes the first waiter; returns the ghost it reached
/// instead, with the count taken for it, for the caller to run.
fn release_one(addr: &AtomicU32, handoff: bool) -> Option<Ghost> {
    if crate::sys::tsan::on() {
        crate::sys::tsan::release(addr as *const AtomicU32 as usize);
    }
    // release: publishes the releaser's writes to the acquirer (pairs with can_acquire).
    // SeqCst: the StoreLoad before reading nwait (pairs with semacquire's increment).
    addr.fetch_add(1, Ordering::SeqCst);
    let root = root(addr);
    if root.nwait.load(Ordering::SeqCst) == 0 {
        return None;
    }
    root.lock.lock();
    if root.nwait.load(Ordering::SeqCst) == 0 {
        root.lock.unlock();
        return None;
    }
    let w = loop {
        // SAFETY: lock held.
        let w = unsafe { root.dequeue(addr as *const AtomicU32 as usize) };
        if w.is_null() {
            root.lock.unlock();
            return None;
        }
        root.nwait.fetch_sub(1, Ordering::SeqCst);
        // SAFETY: a waiter is alive while on the list, and while we hold the lock after
        // taking it off (a cancelled one removes itself, or finds it was, under the lock);
        // a ghost record is ours once dequeued.
        unsafe {
            if (*w).heap {
                root.lock.unlock();
                let rec = Box::from_raw(w);
                return ghost_take(root, addr, rec);
            }
            if !(*w).scoped
                || (*w)
                    .done
                    .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                break w;
            }
            // Its scope ended the wait first: the count goes to the next waiter, or to the
            // ghost the wait leaves, which we run.
            (*w).dequeued.store(true, Ordering::Relaxed);
            if let Some(gh) = (*w).ghost {
                root.lock.unlock();
                return ghost_take(root, addr, Waiter::ghost(addr as *const _ as usize, gh));
            }
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
    None
}

/// A release reached ghost record `rec` (off the list, root unlocked): takes the count for
/// it and returns its action to run, or, the count taken by another waiter first, queues
/// it again at the head (as a woken waiter that lost the count waits again).
fn ghost_take(root: &SemaRoot, addr: &AtomicU32, rec: Box<Waiter>) -> Option<Ghost> {
    let gh = rec.ghost?;
    if can_acquire(addr) {
        return Some(gh);
    }
    root.lock.lock();
    root.nwait.fetch_add(1, Ordering::SeqCst);
    if can_acquire(addr) {
        root.nwait.fetch_sub(1, Ordering::SeqCst);
        root.lock.unlock();
        return Some(gh);
    }
    // SAFETY: lock held; the list owns the record from here.
    unsafe { root.enqueue(Box::into_raw(rec), true) };
    root.lock.unlock();
    None
}
