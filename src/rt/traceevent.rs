//! The execution trace's recording side (Go's trace event writers): the flag every hook
//! tests, the events, and the rings they go to. The writer thread that drains the rings
//! to the file is trace.rs.
//!
//! Each hook is `if traceevent::on() { ... }`: one relaxed load of a flag that is false
//! unless a trace runs, a branch the CPU predicts. When on, an event (32 bytes: time,
//! kind, track, two arguments) goes to the ring of the P the thread holds — single
//! producer (the P's owner; ownership passes through `acquirep`/`releasep`'s
//! release/acquire), single consumer (the writer thread), no lock, no allocation after
//! the ring exists. A full ring makes the producer yield until the writer has drained it
//! (the cost of a trace that the writer cannot keep up with is time, never a hole).
//! Threads without a P (foreign threads, sysmon, an M returning from a syscall) use one
//! ring under a lock.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use super::*;

/// The P-process track of events by threads without a P (foreign threads).
pub(super) const OUTSIDE: u32 = 100_000;

/// Events per ring (per P, and the shared one).
pub(super) const RING: usize = 1 << 15;

#[repr(align(128))]
pub(super) struct Flag(pub(super) AtomicBool);
pub(super) static ON: Flag = Flag(AtomicBool::new(false));

/// Whether a trace is being recorded: the one test every hook makes.
#[inline(always)]
pub(crate) fn on() -> bool {
    ON.0.load(Ordering::Relaxed)
}

#[derive(Clone, Copy, Default)]
pub(crate) struct Ev {
    pub(super) ts: i64,
    pub(super) kind: u8,
    /// P id (P events) or M id (M events).
    pub(super) track: u32,
    pub(super) a: u64,
    pub(super) b: u64,
}

// The kinds and reasons are `pub(crate)`, not `pub`: cbindgen writes every `pub const` of
// the crate into gmp.h, whatever module it is in.
pub(crate) mod kind {
    pub(crate) const GO_START: u8 = 1; // a = goid, b = entry pc
    pub(crate) const GO_STOP: u8 = 2; // a = goid, b = why
    pub(crate) const SPAWN: u8 = 3; // a = new goid, b = parent goid
    pub(crate) const UNPARK: u8 = 4; // a = goid, b = waker goid
    pub(crate) const STEAL: u8 = 5; // a = victim P, b = count
    pub(crate) const PREEMPT: u8 = 6; // a = goid
    pub(crate) const HANDOFF: u8 = 7; // a = P
    pub(crate) const SYSCALL_BEGIN: u8 = 8; // M track; a = goid
    pub(crate) const SYSCALL_END: u8 = 9; // M track; a = goid
    // a = goid, b = a reference to its label set (labels.rs), which the writer gives back
    pub(crate) const LABELS: u8 = 10;
}

/// Why a run ended (`GO_STOP`'s b).
pub(crate) mod why {
    pub(crate) const PARK: u64 = 1;
    pub(crate) const YIELD: u64 = 2;
    pub(crate) const PREEMPT: u64 = 3;
    pub(crate) const EXIT: u64 = 4;
    pub(crate) const SYSCALL: u64 = 5;
}

/// A single-producer single-consumer ring.
pub(crate) struct Ring {
    pub(super) head: AtomicUsize,
    pub(super) tail: AtomicUsize,
    pub(super) dropped: AtomicU64,
    pub(super) buf: Box<[UnsafeCell<Ev>]>,
}

// SAFETY: slots in [head, tail) are read only by the consumer and the others written only by
// the producer; the indices are atomics with release/acquire.
unsafe impl Sync for Ring {}

impl Ring {
    pub(super) fn new() -> Ring {
        Ring {
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            buf: (0..RING).map(|_| UnsafeCell::new(Ev::default())).collect(),
        }
    }
    /// Producer side. The caller is the ring's one producer. A full ring makes it wait
    /// for the writer (yielding the CPU to it): a trace with holes would break its slices;
    /// only a trace that stops meanwhile drops the event.
    /// Returns false if the event was dropped (the ring is full and the trace stopped).
    pub(super) fn push(&self, e: Ev) -> bool {
        let t = self.tail.load(Ordering::Relaxed);
        while t - self.head.load(Ordering::Acquire) == RING {
            if !on() {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            crate::sys::osyield();
        }
        // SAFETY: slot t is outside [head, tail): the consumer does not read it.
        unsafe { *self.buf[t % RING].get() = e };
        self.tail.store(t + 1, Ordering::Release);
        true
    }
    /// Consumer side (the writer thread).
    pub(super) fn drain(&self, out: &mut Vec<Ev>) {
        let h = self.head.load(Ordering::Relaxed);
        let t = self.tail.load(Ordering::Acquire);
        for i in h..t {
            // SAFETY: [h, t) was published by the producer's release store of tail.
            out.push(unsafe { *self.buf[i % RING].get() });
        }
        self.head.store(t, Ordering::Release);
    }
}

/// Per-P rings, indexed by P id; created by `start` for the Ps that exist and by the first
/// event of a P created later; never freed (a late producer may still hold one).
pub(super) static RINGS: [AtomicPtr<Ring>; MAX_PROCS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_PROCS];
/// The ring of threads without a P, under `SHARED_LOCK`.
pub(super) static SHARED: AtomicPtr<Ring> = AtomicPtr::new(core::ptr::null_mut());
pub(super) static SHARED_LOCK: crate::sys::Lock =
    crate::sys::Lock::new(crate::sys::Rank::TraceRing);

pub(super) fn ring_for(id: usize) -> &'static Ring {
    let r = RINGS[id].load(Ordering::Acquire);
    if !r.is_null() {
        // SAFETY: rings are never freed.
        return unsafe { &*r };
    }
    let new = Box::into_raw(Box::new(Ring::new()));
    match RINGS[id].compare_exchange(
        core::ptr::null_mut(),
        new,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        // SAFETY: just published, never freed.
        Ok(_) => unsafe { &*new },
        Err(cur) => {
            // SAFETY: `new` was never shared.
            drop(unsafe { Box::from_raw(new) });
            // SAFETY: rings are never freed.
            unsafe { &*cur }
        }
    }
}

pub(super) fn shared() -> &'static Ring {
    let r = SHARED.load(Ordering::Acquire);
    if !r.is_null() {
        // SAFETY: never freed.
        return unsafe { &*r };
    }
    SHARED_LOCK.lock();
    let mut r = SHARED.load(Ordering::Acquire);
    if r.is_null() {
        r = Box::into_raw(Box::new(Ring::new()));
        SHARED.store(r, Ordering::Release);
    }
    SHARED_LOCK.unlock();
    // SAFETY: never freed.
    unsafe { &*r }
}

/// Records an event on the calling thread's P's track (`track` None) or on an explicit
/// track, through the P's ring when the thread holds a P, else the shared ring.
#[cold]
#[inline(never)]
pub(crate) fn emit(k: u8, track: Option<u32>, a: u64, b: u64) -> bool {
    let m = getm();
    // SAFETY: a non-null TLS slot is this thread's live M.
    let pp = if m.is_null() {
        core::ptr::null_mut()
    } else {
        unsafe { (*m).p.load(Ordering::Relaxed) }
    };
    let ts = crate::sys::nanotime();
    if !pp.is_null() {
        // SAFETY: Ps are never freed; we hold pp, so we are its ring's one producer.
        let id = unsafe { (*pp).id } as usize;
        let e = Ev {
            ts,
            kind: k,
            track: track.unwrap_or(id as u32),
            a,
            b,
        };
        ring_for(id).push(e)
    } else {
        let e = Ev {
            ts,
            kind: k,
            track: track.unwrap_or(OUTSIDE),
            a,
            b,
        };
        let r = shared();
        SHARED_LOCK.lock();
        let pushed = r.push(e);
        SHARED_LOCK.unlock();
        pushed
    }
}

/// `execute`: `g` starts running on the calling M's P.
#[cold]
#[inline(never)]
pub(crate) fn go_start(g: &G) {
    // SAFETY: the caller (execute, exitsyscall) owns g, so its entry is stable.
    let entry = unsafe { g.entry.get() }.map_or(0, |f| f as usize as u64);
    // The labels go just before the start, whose slice the writer gives them to.
    // SAFETY: as above: g runs on this M.
    let l = unsafe { labels::retained_of(g) };
    if !l.is_null() && !emit(kind::LABELS, None, g.goid(), l as u64) {
        labels::release_set(l);
    }
    emit(kind::GO_START, None, g.goid(), entry);
}

/// `after_switch`: `g` stopped running with action `act`.
#[cold]
#[inline(never)]
pub(crate) fn go_stop(g: &G, act: usize) {
    let w = match act {
        action::PARK => why::PARK,
        action::GOSCHED | action::LOCKMOVE => why::YIELD,
        action::PREEMPT => why::PREEMPT,
        _ => why::EXIT,
    };
    if act == action::PREEMPT {
        emit(kind::PREEMPT, None, g.goid(), 0);
    }
    emit(kind::GO_STOP, None, g.goid(), w);
}

/// `entersyscall`, while the M still holds its P.
#[cold]
#[inline(never)]
pub(crate) fn syscall_enter(m: &M, g: &G) {
    emit(kind::GO_STOP, None, g.goid(), why::SYSCALL);
    emit(kind::SYSCALL_BEGIN, Some(m.id as u32), g.goid(), 0);
}

/// `exitsyscall`, once the M holds a P again.
#[cold]
#[inline(never)]
pub(crate) fn syscall_exit(m: &M, g: &G) {
    emit(kind::SYSCALL_END, Some(m.id as u32), g.goid(), 0);
    go_start(g);
}

/// The calling goroutine's id, 0 on a thread outside the runtime.
pub(crate) fn cur_goid() -> u64 {
    let g = getg();
    // SAFETY: Gs are never freed.
    if g.is_null() {
        0
    } else {
        unsafe { (*g).goid() }
    }
}
