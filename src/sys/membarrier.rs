//! The asymmetric fence pair behind [`Lock::unlock`](super::Lock::unlock) ("The asymmetric unlock" there):
//! `membarrier(2)`'s private expedited barrier on the rare side, a compiler barrier on the
//! hot one.

use core::sync::atomic::{AtomicBool, Ordering};

pub(super) const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
pub(super) const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

/// How long a sleeper waits before it looks at the lock again when the barrier is
/// refused ([`heavy`]).
pub const REFUSED_POLL: core::time::Duration = core::time::Duration::from_millis(1);

/// Whether every `Lock` runs the asymmetric protocol. Decided once, when the library is
/// loaded (`init`), before any thread can hold a lock; never changes after. Read by
/// every unlock, so on a cache line of its own: the linker put it beside
/// `FOREIGN_ACTS`, which a foreign thread bumps on every spawn and send.
pub(super) static ON: super::FlagLine = super::FlagLine(AtomicBool::new(false));

/// Runs `init` when the library is loaded (before `main` for a program linked with it
/// or preloading it; at `dlopen` otherwise), while no runtime thread exists.
#[used]
#[unsafe(link_section = ".init_array")]
static INIT_AT_LOAD: extern "C" fn() = init;

/// Registers the process for private expedited barriers and turns the asymmetric
/// unlock on, unless the kernel refuses (before Linux 4.14, a seccomp filter, valgrind)
/// or `GMP_DEBUG` has `asymlock=0`; the locks then keep Go's exchange.
extern "C" fn init() {
    #[cfg(debug_assertions)]
    if super::dbgvars::get(super::dbgvars::Var::Lockspin) == 0 {
        super::LOCK_SPIN_OFF.store(true, Ordering::Relaxed);
    }
    if super::dbgvars::get(super::dbgvars::Var::Asymlock) == 0 {
        return;
    }
    // SAFETY: membarrier takes no pointers; registration affects only this process.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) };
    if r == 0 {
        ON.0.store(true, Ordering::Relaxed);
    }
}

/// Whether the asymmetric pair is in use (decided at load, never changes after): the
/// light sides may then be compiler barriers, and every heavy side must be made.
#[inline(always)]
pub fn on() -> bool {
    ON.0.load(Ordering::Relaxed)
}

/// The heavy side: when it returns true, every thread of the process that was running
/// has passed a full memory barrier, so a store another thread made before its light
/// side is visible here, or that thread's load after its light side sees what we
/// stored before this call. False if the kernel refused it after registration (a
/// seccomp filter installed later): the caller must not rely on the pair, and a
/// sleeping locker then re-checks every `REFUSED_POLL` (said once on stderr).
pub fn heavy() -> bool {
    // SAFETY: as in `init`.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, CMD_PRIVATE_EXPEDITED, 0, 0) };
    if r == 0 {
        return true;
    }
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        super::write_stderr(
            b"gmp: membarrier(2) refused after registration (a seccomp filter?): \
              contended runtime locks now re-check every millisecond\n",
        );
    }
    false
}
