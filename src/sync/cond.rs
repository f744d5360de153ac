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

use crate::loom::AtomicWord;
use crate::rt::scopecall::{WaitDeadline, foreign_sleep_scoped};
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

/// What the notify list's code needs besides its words: the list lock over the `lock`
/// word, and how a queued waiter sleeps and is woken. [`Runtime`] is the runtime's (a
/// futex lock, goroutines park and foreign threads sleep on a note); the loom model has
/// its own, so that it runs this file's code.
pub trait NotifyEnv: Sized {
    /// The `wait` and `notify` words.
    type Word: AtomicWord<V = u32>;
    /// The list lock's word.
    type LockWord;
    /// A waiter record's wake-up state.
    type Wake;
    /// The calling waiter's wake-up state.
    fn wake_state() -> Self::Wake;
    fn lock(word: &Self::LockWord);
    fn unlock(word: &Self::LockWord);
    /// Called with the list lock held and `w` queued: releases the lock and returns once
    /// a notifier has dequeued `w` and called [`NotifyEnv::wake`] on it.
    fn sleep(word: &Self::LockWord, w: &NotifyWaiter<Self>);
    /// Wakes the owner of a record the caller dequeued.
    ///
    /// # Safety
    /// `w` was dequeued by the caller (under the lock) and not yet woken; the record may
    /// die as soon as its owner runs, so this is the caller's last access.
    unsafe fn wake(w: *const NotifyWaiter<Self>);
}

/// A waiter record, on the stack of the waiting goroutine or thread. Opaque outside this
/// module; `pub` only because the list's head/tail pointers name it.
pub struct NotifyWaiter<E: NotifyEnv = Runtime> {
    wake: E::Wake,
    ticket: u32,
    /// Next record on the list. Owner: holder of the list lock (atomic only so that the
    /// record is shared through `&`).
    next: AtomicPtr<NotifyWaiter<E>>,
    /// A wait its scope may end (`Runtime`'s `wait_ticket_scoped`): a notifier must win
    /// `done` against the cancel before it wakes the owner.
    scoped: bool,
    /// 0 until a notifier or the cancel claims the wait (scoped records only).
    done: AtomicU32,
    /// Taken off the list by a notifier that lost `done` to the cancel (under the lock).
    dequeued: core::sync::atomic::AtomicBool,
    /// A heap record that holds the ticket of a waiter its scope ended, so that the
    /// notify meant for that ticket passes to the next one (freed by the notifier).
    tombstone: bool,
}

impl<E: NotifyEnv> NotifyWaiter<E> {
    fn new(wake: E::Wake, ticket: u32, scoped: bool) -> Self {
        NotifyWaiter {
            wake,
            ticket,
            next: AtomicPtr::new(null_mut()),
            scoped,
            done: AtomicU32::new(0),
            dequeued: core::sync::atomic::AtomicBool::new(false),
            tombstone: false,
        }
    }

    /// Whether a notifier that took this record off the list may wake its owner: an
    /// unscoped record always; a scoped one if the notifier wins it from the cancel (else
    /// the owner, woken by the cancel, finds it `dequeued`). A tombstone never.
    ///
    /// # Safety
    /// The list lock is held and the record was just taken off the list.
    unsafe fn claim_dequeued(&self) -> bool {
        if self.tombstone {
            return false;
        }
        if !self.scoped
            || self
                .done
                .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return true;
        }
        self.dequeued.store(true, Ordering::Relaxed);
        false
    }
}

/// The words of a `gmp_cond`.
pub struct NotifyList<'a, E: NotifyEnv = Runtime> {
    /// Next ticket to hand out. Atomic, no lock.
    pub wait: &'a E::Word,
    /// Next ticket to wake. Written under `lock`; read without it as a hint.
    pub notify: &'a E::Word,
    /// The list lock word (see [`ListLock`]).
    pub lock: &'a E::LockWord,
    /// FIFO of waiter records. Owner: holder of `lock`.
    pub head: &'a AtomicPtr<NotifyWaiter<E>>,
    pub tail: &'a AtomicPtr<NotifyWaiter<E>>,
}

/// The runtime's [`NotifyEnv`].
pub struct Runtime;

/// A runtime waiter's wake-up state: the parked goroutine, or null for a foreign thread,
/// which sleeps on `note`.
pub struct RuntimeWake {
    g: *mut G,
    note: Note,
    /// A scoped goroutine's park: `PARK_NOT_YET`, `PARK_DONE` (gopark's unlock function)
    /// or `PARK_CANCELLED` (the cancel claimed the wait before: the park is called off).
    parked: AtomicU32,
}

impl NotifyEnv for Runtime {
    type Word = AtomicU32;
    type LockWord = AtomicU32;
    type Wake = RuntimeWake;

    fn wake_state() -> RuntimeWake {
        RuntimeWake {
            g: rt::getg(),
            note: Note::new(),
            parked: AtomicU32::new(PARK_NOT_YET),
        }
    }

    fn lock(word: &AtomicU32) {
        ListLock(word).lock();
    }

    fn unlock(word: &AtomicU32) {
        ListLock(word).unlock();
    }

    fn sleep(word: &AtomicU32, w: &NotifyWaiter<Runtime>) {
        if w.wake.g.is_null() {
            ListLock(word).unlock();
            // A notifier dequeues us and then wakes the note; we return only after that.
            rt::foreignwait::foreign_sleep(&w.wake.note, WaitReason::Semacquire);
        } else {
            // SAFETY: on a goroutine; our record is on the list, and the unlock function
            // releases the one lock we hold.
            unsafe {
                rt::gopark(
                    Some(unlock_list),
                    word as *const AtomicU32 as usize,
                    WaitReason::Semacquire,
                )
            };
        }
    }

    unsafe fn wake(w: *const NotifyWaiter<Runtime>) {
        // SAFETY: caller contract: the owner waits for this wakeup, so the record is alive.
        let g = unsafe { (*w).wake.g };
        if g.is_null() {
            // SAFETY: as above; the record may die as soon as the note is woken.
            unsafe { (*w).wake.note.wakeup() };
        } else {
            // SAFETY: g parked with the list lock held and its unlock function released
            // it, so g is WAITING; the caller removed its record, so it alone readies it.
            unsafe { rt::goready(g) };
        }
    }
}

/// gopark's unlock function: releases the list lock once the goroutine is parked.
unsafe fn unlock_list(_gp: *mut G, arg: usize) -> bool {
    // SAFETY: arg is the address of the lock word of the gmp_cond the goroutine waits on,
    // which stays alive while it has waiters (header contract); the goroutine took the lock.
    ListLock(unsafe { &*(arg as *const AtomicU32) }).unlock();
    true
}

impl<E: NotifyEnv> NotifyList<'_, E> {
    /// Takes the next ticket (Go's notifyListAdd). Called with the user's mutex held.
    pub fn add(&self) -> u32 {
        // SeqCst: orders the ticket before the caller's unlock and against the notifiers'
        // lock-free `wait == notify` check.
        self.wait.fetch_add(1, Ordering::SeqCst)
    }

    /// Blocks until ticket `t` is notified (Go's notifyListWait). Returns at once if it
    /// already was.
    pub fn wait_ticket(&self, t: u32) {
        E::lock(self.lock);
        if less(t, self.notify.load(Ordering::Relaxed)) {
            E::unlock(self.lock);
            return;
        }
        let w = NotifyWaiter::new(E::wake_state(), t, false);
        let wp = &w as *const NotifyWaiter<E> as *mut NotifyWaiter<E>;
        // SAFETY: lock held; w lives until a notifier dequeued and woke it.
        unsafe { self.push(wp) };
        E::sleep(self.lock, &w);
    }

    /// Appends record `wp` to the list.
    ///
    /// # Safety
    /// The list lock is held; `wp` stays alive until it is taken off again.
    unsafe fn push(&self, wp: *mut NotifyWaiter<E>) {
        // Relaxed under the lock: the lock orders these accesses.
        let tail = self.tail.load(Ordering::Relaxed);
        if tail.is_null() {
            self.head.store(wp, Ordering::Relaxed);
        } else {
            // SAFETY: records on the list are alive until dequeued; we hold the lock.
            unsafe { (*tail).next.store(wp, Ordering::Relaxed) };
        }
        self.tail.store(wp, Ordering::Relaxed);
    }

    /// Wakes the waiter with the oldest unnotified ticket, if any (Go's
    /// notifyListNotifyOne).
    pub fn notify_one(&self) {
        // Fast path: no ticket outstanding. A waiter whose `add` we miss took its ticket
        // after this check and will not block on a ticket below `notify`.
        if self.wait.load(Ordering::SeqCst) == self.notify.load(Ordering::SeqCst) {
            return;
        }
        E::lock(self.lock);
        // Tombstones taken off the list, freed once the lock is released.
        let mut dead: *mut NotifyWaiter<E> = null_mut();
        let woken = loop {
            let t = self.notify.load(Ordering::Relaxed);
            if t == self.wait.load(Ordering::SeqCst) {
                break null_mut();
            }
            // Ticket t is notified now, whether or not its owner has queued yet: one that
            // has not will see it in wait_ticket and return at once.
            self.notify.store(t.wrapping_add(1), Ordering::SeqCst);
            // SAFETY: lock held.
            let cur = unsafe { self.take(t) };
            if cur.is_null() {
                break null_mut();
            }
            // SAFETY: lock held; cur was just taken off the list.
            if unsafe { (*cur).claim_dequeued() } {
                break cur;
            }
            // A waiter its scope ended (or its tombstone): the notify passes on to the
            // next ticket.
            // SAFETY: as above.
            if unsafe { (*cur).tombstone } {
                // SAFETY: off the list; its `next` is ours now.
                unsafe { (*cur).next.store(dead, Ordering::Relaxed) };
                dead = cur;
            }
        };
        E::unlock(self.lock);
        free_tombstones(dead);
        if !woken.is_null() {
            // SAFETY: we took it off the list and claimed it under the lock, and have not
            // woken it.
            unsafe { E::wake(woken) };
        }
    }

    /// Takes the record of ticket `t` off the list; null if none is there.
    ///
    /// # Safety
    /// The list lock is held.
    unsafe fn take(&self, t: u32) -> *mut NotifyWaiter<E> {
        let mut prev: *mut NotifyWaiter<E> = null_mut();
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
                return cur;
            }
            prev = cur;
            cur = next;
        }
        null_mut()
    }

    /// Wakes every waiter that holds a ticket (Go's notifyListNotifyAll).
    pub fn notify_all(&self) {
        if self.wait.load(Ordering::SeqCst) == self.notify.load(Ordering::SeqCst) {
            return;
        }
        E::lock(self.lock);
        let mut cur = self.head.swap(null_mut(), Ordering::Relaxed);
        self.tail.store(null_mut(), Ordering::Relaxed);
        self.notify
            .store(self.wait.load(Ordering::SeqCst), Ordering::SeqCst);
        // Claim the detached records under the lock (a scoped one the cancel won is left
        // to its owner, marked dequeued); tombstones are freed.
        let (mut wake, mut dead): (*mut NotifyWaiter<E>, *mut NotifyWaiter<E>) =
            (null_mut(), null_mut());
        while !cur.is_null() {
            // SAFETY: lock held; cur was on the list we detached, alive until woken.
            unsafe {
                let next = (*cur).next.load(Ordering::Relaxed);
                if (*cur).claim_dequeued() {
                    (*cur).next.store(wake, Ordering::Relaxed);
                    wake = cur;
                } else if (*cur).tombstone {
                    (*cur).next.store(dead, Ordering::Relaxed);
                    dead = cur;
                }
                cur = next;
            }
        }
        E::unlock(self.lock);
        free_tombstones(dead);
        // The claimed records are ours: no one else can reach them.
        while !wake.is_null() {
            // SAFETY: claimed above and not woken yet; read its successor before waking
            // it (the record dies once its owner runs).
            let next = unsafe { (*wake).next.load(Ordering::Relaxed) };
            // SAFETY: as above.
            unsafe { E::wake(wake) };
            wake = next;
        }
    }
}

/// Frees a chain (through `next`) of tombstones taken off a list.
fn free_tombstones<E: NotifyEnv>(mut t: *mut NotifyWaiter<E>) {
    while !t.is_null() {
        // SAFETY: a tombstone is a leaked Box (`wait_ticket_scoped`) that nobody else
        // reaches once off the list.
        unsafe {
            let next = (*t).next.load(Ordering::Relaxed);
            drop(Box::from_raw(t));
            t = next;
        }
    }
}

/// States of a scoped goroutine's park (`RuntimeWake::parked`).
const PARK_NOT_YET: u32 = 0;
const PARK_DONE: u32 = 1;
const PARK_CANCELLED: u32 = 2;

/// gopark's unlock function of a scoped wait: marks it parked (or calls the park off if
/// the cancel claimed it first), then releases the list lock.
unsafe fn unlock_list_scoped(_gp: *mut G, arg: usize) -> bool {
    // SAFETY: arg is the parking goroutine's record, alive until it runs again, which
    // needs the lock released below or a wake-up after it.
    unsafe {
        let (w, word) = *(arg as *const (*const NotifyWaiter<Runtime>, *const AtomicU32));
        let prev = (*w).wake.parked.swap(PARK_DONE, Ordering::AcqRel);
        ListLock(&*word).unlock();
        prev != PARK_CANCELLED
    }
}

/// The scope's cancel of a scoped cond wait (rt/scope.rs; its lock held), or its deadline
/// (`WaitDeadline`'s timer, or the foreign owner itself): claims the wait and wakes the
/// owner, or, not parked yet, calls its park off.
unsafe fn cancel_wait(arg: usize) {
    // SAFETY: the owner disarms (taking the scope's lock, which a cancel holds) and stops
    // the deadline's timer (which waits for a callback in flight) before its record dies;
    // a foreign owner calls this itself.
    unsafe {
        let w = &*(arg as *const NotifyWaiter<Runtime>);
        if w.done
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        if w.wake.g.is_null() {
            w.wake.note.wakeup();
        } else if w.wake.parked.swap(PARK_CANCELLED, Ordering::AcqRel) == PARK_DONE {
            rt::goready(w.wake.g);
        }
    }
}

impl NotifyList<'_, Runtime> {
    /// `wait_ticket` that the caller's scope ends (rt/scope.rs): Ok once ticket `t` is
    /// notified, Err(errno) if the scope ended the wait first. The ticket of a waiter that
    /// leaves stays on the list as a tombstone (or is skipped if it is next), so the notify
    /// meant for it wakes the next waiter instead. Without a scope, `wait_ticket`.
    pub fn wait_ticket_scoped(&self, t: u32) -> Result<(), i32> {
        let sc = rt::scope::current();
        if sc.is_null() {
            self.wait_ticket(t);
            return Ok(());
        }
        self.wait_ticket_in(sc, t)
    }

    /// `wait_ticket_scoped` in scope `sc`: a frame of its own, so that an unscoped wait
    /// (on a small goroutine stack) does not carry this one's records.
    #[inline(never)]
    fn wait_ticket_in(&self, sc: *const rt::scope::Scope, t: u32) -> Result<(), i32> {
        let w: NotifyWaiter<Runtime> = NotifyWaiter::new(Runtime::wake_state(), t, true);
        let wp = &w as *const NotifyWaiter<Runtime> as *mut NotifyWaiter<Runtime>;
        let cw = rt::scope::CancelWait::new(sc, cancel_wait, wp as usize);
        let mut dl = WaitDeadline::new(cancel_wait, wp as usize);
        // SAFETY: cw, dl and w live in this frame until disarmed and stopped below; sc is
        // our current scope. Armed before the list lock: the cancel takes no list lock,
        // and the deadline is a cancel at a time.
        unsafe {
            rt::scope::arm(&cw);
            dl.start(sc);
        }
        // A tombstone, should the scope end the wait (allocated outside the lock).
        let spare = Box::into_raw(Box::new(NotifyWaiter::new(Runtime::wake_state(), t, false)));
        ListLock(self.lock).lock();
        if less(t, self.notify.load(Ordering::Relaxed)) {
            ListLock(self.lock).unlock();
            dl.stop();
            // SAFETY: armed above.
            unsafe { rt::scope::disarm(&cw) };
            // SAFETY: never published.
            drop(unsafe { Box::from_raw(spare) });
            return Ok(());
        }
        // SAFETY: lock held; w lives until it is off the list again (below).
        unsafe { self.push(wp) };
        if w.wake.g.is_null() {
            ListLock(self.lock).unlock();
            foreign_sleep_scoped(
                &w.wake.note,
                WaitReason::Semacquire,
                sc,
                cancel_wait,
                wp as usize,
            );
        } else {
            let ctx = (
                wp as *const NotifyWaiter<Runtime>,
                self.lock as *const AtomicU32,
            );
            // SAFETY: on a goroutine; our record is on the list, and the unlock function
            // releases the one lock we hold.
            unsafe {
                rt::gopark(
                    Some(unlock_list_scoped),
                    &ctx as *const _ as usize,
                    WaitReason::Semacquire,
                )
            };
        }
        dl.stop();
        // SAFETY: armed above; after this no cancel touches w.
        unsafe { rt::scope::disarm(&cw) };
        ListLock(self.lock).lock();
        // A notifier that won took us off the list and woke us; one that lost to the
        // cancel took us off too, marked `dequeued`, and passed the notify on. Still on
        // the list: the cancel won and no notify reached our ticket yet.
        let (r, spare_kept) = if self.on_list(wp) {
            (Err(()), self.leave(wp, spare))
        } else if w.dequeued.load(Ordering::Relaxed) {
            (Err(()), false)
        } else {
            (Ok(()), false)
        };
        ListLock(self.lock).unlock();
        if !spare_kept {
            // SAFETY: never published.
            drop(unsafe { Box::from_raw(spare) });
        }
        // SAFETY: our current scope is live.
        r.map_err(|()| unsafe { rt::scope::err(sc) })
    }

    /// Whether record `w` is on the list. Lock held.
    fn on_list(&self, w: *mut NotifyWaiter<Runtime>) -> bool {
        let mut cur = self.head.load(Ordering::Relaxed);
        while !cur.is_null() {
            if cur == w {
                return true;
            }
            // SAFETY: lock held; records on the list are alive.
            cur = unsafe { (*cur).next.load(Ordering::Relaxed) };
        }
        false
    }

    /// Takes the record `w` of a waiter its scope ended off the list: the next ticket to
    /// notify is skipped past it, or `spare` takes its place as a tombstone (true: the
    /// list keeps `spare`). Lock held; `w` on the list.
    fn leave(&self, w: *mut NotifyWaiter<Runtime>, spare: *mut NotifyWaiter<Runtime>) -> bool {
        // SAFETY: lock held; w and its neighbours are on the list, alive.
        unsafe {
            let t = (*w).ticket;
            let next = (*w).next.load(Ordering::Relaxed);
            let mut prev: *mut NotifyWaiter<Runtime> = null_mut();
            let mut cur = self.head.load(Ordering::Relaxed);
            while cur != w {
                prev = cur;
                cur = (*cur).next.load(Ordering::Relaxed);
            }
            let skip = self.notify.load(Ordering::Relaxed) == t;
            let repl = if skip {
                self.notify.store(t.wrapping_add(1), Ordering::SeqCst);
                next
            } else {
                (*spare).tombstone = true;
                (*spare).next.store(next, Ordering::Relaxed);
                spare
            };
            if prev.is_null() {
                self.head.store(repl, Ordering::Relaxed);
            } else {
                (*prev).next.store(repl, Ordering::Relaxed);
            }
            if next.is_null() {
                self.tail
                    .store(if skip { prev } else { spare }, Ordering::Relaxed);
            }
            !skip
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

/// Loom models of the notify list as `gmp_cond_wait`/`_signal`/`_broadcast` use it: the
/// list's own code on loom's atomics, with a model [`NotifyEnv`] (a spin lock for the list
/// lock; a queued waiter spins on its record's flag, which `wake` sets) and a loom mutex
/// as the user's mutex. A lost wake-up leaves a waiter spinning forever, which loom
/// reports; the user's data is a loom-checked mutex value. Run by `tests/loom.rs`.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::loom::model;
    use crate::loom::sync::atomic::{AtomicBool, AtomicU32 as LoomU32};
    use crate::loom::sync::{Arc, Condvar, Mutex};

    struct Model;

    /// The model's list lock: a flag under a loom mutex, waited for on a condvar (a spin
    /// lock would give loom unbounded paths).
    struct ModelLock {
        held: Mutex<bool>,
        cv: Condvar,
    }

    /// A model waiter's wake-up state: its thread, unparked by `wake` after `woken` is set.
    struct ModelWake {
        thread: crate::loom::thread::Thread,
        woken: AtomicBool,
    }

    impl NotifyEnv for Model {
        type Word = LoomU32;
        type LockWord = ModelLock;
        type Wake = ModelWake;

        fn wake_state() -> ModelWake {
            ModelWake {
                thread: crate::loom::thread::current(),
                woken: AtomicBool::new(false),
            }
        }
        fn lock(l: &ModelLock) {
            let mut held = l.held.lock().unwrap();
            while *held {
                held = l.cv.wait(held).unwrap();
            }
            *held = true;
        }
        fn unlock(l: &ModelLock) {
            *l.held.lock().unwrap() = false;
            l.cv.notify_one();
        }
        fn sleep(l: &ModelLock, w: &NotifyWaiter<Model>) {
            Self::unlock(l);
            while !w.wake.woken.load(Ordering::Acquire) {
                crate::loom::thread::park();
            }
        }
        unsafe fn wake(w: *const NotifyWaiter<Model>) {
            // SAFETY: trait contract: the owner waits for `woken`, so `w` is alive until
            // the store; the thread handle is read before it, as the runtime reads `g`.
            let thread = unsafe { (*w).wake.thread.clone() };
            // SAFETY: as above; our last access to the record.
            unsafe { (*w).wake.woken.store(true, Ordering::Release) };
            thread.unpark();
        }
    }

    /// A `gmp_cond` and the user's mutex with the count of tokens it guards.
    struct Shared {
        wait: LoomU32,
        notify: LoomU32,
        lock: ModelLock,
        head: AtomicPtr<NotifyWaiter<Model>>,
        tail: AtomicPtr<NotifyWaiter<Model>>,
        tokens: Mutex<u32>,
    }

    impl Shared {
        fn new() -> Arc<Shared> {
            Arc::new(Shared {
                wait: LoomU32::new(0),
                notify: LoomU32::new(0),
                lock: ModelLock {
                    held: Mutex::new(false),
                    cv: Condvar::new(),
                },
                head: AtomicPtr::new(null_mut()),
                tail: AtomicPtr::new(null_mut()),
                tokens: Mutex::new(0),
            })
        }

        fn list(&self) -> NotifyList<'_, Model> {
            NotifyList {
                wait: &self.wait,
                notify: &self.notify,
                lock: &self.lock,
                head: &self.head,
                tail: &self.tail,
            }
        }

        /// `while (tokens == 0) gmp_cond_wait(c, m); tokens--;` (`gmp_cond_wait`'s order:
        /// the ticket under the mutex, then unlock, wait, relock).
        fn take(&self) {
            let mut tokens = self.tokens.lock().unwrap();
            while *tokens == 0 {
                let t = self.list().add();
                drop(tokens);
                self.list().wait_ticket(t);
                tokens = self.tokens.lock().unwrap();
            }
            *tokens -= 1;
        }

        /// `tokens += n` under the mutex, then a signal (or broadcast) after unlocking.
        fn give(&self, n: u32, broadcast: bool) {
            *self.tokens.lock().unwrap() += n;
            if broadcast {
                self.list().notify_all();
            } else {
                for _ in 0..n {
                    self.list().notify_one();
                }
            }
        }

        fn check_idle(&self) {
            assert_eq!(*self.tokens.lock().unwrap(), 0);
            assert!(
                self.head.load(Ordering::Relaxed).is_null(),
                "a record left queued"
            );
            assert!(self.tail.load(Ordering::Relaxed).is_null());
        }
    }

    /// Two waiters, two signals from two threads: each signal wakes a waiter whatever the
    /// interleaving of its ticket, its queueing and the signal (a ticket notified before
    /// its owner queued returns at once).
    #[test]
    fn signal_wakes_each_waiter() {
        model(|| {
            let sh = Shared::new();
            let waiters: Vec<_> = (0..2)
                .map(|_| {
                    let sh = sh.clone();
                    crate::loom::thread::spawn(move || sh.take())
                })
                .collect();
            let sh2 = sh.clone();
            let giver = crate::loom::thread::spawn(move || sh2.give(1, false));
            sh.give(1, false);
            giver.join().unwrap();
            for w in waiters {
                w.join().unwrap();
            }
            sh.check_idle();
        });
    }

    /// Two waiters, one broadcast: both wake, and the list is left empty.
    #[test]
    fn broadcast_wakes_all() {
        model(|| {
            let sh = Shared::new();
            let waiters: Vec<_> = (0..2)
                .map(|_| {
                    let sh = sh.clone();
                    crate::loom::thread::spawn(move || sh.take())
                })
                .collect();
            sh.give(2, true);
            for w in waiters {
                w.join().unwrap();
            }
            sh.check_idle();
        });
    }
}
