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

use crate::rt::{WaitReason, fatal};
use crate::sync::mutex::Mutex;
use crate::sync::sema::{semacquire, semrelease};

/// The most readers that may hold the lock at once (Go's rwmutexMaxReaders); more than
/// that would make `reader_count` look like a pending writer.
const RWMUTEX_MAX_READERS: i32 = 1 << 30;

/// The words of a `gmp_rwmutex`.
pub struct RwMutex<'a> {
    /// Held by the pending or active writer.
    pub w: Mutex<'a>,
    /// Writers wait here for the departing readers.
    pub writer_sem: &'a AtomicU32,
    /// Readers wait here for the writer.
    pub reader_sem: &'a AtomicU32,
    /// Readers in or waiting, minus MAX_READERS while a writer is pending.
    pub reader_count: &'a AtomicI32,
    /// Readers a pending writer still waits for.
    pub reader_wait: &'a AtomicI32,
}

// Orderings: every counter update is SeqCst, as Go's atomics are. The read side's fast
// path is one RMW, which is a locked instruction on x86 whatever the ordering; SeqCst
// keeps the reader_count/reader_wait handshake obviously equivalent to Go's.
impl RwMutex<'_> {
    /// Locks for reading: waits only while a writer holds the lock or is pending.
    pub fn rlock(&self) {
        if self.reader_count.fetch_add(1, Ordering::SeqCst) + 1 < 0 {
            // A writer is pending: wait for its Unlock.
            semacquire(self.reader_sem, WaitReason::Semacquire);
        }
    }

    /// Undoes one `rlock`. Aborts with "gmp: sync: RUnlock of unlocked RWMutex" if no
    /// reader holds it.
    pub fn runlock(&self) {
        let r = self.reader_count.fetch_sub(1, Ordering::SeqCst) - 1;
        if r < 0 {
            self.runlock_slow(r);
        }
    }

    #[cold]
    fn runlock_slow(&self, r: i32) {
        // r + 1 == 0: no reader and no writer; == -MAX_READERS: a writer and no reader.
        if r + 1 == 0 || r + 1 == -RWMUTEX_MAX_READERS {
            fatal("sync: RUnlock of unlocked RWMutex");
        }
        // A writer is pending: the last departing reader wakes it.
        if self.reader_wait.fetch_sub(1, Ordering::SeqCst) - 1 == 0 {
            semrelease(self.writer_sem);
        }
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
            .fetch_sub(RWMUTEX_MAX_READERS, Ordering::SeqCst);
        // Wait for them, unless they all left already (their RUnlocks drove reader_wait
        // to -r before our add, so the add brings it to 0 and nobody will wake us).
        if r != 0 && self.reader_wait.fetch_add(r, Ordering::SeqCst) + r != 0 {
            semacquire(self.writer_sem, WaitReason::Semacquire);
        }
    }

    /// Unlocks for writing and lets the readers that blocked meanwhile in. Aborts with
    /// "gmp: sync: Unlock of unlocked RWMutex" if no writer holds it.
    pub fn unlock(&self) {
        let r = self
            .reader_count
            .fetch_add(RWMUTEX_MAX_READERS, Ordering::SeqCst)
            + RWMUTEX_MAX_READERS;
        if r >= RWMUTEX_MAX_READERS {
            fatal("sync: Unlock of unlocked RWMutex");
        }
        for _ in 0..r {
            semrelease(self.reader_sem);
        }
        self.w.unlock();
    }
}
