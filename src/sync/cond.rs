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
}

impl NotifyEnv for Runtime {
    type Word = AtomicU32;
    type LockWord = AtomicU32;
    type Wake = RuntimeWake;

    fn wake_state() -> RuntimeWake {
        RuntimeWake {
            g: rt::getg(),
            note: Note::new(),
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
        let w = NotifyWaiter {
            wake: E::wake_state(),
            ticket: t,
            next: AtomicPtr::new(null_mut()),
        };
        let wp = &w as *const NotifyWaiter<E> as *mut NotifyWaiter<E>;
        // Relaxed under the lock: the lock orders these accesses.
        let tail = self.tail.load(Ordering::Relaxed);
        if tail.is_null() {
            self.head.store(wp, Ordering::Relaxed);
        } else {
            // SAFETY: records on the list are alive until dequeued; we hold the lock.
            unsafe { (*tail).next.store(wp, Ordering::Relaxed) };
        }
        self.tail.store(wp, Ordering::Relaxed);
        E::sleep(self.lock, &w);
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
        let t = self.notify.load(Ordering::Relaxed);
        if t == self.wait.load(Ordering::SeqCst) {
            E::unlock(self.lock);
            return;
        }
        // Ticket t is notified now, whether or not its owner has queued yet: one that has
        // not will see it in wait_ticket and return at once.
        self.notify.store(t.wrapping_add(1), Ordering::SeqCst);
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
                E::unlock(self.lock);
                // SAFETY: we dequeued cur under the lock and have not woken it.
                unsafe { E::wake(cur) };
                return;
            }
            prev = cur;
            cur = next;
        }
        E::unlock(self.lock);
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
        E::unlock(self.lock);
        // The detached records are ours: no one else can reach them.
        while !cur.is_null() {
            // SAFETY: cur was on the list we detached and is not woken yet; read its
            // successor before waking it (the record dies once its owner runs).
            let next = unsafe { (*cur).next.load(Ordering::Relaxed) };
            // SAFETY: as above.
            unsafe { E::wake(cur) };
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
