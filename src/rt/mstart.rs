//! Ms: creating, starting and stopping them (Go's `newm`, `allocm`, `mstart`, `mexit`,
//! `startm`, `stopm`), handing a P on (`handoffp`), and an M waiting for a P for work only
//! it can run (affinity).

use core::ptr::null_mut;
use core::sync::atomic::Ordering;

use super::*;
use super::{idle::*, procresize::*, ready::*, schedule::*};
use crate::arch;

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

/// Hands unowned P `pp` to M `am`, which sleeps on its note waiting for one, and wakes it.
pub(super) fn give_p(am: *mut M, pp: *mut P) {
    // SAFETY: Ms are never freed; am sleeps (or is about to) and reads nextp only after the
    // wakeup, which publishes it.
    unsafe {
        if !(*am).nextp.load(Ordering::Relaxed).is_null() {
            throw("give_p: m has p");
        }
        (*am).nextp.store(pp, Ordering::Relaxed);
        (*am).park.wakeup();
    }
}

/// A goroutine affine to `am` was queued after `am` marked itself idle (affinity.rs), and
/// the caller claimed `am`: get it a P.
pub(super) fn wake_affine_m(am: *mut M) {
    let mut g = lock_sched();
    // SAFETY: Ms are never freed; `mlist` is owned by the lock holder.
    match unsafe { (*am).mlist.get() } {
        affinity::MLIST_IDLE => {
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
        affinity::MLIST_AFFWAIT => {}
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
                timer::wake_timer_m_if(am);
            }
        }
    }
}

/// Called by an M that holds no P and whose goroutine can run only on it (the
/// `exitsyscall` slow path): takes an idle P, or waits on the affinity list until one is
/// handed over. Returns holding a P.
///
/// # Safety
/// `m` holds no P and is not spinning.
pub(super) unsafe fn wait_for_p(m: ThisM<'_>) {
    {
        let mut g = lock_sched();
        if let Some(pp) = pidleget(&mut g) {
            drop(g);
            // SAFETY: pp came off the idle list.
            unsafe { acquirep(m, pp) };
            return;
        }
        affwait_put(&mut g, m.m() as *const M as *mut M);
    }
    // SAFETY: no P; whoever takes us off the list hands us one.
    unsafe { sleep_for_p(m) };
}

/// Sleeps on `m.park` until a P is handed over through `m.nextp`, then acquires it.
///
/// # Safety
/// `m` holds no P, somewhere a P hand-over will find it (an idle list,
/// `affwait`, or locked to a goroutine).
pub(super) unsafe fn sleep_for_p(m: ThisM<'_>) {
    m.blocked.store(true, Ordering::Relaxed);
    m.park.sleep();
    m.park.clear();
    m.blocked.store(false, Ordering::Relaxed);
    let pp = m.nextp.swap(null_mut(), Ordering::Acquire);
    // SAFETY: whoever woke us released pp for us and published it with the
    // wakeup.
    unsafe { acquirep(m, pp) };
}

/// The 61-tick check's other half: an M waits for a P to run work only it can run, and
/// no P has gone idle (all are busy). Hand it ours, with our local work, and stop (onto
/// affwait ourselves if goroutines only we can run are queued: `stopm`). Returns false if
/// nobody waits (any more).
///
/// # Safety
/// `m` holds a P and is not spinning.
pub(super) unsafe fn handoff_to_affwait(m: ThisM<'_>) -> bool {
    let am = {
        let mut g = lock_sched();
        match affwait_get(&mut g) {
            Some(am) => am,
            None => return false,
        }
    };
    // SAFETY: holding a P.
    let pp = unsafe { releasep(m) };
    give_p(am, pp);
    // SAFETY: no P, not spinning.
    unsafe { stopm(m) };
    true
}

/// Stack size of an M's own thread (g0): the scheduler loop and the unlock functions of
/// gopark run there, never user code.
pub(super) const G0_STACK: usize = 512 * 1024;

/// Creates a new M (an OS thread) that will run P `pp`.
pub(super) fn newm(pp: *mut P, spinning: bool) {
    start_m(allocm(pp, spinning));
}

/// Allocates a new M that will take P `pp` when its thread starts (`start_m`); until then
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
        park: Note::new(),
        schedlink: Owned::new(null_mut()),
        schedprev: Owned::new(null_mut()),
        mlist: Owned::new(affinity::MLIST_NONE),
        aff: AffQueue::new(),
        affwanted: AtomicBool::new(false),
        naffine: Owned::new(0),
        affskip: Owned::new(false),
        globturn: Owned::new(false),
        lockedg: AtomicPtr::new(null_mut()),
        waitunlockf: Owned::new(None),
        waitlock: Owned::new(0),
        fastrand: Owned::new(fastrand),
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
        task_fds: [const { AtomicU64::new(preempt::NO_TASK_FD) }; 3],
        task_lock: AtomicBool::new(false),
        preemptsig: PreemptSig::new(),
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
            // Kept: `preempt::read_task_file` closes a dead thread's files when it finds
            // the thread id changed (or the file answering ESRCH).
            task_fds: _,
            task_lock: _,
            // Kept: `preemptsig::arm` drops a dead thread's source when it finds the
            // thread id changed.
            preemptsig: _,
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
        park.clear();
        schedlink.set(null_mut());
        schedprev.set(null_mut());
        mlist.set(affinity::MLIST_NONE);
        aff.reset();
        affwanted.store(false, Ordering::Relaxed);
        affskip.set(false);
        globturn.set(false);
        waitunlockf.set(None);
        waitlock.set(0);
        rand.set(fastrand);
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

/// Starts the thread of new M `m` (from `allocm`).
pub(super) fn start_m(m: *mut M) {
    // A thread whose state its goroutine may have changed (LockOSThread: namespaces,
    // credentials, scheduling policy, signal mask, affinity — all inherited by clone) must
    // not be the parent of a new M: the template thread creates it instead.
    if lockosthread::must_use_template() {
        lockosthread::newm_handoff(m);
        return;
    }
    spawn_m_thread(m);
}

/// Creates the OS thread of the new M `m` (from `newm`, or from the template thread).
/// mstart_trampoline receives the M pointer, which stays valid forever (Ms are never
/// freed).
pub(super) fn spawn_m_thread(m: *mut M) {
    crate::sys::spawn_detached("newm", G0_STACK, mstart_trampoline, m.cast());
}

extern "C" fn mstart_trampoline(arg: *mut libc::c_void) -> *mut libc::c_void {
    let m = arg as *mut M;
    // SAFETY: newm passed a live M that belongs to this new thread from now on.
    unsafe { mstart(&*m) };
    // The M exited (its goroutine ended locked): the thread ends here.
    null_mut()
}

/// The body of every M: bind the thread to its M, take the P it was started for, and run
/// the scheduler loop until the M exits (only when a goroutine ended locked to it).
///
/// # Safety
/// Called once, on `m`'s new thread.
pub(super) unsafe fn mstart(m: &M) {
    arch::tls_set(m as *const M as usize);
    // SAFETY: this is m's new thread (the caller's contract), its TLS slot just set.
    let m = unsafe { ThisM::assume(m) };
    os_linux::minit(&m);
    if let Some(&key) = EXIT_KEY.get() {
        // SAFETY: key was created by `init_exit_key`; the value is this thread's M, which
        // lives forever (Ms are never freed).
        unsafe { libc::pthread_setspecific(key, m.m() as *const M as *const libc::c_void) };
    }
    // SAFETY: m's own thread owns g0_fpenv.
    unsafe { m.g0_fpenv.set(arch::fpenv_current()) };
    crate::stack::ensure_altstack();
    m.tid.store(crate::sys::gettid(), Ordering::Relaxed);
    let pp = m.nextp.swap(null_mut(), Ordering::Acquire);
    // SAFETY: pp was handed to this M by its creator.
    unsafe { acquirep(m, pp) };
    // A panic inside the scheduler is a runtime bug: never unwind off the thread.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: on g0, once, holding a P.
        unsafe { schedule_loop(m) }
    }));
    if r.is_err() {
        throw("scheduler loop panicked");
    }
    // SAFETY: holding its P, no goroutine.
    unsafe { mexit(m) };
}

/// The M's goroutine ended while locked to it (LockOSThread): give its P away and let the
/// thread end (Go's mexit). The M stays on `allm` marked dead; the thread's exit
/// destructor puts it on `SCHED.mfree` (`mfree_put`), where `allocm` finds it for the
/// next new thread (Ms are never freed, but reused). The thread's alternate signal stack
/// is unmapped by src/stack's thread-exit destructor.
///
/// # Safety
/// `m` holds a P, with no current goroutine.
pub(super) unsafe fn mexit(m: ThisM<'_>) {
    if m.spinning.load(Ordering::Relaxed) {
        throw("mexit: spinning");
    }
    // SAFETY: m's own thread owns naffine.
    if unsafe { m.naffine.get() } != 0 || !m.aff.is_empty() {
        throw("mexit: goroutines bound to the exiting M");
    }
    // SAFETY: holding a P.
    let pp = unsafe { releasep(m) };
    // m.exiting is still set, so an M this hand-off creates comes from the template thread.
    handoffp(pp);
    m.lockedg.store(null_mut(), Ordering::Relaxed);
    m.dead.store(true, Ordering::Release);
    SCHED.mcount.fetch_sub(1, Ordering::SeqCst);
    arch::tls_set(0);
}

/// Stops the current M until new work is available; returns holding the P it was handed.
///
/// # Safety
/// `m` holds no P and is not spinning.
pub(super) unsafe fn stopm(m: ThisM<'_>) {
    if !m.p.load(Ordering::Relaxed).is_null() {
        throw("stopm holding p");
    }
    if m.spinning.load(Ordering::Relaxed) {
        throw("stopm spinning");
    }
    // SAFETY: no P.
    let has_affine = unsafe { affinity::go_idle(m) };
    {
        let mut g = lock_sched();
        // Goroutines that can run only on this M are queued (or were, after we marked
        // ourselves idle): get a P for them rather than sleep where startm would find us.
        if has_affine || m.affwanted.swap(false, Ordering::SeqCst) {
            if let Some(pp) = pidleget(&mut g) {
                drop(g);
                // SAFETY: pp came off the idle list.
                unsafe {
                    acquirep(m, pp);
                    affinity::set_active(m);
                }
                return;
            }
            affwait_put(&mut g, m.m() as *const M as *mut M);
        } else {
            mput(&mut g, m.m() as *const M as *mut M);
        }
    }
    // SAFETY: we are m's thread, on a list where a P hand-over finds us.
    unsafe {
        sleep_for_p(m);
        affinity::set_active(m);
    }
}

/// Hands off P `pp` from an M that is about to block (Go's handoffp): runs it on another M
/// if there is work or nobody is looking for work, else puts it on the idle list.
/// `handoffp` found Ms waiting for a P and goroutines queued, and served an M last: the
/// queued goroutines' turn is next. A hint (relaxed): a lost update costs one turn.
pub(super) static HANDOFF_QUEUE_TURN: AtomicBool = AtomicBool::new(false);

pub(super) fn handoffp(pp: *mut P) {
    // SAFETY: Ps are never freed; pp was just released by the caller.
    let p = unsafe { &*pp };
    // An M waiting for a P for work only it can run takes it (with its local work) —
    // every other time when goroutines are queued too: such Ms come back for a P each
    // time their goroutine's blocking call ends, and a stream of them (goroutines waiting
    // in turn for CPython's GIL, each wait made seen by unseen.rs) would otherwise keep
    // the P from a queued goroutine for good, the one holding the GIL among them.
    if SCHED.naffwait.load(Ordering::SeqCst) != 0 {
        let queued = !p.runq.is_empty() || SCHED.runqsize.load(Ordering::SeqCst) != 0;
        if !(queued && HANDOFF_QUEUE_TURN.swap(false, Ordering::Relaxed)) {
            let mut g = lock_sched();
            if let Some(am) = affwait_get(&mut g) {
                drop(g);
                if queued {
                    HANDOFF_QUEUE_TURN.store(true, Ordering::Relaxed);
                }
                give_p(am, pp);
                return;
            }
        }
    }
    // If it has local work, start it straight away.
    if !p.runq.is_empty() || SCHED.runqsize.load(Ordering::SeqCst) != 0 {
        startm(pp, false);
        return;
    }
    // No local work: if no M is spinning or idle-with-a-P, our help is needed.
    if SCHED.nmspinning.load(Ordering::SeqCst) + SCHED.npidle.load(Ordering::SeqCst) == 0
        && SCHED
            .nmspinning
            .compare_exchange(0, 1, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    {
        SCHED.needspinning.store(0, Ordering::SeqCst);
        startm(pp, true);
        return;
    }
    #[cfg(debug_assertions)]
    handoff_delay();
    let mut g = lock_sched();
    if SCHED.runqsize.load(Ordering::Relaxed) != 0 {
        drop(g);
        startm(pp, false);
        return;
    }
    pidleput(&mut g, pp);
    drop(g);
    // The last running P gone idle, with goroutines waiting on the poller and no M in it:
    // wake one, which goes idle into the poller (Go's handoffp: "if this is the last
    // running P and nobody is polling network"). The Ms already idle saw nothing to wait
    // for when they stopped, and an M whose locked goroutine just parked on an fd stops
    // without passing through `park_idle`, which would have made it the M in the poller:
    // without this the fd's event finds every M asleep without a deadline
    // (c-tests/netpoll_locked.c). After `pidleput`, so that a P beyond GOMAXPROCS, which
    // it retires, counts too.
    if SCHED.npidle.load(Ordering::SeqCst) >= SCHED.gomaxprocs.load(Ordering::SeqCst)
        && netpoll::inited()
        && netpoll::any_waiters()
        && netpoll::BLOCKED.load(Ordering::SeqCst) == 0
    {
        wakep();
    }
    // A wakep that saw no idle P may have asked for a spinner meanwhile (see wakep).
    if SCHED.needspinning.load(Ordering::SeqCst) == 1 {
        wakep();
    }
    // Nobody runs an idle P's timers but the timer M: make sure there is one that wakes
    // in time (Go's handoffp ends with wakeNetPoller for the P's earliest timer). Without
    // this, a goroutine locked to its thread that sleeps leaves its timer on an idle P
    // while every M sleeps without a deadline.
    let when = p.timers.timer0_when.load(Ordering::SeqCst);
    if when != 0 {
        timer::wake_for_timer(when);
    }
}

/// Test hook, debug builds only: `GMP_DEBUG=handoffdelay=<µs>` makes `handoffp` sleep
/// between its spinning check and its `pidleput`, widening the window in which a `wakep`
/// that found no idle P (needspinning) must be seen by the re-check after the `pidleput`
/// (c-tests/handoff_wakeup.c).
#[cfg(debug_assertions)]
pub(super) fn handoff_delay() {
    crate::sys::dbgvars::delay(crate::sys::dbgvars::Var::Handoffdelay);
}

/// Test hook, debug builds only: `GMP_DEBUG=idledelay=<µs>` makes `park_idle` sleep before
/// its `go_idle`, widening the window in which a goroutine bound to this M is readied
/// after the M gave up its P but before it marked its affinity queue idle: the readier
/// then wakes nobody, and `park_idle` and `stopm` must see the queued goroutine
/// themselves (c-tests/pinned_stopm.c).
#[cfg(debug_assertions)]
pub(super) fn idle_delay() {
    crate::sys::dbgvars::delay(crate::sys::dbgvars::Var::Idledelay);
}

/// The key whose destructor catches an M thread exiting other than through `mexit`.
pub(super) static EXIT_KEY: std::sync::OnceLock<libc::pthread_key_t> = std::sync::OnceLock::new();

/// A goroutine locked to `m` ended its thread with pthread_exit: finish it as `goexit0` +
/// `mexit` would (the frames it had are gone already).
///
/// # Safety
/// On `m`'s exiting thread, which holds a P and whose locked goroutine is `gp`.
unsafe fn exit_locked_thread(m: &M, gp: *mut G) {
    // SAFETY: caller contract.
    unsafe {
        let g = &*gp;
        casgstatus(g, G_RUNNING, G_DEAD);
        let pp = m.p.load(Ordering::Relaxed);
        owner_add_i64(&(*pp).ngoroutines, -1);
        g.lockedm.store(core::ptr::null_mut(), Ordering::Relaxed);
        m.lockedg.store(core::ptr::null_mut(), Ordering::Relaxed);
        m.curg.store(core::ptr::null_mut(), Ordering::Relaxed);
        let pp = procresize::releasep(ThisM::assume(m));
        handoffp(pp);
    }
    m.dead.store(true, Ordering::Release);
    SCHED.mcount.fetch_sub(1, Ordering::SeqCst);
    crate::arch::tls_set(0);
}

/// Destructor of `EXIT_KEY` (`init_exit_key`): an M's thread is exiting. Through `mexit` the M is `dead`
/// already; otherwise its goroutine called pthread_exit (or the thread was cancelled).
unsafe extern "C" fn thread_exit_guard(arg: *mut c_void) {
    // SAFETY: the value set by `minit`: this thread's M, never freed.
    let m = unsafe { &*(arg as *const M) };
    if m.dead.load(Ordering::Relaxed) {
        // Our last look at the M: another thread may revive it from here on.
        mfree_put(m);
        return;
    }
    let gp = m.curg.load(Ordering::Relaxed);
    if gp.is_null() {
        throw("an M's thread exited (pthread_exit or cancellation) outside a goroutine");
    }
    if m.lockedg.load(Ordering::Relaxed) == gp && !m.p.load(Ordering::Relaxed).is_null() {
        // The goroutine is locked to this thread (LockOSThread): ending the thread is what
        // Go does when such a goroutine exits, so take it as that exit (an embedding
        // runtime ends its threads this way: CPython's finalization pthread_exits the
        // threads that run Python goroutines). The goroutine is done, its P goes to
        // another M, and this M is dead.
        // SAFETY: this thread is m's and holds its P; gp is its running goroutine.
        unsafe { exit_locked_thread(m, gp) };
        mfree_put(m);
        return;
    }
    let mut buf = [0u8; 96];
    // SAFETY: gp was this M's goroutine when the thread left it; Gs are never freed.
    let goid = crate::sys::fmt_u64(unsafe { (*gp).goid() });
    let msg = crate::sys::fmt_msg(
        &mut buf,
        &[
            b"pthread_exit called in a goroutine (goroutine ",
            &goid,
            b")",
        ],
    );
    throw(core::str::from_utf8(msg).unwrap_or("pthread_exit called in a goroutine"))
}

/// Creates `EXIT_KEY` (from `init_once`, before any M exists).
pub(super) fn init_exit_key() {
    EXIT_KEY.get_or_init(|| {
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: key is a valid out-pointer; the destructor has the signature pthread
        // wants.
        if unsafe { libc::pthread_key_create(&mut key, Some(thread_exit_guard)) } != 0 {
            throw("pthread_key_create failed");
        }
        key
    });
}
