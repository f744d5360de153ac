//! The spinning-M protocol: becoming, stopping and resetting a spinning M (Go's
//! `resetspinning`), and the look at every source of work that a giving-up spinner makes.
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

use core::sync::atomic::Ordering;

use super::ready::*;
use super::*;

/// Marks `m` spinning (it holds a P and looks for work).
pub(super) fn become_spinning(m: &M) {
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
pub(super) fn stop_spinning(m: &M) {
    m.spinning.store(false, Ordering::Relaxed);
    if SCHED.nmspinning.fetch_sub(1, Ordering::SeqCst) <= 0 {
        throw("findrunnable: negative nmspinning");
    }
}

/// A spinning M found work: stop spinning, and since it may have been the only one looking,
/// wake another M to keep looking (Go's resetspinning).
pub(super) fn resetspinning(m: &M) {
    stop_spinning(m);
    wakep();
}

/// `resetspinning` for an M that found work while spinning for a foreign thread
/// (`spin_for_foreign`): it wakes a successor only if there is anything to look for. Go's
/// unconditional wake-up would start an M per message that C main hands over one at a
/// time, which finds nothing and sleeps again, and every round trip of a ping-pong from C
/// main would pay that futex wake-up (`scripts/ab.sh -p 2 -a "-shape 1" pingpong`).
/// Work submitted while we spun did
/// not wake anyone (its submitter saw nmspinning > 0): our look after the SeqCst
/// decrement sees it (the StoreLoad pairing of find_runnable's step 6, with its SeqCst
/// fence for the Acquire loads of the Ps' queues, which the C++ model does not order
/// after an RMW of another word; spinning_loom.rs, `resetspinning_no_lost_wakeup`). Work
/// submitted after the decrement wakes an M through its own wakep.
pub(super) fn resetspinning_foreign(m: &M) {
    stop_spinning(m);
    core::sync::atomic::fence(Ordering::SeqCst);
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
/// goroutines (`scripts/ab.sh -p 2 -a "-shape 1" tcp_rtt`). The caller makes a SeqCst
/// fence after its SeqCst decrement of `nmspinning`.
pub(super) fn work_visible() -> bool {
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
