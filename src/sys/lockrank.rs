//! The runtime locks' ranks (Go's lockrank.go), and, in debug builds, what the calling
//! thread holds: the count of runtime locks (`Lock`; Go's `m.locks`), which the scheduler
//! asserts is zero wherever a goroutine may switch, and the count per rank, which every
//! lock checks against the order.

// The count lives in an initial-exec TLS slot, as `arch`'s own slot (`arch::tls_get`):
// its address is computed at each access, never cached across a goroutine's move to
// another thread. No goroutine switch happens while the thread holds a lock (`execute`
// asserts it).
#[cfg(debug_assertions)]
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl __gmp_tls_locks",
    ".hidden __gmp_tls_locks",
    ".type __gmp_tls_locks, @object",
    ".size __gmp_tls_locks, 8",
    "__gmp_tls_locks:",
    ".zero 8",
    ".popsection",
);

/// Debug builds: adds `delta` to the calling thread's count of held runtime locks.
#[cfg(debug_assertions)]
#[inline]
pub fn locks_add(delta: isize) {
    // SAFETY: read-modify-write of the thread's own 8-byte TLS slot defined above (as
    // `arch::tls_get`); no other memory is touched.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::asm!(
            "mov {t}, qword ptr [rip + __gmp_tls_locks@GOTTPOFF]",
            "add qword ptr fs:[{t}], {d}",
            t = out(reg) _,
            d = in(reg) delta,
            options(nostack),
        );
    }
    #[cfg(target_arch = "aarch64")]
    {
        let p = super::tls_addr!("__gmp_tls_locks") as *mut isize;
        // SAFETY: the thread's own 8-byte, 8-aligned slot defined above; only this thread
        // (and its signal handlers, which leave it as they found it) touches it.
        unsafe { p.write_volatile(p.read_volatile() + delta) };
    }
}

/// Debug builds: how many runtime locks the calling thread holds.
#[cfg(debug_assertions)]
#[inline]
pub fn locks_held() -> isize {
    let v: isize;
    // SAFETY: reads the thread's own TLS slot defined above (as `arch::tls_get`).
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::asm!(
            "mov {r}, qword ptr [rip + __gmp_tls_locks@GOTTPOFF]",
            "mov {r}, qword ptr fs:[{r}]",
            r = out(reg) v,
            options(nostack, readonly, preserves_flags),
        );
    }
    // SAFETY: as above.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        v = (super::tls_addr!("__gmp_tls_locks") as *const isize).read_volatile();
    }
    v
}

/// The runtime's lock order (Go's lockrank.go; HACKING.md, "The lock order"): every
/// [`Lock`](super::Lock) has a rank, and a thread may take a lock only while every lock it
/// holds has a lower level, or the same rank where several of one rank may be held at
/// once (channels in a select, by address; two Ps' timers when a retiring P's move).
/// Nothing is taken while a leaf is held. Debug builds check it at every lock and throw
/// with both ranks' names.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Rank {
    /// `procresize`: one resize at a time.
    Resize,
    /// The scope tree (`rt::scope`): begin links, cancel walks (then each scope's lock).
    ScopeTree,
    /// A channel's lock; several at once only in a select, by address.
    Chan,
    /// A poll descriptor's lock (then a P's timer lock, to arm a deadline).
    PollDesc,
    /// A P's timer heap; two when a retiring P's timers move, by address.
    Timers,
    /// A scope's published waits (`rt::scope`): taken under a channel or descriptor lock
    /// to publish a wait, and by a cancel, whose wake-ups take `SCHED.lock`.
    ScopeWaits,
    /// `SCHED.lock`.
    Sched,
    /// `SCHED.gfree_lock`.
    Gfree,
    /// A semaphore root's lock (`sync::sema`).
    SemaRoot,
    /// Leaves: an M's affinity queue.
    AffQueue,
    /// Leaf: the central sudog list.
    Sudogs,
    /// Leaf: the list of G chunks (`proc::all_gs`).
    GChunks,
    /// Leaf: the poller's one-time set-up.
    NetpollInit,
    /// Leaf: the template thread's list.
    TemplateThread,
    /// The execution trace's producer lock of threads without a P (then the chunk pool's).
    TraceRing,
    /// Leaf: the list of leaked goroutines (`rt::leaks`).
    Leaks,
    /// Leaf: the execution trace's chunk pool (`traceevent`'s free and sealed lists).
    TraceChunks,
    /// Leaf: the hand-off calls a scope's end interrupts, for sysmon's re-sends.
    ScopeKicks,
}

/// Every rank, in declaration order (a rank's TLS counter is `ALL[r as usize]`'s).
const ALL: [Rank; 18] = [
    Rank::Resize,
    Rank::ScopeTree,
    Rank::Chan,
    Rank::PollDesc,
    Rank::Timers,
    Rank::ScopeWaits,
    Rank::Sched,
    Rank::Gfree,
    Rank::SemaRoot,
    Rank::AffQueue,
    Rank::Sudogs,
    Rank::GChunks,
    Rank::NetpollInit,
    Rank::TemplateThread,
    Rank::TraceRing,
    Rank::Leaks,
    Rank::TraceChunks,
    Rank::ScopeKicks,
];
const _: () = assert!(ALL.len() <= 32 && ALL[ALL.len() - 1] as usize == ALL.len() - 1);

/// The level of the leaves: above every other rank.
const LEAF: u8 = 8;

impl Rank {
    /// The rank's place in the order: a lock may be taken while only lower levels are held.
    pub const fn level(self) -> u8 {
        match self {
            Rank::Resize | Rank::ScopeTree => 1,
            Rank::Chan | Rank::PollDesc => 2,
            Rank::Timers | Rank::ScopeWaits => 3,
            Rank::Sched => 4,
            Rank::Gfree => 5,
            Rank::SemaRoot => 6,
            Rank::TraceRing => 7,
            Rank::AffQueue
            | Rank::Sudogs
            | Rank::GChunks
            | Rank::NetpollInit
            | Rank::TemplateThread
            | Rank::Leaks
            | Rank::TraceChunks
            | Rank::ScopeKicks => LEAF,
        }
    }

    /// Whether a thread may hold several locks of this rank at once.
    pub const fn multi(self) -> bool {
        matches!(self, Rank::Chan | Rank::Timers)
    }

    /// The rank's name in a lock-order message.
    pub const fn name(self) -> &'static str {
        match self {
            Rank::Resize => "the resize lock",
            Rank::ScopeTree => "the scope tree lock",
            Rank::ScopeWaits => "a scope's lock",
            Rank::Chan => "a channel lock",
            Rank::PollDesc => "a poll descriptor lock",
            Rank::Timers => "a P's timer lock",
            Rank::Sched => "SCHED.lock",
            Rank::Gfree => "SCHED.gfree_lock",
            Rank::SemaRoot => "a semaphore root lock",
            Rank::AffQueue => "an M's affinity-queue lock",
            Rank::Sudogs => "the central sudog list lock",
            Rank::GChunks => "the G chunk list lock",
            Rank::NetpollInit => "the poller's init lock",
            Rank::TemplateThread => "the template thread's lock",
            Rank::TraceRing => "the trace's lock of threads without a P",
            Rank::Leaks => "the leaked goroutines' list lock",
            Rank::TraceChunks => "the trace's chunk pool lock",
            Rank::ScopeKicks => "the interrupted calls' list lock",
        }
    }
}

// The calling thread's count of held locks per rank: 32 four-byte counters (a select
// holds as many channel locks as it has channels) in an initial-exec TLS slot (as
// `__gmp_tls_locks`).
#[cfg(debug_assertions)]
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl __gmp_tls_ranks",
    ".hidden __gmp_tls_ranks",
    ".type __gmp_tls_ranks, @object",
    ".size __gmp_tls_ranks, 128",
    "__gmp_tls_ranks:",
    ".zero 128",
    ".popsection",
);

/// Debug builds: the calling thread's count of held locks of the rank with index `i`.
#[cfg(debug_assertions)]
#[inline]
fn rank_count(i: usize) -> u32 {
    let v: u32;
    // SAFETY: reads one counter of the thread's own TLS slot defined above (as
    // `arch::tls_get`); `i` < 32.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::asm!(
            "mov {t}, qword ptr [rip + __gmp_tls_ranks@GOTTPOFF]",
            "mov {v:e}, dword ptr fs:[{t} + {i} * 4]",
            t = out(reg) _,
            i = in(reg) i & 31,
            v = lateout(reg) v,
            options(nostack, readonly, preserves_flags),
        );
    }
    // SAFETY: as above.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        v = (super::tls_addr!("__gmp_tls_ranks") as *const u32)
            .add(i & 31)
            .read_volatile();
    }
    v
}

/// Debug builds: adds `delta` to the calling thread's count of held locks of rank `r`.
#[cfg(debug_assertions)]
#[inline]
fn rank_add(r: Rank, delta: i32) {
    // SAFETY: read-modify-write of one counter of the thread's own TLS slot defined above.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::asm!(
            "mov {t}, qword ptr [rip + __gmp_tls_ranks@GOTTPOFF]",
            "add dword ptr fs:[{t} + {i} * 4], {d:e}",
            t = out(reg) _,
            i = in(reg) r as usize,
            d = in(reg) delta,
            options(nostack),
        );
    }
    // SAFETY: as above; the rank's index is below 32.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        let p = (super::tls_addr!("__gmp_tls_ranks") as *mut u32).add(r as usize & 31);
        p.write_volatile(p.read_volatile().wrapping_add(delta as u32));
    }
}

/// Debug builds: checks that the calling thread may take a lock of rank `r` now (see
/// [`Rank`]), throwing with both ranks' names if not, and counts it held.
#[cfg(debug_assertions)]
pub(crate) fn rank_acquire(r: Rank) {
    for h in ALL {
        if rank_count(h as usize) == 0 {
            continue;
        }
        let ok = h.level() < r.level() || (h == r && r.multi());
        if !ok {
            lock_order_violation(h, r);
        }
    }
    rank_add(r, 1);
}

/// Debug builds: counts a lock of rank `r` released.
#[cfg(debug_assertions)]
pub(crate) fn rank_release(r: Rank) {
    if rank_count(r as usize) == 0 {
        super::throw("unlock of a lock this thread does not hold");
    }
    rank_add(r, -1);
}

#[cfg(debug_assertions)]
#[cold]
#[inline(never)]
fn lock_order_violation(held: Rank, taking: Rank) -> ! {
    let mut buf = [0u8; 128];
    let msg = super::fmt_msg(
        &mut buf,
        &[
            b"lock order: taking ",
            taking.name().as_bytes(),
            b" while holding ",
            held.name().as_bytes(),
        ],
    );
    super::throw(core::str::from_utf8(msg).unwrap_or("lock order"))
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::super::{Lock, real};
    use super::*;

    /// Runs `f` in a forked child and returns its exit status and what it wrote on stderr.
    fn in_child(f: fn()) -> (libc::c_int, String) {
        let mut fds = [0; 2];
        // SAFETY: a valid two-int array.
        assert_eq!(unsafe { real::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child only calls `f` (async-signal-safe lock operations and a write
        // to stderr before abort) and exits; the parent closes its write end.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: plain descriptor calls in the child.
            unsafe {
                real::dup2(fds[1], 2);
                f();
                libc::_exit(0);
            }
        }
        // SAFETY: our descriptors; `buf` is writable for its length.
        unsafe {
            real::close(fds[1]);
            let mut out = Vec::new();
            let mut buf = [0u8; 256];
            loop {
                let n = real::read(fds[0], buf.as_mut_ptr().cast(), buf.len());
                if n <= 0 {
                    break;
                }
                out.extend_from_slice(&buf[..n as usize]);
            }
            real::close(fds[0]);
            let mut status = 0;
            assert_eq!(real::waitpid(pid, &mut status, 0), pid);
            (status, String::from_utf8_lossy(&out).into_owned())
        }
    }

    #[test]
    fn locks_in_order_pass() {
        let (s, out) = in_child(|| {
            let (a, b, c) = (
                Lock::new(Rank::Sched),
                Lock::new(Rank::Gfree),
                Lock::new(Rank::Sudogs),
            );
            a.lock();
            b.lock();
            c.lock();
            c.unlock();
            b.unlock();
            a.unlock();
            let (x, y) = (Lock::new(Rank::Chan), Lock::new(Rank::Chan));
            x.lock();
            y.lock();
            x.unlock();
            y.unlock();
        });
        assert!(
            libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 0,
            "{s:#x}: {out}"
        );
    }

    #[test]
    fn a_lock_out_of_order_throws() {
        let (s, out) = in_child(|| {
            let (a, b) = (Lock::new(Rank::Sched), Lock::new(Rank::Gfree));
            b.lock();
            a.lock();
        });
        assert!(
            libc::WIFSIGNALED(s) && libc::WTERMSIG(s) == libc::SIGABRT,
            "{s:#x}: {out}"
        );
        assert!(
            out.contains("gmp: lock order: taking SCHED.lock while holding SCHED.gfree_lock"),
            "{out}"
        );
    }

    #[test]
    fn two_leaves_or_two_of_a_single_rank_throw() {
        let (s, out) = in_child(|| {
            let (a, b) = (Lock::new(Rank::Sudogs), Lock::new(Rank::Leaks));
            a.lock();
            b.lock();
        });
        assert!(libc::WIFSIGNALED(s), "{s:#x}: {out}");
        assert!(
            out.contains("while holding the central sudog list lock"),
            "{out}"
        );
        let (s, out) = in_child(|| {
            let (a, b) = (Lock::new(Rank::Sched), Lock::new(Rank::Sched));
            a.lock();
            b.lock();
        });
        assert!(libc::WIFSIGNALED(s), "{s:#x}: {out}");
        assert!(
            out.contains("taking SCHED.lock while holding SCHED.lock"),
            "{out}"
        );
    }
}
