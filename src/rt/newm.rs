//! Starting Ms (Go's `startm`, `newm`, `allocm`, `newmHandoff` and the template thread):
//! running a P on an idle M or on a new thread, and waking the M that goroutines bound to
//! it were queued for. The submit path calls these; the new M's thread runs `mstart`,
//! which lives above (the scheduler loop) and reaches this file as the one function
//! pointer `schedinit` registers ([`set_mstart`]).
//!
//! # The template thread
//!
//! A locked goroutine may change its thread's state (unshare namespaces, setresuid on one
//! thread through a raw syscall, scheduling policy, CPU affinity, signal mask), and
//! `pthread_create` clones most of that into the child. A new M resets its signal mask,
//! affinity and name itself (`os_linux::minit`), but not namespaces, credentials or
//! scheduling policy. New Ms are therefore never created from a locked (or exiting)
//! thread: `newm` hands them to the template thread, a plain thread created by the first
//! `lock` *before* the caller is locked (so from a thread in its original state, as Go's
//! startTemplateThread), which creates them.

use core::ptr::null_mut;
use core::sync::atomic::Ordering;

use super::idle::*;
use super::*;
use crate::sys::{Lock, Note};

/// Runs P `pp` on an idle M, or on a new one. `spinning`: the M starts spinning (the
/// caller already counted it in `nmspinning`).
pub(super) fn startm(pp: *mut P, spinning: bool) {
    let nmp = {
        let mut g = lock_sched();
        mget(&mut g)
    };
    match nmp {
        None => newm(pp, spinning),
        Some(nmp) => {
            // SAFETY: Ms are never freed; nmp is idle (asleep or about to sleep on park), so
            // only we write its spinning/nextp until the wakeup publishes them.
            let m = unsafe { &*nmp };
            if m.spinning.load(Ordering::Relaxed) {
                throw("startm: m is spinning");
            }
            if !m.nextp.load(Ordering::Relaxed).is_null() {
                throw("startm: m has p");
            }
            m.spinning.store(spinning, Ordering::Relaxed);
            m.nextp.store(pp, Ordering::Relaxed);
            m.park.wakeup();
        }
    }
}

/// A goroutine affine to `am` was queued after `am` marked itself idle (affinity.rs), and
/// the caller claimed `am`: get it a P.
pub(super) fn wake_affine_m(am: *mut M) {
    let mut g = lock_sched();
    // SAFETY: Ms are never freed; `mlist` is owned by the lock holder.
    match unsafe { (*am).mlist.get() } {
        MLIST_IDLE => {
            munlink(&mut g, am);
            match pidleget(&mut g) {
                Some(pp) => {
                    drop(g);
                    give_p(am, pp);
                }
                None => affwait_put(&mut g, am),
            }
        }
        // Waiting for a P already.
        MLIST_AFFWAIT => {}
        // Between marking itself idle and reaching a list (stopm reads the flag under the
        // lock), or already holding a P again (then it looks at its queue anyway).
        // If it is the timer M, its timed sleep must end now (SeqCst: it publishes itself
        // as the timer M, then reads the flag).
        _ => {
            // SAFETY: as above.
            if unsafe { (*am).p.load(Ordering::Relaxed).is_null() } {
                // SAFETY: as above.
                unsafe { (*am).affwanted.store(true, Ordering::SeqCst) };
                drop(g);
                wake_timer_m_if(am);
            }
        }
    }
}

/// Stack size of an M's own thread (g0): the scheduler loop and the unlock functions of
/// gopark run there, never user code.
pub(super) const G0_STACK: usize = 512 * 1024;

/// Creates a new M (an OS thread) that will run P `pp`.
pub(super) fn newm(pp: *mut P, spinning: bool) {
    newm1(allocm(pp, spinning));
}

/// Allocates a new M that will take P `pp` when its thread starts (`newm1`); until then
/// its fields are the caller's.
pub(super) fn allocm(pp: *mut P, spinning: bool) -> *mut M {
    let count = SCHED.mcount.fetch_add(1, Ordering::SeqCst) + 1;
    let max = SCHED.maxmcount.load(Ordering::Relaxed);
    if count > max {
        let mut buf = [0u8; 96];
        let msg = crate::sys::fmt_msg(
            &mut buf,
            &[
                b"program exceeds ",
                &crate::sys::fmt_u64(max as u64),
                b"-thread limit",
            ],
        );
        crate::sys::write_stderr(b"gmp: ");
        crate::sys::write_stderr(msg);
        crate::sys::write_stderr(b"\n");
        throw("thread exhaustion");
    }
    let fastrand = 0x9E37_79B9_7F4A_7C15 ^ (count as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
    let dead = {
        let mut g = lock_sched();
        let s = g.synced();
        let m = s.mfree;
        if !m.is_null() {
            // SAFETY: Ms on mfree are dead and linked under the lock we hold.
            s.mfree = unsafe { (*m).schedlink.get() };
        }
        m
    };
    if !dead.is_null() {
        // SAFETY: we took it off mfree: its thread has exited and nobody else owns it.
        unsafe { revive_m(dead, pp, spinning, fastrand) };
        return dead;
    }
    let m = Box::into_raw(Box::new(M {
        id: SCHED.mnext.fetch_add(1, Ordering::Relaxed),
        g0_sp: Owned::new(0),
        g0_fpenv: Owned::new(0),
        curg: AtomicPtr::new(null_mut()),
        p: AtomicPtr::new(null_mut()),
        nextp: AtomicPtr::new(pp),
        spinning: AtomicBool::new(spinning),
        blocked: AtomicBool::new(false),
        timer_poll: AtomicBool::new(false),
        park: Note::new(),
        schedlink: Owned::new(null_mut()),
        schedprev: Owned::new(null_mut()),
        mlist: Owned::new(MLIST_NONE),
        aff: AffQueue::new(),
        affwanted: AtomicBool::new(false),
        naffine: Owned::new(0),
        affskip: Owned::new(false),
        globturn: Owned::new(false),
        lockedg: AtomicPtr::new(null_mut()),
        waitunlockf: Owned::new(None),
        waitlock: Owned::new(0),
        fastrand: Owned::new(fastrand),
        schedlat_tick: Owned::new(0),
        stackhwm_next: Owned::new(0),
        oldp: AtomicPtr::new(null_mut()),
        syscalltick: Owned::new(0),
        inblocking: Owned::new(0),
        lockedext: Owned::new(0),
        lockstart: Owned::new(false),
        exiting: Owned::new(false),
        dead: AtomicBool::new(false),
        tid: AtomicI32::new(0),
        alllink: AtomicPtr::new(null_mut()),
        asan_fake: Owned::new(0),
        asan_g0: Owned::new((0, 0)),
        tsan_g0: Owned::new(0),
        foreign_seen: Owned::new(0),
        foreign_handoff: Owned::new(false),
        unseen: Seen::new(),
        vcsw_seen: [AtomicU64::new(0), AtomicU64::new(0)],
        task_fds: [const { AtomicU64::new(NO_TASK_FD) }; 3],
        task_lock: AtomicBool::new(false),
        preemptsig: PreemptSig::new(),
        proftimer: AtomicU64::new(0),
    }));
    // Publish on allm (lock-free push; entries are never removed).
    let mut head = SCHED.allm.load(Ordering::Relaxed);
    loop {
        // SAFETY: m is ours until published.
        unsafe { (*m).alllink.store(head, Ordering::Relaxed) };
        match SCHED
            .allm
            .compare_exchange_weak(head, m, Ordering::Release, Ordering::Relaxed)
        {
            Ok(_) => break,
            Err(h) => head = h,
        }
    }
    m
}

/// Resets dead M `m` to the state `allocm` gives a new one (keeping its `id` and its place
/// on `allm`, whose readers skip it until `dead` turns false).
///
/// # Safety
/// `m` was just taken off `SCHED.mfree`: its thread has exited, and no list or goroutine
/// refers to it.
pub(super) unsafe fn revive_m(m: *mut M, pp: *mut P, spinning: bool, fastrand: u64) {
    // Every field, by name: a field added to M without a line here does not compile.
    // SAFETY: caller contract: the Owned fields have no owner until the new thread starts.
    unsafe {
        let M {
            id: _,
            g0_sp,
            g0_fpenv,
            curg,
            p,
            nextp,
            spinning: spin,
            blocked,
            timer_poll,
            park,
            schedlink,
            schedprev,
            mlist,
            aff,
            affwanted,
            naffine,
            affskip,
            globturn,
            lockedg,
            waitunlockf,
            waitlock,
            fastrand: rand,
            schedlat_tick,
            stackhwm_next,
            oldp,
            syscalltick,
            inblocking,
            lockedext,
            lockstart,
            exiting,
            dead,
            tid,
            alllink: _,
            asan_fake,
            asan_g0,
            tsan_g0,
            foreign_seen,
            foreign_handoff,
            unseen,
            vcsw_seen,
            // Kept: `taskfile::read_task_file` closes a dead thread's files when it finds
            // the thread id changed (or the file answering ESRCH).
            task_fds: _,
            task_lock: _,
            // Kept: `preemptsig::arm` drops a dead thread's source when it finds the
            // thread id changed.
            preemptsig: _,
            // Kept: `sigprof::minit` deletes the dead thread's timer when the new thread
            // starts.
            proftimer: _,
        } = &*m;
        if !curg.load(Ordering::Relaxed).is_null()
            || !p.load(Ordering::Relaxed).is_null()
            || naffine.get() != 0
            || !aff.is_empty()
            || !lockedg.load(Ordering::Relaxed).is_null()
        {
            throw("allocm: dead m still in use");
        }
        g0_sp.set(0);
        g0_fpenv.set(0);
        nextp.store(pp, Ordering::Relaxed);
        spin.store(spinning, Ordering::Relaxed);
        blocked.store(false, Ordering::Relaxed);
        timer_poll.store(false, Ordering::Relaxed);
        park.clear();
        schedlink.set(null_mut());
        schedprev.set(null_mut());
        mlist.set(MLIST_NONE);
        aff.reset();
        affwanted.store(false, Ordering::Relaxed);
        affskip.set(false);
        globturn.set(false);
        waitunlockf.set(None);
        waitlock.set(0);
        rand.set(fastrand);
        schedlat_tick.set(0);
        stackhwm_next.set(0);
        oldp.store(null_mut(), Ordering::Relaxed);
        syscalltick.set(0);
        inblocking.set(0);
        lockedext.set(0);
        lockstart.set(false);
        exiting.set(false);
        tid.store(0, Ordering::Relaxed);
        asan_fake.set(0);
        asan_g0.set((0, 0));
        tsan_g0.set(0);
        foreign_seen.set(0);
        foreign_handoff.set(false);
        unseen.clear();
        vcsw_seen[0].store(0, Ordering::Relaxed);
        vcsw_seen[1].store(0, Ordering::Relaxed);
        // Last: allm's readers look at an M only once it is not dead.
        dead.store(false, Ordering::Release);
    }
}

/// Starts the thread of new M `m` (from `allocm`): Go's `newm1`, through the template
/// thread when this thread must not be the parent.
pub(super) fn newm1(m: *mut M) {
    // A thread whose state its goroutine may have changed (LockOSThread: namespaces,
    // credentials, scheduling policy, signal mask, affinity — all inherited by clone) must
    // not be the parent of a new M: the template thread creates it instead.
    if must_use_template() {
        newm_handoff(m);
        return;
    }
    newosproc(m);
}

/// Creates the OS thread of the new M `m` (Go's `newosproc`; from `newm1`, or from the
/// template thread).
/// mstart_trampoline receives the M pointer, which stays valid forever (Ms are never
/// freed).
fn newosproc(m: *mut M) {
    crate::sys::spawn_detached("newm", G0_STACK, mstart_trampoline, m.cast());
}

/// The body of every new M's thread (`mstart::mstart`: the scheduler loop, two floors
/// above), set once by `schedinit` before the first M is started.
static MSTART: std::sync::OnceLock<unsafe fn(&M)> = std::sync::OnceLock::new();

/// Registers the body of new Ms' threads (from `schedinit`, before any M is started).
pub(super) fn set_mstart(f: unsafe fn(&M)) {
    if MSTART.set(f).is_err() {
        throw("set_mstart: called twice");
    }
}

extern "C" fn mstart_trampoline(arg: *mut libc::c_void) -> *mut libc::c_void {
    let m = arg as *mut M;
    let mstart = *MSTART
        .get()
        .unwrap_or_else(|| throw("newm: an M started before schedinit registered mstart"));
    // SAFETY: newm passed a live M that belongs to this new thread from now on; `mstart`
    // is `mstart::mstart`, whose contract is exactly that.
    unsafe { mstart(&*m) };
    // The M exited (its goroutine ended locked): the thread ends here.
    null_mut()
}

static TEMPLATE_ONCE: std::sync::Once = std::sync::Once::new();

/// Guards `PENDING` and `SLEEPING` (a leaf lock).
static TLOCK: Lock = Lock::new(crate::sys::Rank::TemplateThread);

/// New Ms waiting for their thread, linked through `m.schedlink` (owner: holder of TLOCK).
static PENDING: Owned<*mut M> = Owned::new(null_mut());

/// The template thread is asleep on `TNOTE` (owner: holder of TLOCK).
static SLEEPING: Owned<bool> = Owned::new(false);

static TNOTE: Note = Note::new();

/// Whether `newm` must not create a thread from the calling thread (it is locked, or is
/// an M exiting after its goroutine ended locked).
#[inline]
fn must_use_template() -> bool {
    let mp = getm();
    if mp.is_null() {
        return false;
    }
    // SAFETY: this thread's M owns these fields.
    unsafe { (*mp).lockedext.get() > 0 || (*mp).exiting.get() }
}

/// The template thread's stack: it only clones Ms.
const TEMPLATE_STACK: usize = 128 * 1024;

pub(super) fn ensure_template_thread() {
    TEMPLATE_ONCE.call_once(|| {
        crate::sys::spawn_detached("template thread", TEMPLATE_STACK, template_main, null_mut());
    });
}

/// Queues new M `m` (fully initialised, not started) for the template thread.
fn newm_handoff(m: *mut M) {
    // The template thread exists: a thread is locked or exiting only after a `lock`.
    ensure_template_thread();
    TLOCK.lock();
    // SAFETY: we hold TLOCK; m is not started, so its schedlink is ours.
    let wake = unsafe {
        (*m).schedlink.set(PENDING.get());
        PENDING.set(m);
        let w = SLEEPING.get();
        SLEEPING.set(false);
        w
    };
    TLOCK.unlock();
    if wake {
        TNOTE.wakeup();
    }
}

extern "C" fn template_main(_: *mut libc::c_void) -> *mut libc::c_void {
    super::threads::register();
    loop {
        TLOCK.lock();
        // SAFETY: we hold TLOCK.
        let mut list = unsafe { PENDING.get() };
        if list.is_null() {
            // SAFETY: we hold TLOCK.
            unsafe { SLEEPING.set(true) };
            TLOCK.unlock();
            TNOTE.sleep();
            TNOTE.clear();
            continue;
        }
        // SAFETY: we hold TLOCK.
        unsafe { PENDING.set(null_mut()) };
        TLOCK.unlock();
        while !list.is_null() {
            // SAFETY: the Ms on the list are ours until started.
            let next = unsafe { (*list).schedlink.get() };
            // SAFETY: as above.
            unsafe { (*list).schedlink.set(null_mut()) };
            newosproc(list);
            list = next;
        }
    }
}

/// Wakes `tm` if it is the timer M (affinity.rs: work was queued that only it can run).
pub(crate) fn wake_timer_m_if(tm: *mut M) {
    // Claim it: only the claimer wakes it (a note takes one wakeup per sleep).
    if SCHED
        .timer_m
        .compare_exchange(tm, null_mut(), Ordering::SeqCst, Ordering::Relaxed)
        .is_ok()
    {
        SCHED.timer_m_until.store(i64::MAX, Ordering::SeqCst);
        // SAFETY: Ms are never freed.
        if unsafe { (*tm).timer_poll.load(Ordering::SeqCst) } {
            epoll::OWED.fetch_add(1, Ordering::SeqCst);
            epoll::netpoll_break();
        } else {
            // SAFETY: Ms are never freed; tm sleeps on its note until this wakeup.
            unsafe { (*tm).park.wakeup() };
        }
    }
}

/// Loom model of a pinned goroutine readied for an M that goes to sleep as the timer M
/// (no such goroutine waits for the M's deadline). A **model**, as `spinning_loom` is:
/// `SCHED`, notes and the poller are out of loom's reach, so the words are the M's
/// affinity queue (its lock, its length and its idle mark), its `affwanted`, `timer_m`
/// reduced to "this M is the timer M", and the note reduced to "a waker claimed the M".
/// The M holds no P and stays on no list throughout, and its deadline is `i64::MAX` (a
/// goroutine waits on the poller and no timer is pending), so a sleep ends only through a
/// claim.
///
/// - The readier (`affinity::ready`, then `wake_affine_m`'s arm for an M on no list,
///   then `wake_timer_m_if`): under the queue's lock it queues the goroutine and takes the
///   idle mark; if it took it, it stores `affwanted` (SeqCst), then claims the timer M
///   with a CAS of `timer_m` from the M to null (SeqCst) and, if that succeeds, wakes the
///   note.
/// - The M (`park_idle`'s `go_idle`, then `sleep_as_timer_m`): under the queue's lock it
///   marks itself idle if the queue is empty (else stopm gets it a P); it publishes itself
///   with a CAS of `timer_m` from null to itself (SeqCst), then reads `affwanted` (SeqCst).
///   If the flag is up it does not sleep; it takes itself back out of `timer_m` with a
///   CAS, and if that fails a waker claimed it and it waits on the note for that waker's
///   wake-up. Otherwise it sleeps until woken. `park_idle`'s read of `affwanted` before
///   `go_idle` is left out: no readier can claim the M before `go_idle` marks it idle.
///
/// The two sides are a Dekker pair, {store `affwanted`; CAS `timer_m`} against {CAS
/// `timer_m`; load `affwanted`}, modelled with a `fence(SeqCst)` on each side. The
/// claims: the M sleeps with a goroutine queued for it only if a waker claimed it, and a
/// claimed wake-up is always taken (by the sleep, or by the wait after a failed
/// withdrawal). `broken_timer_m_without_affwanted_recheck` drops the M's read of
/// `affwanted` after it publishes itself and must fail.
#[cfg(all(test, loom))]
mod loom_tests {
    use crate::loom::sync::atomic::{AtomicBool, Ordering::*, fence};
    use crate::loom::sync::{Arc, Mutex};
    use crate::loom::thread;

    /// The M's affinity queue (`m.aff`): goroutines queued, and the idle mark.
    struct Aff {
        queued: u32,
        idle: bool,
    }

    struct World {
        aff: Mutex<Aff>,
        affwanted: AtomicBool,
        /// `SCHED.timer_m` holds this M.
        timer_m: AtomicBool,
        /// A waker claimed the M out of `timer_m`: the note's wake-up is on its way.
        woken: AtomicBool,
    }

    /// What the M did.
    struct Outcome {
        /// It went to sleep as the timer M (until woken: the deadline is `i64::MAX`).
        slept: bool,
        /// It did not sleep, its withdrawal from `timer_m` failed, and it waited on the
        /// note for the claimer's wake-up.
        took_claim: bool,
    }

    /// `ready` for one goroutine affine to the M, then `wake_affine_m` and
    /// `wake_timer_m_if`.
    fn ready(w: &World) {
        let claimed = {
            let mut a = w.aff.lock().unwrap();
            a.queued += 1;
            core::mem::replace(&mut a.idle, false)
        };
        if claimed {
            w.affwanted.store(true, SeqCst);
            fence(SeqCst);
            if w.timer_m
                .compare_exchange(true, false, SeqCst, Relaxed)
                .is_ok()
            {
                w.woken.store(true, Relaxed);
            }
        }
    }

    /// `go_idle`, then `sleep_as_timer_m` up to the sleep. `recheck`: the M reads
    /// `affwanted` after it publishes itself.
    fn m_parks(w: &World, recheck: bool) -> Outcome {
        let nothing = Outcome {
            slept: false,
            took_claim: false,
        };
        let has_affine = {
            let mut a = w.aff.lock().unwrap();
            if a.queued == 0 {
                a.idle = true;
                false
            } else {
                true
            }
        };
        if has_affine {
            // stopm gets a P for it.
            return nothing;
        }
        if w.timer_m
            .compare_exchange(false, true, SeqCst, Relaxed)
            .is_err()
        {
            // Another M is the timer M (never, here): stopm.
            return nothing;
        }
        fence(SeqCst);
        if recheck && w.affwanted.load(SeqCst) {
            // No sleep (`left` is 0). Withdraw, or take the claimer's wake-up.
            let took_claim = w
                .timer_m
                .compare_exchange(true, false, SeqCst, Relaxed)
                .is_err();
            return Outcome {
                slept: false,
                took_claim,
            };
        }
        Outcome {
            slept: true,
            took_claim: false,
        }
    }

    fn check_affine(recheck: bool) {
        crate::loom::model_bounded(None, move || {
            let w = Arc::new(World {
                aff: Mutex::new(Aff {
                    queued: 0,
                    idle: false,
                }),
                affwanted: AtomicBool::new(false),
                timer_m: AtomicBool::new(false),
                woken: AtomicBool::new(false),
            });
            let w2 = w.clone();
            let m = thread::spawn(move || m_parks(&w2, recheck));
            ready(&w);
            let o = m.join().unwrap();
            let queued = w.aff.lock().unwrap().queued != 0;
            let woken = w.woken.load(Relaxed);
            assert!(
                !o.slept || !queued || woken,
                "the timer M slept with a pinned goroutine queued and no wake-up on its way"
            );
            assert_eq!(
                woken,
                o.slept || o.took_claim,
                "a claimed wake-up was not taken, or one was waited for that nobody claimed"
            );
        });
    }

    /// Every interleaving: the M sees the queued goroutine (on its queue or through
    /// `affwanted`), or the readier claims it out of its sleep as the timer M.
    #[test]
    fn affine_ready_wakes_timer_m_or_is_seen() {
        check_affine(true);
    }

    /// Without the read of `affwanted` after the M publishes itself, a goroutine readied
    /// between the M's `go_idle` and its CAS of `timer_m` neither is seen nor claims it:
    /// the model must find it.
    #[test]
    #[should_panic(expected = "the timer M slept with a pinned goroutine queued")]
    fn broken_timer_m_without_affwanted_recheck() {
        check_affine(false);
    }
}
