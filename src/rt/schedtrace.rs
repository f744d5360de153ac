//! Scheduler tracing in Go's format (`GMP_DEBUG=schedtrace=MS[,scheddetail=1]`, Go's
//! `GODEBUG` equivalents) and the statistics behind `gmp_stats`.
//!
//! The trace thread reads scheduler state without stopping anything: every field it reads
//! is atomic, so a line is a slightly smeared snapshot, exactly as Go's is.

use core::fmt::Write as _;
use core::sync::atomic::Ordering;

use super::*;

/// Starts the trace thread.
pub(super) fn start(cfg: super::config::TraceConfig) {
    let r = std::thread::Builder::new()
        .name("gmp-schedtrace".into())
        .spawn(move || {
            super::threads::register();
            let mut next = crate::sys::nanotime();
            loop {
                crate::sys::write_stderr(schedtrace(cfg.detail).as_bytes());
                next += cfg.interval_ms as i64 * 1_000_000;
                let left = next - crate::sys::nanotime();
                if left > 0 {
                    std::thread::sleep(core::time::Duration::from_nanos(left as u64));
                }
            }
        });
    if r.is_err() {
        crate::sys::write_stderr(b"gmp: could not start the schedtrace thread\n");
    }
}

/// Iterates over the Ps in service (the first GOMAXPROCS).
fn procs() -> impl Iterator<Item = &'static P> {
    let n = SCHED.gomaxprocs.load(Ordering::Acquire) as usize;
    (0..n).filter_map(|i| {
        let pp = SCHED.allp[i].load(Ordering::Acquire);
        // SAFETY: Ps are never freed.
        (!pp.is_null()).then(|| unsafe { &*pp })
    })
}

fn all_ms() -> impl Iterator<Item = &'static M> {
    let mut cur = SCHED.allm.load(Ordering::Acquire);
    core::iter::from_fn(move || {
        if cur.is_null() {
            return None;
        }
        // SAFETY: Ms are never freed; alllink never changes once published.
        let m = unsafe { &*cur };
        cur = m.alllink.load(Ordering::Acquire);
        Some(m)
    })
}

fn all_gs() -> impl Iterator<Item = &'static G> {
    super::proc::all_gs()
}

fn m_id(m: *mut M) -> String {
    if m.is_null() {
        "nil".into()
    } else if m == LOCK_AT_START {
        // Started GMP_GO_LOCKED, not run yet.
        "start".into()
    } else {
        // SAFETY: Ms are never freed.
        unsafe { (*m).id.to_string() }
    }
}

fn g_id(g: *mut G) -> String {
    // SAFETY: Gs are never freed.
    if g.is_null() {
        "nil".into()
    } else {
        unsafe { (*g).goid().to_string() }
    }
}

/// One schedtrace record, Go's format, ending in a newline.
pub fn schedtrace(detail: bool) -> String {
    let ms = (crate::sys::nanotime() - SCHED.start_ns.load(Ordering::Relaxed)) / 1_000_000;
    let mut s = String::with_capacity(256);
    let _ = write!(
        s,
        "SCHED {}ms: gomaxprocs={} idleprocs={} threads={} spinningthreads={} needspinning={} idlethreads={} runqueue={}",
        ms,
        SCHED.gomaxprocs.load(Ordering::Relaxed),
        SCHED.npidle.load(Ordering::Relaxed),
        SCHED.mcount.load(Ordering::Relaxed),
        SCHED.nmspinning.load(Ordering::Relaxed),
        SCHED.needspinning.load(Ordering::Relaxed),
        SCHED.nmidle.load(Ordering::Relaxed),
        SCHED.runqsize.load(Ordering::Relaxed),
    );
    if !detail {
        s.push_str(" [ ");
        for p in procs() {
            let _ = write!(s, "{} ", p.runq.len());
        }
        s.push_str("] schedticks=[ ");
        for p in procs() {
            let _ = write!(s, "{} ", p.schedtick.load(Ordering::Relaxed));
        }
        s.push_str("]\n");
        return s;
    }
    s.push_str(" gcwaiting=false nmidlelocked=0 stopwait=0 sysmonwait=false\n");
    for p in procs() {
        let _ = writeln!(
            s,
            "  P{}: status={} schedtick={} syscalltick={} m={} runqsize={} gfreecnt={} timerslen={}",
            p.id,
            p.status.load(Ordering::Relaxed),
            p.schedtick.load(Ordering::Relaxed),
            p.syscalltick.load(Ordering::Relaxed),
            m_id(p.m.load(Ordering::Relaxed)),
            p.runq.len(),
            p.gfreecnt.load(Ordering::Relaxed),
            p.timers.len.load(Ordering::Relaxed),
        );
    }
    for m in all_ms() {
        if m.dead.load(Ordering::Relaxed) {
            continue;
        }
        let pp = m.p.load(Ordering::Relaxed);
        // SAFETY: Ps are never freed.
        let pid = if pp.is_null() {
            "nil".to_string()
        } else {
            unsafe { (*pp).id.to_string() }
        };
        let _ = writeln!(
            s,
            "  M{}: p={} curg={} mallocing=0 throwing=0 preemptoff= locks=0 dying=0 spinning={} blocked={} lockedg={}",
            m.id,
            pid,
            g_id(m.curg.load(Ordering::Relaxed)),
            m.spinning.load(Ordering::Relaxed),
            m.blocked.load(Ordering::Relaxed),
            g_id(m.lockedg.load(Ordering::Relaxed)),
        );
    }
    for g in all_gs() {
        let st = g.status.load(Ordering::Relaxed);
        if st == G_DEAD {
            continue;
        }
        let _ = writeln!(
            s,
            "  G{}: status={}({}) m={} lockedm={}",
            g.goid(),
            st,
            g.waitreason().as_str(),
            m_id(g.m.load(Ordering::Relaxed)),
            m_id(g.lockedm.load(Ordering::Relaxed)),
        );
    }
    s
}

/// A snapshot of the scheduler's counters (`gmp_stats`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub gomaxprocs: i32,
    pub idleprocs: i32,
    pub threads: i32,
    pub spinningthreads: i32,
    pub needspinning: i32,
    pub idlethreads: i32,
    pub runqueue: i64,
    pub goroutines: i64,
    pub steals: u64,
    pub spawned: u64,
    pub schedticks: u64,
    pub allg: u64,
    pub preempt_requests: u64,
    pub netpoll_polls: u64,
    pub netpoll_readied: u64,
    pub preempt_signals: u64,
    pub async_preempts: u64,
    pub async_refused_stale: u64,
    pub async_refused_lib: u64,
    pub async_refused_stack: u64,
    pub async_skipped_blocked: u64,
    pub unseen_signals: u64,
    pub unseen_wrapped: u64,
    pub deferred_closes: u64,
    pub stack_samples: u64,
    pub stack_high_water: u64,
}

/// Fills `Stats`, and the local run queue length of each P in service into `runq_lens`
/// (as many as fit); returns how many lengths were written. For a started runtime
/// (`rt::init`): before, every figure reads zero.
pub fn stats(out: &mut Stats, runq_lens: &mut [u32]) -> usize {
    let (stack_samples, stack_high_water, _) = stackhwm::totals();
    *out = Stats {
        gomaxprocs: SCHED.gomaxprocs.load(Ordering::Relaxed),
        idleprocs: SCHED.npidle.load(Ordering::Relaxed),
        threads: SCHED.mcount.load(Ordering::Relaxed),
        spinningthreads: SCHED.nmspinning.load(Ordering::Relaxed),
        needspinning: SCHED.needspinning.load(Ordering::Relaxed) as i32,
        idlethreads: SCHED.nmidle.load(Ordering::Relaxed),
        runqueue: SCHED.runqsize.load(Ordering::Relaxed) as i64,
        goroutines: goroutine_count(),
        steals: SCHED.steals.load(Ordering::Relaxed),
        spawned: spawned_count(),
        schedticks: procs()
            .map(|p| p.schedtick.load(Ordering::Relaxed) as u64)
            .sum(),
        allg: super::proc::allglen(),
        preempt_requests: SCHED.preempt_requests.load(Ordering::Relaxed),
        netpoll_polls: netpoll::POLLS.load(Ordering::Relaxed),
        netpoll_readied: netpoll::READIED.load(Ordering::Relaxed),
        preempt_signals: preempt::SIGNALS.load(Ordering::Relaxed),
        async_preempts: preempt::DONE.load(Ordering::Relaxed),
        async_refused_stale: preempt::REFUSED_STALE.load(Ordering::Relaxed),
        async_refused_lib: preempt::REFUSED_LIB.load(Ordering::Relaxed),
        async_refused_stack: preempt::REFUSED_STACK.load(Ordering::Relaxed),
        async_skipped_blocked: preempt::SKIPPED_BLOCKED.load(Ordering::Relaxed),
        unseen_signals: super::unseen::LOOKS_SIGNALLED.load(Ordering::Relaxed),
        unseen_wrapped: super::unseen::WRAPPED.load(Ordering::Relaxed),
        deferred_closes: netpoll::DEFERRED_CLOSES.load(Ordering::Relaxed),
        stack_samples,
        stack_high_water: stack_high_water as u64,
    };
    let mut n = 0;
    for (slot, p) in runq_lens.iter_mut().zip(procs()) {
        *slot = p.runq.len();
        n += 1;
    }
    n
}
