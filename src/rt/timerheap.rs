//! A timer and a P's timer heap (Go's `timer` and `timers`, time.go): the types the P
//! embeds, and the heap operations, all made under the heap's lock. Starting, stopping and
//! running timers, and the state word's protocol, are in timer.rs.

use core::ptr::null_mut;
use core::sync::atomic::{AtomicI32, AtomicI64, AtomicPtr, AtomicU8, Ordering};

use super::*;

/// A timer. Must not move while armed (it is usually on the stack of a parked goroutine).
pub struct Timer {
    /// Deadline, `nanotime` clock. Owner: see the module doc.
    pub(super) when: i64,
    /// The callback and its argument.
    pub(super) f: unsafe fn(arg: usize),
    pub(super) arg: usize,
    /// The P whose heap holds the timer, or null. Written under that heap's lock; read
    /// without it by `stop` to find the heap (then re-checked under the lock).
    pub(super) pp: AtomicPtr<P>,
    /// Its name in that heap's position table (`Heap::pos`), given by `push`. Owner: the
    /// heap's lock.
    pub(super) id: u32,
    /// `T_IDLE`, `T_ARMED` or `T_RUNNING` (the table in the module doc).
    pub(super) state: AtomicU8,
}

/// Not on a heap, no callback running: the owner may reuse the memory.
pub(super) const T_IDLE: u8 = 0;

/// On the heap of `pp`.
pub(super) const T_ARMED: u8 = 1;

/// Taken off its heap by `run_due`, whose callback is running.
pub(super) const T_RUNNING: u8 = 2;

// SAFETY: a Timer is handed between threads only through the heap locks.
unsafe impl Send for Timer {}

impl Timer {
    pub const fn new(f: unsafe fn(usize), arg: usize) -> Timer {
        Timer {
            when: 0,
            f,
            arg,
            pp: AtomicPtr::new(null_mut()),
            id: 0,
            state: AtomicU8::new(T_IDLE),
        }
    }
}

/// A heap slot: a timer's id and a copy of its deadline. Sifting compares the copies and
/// records each move in the heap's position table, so a heap operation reads and writes
/// only the heap's own arrays, never the timers — which live on the stacks of their parked
/// goroutines, one page each: with 100,000 sleepers every access through a timer pointer
/// is a cache and TLB miss. Go keeps `when` beside the pointer for the same reason; it has
/// no index to keep because it deletes lazily (a stopped timer stays in the heap as a
/// zombie until it reaches the top), which needs the garbage collector to keep a stopped
/// timer's memory alive — ours is a goroutine's stack frame, reused once `stop` returns.
/// 16 bytes: the heap of 50,000 sleepers still fits a 1 MiB L2 with its position table.
#[derive(Clone, Copy)]
struct Slot {
    when: i64,
    id: u32,
}

/// A P's timer heap and its tables by timer id (`Timer::id`): `pos[id]` is the slot of the
/// timer named `id` (so `stop` finds a timer's slot without the slot index living in the
/// timer), `timer[id]` the timer. Ids are handed out by `push` and recycled last-in
/// first-out through `free`, so the tables stay about as long as the most timers the heap
/// has held at once, and dense.
struct Heap {
    slots: Vec<Slot>,
    pos: Vec<u32>,
    timer: Vec<*mut Timer>,
    free: Vec<u32>,
}

impl Heap {
    const fn new() -> Heap {
        Heap {
            slots: Vec::new(),
            pos: Vec::new(),
            timer: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Puts `s` at slot `i`, recording it in the position table.
    #[inline(always)]
    fn place(&mut self, i: usize, s: Slot) {
        self.slots[i] = s;
        self.pos[s.id as usize] = i as u32;
    }

    /// A free id for a new timer.
    fn new_id(&mut self) -> u32 {
        match self.free.pop() {
            Some(id) => id,
            None => {
                let id = u32::try_from(self.pos.len())
                    .unwrap_or_else(|_| throw("timer: more than 2^32 timers on one P"));
                self.pos.push(0);
                self.timer.push(null_mut());
                id
            }
        }
    }
}

/// Children per heap node. Binary: with the deadlines inline, a 4-ary heap (Go's) halved
/// the depth but ran ~100 more instructions per removal (three compares per level) and
/// gained nothing measurable in sleep_many.
const HEAP_ARITY: usize = 2;

/// A P's timer heap. The lock and the heap share a cache line that only lock holders
/// touch (in practice the P's own M); the deadline that everybody reads lock-free —
/// thieves checking a victim's timers, sysmon and the timer M looking for the earliest —
/// sits on the next line. Sharing one line, the readers kept pulling it away from the
/// owner, whose every lock CAS (each `gmp_sleep`) then waited for the line to come back.
#[repr(C, align(128))]
pub struct Timers {
    pub lock: Lock,
    heap: Owned<Heap>,
    _line: [u8; 128 - TIMERS_OWNER_BYTES],
    /// The earliest deadline in the heap, 0 when empty (Go's timer0When): read lock-free
    /// by the scheduler to decide whether to look at all. Stored only when it changes.
    pub timer0_when: AtomicI64,
    /// Heap length, for scheddetail.
    pub len: AtomicI32,
    /// The `timer0_when` for which the P was last asked to pass through its scheduler
    /// (`schedule::run_busy_overdue`), 0 if never. Written and read by Ms without a P and sysmon.
    pub kicked: AtomicI64,
}

/// Bytes of `Timers` before the padding: the lock (and its alignment gap) and the heap.
const TIMERS_OWNER_BYTES: usize =
    core::mem::size_of::<Lock>().next_multiple_of(8) + core::mem::size_of::<Owned<Heap>>();
const _: () = assert!(core::mem::offset_of!(Timers, timer0_when) == 128);

impl Default for Timers {
    fn default() -> Self {
        Self::new()
    }
}

impl Timers {
    pub const fn new() -> Timers {
        Timers {
            lock: Lock::new(crate::sys::Rank::Timers),
            heap: Owned::new(Heap::new()),
            _line: [0; 128 - TIMERS_OWNER_BYTES],
            timer0_when: AtomicI64::new(0),
            len: AtomicI32::new(0),
            kicked: AtomicI64::new(0),
        }
    }

    /// # Safety
    /// `self.lock` is held, and no other reference to the heap is live.
    #[allow(clippy::mut_from_ref)]
    unsafe fn heap(&self) -> &mut Heap {
        // SAFETY: caller holds the lock that owns the heap.
        unsafe { &mut *self.heap.ptr() }
    }

    /// # Safety
    /// Lock held.
    pub(super) unsafe fn publish(&self) {
        // SAFETY: lock held.
        let h = unsafe { self.heap() };
        let w = h.slots.first().map_or(0, |s| s.when);
        // Unchanged (a timer went in behind the first): leave the readers' copy of the line
        // alone. The SeqCst store when it does change is the one the wake-up protocol needs.
        if self.timer0_when.load(Ordering::Relaxed) != w {
            self.timer0_when.store(w, Ordering::SeqCst);
        }
        self.len.store(h.slots.len() as i32, Ordering::Relaxed);
    }

    /// Adds `t` (lock held, `t` not on any heap).
    pub(super) unsafe fn push(&self, pp: *mut P, t: *mut Timer) {
        // SAFETY: lock held; t is owned by the caller until it is on the heap.
        unsafe {
            let h = self.heap();
            (*t).pp.store(pp, Ordering::Release);
            let id = h.new_id();
            (*t).id = id;
            let last = h.slots.len();
            h.slots.push(Slot {
                when: (*t).when,
                id,
            });
            h.timer[id as usize] = t;
            // Records the slot's final position in `pos`.
            sift_up(h, last);
            self.publish();
        }
    }

    /// The earliest deadline and its timer (lock held).
    pub(super) unsafe fn first(&self) -> Option<(i64, *mut Timer)> {
        // SAFETY: lock held.
        let h = unsafe { self.heap() };
        h.slots.first().map(|s| (s.when, h.timer[s.id as usize]))
    }

    /// Empties the heap (lock held) and returns its timers, still ARMED with `pp` naming
    /// this P: the caller pushes each onto another heap (null entries are free ids). Every
    /// id is free again: the tables start over.
    pub(super) unsafe fn take_all(&self) -> Vec<*mut Timer> {
        // SAFETY: lock held.
        let h = unsafe { self.heap() };
        let moved = core::mem::take(&mut h.timer);
        h.slots.clear();
        h.pos.clear();
        h.free.clear();
        // SAFETY: lock held.
        unsafe { self.publish() };
        moved
    }

    /// Removes `t`, which is on this heap (lock held).
    pub(super) unsafe fn remove(&self, t: *mut Timer) {
        // SAFETY: lock held; t is on this heap, so its id names its slot.
        unsafe {
            let h = self.heap();
            let id = (*t).id as usize;
            if h.timer.get(id) != Some(&t) {
                throw("timer: removing a timer that is not on this heap");
            }
            self.remove_at(h.pos[id] as usize);
        }
    }

    /// Removes the timer in slot `i` (lock held, `i` in the heap) and returns it. Reads
    /// only the heap's arrays; writes the timer's `pp`.
    pub(super) unsafe fn remove_at(&self, i: usize) -> *mut Timer {
        // SAFETY: lock held, i in the heap (caller contract).
        unsafe {
            let t = self.take_at(i);
            self.publish();
            t
        }
    }

    /// `remove_at` without `publish`: `timer0_when` keeps the old, earlier deadline until
    /// the caller publishes, before it unlocks. Readers that see the stale deadline look
    /// too early (they take the lock and find nothing due), never too late: a removal
    /// only moves the earliest deadline later. `run_due` publishes once per batch: a
    /// removal of the first slot changes the deadline every time, and its SeqCst store
    /// is a locked instruction on a line the thieves, sysmon and the timer M read.
    pub(super) unsafe fn take_at(&self, i: usize) -> *mut Timer {
        // SAFETY: lock held.
        let h = unsafe { self.heap() };
        let id = h.slots[i].id;
        let t = core::mem::replace(&mut h.timer[id as usize], null_mut());
        let last = h
            .slots
            .pop()
            .unwrap_or_else(|| throw("timer: remove from empty heap"));
        if i < h.slots.len() {
            h.place(i, last);
            if i > 0 && last.when < h.slots[(i - 1) / HEAP_ARITY].when {
                sift_up(h, i);
            } else {
                sift_down(h, i);
            }
        }
        h.free.push(id);
        // SAFETY: t was on this heap, so it is alive, and ours under the lock.
        unsafe { (*t).pp.store(null_mut(), Ordering::Release) };
        t
    }
}

/// Moves the slot at `i` up to its place (a hole moves up; each slot that moves gets its
/// new index written into the position table).
fn sift_up(h: &mut Heap, mut i: usize) {
    let s = h.slots[i];
    while i > 0 {
        let parent = (i - 1) / HEAP_ARITY;
        if h.slots[parent].when <= s.when {
            break;
        }
        h.place(i, h.slots[parent]);
        i = parent;
    }
    h.place(i, s);
}

/// Moves the slot at `i` down to its place (the hole moves down to the earliest child).
fn sift_down(h: &mut Heap, mut i: usize) {
    let s = h.slots[i];
    let n = h.slots.len();
    loop {
        let first = HEAP_ARITY * i + 1;
        if first >= n {
            break;
        }
        let mut m = first;
        for c in first + 1..(first + HEAP_ARITY).min(n) {
            if h.slots[c].when < h.slots[m].when {
                m = c;
            }
        }
        if h.slots[m].when >= s.when {
            break;
        }
        h.place(i, h.slots[m]);
        i = m;
    }
    h.place(i, s);
}

#[cfg(test)]
mod heap_tests {
    use super::*;

    unsafe fn noop(_: usize) {}

    /// The heap invariant: each slot no earlier than its parent, each slot's id its timer's
    /// and the position table's entry for that id the slot, each slot's deadline its
    /// timer's; every id either on the heap or free, once.
    fn check(timers: &Timers) {
        // SAFETY: the tests hold the lock.
        let h = unsafe { timers.heap() };
        for (i, s) in h.slots.iter().enumerate() {
            if i > 0 {
                let p = h.slots[(i - 1) / HEAP_ARITY].when;
                assert!(p <= s.when, "slot {i} ({}) before its parent ({p})", s.when);
            }
            assert_eq!(h.pos[s.id as usize] as usize, i, "pos[id] is not the slot");
            let t = h.timer[s.id as usize];
            // SAFETY: heap entries are live timers.
            unsafe {
                assert_eq!((*t).id, s.id, "slot's id is not its timer's");
                assert_eq!((*t).when, s.when, "slot's deadline is not its timer's");
            }
        }
        for &id in &h.free {
            assert!(
                h.timer[id as usize].is_null(),
                "a free id still names a timer"
            );
        }
        let mut seen = vec![0u8; h.pos.len()];
        for id in h.slots.iter().map(|s| s.id).chain(h.free.iter().copied()) {
            seen[id as usize] += 1;
        }
        assert!(
            seen.iter().all(|&c| c == 1),
            "an id lost or given twice: {seen:?}"
        );
    }

    /// Random pushes and removals from anywhere (sift_up and sift_down both), the invariant
    /// checked after every operation; then every timer comes out in deadline order.
    #[test]
    fn heap_keeps_order_under_random_removal() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rnd = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for round in 0..200 {
            let timers = Timers::new();
            let n = 1 + rnd(80) as usize;
            let mut ts: Vec<Timer> = (0..n).map(|_| Timer::new(noop, 0)).collect();
            let mut on = vec![false; n];
            timers.lock.lock();
            for _ in 0..4 * n {
                let k = rnd(n as u64) as usize;
                let t: *mut Timer = &mut ts[k];
                // SAFETY: lock held; `on` says whether t is on the heap; ts outlives it.
                unsafe {
                    if on[k] {
                        timers.remove(t);
                    } else {
                        (*t).when = rnd(50) as i64 + 1;
                        timers.push(null_mut(), t);
                    }
                }
                on[k] = !on[k];
                check(&timers);
            }
            let mut last = 0;
            // SAFETY: lock held.
            while let Some(&Slot { when, id }) = unsafe { timers.heap() }.slots.first() {
                // SAFETY: lock held.
                let t = unsafe { timers.heap() }.timer[id as usize];
                assert!(when >= last, "round {round}: {when} popped after {last}");
                // SAFETY: t is on this heap.
                unsafe { timers.remove(t) };
                check(&timers);
                last = when;
            }
            timers.lock.unlock();
            assert_eq!(timers.timer0_when.load(Ordering::Relaxed), 0);
        }
    }
}
