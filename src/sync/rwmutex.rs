//! Go's sync.RWMutex over a C struct (`gmp_rwmutex`): a writers' [`Mutex`], two semaphore
//! words and two counters, all zero when unlocked.
//!
//! # Protocol (Go's rwmutex.go)
//! - `reader_count` is the number of readers holding or waiting for the lock, minus
//!   [`RWMUTEX_MAX_READERS`] while a writer is pending or holding it. A reader increments
//!   it; a negative result means a writer is there, and the reader sleeps on `reader_sem`.
//! - A writer first takes `w` (excluding other writers), then subtracts MAX_READERS, which
//!   announces it: from now on new readers block. The readers that were already inside
//!   (the value before the subtraction) are added to `reader_wait`; the writer sleeps on
//!   `writer_sem` until the last of them leaves (its RUnlock brings `reader_wait` to 0 and
//!   releases `writer_sem`).
//! - Unlock adds MAX_READERS back; the result is the number of readers that blocked
//!   meanwhile, and it releases `reader_sem` that many times before unlocking `w`.
//!
//! So a pending writer keeps new readers out (no writer starvation), and the readers that
//! blocked behind it go before the next writer.

use core::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use crate::loom::AtomicWord;
use crate::rt::{WaitReason, fatal};
use crate::sync::SemaWord;
use crate::sync::mutex::Mutex;
use crate::sync::sema::{self, Ghost};

/// The most readers that may hold the lock at once (Go's rwmutexMaxReaders); more than
/// that would make `reader_count` look like a pending writer.
const RWMUTEX_MAX_READERS: i32 = 1 << 30;

/// The writers' mutex of an [`RwMutex`]: [`Mutex`] in the runtime, the model mutex in
/// `loom_tests`.
pub trait WriterLock {
    fn lock(&self);
    fn unlock(&self);
    fn try_lock(&self) -> bool;
}

impl WriterLock for Mutex<'_> {
    #[inline(always)]
    fn lock(&self) {
        Mutex::lock(self)
    }
    #[inline(always)]
    fn unlock(&self) {
        Mutex::unlock(self)
    }
    #[inline(always)]
    fn try_lock(&self) -> bool {
        Mutex::try_lock(self)
    }
}

/// The words of a `gmp_rwmutex` (the C struct's in the runtime; loom's, a model mutex and
/// model semaphores in `loom_tests`).
pub struct RwMutex<'a, L = Mutex<'a>, C: ?Sized = AtomicI32, S: ?Sized = AtomicU32> {
    /// Held by the pending or active writer.
    pub w: L,
    /// Writers wait here for the departing readers.
    pub writer_sem: &'a S,
    /// Readers wait here for the writer.
    pub reader_sem: &'a S,
    /// Readers in or waiting, minus MAX_READERS while a writer is pending.
    pub reader_count: &'a C,
    /// Readers a pending writer still waits for.
    pub reader_wait: &'a C,
}

// Orderings: every counter update is SeqCst, as Go's atomics are. The read side's fast
// path is one RMW, which is a locked instruction on x86 whatever the ordering; SeqCst
// keeps the reader_count/reader_wait handshake obviously equivalent to Go's.
impl<L: WriterLock, C: AtomicWord<V = i32> + ?Sized, S: SemaWord + ?Sized> RwMutex<'_, L, C, S> {
    /// Locks for reading: waits only while a writer holds the lock or is pending.
    pub fn rlock(&self) {
        if self.reader_count.fetch_add(1, Ordering::SeqCst) + 1 < 0 {
            // A writer is pending: wait for its Unlock.
            self.reader_sem.acquire(false, WaitReason::Semacquire);
        }
    }

    /// Undoes one `rlock`. Aborts with "gmp: sync: RUnlock of unlocked RWMutex" if no
    /// reader holds it.
    pub fn runlock(&self) {
        let r = self.reader_count.fetch_add(-1, Ordering::SeqCst) - 1;
        if r < 0 {
            self.runlock_slow(r);
        }
    }

    #[cold]
    fn runlock_slow(&self, r: i32) {
        runlock_slow_in(r, self.reader_wait, self.writer_sem);
    }

    /// Locks for writing: waits for other writers, then for the readers inside.
    /// Takes a read lock if that needs no waiting (Go's TryRLock): no writer holds or waits
    /// for the lock.
    pub fn try_rlock(&self) -> bool {
        let mut c = self.reader_count.load(Ordering::SeqCst);
        while c >= 0 {
            match self
                .reader_count
                .compare_exchange(c, c + 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return true,
                Err(now) => c = now,
            }
        }
        false
    }

    /// Takes the write lock if that needs no waiting (Go's TryLock): no writer and no
    /// reader holds it.
    pub fn try_lock(&self) -> bool {
        if !self.w.try_lock() {
            return false;
        }
        if self
            .reader_count
            .compare_exchange(0, -RWMUTEX_MAX_READERS, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            self.w.unlock();
            return false;
        }
        true
    }

    pub fn lock(&self) {
        self.w.lock();
        // Announce the writer; r readers were inside at that moment.
        let r = self
            .reader_count
            .fetch_add(-RWMUTEX_MAX_READERS, Ordering::SeqCst);
        // Wait for them, unless they all left already (their RUnlocks drove reader_wait
        // to -r before our add, so the add brings it to 0 and nobody will wake us).
        if r != 0 && self.reader_wait.fetch_add(r, Ordering::SeqCst) + r != 0 {
            self.writer_sem.acquire(false, WaitReason::Semacquire);
        }
    }

    /// Unlocks for writing and lets the readers that blocked meanwhile in. Aborts with
    /// "gmp: sync: Unlock of unlocked RWMutex" if no writer holds it.
    pub fn unlock(&self) {
        unlock_readers(self.reader_count, self.reader_sem);
        self.w.unlock();
    }
}

/// `runlock`'s slow half: `r` is the reader count after the reader's decrement, negative
/// (a writer is pending or the lock was not read-locked).
fn runlock_slow_in<C: AtomicWord<V = i32> + ?Sized, S: SemaWord + ?Sized>(
    r: i32,
    reader_wait: &C,
    writer_sem: &S,
) {
    // r + 1 == 0: no reader and no writer; == -MAX_READERS: a writer and no reader.
    if r + 1 == 0 || r + 1 == -RWMUTEX_MAX_READERS {
        fatal("sync: RUnlock of unlocked RWMutex");
    }
    // A writer is pending: the last departing reader wakes it.
    if reader_wait.fetch_add(-1, Ordering::SeqCst) - 1 == 0 {
        writer_sem.release(false);
    }
}

/// The first half of a writer's unlock: lets the readers that blocked meanwhile in.
fn unlock_readers<C: AtomicWord<V = i32> + ?Sized, S: SemaWord + ?Sized>(
    reader_count: &C,
    reader_sem: &S,
) {
    let r = reader_count.fetch_add(RWMUTEX_MAX_READERS, Ordering::SeqCst) + RWMUTEX_MAX_READERS;
    if r >= RWMUTEX_MAX_READERS {
        fatal("sync: Unlock of unlocked RWMutex");
    }
    for _ in 0..r {
        reader_sem.release(false);
    }
}

/// Scoped locking (rt/scope.rs): a wait the caller's scope ends returns Err(ECANCELED or
/// ETIMEDOUT) without the lock. A reader's or a pending writer's semaphore wait leaves a
/// ghost (sync/sema.rs, "Ghosts") that, once the writer or the readers it waited for are
/// gone, takes the lock as the waiter would have and releases it at once: the counts the
/// protocol keeps (`reader_count`, `reader_wait`) stay exact.
impl RwMutex<'_> {
    /// `rlock` unless the caller's scope ends the wait first.
    pub fn rlock_scoped(&self) -> Result<(), i32> {
        if self.reader_count.fetch_add(1, Ordering::SeqCst) + 1 < 0 {
            let ghost = Ghost {
                act: reader_ghost,
                args: [
                    self.reader_count.as_ptr() as usize,
                    self.reader_wait.as_ptr() as usize,
                    self.writer_sem.as_ptr() as usize,
                    0,
                ],
            };
            sema::semacquire_scoped_ghost(self.reader_sem, false, WaitReason::Semacquire, ghost)?;
        }
        Ok(())
    }

    /// `lock` unless the caller's scope ends the wait (for the writers' mutex, or for the
    /// readers inside) first.
    pub fn lock_scoped(&self) -> Result<(), i32> {
        self.w.lock_scoped()?;
        let r = self
            .reader_count
            .fetch_add(-RWMUTEX_MAX_READERS, Ordering::SeqCst);
        if r != 0 && self.reader_wait.fetch_add(r, Ordering::SeqCst) + r != 0 {
            let ghost = Ghost {
                act: writer_ghost,
                args: [
                    self.w.state.as_ptr() as usize,
                    self.w.sema.as_ptr() as usize,
                    self.reader_count.as_ptr() as usize,
                    self.reader_sem.as_ptr() as usize,
                ],
            };
            sema::semacquire_scoped_ghost(self.writer_sem, false, WaitReason::Semacquire, ghost)?;
        }
        Ok(())
    }
}

/// The ghost of a cancelled reader: the writer it waited for is gone and the read lock is
/// its; it leaves as `runlock` does.
///
/// # Safety
/// `args` are the addresses of a live rwmutex's `reader_count`, `reader_wait` and
/// `writer_sem`.
unsafe fn reader_ghost(args: &[usize; 4]) -> Option<bool> {
    // SAFETY: caller contract; all access to the words is atomic.
    let (count, wait, wsem) = unsafe {
        (
            AtomicI32::from_ptr(args[0] as *mut i32),
            AtomicI32::from_ptr(args[1] as *mut i32),
            AtomicU32::from_ptr(args[2] as *mut u32),
        )
    };
    let r = count.fetch_add(-1, Ordering::SeqCst) - 1;
    if r < 0 {
        runlock_slow_in(r, wait, wsem);
    }
    None
}

/// The ghost of a writer cancelled while it waited for the readers inside: they are gone
/// and the write lock is its; it unlocks as `unlock` does.
///
/// # Safety
/// `args` are the addresses of a live rwmutex's writers' mutex words (state, sema),
/// `reader_count` and `reader_sem`.
unsafe fn writer_ghost(args: &[usize; 4]) -> Option<bool> {
    // SAFETY: caller contract; all access to the words is atomic.
    let (w, count, rsem) = unsafe {
        (
            Mutex {
                state: AtomicI32::from_ptr(args[0] as *mut i32),
                sema: AtomicU32::from_ptr(args[1] as *mut u32),
            },
            AtomicI32::from_ptr(args[2] as *mut i32),
            AtomicU32::from_ptr(args[3] as *mut u32),
        )
    };
    unlock_readers(count, rsem);
    w.unlock();
    None
}

/// Loom models of the read and write paths on loom's atomics, the model mutex
/// (`mutex::loom_tests::ModelMutex`, the real mutex code) and model semaphores. Run by
/// `tests/loom.rs`.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::loom::cell::UnsafeCell;
    use crate::loom::sync::Arc;
    use crate::loom::sync::atomic::AtomicI32 as LoomI32;
    use crate::loom::{model, sema::ModelSema};
    use crate::sync::mutex::loom_tests::ModelMutex;

    struct Shared {
        writer_sem: ModelSema,
        reader_sem: ModelSema,
        reader_count: LoomI32,
        reader_wait: LoomI32,
        /// Two words a writer sets together; a reader must see them equal.
        data: [UnsafeCell<u32>; 2],
    }

    type View<'a> = RwMutex<'a, ModelMutex, LoomI32, ModelSema>;

    impl Shared {
        fn view(&self, w: &ModelMutex) -> View<'_> {
            RwMutex {
                w: w.share(),
                writer_sem: &self.writer_sem,
                reader_sem: &self.reader_sem,
                reader_count: &self.reader_count,
                reader_wait: &self.reader_wait,
            }
        }

        fn write(&self, rw: &View<'_>) {
            rw.lock();
            for d in &self.data {
                // SAFETY: the model's subject: a writer excludes everyone; loom reports an
                // access that overlaps or is not ordered after the previous holder's.
                d.with_mut(|v| unsafe { *v += 1 });
            }
            rw.unlock();
        }

        fn read(&self, rw: &View<'_>) -> u32 {
            rw.rlock();
            // SAFETY: as in `write`: readers exclude writers.
            let (a, b) = unsafe { (self.data[0].with(|v| *v), self.data[1].with(|v| *v)) };
            rw.runlock();
            assert_eq!(a, b, "a reader saw half a write");
            a
        }
    }

    /// Two writers (one the model's main thread) and two readers: readers never see half
    /// a write nor overlap a writer (loom checks every access), a pending writer waits
    /// for the readers inside and the readers that blocked behind it get in after it,
    /// nobody is left waiting, and afterwards every word is back at 0.
    #[test]
    fn readers_and_writers_exclude() {
        model(|| {
            let sh = Arc::new(Shared {
                writer_sem: ModelSema::new(),
                reader_sem: ModelSema::new(),
                reader_count: LoomI32::new(0),
                reader_wait: LoomI32::new(0),
                data: [UnsafeCell::new(0), UnsafeCell::new(0)],
            });
            let w = ModelMutex::new(0, 0);
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    let (sh, w) = (sh.clone(), w.share());
                    crate::loom::thread::spawn(move || {
                        let n = sh.read(&sh.view(&w));
                        assert!(n <= 2);
                    })
                })
                .collect();
            let (sh2, w2) = (sh.clone(), w.share());
            let writer = crate::loom::thread::spawn(move || sh2.write(&sh2.view(&w2)));
            sh.write(&sh.view(&w));
            writer.join().unwrap();
            for r in readers {
                r.join().unwrap();
            }
            assert_eq!(sh.read(&sh.view(&w)), 2);
            assert_eq!(sh.reader_count.load(Ordering::Relaxed), 0);
            assert_eq!(sh.reader_wait.load(Ordering::Relaxed), 0);
            assert_eq!(w.state(), 0, "the writers' mutex left behind");
        });
    }
}
