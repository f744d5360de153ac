//! The SIGSEGV/SIGBUS handler that turns a fault in a guard gap into
//! "gmp: goroutine N: stack overflow", chaining to the program's handler otherwise.

use super::*;

/// The hook asked about every SIGSEGV/SIGBUS: an [`OverflowHook`] stored as usize
/// (0 = none yet). Release/acquire: the handler sees a fully published pointer.
pub(super) static HOOK: AtomicUsize = AtomicUsize::new(0);

/// The handlers installed before ours, for SIGSEGV and SIGBUS, to chain to. Set once before
/// our handler is installed; only read afterwards (OnceLock::get is a single atomic load,
/// async-signal-safe).
pub(super) static PREVIOUS: OnceLock<[libc::sigaction; 2]> = OnceLock::new();

/// The overflow handler's question to the scheduler: the id of the goroutine running on
/// this thread and the `lo` of its stack, or None when no goroutine runs here.
pub type OverflowHook = fn() -> Option<(u64, usize)>;

/// Installs (once, thread-safe) a SIGSEGV/SIGBUS handler with SA_ONSTACK | SA_SIGINFO that
/// calls `hook()`. If it names a goroutine whose stack the fault overflowed (the fault
/// address and the interrupted stack pointer, by [`Stack::overflowed`]), the handler writes
/// "gmp: goroutine {goid}: stack overflow\n" to fd 2 and aborts; otherwise it chains to the
/// handler installed before (calls it if it was a function, else restores SIG_DFL and
/// returns so that the fault re-raises with the default action).
///
/// A later call replaces the hook; the signal handler itself is installed once. The hook
/// runs in a signal handler, on the thread's alternate stack (see [`ensure_altstack`]): it
/// must be async-signal-safe (no locks, no allocation).
pub fn install_overflow_handler(hook: OverflowHook) {
    HOOK.store(hook as usize, Ordering::Release);
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let mut previous = [empty_sigaction(), empty_sigaction()];
        for (sig, old) in [libc::SIGSEGV, libc::SIGBUS]
            .into_iter()
            .zip(previous.iter_mut())
        {
            // SAFETY: queries the current action into a valid sigaction.
            unsafe { libc::sigaction(sig, std::ptr::null(), old) };
        }
        // Only this closure sets PREVIOUS, and it runs once.
        let _ = PREVIOUS.set(previous);
        let mut act = empty_sigaction();
        act.sa_sigaction = on_fault as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: sa_mask is a valid sigset_t owned by `act`.
        unsafe { libc::sigemptyset(&mut act.sa_mask) };
        for sig in [libc::SIGSEGV, libc::SIGBUS] {
            // SAFETY: installs a valid handler; `on_fault` is async-signal-safe.
            unsafe { libc::sigaction(sig, &act, std::ptr::null_mut()) };
        }
    });
}

pub(super) fn empty_sigaction() -> libc::sigaction {
    // SAFETY: sigaction is plain old data for which all-zeroes is valid (SIG_DFL, no flags,
    // empty mask).
    unsafe { std::mem::zeroed() }
}

/// The SIGSEGV/SIGBUS handler (see [`install_overflow_handler`]).
extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let hook = HOOK.load(Ordering::Acquire);
    if hook != 0 {
        // SAFETY: HOOK only ever holds an `OverflowHook` stored by install_overflow_handler.
        let hook: OverflowHook = unsafe { std::mem::transmute(hook) };
        if let Some((goid, lo)) = hook()
            // SAFETY: the kernel passes a valid ucontext for an SA_SIGINFO handler.
            && overflowed(lo, addr, unsafe { interrupted_sp(ctx) })
        {
            report_overflow(goid);
        }
    }
    let Some(previous) = PREVIOUS.get() else {
        return;
    };
    let old = &previous[if sig == libc::SIGSEGV { 0 } else { 1 }];
    let h = old.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // Re-executing the faulting instruction raises the signal again, now with the
        // default action (a core dump).
        let dfl = empty_sigaction();
        // SAFETY: installs SIG_DFL; sigaction is async-signal-safe.
        unsafe { libc::sigaction(sig, &dfl, std::ptr::null_mut()) };
    } else if old.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous owner installed this as an SA_SIGINFO handler.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the previous owner installed this as a plain handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

/// The stack pointer of the code the signal interrupted.
///
/// # Safety
/// `ctx` is the `ucontext_t` the kernel passed to an SA_SIGINFO handler.
pub(super) unsafe fn interrupted_sp(ctx: *mut libc::c_void) -> usize {
    let uc = ctx as *const libc::ucontext_t;
    // SAFETY: caller contract.
    #[cfg(target_arch = "x86_64")]
    let sp = unsafe { (*uc).uc_mcontext.gregs[libc::REG_RSP as usize] as usize };
    // SAFETY: caller contract.
    #[cfg(target_arch = "aarch64")]
    let sp = unsafe { (*uc).uc_mcontext.sp as usize };
    sp
}

/// Writes "gmp: goroutine {goid}: stack overflow\n" to fd 2 and aborts. Async-signal-safe:
/// the message is formatted without allocating into a stack buffer, written with write(2).
pub(super) fn report_overflow(goid: u64) -> ! {
    let mut buf = [0u8; 64];
    let msg = crate::sys::fmt_msg(
        &mut buf,
        &[
            b"gmp: goroutine ",
            &crate::sys::fmt_u64(goid),
            b": stack overflow\n",
        ],
    );
    // SAFETY: write(2) from a valid buffer, then abort(3); both async-signal-safe.
    unsafe {
        crate::sys::real::write(2, msg.as_ptr().cast(), msg.len());
        libc::abort()
    }
}
