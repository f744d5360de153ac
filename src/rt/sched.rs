//! The scheduler loop: `schedule`, `find_runnable`, the spinning-M protocol, starting and
//! stopping Ms, P hand-off, and `procresize` (Go's proc.go, same names in snake case).
//!
//! # Worker parking and unparking (the protocol of proc.go's header)
//!
//! We must balance keeping enough Ms running to use the available parallelism against
//! parking excess ones to save CPU. Two facts make it hard: scheduler state is distributed
//! (per-P run queues), so "is there work?" cannot be answered atomically; and parking or
//! unparking an M costs a futex call (and microseconds of wake-up latency across CPUs), so
//! doing it at every readying kills throughput.
//!
//! The rejected designs, as in Go: (1) centralise all state (a global queue and lock: no
//! scalability); (2) hand a readied G straight to an idle M/P (thrashing: the waker is about
//! to block and would have run it, and locality is lost); (3) unpark an extra M whenever a G
//! is readied and an idle P exists, without any handshake (Ms park and unpark constantly).
//!
//! What we do: an M that finds no local work becomes *spinning* — it looks in the global
//! queue and steals — before it parks. At most half of the busy Ps may have spinning Ms
//! (`2*nmspinning < gomaxprocs - npidle`). When a G is readied or created, `wakep` unparks
//! one more M only if no M is spinning (`nmspinning == 0`). A spinning M that finds work
//! stops spinning and calls `wakep` in turn, so exactly one M is looking at any time while
//! work is arriving, and a burst of work ramps up parallelism one M per found G.
//!
//! No wakeup may be lost: the submitter writes the work, then (StoreLoad, the SeqCst
//! operations on `nmspinning`) checks `nmspinning`; the spinning M that gives up decrements
//! `nmspinning`, then (StoreLoad) re-checks every run queue. One of the two sees the other.
//!
//! Nothing in here runs on a goroutine stack except `wakep`, `ready_put` and the
//! `runq_put` family, which goroutines call directly: they never switch.

use core::ptr::null_mut;
use core::sync::atomic::{Ordering, fence};

use super::runq::RUNQ_SIZE;
use super::*;
use crate::arch;

// ---------------------------------------------------------------------------------------
// Start-up.

static INIT: std::sync::Once = std::sync::Once::new();

pub(super) fn init_once() {
    INIT.call_once(|| {
        // Before anything spins: spin counts are in the reference machine's pauses.
        crate::sys::calibrate_pause();
        let cfg = config::Config::from_env();
        SCHED
            .start_ns
            .store(crate::sys::nanotime(), Ordering::Relaxed);
        SCHED.maxmcount.store(cfg.max_threads, Ordering::Relaxed);
        // Whole pages, as the stacks will be (gfput/gfget compare sizes exactly).
        SCHED
            .default_stack
            .store(crate::stack::round_size(cfg.stack_size), Ordering::Relaxed);
        crate::stack::install_overflow_handler(running_stack);
        os_linux::init();
        // Spinning for a foreign thread's hand-off needs a CPU for each side.
        crate::sys::FOREIGN_SPIN.store(os_linux::num_cpu() >= 2, Ordering::Relaxed);
        asan::init();
        tsan::init();
        preempt::init();
        dump::init();
        checkdead::init();
        {
            let mut g = lock_sched();
            grow_procs(&mut g, 0, cfg.maxprocs);
            SCHED.gomaxprocs.store(cfg.maxprocs, Ordering::SeqCst);
        }
        if let Some(t) = cfg.trace {
            trace::start(t);
        }
        sysmon::start();
        exectrace::init();
    });
}

/// The stack-overflow handler's question: the goroutine running on this thread and the
/// `lo` of its stack (src/stack decides whether the fault overflowed it). Runs in a signal
/// handler: no locks, no allocation.
fn running_stack() -> Option<(u64, usize)> {
    let gp = getg();
    if gp.is_null() {
        return None;
    }
    // SAFETY: gp is this thread's running G; its stack does not change while it runs, and
    // the signal interrupted that very G.
    let lo = unsafe { (*(*gp).stack.ptr()).as_ref()?.lo() };
    // SAFETY: as above.
    Some((unsafe { (*gp).goid() }, lo))
}

// ---------------------------------------------------------------------------------------
// Ps: acquire, release, idle list.

/// Associates P `pp` with M `m`. The P must be idle and unowned.
///
/// # Safety
/// Called by `m`'s own thread; `pp` came off the idle list or was handed over via `nextp`.
pub(super) unsafe fn acquirep(m: &M, pp: *mut P) {
    // SAFETY: Ps are never freed.
    let p = unsafe { &*pp };
    if !p.m.load(Ordering::Relaxed).is_null() || p.status.load(Ordering::Relaxed) != P_IDLE {
        throw("acquirep: invalid p state");
    }
    p.m.store(m as *const M as *mut M, Ordering::Relaxed);
    // acquire: pairs with the release in releasep, so we see the previous owner's writes
    // to the P's owner-only fields (gfree, the runq tail).
    p.status.store(P_RUNNING, Ordering::Release);
    fence(Ordering::Acquire);
    m.p.store(pp, Ordering::Relaxed);
}

/// Disassociates `m` from its P and returns the P (now P_IDLE, unowned).
///
/// # Safety
/// Called by `m`'s own thread while it holds a P.
pub(super) unsafe fn releasep(m: &M) -> *mut P {
    let pp = m.p.load(Ordering::Relaxed);
    if pp.is_null() {
        throw("releasep: invalid arg");
    }
    // SAFETY: Ps are never freed.
    let p = unsafe { &*pp };
    if !std::ptr::eq(p.m.load(Ordering::Relaxed), m)
        || p.status.load(Ordering::Relaxed) != P_RUNNING
    {
        throw("releasep: invalid p state");
    }
    m.p.store(null_mut(), Ordering::Relaxed);
    p.m.store(null_mut(), Ordering::Relaxed);
    // release: publishes our writes to the P's owner-only state to its next owner.
    p.status.store(P_IDLE, Ordering::Release);
    pp
}

/// Puts an unowned P on the idle list — or retires it if it is beyond GOMAXPROCS.
fn pidleput(g: &mut SchedGuard, pp: *mut P) {
    // SAFETY: Ps are never freed; the caller released pp, so only the lock holder touches
    // its link.
    let p = unsafe { &*pp };
    if !p.runq.is_empty() {
        throw("pidleput: P has non-empty run queue");
    }
    if p.id >= SCHED.gomaxprocs.load(Ordering::Relaxed) {
        p.status.store(P_DEAD, Ordering::Release);
        return;
    }
    // An M waiting for a P for work that only it can run comes before idleness.
    if let Some(am) = affwait_get(g) {
        give_p(am, pp);
        return;
    }
    let s = g.synced();
    // SAFETY: we hold SCHED.lock, the owner of `link`.
    unsafe { p.link.set(s.pidle) };
    s.pidle = pp;
    SCHED.npidle.fetch_add(1, Ordering::SeqCst);
}

/// Takes a P off the idle list.
pub(super) fn pidleget(g: &mut SchedGuard) -> Option<*mut P> {
    let s = g.synced();
    let pp = s.pidle;
    if pp.is_null() {
        return None;
    }
    // SAFETY: pp is on the idle list, whose links the lock holder owns.
    s.pidle = unsafe { (*pp).link.get() };
    SCHED.npidle.fetch_sub(1, Ordering::SeqCst);
    SCHED.pidlegets.store(
        SCHED.pidlegets.load(Ordering::Relaxed) + 1,
        Ordering::SeqCst,
    );
    // A P goes to work: sysmon must watch it (it may be in its deep sleep).
    sysmon::wake_if_deep();
    Some(pp)
}

/// `pidleget` for an M about to spin: when there is no idle P, record that a spinning M
/// is needed, so the next M about to drop its P spins instead (Go's pidlegetSpinning).
fn pidleget_spinning(g: &mut SchedGuard) -> Option<*mut P> {
    let pp = pidleget(g);
    if pp.is_none() {
        SCHED.needspinning.store(1, Ordering::SeqCst);
    }
    pp
}

// ---------------------------------------------------------------------------------------
// Run queues.

/// Marks `gp` as entering a run queue (debug builds: a runnable G is on exactly one queue).
#[inline]
pub(super) fn enqueued(gp: *mut G) {
    #[cfg(debug_assertions)]
    // SAFETY: Gs are never freed.
    if unsafe { (*gp).queued.swap(true, Ordering::Relaxed) } {
        throw("runqput: G already on a run queue");
    }
    let _ = gp;
}

/// Marks `gp` as taken off the run queues to be run.
#[inline]
pub(super) fn dequeued(gp: *mut G) {
    #[cfg(debug_assertions)]
    // SAFETY: Gs are never freed.
    if unsafe { !(*gp).queued.swap(false, Ordering::Relaxed) } {
        throw("schedule: G taken from a run queue it was not on");
    }
    let _ = gp;
}

/// Puts `gp` on the global run queue.
pub(super) fn globrunqput(g: &mut SchedGuard, gp: *mut G) {
    // The caller owns gp (it is RUNNABLE and on no queue); we hold the lock.
    g.synced().runq.push_back(gp);
    SCHED.runqsize.fetch_add(1, Ordering::SeqCst);
}

/// Takes a batch from the global run queue for `pp`: returns one G to run and puts the rest
/// on `pp`'s local queue. `max == 0` means no limit other than a fair share.
///
/// # Safety
/// Called by `pp`'s owner, whose local run queue has room (it just found it empty, or
/// `max == 1`).
unsafe fn globrunqget(g: &mut SchedGuard, pp: &P, max: i32) -> Option<*mut G> {
    let size = SCHED.runqsize.load(Ordering::Relaxed);
    if size == 0 {
        return None;
    }
    let procs = SCHED.gomaxprocs.load(Ordering::Relaxed).max(1);
    let mut n = (size / procs + 1).min(size);
    if max > 0 && n > max {
        n = max;
    }
    n = n.min(RUNQ_SIZE as i32 / 2);
    SCHED.runqsize.fetch_sub(n, Ordering::SeqCst);
    let s = g.synced();
    // We hold the lock; runqsize said there are at least n.
    let first = s
        .runq
        .pop_front()
        .unwrap_or_else(|| throw("globrunqget: queue shorter than runqsize"));
    for _ in 1..n {
        let gp = s
            .runq
            .pop_front()
            .unwrap_or_else(|| throw("globrunqget: queue shorter than runqsize"));
        // SAFETY: we own pp (caller contract); at most RUNQ_SIZE/2 Gs go into a queue
        // that had room, so overflow is impossible.
        unsafe {
            pp.runq
                .put(core::ptr::NonNull::new_unchecked(gp), false, |_| {
                    throw("globrunqget: local run queue overflow")
                })
        };
    }
    Some(first)
}

/// Takes a goroutine from where Go's preempted goroutines wait: the global run queue
/// (`globrunqget` with `max`), or `m`'s share of it, the preempted goroutines that can
/// resume only on `m` (`affinity::get_preempted`). When both hold goroutines they take
/// turns (`m.globturn`): Go's one queue is FIFO, and serving either side first whenever
/// it had any would let a goroutine preempted into it again and again (a CPU-bound loop
/// stopped by the signal, or a channel ping-pong stopped at its safe points) keep the
/// P from those waiting on the other side.
///
/// # Safety
/// Called by `p`'s owner `m`, on its thread; `p`'s local queue has room as `globrunqget`
/// requires.
unsafe fn globrunqget_or_preempted(m: &M, p: &P, max: i32) -> Option<*mut G> {
    // SAFETY: m's own thread owns globturn.
    let global_first = unsafe { m.globturn.get() } || m.aff.npreempted() == 0;
    if !global_first {
        // SAFETY: caller contract.
        if let Some(gp) = unsafe { affinity::get_preempted(m) } {
            // SAFETY: as above.
            unsafe { m.globturn.set(true) };
            return Some(gp);
        }
    }
    if SCHED.runqsize.load(Ordering::Relaxed) != 0 {
        let mut g = lock_sched();
        // SAFETY: caller contract.
        if let Some(gp) = unsafe { globrunqget(&mut g, p, max) } {
            // SAFETY: as above.
            unsafe { m.globturn.set(false) };
            return Some(gp);
        }
    }
    if global_first {
        // SAFETY: caller contract.
        if let Some(gp) = unsafe { affinity::get_preempted(m) } {
            // SAFETY: as above.
            unsafe { m.globturn.set(true) };
            return Some(gp);
        }
    }
    None
}

/// Puts a runnable G on `pp`'s local queue (`next`: into runnext), spilling half of a full
/// queue to the global one (Go's runqputslow). Returns whether it spilled.
///
/// # Safety
/// Called by `pp`'s owner; `gp` is RUNNABLE and on no queue.
pub(super) unsafe fn runq_put(pp: &P, gp: *mut G, next: bool) -> bool {
    enqueued(gp);
    let mut spilled = false;
    // SAFETY: caller contract; the overflow batch is moved (not copied) to the global queue.
    unsafe {
        pp.runq
            .put(core::ptr::NonNull::new_unchecked(gp), next, |batch| {
                spilled = true;
                let mut g = lock_sched();
                for gp in batch {
                    globrunqput(&mut g, gp.as_ptr());
                }
            })
    };
    spilled
}

/// Makes a RUNNABLE G (owned by the caller, on no queue) findable: the current P's local
/// queue when there is one (runnext when `next`), else the global queue; then wakes an M if
/// none is looking (Go's `ready` minus the status change). Returns whether the local queue
/// overflowed into the global one.
#[inline(always)]
pub(super) fn ready_put(gp: *mut G, next: bool) -> bool {
    let m = getm();
    // SAFETY: a non-null TLS slot is this thread's M; its `p` is ours while we run on it.
    let pp = if m.is_null() {
        null_mut()
    } else {
        unsafe { (*m).p.load(Ordering::Relaxed) }
    };
    if pp.is_null() {
        return ready_put_no_p(gp, m);
    }
    // SAFETY: this thread holds pp; gp is ours to queue.
    let spilled = unsafe { runq_put(&*pp, gp, next) };
    wakep();
    spilled
}

/// `ready_put` for a thread that holds no P (`m` is its M, or null for a foreign thread),
/// out of line: the global queue, or a spinning M's mailbox.
#[inline(never)]
fn ready_put_no_p(gp: *mut G, m: *mut M) -> bool {
    enqueued(gp);
    // An M spins for this foreign thread's next hand-off: give the goroutine to it
    // directly (`FOREIGN_MAILBOX`), without the global queue's lock and counter, and
    // with nobody to wake.
    if m.is_null() && FOREIGN_MAILBOX.load(Ordering::Relaxed) == MAILBOX_OPEN {
        // release: the spinner that takes gp sees what was written to it (RUNNABLE).
        if FOREIGN_MAILBOX
            .compare_exchange(MAILBOX_OPEN, gp, Ordering::Release, Ordering::Relaxed)
            .is_ok()
        {
            return false;
        }
    }
    let alone = {
        let mut g = lock_sched();
        globrunqput(&mut g, gp);
        SCHED.runqsize.load(Ordering::Relaxed) == 1
    };
    // Only a foreign thread in a quick exchange with goroutines (its last wait on them
    // was short) counts as one an idle M should stay awake for. One that only spawns
    // or sends, waiting on nothing, is a producer: an M spinning for each of its
    // goroutines takes them from the global queue one at a time, pulling the queue's
    // lock line from the producer every time, where an M woken later takes a batch
    // (compare spawning from C main: `scripts/ab.sh -p 2 -a "-shape 1" spawn`).
    if m.is_null() && !RUNTIME_THREAD.with(|r| r.get()) && crate::sys::foreign_quick() {
        crate::sys::foreign_act();
        // Handing over one goroutine: an M is about to look (spinning for it, or about
        // to, as the goroutine that answered it parks). Give it a moment before waking
        // another M, whose wake-up costs microseconds and whose spinning then takes a
        // CPU (`spin_for_foreign`). Not for a burst (the queue held more): each spawn
        // would wait for Ms that are busy with the earlier ones.
        if alone && handed_over() {
            return false;
        }
    }
    // Every P busy: the goroutine waits for one to reach the end of its slice, which
    // sysmon must then be awake to see (its back-off may be 10 ms long). A spinning M
    // (one waiting for a foreign thread's next hand-off) takes it at once instead.
    if SCHED.npidle.load(Ordering::Relaxed) == 0 && SCHED.nmspinning.load(Ordering::SeqCst) == 0 {
        sysmon::wake_if_sleeping();
    }
    wakep();
    false
}

/// Puts a preempted G on the global run queue and wakes an M if none is looking (Go's
/// goschedImpl).
/// Makes a batch of waiting goroutines runnable (Go's injectglist, for what a poll found):
/// as many as there are idle Ps go to the global queue with an M started for each; the rest
/// to the caller's P (the first to `runnext`), or all to the global queue if the caller
/// holds no P. Goroutines bound to an M go to that M's queue, as `goready` does.
///
/// # Safety
/// Each G is WAITING and was taken off its wait by the caller (nobody else readies it).
pub(super) unsafe fn inject_glist(gs: &[*mut G]) {
    let m = getm();
    // SAFETY: a non-null TLS slot is this thread's M; only it writes its `p`.
    let pp = if m.is_null() {
        null_mut()
    } else {
        unsafe { (*m).p.load(Ordering::Relaxed) }
    };
    let npidle = SCHED.npidle.load(Ordering::SeqCst).max(0) as usize;
    // Split first (the batch is at most two per poll event), then publish: once a G is
    // on the global queue another M may run it, so it must not be looked at again.
    let mut local = [null_mut::<G>(); 256];
    let mut nlocal = 0;
    let mut global = [null_mut::<G>(); 256];
    let mut nglobal = 0;
    for &gp in gs {
        // SAFETY: caller contract; Gs are never freed.
        unsafe {
            (*gp)
                .waitreason
                .store(WaitReason::None as u8, Ordering::Relaxed);
            casgstatus(&*gp, G_WAITING, G_RUNNABLE);
            let am = affinity::affine_m(&*gp);
            if !am.is_null() {
                affinity::ready(gp, am);
                continue;
            }
        }
        if (pp.is_null() || nglobal < npidle || nlocal == local.len()) && nglobal < global.len() {
            global[nglobal] = gp;
            nglobal += 1;
        } else {
            local[nlocal] = gp;
            nlocal += 1;
        }
    }
    if nglobal > 0 {
        {
            let mut g = lock_sched();
            for &gp in &global[..nglobal] {
                enqueued(gp);
                globrunqput(&mut g, gp);
            }
        }
        if npidle == 0 {
            // As in ready_put: sysmon must see the busy Ps' slices end.
            sysmon::wake_if_sleeping();
        }
    }
    // An M for each idle P the global ones can use.
    for _ in 0..nglobal.min(npidle) {
        let p2 = {
            let mut g = lock_sched();
            pidleget(&mut g)
        };
        match p2 {
            Some(p2) => startm(p2, false),
            None => break,
        }
    }
    for (i, &gp) in local[..nlocal].iter().enumerate() {
        // SAFETY: we hold pp; gp is RUNNABLE and on no queue.
        unsafe { runq_put(&*pp, gp, i == 0) };
    }
    if nlocal > 0 || (nglobal > npidle) {
        wakep();
    }
}

pub(super) fn ready_put_global(gp: *mut G) {
    enqueued(gp);
    {
        let mut g = lock_sched();
        globrunqput(&mut g, gp);
    }
    wakep();
}

// ---------------------------------------------------------------------------------------
// Ms: create, start, stop.

/// Tries to add one more spinning M if there are idle Ps and nobody is spinning. Called
/// after work is made runnable (the submit → StoreLoad → check-nmspinning half of the
/// protocol; the SeqCst load is the StoreLoad barrier).
///
/// The common outcomes (an M spins already; no idle P and the request to spin already
/// made) are decided inline at the call site; the rest is `wakep_slow`.
#[inline(always)]
pub(super) fn wakep() {
    // Be conservative: start a spinning M only if none exists already.
    if SCHED.nmspinning.load(Ordering::SeqCst) != 0 {
        return;
    }
    // No idle P and the next M to drop its P already asked to spin (see `wakep_slow`):
    // nothing to do. (Both SeqCst loads, as there: the StoreLoad half of the protocol.)
    if SCHED.npidle.load(Ordering::SeqCst) == 0
        && SCHED.needspinning.load(Ordering::Relaxed) != 0
        && SCHED.npidle.load(Ordering::SeqCst) == 0
    {
        return;
    }
    wakep_slow();
}

/// `wakep` past its inline checks.
#[inline(never)]
fn wakep_slow() {
    // No idle P: no M to start, but the next M about to drop its P must spin instead
    // (needspinning). Go sets the flag under SCHED.lock; doing it without the lock saves
    // the busiest path (every ready and spawn while all Ps run) a lock round trip. The
    // race that opens — an M checked the flag, we set it, then the M put its P on the
    // idle list — is closed by the M re-reading the flag after its pidleput (SeqCst on
    // both sides: either our re-read of npidle sees its P, or its re-read sees our flag).
    if SCHED.npidle.load(Ordering::SeqCst) == 0 {
        if SCHED.needspinning.load(Ordering::Relaxed) == 0 {
            SCHED.needspinning.store(1, Ordering::SeqCst);
        }
        if SCHED.npidle.load(Ordering::SeqCst) == 0 {
            return;
        }
    }
    if SCHED.nmspinning.load(Ordering::SeqCst) != 0
        || SCHED
            .nmspinning
            .compare_exchange(0, 1, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let pp = {
        let mut g = lock_sched();
        match pidleget_spinning(&mut g) {
            Some(pp) => pp,
            None => {
                if SCHED.nmspinning.fetch_sub(1, Ordering::SeqCst) <= 0 {
                    throw("wakep: negative nmspinning");
                }
                return;
            }
        }
    };
    startm(pp, true);
}

/// Runs P `pp` on an idle M, or on a new one. `spinning`: the M starts spinning (the
/// caller already counted it in `nmspinning`).
fn startm(pp: *mut P, spinning: bool) {
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

/// Puts `m` on the idle list.
fn mput(g: &mut SchedGuard, m: *mut M) {
    let s = g.synced();
    // SAFETY: m is the caller's own M about to sleep; its links and `mlist`, and those of
    // the list's head, are owned by the lock holder.
    unsafe {
        if (*m).mlist.get() != affinity::MLIST_NONE {
            throw("mput: m already on a list");
        }
        (*m).schedlink.set(s.midle);
        (*m).schedprev.set(null_mut());
        if !s.midle.is_null() {
            (*s.midle).schedprev.set(m);
        }
        (*m).mlist.set(affinity::MLIST_IDLE);
    }
    s.midle = m;
    SCHED.nmidle.fetch_add(1, Ordering::Relaxed);
}

/// Takes an M off the idle list.
fn mget(g: &mut SchedGuard) -> Option<*mut M> {
    let m = g.synced().midle;
    if m.is_null() {
        return None;
    }
    munlink(g, m);
    // SAFETY: Ms are never freed.
    #[cfg(debug_assertions)]
    if unsafe {
        !(*m).p.load(Ordering::Relaxed).is_null() || !(*m).curg.load(Ordering::Relaxed).is_null()
    } {
        throw("mget: idle m has a p or a g"); // an idle M holds neither
    }
    Some(m)
}

/// Takes M `m`, which is on the idle list, off it.
fn munlink(g: &mut SchedGuard, m: *mut M) {
    let s = g.synced();
    // SAFETY: m and its neighbours are on the idle list, whose links the lock holder owns.
    unsafe {
        if (*m).mlist.get() != affinity::MLIST_IDLE {
            throw("munlink: m not idle");
        }
        let (next, prev) = ((*m).schedlink.get(), (*m).schedprev.get());
        if prev.is_null() {
            s.midle = next;
        } else {
            (*prev).schedlink.set(next);
        }
        if !next.is_null() {
            (*next).schedprev.set(prev);
        }
        (*m).schedlink.set(null_mut());
        (*m).schedprev.set(null_mut());
        (*m).mlist.set(affinity::MLIST_NONE);
    }
    SCHED.nmidle.fetch_sub(1, Ordering::Relaxed);
}

/// Puts `m`, which has work only it can run and no P, on the list of Ms waiting for one.
fn affwait_put(g: &mut SchedGuard, m: *mut M) {
    // No idle P while work waits, for this list: a P goes idle only after
    // serving it, and an M joins it only after finding no idle P under the same lock.
    if SCHED.npidle.load(Ordering::Relaxed) != 0 {
        throw("affwait_put: idle P available");
    }
    let s = g.synced();
    // SAFETY: m is the caller's own M, or an idle M the caller just took off the idle
    // list; the links are owned by the lock holder.
    unsafe {
        if (*m).mlist.get() != affinity::MLIST_NONE {
            throw("affwait_put: m already on a list");
        }
        (*m).schedlink.set(null_mut());
        (*m).mlist.set(affinity::MLIST_AFFWAIT);
        if s.affwait_tail.is_null() {
            s.affwait = m;
        } else {
            (*s.affwait_tail).schedlink.set(m);
        }
    }
    s.affwait_tail = m;
    SCHED.naffwait.fetch_add(1, Ordering::SeqCst);
}

/// Takes the longest-waiting M off the affinity wait list.
fn affwait_get(g: &mut SchedGuard) -> Option<*mut M> {
    let s = g.synced();
    let m = s.affwait;
    if m.is_null() {
        return None;
    }
    // SAFETY: m is on the list, whose links the lock holder owns.
    unsafe {
        s.affwait = (*m).schedlink.get();
        if s.affwait.is_null() {
            s.affwait_tail = null_mut();
        }
        (*m).schedlink.set(null_mut());
        (*m).mlist.set(affinity::MLIST_NONE);
    }
    SCHED.naffwait.fetch_sub(1, Ordering::SeqCst);
    Some(m)
}

/// Hands unowned P `pp` to M `am`, which sleeps on its note waiting for one, and wakes it.
fn give_p(am: *mut M, pp: *mut P) {
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
/// On `m`'s own thread, holding no P, not spinning.
pub(super) unsafe fn wait_for_p(m: &M) {
    {
        let mut g = lock_sched();
        if let Some(pp) = pidleget(&mut g) {
            drop(g);
            // SAFETY: m's thread; pp came off the idle list.
            unsafe { acquirep(m, pp) };
            return;
        }
        affwait_put(&mut g, m as *const M as *mut M);
    }
    // SAFETY: m's thread, no P; whoever takes us off the list hands us one.
    unsafe { sleep_for_p(m) };
}

/// Sleeps on `m.park` until a P is handed over through `m.nextp`, then acquires it.
///
/// # Safety
/// On `m`'s own thread, holding no P, somewhere a P hand-over will find it (an idle list,
/// `affwait`, or locked to a goroutine).
unsafe fn sleep_for_p(m: &M) {
    m.blocked.store(true, Ordering::Relaxed);
    m.park.sleep();
    m.park.clear();
    m.blocked.store(false, Ordering::Relaxed);
    let pp = m.nextp.swap(null_mut(), Ordering::Acquire);
    // SAFETY: m's thread; whoever woke us released pp for us and published it with the
    // wakeup.
    unsafe { acquirep(m, pp) };
}

/// The 61-tick check's other half: an M waits for a P to run work only it can run, and
/// no P has gone idle (all are busy). Hand it ours, with our local work, and stop (onto
/// affwait ourselves if goroutines only we can run are queued: `stopm`). Returns false if
/// nobody waits (any more).
///
/// # Safety
/// On `m`'s own thread, holding a P, not spinning.
unsafe fn handoff_to_affwait(m: &M) -> bool {
    let am = {
        let mut g = lock_sched();
        match affwait_get(&mut g) {
            Some(am) => am,
            None => return false,
        }
    };
    // SAFETY: m's thread, holding a P.
    let pp = unsafe { releasep(m) };
    give_p(am, pp);
    // SAFETY: m's thread, no P, not spinning.
    unsafe { stopm(m) };
    true
}

/// Stack size of an M's own thread (g0): the scheduler loop and the unlock functions of
/// gopark run there, never user code.
const G0_STACK: usize = 512 * 1024;

/// Creates a new M (an OS thread) that will run P `pp`.
fn newm(pp: *mut P, spinning: bool) {
    start_m(allocm(pp, spinning));
}

/// Allocates a new M that will take P `pp` when its thread starts (`start_m`); until then
/// its fields are the caller's.
fn allocm(pp: *mut P, spinning: bool) -> *mut M {
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
        aff: affinity::AffQueue::new(),
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
        unseen: unseen::Seen::new(),
        vcsw_seen: [AtomicU64::new(0), AtomicU64::new(0)],
        task_fds: [const { AtomicU64::new(preempt::NO_TASK_FD) }; 3],
        task_lock: AtomicBool::new(false),
        preemptsig: preemptsig::PreemptSig::new(),
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
unsafe fn revive_m(m: *mut M, pp: *mut P, spinning: bool, fastrand: u64) {
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
            || aff.len() != 0
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
fn start_m(m: *mut M) {
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
unsafe fn mstart(m: &M) {
    arch::tls_set(m as *const M as usize);
    os_linux::minit(m);
    // SAFETY: m's own thread owns g0_fpenv.
    unsafe { m.g0_fpenv.set(arch::fpenv_current()) };
    crate::stack::ensure_altstack();
    m.tid.store(crate::sys::gettid(), Ordering::Relaxed);
    let pp = m.nextp.swap(null_mut(), Ordering::Acquire);
    // SAFETY: this is m's thread; pp was handed to this M by its creator.
    unsafe { acquirep(m, pp) };
    // A panic inside the scheduler is a runtime bug: never unwind off the thread.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: on m's own thread, holding a P.
        unsafe { schedule_loop(m) }
    }));
    if r.is_err() {
        throw("scheduler loop panicked");
    }
    // SAFETY: m's thread, holding its P, no goroutine.
    unsafe { mexit(m) };
}

/// The M's goroutine ended while locked to it (LockOSThread): give its P away and let the
/// thread end (Go's mexit). The M stays on `allm` marked dead; the thread's exit
/// destructor puts it on `SCHED.mfree` (`mfree_put`), where `allocm` finds it for the
/// next new thread (Ms are never freed, but reused). The thread's alternate signal stack
/// is unmapped by src/stack's thread-exit destructor.
///
/// # Safety
/// On `m`'s own thread, holding a P, with no current goroutine.
unsafe fn mexit(m: &M) {
    if m.spinning.load(Ordering::Relaxed) {
        throw("mexit: spinning");
    }
    // SAFETY: m's own thread owns naffine.
    if unsafe { m.naffine.get() } != 0 || m.aff.len() != 0 {
        throw("mexit: goroutines bound to the exiting M");
    }
    // SAFETY: m's thread, holding a P.
    let pp = unsafe { releasep(m) };
    // m.exiting is still set, so an M this hand-off creates comes from the template thread.
    handoff_p(pp);
    m.lockedg.store(null_mut(), Ordering::Relaxed);
    m.dead.store(true, Ordering::Release);
    SCHED.mcount.fetch_sub(1, Ordering::SeqCst);
    arch::tls_set(0);
}

/// Puts dead M `m` on `SCHED.mfree`, where `allocm` revives it. Called by the thread-exit
/// destructor of `m`'s thread (os_linux.rs), its last use of `m`: no code of the thread
/// that was `m` may touch it afterwards.
pub(super) fn mfree_put(m: &M) {
    // SAFETY: on m's own (exiting) thread, which owns naffine.
    if unsafe { m.naffine.get() } != 0 || m.aff.len() != 0 {
        // Goroutines are bound to it: a thread ended under them by pthread_exit (mexit
        // refuses to end one). They are stranded, and the M must not serve anyone else.
        return;
    }
    let mut g = lock_sched();
    let s = g.synced();
    // SAFETY: schedlink is owned by the holder of SCHED.lock.
    unsafe { m.schedlink.set(s.mfree) };
    s.mfree = m as *const M as *mut M;
}

/// Stops the current M until new work is available; returns holding the P it was handed.
///
/// # Safety
/// Called by `m`'s own thread, which holds no P and is not spinning.
unsafe fn stopm(m: &M) {
    if !m.p.load(Ordering::Relaxed).is_null() {
        throw("stopm holding p");
    }
    if m.spinning.load(Ordering::Relaxed) {
        throw("stopm spinning");
    }
    // SAFETY: m's thread, no P.
    let has_affine = unsafe { affinity::go_idle(m) };
    {
        let mut g = lock_sched();
        // Goroutines that can run only on this M are queued (or were, after we marked
        // ourselves idle): get a P for them rather than sleep where startm would find us.
        if has_affine || m.affwanted.swap(false, Ordering::SeqCst) {
            if let Some(pp) = pidleget(&mut g) {
                drop(g);
                // SAFETY: m's thread; pp came off the idle list.
                unsafe {
                    acquirep(m, pp);
                    affinity::set_active(m);
                }
                return;
            }
            affwait_put(&mut g, m as *const M as *mut M);
        } else {
            mput(&mut g, m as *const M as *mut M);
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
/// `handoff_p` found Ms waiting for a P and goroutines queued, and served an M last: the
/// queued goroutines' turn is next. A hint (relaxed): a lost update costs one turn.
static HANDOFF_QUEUE_TURN: AtomicBool = AtomicBool::new(false);

pub(super) fn handoff_p(pp: *mut P) {
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

/// Test hook, debug builds only: `GMP_DEBUG=handoffdelay=<µs>` makes `handoff_p` sleep
/// between its spinning check and its `pidleput`, widening the window in which a `wakep`
/// that found no idle P (needspinning) must be seen by the re-check after the `pidleput`
/// (c-tests/handoff_wakeup.c).
#[cfg(debug_assertions)]
fn handoff_delay() {
    static US: core::sync::atomic::AtomicI64 = core::sync::atomic::AtomicI64::new(-1);
    super::dump::debug_delay(&US, "handoffdelay");
}

/// Test hook, debug builds only: `GMP_DEBUG=idledelay=<µs>` makes `park_idle` sleep before
/// its `go_idle`, widening the window in which a goroutine bound to this M is readied
/// after the M gave up its P but before it marked its affinity queue idle: the readier
/// then wakes nobody, and `park_idle` and `stopm` must see the queued goroutine
/// themselves (c-tests/affinity_stopm.c).
#[cfg(debug_assertions)]
fn idle_delay() {
    static US: core::sync::atomic::AtomicI64 = core::sync::atomic::AtomicI64::new(-1);
    super::dump::debug_delay(&US, "idledelay");
}

/// Marks `m` spinning (it holds a P and looks for work).
fn become_spinning(m: &M) {
    m.spinning.store(true, Ordering::Relaxed);
    SCHED.nmspinning.fetch_add(1, Ordering::SeqCst);
    // The request for a spinner is answered. Cleared only if set (Go stores 0 each time,
    // an exchange: a locked instruction on every spin): a request made just after our
    // look stays up and makes one more M spin, which is the conservative side.
    if SCHED.needspinning.load(Ordering::Relaxed) != 0 {
        SCHED.needspinning.store(0, Ordering::SeqCst);
    }
    #[cfg(debug_assertions)]
    {
        // Go's bound on spinning Ms, in the form that holds exactly: every spinning M holds a
        // P (the bound on entering, 2*nmspinning < gomaxprocs - npidle, keeps it at about
        // half the busy Ps).
        let n = SCHED.nmspinning.load(Ordering::Relaxed);
        if n > SCHED.gomaxprocs.load(Ordering::Relaxed).max(1) + 1 {
            throw("become_spinning: more spinning Ms than Ps");
        }
    }
}

/// Ends `m`'s spinning. The SeqCst decrement is the StoreLoad barrier that pairs with
/// `wakep`'s: a look at the queues after it sees what a submitter that saw `m` spinning
/// (and so woke nobody) queued.
fn stop_spinning(m: &M) {
    m.spinning.store(false, Ordering::Relaxed);
    if SCHED.nmspinning.fetch_sub(1, Ordering::SeqCst) <= 0 {
        throw("findrunnable: negative nmspinning");
    }
}

/// A spinning M found work: stop spinning, and since it may have been the only one looking,
/// wake another M to keep looking (Go's resetspinning).
fn reset_spinning(m: &M) {
    stop_spinning(m);
    wakep();
}

/// `reset_spinning` for an M that found work while spinning for a foreign thread
/// (`spin_for_foreign`): it wakes a successor only if there is anything to look for. Go's
/// unconditional wake-up would start an M per message that C main hands over one at a
/// time, which finds nothing and sleeps again, and every round trip of a ping-pong from C
/// main would pay that futex wake-up (`scripts/ab.sh -p 2 -a "-shape 1" pingpong`).
/// Work submitted while we spun did
/// not wake anyone (its submitter saw nmspinning > 0): our look after the SeqCst
/// decrement sees it (the StoreLoad pairing of find_runnable's step 6; spinning_loom.rs,
/// `reset_spinning_no_lost_wakeup`). Work submitted after the decrement wakes an M
/// through its own wakep.
fn reset_spinning_foreign(m: &M) {
    stop_spinning(m);
    if work_visible() {
        wakep();
    }
}

/// Whether anything waits for an M that only a new spinning M would see: a goroutine on
/// the global queue or on any P's local queue (runnext included), or a pending timer with
/// no timer M to watch it (`timer::wake_for_timer` calls `wakep` when there is none, and
/// that `wakep` does nothing while an M spins: the spinner going idle becomes the timer
/// M; one that found work instead must pass the job on — sysmon runs the timers of idle
/// Ps only when every P is busy). Poller waits need no such care: sysmon polls whenever
/// nobody has for 10 ms, and the next M to go idle blocks in the poller; a wake-up per
/// hand-off here would put a futex wake-up into every TCP round trip C main makes through
/// goroutines (`scripts/ab.sh -p 2 -a "-shape 1" tcp_rtt`). All
/// SeqCst loads after the caller's SeqCst decrement of `nmspinning`.
fn work_visible() -> bool {
    if SCHED.runqsize.load(Ordering::SeqCst) != 0 {
        return true;
    }
    let procs = SCHED.gomaxprocs.load(Ordering::SeqCst) as usize;
    let queued = (0..procs).any(|i| {
        let pp = SCHED.allp[i].load(Ordering::Acquire);
        // SAFETY: entries of allp are never freed.
        !pp.is_null() && unsafe { !(*pp).runq.is_empty() }
    });
    queued || (SCHED.timer_m.load(Ordering::SeqCst).is_null() && timer::earliest() != 0)
}

// ---------------------------------------------------------------------------------------
// The scheduler loop.

/// Runs goroutines until the M must exit (`m.exiting`). Each iteration finds a G, switches to it, and handles what it
/// asked for when it switched back (park, gosched, exit).
///
/// # Safety
/// Called once per M, on its own thread, holding a P.
unsafe fn schedule_loop(m: &M) {
    let mut next: Option<(*mut G, bool)> = None;
    loop {
        // SAFETY: on m's own thread (caller contract).
        let (gp, inherit) = match next.take() {
            Some(x) => x,
            None => unsafe { schedule(m) },
        };
        // SAFETY: gp is RUNNABLE and ours to run; we hold a P.
        let act = unsafe { execute(m, gp, inherit) };
        // SAFETY: gp switched back to us with `act`; we are m's thread.
        next = unsafe { super::park::after_switch(m, act) };
        // SAFETY: m's own thread owns `exiting`.
        if unsafe { m.exiting.get() } {
            return;
        }
    }
}

/// Finds a runnable G for this M (Go's schedule minus execute). Blocks until there is one.
///
/// # Safety
/// Called on `m`'s own thread.
unsafe fn schedule(m: &M) -> (*mut G, bool) {
    // An M locked to a G runs nothing else: wait for it to become runnable.
    let lg = m.lockedg.load(Ordering::Relaxed);
    if !lg.is_null() {
        // Handed its goroutine with a P by `lock_move` (a new M), or its goroutine stopped
        // running and the M waits until someone finds it runnable again.
        // SAFETY: m's thread.
        if unsafe { !take_lockstart(m) } {
            // SAFETY: m's thread.
            unsafe { stoplockedm(m) };
        }
        return (lg, false);
    }
    // Every `continue` below follows a path that may have stopped this M (`stopm`): if it
    // was idle there and `lock_move` took it and handed it a goroutine to lock to, with a
    // P, that goroutine runs now. Checked only on those rounds (a register test, not a
    // load of `lockstart` every round, which the yield workload would pay per switch).
    let mut again = false;
    loop {
        // SAFETY: m's thread.
        if again && unsafe { take_lockstart(m) } {
            return (m.lockedg.load(Ordering::Relaxed), false);
        }
        again = true;
        let pp = m.p.load(Ordering::Relaxed);
        // SAFETY: this M holds pp (P–M reciprocity is checked in debug builds).
        let p = unsafe { &*pp };
        debug_assert!(
            std::ptr::eq(p.m.load(Ordering::Relaxed), m),
            "gmp: P-M reciprocity"
        );
        // SAFETY: m's thread, holding pp.
        if p.id >= SCHED.gomaxprocs.load(Ordering::Relaxed) && unsafe { retire_p(m) } {
            continue;
        }
        check_timers(p);
        // sysmon asked for preemption: the goroutines of this P have run a whole slice
        // (maybe handing it on through runnext, as a channel ping-pong does). Serve the
        // global queue first, where preempted goroutines and foreign threads' spawns wait
        // (or this M's own preempted goroutines, in turn with it), and start a new slice
        // whatever runs next.
        let preempted =
            p.preempt.load(Ordering::Relaxed) && p.preempt.swap(false, Ordering::Relaxed);
        // Goroutines that can run only on this M come first (affinity.rs), the preempted
        // ones excepted: they wait as the global queue does.
        // SAFETY: m's thread, holding pp.
        let mut found = unsafe { affinity::get_first(m) }.map(|gp| (gp, false));
        // Fairness: check the global queue (and this M's preempted goroutines) once in a
        // while, so that two goroutines re-spawning each other on the local queue cannot
        // starve it; and serve an M that waits for a P to run what only it can run, so
        // that it does not wait for a P to go idle.
        if found.is_none() && (preempted || p.schedtick.load(Ordering::Relaxed) % 61 == 0) {
            // Also when goroutines affine to this M are queued (a pinned goroutine in a
            // yield loop, waiting for one pinned elsewhere): `stopm` then puts this M on
            // affwait in turn, and the Ms take turns with the P.
            if SCHED.naffwait.load(Ordering::Relaxed) > 0
                && !m.spinning.load(Ordering::Relaxed)
                // SAFETY: m's thread, holding a P, not spinning.
                && unsafe { handoff_to_affwait(m) }
            {
                continue;
            }
            // SAFETY: m's thread, owning pp; max = 1 puts nothing on the local queue.
            found = unsafe { globrunqget_or_preempted(m, p, 1) }.map(|gp| (gp, false));
        }
        if found.is_none() {
            // SAFETY: we own pp.
            found = unsafe { p.runq.get() }.map(|(gp, inherit)| (gp.as_ptr(), inherit));
            // With one P nobody steals: the G queued next is ours to run, and in a program
            // that spawns far ahead of running (skynet keeps tens of thousands queued) it
            // was written by its spawner long ago, so that our first look at it
            // (`lockedm`, below) would miss the cache every time. Start fetching it now,
            // while this one runs. With more Ps the prefetch does as much harm as good (the
            // G may be stolen: `scripts/ab.sh -p 2 spawn` shows it).
            if found.is_some() && SCHED.gomaxprocs.load(Ordering::Relaxed) == 1 {
                // SAFETY: we own pp.
                super::proc::prefetch_g(unsafe { p.runq.peek_ring() });
            }
        }
        let (gp, inherit) = match found {
            Some((gp, inherit)) => (gp, inherit && !preempted),
            // A request consumed above ends the slice whatever find_runnable found (its
            // local-queue pick may be runnext, which would inherit the old slice and leave
            // sysmon asking again every round).
            // SAFETY: m's thread, holding a P.
            None => match unsafe { find_runnable(m) } {
                Some((gp, inherit)) => (gp, inherit && !preempted),
                // P retired (we got another one), or handed a locked G: start over.
                None => continue,
            },
        };
        dequeued(gp);
        // This thread is going to run a G now, so it is no longer spinning; if it was the
        // last spinning M, another one must start looking.
        if m.spinning.load(Ordering::Relaxed) {
            reset_spinning(m);
        }
        // A G locked to another M: hand that M our P and wait for new work ourselves. (Or
        // one started GMP_GO_LOCKED, not locked to an M yet: `LOCK_AT_START`.)
        // SAFETY: Gs are never freed.
        let lm = unsafe { (*gp).lockedm.load(Ordering::Relaxed) };
        if !lm.is_null() && !std::ptr::eq(lm, m) {
            if lm == LOCK_AT_START {
                // SAFETY: m's thread, holding a P, not spinning; we dequeued gp.
                if unsafe { start_locked(m, gp) } {
                    return (gp, inherit);
                }
            } else {
                // SAFETY: m's thread, holding a P.
                unsafe { startlockedm(m, lm) };
            }
            continue;
        }
        return (gp, inherit);
    }
}

/// Switches to `gp` and runs it until it switches back; returns what it asked for.
///
/// # Safety
/// On `m`'s own thread holding a P; `gp` is RUNNABLE, taken off every run queue, and ours.
unsafe fn execute(m: &M, gp: *mut G, inherit: bool) -> usize {
    // No runtime lock is held across a switch to a goroutine (gopark's
    // unlock function has released the parking goroutine's locks by now).
    #[cfg(debug_assertions)]
    if crate::sys::locks_held() != 0 {
        throw("execute: switching to a goroutine while holding a runtime lock");
    }
    let pp = m.p.load(Ordering::Relaxed);
    // SAFETY: gp is ours (caller contract); Ps and Gs are never freed.
    unsafe {
        let g = &*gp;
        m.curg.store(gp, Ordering::Relaxed);
        g.m.store(m as *const M as *mut M, Ordering::Relaxed);
        casgstatus(g, G_RUNNABLE, G_RUNNING);
        if !inherit {
            let p = &*pp;
            p.schedtick.store(
                p.schedtick.load(Ordering::Relaxed).wrapping_add(1),
                Ordering::Relaxed,
            );
        }
        if g.pinned.get() && g.affm.load(Ordering::Relaxed).is_null() {
            // Started pinned: bound to this M from now on (affinity.rs).
            g.affm.store(m as *const M as *mut M, Ordering::Relaxed);
            m.naffine.set(m.naffine.get() + 1);
        }
        #[cfg(debug_assertions)]
        {
            let am = g.affm.load(Ordering::Relaxed);
            if !am.is_null() && !std::ptr::eq(am, m) {
                throw("execute: affine goroutine on another M");
            }
        }
        if g.asyncbound.get() {
            // Resumed after an asynchronous preemption, on the M it was stopped on: the
            // lock was for that one stop (`park::gopreempt_bound`).
            #[cfg(debug_assertions)]
            if !std::ptr::eq(g.lockedm.load(Ordering::Relaxed), m) || m.lockedext.get() != 0 {
                throw("execute: a goroutine stopped by preemption resumes on another M");
            }
            g.asyncbound.set(false);
            g.lockedm.store(null_mut(), Ordering::Relaxed);
            m.lockedg.store(null_mut(), Ordering::Relaxed);
        }
        #[cfg(debug_assertions)]
        {
            // The triangle G ↔ M ↔ P and P–M reciprocity (HACKING.md, "Invariants checked
            // in debug builds").
            if !std::ptr::eq(g.m.load(Ordering::Relaxed), m)
                || m.curg.load(Ordering::Relaxed) != gp
                || pp.is_null()
                || !std::ptr::eq((*pp).m.load(Ordering::Relaxed), m)
            {
                throw("execute: triangle invariant broken");
            }
            if g.queued.load(Ordering::Relaxed) {
                throw("execute: running G is still on a run queue");
            }
        }
        // The scheduler's FP control state is constant, so the switch need not read it.
        let sp = g.sp.get();
        if unstarted(sp) {
            // Never ran: start it at the top of its stack (newproc prepared nothing).
            take_hot_stack(&*pp, g, sp & !SP_UNSTARTED);
            let top = (*g.stack.ptr())
                .as_ref()
                .map(crate::stack::Stack::top)
                .unwrap_or_else(|| throw("execute: G without stack"));
            if hooks::any() {
                hooks::execute(m, g);
            }
            return arch::start_from_g0_balanced(
                m.g0_sp.ptr(),
                top,
                super::proc::goentry,
                m.g0_fpenv.get(),
            );
        }
        if hooks::any() {
            hooks::execute(m, g);
        }
        arch::switch_from_g0_balanced(m.g0_sp.ptr(), sp, 0, m.g0_fpenv.get())
    }
}

/// A goroutine about to run for the first time trades its stack for the one of the G that
/// died most recently on this P, if they are alike: that stack's top lines are still in
/// the cache (and its pages mapped), whereas the stack the new G got at spawn time — maybe
/// tens of thousands of goroutines ago, in a program that spawns far ahead of running —
/// has long left it, or was never touched. The dead G keeps the cold stack for a later
/// spawn, which does not touch it (newproc writes nothing to a stack), and moves to the
/// cold list: the next goroutine to start takes the next hot stack. (With one list, the
/// traded G stayed on top and only one start per exit found a hot stack; sleep_many from
/// C main, whose M starts goroutines in batches between batches of exits, faulted in a new
/// stack for nearly every start.) Nothing else refers to either stack: both Gs are ours
/// (one just dequeued, never run; one on our P's free list).
///
/// A goroutine that was promised a stack at spawn instead of getting one (`promised`, the
/// size; 0 for one that holds its stack; `proc::take_ticket`) takes the hot stack outright,
/// and its promise goes back to the P's tickets; with no hot stack of that size at hand it
/// takes the one the pool kept for the promise.
///
/// # Safety
/// On the M holding `p`, which dequeued `g` (never run; without a stack iff `promised`).
unsafe fn take_hot_stack(p: &P, g: &G, promised: usize) {
    // SAFETY: p's free lists, tickets and their Gs belong to the holding M (caller
    // contract); g is ours.
    unsafe {
        if (*p.gfree.ptr()).is_empty() {
            super::proc::refill_hot(p);
        }
        let (list, cold_list) = super::proc::gfree_lists(p);
        let dead = list.peek();
        let mine = &mut *g.stack.ptr();
        #[cfg(debug_assertions)]
        if mine.is_some() == (promised != 0) {
            throw("take_hot_stack: a G with both a stack and a promise, or neither");
        }
        let want = if promised != 0 {
            promised
        } else {
            mine.as_ref().map_or(0, crate::stack::Stack::size)
        };
        if !dead.is_null() {
            #[cfg(debug_assertions)]
            if (*dead).status.load(Ordering::Relaxed) != G_DEAD || (*(*dead).stack.ptr()).is_none()
            {
                throw("take_hot_stack: a G on the hot list is not dead or has no stack");
            }
            let hot = &mut *(*dead).stack.ptr();
            if hot.as_ref().is_some_and(|h| h.size() == want) {
                // A promised G has no stack: the dead one is left without.
                core::mem::swap(hot, mine);
                list.pop();
                cold_list.push(dead);
                if promised != 0 {
                    super::proc::return_ticket(&mut *p.stack_tickets.ptr(), promised);
                }
                return;
            }
        }
        if promised != 0 {
            *mine = Some(crate::stack::alloc_reserved(promised));
        }
    }
}

/// The slow path of `schedule`: the local queue is empty. Looks in the global queue, steals
/// from other Ps, and if there is nothing, drops the P and parks the M. Returns `None` when
/// the M woke up holding a different P that must be re-checked by `schedule`.
///
/// # Safety
/// Called on `m`'s own thread, holding a P.
unsafe fn find_runnable(m: &M) -> Option<(*mut G, bool)> {
    // SAFETY: m's own thread owns foreign_handoff.
    let mut handed = unsafe { m.foreign_handoff.get() };
    if handed {
        // SAFETY: as above.
        unsafe { m.foreign_handoff.set(false) };
    }
    loop {
        let pp = m.p.load(Ordering::Relaxed);
        // SAFETY: we hold pp.
        let p = unsafe { &*pp };
        // Our P was retired, or `lock_move` handed us a goroutine to run locked (woken
        // in `park_idle`): `schedule` starts over.
        // SAFETY: m's own thread owns lockstart.
        if p.id >= SCHED.gomaxprocs.load(Ordering::Relaxed) || unsafe { m.lockstart.get() } {
            return None;
        }

        // 0-2. Due timers, the local run queue, the global run queue or this M's
        // preempted goroutines.
        // SAFETY: we own pp.
        if let Some(x) = unsafe { timers_and_queues(m, p) } {
            return Some(x);
        }

        // 2a. Readied goroutines that can run only on this M (`schedule` looks at them
        // first, so we get here with some queued only right after one of them yielded).
        // SAFETY: m's thread, holding pp.
        if let Some(gp) = unsafe { affinity::get(m) } {
            return Some((gp, false));
        }

        // 3. The poller, without blocking.
        // SAFETY: we hold pp.
        if unsafe { poll_network(p) } {
            continue;
        }

        let procs = SCHED.gomaxprocs.load(Ordering::Relaxed);
        // 4a. A thread that is not an M (C main) handed goroutines work, or began to wait
        // for them, since this M last went idle: it is likely in an exchange with them,
        // and its next hand-off follows their answer within microseconds. Stay awake for
        // it, spinning (so that its wakep finds nothing to wake), instead of sleeping:
        // waking an idle CPU costs microseconds (more in a VM), the spin ends at the first
        // work.
        // One M at a time does this: one foreign thread's exchange needs one partner, and
        // on a small machine more spinners would take the CPUs the work needs. Before
        // step 4's steal: the foreign thread's next hand-off goes to this M's mailbox only
        // once it is open, and a steal over the other Ps first would keep it closed long
        // enough for many of C main's hand-offs to miss it (`scripts/ab.sh -p 2 -a
        // "-shape 1" pingpong` compares the two orders). The spinner steals as step 4 would every
        // 64 polls (`spin_for_foreign_open`). The mailbox opens first, then the M counts
        // as spinning: the foreign thread's next hand-off may come at any moment.
        // SAFETY: m's thread.
        if (handed || unsafe { foreign_moved(m) } || foreign_recent())
            && crate::sys::FOREIGN_SPIN.load(Ordering::Relaxed)
            && (m.spinning.load(Ordering::Relaxed)
                || 2 * SCHED.nmspinning.load(Ordering::SeqCst)
                    < procs - SCHED.npidle.load(Ordering::SeqCst))
            && open_mailbox()
        {
            if !m.spinning.load(Ordering::Relaxed) {
                become_spinning(m);
            }
            // Once per hand-off: a spin that ends with nothing found does not repeat.
            handed = false;
            // SAFETY: we own pp, are spinning and opened the mailbox.
            let found = unsafe { spin_for_foreign(m, p) };
            if let Some((gp, inherit)) = found {
                // A foreign thread's next hand-off calls wakep itself.
                reset_spinning_foreign(m);
                return Some((gp, inherit));
            }
            continue;
        }

        // 4. Steal, if spinning is allowed: limit the number of spinning Ms to half the
        // busy Ps, so that a machine with GOMAXPROCS=64 and one busy goroutine does not
        // burn 63 cores looking for work.
        if m.spinning.load(Ordering::Relaxed)
            || 2 * SCHED.nmspinning.load(Ordering::SeqCst)
                < procs - SCHED.npidle.load(Ordering::SeqCst)
        {
            if !m.spinning.load(Ordering::Relaxed) {
                become_spinning(m);
            }
            // SAFETY: we own pp.
            if let Some(gp) = unsafe { steal_work(m, p) } {
                return Some((gp, false));
            }
        }

        // 5. Nothing found: drop the P.
        let was_spinning;
        {
            let mut g = lock_sched();
            if SCHED.runqsize.load(Ordering::Relaxed) != 0 {
                // SAFETY: we own pp and its queue is empty.
                if let Some(gp) = unsafe { globrunqget(&mut g, p, 0) } {
                    return Some((gp, false));
                }
            }
            if !m.spinning.load(Ordering::Relaxed) && SCHED.needspinning.load(Ordering::SeqCst) == 1
            {
                // A wakeup found no idle P and asked for a spinner: be it.
                become_spinning(m);
                continue;
            }
            // SAFETY: m's thread, holding pp.
            let released = unsafe { releasep(m) };
            debug_assert!(released == pp);
            pidleput(&mut g, pp);
            was_spinning = m.spinning.load(Ordering::Relaxed);
        }

        // 6. The delicate dance: we stop spinning, then look everywhere once more. If we did
        // it the other way round, work submitted after our last look but before our
        // decrement would find nmspinning > 0, not wake anyone, and sit until someone else
        // happened to look. The SeqCst RMW is the StoreLoad barrier pairing with wakep's.
        if was_spinning {
            stop_spinning(m);
            if SCHED.runqsize.load(Ordering::SeqCst) != 0 {
                let mut g = lock_sched();
                if SCHED.runqsize.load(Ordering::Relaxed) != 0
                    && let Some(pp2) = pidleget_spinning(&mut g)
                {
                    // SAFETY: we are m's thread and took pp2 off the idle list.
                    unsafe { acquirep(m, pp2) };
                    become_spinning(m);
                    // SAFETY: we own pp2 and an idle P's queue is empty.
                    if let Some(gp) = unsafe { globrunqget(&mut g, &*pp2, 0) } {
                        return Some((gp, false));
                    }
                    continue;
                }
            }
            if let Some(pp2) = check_runqs_no_p() {
                // SAFETY: we are m's thread and took pp2 off the idle list.
                unsafe { acquirep(m, pp2) };
                become_spinning(m);
                continue;
            }
        }

        // A wakep that saw no idle P may have asked for a spinner after we checked
        // needspinning under the lock (see wakep): with our P now idle, look again.
        if SCHED.needspinning.load(Ordering::SeqCst) == 1 {
            let pp2 = {
                let mut g = lock_sched();
                pidleget_spinning(&mut g)
            };
            if let Some(pp2) = pp2 {
                // SAFETY: we are m's thread and took pp2 off the idle list.
                unsafe { acquirep(m, pp2) };
                become_spinning(m);
                continue;
            }
        }

        // 7. Park until someone hands us a P (or, as the timer M, until a timer is due).
        // SAFETY: m's thread, no P, not spinning.
        unsafe { park_idle(m) };
        // Woken with a P (and maybe spinning): loop, re-checking that P.
    }
}

/// How long a foreign thread in a quick exchange waits for an M to take what it put on
/// the global queue before `wakep` (`ready_put`).
const HANDOVER_NS: i64 = 2_000;

/// Whether the global queue emptied within `HANDOVER_NS` (an M took the work).
fn handed_over() -> bool {
    let now = crate::sys::nanotime();
    crate::sys::FOREIGN_LAST_NS.store(now, Ordering::Relaxed);
    let deadline = now + HANDOVER_NS;
    loop {
        if SCHED.runqsize.load(Ordering::SeqCst) == 0 {
            return true;
        }
        crate::sys::procyield(8);
        if crate::sys::nanotime() >= deadline {
            return false;
        }
    }
}

thread_local! {
    /// Set on the runtime's own threads that are not Ms (sysmon, the template thread, the
    /// trace writers): what they ready (sysmon runs timers) is not a foreign hand-off.
    static RUNTIME_THREAD: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Marks the calling thread as one of the runtime's own (see `RUNTIME_THREAD`).
pub(super) fn mark_runtime_thread() {
    RUNTIME_THREAD.with(|r| r.set(true));
}

/// The spinning M's mailbox (`spin_for_foreign`): null while no M spins for a foreign
/// thread, `MAILBOX_OPEN` while one does, else the goroutine a foreign thread handed to
/// it (`ready_put`). Transitions: null → OPEN by the CAS with which an M becomes the
/// spinner (`open_mailbox`: at most one at a time), X → null by that spinner's closing
/// swap, OPEN → G by a foreign thread's CAS, at most once per opening. So exactly one of
/// them owns a handed goroutine: the CAS puts it in only while the spinner has not closed
/// the box, and the spinner's closing swap returns it (then runs it or queues it) if it
/// did not take it while polling. Go has no such box: its foreign threads (cgo
/// callbacks) run on an M with a P of their own.
static FOREIGN_MAILBOX: AtomicPtr<G> = AtomicPtr::new(null_mut());

/// `FOREIGN_MAILBOX` open and empty: an odd address, never a G's (Gs are 128-byte aligned).
const MAILBOX_OPEN: *mut G = core::ptr::without_provenance_mut(1);

/// Whether a foreign thread acted since `m` last asked (and notes that it has now seen it).
///
/// # Safety
/// On `m`'s own thread (`foreign_seen`'s owner).
#[inline]
unsafe fn foreign_moved(m: &M) -> bool {
    let acts = crate::sys::FOREIGN_ACTS.load(Ordering::Relaxed);
    // SAFETY: caller contract.
    unsafe {
        if acts == m.foreign_seen.get() {
            return false;
        }
        m.foreign_seen.set(acts);
    }
    true
}

/// Whether a foreign thread is in a quick exchange with goroutines right now
/// (`sys::FOREIGN_LAST_NS`).
fn foreign_recent() -> bool {
    let last = crate::sys::FOREIGN_LAST_NS.load(Ordering::Relaxed);
    crate::sys::nanotime() - last < crate::sys::FOREIGN_RECENT_NS
}

/// Makes the caller the M spinning for a foreign thread, if none is, by opening the
/// mailbox (null → OPEN). The caller then calls `spin_for_foreign`, which closes it.
#[inline]
fn open_mailbox() -> bool {
    // AcqRel, with the closing swap's: one spinner's turn happens before the next one's.
    FOREIGN_MAILBOX.load(Ordering::Relaxed).is_null()
        && FOREIGN_MAILBOX
            .compare_exchange(
                null_mut(),
                MAILBOX_OPEN,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
}

/// `find_runnable` step 4a: polls the places a foreign thread's work arrives (the global
/// queue, this P's queue and timers, the poller) for up to `sys::FOREIGN_SPIN_NS`, or until
/// the foreign thread acts again (the exchange goes on: the poll restarts). None when
/// nothing came; the caller then carries on as after a failed steal.
///
/// # Safety
/// Called by `p`'s owner `m`, spinning, after its `open_mailbox` succeeded.
// Out of line: an idle path, kept out of find_runnable's body.
#[inline(never)]
unsafe fn spin_for_foreign(m: &M, p: &P) -> Option<(*mut G, bool)> {
    // Poll with the mailbox open, and close it on the way out, taking whatever it holds
    // then.
    // SAFETY: caller contract.
    let found = unsafe { spin_for_foreign_open(m, p) };
    // acquire: a goroutine handed over with release; release: for the next spinner's
    // opening CAS.
    let gp = FOREIGN_MAILBOX.swap(null_mut(), Ordering::AcqRel);
    if gp == MAILBOX_OPEN || gp.is_null() {
        return found;
    }
    // gp counts as queued (`enqueued` by the foreign thread) until `schedule` dequeues it.
    match found {
        None if p.id < SCHED.gomaxprocs.load(Ordering::Relaxed) => {
            // SAFETY: m's own thread owns foreign_handoff.
            unsafe { m.foreign_handoff.set(true) };
            Some((gp, false))
        }
        // We have a goroutine to run already (or our P is leaving service): the handed
        // one goes where it would have gone without the mailbox, and runs after it.
        _ => {
            globrunqput(&mut lock_sched(), gp);
            wakep();
            found
        }
    }
}

/// `spin_for_foreign` with the mailbox open: returns a goroutine handed over through
/// it, or what the polls found (which may leave one in the mailbox for the caller).
///
/// # Safety
/// As `spin_for_foreign`.
#[inline(always)]
unsafe fn spin_for_foreign_open(m: &M, p: &P) -> Option<(*mut G, bool)> {
    let mut deadline = crate::sys::nanotime() + crate::sys::FOREIGN_SPIN_NS;
    let mut polls = 0u32;
    loop {
        // The mailbox first: it is what the foreign thread's next hand-off fills.
        if FOREIGN_MAILBOX.load(Ordering::Relaxed) != MAILBOX_OPEN {
            return None;
        }
        if p.id >= SCHED.gomaxprocs.load(Ordering::Relaxed) {
            return None;
        }
        // SAFETY: we own p.
        if let Some(x) = unsafe { timers_and_queues(m, p) } {
            return Some(x);
        }
        if m.aff.len() != 0 || SCHED.needspinning.load(Ordering::Relaxed) == 1 {
            return None;
        }
        polls = polls.wrapping_add(1);
        if polls.is_multiple_of(64) {
            // SAFETY: we hold p.
            if unsafe { poll_network(p) } {
                continue;
            }
            // Step 4 of find_runnable, which comes after this spin: a spinning M takes
            // work queued on busy Ps, also while a foreign exchange keeps it here.
            // SAFETY: we own p and are spinning.
            if let Some(gp) = unsafe { steal_work(m, p) } {
                return Some((gp, false));
            }
        }
        core::hint::spin_loop();
        if polls.is_multiple_of(16) {
            // SAFETY: m's thread.
            if unsafe { foreign_moved(m) } {
                deadline = crate::sys::nanotime() + crate::sys::FOREIGN_SPIN_NS;
            } else if crate::sys::nanotime() >= deadline {
                return None;
            }
        }
    }
}

/// `find_runnable`'s first steps, also polled by `spin_for_foreign`: runs `p`'s due timers
/// (they may make goroutines runnable on it), then takes a goroutine from its local run
/// queue, else from the global one or `m`'s preempted goroutines
/// (`globrunqget_or_preempted`).
///
/// # Safety
/// Called by `p`'s owner `m`, on its thread.
unsafe fn timers_and_queues(m: &M, p: &P) -> Option<(*mut G, bool)> {
    check_timers(p);
    // SAFETY: caller contract.
    if let Some((gp, inherit)) = unsafe { p.runq.get() } {
        return Some((gp.as_ptr(), inherit));
    }
    // SAFETY: caller contract; p's queue is empty.
    unsafe { globrunqget_or_preempted(m, p, 0) }.map(|gp| (gp, false))
}

/// The poller, without blocking, when goroutines wait on it and no M is blocked in it
/// (that one gets the events): what it readies comes to `p` (the first to its queue, to
/// run next). Returns whether it readied anything.
///
/// # Safety
/// On the M holding `p`.
unsafe fn poll_network(p: &P) -> bool {
    if !netpoll::inited() || !netpoll::any_waiters() || netpoll::BLOCKED.load(Ordering::SeqCst) != 0
    {
        return false;
    }
    let mut ready = netpoll::Ready::new();
    if netpoll::netpoll(0, &mut ready) == 0 {
        return false;
    }
    // SAFETY: caller contract.
    unsafe { ready.run_first_ready_rest(p) };
    true
}

/// Runs `p`'s due timers; reads the clock only when `p` has a timer.
#[inline]
fn check_timers(p: &P) {
    let next = p.timers.timer0_when.load(Ordering::Relaxed);
    if next != 0 {
        let now = crate::sys::nanotime();
        if now >= next {
            timer::run_due(p, now);
        }
    }
}

/// Parks an M that holds no P until it is handed one. While any timer is pending or any
/// goroutine waits on the poller, one such M (the timer M) sleeps only until the earliest
/// deadline — in `epoll_wait` once the poller exists (Go's blocking netpoll in
/// findRunnable: HACKING.md, decision 12, one way to wait for work), else on its note — then runs
/// the due timers and readies what the poller reported, holding an idle P if it can get
/// one, so the goroutines come to it.
///
/// # Safety
/// On `m`'s own thread, no P, not spinning.
unsafe fn park_idle(m: &M) {
    loop {
        let mut next = timer::earliest();
        if next == 0 && netpoll::inited() && netpoll::any_waiters() {
            next = i64::MAX;
        }
        // Work that only this M can run (queued, or claimed for us by a readier while we
        // slept as the timer M; affinity.rs): stopm gets us a P for it. Otherwise, mark
        // ourselves idle before a timed sleep, as stopm does before sleeping.
        #[cfg(debug_assertions)]
        idle_delay();
        // SAFETY: m's thread, no P.
        let affine = m.affwanted.load(Ordering::SeqCst) || unsafe { affinity::go_idle(m) };
        // SAFETY: m's thread, no P.
        let mut ready = netpoll::Ready::new();
        if next == 0 || affine || !unsafe { timer::sleep_as_timer_m(m, next, &mut ready) } {
            if !affine {
                // Another M is the timer M; it may sleep past `next` if it found every P
                // busy, and we just made one idle.
                timer::wake_timer_m_for_idle_p(next);
            }
            // SAFETY: m's thread, no P, not spinning.
            unsafe { stopm(m) };
            return;
        }
        let pp = {
            let mut g = lock_sched();
            pidleget(&mut g)
        };
        match pp {
            Some(pp) => {
                // SAFETY: m's thread; pp came off the idle list.
                unsafe {
                    acquirep(m, pp);
                    affinity::set_active(m);
                }
                timer::run_all_due(crate::sys::nanotime());
                // What the poll found comes to our P (Go: findRunnable after a blocking
                // netpoll acquires an idle P, runs one and injects the rest).
                // SAFETY: we hold pp.
                unsafe { ready.run_first_ready_rest(&*pp) };
                return;
            }
            // Every P is busy: ready what the poll found anyway (to the global queue, where
            // the busy Ps find them, as Go's injectglist), and step in for the timers their
            // Ps have left overdue for `BUSY_GRACE_NS` (a P held by one goroutine: asked to
            // pass through its scheduler, or run here after a slice); the others are their
            // Ps' to run at their next pass through the scheduler, which sends their
            // goroutines to a local queue rather than behind the global one.
            None => {
                timer::run_busy_overdue(crate::sys::nanotime());
                ready.ready_all();
            }
        }
    }
}

/// After dropping our P: if any P's local queue has work, take an idle P to go get it.
fn check_runqs_no_p() -> Option<*mut P> {
    let procs = SCHED.gomaxprocs.load(Ordering::SeqCst) as usize;
    for i in 0..procs {
        let pp = SCHED.allp[i].load(Ordering::Acquire);
        // SAFETY: entries of allp are never freed.
        if !pp.is_null() && unsafe { !(*pp).runq.is_empty() } {
            let mut g = lock_sched();
            return pidleget_spinning(&mut g);
        }
    }
    None
}

/// Steals half of a random other P's run queue: four passes over all Ps in a random order,
/// taking a victim's `runnext` only on the last pass (it is about to run there anyway).
///
/// # Safety
/// Called by `p`'s owner `m`, spinning.
unsafe fn steal_work(m: &M, p: &P) -> Option<*mut G> {
    const STEAL_TRIES: usize = 4;
    let n = SCHED.gomaxprocs.load(Ordering::Relaxed) as u32;
    if n <= 1 {
        return None;
    }
    for i in 0..STEAL_TRIES {
        let steal_runnext = i == STEAL_TRIES - 1;
        // SAFETY: m's own thread owns fastrand.
        let r = unsafe { fastrand(m) };
        let order = StealOrder::new(n, r);
        for pos in order {
            let vp = SCHED.allp[pos as usize].load(Ordering::Acquire);
            if vp.is_null() || std::ptr::eq(vp, p) {
                continue;
            }
            if steal_runnext {
                // Last pass: run the victim's due timers too (their goroutines come to us).
                // SAFETY: Ps are never freed.
                check_timers(unsafe { &*vp });
                // SAFETY: we own p.
                if let Some((gp, _)) = unsafe { p.runq.get() } {
                    return Some(gp.as_ptr());
                }
            }
            // SAFETY: we own p's queue; vp is a live P (never freed) whose queue supports
            // concurrent stealing.
            if let Some((gp, count)) = unsafe { p.runq.steal(&(*vp).runq, steal_runnext) } {
                SCHED.steals.fetch_add(count as u64, Ordering::Relaxed);
                if exectrace::on() {
                    exectrace::emit(exectrace::kind::STEAL, None, pos as u64, count as u64);
                }
                return Some(gp.as_ptr());
            }
        }
    }
    None
}

/// Visits 0..n in a random order: a random start and a random stride coprime with n.
struct StealOrder {
    n: u32,
    pos: u32,
    inc: u32,
    left: u32,
}

impl StealOrder {
    fn new(n: u32, r: u64) -> StealOrder {
        let mut inc = ((r >> 32) as u32 % n).max(1);
        while gcd(inc, n) != 1 {
            inc = inc % n + 1;
        }
        StealOrder {
            n,
            pos: (r as u32) % n,
            inc,
            left: n,
        }
    }
}

impl Iterator for StealOrder {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        if self.left == 0 {
            return None;
        }
        let cur = self.pos;
        self.pos = (self.pos + self.inc) % self.n;
        self.left -= 1;
        Some(cur)
    }
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// xorshift64* on the M's own state.
///
/// # Safety
/// Called on `m`'s own thread.
unsafe fn fastrand(m: &M) -> u64 {
    // SAFETY: caller contract: we are the owner of fastrand.
    let mut x = unsafe { m.fastrand.get() };
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    // SAFETY: as above.
    unsafe { m.fastrand.set(x) };
    x.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

// ---------------------------------------------------------------------------------------
// Locked (pinned) goroutines.

/// Our G is locked to us and not runnable: hand our P off and sleep until someone finds the
/// G runnable and hands us a P to run it with (Go's stoplockedm).
///
/// # Safety
/// On `m`'s own thread.
unsafe fn stoplockedm(m: &M) {
    if !m.p.load(Ordering::Relaxed).is_null() {
        // SAFETY: m's thread, holding a P.
        let pp = unsafe { releasep(m) };
        handoff_p(pp);
    }
    if m.spinning.load(Ordering::Relaxed) {
        throw("stoplockedm: spinning");
    }
    // SAFETY: m's thread, no P; startlockedm hands us one.
    unsafe { sleep_for_p(m) };
}

/// We dequeued a G locked to M `lm`: hand our P to `lm`, wake it, and stop (Go's
/// startlockedm).
///
/// # Safety
/// On `m`'s own thread, holding a P.
unsafe fn startlockedm(m: &M, lm: *mut M) {
    // SAFETY: m's thread.
    let pp = unsafe { releasep(m) };
    // SAFETY: Ms are never freed; lm is asleep in stoplockedm (or about to be) and takes
    // nextp only after our wakeup, which publishes it.
    unsafe {
        (*lm).nextp.store(pp, Ordering::Relaxed);
        (*lm).park.wakeup();
        stopm(m);
    }
}

/// `gmp_lock_os_thread` from goroutine `gp` found goroutines bound to this M (pinned to
/// it, or parked on it in hooked calls: `m.naffine`). Locked here, the M would run only `gp`
/// and they could run nowhere: a locked goroutine waiting for one of them (a mutex it
/// holds) would wait forever. So `gp` is locked to another M instead, one nothing is bound
/// to: an idle one (`mget_clean`), else a new one; it gets our P and runs `gp` at once
/// (`m.lockstart`), and we stop. Ms are reused, so a program that keeps locking on such
/// threads does not keep making threads.
///
/// Also how a goroutine started with `GMP_GO_LOCKED` reaches its thread when the M that
/// dequeued it has goroutines bound to it (`start_locked`).
///
/// # Safety
/// On `m`'s own thread, holding a P, not spinning; `gp` is RUNNABLE, on no queue, has no
/// M, is not bound to any M, and is ours (it stopped running on `m`, from `after_switch`;
/// or `schedule` dequeued it, unstarted).
pub(super) unsafe fn lock_move(m: &M, gp: *mut G) {
    let clean = {
        let mut g = lock_sched();
        mget_clean(&mut g)
    };
    // SAFETY: m's thread, holding a P.
    let pp = unsafe { releasep(m) };
    let bind = |lm: *mut M| {
        // SAFETY: lm sleeps on no list (taken off `midle` under the lock) or has no thread
        // yet, so its fields are ours until the wake-up (or the thread start) publishes
        // them; gp is ours (caller contract).
        unsafe {
            lockosthread::lock_first(lm, gp);
            (*lm).lockstart.set(true);
        }
    };
    match clean {
        Some(lm) => {
            bind(lm);
            give_p(lm, pp);
        }
        None => {
            let lm = allocm(pp, false);
            bind(lm);
            start_m(lm);
        }
    }
    // SAFETY: m's thread, no P, not spinning (it ran a goroutine).
    unsafe { stopm(m) };
}

/// `gp`, started with `GMP_GO_LOCKED`, is about to run for the first time: lock it to this
/// M and return true, or, when goroutines are bound to this M, hand it to another
/// (`lock_move`, which stops us) and return false.
///
/// # Safety
/// On `m`'s own thread, holding a P, not spinning; `gp` is RUNNABLE, dequeued and ours.
#[cold]
#[inline(never)]
unsafe fn start_locked(m: &M, gp: *mut G) -> bool {
    // SAFETY: caller contract: gp is ours, m's owner-only fields are ours.
    unsafe {
        (*gp).lockedm.store(null_mut(), Ordering::Relaxed);
        if m.naffine.get() != 0 {
            lock_move(m, gp);
            return false;
        }
        lockosthread::lock_first(m as *const M as *mut M, gp);
    }
    true
}

/// Takes an idle M that no goroutine is bound to off the idle list (for `lock_move`).
fn mget_clean(g: &mut SchedGuard) -> Option<*mut M> {
    let mut m = g.synced().midle;
    while !m.is_null() {
        // SAFETY: Ms are never freed. An M on `midle` sleeps in `stopm` and changed its
        // owner-only `naffine` before it put itself there under the lock we hold; nothing
        // becomes bound to it while it sleeps (binding happens on the M's own thread).
        let clean = unsafe { (*m).naffine.get() == 0 } && unsafe { (*m).aff.len() } == 0;
        if clean {
            munlink(g, m);
            return Some(m);
        }
        // SAFETY: the idle list's links are owned by the lock holder.
        m = unsafe { (*m).schedlink.get() };
    }
    None
}

/// Whether `lock_move` handed this M its locked goroutine with the P it holds: run it now.
/// Clears the mark.
///
/// # Safety
/// On `m`'s own thread.
#[inline]
unsafe fn take_lockstart(m: &M) -> bool {
    // SAFETY: caller contract; the writer published it with the wake-up we woke from.
    unsafe {
        if !m.lockstart.get() {
            return false;
        }
        m.lockstart.set(false);
    }
    true
}

// ---------------------------------------------------------------------------------------
// GOMAXPROCS.

/// Creates or revives Ps `from..to` and puts them on the idle list.
fn grow_procs(g: &mut SchedGuard, from: i32, to: i32) {
    for i in from..to {
        let mut pp = SCHED.allp[i as usize].load(Ordering::Acquire);
        if pp.is_null() {
            pp = Box::into_raw(Box::new(P {
                id: i,
                status: AtomicU32::new(P_DEAD),
                m: AtomicPtr::new(null_mut()),
                runq: RunQueue::new(),
                schedtick: AtomicU32::new(0),
                link: Owned::new(null_mut()),
                gfree: Owned::new(GList::new()),
                gfree_cold: Owned::new(GList::new()),
                gfreecnt: AtomicI32::new(0),
                preempt: AtomicBool::new(false),
                goidcache: Owned::new((0, 0)),
                stack_tickets: Owned::new(Tickets::default()),
                ngoroutines: AtomicI64::new(0),
                nspawned: AtomicU64::new(0),
                timers: timer::Timers::new(),
                syscalltick: AtomicU32::new(0),
                sysmontick: Owned::new(sysmon::SysmonTick::new()),
                sudogcache: Owned::new(sudog::SudogCache::new()),
            }));
            SCHED.allp[i as usize].store(pp, Ordering::Release);
        }
        // SAFETY: Ps are never freed.
        let p = unsafe { &*pp };
        // A P still P_RUNNING was being retired and its M has not noticed yet: it simply
        // stays in service.
        if p.status.load(Ordering::Acquire) == P_DEAD {
            p.status.store(P_IDLE, Ordering::Release);
            // pidleput retires Ps beyond gomaxprocs; the new value is stored after this
            // loop, so link directly.
            let s = g.synced();
            // SAFETY: we hold SCHED.lock, the owner of `link`.
            unsafe { p.link.set(s.pidle) };
            s.pidle = pp;
            SCHED.npidle.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Changes GOMAXPROCS to `n` (1..=MAX_PROCS) while goroutines run; returns the old value.
///
/// Growing creates idle Ps and wakes an M to use them. Shrinking retires idle Ps at once
/// and running ones at their M's next pass through the scheduler: that M moves the P's
/// runnable Gs to the global queue and goes idle. Without preemption, a P whose goroutine
/// never yields keeps running until it does (Go stops the world, which needs preemption).
pub fn procresize(n: i32) -> i32 {
    init_once();
    if n < 1 || n as usize > MAX_PROCS {
        throw("procresize: invalid arg");
    }
    // One resize at a time: a P this call retires stays DEAD (nobody else revives it)
    // while we empty its caches below, after SCHED.lock is released.
    RESIZE_LOCK.lock();
    let old;
    let mut retired: Vec<*mut P> = Vec::new();
    {
        let mut g = lock_sched();
        old = SCHED.gomaxprocs.load(Ordering::Relaxed);
        if n > old {
            grow_procs(&mut g, old, n);
            SCHED.gomaxprocs.store(n, Ordering::SeqCst);
            // The new Ps serve the Ms waiting for one before they count as idle.
            while SCHED.naffwait.load(Ordering::Relaxed) != 0 {
                let Some(pp) = pidleget(&mut g) else { break };
                let am = affwait_get(&mut g).unwrap_or_else(|| throw("procresize: affwait"));
                give_p(am, pp);
            }
        } else if n < old {
            // Retire idle Ps beyond n now, before the new count is published: `npidle`
            // still counts them, and for a moment `npidle >= gomaxprocs` would say every P
            // is idle while one runs, which sends sysmon into its deep sleep, from which
            // only a P leaving the idle list wakes it (no preemption, no retake, no look
            // at unseen calls meanwhile).
            let s = g.synced();
            let mut keep: *mut P = null_mut();
            let mut cur = s.pidle;
            s.pidle = null_mut();
            while !cur.is_null() {
                // SAFETY: idle-list Ps; their links are ours under the lock.
                let next = unsafe { (*cur).link.get() };
                // SAFETY: as above.
                let p = unsafe { &*cur };
                if p.id >= n {
                    SCHED.npidle.fetch_sub(1, Ordering::SeqCst);
                    p.status.store(P_DEAD, Ordering::Release);
                    retired.push(cur);
                } else {
                    // SAFETY: as above.
                    unsafe { p.link.set(keep) };
                    keep = cur;
                }
                cur = next;
            }
            s.pidle = keep;
            SCHED.gomaxprocs.store(n, Ordering::SeqCst);
        }
    }
    // Go's procresize destroys a removed P: its timers go to a P in service (P0; they
    // would otherwise wait for the timer M alone), its dead Gs and free sudogs to the
    // central lists.
    for &pp in &retired {
        // SAFETY: Ps are never freed; pp is DEAD, and only procresize (serialised by
        // RESIZE_LOCK, which we hold) revives a DEAD P, so its owner-only caches are ours.
        unsafe {
            drain_p_caches(&*pp);
            timer::move_all(&*pp, SCHED.allp[0].load(Ordering::Acquire));
        }
    }
    RESIZE_LOCK.unlock();
    if n > old {
        wakep();
    }
    // The Ps in service may all run now where sysmon last saw them all idle.
    sysmon::wake_if_deep();
    old
}

/// Serialises `procresize`.
static RESIZE_LOCK: Lock = Lock::new();

/// Gives a P's free sudogs and dead Gs to the central lists (a P leaving service).
///
/// # Safety
/// The caller owns `p`'s owner-only fields: it holds `p`, or `p` is DEAD and cannot be
/// revived meanwhile.
unsafe fn drain_p_caches(p: &P) {
    // SAFETY: caller contract: the sudog cache and gfree list are ours.
    unsafe {
        sudog::flush_p_cache(&mut *p.sudogcache.ptr());
        let (hot, cold) = super::proc::gfree_lists(p);
        let (mut hot, mut cold) = (core::mem::take(hot), core::mem::take(cold));
        p.gfreecnt.store(0, Ordering::Relaxed);
        let t = core::mem::take(&mut *p.stack_tickets.ptr());
        if t.count > 0 {
            crate::stack::unreserve(t.size, t.count);
        }
        // Their lock ranks below SCHED.lock, so never while holding it.
        with_gfree(|gf| {
            // SAFETY: the lists were ours; the global list is locked. put_global files a
            // G whose stack gfput gave back under `nostack`.
            while let Some(gp) = cold.pop() {
                super::proc::put_global(gf, gp, false);
            }
            while let Some(gp) = hot.pop() {
                super::proc::put_global(gf, gp, true);
            }
        });
    }
}

/// Our P is beyond GOMAXPROCS: move its runnable and dead Gs to the global lists, retire
/// it, and stop. Returns false if GOMAXPROCS grew back in the meantime (the P stays).
///
/// # Safety
/// On `m`'s own thread, holding the P.
unsafe fn retire_p(m: &M) -> bool {
    let pp = m.p.load(Ordering::Relaxed);
    // SAFETY: we hold pp.
    let p = unsafe { &*pp };
    // Free sudogs and dead Gs first (their locks rank below SCHED.lock).
    // SAFETY: we hold pp.
    unsafe { drain_p_caches(p) };
    {
        let mut g = lock_sched();
        if p.id < SCHED.gomaxprocs.load(Ordering::Relaxed) {
            return false;
        }
        // SAFETY: we own pp's queue; the Gs move to the global queue keeping their
        // "queued" mark.
        unsafe { p.runq.drain(|gp| globrunqput(&mut g, gp.as_ptr())) };
        // SAFETY: m's thread, holding pp.
        unsafe { releasep(m) };
        p.status.store(P_DEAD, Ordering::Release);
    }
    // Its timers go to P0, which is always in service (GOMAXPROCS >= 1).
    timer::move_all(p, SCHED.allp[0].load(Ordering::Acquire));
    if m.spinning.load(Ordering::Relaxed) {
        m.spinning.store(false, Ordering::Relaxed);
        SCHED.nmspinning.fetch_sub(1, Ordering::SeqCst);
    }
    wakep();
    // SAFETY: m's thread, no P, not spinning.
    unsafe { stopm(m) };
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_order_visits_every_p_once() {
        for n in 1..=17u32 {
            for r in [0u64, 1, 7, 0xdead_beef_1234_5678, u64::MAX] {
                let mut seen = vec![false; n as usize];
                for pos in StealOrder::new(n, r) {
                    assert!(!seen[pos as usize]);
                    seen[pos as usize] = true;
                }
                assert!(seen.iter().all(|&s| s));
            }
        }
    }
}
