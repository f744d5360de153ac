//! Where an M looks for work, in the order `find_runnable` looks (the first steps are
//! polled by `spin_for_foreign` too): a P's due timers (Go's `checkTimers`), its local run
//! queue, the global one, the poller without blocking, and the other Ps' queues
//! (`stealWork`, in a random order).

use core::sync::atomic::Ordering;

use super::ready::*;
use super::*;

/// `find_runnable`'s first steps, also polled by `spin_for_foreign`: runs `p`'s due timers
/// (they may make goroutines runnable on it), then takes a goroutine from its local run
/// queue, else from the global one or `m`'s preempted goroutines
/// (`globrunqget_or_preempted`).
///
/// # Safety
/// `m` owns `p`.
#[inline(always)]
pub(super) unsafe fn timers_and_queues(m: ThisM<'_>, p: &P) -> Option<(*mut G, bool)> {
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
pub(super) unsafe fn poll_network(p: &P) -> bool {
    if !epoll::inited() || !netpoll::any_waiters() || netpoll::BLOCKED.load(Ordering::SeqCst) != 0 {
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
pub(super) fn check_timers(p: &P) {
    let next = p.timers.timer0_when.load(Ordering::Relaxed);
    if next != 0 {
        let now = crate::sys::nanotime();
        if now >= next {
            timer::run_due(p, now);
        }
    }
}

/// Steals half of a random other P's run queue: four passes over all Ps in a random order,
/// taking a victim's `runnext` only on the last pass (it is about to run there anyway).
///
/// # Safety
/// `m` owns `p` and is spinning.
pub(super) unsafe fn steal_work(m: ThisM<'_>, p: &P) -> Option<*mut G> {
    const STEAL_TRIES: usize = 4;
    let n = SCHED.gomaxprocs.load(Ordering::Relaxed) as u32;
    if n <= 1 {
        return None;
    }
    for i in 0..STEAL_TRIES {
        let steal_runnext = i == STEAL_TRIES - 1;
        let r = fastrand(m);
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
                if traceevent::on() {
                    traceevent::emit(traceevent::kind::STEAL, None, pos as u64, count as u64);
                }
                return Some(gp.as_ptr());
            }
        }
    }
    None
}

/// Visits 0..n in a random order: a random start and a random stride coprime with n.
pub(super) struct StealOrder {
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

pub(super) fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// xorshift64* on the M's own state.
pub(super) fn fastrand(m: ThisM<'_>) -> u64 {
    // SAFETY: `m` is this thread's M, the owner of `fastrand`.
    let mut x = unsafe { m.fastrand.get() };
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    // SAFETY: as above.
    unsafe { m.fastrand.set(x) };
    x.wrapping_mul(0x2545_F491_4F6C_DD1D)
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
