//! Signals as channels (Go's `os/signal`: `Notify`, `Stop`): `gmp_signal_notify(chan,
//! sigs, n)` relays each of the `n` signals the process receives to the channel, as an
//! `int`.
//!
//! - The handler, on whatever thread the kernel picks, only marks the signal pending
//!   (`PENDING`) and writes a byte to a pipe: async-signal-safe, errno left as found.
//! - One forwarder thread, started by the first `notify`, reads the pipe and sends each
//!   pending signal to every channel registered for it without waiting (Go's "package
//!   signal will not block sending to c"): a full channel misses the signal, a closed one
//!   too. Signals that arrive together before the forwarder runs are delivered once, as
//!   Go coalesces them.
//! - Registrations hold a handle of their channel. `stop` removes the channel from every
//!   signal under the registry's lock, which the forwarder holds while it sends: once
//!   `stop` returns the channel receives nothing more (Go's guarantee). A signal nobody
//!   is registered for any more gets back the action it had before the first `notify`
//!   (Go restores the default; a C program may have had its own handler, or the runtime's
//!   SIGQUIT dump).
//! - The forwarder is not one of the runtime's registered threads (rt/threads.rs): the
//!   deadlock detector cannot see into it and so stays quiet, as Go's does for a program
//!   that waits for a signal on a channel.
//!
//! Refused (-EINVAL), as the runtime's or as faults Go never relays: SIGURG (preemption),
//! SIGKILL and SIGSTOP (not catchable), SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP and SIGSYS
//! (synchronous faults), and glibc's two internal real-time signals. An empty set is refused
//! too, where Go's `Notify` without signals relays all of them: a C caller names them.

use core::ffi::c_int;
use core::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Mutex;

use crate::chan::hchan::{Chan, Mode};

/// Signals 1..=64.
const NSIG: usize = 65;

/// A signal arrived and is not yet forwarded.
static PENDING: [AtomicBool; NSIG] = [const { AtomicBool::new(false) }; NSIG];
/// The pipe's write end (the handler's) and read end (the forwarder's); -1 before the
/// first `notify`.
static PIPE_W: AtomicI32 = AtomicI32::new(-1);
static PIPE_R: AtomicI32 = AtomicI32::new(-1);

struct Registry {
    /// Channels and the signals each is registered for (`bit`).
    chans: Vec<(usize, u64)>,
    /// Signals our handler is installed for, and what each had before.
    installed: u64,
    old: Vec<(c_int, libc::sigaction)>,
}

// SAFETY: the channel pointers are handles this registry owns; `sigaction` is plain data.
unsafe impl Send for Registry {}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    chans: Vec::new(),
    installed: 0,
    old: Vec::new(),
});

/// Signal `sig`'s bit in a mask (signals 1..=64 in bits 0..=63).
fn bit(sig: c_int) -> u64 {
    1 << (sig - 1)
}

/// Whether `sig` may be relayed (see the module doc).
fn allowed(sig: c_int) -> bool {
    let (rtmin, rtmax) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    (1..NSIG as c_int).contains(&sig)
        && !matches!(
            sig,
            libc::SIGURG
                | libc::SIGKILL
                | libc::SIGSTOP
                | libc::SIGSEGV
                | libc::SIGBUS
                | libc::SIGFPE
                | libc::SIGILL
                | libc::SIGTRAP
                | libc::SIGSYS
        )
        && (sig < 32 || (rtmin..=rtmax).contains(&sig))
}

/// The signals `sigs` as a bit mask; Err(EINVAL) if one is refused or there are none.
pub fn mask_of(sigs: &[c_int]) -> Result<u64, i32> {
    let mut mask = 0u64;
    for &sig in sigs {
        if !allowed(sig) {
            return Err(libc::EINVAL);
        }
        mask |= bit(sig);
    }
    if mask == 0 {
        return Err(libc::EINVAL);
    }
    Ok(mask)
}

extern "C" fn on_signal(sig: c_int) {
    // SAFETY: errno is this thread's; the handler leaves it as it found it.
    let saved = unsafe { *libc::__errno_location() };
    if (1..NSIG as c_int).contains(&sig) {
        PENDING[sig as usize].store(true, Ordering::Release);
        let b = 0u8;
        // SAFETY: a raw write(2) of one byte from the stack to our pipe (async-signal-safe;
        // a full pipe already holds a wake-up, and EAGAIN is fine).
        unsafe {
            libc::syscall(
                libc::SYS_write,
                PIPE_W.load(Ordering::Acquire),
                &b as *const u8,
                1usize,
            )
        };
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved };
}

extern "C" fn forwarder(_: *mut libc::c_void) -> *mut libc::c_void {
    let fd = PIPE_R.load(Ordering::Acquire);
    let mut buf = [0u8; 64];
    loop {
        // SAFETY: libc's read (not the interposer's: the runtime never calls its own hooks)
        // into a stack buffer, from our pipe.
        let n = unsafe { crate::sys::real::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 && crate::sys::errno() != libc::EINTR {
            crate::rt::throw("signal forwarder: read from its pipe failed");
        }
        let reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        for (sig, pending) in PENDING.iter().enumerate().skip(1) {
            if !pending.swap(false, Ordering::Acquire) {
                continue;
            }
            let v = sig as c_int;
            for &(c, mask) in &reg.chans {
                if mask & bit(sig as c_int) != 0 {
                    // SAFETY: the registry holds a handle of `c`; `v` lives across the
                    // call, and a try-send never waits (a full or closed channel drops
                    // the signal: the module doc).
                    let _ = unsafe {
                        (*(c as *const Chan)).send((&v as *const c_int).cast(), Mode::Try)
                    };
                }
            }
        }
    }
}

/// Starts the pipe and the forwarder (once).
fn start() -> Result<(), i32> {
    static STARTED: std::sync::Once = std::sync::Once::new();
    let mut err = 0;
    STARTED.call_once(|| {
        let mut fds = [0; 2];
        // SAFETY: pipe2 into a valid array.
        if unsafe { crate::sys::real::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) }
            != 0
        {
            err = crate::sys::errno();
            return;
        }
        // The forwarder blocks in its read: only the handler's end stays non-blocking.
        // SAFETY: fcntl on the fd just made.
        unsafe { crate::sys::real::fcntl(fds[0], libc::F_SETFL, 0) };
        PIPE_R.store(fds[0], Ordering::Release);
        PIPE_W.store(fds[1], Ordering::Release);
        crate::sys::spawn_detached(
            "signal forwarder",
            64 * 1024,
            forwarder,
            core::ptr::null_mut(),
        );
    });
    if err != 0 || PIPE_W.load(Ordering::Acquire) < 0 {
        return Err(if err != 0 { err } else { libc::EAGAIN });
    }
    Ok(())
}

/// `gmp_signal_notify`: relays the signals of `mask` to `c` (in addition to those it is
/// registered for already, as Go's repeated `Notify`).
///
/// # Safety
/// `c` is a live channel of `int` elements whose handle the caller holds.
pub unsafe fn notify(c: *mut Chan, mask: u64) -> Result<(), i32> {
    // SAFETY: caller contract.
    let ch = unsafe { &*c };
    if ch.elem_size() != core::mem::size_of::<c_int>() {
        return Err(libc::EINVAL);
    }
    start()?;
    let mut reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    // Our handler for the signals not yet ours; what each had is kept for `stop`.
    for sig in 1..NSIG as c_int {
        if mask & bit(sig) == 0 || reg.installed & bit(sig) != 0 {
            continue;
        }
        // SAFETY: sigaction with valid structs; the handler is async-signal-safe.
        unsafe {
            let mut act: libc::sigaction = core::mem::zeroed();
            act.sa_sigaction = on_signal as *const () as usize;
            act.sa_flags = libc::SA_RESTART | libc::SA_ONSTACK;
            libc::sigemptyset(&mut act.sa_mask);
            let mut old: libc::sigaction = core::mem::zeroed();
            if libc::sigaction(sig, &act, &mut old) != 0 {
                return Err(crate::sys::errno());
            }
            reg.old.push((sig, old));
        }
        reg.installed |= bit(sig);
    }
    match reg.chans.iter_mut().find(|(p, _)| *p == c as usize) {
        Some((_, m)) => *m |= mask,
        None => {
            ch.retain();
            reg.chans.push((c as usize, mask));
        }
    }
    Ok(())
}

/// `gmp_signal_stop`: `c` receives no more signals once this returns; the signals nobody
/// is registered for any more get their earlier action back. False if `c` was not
/// registered.
///
/// # Safety
/// `c` is a live channel whose handle the caller holds.
pub unsafe fn stop(c: *mut Chan) -> bool {
    let mut reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    let Some(i) = reg.chans.iter().position(|(p, _)| *p == c as usize) else {
        return false;
    };
    reg.chans.swap_remove(i);
    let wanted = reg.chans.iter().fold(0u64, |a, &(_, m)| a | m);
    let Registry { installed, old, .. } = &mut *reg;
    old.retain(|(sig, act)| {
        if wanted & bit(*sig) != 0 {
            return true;
        }
        // SAFETY: restores the action sigaction gave us for this signal.
        unsafe { libc::sigaction(*sig, act, core::ptr::null_mut()) };
        *installed &= !bit(*sig);
        PENDING[*sig as usize].store(false, Ordering::Relaxed);
        false
    });
    drop(reg);
    // SAFETY: the registry's handle, given back now that nothing will send on it.
    unsafe { Chan::release(c) };
    true
}
