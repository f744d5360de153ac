//! Blocking calls the hooks do not see: a goroutine asleep in the kernel in a call that
//! did not go through `entersyscall` (a pthread mutex or condition variable, a raw futex,
//! CPython's GIL, a read by a library loaded without the interposer) gives its P up, as a
//! goroutine in a hooked call does.
//!
//! Go never meets this case: its C code runs in `cgocall`, which is a syscall to the
//! scheduler. Here C code *is* the goroutine, and without this a goroutine waiting for a
//! lock would keep the only P from the goroutine holding it (a holder stopped by
//! preemption, or one whose P moved on during a hooked call): the process hangs.
//!
//! - **Sysmon looks** (`look`): a P in `P_RUNNING` whose goroutine has not changed for
//!   `LOOK_AFTER_NS`, when other work waits (Go's rule for retaking a P from a syscall),
//!   at most once per `LOOK_AFTER_NS` per P. It reads `/proc/self/task/<tid>/syscall`:
//!   the number, arguments, stack pointer and return address of the call the thread
//!   sleeps in. Calls whose restart is exact (`restartable`) are recorded in the M
//!   (`m.unseen`) and the M gets a SIGURG tagged `sigpreempt::MAGIC_UNSEEN` — if, after
//!   the reading, its goroutine is still RUNNING on its P: the thread may have entered a
//!   hooked call since sysmon found the P running (`runs_unseen`).
//! - **The M's handler decides** (`divert`, on the M's own thread, so it races with
//!   nobody for its P): the interrupted context must be that very call — the PC at the
//!   `syscall` instruction with the number in rax (the kernel rewound a restartable call:
//!   ERESTARTSYS under SA_RESTART), or just after it with -EINTR in rax (a call the
//!   kernel never restarts after a handler, on the `restartable` list only because
//!   re-entering it with the same arguments is exact: absolute deadlines or none), or
//!   just after it with a byte count short of the length in rax (a write, vectored or
//!   not, or a sendfile, to a pipe, stream socket or terminal, or a MSG_WAITALL receive
//!   from a stream socket, the signal cut short: the rest is moved on, from where it
//!   stopped, and the count returned is the whole) — with the same stack pointer and
//!   argument registers;
//!   the goroutine RUNNING on its P;
//!   the call not the runtime's own (`sigpreempt::runtime_call`: its futex waits are
//!   `sys::futex::wait`'s inline `syscall`, and std's, for its `Mutex` and `Once`, are
//!   libc's `syscall` wrapper called from libgmp). Then the handler points the context at `__gmp_async_syscall`
//!   with the return address just past the `syscall` instruction.
//! - **The trampoline makes the call seen** (`wrapped`, on the goroutine's stack in
//!   ordinary context, every register saved as for a preemption): `syscall::entersyscall`, the
//!   same system call with the same registers (a cut-short write's from where it
//!   stopped), `syscall::exitsyscall`, and the result in rax (plus the bytes already written).
//!   From sysmon's next round the P is in `P_SYSCALL` and `retake` hands it off; on
//!   return the goroutine gets a P back on this same thread (syscall.rs).
//!
//! Relative timeouts go on for the rest, never again in full. Sleeps with a `rem`
//! argument (glibc's `sleep` passes one) are re-entered for the time the kernel wrote
//! there; `select`, `pselect6` and `ppoll` for the rest the kernel wrote back into their
//! timeout. Those whose rest the kernel reports nowhere (`nanosleep` without `rem`, as
//! `usleep` makes it; `clock_nanosleep` likewise; `poll` with a timeout; FUTEX_WAIT with a
//! relative one) leave their deadline in the thread's restart block, which the kernel
//! keeps until the handler returns: the handler gives the P up and calls
//! `restart_syscall` itself (`resume`), and the trampoline only ends the syscall. Only
//! timeouts of `SHORTEST_SIGNALLED_NS` or more: a short one ends soon anyway, and may end
//! inside the window below.
//!
//! What it never does: signal a thread in a call whose restart would not be exact —
//! `epoll_wait` with a timeout (ended by any signal with EINTR, no restart block, no rest
//! reported), `recvmsg` with MSG_WAITALL and control data (the first part may have
//! filled its buffer), socket calls on sockets
//! with SO_RCVTIMEO/SO_SNDTIMEO, terminals in non-canonical mode (a read returns what it
//! has on a signal), regular files. Those keep their P until they return; the preemption signal
//! (preemptsig.rs) takes it when the thread is back in user code.
//!
//! The window: sysmon reads the call, checks it, prepares the signal, and reads the call
//! again; only the record's stores and the signal's own system call follow that second
//! reading. A thread that
//! leaves the call and sleeps in another, not on the list (a nanosleep after a write, the
//! next receive of a loop into another buffer), between the second reading and the
//! signal gets an EINTR or a short count libc would not have given it: `divert` refuses
//! the context, but that call has ended. The window is as long as sysmon's thread is kept
//! off a CPU there (by the kernel's scheduler, or by the host's under a hypervisor), so
//! it opens when there are more runnable threads than CPUs. No reading from user space
//! closes it: the signal is sent after the last look, whatever the look. Each signal
//! `divert` refuses other than for a call that ended by itself is counted (`MISSED`,
//! the metric `/gmp/sched/unseen/missed:events`); `preempt_soak` checks that every
//! damaged call is one of those (HACKING.md, known limits).
//!
//! The one ambiguity: a program signal that interrupts the same call in the same instant
//! as ours (both pending when the kernel leaves the call) ends in one EINTR, which
//! `divert` takes for ours and restarts. The program's handler has run; only the EINTR is
//! lost, for calls whose restart the kernel itself does not do (`poll(-1)`,
//! `epoll_wait(-1)`, a futex wait with an absolute deadline).

use core::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use super::*;

/// How long a P's goroutine must have run without a switch before sysmon looks whether
/// its thread sleeps in an unseen call; also the least time between two looks at one P.
pub(super) const LOOK_AFTER_NS: i64 = 1_000_000;

impl Seen {
    pub const fn new() -> Seen {
        Seen {
            nr: AtomicI64::new(-1),
            args: [const { AtomicU64::new(0) }; 6],
            sp: AtomicU64::new(0),
            pc: AtomicU64::new(0),
            how: AtomicU64::new(Restart::No as u64),
        }
    }

    pub fn clear(&self) {
        self.nr.store(-1, Ordering::Relaxed);
    }
}

impl Default for Seen {
    fn default() -> Self {
        Self::new()
    }
}

/// A call as `/proc/self/task/<tid>/syscall` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Call {
    pub nr: i64,
    pub args: [u64; 6],
    pub sp: u64,
    pub pc: u64,
}

/// Parses the file's text: "nr a0 .. a5 sp pc" (the number in decimal, the rest in hex)
/// for a thread asleep in a system call; "running", or "-1 sp pc" otherwise.
pub(super) fn parse(s: &[u8]) -> Option<Call> {
    let mut it = s
        .split(|&b| b == b' ' || b == b'\n')
        .filter(|w| !w.is_empty());
    let nr = core::str::from_utf8(it.next()?).ok()?.parse::<i64>().ok()?;
    if nr < 0 {
        return None;
    }
    let mut hex = || -> Option<u64> {
        let w = it.next()?;
        let w = w.strip_prefix(b"0x")?;
        u64::from_str_radix(core::str::from_utf8(w).ok()?, 16).ok()
    };
    let mut args = [0u64; 6];
    for a in &mut args {
        *a = hex()?;
    }
    let sp = hex()?;
    let pc = hex()?;
    Some(Call { nr, args, sp, pc })
}

/// Reads what thread `tid` sleeps in (None: running, not in a call, or no such file).
fn read_call(m: &M, tid: i32) -> Option<Call> {
    let mut buf = [0u8; 256];
    let n = taskfile::read_task_file(m, tid, taskfile::TaskFile::Syscall, &mut buf)?;
    parse(&buf[..n])
}

/// How a restartable call may come back from our signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Restart {
    /// Not at all: never signal a thread asleep in it.
    No,
    /// Only rewound by the kernel (ERESTARTSYS under SA_RESTART).
    Rewound,
    /// Rewound, or -EINTR that re-entering with the same arguments undoes exactly.
    AfterEintr,
    /// A relative sleep with a `rem`: -EINTR, after which the kernel has written the time
    /// left there; re-entered with `rem` as the request (`wrapped`).
    Remaining,
    /// A relative timeout whose rest the kernel reports nowhere (`nanosleep` without `rem`,
    /// as `usleep` makes it; `poll` with a timeout; FUTEX_WAIT with a relative one): -EINTR,
    /// after which the kernel keeps the absolute deadline in the thread's restart block
    /// until the handler returns (rt_sigreturn clears it). So the handler itself goes on
    /// with `restart_syscall`, which waits for exactly the rest (`resume`).
    Resume,
    /// A write, or a MSG_WAITALL stream receive: rewound when nothing moved, else cut
    /// short with the count in rax; going on from buf + count moves the rest as the
    /// uninterrupted call would have.
    Partial,
}

/// The file type bits of `fd` (`S_IFMT` of its mode), or None if fstat fails.
fn fd_type(fd: u64) -> Option<libc::mode_t> {
    // SAFETY: fstat of a number of this process's table into a valid buffer; a stale or
    // closed number only makes it fail.
    unsafe {
        let mut st: libc::stat = core::mem::zeroed();
        (libc::syscall(libc::SYS_fstat, fd as i32, &mut st) == 0)
            .then_some(st.st_mode & libc::S_IFMT)
    }
}

/// The kind of file `fd` is, for the read family (`restartable`).
fn fd_blocks_restartably(fd: u64, want_rcv: bool) -> bool {
    fd_type(fd).is_some_and(|kind| blocks_restartably(fd, kind, want_rcv))
}

/// Whether `fd`, of file type `kind`, blocks restartably (`fd_blocks_restartably`).
fn blocks_restartably(fd: u64, kind: libc::mode_t, want_rcv: bool) -> bool {
    // SAFETY: getsockopt on a number of this process's table into valid buffers; a stale
    // or closed number only makes it fail.
    unsafe {
        match kind {
            libc::S_IFIFO => true,
            // eventfd, timerfd, signalfd, inotify: anonymous inodes, no type bits.
            0 => true,
            libc::S_IFSOCK => {
                let mut tv: libc::timeval = core::mem::zeroed();
                let mut len = core::mem::size_of::<libc::timeval>() as libc::socklen_t;
                let opt = if want_rcv {
                    libc::SO_RCVTIMEO
                } else {
                    libc::SO_SNDTIMEO
                };
                libc::syscall(
                    libc::SYS_getsockopt,
                    fd as i32,
                    libc::SOL_SOCKET,
                    opt,
                    &mut tv as *mut libc::timeval,
                    &mut len,
                ) == 0
                    && tv.tv_sec == 0
                    && tv.tv_usec == 0
            }
            // A terminal: a read in canonical mode waits for a whole line and copies it at
            // once, so a signal finds nothing copied and the kernel rewinds it; a write
            // goes on from where a signal cut it (`Restart::Partial`). A non-canonical
            // read returns what it has on a signal: no.
            libc::S_IFCHR => terminal(fd).is_some_and(|canonical| canonical || !want_rcv),
            // Regular files, block devices: no.
            _ => false,
        }
    }
}

/// Whether `fd` is a regular file (whose reads and writes a signal does not cut short
/// before they end) or blocks restartably (`fd_blocks_restartably`): one side of a
/// `sendfile` or `splice`.
fn file_or_restartable(fd: u64, want_rcv: bool) -> bool {
    fd_type(fd).is_some_and(|kind| kind == libc::S_IFREG || blocks_restartably(fd, kind, want_rcv))
}

/// If `fd` is a terminal, whether its line discipline reads in canonical mode.
fn terminal(fd: u64) -> Option<bool> {
    // SAFETY: TCGETS into a valid termios; a number that is no terminal only fails.
    unsafe {
        let mut t: libc::termios = core::mem::zeroed();
        (libc::syscall(
            libc::SYS_ioctl,
            fd as i32,
            libc::TCGETS as usize,
            &mut t as *mut libc::termios,
        ) == 0)
            .then_some(t.c_lflag & libc::ICANON != 0)
    }
}

/// Timed waits shorter than this are not signalled: a call that may end any moment may
/// end between sysmon's look and the signal, which then ends the thread's next call with
/// EINTR (the module doc's window), and a short one gives its P back soon anyway.
const SHORTEST_SIGNALLED_NS: i64 = 50_000_000;

/// A `T` read from `addr` in this process's memory with process_vm_readv, which fails
/// instead of faulting if the program freed it (sysmon reads the arguments of another
/// thread's call).
///
/// # Safety
/// `T` is plain data: any bytes are a valid value.
unsafe fn read_own<T>(addr: u64) -> Option<T> {
    let mut v = core::mem::MaybeUninit::<T>::uninit();
    let size = core::mem::size_of::<T>();
    let local = libc::iovec {
        iov_base: v.as_mut_ptr().cast(),
        iov_len: size,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: size,
    };
    // SAFETY: reads `size` bytes of this process into `v`; a bad address only fails. The
    // counts and flags are unsigned longs: passed as usize through the variadic call.
    let n = unsafe {
        libc::syscall(
            libc::SYS_process_vm_readv,
            libc::getpid(),
            &local as *const libc::iovec,
            1usize,
            &remote as *const libc::iovec,
            1usize,
            0usize,
        )
    };
    // SAFETY: every byte was written, and any bytes are a `T` (caller contract).
    (n == size as libc::c_long).then(|| unsafe { v.assume_init() })
}

/// Whether the timeout at `addr` (a timespec, or a timeval if `timeval`) in this process's
/// memory is at least `SHORTEST_SIGNALLED_NS`.
fn long_timeout(addr: u64, timeval: bool) -> bool {
    // SAFETY: two integers.
    let Some([sec, sub]) = (unsafe { read_own::<[i64; 2]>(addr) }) else {
        return false;
    };
    let sub = if timeval {
        sub.saturating_mul(1000)
    } else {
        sub
    };
    sec.saturating_mul(1_000_000_000).saturating_add(sub) >= SHORTEST_SIGNALLED_NS
}

/// Whether the kernel sigset at `addr` in this process's memory leaves SIGURG out (false
/// if it cannot be read).
fn sigset_lacks_sigurg(addr: u64) -> bool {
    // SAFETY: a word of bits; the kernel's sigset starts with signals 1-64.
    unsafe { read_own::<u64>(addr) }.is_some_and(|w| w & (1 << (libc::SIGURG - 1)) == 0)
}

/// The msghdr at `addr` in this process's memory (None if the program freed it).
fn read_msghdr(addr: u64) -> Option<libc::msghdr> {
    // SAFETY: msghdr is plain data (pointers and integers).
    unsafe { read_own(addr) }
}

/// Whether a relative sleep on clock `c` measures time as sysmon's clocks do (not a CPU
/// clock, whose sleep the rest of would not be the same).
fn relative_clock(c: u64) -> bool {
    matches!(
        c as i32,
        libc::CLOCK_REALTIME | libc::CLOCK_MONOTONIC | libc::CLOCK_BOOTTIME
    )
}

/// Whether `fd` is a SOCK_STREAM socket.
fn stream_socket(fd: u64) -> bool {
    let mut ty: libc::c_int = 0;
    let mut len = core::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt into a valid int; a number that is not a socket only fails.
    unsafe {
        libc::syscall(
            libc::SYS_getsockopt,
            fd as i32,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            &mut ty as *mut libc::c_int,
            &mut len,
        ) == 0
            && ty == libc::SOCK_STREAM
    }
}

/// Which calls sysmon may interrupt, and how they come back (x86-64 numbers).
pub(super) fn restartable(c: &Call) -> Restart {
    const FUTEX_WAIT: u64 = 0;
    const FUTEX_LOCK_PI: u64 = 6;
    const FUTEX_WAIT_BITSET: u64 = 9;
    const FUTEX_LOCK_PI2: u64 = 13;
    let a = c.args;
    match c.nr {
        libc::SYS_futex => match a[1] & 0x7f {
            FUTEX_WAIT if a[3] == 0 => Restart::Rewound,
            // A relative timeout: the kernel keeps the deadline for restart_syscall.
            FUTEX_WAIT if long_timeout(a[3], false) => Restart::Resume,
            // Absolute deadlines (or none): the same call again is the same wait.
            FUTEX_WAIT_BITSET | FUTEX_LOCK_PI | FUTEX_LOCK_PI2 => Restart::AfterEintr,
            _ => Restart::No,
        },
        libc::SYS_read | libc::SYS_readv | libc::SYS_pread64 | libc::SYS_preadv => {
            if fd_blocks_restartably(a[0], true) {
                Restart::Rewound
            } else {
                Restart::No
            }
        }
        libc::SYS_recvfrom | libc::SYS_accept | libc::SYS_accept4 => {
            // recvfrom's flags: a MSG_WAITALL receive on a stream socket that a signal
            // ends short goes on from where it stopped, as a cut-short write does (it
            // also ends short at end of stream or an error: going on then returns 0 or
            // the error, and the count is the same). Peeks and datagrams: never.
            let waitall = c.nr == libc::SYS_recvfrom && a[3] & libc::MSG_WAITALL as u64 != 0;
            let peek = c.nr == libc::SYS_recvfrom && a[3] & libc::MSG_PEEK as u64 != 0;
            if peek && waitall || !fd_blocks_restartably(a[0], true) {
                Restart::No
            } else if waitall {
                if stream_socket(a[0]) {
                    Restart::Partial
                } else {
                    Restart::No
                }
            } else {
                Restart::Rewound
            }
        }
        // recvmsg: as recvfrom (its flags are the third argument). A MSG_WAITALL one goes
        // on with a copy of the rest of its iovec, only without control data (whose
        // buffer the first part may have filled).
        libc::SYS_recvmsg => {
            let waitall = a[2] & libc::MSG_WAITALL as u64 != 0;
            if a[2] & libc::MSG_PEEK as u64 != 0 && waitall || !fd_blocks_restartably(a[0], true) {
                Restart::No
            } else if !waitall {
                Restart::Rewound
            } else if stream_socket(a[0])
                && read_msghdr(a[1])
                    .is_some_and(|m| m.msg_controllen == 0 && m.msg_iovlen <= IOV_MAX)
            {
                Restart::Partial
            } else {
                Restart::No
            }
        }
        libc::SYS_connect => {
            if fd_blocks_restartably(a[0], false) {
                Restart::Rewound
            } else {
                Restart::No
            }
        }
        // stdio's and libraries' own writes to pipes and sockets (a blocking pipe write
        // moves every byte: the kernel ends it short only for a signal). send is sendto;
        // MSG_DONTWAIT never sleeps.
        libc::SYS_write | libc::SYS_sendto
            if (c.nr == libc::SYS_write || a[3] & libc::MSG_DONTWAIT as u64 == 0)
                && fd_blocks_restartably(a[0], false) =>
        {
            Restart::Partial
        }
        // The vectored forms go on past the bytes moved with a copy of the rest of the
        // iovec (`continue_vectored`). sendmsg's flags are its third argument.
        libc::SYS_writev | libc::SYS_sendmsg
            if (c.nr == libc::SYS_writev && a[2] <= IOV_MAX as u64
                || c.nr == libc::SYS_sendmsg && a[2] & libc::MSG_DONTWAIT as u64 == 0)
                && fd_blocks_restartably(a[0], false) =>
        {
            Restart::Partial
        }
        // sendfile moves the whole count to a blocking pipe or socket unless a signal cuts
        // it short, after which the rest, sent on, is what the whole call would have
        // moved: the kernel has advanced the offset (or the file position) past the bytes
        // sent. splice and tee return what was there to move: they sleep only while
        // nothing was, and a signal then finds nothing moved (rewound).
        libc::SYS_sendfile
            if fd_blocks_restartably(a[0], false) && file_or_restartable(a[1], true) =>
        {
            Restart::Partial
        }
        libc::SYS_splice if file_or_restartable(a[0], true) && file_or_restartable(a[2], false) => {
            Restart::Rewound
        }
        libc::SYS_tee
            if fd_blocks_restartably(a[0], true) && fd_blocks_restartably(a[1], false) =>
        {
            Restart::Rewound
        }
        libc::SYS_wait4 | libc::SYS_waitid | libc::SYS_flock => Restart::Rewound,
        libc::SYS_fcntl if a[1] == libc::F_SETLKW as u64 || a[1] == libc::F_OFD_SETLKW as u64 => {
            Restart::Rewound
        }
        // Waits without a timeout: the kernel returns EINTR after any handler, and the same
        // call again waits as the first would have.
        #[cfg(target_arch = "x86_64")]
        libc::SYS_poll if a[2] as i32 == -1 => Restart::AfterEintr,
        // A timeout in milliseconds, whose deadline the kernel keeps for restart_syscall.
        #[cfg(target_arch = "x86_64")]
        libc::SYS_poll if a[2] as i32 as i64 * 1_000_000 >= SHORTEST_SIGNALLED_NS => {
            Restart::Resume
        }
        #[cfg(target_arch = "x86_64")]
        libc::SYS_epoll_wait if a[3] as i32 == -1 => Restart::AfterEintr,
        libc::SYS_epoll_pwait if a[3] as i32 == -1 => Restart::AfterEintr,
        libc::SYS_epoll_pwait2 if a[3] == 0 => Restart::AfterEintr,
        // Timeouts the kernel writes back, less the time waited, when a signal ends the
        // wait (Linux's select and ppoll; glibc passes its own copy): the same call again
        // waits for the rest. None: no timeout.
        libc::SYS_ppoll if a[2] == 0 || long_timeout(a[2], false) => Restart::AfterEintr,
        libc::SYS_pselect6 if a[4] == 0 || long_timeout(a[4], false) => Restart::AfterEintr,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_select if a[4] == 0 || long_timeout(a[4], true) => Restart::AfterEintr,
        // A wait for signals the thread blocks, without a timeout (sigwait, sigwaitinfo):
        // after our handler the kernel returns EINTR, and the same call again waits as the
        // first. Not when SIGURG is in the set (the program would be given our signal). It
        // stays on the thread (`wrapped`): signals directed at the thread are its own.
        // (sigsuspend and pause are not taken: they end when a handler of the program's
        // runs, and one that ran in the same instant as ours would be lost with the EINTR,
        // the module doc's one ambiguity; here it would leave the program waiting.)
        libc::SYS_rt_sigtimedwait if a[2] == 0 && sigset_lacks_sigurg(a[0]) => Restart::AfterEintr,
        // An absolute deadline (CPython's time.sleep).
        libc::SYS_clock_nanosleep if a[1] & libc::TIMER_ABSTIME as u64 != 0 => Restart::AfterEintr,
        // Relative sleeps whose caller passed `rem` (glibc's sleep does): the kernel
        // writes the time left there. Without one (usleep) only the kernel's restart
        // block knows the rest.
        libc::SYS_nanosleep if long_timeout(a[0], false) => {
            if a[1] != 0 {
                Restart::Remaining
            } else {
                Restart::Resume
            }
        }
        libc::SYS_clock_nanosleep if relative_clock(a[0]) && long_timeout(a[2], false) => {
            if a[3] != 0 {
                Restart::Remaining
            } else {
                Restart::Resume
            }
        }
        _ => Restart::No,
    }
}

/// Counters for `gmp_stats`: signals sent for unseen calls, and the calls wrapped.
pub static LOOKS_SIGNALLED: AtomicU64 = AtomicU64::new(0);
pub static WRAPPED: AtomicU64 = AtomicU64::new(0);

/// Signals for unseen calls that found the thread out of the call sysmon saw (the window
/// in the module doc): each may have ended another call early, with EINTR or a short
/// count. A metric (`/gmp/sched/unseen/missed:events`).
pub static MISSED: AtomicU64 = AtomicU64::new(0);

/// Counts a signal `divert` refuses because the thread has left the recorded call.
fn missed() -> bool {
    MISSED.fetch_add(1, Ordering::Relaxed);
    false
}

/// Whether M `m` runs a goroutine on its P outside every blocking call the runtime knows
/// of (`divert`'s first check, made by sysmon before the signal). Read after /proc showed
/// the thread asleep in a call: to be seen asleep it went through the kernel's scheduler,
/// whose full barrier follows the stores `syscall::entersyscall` made before the call,
/// and reading its call waits for it under its run queue's lock; so a hooked call's
/// G_SYSCALL and P_SYSCALL are visible here.
fn runs_unseen(m: &M) -> bool {
    let gp = m.curg.load(Ordering::Acquire);
    let pp = m.p.load(Ordering::Acquire);
    // SAFETY: Gs and Ps are never freed.
    unsafe {
        !gp.is_null()
            && !pp.is_null()
            && (*gp).status.load(Ordering::Acquire) == G_RUNNING
            && (*pp).status.load(Ordering::Acquire) == P_RUNNING
            && core::ptr::eq((*pp).m.load(Ordering::Acquire), m)
    }
}

/// Sysmon: looks at M `m`, found holding its P without a switch for a while, and signals
/// it if it sleeps in a restartable unseen call. True if it signalled.
pub(super) fn look(m: &M) -> bool {
    let tid = m.tid.load(Ordering::Relaxed);
    if tid == 0 || m.dead.load(Ordering::Relaxed) {
        return false;
    }
    let Some(c) = read_call(m, tid) else {
        return false;
    };
    let how = restartable(&c);
    if how == Restart::No {
        return false;
    }
    // What the signal needs is done before the second reading (the handler check, the
    // siginfo), so that only the record `divert` compares against (plain stores) and the
    // signal's own system call follow it.
    let Some(sig) = sigpreempt::Prepared::new(sigpreempt::MAGIC_UNSEEN) else {
        return false;
    };
    // The checks took some microseconds, in which the call may have ended and another
    // begun (a write, then a nanosleep the signal would end with EINTR): look again just
    // before the signal. The same call again is the one `divert` will check the context
    // against: a thread back in an identical one is as safe to signal (see the module doc
    // for the window left).
    if read_call(m, tid) != Some(c) {
        return false;
    }
    // And the call is still unseen. Sysmon chose this M when it found its P running, but
    // the thread may have gone into a hooked call since (a loop of sendfiles, each through
    // the hand-off): the same /proc line, with the goroutine in G_SYSCALL. The signal
    // would cut that call short and `divert` would refuse it, leaving the short count to
    // the program.
    if !runs_unseen(m) {
        return false;
    }
    let s = &m.unseen;
    for (w, v) in s.args.iter().zip(c.args) {
        w.store(v, Ordering::Relaxed);
    }
    s.sp.store(c.sp, Ordering::Relaxed);
    s.pc.store(c.pc, Ordering::Relaxed);
    s.how.store(how as u64, Ordering::Relaxed);
    s.nr.store(c.nr, Ordering::Release);
    if sig.send(tid) {
        LOOKS_SIGNALLED.fetch_add(1, Ordering::Relaxed);
        true
    } else {
        false
    }
}

/// In the SIGURG handler for `MAGIC_UNSEEN`: if the interrupted context is the call sysmon
/// recorded, diverts it into the trampoline. See the module doc for the checks.
///
/// # Safety
/// In the SIGURG handler on M `m`'s thread, with the interrupted context.
pub(super) unsafe fn divert(m: &M, uc: *mut libc::ucontext_t) -> bool {
    let s = &m.unseen;
    let nr = s.nr.load(Ordering::Acquire);
    s.clear();
    if nr < 0 {
        return false;
    }
    let gp = m.curg.load(Ordering::Relaxed);
    let pp = m.p.load(Ordering::Relaxed);
    // SAFETY: Gs and Ps are never freed; the fields read are atomics written by this
    // thread, which the signal interrupted outside the runtime (checked below by PC).
    unsafe {
        if gp.is_null()
            || pp.is_null()
            || (*gp).status.load(Ordering::Relaxed) != G_RUNNING
            || (*pp).status.load(Ordering::Relaxed) != P_RUNNING
            || !core::ptr::eq((*pp).m.load(Ordering::Relaxed), m)
        {
            return missed();
        }
        #[cfg(debug_assertions)]
        if crate::sys::locks_held() != 0 {
            return false;
        }
        let pc = s.pc.load(Ordering::Relaxed);
        let at = crate::arch::ctx_pc(uc) as u64;
        // The number (before the call ends), the result (after), the argument registers.
        let (cnr, ret, args) = crate::arch::ctx_syscall(uc);
        let how = s.how.load(Ordering::Relaxed);
        let insn = crate::arch::SYSCALL_INSN_LEN as u64;
        let rewound = at == pc.wrapping_sub(insn) && cnr == nr as u64;
        let eintr = at == pc
            && ret as i64 == -(libc::EINTR as i64)
            && (how == Restart::AfterEintr as u64
                || how == Restart::Remaining as u64
                || how == Restart::Resume as u64);
        // A write cut short: 0 < count < length (a whole count is a finished call).
        let partial = at == pc && how == Restart::Partial as u64 && (ret as i64) > 0;
        let short = partial && ret < partial_len(nr, s);
        // Where the result replaced the first argument (aarch64's x0), that argument is
        // compared only in a rewound context, which the kernel gave it back.
        let first = usize::from(crate::arch::SYSCALL_RET_IN_ARG0 && !rewound);
        let same = crate::arch::ctx_sp(uc) as u64 == s.sp.load(Ordering::Relaxed)
            && args[first..]
                .iter()
                .zip(&s.args[first..])
                .all(|(&v, a)| v == a.load(Ordering::Relaxed));
        if !(rewound || eintr || short) || !same {
            // Back from the recorded call with what it would have returned anyway (it ended
            // as the signal came): nothing was changed. Anything else is the window.
            let ended = at == pc && same && ret as i64 != -(libc::EINTR as i64) && !short;
            return if ended { false } else { missed() };
        }
        // The instruction before the return address is the system call: it is mapped and
        // executable (the thread just ran it), so readable.
        if !crate::arch::is_syscall_insn((pc - insn) as usize) {
            return missed();
        }
        let sp = crate::arch::ctx_sp(uc);
        let arg0 = s.args[0].load(Ordering::Relaxed);
        // The call is the one recorded. It may not go to the trampoline from the runtime's
        // own code, nor without room on the stack for the save area (nor, on aarch64,
        // with a register state the trampoline cannot carry): then, rather than leave the
        // program an EINTR, it goes on here with the P (as it would have, had it not been
        // signalled) where that is exact.
        if sigpreempt::runtime_call(pc as usize, uc)
            || !sigpreempt::room_on_stack(&*gp, sp)
            || !crate::arch::can_divert(uc)
        {
            stay(uc, eintr, how, pc, nr, arg0);
            return false;
        }
        // `carried` takes to `wrapped` the bytes a cut-short call already moved, or a
        // resumed call's result; `call` says which: the call's number, or RESUMED.
        let (call, carried) = if how == Restart::Resume as u64 {
            let (entered, ret) = resume(true);
            if !entered {
                // Finished here, with the P, as the uninterrupted call would have.
                crate::arch::set_ctx_syscall_ret(uc, ret);
                return true;
            }
            (RESUMED, ret)
        } else {
            (nr as u64, if short { ret } else { 0 })
        };
        // `wrapped` reads the arguments from the saved registers: the first one back
        // where the result replaced it (a no-op on x86-64, whose result is in rax).
        if crate::arch::SYSCALL_RET_IN_ARG0 {
            crate::arch::set_ctx_syscall_ret(uc, arg0);
        }
        crate::arch::divert_syscall(uc, pc as usize, call, carried);
    }
    true
}

/// In the handler, for the recorded call that `divert` does not send to the trampoline:
/// it goes on with the P where that is exact (a resumable call waits here for the rest; a
/// call whose restart is exact is entered again), else it returns what the signal left.
///
/// # Safety
/// In the SIGURG handler, with the context of the recorded call `nr` at `pc` (the address
/// after the system-call instruction), its first argument `arg0`.
unsafe fn stay(uc: *mut libc::ucontext_t, eintr: bool, how: u64, pc: u64, nr: i64, arg0: u64) {
    // SAFETY: caller contract.
    unsafe {
        if eintr && how == Restart::Resume as u64 {
            crate::arch::set_ctx_syscall_ret(uc, resume(false).1);
        } else if eintr && how == Restart::AfterEintr as u64 {
            // What the kernel does for a call it restarts: back to the instruction.
            crate::arch::ctx_rewind_syscall(uc, pc as usize, nr as u64, arg0);
        }
    }
}

/// The most iovec entries a vectored call takes (Linux's UIO_MAXIOV).
const IOV_MAX: usize = 1024;

/// The length a `Restart::Partial` call asked to move: its count argument, or the sum of
/// its iovec (`writev`, `sendmsg`).
///
/// # Safety
/// In the handler, for the call just interrupted: its iovec is the one the kernel read.
unsafe fn partial_len(nr: i64, s: &Seen) -> u64 {
    let a = |i: usize| s.args[i].load(Ordering::Relaxed);
    // SAFETY: caller contract; the counts were bounded by `restartable` or by the kernel,
    // which had just read these entries.
    unsafe {
        match nr {
            libc::SYS_writev => iov_total(a(1) as *const libc::iovec, a(2) as usize),
            libc::SYS_sendmsg | libc::SYS_recvmsg => {
                let m = &*(a(1) as *const libc::msghdr);
                iov_total(m.msg_iov, m.msg_iovlen)
            }
            libc::SYS_sendfile => a(3),
            _ => a(2),
        }
    }
}

/// The bytes `n` iovec entries at `iov` cover (0 for more than `IOV_MAX`, never short).
///
/// # Safety
/// `iov` points at `n` readable entries.
unsafe fn iov_total(iov: *const libc::iovec, n: usize) -> u64 {
    if n > IOV_MAX {
        return 0;
    }
    // SAFETY: caller contract.
    (0..n).fold(0u64, |t, i| {
        t.saturating_add(unsafe { (*iov.add(i)).iov_len } as u64)
    })
}

/// The rest of a vectored call that a signal cut short after `done` bytes (`writev`;
/// `sendmsg`, without its control data, which went with the first byte; a MSG_WAITALL
/// `recvmsg`, which has none): the same call on the entries past them, copied onto this
/// stack `CHUNK` at a time, the first one trimmed. A receive's flags are added to the
/// program's `msg_flags`. Returns the bytes it moved, or the first call's error if none.
///
/// # Safety
/// `a` are the arguments of the program's call, whose iovec (and msghdr) it still holds.
unsafe fn continue_vectored(nr: u64, a: [u64; 6], done: u64) -> i64 {
    const CHUNK: usize = 64;
    // SAFETY: caller contract.
    let (iov, cnt, msg) = unsafe {
        if nr == libc::SYS_writev as u64 {
            (a[1] as *const libc::iovec, a[2] as usize, None)
        } else {
            // sendmsg or recvmsg.
            let m = &*(a[1] as *const libc::msghdr);
            (m.msg_iov as *const libc::iovec, m.msg_iovlen, Some(*m))
        }
    };
    let cnt = cnt.min(IOV_MAX);
    let mut skip = done as usize;
    let mut i = 0;
    // SAFETY (the reads of entries below): caller contract, i < cnt.
    while i < cnt && skip >= unsafe { (*iov.add(i)).iov_len } {
        skip -= unsafe { (*iov.add(i)).iov_len };
        i += 1;
    }
    let mut moved = 0i64;
    while i < cnt {
        let mut part = [libc::iovec {
            iov_base: core::ptr::null_mut(),
            iov_len: 0,
        }; CHUNK];
        let (mut n, mut want) = (0, 0usize);
        while n < CHUNK && i < cnt {
            // SAFETY: as above; `skip` is within the first entry.
            let e = unsafe { *iov.add(i) };
            part[n] = libc::iovec {
                iov_base: e.iov_base.wrapping_byte_add(skip),
                iov_len: e.iov_len - skip,
            };
            want += part[n].iov_len;
            skip = 0;
            n += 1;
            i += 1;
        }
        // SAFETY: the program's call on its own buffers, with a copy of its iovec.
        let r = unsafe {
            match msg {
                Some(mut h) => {
                    h.msg_iov = part.as_mut_ptr();
                    h.msg_iovlen = n;
                    h.msg_control = core::ptr::null_mut();
                    h.msg_controllen = 0;
                    h.msg_flags = 0;
                    let r = crate::sys::raw_syscall6(
                        nr,
                        a[0],
                        &h as *const libc::msghdr as u64,
                        a[2],
                        0,
                        0,
                        0,
                    );
                    if nr == libc::SYS_recvmsg as u64 {
                        (*(a[1] as *mut libc::msghdr)).msg_flags |= h.msg_flags;
                    }
                    r
                }
                None => crate::sys::raw_syscall6(nr, a[0], part.as_ptr() as u64, n as u64, 0, 0, 0),
            }
        } as i64;
        if r < 0 {
            return if moved > 0 { moved } else { r };
        }
        moved += r;
        if (r as usize) < want {
            break;
        }
    }
    moved
}

/// `wrapped`'s rax when the handler already made the call (`resume`; its result in rcx):
/// only `syscall::exitsyscall` is left. No system call has this number.
const RESUMED: u64 = u64::MAX;

/// In the handler, for a `Restart::Resume` call that our signal ended with -EINTR: gives
/// the P up (`syscall::entersyscall`, as the trampoline would; sysmon's next round hands it on)
/// and waits for the rest with `restart_syscall`, which runs the restart block the kernel
/// set up when it ended the call and keeps until this handler returns. A signal of the
/// program's own that ends the rest ends it with EINTR, as it would have ended the call.
/// Without `give_up_p` (the runtime's own call, or no room for the trampoline) it waits
/// with the P, as the uninterrupted call would have. Returns whether it entered (the
/// trampoline must then `exit`) and the call's result.
///
/// # Safety
/// In the SIGURG handler, on a goroutine that `divert` found RUNNING on its P, interrupted
/// outside the runtime if `give_up_p`.
unsafe fn resume(give_up_p: bool) -> (bool, u64) {
    let entered = give_up_p && syscall::entersyscall().is_ok();
    // SAFETY: restart_syscall takes no arguments and touches only what the interrupted
    // call's own restart block names (the program's pollfds, futex word).
    let ret =
        unsafe { crate::sys::raw_syscall6(libc::SYS_restart_syscall as u64, 0, 0, 0, 0, 0, 0) };
    (entered, ret)
}

/// Called by `__gmp_async_syscall` with the saved registers (`arch::SavedRegs`): makes the
/// system call in rax with the saved argument registers between `syscall::entersyscall` and
/// `syscall::exitsyscall` (or, when goroutines are bound to this M, on a helper thread while the
/// goroutine parks), and leaves what the kernel would have: the result in rax, rcx = the
/// return address, r11 = rflags.
pub(super) extern "C" fn wrapped(regs: *mut crate::arch::SavedRegs) {
    // SAFETY: the trampoline passes its save area on this goroutine's stack.
    let r = unsafe { &mut *regs };
    WRAPPED.fetch_add(1, Ordering::Relaxed);
    if r.call() == RESUMED {
        syscall::exitsyscall();
        let ret = r.carried();
        r.set_return(ret);
        return;
    }
    // Bytes a cut-short call already moved (`divert` put them in rcx): it goes on from
    // there. The program's own registers keep their values (the kernel changes only rax,
    // rcx and r11, and compiled code relies on it).
    let done = r.carried();
    let (nr, mut a) = (r.call(), r.args());
    let vectored = done != 0
        && (nr == libc::SYS_writev as u64
            || nr == libc::SYS_sendmsg as u64
            || nr == libc::SYS_recvmsg as u64);
    if nr == libc::SYS_sendfile as u64 {
        // The kernel moved the offset (or the file position) on: only the count shrinks.
        a[3] -= done;
    } else if !vectored {
        a[1] += done;
        a[2] -= done;
    }
    // A relative sleep a signal ended (`Restart::Remaining`): the kernel wrote the time
    // left into `rem`, which becomes the request (read before `rem` is written again). The
    // program's registers keep their values.
    if nr == libc::SYS_nanosleep as u64 && a[1] != 0 {
        a[0] = a[1];
    } else if nr == libc::SYS_clock_nanosleep as u64
        && a[1] & libc::TIMER_ABSTIME as u64 == 0
        && a[3] != 0
    {
        a[2] = a[3];
    }
    // SAFETY: the very system call the goroutine was making, with its own arguments (past
    // the bytes already moved).
    let call = || unsafe {
        if vectored {
            continue_vectored(nr, a, done)
        } else {
            crate::sys::raw_syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5]) as i64
        }
    };
    // A PI futex's owner is the calling thread, and a signal wait waits for the signals
    // directed at it: those calls stay on it.
    let thread_bound = nr == libc::SYS_futex as u64 && matches!(a[1] & 0x7f, 6 | 13)
        || nr == libc::SYS_rt_sigtimedwait as u64;
    let in_syscall = |f: &dyn Fn() -> i64| -> u64 {
        let entered = syscall::entersyscall().is_ok();
        let ret = f() as u64;
        if entered {
            syscall::exitsyscall();
        }
        ret
    };
    let ret = if thread_bound || !offload::wanted() {
        in_syscall(&call)
    } else {
        // Goroutines are bound to this M (parked in hooks, pinned): one of them may hold
        // what this call waits for (a pthread mutex held across a hooked sleep), and only
        // this thread may run it. So the call waits on a helper thread while this
        // goroutine parks bound here, and the M runs them meanwhile (offload.rs).
        //
        // But running them means running other goroutines on a thread whose goroutine is
        // stopped inside C code, which may rely on the thread's state (OpenSSL's unlocked
        // per-thread RSA blinding; a lock it took on this thread). So a lock wait first
        // waits here, in the system call (its P gone to another thread), for up to
        // OFFLOAD_GRACE_NS: most waits end by then, with nothing else run on the thread.
        // SAFETY (offload::run): on a goroutine holding its P, not locked (`wanted`);
        // `call` uses only copies of the registers, and waits on memory and fds the
        // process shares.
        match grace(nr, a) {
            Some(bounded) => match in_syscall(&bounded) as i64 {
                GRACE_OVER => unsafe { offload::run(&call) }.0 as u64,
                r => r as u64,
            },
            None => unsafe { offload::run(&call) }.0 as u64,
        }
    };
    // The rest of a cut-short write: an error after some bytes moved is the count, as the
    // kernel reports a write a signal ends.
    r.set_return(match done {
        0 => ret,
        d if (ret as i64) < 0 => d,
        d => d + ret,
    });
}

/// How long a lock wait waits on its own thread before it moves to a helper thread when
/// goroutines are bound to that thread (`wrapped`).
const OFFLOAD_GRACE_NS: i64 = 10_000_000;

/// `grace`'s call's result when the grace ended before the wait did.
const GRACE_OVER: i64 = i64::MIN;

/// For a futex wait, the same wait bounded by `OFFLOAD_GRACE_NS` (its own deadline if that
/// comes first), returning `GRACE_OVER` when the grace ran out; None for other calls. A
/// futex wait may end early (its callers check the word again), so the bounded wait is
/// exact, and the original call made afterwards waits for the rest.
fn grace(nr: u64, a: [u64; 6]) -> Option<impl Fn() -> i64> {
    const FUTEX_WAIT: u64 = 0;
    const FUTEX_WAIT_BITSET: u64 = 9;
    const FUTEX_CLOCK_REALTIME: u64 = 256;
    if nr != libc::SYS_futex as u64 {
        return None;
    }
    let op = a[1] & 0x7f;
    if op != FUTEX_WAIT && op != FUTEX_WAIT_BITSET {
        return None;
    }
    Some(move || {
        // FUTEX_WAIT takes a relative timeout (none here: `restartable` lets only those
        // through), FUTEX_WAIT_BITSET an absolute deadline on its clock (or none).
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: OFFLOAD_GRACE_NS as libc::c_long,
        };
        let mut ours = true;
        if op == FUTEX_WAIT_BITSET {
            let clock = if a[1] & FUTEX_CLOCK_REALTIME != 0 {
                libc::CLOCK_REALTIME
            } else {
                libc::CLOCK_MONOTONIC
            };
            // SAFETY: clock_gettime into a valid timespec.
            unsafe { libc::clock_gettime(clock, &mut ts) };
            let bound =
                ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128 + OFFLOAD_GRACE_NS as i128;
            let theirs = a[3] as *const libc::timespec;
            // SAFETY: the program's deadline, which the kernel was about to read.
            let their_ns = (!theirs.is_null()).then(|| unsafe {
                (*theirs).tv_sec as i128 * 1_000_000_000 + (*theirs).tv_nsec as i128
            });
            if their_ns.is_some_and(|t| t <= bound) {
                ours = false;
                // SAFETY: as above.
                ts = unsafe { *theirs };
            } else {
                ts.tv_sec = (bound / 1_000_000_000) as libc::time_t;
                ts.tv_nsec = (bound % 1_000_000_000) as libc::c_long;
            }
        }
        // SAFETY: the program's futex wait with a timeout on our stack.
        let r = unsafe {
            crate::sys::raw_syscall6(
                nr,
                a[0],
                a[1],
                a[2],
                &ts as *const libc::timespec as u64,
                a[4],
                a[5],
            )
        } as i64;
        if ours && r == -(libc::ETIMEDOUT as i64) {
            GRACE_OVER
        } else {
            r
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread of the runtime's code waiting for a std `Mutex` sleeps in libc's `syscall`
    /// wrapper, called from our code: `runtime_call` takes it for the runtime's own call
    /// (so `divert` leaves it alone), and the same call returning elsewhere for C code's.
    #[test]
    fn std_lock_waits_are_the_runtimes_own() {
        use std::sync::{Arc, Mutex};
        sigpreempt::refresh_ranges(true);
        let lock = Arc::new(Mutex::new(()));
        let held = lock.lock().unwrap();
        let tid = Arc::new(core::sync::atomic::AtomicI32::new(0));
        let t = {
            let (lock, tid) = (lock.clone(), tid.clone());
            std::thread::spawn(move || {
                tid.store(crate::sys::gettid(), Ordering::SeqCst);
                drop(lock.lock().unwrap());
            })
        };
        // Wait for the state: the thread asleep in the futex.
        let mut call = None;
        for _ in 0..5000 {
            let id = tid.load(Ordering::SeqCst);
            if id != 0 {
                let path = format!("/proc/self/task/{id}/syscall");
                if let Ok(text) = std::fs::read(&path) {
                    if let Some(c) = parse(&text).filter(|c| c.nr == libc::SYS_futex) {
                        call = Some(c);
                        break;
                    }
                }
            }
            std::thread::sleep(core::time::Duration::from_millis(1));
        }
        let c = call.expect("the thread never slept in the futex");
        // SAFETY: a zeroed context, given the interrupted registers runtime_call reads.
        let mut uc: libc::ucontext_t = unsafe { core::mem::zeroed() };
        #[cfg(target_arch = "x86_64")]
        {
            // The blocked thread's stack: its top word is the wrapper's return address.
            uc.uc_mcontext.gregs[libc::REG_RSP as usize] = c.sp as i64;
            // SAFETY: the thread sleeps in the call, so its stack is mapped and still.
            assert!(unsafe { sigpreempt::runtime_call(c.pc as usize, &uc) });
            let elsewhere = 0usize;
            uc.uc_mcontext.gregs[libc::REG_RSP as usize] = &elsewhere as *const usize as i64;
            // SAFETY: rsp points at a live local.
            assert!(!unsafe { sigpreempt::runtime_call(c.pc as usize, &uc) });
        }
        #[cfg(target_arch = "aarch64")]
        {
            // /proc does not show the link register: the wrapper's caller is ours.
            uc.uc_mcontext.regs[30] =
                std_lock_waits_are_the_runtimes_own as *const () as usize as u64;
            // SAFETY: the context's fields runtime_call reads are set.
            assert!(unsafe { sigpreempt::runtime_call(c.pc as usize, &uc) });
            uc.uc_mcontext.regs[30] = 0;
            // SAFETY: as above.
            assert!(!unsafe { sigpreempt::runtime_call(c.pc as usize, &uc) });
        }
        drop(held);
        t.join().unwrap();
    }

    #[test]
    fn parses_a_sleeping_call() {
        let c = parse(b"202 0x7f00 0x80 0x2 0x0 0x0 0x0 0x7ffd1000 0x7f12345\n").unwrap();
        assert_eq!(c.nr, 202);
        assert_eq!(c.args, [0x7f00, 0x80, 2, 0, 0, 0]);
        assert_eq!((c.sp, c.pc), (0x7ffd1000, 0x7f12345));
        assert_eq!(parse(b"running\n"), None);
        assert_eq!(parse(b"-1 0x7ffd1000 0x7f12345\n"), None);
        assert_eq!(parse(b"202 0x1 0x2\n"), None);
    }

    #[test]
    fn restarts_only_what_restarts_exactly() {
        let call = |nr: i64, args: [u64; 6]| Call {
            nr,
            args,
            sp: 0,
            pc: 0,
        };
        // pthread_mutex_lock: FUTEX_WAIT|PRIVATE without a timeout.
        assert_eq!(
            restartable(&call(libc::SYS_futex, [1, 128, 2, 0, 0, 0])),
            Restart::Rewound
        );
        // A relative timeout goes on from the kernel's restart block, if long enough.
        let (long, short) = ([1i64, 0], [0i64, 1_000_000]);
        let (l, sh) = (long.as_ptr() as u64, short.as_ptr() as u64);
        assert_eq!(
            restartable(&call(libc::SYS_futex, [1, 128, 2, l, 0, 0])),
            Restart::Resume
        );
        assert_eq!(
            restartable(&call(libc::SYS_futex, [1, 128, 2, sh, 0, 0])),
            Restart::No
        );
        // pthread_cond_timedwait: FUTEX_WAIT_BITSET with an absolute deadline.
        assert_eq!(
            restartable(&call(libc::SYS_futex, [1, 137, 0, 8, 0, !0])),
            Restart::AfterEintr
        );
        // poll, select and epoll_wait are x86-64's own calls (aarch64 has only ppoll,
        // pselect6 and epoll_pwait).
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(
                restartable(&call(libc::SYS_poll, [1, 1, u32::MAX as u64, 0, 0, 0])),
                Restart::AfterEintr
            );
            assert_eq!(
                restartable(&call(libc::SYS_poll, [1, 1, 100, 0, 0, 0])),
                Restart::Resume
            );
            assert_eq!(
                restartable(&call(libc::SYS_poll, [1, 1, 10, 0, 0, 0])),
                Restart::No
            );
            assert_eq!(
                restartable(&call(libc::SYS_epoll_wait, [1, 1, 1, 100, 0, 0])),
                Restart::No
            );
        }
        assert_eq!(
            restartable(&call(libc::SYS_nanosleep, [l, 0, 0, 0, 0, 0])),
            Restart::Resume
        );
        assert_eq!(
            restartable(&call(libc::SYS_nanosleep, [sh, 0, 0, 0, 0, 0])),
            Restart::No
        );
        assert_eq!(
            restartable(&call(libc::SYS_epoll_pwait, [1, 1, 1, 100, 0, 0])),
            Restart::No
        );
        assert_eq!(
            restartable(&call(
                libc::SYS_epoll_pwait,
                [1, 1, 1, u32::MAX as u64, 0, 0]
            )),
            Restart::AfterEintr
        );
        assert_eq!(
            restartable(&call(libc::SYS_clock_nanosleep, [1, 1, 8, 0, 0, 0])),
            Restart::AfterEintr
        );
        // sigwait: only without a timeout, and only for a set without SIGURG.
        let usr2: u64 = 1 << (libc::SIGUSR2 - 1);
        let with_urg: u64 = usr2 | 1 << (libc::SIGURG - 1);
        let (s1, s2) = (&usr2 as *const u64 as u64, &with_urg as *const u64 as u64);
        assert_eq!(
            restartable(&call(libc::SYS_rt_sigtimedwait, [s1, 0, 0, 8, 0, 0])),
            Restart::AfterEintr
        );
        assert_eq!(
            restartable(&call(libc::SYS_rt_sigtimedwait, [s1, 0, l, 8, 0, 0])),
            Restart::No
        );
        assert_eq!(
            restartable(&call(libc::SYS_rt_sigtimedwait, [s2, 0, 0, 8, 0, 0])),
            Restart::No
        );
        assert_eq!(
            restartable(&call(libc::SYS_rt_sigsuspend, [s1, 8, 0, 0, 0, 0])),
            Restart::No
        );
        assert_eq!(
            restartable(&call(libc::SYS_clock_nanosleep, [1, 0, l, 0, 0, 0])),
            Restart::Resume
        );
        // With a `rem`, relative sleeps of 50 ms or more go on for the rest; not on a CPU
        // clock, nor short ones.
        assert_eq!(
            restartable(&call(libc::SYS_nanosleep, [l, 8, 0, 0, 0, 0])),
            Restart::Remaining
        );
        assert_eq!(
            restartable(&call(libc::SYS_nanosleep, [sh, 8, 0, 0, 0, 0])),
            Restart::No
        );
        assert_eq!(
            restartable(&call(libc::SYS_clock_nanosleep, [1, 0, l, 16, 0, 0])),
            Restart::Remaining
        );
        assert_eq!(
            restartable(&call(
                libc::SYS_clock_nanosleep,
                [libc::CLOCK_PROCESS_CPUTIME_ID as u64, 0, l, 16, 0, 0]
            )),
            Restart::No
        );
        // select and ppoll write the rest of their timeout back; a timeval's second half
        // is microseconds.
        assert_eq!(
            restartable(&call(libc::SYS_ppoll, [1, 1, l, 0, 8, 0])),
            Restart::AfterEintr
        );
        assert_eq!(
            restartable(&call(libc::SYS_ppoll, [1, 1, sh, 0, 8, 0])),
            Restart::No
        );
        #[cfg(target_arch = "x86_64")]
        {
            let tv = [0i64, 60_000];
            assert_eq!(
                restartable(&call(libc::SYS_select, [1, 8, 0, 0, tv.as_ptr() as u64, 0])),
                Restart::AfterEintr
            );
        }
        assert_eq!(
            restartable(&call(libc::SYS_pselect6, [1, 8, 0, 0, sh, 0])),
            Restart::No
        );
        // MSG_WAITALL receives from a stream socket go on after a cut; peeks never.
        let mut sv = [0i32; 2];
        // SAFETY: socketpair into a valid array.
        assert_eq!(
            unsafe {
                crate::sys::real::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr())
            },
            0
        );
        let recv = |fd: i32, flags: i32| Call {
            nr: libc::SYS_recvfrom,
            args: [fd as u64, 0, 1, flags as u64, 0, 0],
            sp: 0,
            pc: 0,
        };
        assert_eq!(restartable(&recv(sv[0], 0)), Restart::Rewound);
        assert_eq!(
            restartable(&recv(sv[0], libc::MSG_WAITALL)),
            Restart::Partial
        );
        assert_eq!(
            restartable(&recv(sv[0], libc::MSG_WAITALL | libc::MSG_PEEK)),
            Restart::No
        );
        // recvmsg: rewound; with MSG_WAITALL it goes on, unless it has control data.
        let mut iov = [0u8; 4];
        let mut v = libc::iovec {
            iov_base: iov.as_mut_ptr().cast(),
            iov_len: 4,
        };
        // SAFETY: msghdr is plain data.
        let mut mh: libc::msghdr = unsafe { core::mem::zeroed() };
        mh.msg_iov = &mut v;
        mh.msg_iovlen = 1;
        let recvmsg = |fd: i32, m: &libc::msghdr, flags: i32| Call {
            nr: libc::SYS_recvmsg,
            args: [
                fd as u64,
                m as *const libc::msghdr as u64,
                flags as u64,
                0,
                0,
                0,
            ],
            sp: 0,
            pc: 0,
        };
        assert_eq!(restartable(&recvmsg(sv[0], &mh, 0)), Restart::Rewound);
        assert_eq!(
            restartable(&recvmsg(sv[0], &mh, libc::MSG_WAITALL)),
            Restart::Partial
        );
        let mut cbuf = [0u64; 8];
        mh.msg_control = cbuf.as_mut_ptr().cast();
        mh.msg_controllen = 64;
        assert_eq!(
            restartable(&recvmsg(sv[0], &mh, libc::MSG_WAITALL)),
            Restart::No
        );
        // SAFETY: our sockets.
        unsafe {
            crate::sys::real::close(sv[0]);
            crate::sys::real::close(sv[1]);
        }
        // A write to a regular file (stdout of the test may be anything: use a file).
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        use std::os::fd::AsRawFd;
        let fd = f.as_raw_fd() as u64;
        assert_eq!(
            restartable(&call(libc::SYS_write, [fd, 8, 8, 0, 0, 0])),
            Restart::No
        );
        assert_eq!(
            restartable(&call(libc::SYS_writev, [fd, 8, 8, 0, 0, 0])),
            Restart::No
        );
    }

    /// A terminal: reads in canonical mode (whole lines) and writes restart; a
    /// non-canonical read does not.
    #[test]
    fn reads_terminals_in_canonical_mode() {
        // SAFETY: a pseudo-terminal pair of our own, closed below.
        unsafe {
            let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
            assert!(master >= 0);
            assert_eq!(libc::unlockpt(master), 0);
            let name = libc::ptsname(master);
            assert!(!name.is_null());
            let slave = crate::sys::real::open(name, libc::O_RDWR | libc::O_NOCTTY, 0);
            assert!(slave >= 0);
            let call = |nr: i64| Call {
                nr,
                args: [slave as u64, 0, 1, 0, 0, 0],
                sp: 0,
                pc: 0,
            };
            assert_eq!(restartable(&call(libc::SYS_read)), Restart::Rewound);
            assert_eq!(restartable(&call(libc::SYS_write)), Restart::Partial);
            let mut t: libc::termios = core::mem::zeroed();
            assert_eq!(libc::tcgetattr(slave, &mut t), 0);
            t.c_lflag &= !libc::ICANON;
            assert_eq!(libc::tcsetattr(slave, libc::TCSANOW, &t), 0);
            assert_eq!(restartable(&call(libc::SYS_read)), Restart::No);
            assert_eq!(restartable(&call(libc::SYS_write)), Restart::Partial);
            crate::sys::real::close(slave);
            crate::sys::real::close(master);
        }
    }

    #[test]
    fn reads_pipes_not_files() {
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 into a valid array; closed below.
        assert_eq!(
            unsafe { libc::syscall(libc::SYS_pipe2, fds.as_mut_ptr(), 0) },
            0
        );
        let read = |fd: i32| Call {
            nr: libc::SYS_read,
            args: [fd as u64, 0, 1, 0, 0, 0],
            sp: 0,
            pc: 0,
        };
        assert_eq!(restartable(&read(fds[0])), Restart::Rewound);
        let write = |fd: i32, nr: i64, flags: u64| Call {
            nr,
            args: [fd as u64, 0, 1, flags, 0, 0],
            sp: 0,
            pc: 0,
        };
        assert_eq!(
            restartable(&write(fds[1], libc::SYS_write, 0)),
            Restart::Partial
        );
        assert_eq!(
            restartable(&write(fds[1], libc::SYS_writev, 0)),
            Restart::Partial
        );
        // More entries than the kernel takes: never signalled (the call fails at once).
        let huge = Call {
            nr: libc::SYS_writev,
            args: [fds[1] as u64, 0, 2000, 0, 0, 0],
            sp: 0,
            pc: 0,
        };
        assert_eq!(restartable(&huge), Restart::No);
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        use std::os::fd::AsRawFd;
        assert_eq!(restartable(&read(f.as_raw_fd())), Restart::No);
        // Copies between descriptors: sendfile from a file into the pipe goes on past a
        // cut; splice and tee are rewound; a file as sendfile's output never sleeps.
        let (p0, p1, file) = (fds[0] as u64, fds[1] as u64, f.as_raw_fd() as u64);
        let with = |nr: i64, args: [u64; 6]| Call {
            nr,
            args,
            sp: 0,
            pc: 0,
        };
        assert_eq!(
            restartable(&with(libc::SYS_sendfile, [p1, file, 0, 1, 0, 0])),
            Restart::Partial
        );
        assert_eq!(
            restartable(&with(libc::SYS_sendfile, [file, p0, 0, 1, 0, 0])),
            Restart::No
        );
        assert_eq!(
            restartable(&with(libc::SYS_splice, [file, 0, p1, 0, 1, 0])),
            Restart::Rewound
        );
        assert_eq!(
            restartable(&with(libc::SYS_tee, [p0, p1, 1, 0, 0, 0])),
            Restart::Rewound
        );
        assert_eq!(
            restartable(&with(libc::SYS_tee, [p0, file, 1, 0, 0, 0])),
            Restart::No
        );
        // SAFETY: our pipe.
        unsafe {
            crate::sys::real::close(fds[0]);
            crate::sys::real::close(fds[1]);
        }
    }
}
