//! Start-up (Go's `schedinit`): the scheduler's state, the first Ps, sysmon, and the
//! stack-overflow handler's view of the running goroutine.

use core::sync::atomic::Ordering;

use super::procresize::*;
use super::*;

static INIT: std::sync::Once = std::sync::Once::new();

/// Ensures the runtime is started (idempotent, thread-safe).
pub fn init() {
    init_once();
}

/// Changes GOMAXPROCS to `n` (1..=MAX_PROCS), starting the runtime first if need be (Go's
/// `GOMAXPROCS`); returns the old value. See [`procresize`](super::procresize::procresize).
pub fn gomaxprocs(n: i32) -> i32 {
    init_once();
    procresize(n)
}

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
        mstart::init_exit_key();
        newm::set_mstart(mstart::mstart);
        // Spinning for a foreign thread's hand-off needs a CPU for each side.
        crate::sys::FOREIGN_SPIN.store(os_linux::num_cpu() >= 2, Ordering::Relaxed);
        asan::init();
        tsan::init();
        preempt::init();
        dump::init();
        checkdead::init();
        schedlat::init();
        {
            let mut g = lock_sched();
            grow_procs(&mut g, 0, cfg.maxprocs);
            SCHED.gomaxprocs.store(cfg.maxprocs, Ordering::SeqCst);
        }
        if let Some(t) = cfg.trace {
            schedtrace::start(t);
        }
        sysmon::start();
        trace::init();
        cpuprof::init();
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
