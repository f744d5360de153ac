//! The observers a switch may have to tell (AddressSanitizer, ThreadSanitizer, the
//! execution trace, the scheduling latency histogram): the scheduler's hot sites (every
//! switch, every wake-up, every spawn) test `hookflags::any()` — one load, one predicted
//! branch — and call the cold functions here only when some observer is on.

use super::*;

/// `execute`, on g0, right before the switch to `g` (its stack final).
#[cold]
#[inline(never)]
pub(crate) fn execute(m: &M, g: &G) {
    if schedlat::on() {
        schedlat::running(m, g);
    }
    if traceevent::on() {
        traceevent::go_start(g);
    }
    if asan::on() {
        asan::enter_goroutine(m, g);
    }
    if tsan::on() {
        tsan::enter_goroutine(m, g);
    }
}

/// On goroutine `g`, right before it switches to its M's stack (`exiting`: for good).
#[cold]
#[inline(never)]
pub(crate) fn leave(m: &M, g: &G, exiting: bool) {
    if asan::on() {
        asan::leave_goroutine(m, g, exiting);
    }
    if tsan::on() {
        if exiting {
            tsan::goroutine_exits(g);
        }
        tsan::leave_goroutine(m);
    }
}

/// On goroutine `gp`, right after it was switched back to (maybe on another M).
#[cold]
#[inline(never)]
pub(crate) fn resume(gp: *mut G) {
    if tsan::on() {
        // Whoever readied us released the G (goready).
        tsan::acquire(gp as usize);
    }
    if asan::on() {
        // SAFETY: we run on an M (we were resumed by execute); gp is us.
        unsafe {
            asan::on_goroutine(
                &*getm(),
                (*gp).ext_if_any().map_or(0, |e| e.asan_fake.get()) as *mut core::ffi::c_void,
            )
        };
    }
}

/// First thing a new goroutine does (`goentry`).
#[cold]
#[inline(never)]
pub(crate) fn started(gp: *mut G) {
    if asan::on() {
        // SAFETY: we run on an M (execute started us).
        asan::on_goroutine(unsafe { &*getm() }, core::ptr::null_mut());
    }
    if tsan::on() {
        // SAFETY: gp runs on this M; its stack is its own now.
        unsafe { tsan::goroutine_started(&*gp) };
    }
}

/// `after_switch`, on g0, right after goroutine `g` switched to it with `act`.
#[cold]
#[inline(never)]
pub(crate) fn after_switch(m: &M, g: &G, act: usize) {
    if schedlat::on() && matches!(act, action::GOSCHED | action::PREEMPT | action::LOCKMOVE) {
        schedlat::runnable(g);
    }
    if asan::on() {
        asan::back_on_g0(m);
    }
    if traceevent::on() {
        traceevent::go_stop(g, act);
    }
}

/// `goready`, before `gp` becomes runnable.
#[cold]
#[inline(never)]
pub(crate) fn ready(gp: *mut G) {
    if schedlat::on() {
        // SAFETY: Gs are never freed.
        schedlat::runnable(unsafe { &*gp });
    }
    if tsan::on() {
        tsan::release(gp as usize);
    }
    if traceevent::on() {
        // SAFETY: Gs are never freed.
        traceevent::emit(
            traceevent::kind::UNPARK,
            None,
            unsafe { (*gp).goid() },
            traceevent::cur_goid(),
        );
    }
}

/// A waiting goroutine made runnable other than by `goready` (the poller's readiness,
/// `injectglist`): the observers that time or count wake-ups.
#[cold]
#[inline(never)]
pub(crate) fn readied(gp: *mut G) {
    if schedlat::on() {
        // SAFETY: Gs are never freed.
        schedlat::runnable(unsafe { &*gp });
    }
}

/// `newproc`, before `gp` (goroutine `goid`, started by `parent`) is queued.
#[cold]
#[inline(never)]
pub(crate) fn spawn(gp: *mut G, goid: u64, parent: u64) {
    if schedlat::on() {
        // SAFETY: Gs are never freed.
        schedlat::runnable(unsafe { &*gp });
    }
    if traceevent::on() {
        traceevent::emit(traceevent::kind::SPAWN, None, goid, parent);
    }
    if tsan::on() {
        tsan::release(gp as usize);
    }
}
