//! Blocking calls run on a helper thread while the calling goroutine parks, bound to its M.
//!
//! A goroutine that blocks in the kernel through the syscall hand-off keeps its M for the
//! length of the call (HACKING.md, decision 4: C code may hold `&errno` across it). The
//! goroutines bound to that M (affinity.rs: pinned there, or
//! parked there inside an interposed call) can run nowhere else meanwhile, and when the
//! call waits for one of them — a `flock` on a file another goroutine holds locked until
//! its `read` returns — neither would move again.
//!
//! So the interposer's hand-off calls (`flock`, `waitpid`, `getaddrinfo`, a slow `open`, a
//! pipe write after a readiness poll where RWF_NOWAIT is refused: `poll::offload_or_here`)
//! made on an M that has goroutines bound to it come here (`run`): the calling goroutine
//! binds itself to the M too, parks, and a helper thread makes the call; when it returns,
//! the helper readies the goroutine, which resumes on its own M (so its C code's `&errno`
//! is right, and `run` sets errno there from the helper's). The M runs the bound
//! goroutines meanwhile. Calls whose effect is tied to the calling thread stay on it (a
//! signal mask for the wait: `ppoll`, `pselect`, `epoll_pwait`), and so do calls from a
//! locked goroutine (its thread may not be the parent of a helper: LockOSThread's state).
//!
//! Helpers are plain threads with every signal blocked (the calls are restartable waits a
//! goroutine would have made on its M; a handler must not run on a thread with no M). One
//! is made when a call finds none idle; an idle one waits 10 s for work, then ends.
//! `INFLIGHT` counts calls submitted and not yet readied back, for the deadlock detector
//! (a goroutine parked here is waiting for the kernel, not for other goroutines), which
//! also knows the helpers' thread ids (`is_helper`).

use core::sync::atomic::{AtomicI32, AtomicI64, AtomicUsize, Ordering};
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use super::*;

/// A call handed to a helper: lives on the parked goroutine's stack until it is readied.
struct Request {
    op: *const (dyn Fn() -> i64 + 'static),
    /// What `op` returned, and the helper's errno right after.
    result: i64,
    errno: i32,
    gp: *mut G,
}

/// Calls waiting for a helper, and helpers waiting for calls. Every queued call has a
/// helper of its own to make it — `idle >= queue.len()` after each submission, or a new
/// helper is made — since a call may wait for the one behind it (an unlock).
struct Pool {
    queue: VecDeque<*mut Request>,
    /// Helpers waiting on `WORK` (each leaves the count itself when it wakes).
    idle: usize,
}

// SAFETY: the raw pointers in the queue are handed from the submitting M to one helper;
// each Request stays valid until its goroutine is readied (after the helper's last use).
unsafe impl Send for Pool {}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    queue: VecDeque::new(),
    idle: 0,
});
static WORK: Condvar = Condvar::new();

/// Calls submitted whose goroutine has not been readied yet (SeqCst, for checkdead).
pub(crate) static INFLIGHT: AtomicI64 = AtomicI64::new(0);
/// Calls ever made on a helper (tests).
pub static CALLS: AtomicUsize = AtomicUsize::new(0);

/// Thread ids of live helpers, for the deadlock detector; a helper that finds no free slot
/// stays unknown to it (which then keeps quiet: it never reports falsely).
static TIDS: [AtomicI32; 64] = [const { AtomicI32::new(0) }; 64];

/// How long an idle helper waits for work before it ends.
const IDLE_EXIT: Duration = Duration::from_secs(10);
const HELPER_STACK: usize = 1 << 20;

/// Whether a blocking call on this goroutine should go to a helper: it runs on an M with
/// goroutines bound to it (other than itself), holds a P, and is not locked.
#[inline]
pub fn wanted() -> bool {
    let m = getm();
    if m.is_null() {
        return false;
    }
    // SAFETY: m is this thread's M; its owner-only fields are ours, and curg is the
    // goroutine running here (if any).
    unsafe {
        let n = (*m).naffine.get();
        if n == 0 || (*m).p.load(Ordering::Relaxed).is_null() {
            return false;
        }
        let gp = (*m).curg.load(Ordering::Relaxed);
        if gp.is_null() || !(*gp).lockedm.load(Ordering::Relaxed).is_null() {
            return false;
        }
        let own = core::ptr::eq((*gp).affm.load(Ordering::Relaxed), m) as u32;
        n > own
    }
}

/// Makes `op` on a helper thread while the calling goroutine parks bound to its M (see the
/// module doc); returns what it returned and the errno it left (the caller's own errno is
/// not touched).
///
/// # Safety
/// On a goroutine for which `wanted()` holds; `op` may run on another thread.
pub unsafe fn run(op: &dyn Fn() -> i64) -> (i64, i32) {
    // SAFETY: caller contract: getm() is this thread's M and curg runs here.
    let gp = unsafe { (*getm()).curg.load(Ordering::Relaxed) };
    // Bound for the length of the call (if not bound already: pinned).
    let bound = bind_current();
    // SAFETY: the helper uses `op` only before readying us, and we wait for that.
    let op: *const (dyn Fn() -> i64 + 'static) = unsafe { core::mem::transmute(op) };
    let mut req = Request {
        op,
        result: 0,
        errno: 0,
        gp,
    };
    INFLIGHT.fetch_add(1, Ordering::SeqCst);
    // SAFETY: on a goroutine holding no runtime lock; `submit` publishes us to a helper
    // only once we are parked.
    unsafe {
        gopark(
            Some(submit),
            &mut req as *mut Request as usize,
            WaitReason::Syscall,
        )
    };
    drop(bound);
    (req.result, req.errno)
}

/// The pool's rule (see `Pool`): a call just queued behind `queued - 1` others is taken by
/// a waiting helper only if every queued call has one (`idle` counts the helpers still
/// waiting, including those notified but not yet awake); otherwise it gets a new helper.
/// A call may wait for the one queued behind it, so sharing a helper could deadlock
/// (`loom_tests::every_call_has_a_helper` does, with `idle >= 1` here: loom reports the
/// deadlock and aborts, which is why that form is not a test of its own).
#[inline]
fn idle_helpers_suffice(idle: usize, queued: usize) -> bool {
    idle >= queued
}

/// gopark's unlock function: the goroutine is parked; queue its call for a helper.
unsafe fn submit(_gp: *mut G, arg: usize) -> bool {
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    pool.queue.push_back(arg as *mut Request);
    if idle_helpers_suffice(pool.idle, pool.queue.len()) {
        drop(pool);
        WORK.notify_one();
    } else {
        drop(pool);
        crate::sys::spawn_detached(
            "offload helper",
            HELPER_STACK,
            helper_main,
            core::ptr::null_mut(),
        );
    }
    true
}

extern "C" fn helper_main(_: *mut libc::c_void) -> *mut libc::c_void {
    super::threads::register_helper();
    // SAFETY: plain signal-mask calls on this new thread.
    unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        // But the signal that interrupts a call whose goroutine's scope ended
        // (scopecall.rs; its handler does nothing).
        libc::sigdelset(&mut all, scopecall::interrupt_signal());
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, core::ptr::null_mut());
    }
    let tid = crate::sys::gettid();
    let slot = TIDS.iter().find(|s| {
        s.compare_exchange(0, tid, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    });
    let r = std::panic::catch_unwind(helper_loop);
    if r.is_err() {
        throw("offload helper panicked");
    }
    if let Some(s) = slot {
        s.store(0, Ordering::SeqCst);
    }
    core::ptr::null_mut()
}

/// Makes calls until none comes for `IDLE_EXIT`.
fn helper_loop() {
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(req) = pool.queue.pop_front() {
            drop(pool);
            // SAFETY: the Request lives on its parked goroutine's stack until we ready it.
            unsafe { call(req) };
            pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
            continue;
        }
        pool.idle += 1;
        let (p, t) = WORK
            .wait_timeout(pool, IDLE_EXIT)
            .unwrap_or_else(|e| e.into_inner());
        pool = p;
        pool.idle -= 1;
        if t.timed_out() && pool.queue.is_empty() {
            return;
        }
    }
}

/// Makes one queued call and readies its goroutine.
///
/// # Safety
/// `req` came off the queue: valid, and ours alone, until its goroutine is readied.
unsafe fn call(req: *mut Request) {
    // SAFETY: caller contract.
    unsafe {
        (*req).result = (*(*req).op)();
        (*req).errno = *libc::__errno_location();
        let gp = (*req).gp;
        CALLS.fetch_add(1, Ordering::Relaxed);
        // After this, `req` may be gone (the goroutine returns from `run`).
        goready(gp);
    }
    INFLIGHT.fetch_sub(1, Ordering::SeqCst);
}

/// Whether `tid` is a live helper thread (checkdead).
pub(crate) fn is_helper(tid: i32) -> bool {
    TIDS.iter().any(|t| t.load(Ordering::SeqCst) == tid)
}

/// Loom model of the pool (run by `tests/loom.rs`): the submit rule and the helpers' loop
/// with loom's mutex and condition variable, calls reduced to closures. The scenario is the
/// one the rule exists for: a helper waits idle; call A, queued first, blocks until call
/// B, queued second, has run. The rule must give B a helper of its own in every
/// interleaving; a rule that hands B to the idle helper already woken for A deadlocks.
#[cfg(all(test, loom))]
mod loom_tests {
    use crate::loom::sync::{Arc, Condvar, Mutex};
    use crate::loom::thread;
    use std::collections::VecDeque;

    type Call = Box<dyn FnOnce() + Send>;

    struct Pool {
        queue: VecDeque<Call>,
        idle: usize,
        shutdown: bool,
    }

    struct Shared {
        pool: Mutex<Pool>,
        work: Condvar,
    }

    fn helper(s: Arc<Shared>) {
        let mut pool = s.pool.lock().unwrap();
        loop {
            if let Some(call) = pool.queue.pop_front() {
                drop(pool);
                call();
                pool = s.pool.lock().unwrap();
                continue;
            }
            if pool.shutdown {
                return;
            }
            pool.idle += 1;
            pool = s.work.wait(pool).unwrap();
            pool.idle -= 1;
        }
    }

    fn submit(
        s: &Arc<Shared>,
        call: Call,
        rule: fn(usize, usize) -> bool,
    ) -> Option<thread::JoinHandle<()>> {
        let mut pool = s.pool.lock().unwrap();
        pool.queue.push_back(call);
        if rule(pool.idle, pool.queue.len()) {
            drop(pool);
            s.work.notify_one();
            None
        } else {
            drop(pool);
            let s2 = s.clone();
            Some(thread::spawn(move || helper(s2)))
        }
    }

    fn scenario(rule: fn(usize, usize) -> bool) {
        // A bound of 2 is enough for the deadlock (the helper waits, then both calls are
        // queued before it wakes); unbounded, the model runs for tens of minutes.
        crate::loom::model_bounded(Some(2), move || {
            let s = Arc::new(Shared {
                pool: Mutex::new(Pool {
                    queue: VecDeque::new(),
                    idle: 0,
                    shutdown: false,
                }),
                work: Condvar::new(),
            });
            let mut helpers = Vec::new();
            let s1 = s.clone();
            helpers.push(thread::spawn(move || helper(s1)));
            // (The first helper may or may not be waiting when A is queued: loom explores
            // both.) The gate: whether B has run, which A waits for, and how many of A
            // and B have finished.
            let gate = Arc::new((Mutex::new((false, 0u32)), Condvar::new()));
            let (ga, gb) = (gate.clone(), gate.clone());
            let a: Call = Box::new(move || {
                let (m, cv) = &*ga;
                let mut st = m.lock().unwrap();
                while !st.0 {
                    st = cv.wait(st).unwrap();
                }
                st.1 += 1;
                cv.notify_all();
            });
            let b: Call = Box::new(move || {
                let (m, cv) = &*gb;
                let mut st = m.lock().unwrap();
                st.0 = true;
                st.1 += 1;
                cv.notify_all();
            });
            helpers.extend(submit(&s, a, rule));
            helpers.extend(submit(&s, b, rule));
            {
                let (m, cv) = &*gate;
                let mut st = m.lock().unwrap();
                while st.1 < 2 {
                    st = cv.wait(st).unwrap();
                }
            }
            s.pool.lock().unwrap().shutdown = true;
            s.work.notify_all();
            for h in helpers {
                h.join().unwrap();
            }
        });
    }

    #[test]
    fn every_call_has_a_helper() {
        scenario(super::idle_helpers_suffice);
    }
}
