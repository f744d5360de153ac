//! The submit path: putting a runnable goroutine where an M will find it (Go's `runqput`,
//! `ready`, `injectglist`, `globrunqput`/`globrunqget`) and waking an M for it (`wakep`).
//! Goroutines call these directly: they never switch.

use core::ptr::null_mut;
use core::sync::atomic::Ordering;

use super::runq::RUNQ_SIZE;
use super::*;
use super::{idle::*, newm::*};

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
pub(super) unsafe fn globrunqget(g: &mut SchedGuard, pp: &P, max: i32) -> Option<*mut G> {
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
/// `m` owns `p`; `p`'s local queue has room as `globrunqget`
/// requires.
pub(super) unsafe fn globrunqget_or_preempted(m: ThisM<'_>, p: &P, max: i32) -> Option<*mut G> {
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
pub(super) unsafe fn runqput(pp: &P, gp: *mut G, next: bool) -> bool {
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
    let spilled = unsafe { runqput(&*pp, gp, next) };
    wakep();
    spilled
}

/// `ready_put` for a thread that holds no P (`m` is its M, or null for a foreign thread),
/// out of line: the global queue, or a spinning M's mailbox.
#[inline(never)]
pub(super) fn ready_put_no_p(gp: *mut G, m: *mut M) -> bool {
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
    if m.is_null() && !threads::on_runtime_thread() && crate::sys::foreign_quick() {
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
        sysmonwake::wake_if_sleeping();
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
pub(super) unsafe fn injectglist(gs: &[*mut G]) {
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
            if hookflags::any() {
                hooks::readied(gp);
            }
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
            sysmonwake::wake_if_sleeping();
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
        unsafe { runqput(&*pp, gp, i == 0) };
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
pub(super) fn wakep_slow() {
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

/// The spinning M's mailbox (`spin_for_foreign`): null while no M spins for a foreign
/// thread, `MAILBOX_OPEN` while one does, else the goroutine a foreign thread handed to
/// it (`ready_put`). Transitions: null → OPEN by the CAS with which an M becomes the
/// spinner (`open_mailbox`: at most one at a time), X → null by that spinner's closing
/// swap, OPEN → G by a foreign thread's CAS, at most once per opening. So exactly one of
/// them owns a handed goroutine: the CAS puts it in only while the spinner has not closed
/// the box, and the spinner's closing swap returns it (then runs it or queues it) if it
/// did not take it while polling. Go has no such box: its foreign threads (cgo
/// callbacks) run on an M with a P of their own.
pub(super) static FOREIGN_MAILBOX: AtomicPtr<G> = AtomicPtr::new(null_mut());

/// `FOREIGN_MAILBOX` open and empty: an odd address, never a G's (Gs are 128-byte aligned).
pub(super) const MAILBOX_OPEN: *mut G = core::ptr::without_provenance_mut(1);

/// How long a foreign thread in a quick exchange waits for an M to take what it put on
/// the global queue before `wakep` (`ready_put`).
pub(super) const HANDOVER_NS: i64 = 2_000;

/// Whether the global queue emptied within `HANDOVER_NS` (an M took the work).
pub(super) fn handed_over() -> bool {
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
