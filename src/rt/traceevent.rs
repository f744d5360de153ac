//! The execution trace's recording side (Go's trace event writers, `traceevent.go`,
//! `tracebuf.go`): the flag every hook tests, the events, and the chunks they go to. The
//! streaming writer and the flight recorder that copy the chunks out are trace.rs.
//!
//! Each hook is `if traceevent::on() { ... }`: one relaxed load of a flag that is false
//! unless a trace runs, a branch the CPU predicts. When on, an event goes to the current
//! chunk of the calling thread's P, in a compact binary form (as Go's batches): a kind
//! byte, the time since the chunk's previous event in CPU ticks, then the arguments, each
//! an unsigned LEB128 varint — 5 to 10 bytes an event. A P's slot has one producer at a
//! time (the P's owner; ownership passes through `acquirep`/`releasep`'s
//! release/acquire); threads without a P share one more slot under `SHARED_LOCK`. No
//! lock and no allocation on an event, only when a chunk is full (every few thousand
//! events): then the pool's lock, to seal the chunk and take another.
//!
//! **The chunk pool.** Chunks of [`CHUNK`] bytes, allocated up to a budget and never
//! freed (a late producer may still hold one), registered in [`ALL`] for the readers.
//! A chunk is FREE, CURRENT (a slot's producer appends to it) or SEALED (full, its
//! bytes final). The streaming writer takes sealed chunks from the queue, writes them and
//! frees them, and copies the published prefix of current chunks as they grow; a full pool
//! makes a producer wait for it (a trace with holes would break its slices). In flight
//! mode (`FLIGHT`) nothing consumes: a producer that needs a chunk beyond the budget takes
//! the oldest sealed one, so the pool holds the newest events, and a flight write copies
//! every chunk.
//!
//! **Readers and recycling** (`ctl`; model `loom_tests::pinned_chunks_are_not_rewritten`):
//! a reader pins a chunk (`pin`: an increment, backed out if the chunk is being rewritten)
//! and reads its header and the bytes below its published `len`, which the producer never
//! rewrites while it stays pinned: a producer rewrites a chunk's header or its first bytes
//! only after `claim` (a CAS from 0, no pin, to `RECYCLING`), and lets go with `unclaim`,
//! which clears the bit without losing a reader's transient increment. Appending above
//! `len` needs nothing: the reader does not read there. Pinning is two atomic operations,
//! so the SIGQUIT handler and the deadlock report can write the flight recorder's window.

use core::cell::UnsafeCell;
use core::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

use super::*;
use crate::loom::AtomicWord;

/// The P-process track of events by threads without a P (foreign threads).
pub(super) const OUTSIDE: u32 = 100_000;

/// Bytes per chunk.
pub(super) const CHUNK: usize = 64 << 10;
/// The most chunks there can be (1 GiB).
pub(super) const MAX_CHUNKS: usize = 16 << 10;
/// Producer slots: one per P, then the one of threads without a P.
pub(super) const SLOTS: usize = MAX_PROCS + 1;
pub(super) const OUTSIDE_SLOT: usize = MAX_PROCS;
/// The most bytes one event other than `LABELS` takes: its kind, time delta, track and two
/// arguments.
const MAX_EV: usize = 1 + 4 * 10;
/// A label set's text is cut (at a pair) to fit in this many bytes of a `LABELS` event.
pub(super) const MAX_LABELS: usize = 4 << 10;

#[repr(align(128))]
pub(super) struct Flag(pub(super) AtomicBool);
pub(super) static ON: Flag = Flag(AtomicBool::new(false));

/// Whether a trace is being recorded: the one test every hook makes.
#[inline(always)]
pub(crate) fn on() -> bool {
    ON.0.load(Ordering::Relaxed)
}

// The kinds and reasons are `pub(crate)`, not `pub`: cbindgen writes every `pub const` of
// the crate into gmp.h, whatever module it is in. scripts/trace2json.py decodes them.
pub(crate) mod kind {
    /// a = goid, b = the entry pc's difference from the chunk's previous start's (0 for
    /// its first), zigzag-encoded: two bytes where the pc would take seven.
    pub(crate) const GO_START: u8 = 1;
    pub(crate) const GO_STOP: u8 = 2; // a = goid, b = why
    pub(crate) const SPAWN: u8 = 3; // a = new goid, b = parent goid
    pub(crate) const UNPARK: u8 = 4; // a = goid, b = waker goid
    pub(crate) const STEAL: u8 = 5; // a = victim P, b = count
    pub(crate) const PREEMPT: u8 = 6; // a = goid
    pub(crate) const HANDOFF: u8 = 7; // a = P
    pub(crate) const SYSCALL_BEGIN: u8 = 8; // M track; a = goid
    pub(crate) const SYSCALL_END: u8 = 9; // M track; a = goid
    /// a = goid, b = the length of the text that follows: the goroutine's labels
    /// (`key\0value\0…`; empty: none), for its runs from here on.
    pub(crate) const LABELS: u8 = 10;
    /// In the kind byte: a track (varint) follows the time.
    pub(crate) const TRACK: u8 = 0x80;
}

/// Why a run ended (`GO_STOP`'s b).
pub(crate) mod why {
    pub(crate) const PARK: u64 = 1;
    pub(crate) const YIELD: u64 = 2;
    pub(crate) const PREEMPT: u64 = 3;
    pub(crate) const EXIT: u64 = 4;
    pub(crate) const SYSCALL: u64 = 5;
}

// ---- time ----

/// Whether timestamps are the CPU's time-stamp counter (x86-64 with an invariant TSC, as
/// Go's `cputicks`) rather than `nanotime`. Set by [`init_clock`] before any trace.
static TSC: AtomicBool = AtomicBool::new(false);

/// The time of an event: TSC ticks, or nanoseconds where the TSC cannot be trusted. The
/// writers record (ticks, nanotime) pairs for the converter to map one to the other.
#[inline(always)]
pub(super) fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if TSC.load(Ordering::Relaxed) {
        // SAFETY: rdtsc has no memory effects; every x86-64 CPU has it.
        return unsafe { core::arch::x86_64::_rdtsc() };
    }
    crate::sys::nanotime() as u64
}

/// Decides the clock (once, before the first trace): the TSC when the kernel reports it
/// constant and non-stop.
pub(super) fn init_clock() {
    static DONE: AtomicBool = AtomicBool::new(false);
    if DONE.swap(true, Ordering::AcqRel) {
        return;
    }
    let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let line = flags.lines().find(|l| l.starts_with("flags")).unwrap_or("");
    let has = |f: &str| line.split_whitespace().any(|w| w == f);
    TSC.store(
        cfg!(target_arch = "x86_64") && has("constant_tsc") && has("nonstop_tsc"),
        Ordering::Relaxed,
    );
}

// ---- chunks ----

pub(super) const FREE: u8 = 0;
pub(super) const CURRENT: u8 = 1;
pub(super) const SEALED: u8 = 2;

/// In `ctl`: the producer is rewriting the chunk; below it, the readers' pins.
const RECYCLING: u32 = 1 << 31;

/// A reader pins the chunk whose control word is `ctl`; false: it is being rewritten
/// (nothing pinned).
pub(super) fn pin<W: AtomicWord<V = u32>>(ctl: &W) -> bool {
    // Acquire: pairs with `unclaim`'s release, so the header written under the claim is
    // seen.
    if ctl.fetch_add(1, Ordering::Acquire) & RECYCLING != 0 {
        unpin(ctl);
        return false;
    }
    true
}

/// A reader lets go of a chunk it pinned.
pub(super) fn unpin<W: AtomicWord<V = u32>>(ctl: &W) {
    // Release: the reader's reads happen before a later claim succeeds.
    ctl.fetch_add(u32::MAX, Ordering::Release);
}

/// The producer claims the chunk for rewriting; false: a reader has it pinned.
pub(super) fn claim<W: AtomicWord<V = u32>>(ctl: &W) -> bool {
    // Acquire: pairs with `unpin`'s release (the last reader is done reading).
    ctl.compare_exchange(0, RECYCLING, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
}

/// The producer is done rewriting. Clears the bit by subtraction, not by storing 0: a
/// reader may have incremented meanwhile, and will decrement.
pub(super) fn unclaim<W: AtomicWord<V = u32>>(ctl: &W) {
    ctl.fetch_add(RECYCLING.wrapping_neg(), Ordering::Release);
}

/// What a chunk holds besides its bytes: written only under a claim.
#[derive(Clone, Copy, Default)]
pub(super) struct Hdr {
    /// The producer slot (P id, or `OUTSIDE_SLOT`).
    pub(super) slot: u32,
    /// The trace it belongs to (`EPOCH`).
    pub(super) epoch: u64,
    /// Order of becoming current, across all chunks.
    pub(super) seq: u64,
    /// The time its first event's delta counts from.
    pub(super) base: u64,
}

#[repr(C, align(64))]
pub(super) struct Chunk {
    pub(super) ctl: AtomicU32,
    pub(super) state: AtomicU8,
    hdr: UnsafeCell<Hdr>,
    /// Bytes of whole events; appended to by the producer (release), read by readers.
    pub(super) len: AtomicUsize,
    /// How much of it the streaming writer has written, and the entry pc of the last
    /// start in that part (the writer's; reset under a claim).
    pub(super) written: AtomicUsize,
    pub(super) written_pc: AtomicU64,
    data: UnsafeCell<[u8; CHUNK]>,
}

// SAFETY: `hdr` is written only under a claim and read only under a pin (see the module's
// protocol); `data` below `len` is written before `len`'s release and not again while
// pinned, and above it only by the slot's one producer.
unsafe impl Sync for Chunk {}

impl Chunk {
    /// A new chunk, from mmap rather than malloc: producers take chunks in `goready`
    /// and `after_switch`, some holding a channel lock, and malloc may sleep on an arena
    /// lock in libc's futex, a wait outside libgmp that unseen.rs would turn into a
    /// syscall hand-off of a goroutine that holds a runtime lock.
    fn alloc() -> *mut Chunk {
        let size = core::mem::size_of::<Chunk>();
        // SAFETY: an anonymous private mapping; zero-filled pages are a valid Chunk
        // (atomics at 0, a default header, FREE), page-aligned beyond its 64.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            throw("trace: out of memory for a chunk");
        }
        p.cast::<Chunk>()
    }

    /// The header. The caller has the chunk pinned or claimed, or is its producer.
    pub(super) fn hdr(&self) -> Hdr {
        // SAFETY: see the type's Sync.
        unsafe { *self.hdr.get() }
    }

    /// The first `len` bytes. The caller has the chunk pinned (or it is sealed and the
    /// streaming writer's) and `len` is at most what `len` published.
    pub(super) fn bytes(&self, from: usize, len: usize) -> &[u8] {
        // SAFETY: bytes below a published len are final while pinned (the module's
        // protocol); `from..len` is within the array.
        unsafe { &(&*self.data.get())[from.min(len)..len.min(CHUNK)] }
    }
}

/// Every chunk ever allocated, in `ALL[..NALL]`: what readers walk, without a lock.
pub(super) static ALL: [AtomicPtr<Chunk>; MAX_CHUNKS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_CHUNKS];
pub(super) static NALL: AtomicUsize = AtomicUsize::new(0);

/// The current trace's number: a producer's chunk of an earlier one is not continued.
pub(super) static EPOCH: AtomicU64 = AtomicU64::new(0);
static SEQ: AtomicU64 = AtomicU64::new(1);
/// Flight mode: recycle the oldest sealed chunk instead of waiting for a writer.
pub(super) static FLIGHT: AtomicBool = AtomicBool::new(false);
/// The most chunks the pool allocates (more only when every one is pinned).
pub(super) static BUDGET: AtomicUsize = AtomicUsize::new(0);
/// Events dropped because the trace stopped while their producer waited.
pub(super) static DROPPED: AtomicU64 = AtomicU64::new(0);

/// The free list and the queue of sealed chunks, under `POOL_LOCK`.
pub(super) struct Pool {
    pub(super) free: Vec<*mut Chunk>,
    pub(super) sealed: std::collections::VecDeque<*mut Chunk>,
}

pub(super) struct PoolCell(UnsafeCell<Option<Pool>>);
// SAFETY: accessed only under POOL_LOCK.
unsafe impl Sync for PoolCell {}
pub(super) static POOL: PoolCell = PoolCell(UnsafeCell::new(None));
pub(super) static POOL_LOCK: crate::sys::Lock =
    crate::sys::Lock::new(crate::sys::Rank::TraceChunks);

/// Runs `f` on the pool under its lock (made on first use, with room for every chunk, so
/// that no list grows while the lock is held).
pub(super) fn with_pool<R>(f: impl FnOnce(&mut Pool) -> R) -> R {
    POOL_LOCK.lock();
    // SAFETY: under POOL_LOCK.
    let p = unsafe { &mut *POOL.0.get() }.get_or_insert_with(|| Pool {
        free: Vec::with_capacity(MAX_CHUNKS),
        sealed: std::collections::VecDeque::with_capacity(MAX_CHUNKS),
    });
    let r = f(p);
    POOL_LOCK.unlock();
    r
}

/// A producer slot's state: its current chunk and where the next event goes.
struct Buf {
    chunk: *mut Chunk,
    pos: usize,
    last: u64,
    epoch: u64,
    /// The entry pc of the chunk's last GO_START (0 at its start).
    last_pc: u64,
}

#[repr(align(64))]
struct BufCell(UnsafeCell<Buf>);
// SAFETY: a slot has one producer at a time (the P's owner, or SHARED_LOCK's holder).
unsafe impl Sync for BufCell {}

static BUFS: [BufCell; SLOTS] = [const {
    BufCell(UnsafeCell::new(Buf {
        chunk: core::ptr::null_mut(),
        pos: 0,
        last: 0,
        epoch: 0,
        last_pc: 0,
    }))
}; SLOTS];

/// Serializes the producers of the slot of threads without a P.
pub(super) static SHARED_LOCK: crate::sys::Lock =
    crate::sys::Lock::new(crate::sys::Rank::TraceRing);

/// Gives `buf` a fresh chunk (sealing the full one), at time `ts`. False: the trace stopped
/// while the producer waited for a streaming writer (the event is dropped).
#[cold]
#[inline(never)]
fn refill(buf: &mut Buf, slot: usize, ts: u64) -> bool {
    loop {
        // acquire: pairs with `reset`'s release increment, so the new trace's FLIGHT and
        // BUDGET, stored before it, are what `take_chunk` reads for this epoch.
        let epoch = EPOCH.load(Ordering::Acquire);
        let got = with_pool(|pool| {
            let old = core::mem::replace(&mut buf.chunk, core::ptr::null_mut());
            if !old.is_null() {
                // SAFETY: chunks are never freed.
                let o = unsafe { &*old };
                if buf.epoch == epoch {
                    o.state.store(SEALED, Ordering::Release);
                    pool.sealed.push_back(old);
                } else {
                    // An earlier trace's: unread now, free again.
                    o.state.store(FREE, Ordering::Release);
                    pool.free.push(old);
                }
            }
            take_chunk(pool)
        });
        if let Some(c) = got {
            // SAFETY: claimed by take_chunk: ours to rewrite.
            let ch = unsafe { &*c };
            // SAFETY: as above.
            unsafe {
                *ch.hdr.get() = Hdr {
                    slot: slot as u32,
                    epoch,
                    seq: SEQ.fetch_add(1, Ordering::Relaxed),
                    base: ts,
                }
            };
            ch.len.store(0, Ordering::Relaxed);
            ch.written.store(0, Ordering::Relaxed);
            ch.written_pc.store(0, Ordering::Relaxed);
            ch.state.store(CURRENT, Ordering::Relaxed);
            unclaim(&ch.ctl);
            *buf = Buf {
                chunk: c,
                pos: 0,
                last: ts,
                epoch,
                last_pc: 0,
            };
            return true;
        }
        // Streaming with a full pool: wait for the writer.
        if !on() {
            DROPPED.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        crate::sys::osyield();
    }
}

/// A chunk to rewrite, claimed: a free one, a new one within the budget, in flight mode
/// the oldest sealed one, or (every one pinned) a new one beyond the budget.
fn take_chunk(pool: &mut Pool) -> Option<*mut Chunk> {
    // SAFETY (each deref below): chunks are never freed.
    if let Some(i) = pool.free.iter().rposition(|&c| claim(unsafe { &(*c).ctl })) {
        return Some(pool.free.swap_remove(i));
    }
    let n = NALL.load(Ordering::Relaxed);
    let flight = FLIGHT.load(Ordering::Relaxed);
    if flight
        && n >= BUDGET.load(Ordering::Relaxed)
        && let Some(i) = pool
            .sealed
            .iter()
            .position(|&c| claim(unsafe { &(*c).ctl }))
    {
        return pool.sealed.remove(i);
    }
    // Within the budget; in flight mode also beyond it when every sealed chunk is pinned
    // (a writer is copying): producers never wait for a flight write.
    if n < BUDGET.load(Ordering::Relaxed) || (flight && n < MAX_CHUNKS) {
        let c = Chunk::alloc();
        // SAFETY: just allocated, not yet shared.
        let ok = claim(unsafe { &(*c).ctl });
        debug_assert!(ok);
        ALL[n].store(c, Ordering::Release);
        NALL.store(n + 1, Ordering::Release);
        return Some(c);
    }
    None
}

/// Starts a new trace's recording: chunks of earlier traces become free, producers start
/// new chunks at their next event. The caller holds the trace's start/stop lock, and no
/// reader runs.
pub(super) fn reset(flight: bool, budget: usize) {
    init_clock();
    with_pool(|pool| {
        while let Some(c) = pool.sealed.pop_front() {
            // SAFETY: chunks are never freed.
            unsafe { (*c).state.store(FREE, Ordering::Relaxed) };
            pool.free.push(c);
        }
    });
    FLIGHT.store(flight, Ordering::Relaxed);
    BUDGET.store(budget.clamp(1, MAX_CHUNKS), Ordering::Relaxed);
    EPOCH.fetch_add(1, Ordering::Release);
    DROPPED.store(0, Ordering::Relaxed);
}

// ---- encoding ----

/// Appends varints to a chunk's bytes; `pos` moves past them.
struct Enc {
    p: *mut u8,
    pos: usize,
}

impl Enc {
    #[inline(always)]
    fn byte(&mut self, b: u8) {
        // SAFETY: the caller checked room for the whole event (`put`).
        unsafe { *self.p.add(self.pos) = b };
        self.pos += 1;
    }
    #[inline(always)]
    fn uv(&mut self, mut v: u64) {
        if v < 0x80 {
            self.byte(v as u8);
            return;
        }
        while v >= 0x80 {
            self.byte(v as u8 | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }
}

/// Appends one event to `slot`'s chunk (its producer calls), with `text` after it.
#[inline(always)]
fn put(slot: usize, k: u8, track: Option<u32>, a: u64, b: u64, text: &[u8]) -> bool {
    let ts = ticks();
    // SAFETY: the caller is the slot's one producer.
    let buf = unsafe { &mut *BUFS[slot].0.get() };
    if (buf.chunk.is_null()
        || buf.epoch != EPOCH.load(Ordering::Relaxed)
        || buf.pos + MAX_EV + text.len() > CHUNK)
        && !refill(buf, slot, ts)
    {
        return false;
    }
    // SAFETY: our chunk (its producer); the check above left room for the event.
    let c = unsafe { &*buf.chunk };
    let mut e = Enc {
        p: c.data.get().cast::<u8>(),
        pos: buf.pos,
    };
    e.byte(if track.is_some() { k | kind::TRACK } else { k });
    e.uv(ts.saturating_sub(buf.last));
    buf.last = buf.last.max(ts);
    if let Some(t) = track {
        e.uv(t as u64);
    }
    e.uv(a);
    if k == kind::GO_START {
        let d = b.wrapping_sub(buf.last_pc) as i64;
        buf.last_pc = b;
        e.uv(((d << 1) ^ (d >> 63)) as u64);
    } else {
        e.uv(b);
    }
    for &x in text {
        e.byte(x);
    }
    buf.pos = e.pos;
    // Release: the bytes before it are whole events, for the readers.
    c.len.store(e.pos, Ordering::Release);
    true
}

/// The slot of the calling thread's P, or None (the caller then takes SHARED_LOCK).
#[inline(always)]
fn my_slot() -> Option<usize> {
    let m = getm();
    if m.is_null() {
        return None;
    }
    // SAFETY: a non-null TLS slot is this thread's live M.
    let pp = unsafe { (*m).p.load(Ordering::Relaxed) };
    // SAFETY: Ps are never freed; we hold pp, so we are its slot's one producer.
    (!pp.is_null()).then(|| unsafe { (*pp).id } as usize)
}

/// Records an event on the calling thread's P's track (`track` None) or on an explicit
/// track, in the P's slot when the thread holds a P, else the shared slot.
#[inline(never)]
pub(crate) fn emit(k: u8, track: Option<u32>, a: u64, b: u64) -> bool {
    match my_slot() {
        Some(s) => put(s, k, track, a, b, &[]),
        None => emit_shared(k, track, a, b, &[]),
    }
}

/// `emit` on a thread without a P: the shared slot, under its lock.
#[cold]
#[inline(never)]
fn emit_shared(k: u8, track: Option<u32>, a: u64, b: u64, text: &[u8]) -> bool {
    SHARED_LOCK.lock();
    let pushed = put(OUTSIDE_SLOT, k, track.or(Some(OUTSIDE)), a, b, text);
    SHARED_LOCK.unlock();
    pushed
}

/// `execute`: `g` starts running on the calling M's P.
#[cold]
#[inline(never)]
pub(crate) fn go_start(g: &G) {
    // SAFETY: the caller (execute, exitsyscall) owns g, so its entry is stable.
    let entry = unsafe { g.entry.get() }.map_or(0, |f| f as usize as u64);
    // SAFETY: as above: g runs on this M.
    if let Some(e) = unsafe { g.ext_if_any() } {
        start_labels(g, e);
    }
    emit(kind::GO_START, None, g.goid(), entry);
}

/// Before `g`'s start: its labels, once per chunk (so that a flight recorder's window
/// that lost the chunk where they were first written still has them) and whenever they
/// changed. `e.trace_seq` is the chunk they were last written to; `labels::set` makes
/// it `LABELS_CHANGED`.
fn start_labels(g: &G, e: &GExt) {
    // SAFETY: g runs on this M: its labels and trace_seq are ours.
    let (set, seen) = unsafe { (e.labels.get(), e.trace_seq.get()) };
    if set.is_null() && seen != labels::LABELS_CHANGED {
        return;
    }
    let Some(slot) = my_slot() else { return };
    let text = if set.is_null() {
        &[][..]
    } else {
        // SAFETY: g's set, alive while g holds it (only g replaces it).
        unsafe { labels::text_cut(set, MAX_LABELS) }
    };
    // SAFETY: the caller holds the slot's P: its one producer.
    let buf = unsafe { &mut *BUFS[slot].0.get() };
    // Room for the labels and the start after them in one chunk.
    if (buf.chunk.is_null()
        || buf.epoch != EPOCH.load(Ordering::Relaxed)
        || buf.pos + 2 * MAX_EV + text.len() > CHUNK)
        && !refill(buf, slot, ticks())
    {
        return;
    }
    // SAFETY: our chunk; its header is ours.
    let seq = unsafe { (*buf.chunk).hdr().seq };
    if !set.is_null() && seen == seq {
        return;
    }
    if put(slot, kind::LABELS, None, g.goid(), text.len() as u64, text) {
        // SAFETY: as above.
        unsafe { e.trace_seq.set(if set.is_null() { 0 } else { seq }) };
    }
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

/// Reads events from chunk bytes (scripts/trace2json.py does the same): calls `f(kind,
/// a, b)` for each whole event, a start's b its entry pc, counted from `pc` (the last
/// start's before these bytes, 0 at a chunk's start); stops at the first malformed one.
/// Returns the last start's pc.
pub(super) fn decode(mut b: &[u8], mut pc: u64, mut f: impl FnMut(u8, u64, u64)) -> u64 {
    fn uv(b: &mut &[u8]) -> Option<u64> {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let (&x, rest) = b.split_first()?;
            *b = rest;
            if shift < 64 {
                v |= ((x & 0x7f) as u64) << shift;
            }
            if x & 0x80 == 0 {
                return Some(v);
            }
            shift += 7;
        }
    }
    while let Some((&k, rest)) = b.split_first() {
        b = rest;
        let Some(_dt) = uv(&mut b) else { return pc };
        if k & kind::TRACK != 0 && uv(&mut b).is_none() {
            return pc;
        }
        let (Some(a), Some(mut x)) = (uv(&mut b), uv(&mut b)) else {
            return pc;
        };
        let k = k & !kind::TRACK;
        if k == kind::LABELS {
            let Some(rest) = b.get(x as usize..) else {
                return pc;
            };
            b = rest;
        }
        if k == kind::GO_START {
            let d = ((x >> 1) as i64) ^ -((x & 1) as i64);
            pc = pc.wrapping_add(d as u64);
            x = pc;
        }
        f(k, a, x);
    }
    pc
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::loom::cell::UnsafeCell as LoomCell;
    use crate::loom::sync::Arc;
    use crate::loom::sync::atomic::AtomicU32 as LoomU32;

    /// A producer rewrites a chunk (header and bytes: one cell here) twice, each time under
    /// a claim, while a reader pins it twice and reads it when pinned: loom's cell checks
    /// that no read overlaps a rewrite, and after both the control word is 0 again.
    /// `broken`: the producer lets go by storing 0, which loses a pin made during the
    /// rewrite, and the word ends at `u32::MAX`.
    fn model(broken: bool) {
        crate::loom::model(move || {
            let ctl = Arc::new(LoomU32::new(0));
            let data = Arc::new(LoomCell::new(0u32));
            let (c2, d2) = (ctl.clone(), data.clone());
            let producer = crate::loom::thread::spawn(move || {
                for v in 1..=2u32 {
                    if claim(&*c2) {
                        d2.with_mut(|p| {
                            // SAFETY: claimed: no reader reads the cell.
                            unsafe { *p = v }
                        });
                        if broken {
                            c2.store(0, Ordering::Release);
                        } else {
                            unclaim(&*c2);
                        }
                    }
                }
            });
            for _ in 0..2 {
                if pin(&*ctl) {
                    // SAFETY: pinned: the producer does not rewrite the cell.
                    let v = data.with(|p| unsafe { *p });
                    assert!(v <= 2);
                    unpin(&*ctl);
                }
            }
            producer.join().unwrap();
            assert_eq!(ctl.load(Ordering::Relaxed), 0, "a pin was lost or kept");
        });
    }

    #[test]
    fn pinned_chunks_are_not_rewritten() {
        model(false);
    }

    #[test]
    #[should_panic(expected = "a pin was lost or kept")]
    fn pinned_chunks_broken_when_unclaim_stores_zero() {
        model(true);
    }
}
