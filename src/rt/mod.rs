//! The scheduler: Go's G/M/P model (Go's runtime2.go and proc.go; HACKING.md, decisions
//! 1–3, 8, 9, 11).
//!
//! - [`G`]: a goroutine — a stack, the stack pointer saved while it is not running, and
//!   its status word. Gs are never freed: a dead G keeps its stack and waits on a free
//!   list (per P, then global) for the next `gmp_go`.
//! - [`M`]: an OS thread. It runs the scheduler loop on its own thread stack ("g0") and
//!   switches to goroutines from there. It runs goroutine code only while it holds a P.
//! - [`P`]: a logical processor, the permit to run goroutines, carrying the local run
//!   queue. There are GOMAXPROCS of them.
//!
//! Files, as proc.go's concepts (HACKING.md, "Our files against Go's runtime"):
//! `schedinit.rs` (start-up), `idle.rs` (the idle P and M lists), `ready.rs` (the submit
//! path: runqput, injectglist, the global queue, wakep), `mstart.rs` (newm, mstart, startm,
//! stopm, handoffp), `spinning.rs` (the spinning-M protocol), `schedule.rs` (schedule,
//! execute, find_runnable, steal_work), `foreign.rs` (the foreign-thread mailbox),
//! `lockedm.rs` (stoplockedm, startlockedm), `procresize.rs` (GOMAXPROCS, acquirep),
//! `proc.rs` (newproc, goexit, the G free lists), `park.rs` (gopark/goready, gosched, and
//! the foreign-thread fallbacks), `schedtrace.rs` (schedtrace and gmp_stats), `trace.rs`
//! and `traceevent.rs` (the execution trace: writer and recording), `config.rs`
//! (environment, CPU count), `os_linux.rs` (a new M's thread state, pthread_exit and
//! fork). HACKING.md, "The layers", draws their floors.
//!
//! # Ownership by status (who may touch what)
//!
//! A `G`'s plain (non-atomic) fields belong to whoever owns the G, and ownership follows
//! its status; moving a G between owners goes through a release/acquire pair (a run
//! queue's tail, the scheduler lock, a status CAS), so the next owner sees the writes of
//! the previous one.
//!
//! | status         | meaning                                 | owner of the G and its stack             | who may leave the state |
//! |----------------|-----------------------------------------|-------------------------------------------|-------------------------|
//! | `G_IDLE`       | just allocated                           | the allocating thread                     | `newproc` → RUNNABLE    |
//! | `G_RUNNABLE`   | on exactly one run queue                  | the queue; the stack is not owned         | the M that dequeues it (`execute`) → RUNNING |
//! | `G_RUNNING`    | executing user code                       | its M (`g.m`, `m.curg == g`, `m.p != 0`)  | its M: `gopark` → WAITING, `gosched` → RUNNABLE, `goexit` → DEAD |
//! | `G_WAITING`    | parked in a wait queue (sema, channel…)  | the wait queue; nobody runs it             | the waker (`goready`) → RUNNABLE |
//! | `G_DEAD`       | finished, on a free list                  | the free list (stack kept)                | `newproc` reusing it → RUNNABLE |
//!
//! | `G_SYSCALL`    | in a blocking call (syscall.rs)          | its M (`g.m`, `m.curg == g`; `m.p == 0`, `m.oldp` = the P it left in P_SYSCALL, or null while the M waits on `affwait` for a P) | its M only: `exitsyscall` → RUNNING |
//!
//! "On exactly one run queue" counts an M's affinity queue (`m.aff`, affinity.rs): a
//! RUNNABLE goroutine bound to an M (`g.affm`) waits there and nowhere else. One RUNNABLE
//! goroutine is on no queue: the one `lockedm::lock_move` hands to an M as its `lockedg`
//! with `lockstart` set, which that M alone runs next.
//! `G_PREEMPTED` comes with the preemption issue.
//!
//! A `P`'s status: `P_IDLE` (on the idle list, no M; only a holder of `SCHED.lock` moves it
//! off), `P_RUNNING` (owned by `p.m`, which alone moves it), `P_SYSCALL` (its M is in a
//! blocking call; `p.m == 0`, the M keeps it in `m.oldp`; up for grabs: whoever CASes it
//! away — the M itself on return → RUNNING, sysmon's `retake` → IDLE, or another M's
//! `exitsyscall` fast path that finds it in `m.oldp` after an ABA → RUNNING — owns it),
//! `P_DEAD` (not among the first GOMAXPROCS; only `procresize` under `SCHED.lock` revives
//! it).
//!
//! An `M` has no status word; its state is the combination of fields (as in Go's
//! runtime2.go; HACKING.md, "State machines"): running a G (`curg != 0, p != 0`), in the scheduler (`curg == 0,
//! p != 0`), spinning (`spinning`, holds a P), idle (on `SCHED.midle`, `p == 0`, asleep on
//! `park`; `mlist == MLIST_IDLE`), waiting for a P for work only it can run (on
//! `SCHED.affwait`, `mlist == MLIST_AFFWAIT`, asleep on `park`, woken only by a P
//! hand-over: `pidleput`, `handoffp`, a busy P's 61-tick check, or `procresize`),
//! locked-idle (`lockedg != 0`, asleep on `park` until its G is runnable), in a syscall
//! (`curg` in G_SYSCALL, `p == 0`, `oldp != 0`; on return without a P it waits on
//! `affwait` with `curg` still in G_SYSCALL), the timer M (asleep on `park` with a
//! deadline, see timer.rs), or dead (`dead`, its thread exited because its goroutine
//! ended locked). Who moves an M on or off a list: the M itself puts itself on one
//! (`stopm`, `wait_for_p`); `startm` takes it off `midle`, and so does `lock_move` (an M
//! nothing is bound to, which it locks to a goroutine before waking it); a readier of a goroutine
//! affine to it moves it from `midle` to `affwait` or wakes it with a P
//! (`wake_affine_m`); a P hand-over takes it off `affwait` — all under `SCHED.lock`.
//!
//! # Lock order
//!
//! One table, `sys::Rank` (Go's lockrank), which debug builds check at every lock, and
//! HACKING.md's "The lock order" beside it. No lock is held across a goroutine switch
//! (gopark's unlock function releases the lock a parking goroutine took, on the scheduler
//! stack).

pub mod runq;

mod affinity;
pub(crate) mod asan;
pub(crate) mod checkdead;
mod coarsetime;
mod config;
pub(crate) mod cpuprof;
mod customlabels;
pub(crate) mod dump;
mod epoll;
mod foreign;
pub(crate) mod foreignwait;
pub(crate) mod hookflags;
pub(crate) mod hooks;
mod idle;
pub(crate) mod labels;
pub mod leaks;
mod lockedm;
pub mod lockosthread;
#[cfg(all(test, loom))]
mod mailbox_loom;
pub mod metrics;
mod mstart;
pub mod netpoll;
#[cfg(all(test, loom))]
mod netpoll_loom;
mod newm;
pub mod offload;
pub mod os_linux;
mod park;
mod preempt;
mod preemptsig;
mod proc;
mod procresize;
mod profbuf;
mod ready;
mod schedinit;
pub(crate) mod schedlat;
pub mod schedtrace;
mod schedule;
pub mod scope;
pub(crate) mod scopecall;
mod sigpreempt;
mod sigprof;
#[cfg(all(test, loom))]
mod sigprof_loom;
mod spinning;
#[cfg(all(test, loom))]
mod spinning_loom;
pub(crate) mod stackhwm;
mod steal;
mod stopm;
pub(crate) mod sudog;
pub mod syscall;
mod sysmon;
mod sysmonwake;
mod taskfile;
mod threads;
pub mod timer;
mod timerheap;
pub(crate) mod trace;
mod traceevent;
pub(crate) mod tsan;
mod unseen;

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::ptr::null_mut;
use core::sync::atomic::{
    AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize,
    Ordering,
};

use crate::stack::Stack;
use crate::sys::{Lock, Note};
use runq::RunQueue;

pub use affinity::{Bound, bind_current};
pub use config::{default_maxprocs, num_cpu};
pub(crate) use park::wake_waiter;
pub use park::{GoParkUnlock, gopark, goready, gosched};
pub use proc::{
    StartError, defer_pop, defer_push, goexit, newproc, preempt_check, preempt_check_bound,
    preempt_wanted,
};
pub use schedinit::{gomaxprocs, init};

/// The largest GOMAXPROCS (Go's `_MaxGomaxprocs` is 1024 too).
pub(crate) const MAX_PROCS: usize = 1024;

/// A goroutine that has run this long without passing through the scheduler is asked to
/// yield at its next safe point (Go's `forcePreemptNS`).
pub(crate) const FORCE_PREEMPT_NS: i64 = 10_000_000;

/// Default thread-count fuse (Go's `maxmcount`): past it the runtime aborts with
/// `gmp: thread exhaustion` rather than let a runaway program exhaust the system.
pub(crate) const DEFAULT_MAX_THREADS: i32 = 10_000;

// G statuses (Go's values, so scheddetail output reads the same).
pub(crate) const G_IDLE: u32 = 0;
pub(crate) const G_RUNNABLE: u32 = 1;
pub(crate) const G_RUNNING: u32 = 2;
pub(crate) const G_SYSCALL: u32 = 3;
pub(crate) const G_WAITING: u32 = 4;
pub(crate) const G_DEAD: u32 = 6;

// P statuses.
pub(crate) const P_IDLE: u32 = 0;
pub(crate) const P_RUNNING: u32 = 1;
pub(crate) const P_SYSCALL: u32 = 2;
pub(crate) const P_DEAD: u32 = 4;

/// A goroutine's entry function, as C sees it.
pub type GoFn = unsafe extern "C" fn(*mut c_void);

/// Why a goroutine is waiting (scheddetail prints it in parentheses, as Go does).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum WaitReason {
    None = 0,
    Semacquire = 1,
    WaitGroupWait = 2,
    Sleep = 3,
    ChanSend = 4,
    ChanRecv = 5,
    Select = 6,
    IoWait = 7,
    /// In a blocking call a helper thread makes for it (offload.rs).
    Syscall = 8,
    /// In `gmp_scope_wait`, for a scope's goroutines to end.
    ScopeWait = 9,
}

impl WaitReason {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::None => "",
            WaitReason::Semacquire => "semacquire",
            WaitReason::WaitGroupWait => "sync.WaitGroup.Wait",
            WaitReason::Sleep => "sleep",
            WaitReason::ChanSend => "chan send",
            WaitReason::ChanRecv => "chan receive",
            WaitReason::Select => "select",
            WaitReason::IoWait => "IO wait",
            WaitReason::Syscall => "syscall",
            WaitReason::ScopeWait => "scope wait",
        }
    }
    fn from_u8(v: u8) -> WaitReason {
        match v {
            1 => WaitReason::Semacquire,
            2 => WaitReason::WaitGroupWait,
            3 => WaitReason::Sleep,
            4 => WaitReason::ChanSend,
            5 => WaitReason::ChanRecv,
            6 => WaitReason::Select,
            7 => WaitReason::IoWait,
            8 => WaitReason::Syscall,
            9 => WaitReason::ScopeWait,
            _ => WaitReason::None,
        }
    }
}

/// A cell whose contents only its owner touches; who the owner is, each field's doc says.
/// It exists so that structs shared between threads (`&M`, `&P`) can carry owner-only
/// state without pretending it is atomic.
pub struct Owned<T>(UnsafeCell<T>);

// SAFETY: every access goes through `get`/`set`/`ptr`, whose callers promise (and
// document) that they are the field's owner, so there is never a concurrent access.
unsafe impl<T> Sync for Owned<T> {}

impl<T> Owned<T> {
    pub const fn new(v: T) -> Self {
        Owned(UnsafeCell::new(v))
    }
    /// # Safety
    /// The caller is the owner the field's documentation names.
    #[inline]
    pub unsafe fn ptr(&self) -> *mut T {
        self.0.get()
    }
}

impl<T: Copy> Owned<T> {
    /// # Safety
    /// The caller is the owner the field's documentation names.
    #[inline]
    pub unsafe fn get(&self) -> T {
        // SAFETY: the caller owns the field (no concurrent writer).
        unsafe { *self.0.get() }
    }
    /// # Safety
    /// The caller is the owner the field's documentation names.
    #[inline]
    pub unsafe fn set(&self, v: T) {
        // SAFETY: the caller owns the field (no concurrent access).
        unsafe { *self.0.get() = v }
    }
}

/// A goroutine. Aligned so that two Gs running on different Ms never share a cache line
/// (`sp` and `status` are written at every switch).
#[repr(align(128))]
pub struct G {
    /// Stack pointer saved by `arch::switch` while the G is not running. Owner: the G's
    /// owner per its status (table above).
    pub sp: Owned<usize>,
    /// One of the `G_*` statuses; changed only by `casgstatus`.
    pub status: AtomicU32,
    /// Goroutine id; set by `newproc` before the G is published. Atomic because trace reads it.
    pub goid: AtomicU64,
    /// The stack. Owner: the G's owner. `None` for a dead G whose stack was released or
    /// given to a starting goroutine, and for a goroutine that has not started and was
    /// promised one (`sp` says of what size; see `SP_UNSTARTED`).
    pub stack: Owned<Option<Stack>>,
    /// What to run and its argument. Owner: the G's owner.
    pub entry: Owned<Option<GoFn>>,
    pub arg: Owned<*mut c_void>,
    /// Link in the global run queue and in the free lists. Owner: whoever holds the list's lock.
    pub schedlink: Owned<*mut G>,
    /// The M running it (RUNNING only), for the triangle invariant and scheddetail.
    pub m: AtomicPtr<M>,
    /// The M this G is locked to (LockOSThread): only that M runs it, and it runs nothing
    /// else. Written by the G's own thread while it runs; by `newproc` (`LOCK_AT_START`
    /// for GMP_GO_LOCKED, else null) and by `lockedm::start_locked`/`lock_move` (which own
    /// the G they dequeued or stopped) before it runs.
    pub lockedm: AtomicPtr<M>,
    /// The M this G is affine to (started with `GMP_GO_PINNED`; affinity.rs): only that M
    /// runs it, and runs other goroutines too. Set by the first M that runs the G, cleared
    /// when it exits; read by whoever readies it.
    pub affm: AtomicPtr<M>,
    /// Bind to the first M that runs it (attribute of `gmp_go`). Owner: the G's owner.
    pub pinned: Owned<bool>,
    /// Started on a released stack whose high-water mark `goexit0` measures
    /// (`stackhwm`). Owner: the G's M.
    pub hwm: Owned<bool>,
    /// `lockedm` was set by an asynchronous preemption, for that one stop: `execute`
    /// clears it when the G resumes (`park::gopreempt_bound`). Owner: the G's M.
    pub asyncbound: Owned<bool>,
    /// Why it waits (WAITING only).
    pub waitreason: AtomicU8,
    /// When it parked (`coarsetime::COARSE_NOW`, sysmon's clock), for the dump's "N minutes".
    /// Written by gopark; read racily by the dump.
    pub waitsince: AtomicI64,
    /// The goroutine that started it (0: a thread outside the runtime). Set by newproc,
    /// read by the dump. Here rather than in `GExt`: a spawn writes it, and a store to the
    /// out-of-line record (a cache line of its own, cold for a reused G) would cost every
    /// spawn a cache miss (`scripts/ab.sh skynet`).
    pub parentgoid: AtomicU64,
    /// What the sanitizer hooks keep per goroutine, out of line and allocated only when
    /// one of them first needs it (`G::ext`): a G is exactly 128 bytes (two cache lines
    /// with the adjacent-line prefetcher; one more field makes it 256, which pingpong and
    /// yield2 feel: `scripts/ab.sh pingpong`), and a parked goroutine costs its stack page plus the G, no
    /// more. Null until then. Owner: the G's M (the hooks run on it).
    ext: Owned<*mut GExt>,
    /// Cleanups `goexit` runs, innermost first, if the goroutine ends before popping them
    /// (Go's `_defer` list; records live in the frames that pushed them, see
    /// `proc::defer_push`). Empty whenever the G is not running. Owner: the G's M.
    pub defers: Owned<*mut Defer>,
    /// Debug builds: whether the G sits on a run queue (a runnable G is on exactly one).
    #[cfg(debug_assertions)]
    pub queued: AtomicBool,
}

/// A goroutine's sanitizer state and labels (`G::ext`), allocated on first use and never
/// freed.
pub struct GExt {
    /// ASan's fake-stack save for this goroutine while it is switched away (asan.rs).
    /// Owner: the G's M.
    pub asan_fake: Owned<usize>,
    /// Its ThreadSanitizer fiber (tsan.rs), created when it first runs. Owner: the G's M.
    pub tsan_fiber: Owned<usize>,
    /// Its labels (labels.rs), null for none. Owner: the G's M.
    pub(crate) labels: Owned<*mut labels::LabelSet>,
    /// The trace chunk its labels were last written to (traceevent.rs), or
    /// `labels::LABELS_CHANGED`. Owner: the G's M.
    pub(crate) trace_seq: Owned<u64>,
    /// Its current scope (a reference), null for none: a `scope::Scope`, its type erased
    /// here because scope.rs sits on a higher floor (it parks). Owner: the G's M.
    pub(crate) scope: Owned<*const ()>,
    /// The scope it was started in (borrowed through `scope`'s chain of parents; erased
    /// as `scope`): the scopes between the two are the ones it began. Owner: the G's M.
    pub(crate) scope_base: Owned<*const ()>,
}

// A G stays within 128 bytes (see `G::ext`).
const _: () = assert!(core::mem::size_of::<G>() <= 128 || cfg!(debug_assertions));

// SAFETY: a G moves between threads by design; its non-atomic fields are `Owned`, whose
// access discipline is the status table above.
unsafe impl Send for G {}
// SAFETY: as above.
unsafe impl Sync for G {}

impl G {
    fn new() -> G {
        G {
            sp: Owned::new(0),
            status: AtomicU32::new(G_IDLE),
            goid: AtomicU64::new(0),
            stack: Owned::new(None),
            entry: Owned::new(None),
            arg: Owned::new(null_mut()),
            schedlink: Owned::new(null_mut()),
            m: AtomicPtr::new(null_mut()),
            lockedm: AtomicPtr::new(null_mut()),
            affm: AtomicPtr::new(null_mut()),
            pinned: Owned::new(false),
            asyncbound: Owned::new(false),
            hwm: Owned::new(false),
            waitreason: AtomicU8::new(0),
            waitsince: AtomicI64::new(0),
            parentgoid: AtomicU64::new(0),
            ext: Owned::new(null_mut()),
            defers: Owned::new(null_mut()),
            #[cfg(debug_assertions)]
            queued: AtomicBool::new(false),
        }
    }

    /// The sanitizer state, allocated by the first call.
    ///
    /// # Safety
    /// On the G's M (the owner of `ext`): a hook running for it.
    pub(crate) unsafe fn ext(&self) -> &'static GExt {
        // SAFETY: caller contract: we own the field.
        unsafe {
            let mut e = self.ext.get();
            if e.is_null() {
                e = Box::leak(Box::new(GExt {
                    asan_fake: Owned::new(0),
                    tsan_fiber: Owned::new(0),
                    labels: Owned::new(core::ptr::null_mut()),
                    scope: Owned::new(core::ptr::null()),
                    scope_base: Owned::new(core::ptr::null()),
                    trace_seq: Owned::new(0),
                }));
                self.ext.set(e);
            }
            &*e
        }
    }

    /// The sanitizer state if some hook allocated it already. Never allocates: for a hook
    /// that runs inside a fiber switch (ASan's finish must come before anything else).
    ///
    /// # Safety
    /// As for [`G::ext`].
    pub(crate) unsafe fn ext_if_any(&self) -> Option<&'static GExt> {
        // SAFETY: caller contract; a non-null pointer is a leaked GExt.
        unsafe { self.ext.get().as_ref() }
    }

    pub fn goid(&self) -> u64 {
        self.goid.load(Ordering::Relaxed)
    }

    pub fn waitreason(&self) -> WaitReason {
        WaitReason::from_u8(self.waitreason.load(Ordering::Relaxed))
    }
}

/// Changes `gp`'s status from `old` to `new`; any other current status is a broken
/// invariant.
///
/// Every status has exactly one thread that may leave it (the table at the top of this
/// file), and the G reaches that thread through a release/acquire pair of its own (a run
/// queue, a wait queue's lock, a waiter's claim), so no two threads ever race to change a
/// status. Release builds therefore check with a plain load and publish with a release
/// store, as `syscall::setgstatus_own` does: a CAS here would be three of the round
/// trip's locked instructions on each side of a channel ping-pong (~20 cycles each on
/// Intel cores).
/// Debug builds keep the CAS, which also catches two threads breaking that rule at once.
#[inline]
pub fn casgstatus(gp: &G, old: u32, new: u32) {
    // Only defined statuses, and no transition to the same one.
    #[cfg(debug_assertions)]
    {
        if !matches!(
            new,
            G_IDLE | G_RUNNABLE | G_RUNNING | G_SYSCALL | G_WAITING | G_DEAD
        ) || old == new
        {
            throw("casgstatus: undefined status or no-op transition");
        }
        if gp
            .status
            .compare_exchange(old, new, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            throw("casgstatus: bad incoming status");
        }
    }
    #[cfg(not(debug_assertions))]
    {
        if gp.status.load(Ordering::Relaxed) != old {
            throw("casgstatus: bad incoming status");
        }
        gp.status.store(new, Ordering::Release);
    }
}

/// What a goroutine asks its M's scheduler loop to do when it switches to g0 (the value
/// passed through `arch::switch`).
pub(crate) mod action {
    /// `gopark`: mark it waiting, run the unlock function.
    pub(crate) const PARK: usize = 1;
    /// `gosched` (gmp_yield): put it at the back of the local run queue (Go's goyield).
    pub(crate) const GOSCHED: usize = 2;
    /// `goexit`: it is finished.
    pub(crate) const EXIT: usize = 3;
    /// Preemption at a safe point: put it on the global run queue, behind everything
    /// waiting there (Go's gopreempt_m).
    pub(crate) const PREEMPT: usize = 4;
    /// `gmp_lock_os_thread` on a thread that goroutines are bound to: run it on another
    /// thread, locked to it (`lockedm::lock_move`).
    pub(crate) const LOCKMOVE: usize = 5;
}

/// The unlock function `gopark` runs on the scheduler stack once the goroutine's context
/// is saved; returning false cancels the park (the goroutine resumes at once).
pub type UnlockFn = unsafe fn(gp: *mut G, arg: usize) -> bool;

/// An OS thread. Aligned so that two Ms' per-switch fields (`g0_sp`, `curg`) never share a
/// cache line.
#[repr(align(128))]
pub struct M {
    pub id: i64,
    /// The scheduler context's stack pointer, saved while a goroutine runs on this M.
    /// Owner: this M's thread.
    pub g0_sp: Owned<usize>,
    /// The scheduler context's floating-point control state (`arch::fpenv_current` at
    /// `mstart`; the scheduler never changes it), so that `execute` can switch without
    /// reading it. Owner: this M's thread.
    pub g0_fpenv: Owned<u64>,
    /// The goroutine running on this M, or null while in the scheduler.
    pub curg: AtomicPtr<G>,
    /// The attached P. Written by this M only (acquirep/releasep); read by trace.
    pub p: AtomicPtr<P>,
    /// A P handed to this M by `startm`/`startlockedm` before waking it; taken by the M.
    pub nextp: AtomicPtr<P>,
    /// Whether the M is spinning (looking for work while holding a P, counted in
    /// `SCHED.nmspinning`). Written by this M, or by `startm` before the M is woken.
    pub spinning: AtomicBool,
    /// Asleep on `park` (for scheddetail).
    pub blocked: AtomicBool,
    /// As the timer M, it sleeps in the poller (`epoll_wait`), not on its note: a waker
    /// that claims it breaks the poll. Written by this M before it publishes itself as the
    /// timer M (`schedule::sleep_as_timer_m`); it changes only from false to true (the
    /// poller, once made, stays), and a claimed M that sleeps on its note does not leave
    /// before its claimer's wakeup, so the claimer reads the value of the claimed sleep.
    pub timer_poll: AtomicBool,
    /// `lockedg` was handed to this M runnable, with the P it was given, by `lock_move`:
    /// run it at once instead of waiting for it in `stoplockedm`. Written by `lock_move`
    /// while the M sleeps on no list (or before its thread starts), published by the
    /// wake-up; then owned by this M's thread, which clears it.
    /// (Beside the other flags, on the line `schedule` reads anyway: it checks this
    /// every round.)
    pub lockstart: Owned<bool>,
    /// Where this M sleeps when idle (stopm) or locked-idle (stoplockedm).
    pub park: Note,
    /// Links in `SCHED.midle` (both) or `SCHED.affwait` (`schedlink` only), and which of
    /// the two lists the M is on (`MLIST_*`). Owner: holder of `SCHED.lock`.
    pub schedlink: Owned<*mut M>,
    pub schedprev: Owned<*mut M>,
    pub mlist: Owned<u8>,
    /// Goroutines affine to this M, runnable (affinity.rs).
    pub aff: AffQueue,
    /// Affine work was queued for this M after it went idle, before it reached an idle
    /// list: it must get a P instead of sleeping. Written under `SCHED.lock`.
    pub affwanted: AtomicBool,
    /// Live goroutines affine to this M (pinned to it). Owner: this M's thread (pinned
    /// goroutines bind and exit on it).
    pub naffine: Owned<u32>,
    /// An affine goroutine just yielded: the next schedule prefers the local run queue.
    /// Owner: this M's thread.
    pub affskip: Owned<bool>,
    /// Whose turn it is when both the global run queue and this M's preempted goroutines
    /// (`aff`'s preempted list) hold some: the global queue's when set
    /// (`ready::globrunqget_or_preempted`). Owner: this M's thread.
    pub globturn: Owned<bool>,
    /// The G locked to this M (pinned), or null.
    pub lockedg: AtomicPtr<G>,
    /// gopark's unlock function and its argument. Owner: this M's thread.
    pub waitunlockf: Owned<Option<UnlockFn>>,
    pub waitlock: Owned<usize>,
    /// Random state for the steal order. Owner: this M's thread.
    pub fastrand: Owned<u64>,
    /// Goroutines this M may make runnable before it times the wait of the next one
    /// (`schedlat`'s countdown). Owner: this M's thread.
    pub schedlat_tick: Owned<u32>,
    /// When (or after how many starts) this M next measures the stack high-water mark of
    /// a goroutine it starts (`stackhwm::sample`). Owner: this M's thread.
    pub stackhwm_next: Owned<i64>,
    /// The P this M left in P_SYSCALL when its goroutine entered a blocking call; it takes
    /// it back on return if nobody retook it. Written by this M only; atomic for trace.
    pub oldp: AtomicPtr<P>,
    /// `oldp.syscalltick` at entersyscall. Owner: this M's thread.
    pub syscalltick: Owned<u32>,
    /// Wrapped blocking calls (`syscall::blocking`: gmp_blocking, gmp_read…) in progress
    /// on this M's goroutine, which is in G_SYSCALL meanwhile and cannot leave the M;
    /// gmp_exitsyscall refuses to end a syscall while one runs. Owner: this M's thread.
    pub inblocking: Owned<u32>,
    /// LockOSThread nesting count (Go's `lockedExt`). Owner: this M's thread.
    pub lockedext: Owned<u32>,
    /// Set by goexit0 when the goroutine ended locked: the M exits its thread. Owner: this
    /// M's thread.
    pub exiting: Owned<bool>,
    /// The thread exited: the M is on `SCHED.mfree` (it stays on `allm`, never freed,
    /// until `allocm` revives it for a new thread).
    pub dead: AtomicBool,
    /// Kernel thread id (for scheddetail and tests).
    pub tid: AtomicI32,
    /// Link in `SCHED.allm` (append-only).
    pub alllink: AtomicPtr<M>,
    /// ASan (asan.rs): the scheduler context's fake-stack save while a goroutine runs, and
    /// the bounds of the M's own stack. Owner: this M's thread.
    pub asan_fake: Owned<usize>,
    pub asan_g0: Owned<(usize, usize)>,
    /// The TSan fiber of this M's own stack (tsan.rs). Owner: this M's thread.
    pub tsan_g0: Owned<usize>,
    /// `sys::FOREIGN_ACTS` when this M last looked, going idle (`find_runnable`'s spin
    /// for a foreign thread). Owner: this M's thread.
    pub foreign_seen: Owned<u64>,
    /// The goroutine this M last took from `find_runnable` came through the foreign
    /// spinner's mailbox: a foreign thread is in an exchange with it, so the next
    /// `find_runnable` spins for it again without first reading `sys::FOREIGN_ACTS`
    /// (the foreign thread bumps it at every wait: a cache miss before the mailbox opens).
    /// Owner: this M's thread.
    pub foreign_handoff: Owned<bool>,
    /// The unseen blocking call sysmon last saw this M's thread asleep in (unseen.rs).
    pub unseen: Seen,
    /// The thread's voluntary context switches at the last preemption look, and whether
    /// there was one (`preempt::computing`): a thread is signalled only if it has not
    /// slept since. Written by whoever looks (sysmon, or an M stepping in for timers;
    /// racing writers only make one look less precise).
    pub vcsw_seen: [AtomicU64; 2],
    /// The thread's /proc task files sysmon reads, kept open (`taskfile::read_task_file`):
    /// thread id << 32 | fd, or `NO_TASK_FD`; and the try-lock of whoever reads
    /// them.
    pub task_fds: [AtomicU64; 3],
    pub task_lock: AtomicBool,
    /// The source that sends the thread its preemption signal in user code only
    /// (preemptsig.rs), armed under `task_lock`.
    pub preemptsig: PreemptSig,
    /// The CPU profile's timer on this M's thread (sigprof.rs): `tid << 32 | (timer id +
    /// 1)`, or 0. Swapped by whoever arms or disarms it (the profile's start and stop, and
    /// the M's own thread in `mstart`).
    pub proftimer: AtomicU64,
}

// SAFETY: an M is shared through raw pointers between threads; its non-atomic fields are
// `Owned` and documented with their owner.
unsafe impl Sync for M {}
// SAFETY: as above.
unsafe impl Send for M {}

/// A logical processor. Aligned so that one P's owner-written fields never share a cache
/// line with another P's run-queue indices, which thieves read.
#[repr(align(128))]
pub struct P {
    pub id: i32,
    /// One of the `P_*` statuses.
    pub status: AtomicU32,
    /// The M holding this P (P_RUNNING), or null. Reciprocal with `m.p` (invariant 7).
    pub m: AtomicPtr<M>,
    /// The local run queue (owner: the holding M; thieves steal through its API).
    pub runq: RunQueue<G>,
    /// Incremented each time the holding M schedules a G without inheriting a time slice.
    /// Written by the owner only; atomic so that trace can read it.
    pub schedtick: AtomicU32,
    /// Link in `SCHED.pidle`. Owner: holder of `SCHED.lock`.
    pub link: Owned<*mut P>,
    /// Dead Gs whose stacks ran here last, the most recent on top (`gfput` after an exit):
    /// `take_hot_stack` hands their stacks, still faulted in and warm, to the goroutines
    /// that start here. Owner: the holding M.
    pub gfree: Owned<GList>,
    /// Dead Gs whose stacks are cold: those that traded their stack in `take_hot_stack`
    /// (they hold the starting goroutine's own, often never touched) and those taken off the
    /// global cache. `newproc` on this P takes these first. Owner: the holding M.
    pub gfree_cold: Owned<GList>,
    /// Length of `gfree` and `gfree_cold` together, readable by trace.
    pub gfreecnt: AtomicI32,
    /// Preemption request (Go's `gp.preempt`, kept on the P because sysmon sees Ps, not
    /// Gs): set by sysmon when the P has run goroutines for `FORCE_PREEMPT_NS` without a
    /// new time slice (same `schedtick`, which a goroutine readied into `runnext` inherits);
    /// cleared by the holding M in `schedule`, which then serves the global queue first
    /// and starts a new slice. Honoured at every safe point (`proc::preempt_check`) and at
    /// every park or yield (they pass through `schedule`). A stale request (the slice
    /// changed between sysmon's look and its store) preempts one goroutine early: harmless.
    pub preempt: AtomicBool,
    /// Goroutine ids reserved for this P, `[next, end)` (Go's goidcache: one shared
    /// atomic add per `GOID_CACHE_BATCH` spawns). Owner: the holding M.
    pub goidcache: Owned<(u64, u64)>,
    /// Stacks promised to this P by `stack::reserve` and not yet handed to a goroutine, and
    /// their size: a spawn here takes one for a goroutine that starts without a stack
    /// (`proc::take_ticket`), and a start that finds a dead G's stack gives one back
    /// (`proc::return_ticket`). Owner: the holding M.
    pub stack_tickets: Owned<Tickets>,
    /// Goroutines ended on this P, and goroutines started on it: counts that only grow,
    /// written by the holding M only (`owner_inc`: load + store, no read-modify-write),
    /// summed by `goroutine_count` and `spawned_count`.
    pub nexited: AtomicU64,
    pub nspawned: AtomicU64,
    /// This P's timer heap (see timer.rs).
    pub timers: timerheap::Timers,
    /// Incremented by whoever takes the P back after a syscall (its M's exitsyscall fast
    /// path, or sysmon's retake): sysmon retakes a P only if it saw the same value one
    /// tick earlier. Written by the P's owner; read by sysmon.
    pub syscalltick: AtomicU32,
    /// What sysmon last saw of this P (Go's `sysmontick`). Owner: the sysmon thread.
    pub sysmontick: Owned<SysmonTick>,
    /// Free sudogs (Go's `sudogcache`; see chan/sudog.rs). Owner: the holding M.
    pub(crate) sudogcache: Owned<sudog::SudogCache>,
    /// The runnable waits timed on this P (`schedlat`). Owner: the holding M.
    pub(crate) schedlat: schedlat::Histogram,
}

/// Goroutine ids a P reserves at a time (Go's `_GoidCacheBatch`).
pub(crate) const GOID_CACHE_BATCH: u64 = 16;

/// Adds one to a counter that only the caller writes (a P's, by its holding M): a plain
/// load and store, which is cheaper than an atomic add and exact for a single writer.
/// The store releases what the caller did before (a goroutine's start, for its end).
#[inline]
pub(crate) fn owner_inc(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Release);
}

/// Iterates over every P ever created (Ps are created in id order and never freed).
pub(crate) fn all_ps() -> impl Iterator<Item = &'static P> {
    SCHED.allp.iter().map_while(|a| {
        let pp = a.load(Ordering::Acquire);
        // SAFETY: Ps are never freed.
        (!pp.is_null()).then(|| unsafe { &*pp })
    })
}

/// Live goroutines: those started less those ended, taken without stopping anything.
/// Every end is read before every start, so each end counted has its start counted too
/// (it happened before the end, which the acquiring load synchronises with): a goroutine
/// that lives through the call is always counted, whatever starts and ends on other Ps
/// meanwhile; one that starts or ends during the call may be counted or not.
pub fn goroutine_count() -> i64 {
    let ended: u64 = all_ps().map(|p| p.nexited.load(Ordering::Acquire)).sum();
    spawned_count().wrapping_sub(ended) as i64
}

/// Goroutines started since the runtime started: the foreign threads' starts plus every
/// P's.
pub fn spawned_count() -> u64 {
    SCHED.spawned.load(Ordering::Acquire)
        + all_ps()
            .map(|p| p.nspawned.load(Ordering::Acquire))
            .sum::<u64>()
}

// SAFETY: non-atomic fields are `Owned` with documented owners.
unsafe impl Sync for P {}
// SAFETY: as above.
unsafe impl Send for P {}

/// An intrusive singly linked stack of Gs through `schedlink`.
pub struct GList {
    head: *mut G,
    len: i32,
}

impl Default for GList {
    fn default() -> Self {
        Self::new()
    }
}

impl GList {
    pub const fn new() -> GList {
        GList {
            head: null_mut(),
            len: 0,
        }
    }
    /// # Safety
    /// `gp` is valid and owned by the list's owner; it is on no other list.
    pub unsafe fn push(&mut self, gp: *mut G) {
        // SAFETY: the caller owns gp and this list.
        unsafe { (*gp).schedlink.set(self.head) };
        self.head = gp;
        self.len += 1;
    }
    /// The G `pop` would return, left on the list.
    pub fn peek(&self) -> *mut G {
        self.head
    }
    /// Detaches the bottom `n` Gs (0 < n <= len), walking the `len - n` above them, and
    /// returns that chain's first G (linked by `schedlink`, the last one's null).
    ///
    /// # Safety
    /// The caller owns the list.
    pub unsafe fn split_bottom(&mut self, n: i32) -> *mut G {
        debug_assert!(n > 0 && n <= self.len);
        let keep = self.len - n;
        // SAFETY: every G walked is on this list, which the caller owns.
        unsafe {
            let head = if keep == 0 {
                let h = self.head;
                self.head = null_mut();
                h
            } else {
                let mut last = self.head;
                for _ in 1..keep {
                    last = (*last).schedlink.get();
                }
                let h = (*last).schedlink.get();
                (*last).schedlink.set(null_mut());
                h
            };
            self.len = keep;
            head
        }
    }
    /// Puts the chain `head ..= tail` of `n` Gs (linked by `schedlink`) on top of the list.
    ///
    /// # Safety
    /// The chain is valid, owned by the caller and on no list.
    pub unsafe fn push_chain(&mut self, head: *mut G, tail: *mut G, n: i32) {
        // SAFETY: the caller owns the chain and this list.
        unsafe { (*tail).schedlink.set(self.head) };
        self.head = head;
        self.len += n;
    }
    /// # Safety
    /// The caller owns the list.
    pub unsafe fn pop(&mut self) -> Option<*mut G> {
        if self.head.is_null() {
            return None;
        }
        let gp = self.head;
        // SAFETY: gp is on this list, which the caller owns.
        self.head = unsafe { (*gp).schedlink.get() };
        self.len -= 1;
        Some(gp)
    }
    pub fn len(&self) -> i32 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.head.is_null()
    }
}

/// A FIFO queue of Gs through `schedlink` (the global run queue).
pub struct GQueue {
    head: *mut G,
    tail: *mut G,
}

impl Default for GQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl GQueue {
    pub const fn new() -> GQueue {
        GQueue {
            head: null_mut(),
            tail: null_mut(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.head.is_null()
    }
    /// # Safety
    /// `gp` is valid, owned by the caller and on no other list; the caller holds the queue's lock.
    pub unsafe fn push_back(&mut self, gp: *mut G) {
        // SAFETY: the caller owns gp and the queue.
        unsafe {
            (*gp).schedlink.set(null_mut());
            if self.tail.is_null() {
                self.head = gp;
            } else {
                (*self.tail).schedlink.set(gp);
            }
        }
        self.tail = gp;
    }
    /// # Safety
    /// The caller holds the queue's lock.
    pub unsafe fn pop_front(&mut self) -> Option<*mut G> {
        if self.head.is_null() {
            return None;
        }
        let gp = self.head;
        // SAFETY: gp is on this queue, which the caller owns.
        self.head = unsafe { (*gp).schedlink.get() };
        if self.head.is_null() {
            self.tail = null_mut();
        }
        Some(gp)
    }
}

/// Keeps a field on a cache line (pair) of its own: the scheduler lock and the counters
/// every M reads on every pass (`nmspinning`, `npidle`, `runqsize`, `gomaxprocs`) would
/// otherwise share lines, and each lock acquisition would evict them from the readers.
/// 128 bytes: the adjacent-line prefetcher pairs 64-byte lines.
#[repr(align(128))]
pub struct Padded<T>(pub T);

impl<T> core::ops::Deref for Padded<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Global scheduler state (Go's `schedt`).
pub struct Sched {
    /// The scheduler lock (Go's `sched.lock`). Guards `synced`.
    pub lock: Padded<Lock>,
    /// The part of the scheduler that only a holder of `lock` may touch.
    synced: Padded<Owned<Synced>>,
    /// Number of Ps on the idle list. Written under `lock`; read lock-free.
    pub npidle: Padded<AtomicI32>,
    /// Number of spinning Ms (the spinning protocol: `spinning.rs`'s header, Go's proc.go).
    pub nmspinning: Padded<AtomicI32>,
    /// Set when a wakeup found no idle P: the next M about to drop its P spins instead.
    pub needspinning: Padded<AtomicU32>,
    /// Length of the global run queue. Written under `lock`; read lock-free as a hint.
    pub runqsize: Padded<AtomicI32>,
    /// Current GOMAXPROCS. Written under `lock` by `procresize`.
    pub gomaxprocs: Padded<AtomicI32>,
    /// Number of idle Ms and of all Ms (mirrors of `synced` for lock-free reads).
    pub nmidle: AtomicI32,
    /// Length of `synced.affwait`. Written under `lock`; read lock-free as a hint.
    pub naffwait: AtomicI32,
    pub mcount: AtomicI32,
    /// The thread-count fuse.
    pub maxmcount: AtomicI32,
    /// All Ps ever created, indexed by id; entries are never freed or replaced.
    pub allp: [AtomicPtr<P>; MAX_PROCS],
    /// Heads of the append-only lists of all Ms and of all chunks of Gs ever created
    /// (`proc::all_gs`).
    pub allm: AtomicPtr<M>,
    pub allg: AtomicPtr<GChunk>,
    /// Counters.
    pub goidgen: AtomicU64,
    pub mnext: AtomicI64,
    /// Goroutines started by threads without a P (foreign threads); the Ps keep their own
    /// counts. Also those threads' share of the live count (`goroutine_count`): their
    /// goroutines end on Ps, whose live counts go down.
    pub spawned: AtomicU64,
    /// Preemption requests sysmon made (`P::preempt` set while clear).
    pub preempt_requests: AtomicU64,
    /// Goroutines stolen, in total. Written by the Ms, apart from the counters above that
    /// foreign threads write at every spawn.
    pub steals: Padded<AtomicU64>,
    /// Default usable stack size for new goroutines. Read at every spawn and goroutine
    /// exit, written once: on a line of its own, or the Ms' reads at every exit and a
    /// foreign thread's counter updates at every spawn take the line from each other
    /// (spawn from C main).
    pub default_stack: Padded<AtomicUsize>,
    /// Dead Gs beyond the per-P caches (Go's `sched.gFree`), under `gfree_lock`.
    pub gfree_lock: Padded<Lock>,
    /// Length of `gfree.hot` (kept by `GFreeGlobal::push_hot`/`pop_hot`), read without the
    /// lock on a goroutine's start to skip the lock when the list is empty. On a line of
    /// its own: only those two write it, under the lock.
    pub gfree_hot: Padded<AtomicI32>,
    gfree: Owned<GFreeGlobal>,
    /// Process start, for schedtrace's "SCHED Nms".
    pub start_ns: AtomicI64,
    /// The idle M sleeping until the earliest timer (at most one), and until when
    /// (`i64::MAX` when there is none). See timer.rs.
    pub timer_m: AtomicPtr<M>,
    pub timer_m_until: AtomicI64,
    /// Ps taken off the idle list (`pidleget`), ever; written under `lock`. checkdead.rs
    /// reads it to know that no goroutine ran while it looked.
    pub pidlegets: AtomicU64,
}

/// `SCHED.synced`: only a holder of `SCHED.lock` may touch it.
pub struct Synced {
    /// Idle Ms (Go's `midle`), doubly linked so that affinity can take a given one out.
    pub midle: *mut M,
    /// Ms without a P whose goroutine(s) can run nowhere else, waiting for a P (FIFO; the
    /// next P to go idle, `handoffp` and the busy Ps' 61-tick check serve it).
    pub affwait: *mut M,
    pub affwait_tail: *mut M,
    /// Ms whose threads exited (a goroutine ended locked to them), linked through
    /// `schedlink`: `allocm` revives them instead of allocating (Go frees exited Ms).
    pub mfree: *mut M,
    /// Idle Ps (Go's `pidle`).
    pub pidle: *mut P,
    /// The global run queue: a ring of pointers rather than Go's list through
    /// `g.schedlink`, so that moving a batch between it and a local queue copies pointers
    /// without touching the Gs (in a program that queues far ahead, each G is a cache
    /// miss, and popping a linked list is a chain of them).
    pub runq: std::collections::VecDeque<*mut G>,
}

/// Stacks of one size promised by `stack::reserve` and held for goroutines not yet spawned
/// (see `proc::take_ticket`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tickets {
    /// The stack size they are for (whole pages).
    pub size: usize,
    pub count: usize,
}

/// `G::lockedm` of a goroutine started `GMP_GO_LOCKED` that has not run yet: lock it to
/// the first M that dequeues it, or to one nothing is bound to (`lockedm::start_locked`).
/// Never an M's address (Ms are heap blocks aligned to 128 bytes); `schedule` finds it
/// with the `lockedm` check it makes anyway, so it costs other goroutines nothing.
pub(crate) const LOCK_AT_START: *mut M = core::ptr::NonNull::<M>::dangling().as_ptr();

/// `G::sp` of a goroutine that has not run yet: an odd value, which no saved stack pointer
/// is. With nothing else set, the G holds its stack; `SP_UNSTARTED | size` means it holds a
/// promise of a stack of `size` bytes (`stack::reserve`; whole pages, so the low bit is
/// free), which `execute` turns into a stack when it first runs.
pub(crate) const SP_UNSTARTED: usize = 1;

/// Whether a G whose saved stack pointer is `sp` has not run yet (see `SP_UNSTARTED`).
#[inline(always)]
pub fn unstarted(sp: usize) -> bool {
    sp & SP_UNSTARTED != 0
}

/// Global dead-G cache: Gs with a default-size stack, and Gs whose stack was released.
pub struct GFreeGlobal {
    /// Dead Gs with a stack that is likely untouched or long unused (spilled from the Ps'
    /// cold lists): what a spawn takes first.
    stack: GList,
    /// Dead Gs whose stacks ran last (spilled from the Ps' hot lists): what an M whose P has
    /// no hot stack left takes for the goroutines it starts (`take_hot_stack`).
    hot: GList,
    pub nostack: GList,
    /// The fewest Gs `stack` and `hot` held since the last trim (`proc::trim_gfree`): that
    /// many at the bottom of each were not taken for a whole period.
    stack_low: i32,
    hot_low: i32,
}

impl GFreeGlobal {
    /// # Safety
    /// As `GList::push`; the caller holds `gfree_lock`.
    pub unsafe fn push_stack(&mut self, gp: *mut G) {
        // SAFETY: caller contract.
        unsafe { self.stack.push(gp) };
    }
    /// # Safety
    /// The caller holds `gfree_lock`.
    pub unsafe fn pop_stack(&mut self) -> Option<*mut G> {
        // SAFETY: caller contract.
        let gp = unsafe { self.stack.pop() };
        self.stack_low = self.stack_low.min(self.stack.len());
        gp
    }
    pub fn peek_stack(&self) -> *mut G {
        self.stack.peek()
    }
    pub fn peek_hot(&self) -> *mut G {
        self.hot.peek()
    }
    /// # Safety
    /// As `GList::push`; the caller holds `gfree_lock`.
    pub unsafe fn push_hot(&mut self, gp: *mut G) {
        // SAFETY: caller contract.
        unsafe { self.hot.push(gp) };
        SCHED.gfree_hot.store(self.hot.len(), Ordering::Relaxed);
    }
    /// # Safety
    /// The caller holds `gfree_lock`.
    pub unsafe fn pop_hot(&mut self) -> Option<*mut G> {
        // SAFETY: caller contract.
        let gp = unsafe { self.hot.pop() };
        SCHED.gfree_hot.store(self.hot.len(), Ordering::Relaxed);
        self.hot_low = self.hot_low.min(self.hot.len());
        gp
    }
    /// Takes off `stack` and `hot` the Gs at the bottom of each that stayed there since the
    /// last call (below the list's low-water mark), beyond `floor` per list, and starts the
    /// next period. Walks only the Gs above them, under the lock: the ones used during the
    /// period plus the floor (a list that both kept idle Gs and grew by many during one
    /// period makes this walk long, once). Returns the Gs taken off each list as a chain
    /// (linked by `schedlink`, null-terminated; null if none) and its length.
    ///
    /// # Safety
    /// The caller holds `gfree_lock`.
    pub unsafe fn take_unused(&mut self, floor: i32) -> [(*mut G, i32); 2] {
        let mut out = [(null_mut(), 0); 2];
        for (slot, (list, low)) in out.iter_mut().zip([
            (&mut self.stack, &mut self.stack_low),
            (&mut self.hot, &mut self.hot_low),
        ]) {
            let take = (*low).min(list.len()) - floor;
            if take > 0 {
                // SAFETY: caller contract: the list is ours.
                *slot = (unsafe { list.split_bottom(take) }, take);
            }
            *low = list.len();
        }
        SCHED.gfree_hot.store(self.hot.len(), Ordering::Relaxed);
        out
    }
    /// Whether `stack` or `hot` holds more than `floor` Gs: a later `take_unused` may find
    /// some.
    pub fn above(&self, floor: i32) -> bool {
        self.stack.len() > floor || self.hot.len() > floor
    }
    pub fn len_with_stack(&self) -> i32 {
        self.stack.len() + self.hot.len()
    }
}

/// The scheduler. One per process (HACKING.md, decision 11).
pub static SCHED: Sched = Sched {
    lock: Padded(Lock::new(crate::sys::Rank::Sched)),
    synced: Padded(Owned::new(Synced {
        midle: null_mut(),
        affwait: null_mut(),
        affwait_tail: null_mut(),
        mfree: null_mut(),
        pidle: null_mut(),
        runq: std::collections::VecDeque::new(),
    })),
    npidle: Padded(AtomicI32::new(0)),
    nmspinning: Padded(AtomicI32::new(0)),
    needspinning: Padded(AtomicU32::new(0)),
    runqsize: Padded(AtomicI32::new(0)),
    gomaxprocs: Padded(AtomicI32::new(0)),
    nmidle: AtomicI32::new(0),
    naffwait: AtomicI32::new(0),
    mcount: AtomicI32::new(0),
    maxmcount: AtomicI32::new(DEFAULT_MAX_THREADS),
    allp: [const { AtomicPtr::new(null_mut()) }; MAX_PROCS],
    allm: AtomicPtr::new(null_mut()),
    allg: AtomicPtr::new(null_mut()),
    goidgen: AtomicU64::new(0),
    mnext: AtomicI64::new(0),
    spawned: AtomicU64::new(0),
    steals: Padded(AtomicU64::new(0)),
    preempt_requests: AtomicU64::new(0),
    default_stack: Padded(AtomicUsize::new(crate::stack::DEFAULT_STACK)),
    gfree_lock: Padded(Lock::new(crate::sys::Rank::Gfree)),
    gfree_hot: Padded(AtomicI32::new(0)),
    gfree: Owned::new(GFreeGlobal {
        stack: GList::new(),
        hot: GList::new(),
        nostack: GList::new(),
        stack_low: 0,
        hot_low: 0,
    }),
    start_ns: AtomicI64::new(0),
    timer_m: AtomicPtr::new(null_mut()),
    timer_m_until: AtomicI64::new(i64::MAX),
    pidlegets: AtomicU64::new(0),
};

/// Proof that the holder has `SCHED.lock`; derefs to the lock-protected state (the tokio
/// `Synced` pattern: functions that need the lock take `&mut SchedGuard`).
pub struct SchedGuard(());

impl SchedGuard {
    #[inline]
    pub fn synced(&mut self) -> &mut Synced {
        // SAFETY: a SchedGuard exists only while SCHED.lock is held, and `&mut self`
        // makes this the only live reference.
        unsafe { &mut *SCHED.synced.ptr() }
    }
}

impl Drop for SchedGuard {
    #[inline]
    fn drop(&mut self) {
        SCHED.lock.unlock();
    }
}

/// Takes the scheduler lock.
#[inline]
pub fn lock_sched() -> SchedGuard {
    SCHED.lock.lock();
    SchedGuard(())
}

/// Runs `f` with the global dead-G cache locked.
pub fn with_gfree<R>(f: impl FnOnce(&mut GFreeGlobal) -> R) -> R {
    SCHED.gfree_lock.lock();
    // SAFETY: we hold gfree_lock, which guards SCHED.gfree; the reference does not escape f.
    let r = f(unsafe { &mut *SCHED.gfree.ptr() });
    SCHED.gfree_lock.unlock();
    r
}

/// The calling thread's own M: the proof that code runs on the M's thread, which most of
/// the scheduler's functions need (only that thread touches the M's thread-owned state: its
/// P, `curg`, `lockedg`, `spinning`, its caches and its affinity queue's consumer side).
/// The functions that take one no longer restate the precondition; their `# Safety`
/// sections list what else they need.
///
/// Made only by [`ThisM::assume`], where a thread knows its M (a new M's thread in
/// `mstart`, a goroutine that reads the TLS slot); it is not `Send`. On the scheduler's
/// own stack (g0) it holds for the M's life. A goroutine may resume on another M after it
/// parks or yields, so a `ThisM` taken on a goroutine's stack is good only until the
/// goroutine's next switch.
#[derive(Clone, Copy)]
pub(crate) struct ThisM<'a> {
    m: &'a M,
    _not_send: core::marker::PhantomData<*const ()>,
}

impl<'a> ThisM<'a> {
    /// `m` as the calling thread's M.
    ///
    /// # Safety
    /// `m` is the M of the calling thread (a new M's thread may say so before its TLS slot
    /// is set).
    #[inline(always)]
    pub(crate) unsafe fn assume(m: &'a M) -> ThisM<'a> {
        ThisM {
            m,
            _not_send: core::marker::PhantomData,
        }
    }

    /// The M itself.
    #[inline(always)]
    pub(crate) fn m(self) -> &'a M {
        self.m
    }
}

impl core::ops::Deref for ThisM<'_> {
    type Target = M;
    #[inline(always)]
    fn deref(&self) -> &M {
        self.m
    }
}

/// The M running on this thread, or null on a foreign thread (C main, a Python thread).
///
/// Read from the initial-exec TLS slot with non-pure asm (HACKING.md, decision 8): the
/// compiler cannot cache it across a goroutine switch, after which the same code may be
/// running on another thread.
#[inline]
pub fn getm() -> *mut M {
    crate::arch::tls_get() as *mut M
}

/// The goroutine running on this thread, or null on a foreign thread.
#[inline]
pub fn getg() -> *mut G {
    let m = getm();
    if m.is_null() {
        return null_mut();
    }
    // SAFETY: a non-null TLS slot always holds this thread's live M (Ms are never freed).
    unsafe { (*m).curg.load(Ordering::Relaxed) }
}

pub use crate::sys::throw;

/// What sysmon last saw of a P (owner: the sysmon thread).
#[derive(Clone, Copy, Debug)]
pub struct SysmonTick {
    pub schedtick: u32,
    pub schedwhen: i64,
    pub syscalltick: u32,
    pub syscallwhen: i64,
    /// When sysmon last looked whether the P's thread sleeps in an unseen call.
    pub unseenwhen: i64,
    /// This slice's halfway look was made (`preempt::look`).
    pub halfway: bool,
    /// When sysmon first asked this slice's goroutine to yield (0: not yet).
    pub preemptwhen: i64,
}

impl SysmonTick {
    /// Nothing seen yet: the ticks start at a value a fresh P's counters (0) do not have,
    /// so sysmon's first look records the P's first syscall or slice instead of taking it
    /// for one it saw long ago (at time 0) and retaking or preempting at once.
    pub const fn new() -> SysmonTick {
        SysmonTick {
            schedtick: u32::MAX,
            schedwhen: 0,
            syscalltick: u32::MAX,
            syscallwhen: 0,
            unseenwhen: 0,
            halfway: false,
            preemptwhen: 0,
        }
    }
}

impl Default for SysmonTick {
    fn default() -> Self {
        Self::new()
    }
}

/// A chunk of `G_CHUNK` G slots, of which the first `len` hold Gs. The chunks are linked
/// from `SCHED.allg`, newest first, and are never freed: they are the list of every G
/// (Go's `allgs`), read without a lock by the dump (also from a signal handler), checkdead
/// and scheddetail. Keeping the list here rather than a link in each G leaves the G at
/// 128 bytes with nothing beside it.
pub struct GChunk {
    /// The slots (immutable).
    pub(super) gs: *mut G,
    /// How many slots hold a constructed G: raised with a release store after the G is
    /// written, under `G_CHUNK_LOCK`.
    pub(super) len: AtomicUsize,
    /// The previous (older) chunk (immutable).
    pub(super) next: *const GChunk,
}

/// What sysmon saw an M's thread asleep in, for the M's handler to check against the
/// interrupted context. Written by sysmon only, before the signal (whose delivery orders
/// the writes before the handler's reads); read by the M's handler.
pub struct Seen {
    pub(super) nr: AtomicI64,
    pub(super) args: [AtomicU64; 6],
    pub(super) sp: AtomicU64,
    /// The return address: just past the `syscall` instruction.
    pub(super) pc: AtomicU64,
    /// How the call may come back from the signal (`Restart as u64`).
    pub(super) how: AtomicU64,
}

/// An M's preemption source: `key` holds the thread id in the high half and the perf fd
/// or timer id in the low one (`NONE` when there is none); `perf_id` the perf event's id
/// (`PERF_EVENT_IOC_ID`), checked before each arming so that an fd number the program
/// closed and reused is never touched; `armed_at` when it was last armed (0: not armed,
/// or its signal arrived).
pub struct PreemptSig {
    pub(super) key: AtomicU64,
    pub(super) perf_id: AtomicU64,
    pub(super) armed_at: AtomicI64,
}

/// An M's queue of runnable goroutines that can run only on it.
pub struct AffQueue {
    pub(super) lock: Lock,
    pub(super) inner: Owned<AffInner>,
    /// Lengths of `inner.q` and `inner.preempted`, read lock-free by the owning M as
    /// hints (a push it misses is seen under the lock by `go_idle` before the M sleeps).
    pub(super) nready: AtomicU32,
    pub(super) npreempted: AtomicU32,
}

pub(super) struct AffInner {
    /// Readied and yielded goroutines: served before the P's run queues.
    pub(super) q: GQueue,
    /// Preempted goroutines: served where the global run queue is (module doc).
    pub(super) preempted: GQueue,
    /// The owning M is about to sleep, or asleep, without a P and without having seen
    /// anything queued here: the next pusher must get it a P.
    pub(super) idle: bool,
}

/// `throw` for a misuse Go reports with panic (negative WaitGroup counter, …).
#[cold]
pub fn fatal(msg: &str) -> ! {
    throw(msg)
}

/// Marks `gp` as entering a run queue (debug builds: a runnable G is on exactly one queue).
#[inline]
pub(super) fn enqueued(gp: *mut G) {
    #[cfg(debug_assertions)]
    // SAFETY: Gs are never freed.
    if unsafe { (*gp).queued.swap(true, Ordering::Relaxed) } {
        throw("runqput: G already on a run queue");
    }
    let _ = gp;
}

/// Marks `gp` as taken off the run queues to be run.
#[inline]
pub(super) fn dequeued(gp: *mut G) {
    #[cfg(debug_assertions)]
    // SAFETY: Gs are never freed.
    if unsafe { !(*gp).queued.swap(false, Ordering::Relaxed) } {
        throw("schedule: G taken from a run queue it was not on");
    }
    let _ = gp;
}

/// `m.mlist`: the M is on no idle list.
pub(super) const MLIST_NONE: u8 = 0;
/// `m.mlist`: the M is on `SCHED.midle` (startm may take it).
pub(super) const MLIST_IDLE: u8 = 1;
/// `m.mlist`: the M is on `SCHED.affwait` (only a P hand-over takes it).
pub(super) const MLIST_AFFWAIT: u8 = 2;

/// An empty `M::task_fds` slot.
pub(crate) const NO_TASK_FD: u64 = u64::MAX;

/// A cleanup that [`goexit`] runs if the goroutine ends inside the frame that pushed it
/// (Go's `_defer`, reduced to what the runtime needs: `gmp_once_do` marks the once done and
/// unlocks when its function calls `gmp_goexit`, as Go's deferred store does).
///
/// Lifetime: the record lives in the pushing frame, which pops it before it returns; if
/// the goroutine ends first, `goexit` runs it while that frame still exists (it is
/// abandoned, never unwound, and the stack is reused only after the switch away).
pub struct Defer {
    pub f: unsafe fn(arg: usize),
    pub arg: usize,
    pub(super) link: *mut Defer,
}

impl Defer {
    pub fn new(f: unsafe fn(arg: usize), arg: usize) -> Defer {
        Defer {
            f,
            arg,
            link: null_mut(),
        }
    }
}
