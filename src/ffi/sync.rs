//! C API for the sync primitives (mutex, rwmutex, cond, once): Go's sync package over
//! C structs with static initializers (`GMP_MUTEX_INIT`, ... in cbindgen.toml). Each
//! function checks its pointers (-EINVAL for NULL or misaligned), borrows the struct's
//! words as atomics and calls `crate::sync`.

use core::ffi::{c_int, c_void};
use core::ptr::addr_of_mut;
use core::sync::atomic::{AtomicI32, AtomicU32};

use super::{boundary, gmp_func};
use crate::rt;
use crate::sync::cond::{NotifyList, list_ptr};
use crate::sync::mutex::{self, Mutex};
use crate::sync::once::Once;
use crate::sync::rwmutex::RwMutex;

/// A mutual-exclusion lock (Go's sync.Mutex) that parks goroutines instead of blocking
/// their thread; foreign threads sleep on a futex. Initialise with GMP_MUTEX_INIT (or zero
/// it); it needs no destruction. Must not be copied or moved while in use. Not recursive;
/// not owned by a thread: any thread or goroutine may unlock a locked mutex. Fair under
/// contention: a waiter blocked for more than 1 ms gets the mutex handed to it.
#[repr(C)]
pub struct gmp_mutex {
    /// Private: locked bit, woken bit, starvation bit, waiter count.
    pub state: i32,
    /// Private: the semaphore waiters sleep on.
    pub sema: u32,
}

/// A reader/writer lock (Go's sync.RWMutex): any number of readers or one writer. A
/// writer waiting for the lock keeps new readers out. Initialise with GMP_RWMUTEX_INIT (or
/// zero it); it needs no destruction. Must not be copied or moved while in use. A reader
/// must not take the read lock recursively (a pending writer would deadlock it).
#[repr(C)]
pub struct gmp_rwmutex {
    /// Private: held by the pending or active writer.
    pub w: gmp_mutex,
    /// Private: the semaphore a writer waits on for departing readers.
    pub writer_sem: u32,
    /// Private: the semaphore readers wait on for the writer.
    pub reader_sem: u32,
    /// Private: readers in or waiting, minus 2^30 while a writer is pending.
    pub reader_count: i32,
    /// Private: departing readers a pending writer waits for.
    pub reader_wait: i32,
}

/// A condition variable (Go's sync.Cond) used with a gmp_mutex. Waiters are woken in
/// FIFO order. Initialise with GMP_COND_INIT (or zero it); it needs no destruction, but
/// must outlive its waiters and must not be copied or moved while in use.
#[repr(C)]
pub struct gmp_cond {
    /// Private: next wait ticket.
    pub wait: u32,
    /// Private: next ticket to notify.
    pub notify: u32,
    /// Private: lock word of the waiter list.
    pub lock: u32,
    /// Private: zero.
    pub reserved: u32,
    /// Private: first waiter (records live on the waiters' stacks).
    pub head: *mut c_void,
    /// Private: last waiter.
    pub tail: *mut c_void,
}

/// Runs a function exactly once (Go's sync.Once; gmp_once_do is its Do). Initialise with
/// GMP_ONCE_INIT (or zero it); it needs no destruction. Must not be copied or moved while
/// in use.
#[repr(C)]
pub struct gmp_once {
    /// Private: 1 once the function has returned.
    pub done: u32,
    /// Private: serialises the first callers.
    pub m: gmp_mutex,
}

const _: () = {
    assert!(core::mem::size_of::<gmp_mutex>() == 8);
    assert!(core::mem::size_of::<gmp_rwmutex>() == 24);
    assert!(core::mem::size_of::<gmp_once>() == 12);
    assert!(core::mem::size_of::<gmp_cond>() == 16 + 2 * core::mem::size_of::<usize>());
};

/// Whether `p` is unusable: NULL or misaligned.
fn bad<T>(p: *mut T) -> bool {
    p.is_null() || !p.is_aligned()
}

/// Borrows the words of a gmp_mutex.
///
/// # Safety
/// `m` is non-null, aligned and valid for the returned lifetime.
unsafe fn mutex_ref<'a>(m: *mut gmp_mutex) -> Mutex<'a> {
    // SAFETY: caller contract; the fields are plain integers with the alignment of the
    // corresponding atomics, and all concurrent access to them goes through atomics.
    unsafe {
        Mutex {
            state: AtomicI32::from_ptr(addr_of_mut!((*m).state)),
            sema: AtomicU32::from_ptr(addr_of_mut!((*m).sema)),
        }
    }
}

/// Borrows the words of a gmp_rwmutex.
///
/// # Safety
/// As [`mutex_ref`].
unsafe fn rwmutex_ref<'a>(rw: *mut gmp_rwmutex) -> RwMutex<'a> {
    // SAFETY: as in mutex_ref.
    unsafe {
        RwMutex {
            w: mutex_ref(addr_of_mut!((*rw).w)),
            writer_sem: AtomicU32::from_ptr(addr_of_mut!((*rw).writer_sem)),
            reader_sem: AtomicU32::from_ptr(addr_of_mut!((*rw).reader_sem)),
            reader_count: AtomicI32::from_ptr(addr_of_mut!((*rw).reader_count)),
            reader_wait: AtomicI32::from_ptr(addr_of_mut!((*rw).reader_wait)),
        }
    }
}

/// Borrows the words of a gmp_cond.
///
/// # Safety
/// As [`mutex_ref`].
unsafe fn cond_ref<'a>(c: *mut gmp_cond) -> NotifyList<'a> {
    // SAFETY: as in mutex_ref; head and tail are pointer-sized and pointer-aligned.
    unsafe {
        NotifyList {
            wait: AtomicU32::from_ptr(addr_of_mut!((*c).wait)),
            notify: AtomicU32::from_ptr(addr_of_mut!((*c).notify)),
            lock: AtomicU32::from_ptr(addr_of_mut!((*c).lock)),
            head: list_ptr(addr_of_mut!((*c).head)),
            tail: list_ptr(addr_of_mut!((*c).tail)),
        }
    }
}

/// Locks `m`, waiting while another holder has it: a goroutine parks (its thread runs
/// other goroutines), any other thread sleeps on a futex. Returns 0; -EINVAL if `m` is
/// NULL or misaligned; -ECANCELED or -ETIMEDOUT, without the lock, if the caller's scope
/// (gmp_scope_begin) is cancelled or its deadline passes before the lock is free (a free
/// mutex is taken even then). Locking a mutex the caller already holds deadlocks, as in
/// Go.
///
/// # Safety
/// `m` is NULL or points to a live gmp_mutex.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_mutex_lock(m: *mut gmp_mutex) -> c_int {
    if bad(m) {
        return -libc::EINVAL;
    }
    // The uncontended case runs outside the panic boundary (a CAS cannot panic), which
    // keeps it frameless: this call is as hot as a mutex gets.
    // SAFETY: checked non-null and aligned; the caller promises it is live; all access to
    // the word is atomic.
    if mutex::lock_fast(unsafe { AtomicI32::from_ptr(addr_of_mut!((*m).state)) }) {
        return 0;
    }
    // SAFETY: as above.
    unsafe { mutex_lock_slow(m, true) }
}

/// The contended half of gmp_mutex_lock (`scoped`: the caller's scope may end the wait)
/// and of gmp_mutex_lock_nocancel, out of line so the fast path needs no frame.
///
/// # Safety
/// `m` is non-null, aligned and live.
#[cold]
#[inline(never)]
unsafe fn mutex_lock_slow(m: *mut gmp_mutex, scoped: bool) -> c_int {
    let name = if scoped {
        "gmp_mutex_lock"
    } else {
        "gmp_mutex_lock_nocancel"
    };
    boundary(name, || {
        // SAFETY: caller contract.
        let mx = unsafe { mutex_ref(m) };
        if !scoped {
            mx.lock_slow();
            return 0;
        }
        match mx.lock_slow_scoped() {
            Ok(()) => 0,
            Err(e) => -e,
        }
    })
}

/// The contended half of gmp_mutex_lock, for the inline fast path in this header (whose
/// CAS failed: it does not retry it). Do not call it directly; use gmp_mutex_lock. Returns
/// as gmp_mutex_lock.
///
/// # Safety
/// As gmp_mutex_lock.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_mutex_lock_slow(m: *mut gmp_mutex) -> c_int {
    if bad(m) {
        return -libc::EINVAL;
    }
    // A safe point: a contended lock may be won by spinning, without parking.
    rt::preempt_check();
    // SAFETY: checked non-null and aligned; the caller promises it is live.
    unsafe { mutex_lock_slow(m, true) }
}

/// Locks `m` as gmp_mutex_lock does, but no scope ends the wait: for code that must hold
/// the lock whatever its scope says (a cleanup path, a re-lock after a wait, as
/// gmp_cond_wait re-locks). Returns 0; -EINVAL if `m` is NULL or misaligned.
///
/// # Safety
/// `m` is NULL or points to a live gmp_mutex.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_mutex_lock_nocancel(m: *mut gmp_mutex) -> c_int {
    if bad(m) {
        return -libc::EINVAL;
    }
    // SAFETY: checked non-null and aligned; the caller promises it is live; all access to
    // the word is atomic.
    if mutex::lock_fast(unsafe { AtomicI32::from_ptr(addr_of_mut!((*m).state)) }) {
        return 0;
    }
    rt::preempt_check();
    // SAFETY: as above.
    unsafe { mutex_lock_slow(m, false) }
}

/// Locks `m` if it is free, without waiting. Returns 0 if the caller now holds it, -EBUSY
/// if it is locked (or being handed to a waiter), -EINVAL if `m` is NULL or misaligned.
///
/// # Safety
/// `m` is NULL or points to a live gmp_mutex.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_mutex_trylock(m: *mut gmp_mutex) -> c_int {
    boundary("gmp_mutex_trylock", || {
        if bad(m) {
            return -libc::EINVAL;
        }
        // SAFETY: checked non-null and aligned; the caller promises it is live.
        if unsafe { mutex_ref(m) }.try_lock() {
            0
        } else {
            -libc::EBUSY
        }
    })
}

/// Unlocks `m` and wakes a waiter if there is one. Any thread or goroutine may unlock a
/// locked mutex. Returns 0; -EINVAL if `m` is NULL or misaligned. Aborts with
/// "gmp: sync: unlock of unlocked mutex" if `m` is not locked (Go panics).
///
/// # Safety
/// `m` is NULL or points to a live gmp_mutex.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_mutex_unlock(m: *mut gmp_mutex) -> c_int {
    if bad(m) {
        return -libc::EINVAL;
    }
    // As in gmp_mutex_lock: the uncontended case outside the panic boundary.
    // SAFETY: checked non-null and aligned; the caller promises it is live.
    let new = mutex::unlock_fast(unsafe { AtomicI32::from_ptr(addr_of_mut!((*m).state)) });
    if new == 0 {
        return 0;
    }
    // SAFETY: as above.
    unsafe { mutex_unlock_slow(m, new) }
}

/// The contended half of gmp_mutex_unlock (waiters to wake, or a misuse to report).
///
/// # Safety
/// `m` is non-null, aligned and live.
#[cold]
#[inline(never)]
unsafe fn mutex_unlock_slow(m: *mut gmp_mutex, new: i32) -> c_int {
    boundary("gmp_mutex_unlock", || {
        // SAFETY: caller contract.
        unsafe { mutex_ref(m) }.unlock_slow(new);
        0
    })
}

/// The second half of gmp_mutex_unlock, for the inline fast path in this header: `m`'s
/// state word has already been decremented (unlocked), leaving `new_state`, which is not 0
/// (waiters to wake, or a misuse to report). Do not call it directly; use
/// gmp_mutex_unlock. Returns as gmp_mutex_unlock.
///
/// # Safety
/// As gmp_mutex_unlock; `new_state` is what the decrement returned.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_mutex_unlock_slow(m: *mut gmp_mutex, new_state: i32) -> c_int {
    if bad(m) {
        return -libc::EINVAL;
    }
    if new_state == 0 {
        return 0;
    }
    // SAFETY: checked non-null and aligned; the caller promises it is live.
    unsafe { mutex_unlock_slow(m, new_state) }
}

/// Locks `rw` for reading: waits (parks, or sleeps on a futex) while a writer holds it or
/// waits for it. Returns 0; -EINVAL if `rw` is NULL or misaligned; -ECANCELED or
/// -ETIMEDOUT, without the lock, if the caller's scope ends the wait (as gmp_mutex_lock).
///
/// # Safety
/// `rw` is NULL or points to a live gmp_rwmutex.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_rwmutex_rlock(rw: *mut gmp_rwmutex) -> c_int {
    boundary("gmp_rwmutex_rlock", || {
        if bad(rw) {
            return -libc::EINVAL;
        }
        rt::preempt_check();
        // SAFETY: checked non-null and aligned; the caller promises it is live.
        match unsafe { rwmutex_ref(rw) }.rlock_scoped() {
            Ok(()) => 0,
            Err(e) => -e,
        }
    })
}

/// Undoes one gmp_rwmutex_rlock; the last reader out lets a waiting writer in. Returns 0;
/// -EINVAL if `rw` is NULL or misaligned. Aborts with "gmp: sync: RUnlock of unlocked
/// RWMutex" if no reader holds it.
///
/// # Safety
/// `rw` is NULL or points to a live gmp_rwmutex.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_rwmutex_runlock(rw: *mut gmp_rwmutex) -> c_int {
    boundary("gmp_rwmutex_runlock", || {
        if bad(rw) {
            return -libc::EINVAL;
        }
        // SAFETY: checked non-null and aligned; the caller promises it is live.
        unsafe { rwmutex_ref(rw) }.runlock();
        0
    })
}

/// Locks `rw` for writing: waits for the other writers, then keeps new readers out and
/// waits for the readers inside to leave. Returns 0; -EINVAL if `rw` is NULL or
/// misaligned; -ECANCELED or -ETIMEDOUT, without the lock, if the caller's scope ends
/// either wait (as gmp_mutex_lock; readers that queued behind it then get in as soon as
/// the readers it waited for have left).
///
/// # Safety
/// `rw` is NULL or points to a live gmp_rwmutex.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_rwmutex_lock(rw: *mut gmp_rwmutex) -> c_int {
    boundary("gmp_rwmutex_lock", || {
        if bad(rw) {
            return -libc::EINVAL;
        }
        rt::preempt_check();
        // SAFETY: checked non-null and aligned; the caller promises it is live.
        match unsafe { rwmutex_ref(rw) }.lock_scoped() {
            Ok(()) => 0,
            Err(e) => -e,
        }
    })
}

/// Takes a read lock on `rw` if that needs no waiting (Go's TryRLock): 0 if the caller
/// now holds a read lock, -EBUSY if a writer holds the lock or waits for it, -EINVAL if
/// `rw` is NULL or misaligned.
///
/// # Safety
/// `rw` is NULL or points to a live gmp_rwmutex.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_rwmutex_tryrlock(rw: *mut gmp_rwmutex) -> c_int {
    boundary("gmp_rwmutex_tryrlock", || {
        if bad(rw) {
            return -libc::EINVAL;
        }
        // SAFETY: checked non-null and aligned; the caller promises it is live.
        if unsafe { rwmutex_ref(rw) }.try_rlock() {
            0
        } else {
            -libc::EBUSY
        }
    })
}

/// Takes the write lock on `rw` if that needs no waiting (Go's TryLock): 0 if the caller
/// now holds it, -EBUSY if a reader or a writer holds it, -EINVAL if `rw` is NULL or
/// misaligned.
///
/// # Safety
/// `rw` is NULL or points to a live gmp_rwmutex.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_rwmutex_trylock(rw: *mut gmp_rwmutex) -> c_int {
    boundary("gmp_rwmutex_trylock", || {
        if bad(rw) {
            return -libc::EINVAL;
        }
        // SAFETY: checked non-null and aligned; the caller promises it is live.
        if unsafe { rwmutex_ref(rw) }.try_lock() {
            0
        } else {
            -libc::EBUSY
        }
    })
}

/// Unlocks `rw` held for writing; the readers that waited go in before the next writer.
/// Any thread may unlock it. Returns 0; -EINVAL if `rw` is NULL or misaligned. Aborts with
/// "gmp: sync: Unlock of unlocked RWMutex" if no writer holds it.
///
/// # Safety
/// `rw` is NULL or points to a live gmp_rwmutex.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_rwmutex_unlock(rw: *mut gmp_rwmutex) -> c_int {
    boundary("gmp_rwmutex_unlock", || {
        if bad(rw) {
            return -libc::EINVAL;
        }
        // SAFETY: checked non-null and aligned; the caller promises it is live.
        unsafe { rwmutex_ref(rw) }.unlock();
        0
    })
}

/// Atomically unlocks `m` and waits on `c` until gmp_cond_signal or gmp_cond_broadcast
/// wakes the caller, then locks `m` again before returning. The caller must hold `m`
/// (otherwise: abort "gmp: sync: unlock of unlocked mutex"). There are no spurious
/// wakeups in this implementation, but as with any condition variable, re-check the
/// condition in a loop: another party may change it before `m` is re-taken. A goroutine
/// parks and may resume on another OS thread; any other thread sleeps on a futex.
/// Returns 0; -EINVAL if `c` or `m` is NULL or misaligned; in a scope (gmp_scope_begin),
/// -ECANCELED or -ETIMEDOUT if the scope ends the wait first (`m` is locked again all the
/// same, and a signal meant for this waiter goes to the next one).
///
/// # Safety
/// `c` and `m` are NULL or point to a live gmp_cond and gmp_mutex; `c` stays alive while
/// the caller waits.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_cond_wait(c: *mut gmp_cond, m: *mut gmp_mutex) -> c_int {
    boundary("gmp_cond_wait", || {
        if bad(c) || bad(m) {
            return -libc::EINVAL;
        }
        // SAFETY: both checked non-null and aligned; the caller promises they are live.
        let (list, mutex) = unsafe { (cond_ref(c), mutex_ref(m)) };
        // The ticket is taken under m: a signal sent after the unlock below counts for us.
        let t = list.add();
        // Under ThreadSanitizer: this unlock and the lock below are made here, where TSan
        // does not look (libgmp is not instrumented); announce them on the mutex word, as
        // the mutex's slow paths do, or what m protects looks unordered between the
        // waiter and whoever held m meanwhile (pthread_cond_wait's interceptor does the
        // same for a pthread mutex).
        let tsan = crate::sys::tsan::on();
        let word = mutex.state as *const core::sync::atomic::AtomicI32 as usize;
        if tsan {
            crate::sys::tsan::release(word);
        }
        mutex.unlock();
        let r = list.wait_ticket_scoped(t);
        // Re-locked also when the scope ended the wait (as pthread_cond_timedwait).
        mutex.lock();
        if tsan {
            crate::sys::tsan::acquire(word);
        }
        match r {
            Ok(()) => 0,
            Err(e) => -e,
        }
    })
}

/// Wakes the longest-waiting waiter of `c`, if any. The caller need not hold the mutex.
/// Returns 0; -EINVAL if `c` is NULL or misaligned.
///
/// # Safety
/// `c` is NULL or points to a live gmp_cond.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_cond_signal(c: *mut gmp_cond) -> c_int {
    boundary("gmp_cond_signal", || {
        if bad(c) {
            return -libc::EINVAL;
        }
        // SAFETY: checked non-null and aligned; the caller promises it is live.
        unsafe { cond_ref(c) }.notify_one();
        0
    })
}

/// Wakes every waiter of `c`. The caller need not hold the mutex. Returns 0; -EINVAL if
/// `c` is NULL or misaligned.
///
/// # Safety
/// `c` is NULL or points to a live gmp_cond.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_cond_broadcast(c: *mut gmp_cond) -> c_int {
    boundary("gmp_cond_broadcast", || {
        if bad(c) {
            return -libc::EINVAL;
        }
        // SAFETY: checked non-null and aligned; the caller promises it is live.
        unsafe { cond_ref(c) }.notify_all();
        0
    })
}

/// Calls `fn(arg)` if no call on `o` has done so yet; every caller, concurrent ones
/// included, returns only after that one call of `fn` has returned, and sees what it
/// wrote. Callers wait by parking (goroutines) or sleeping on a futex (other threads).
/// If `fn` ends its goroutine (gmp_goexit), the once counts as done and the other callers
/// return, as Go's Once does after runtime.Goexit (its deferred store marks it done).
/// `fn` must not call gmp_once_do on the same `o` (that deadlocks, as in Go). Returns 0;
/// -EINVAL if `o` is NULL or misaligned or `fn` is NULL. `arg` is only passed to `fn`.
///
/// # Safety
/// `o` is NULL or points to a live gmp_once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_once_do(o: *mut gmp_once, func: gmp_func, arg: *mut c_void) -> c_int {
    boundary("gmp_once_do", || {
        let Some(func) = func else {
            return -libc::EINVAL;
        };
        if bad(o) {
            return -libc::EINVAL;
        }
        // SAFETY: checked non-null and aligned; the caller promises it is live. The words
        // are plain integers accessed only through atomics.
        let once = unsafe {
            Once {
                done: AtomicU32::from_ptr(addr_of_mut!((*o).done)),
                m: mutex_ref(addr_of_mut!((*o).m)),
            }
        };
        // SAFETY: func is a non-null C function taking arg, as the caller provided.
        once.call(|| unsafe { func(arg) });
        0
    })
}

/// gmp_once_do under the name older headers declared it by (`int gmp_once(gmp_once_t *o,
/// gmp_func fn, void *arg)`), so that programs built against them keep linking and running
/// (abi/exports.txt, `[compat]`). gmp.h's type has that name, which C does not let a
/// function share; its deprecated `gmp_once(o, fn, arg)` macro calls gmp_once_do.
///
/// # Safety
/// As gmp_once_do.
///
/// cbindgen:ignore
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_once(o: *mut gmp_once, func: gmp_func, arg: *mut c_void) -> c_int {
    // SAFETY: the caller's contract is gmp_once_do's.
    unsafe { gmp_once_do(o, func, arg) }
}
