//! Stack high-water marks per start function: how deep the goroutines started with each
//! entry function went into their stacks, measured on a sample of them.
//!
//! A sampled goroutine starts on a stack whose pages are all released first
//! (`MADV_DONTNEED` from the scheduler stack, in `execute`, before anything is written to
//! it: the goroutine's first frame is built when it starts). When it ends, `goexit0` asks
//! the kernel which of the stack's pages are resident (`mincore`): the lowest one is the
//! deepest page the goroutine touched, since nothing else writes to a goroutine's stack
//! (signal handlers run on the thread's alternate stack). The mark is exact to the page,
//! whatever ran on the stack before; a goroutine that is not sampled costs a look at the
//! clock at its start and a flag test at its end.
//!
//! Each M measures at most one goroutine every [`PERIOD_NS`] of sysmon's clock
//! (`coarsetime`, which lags the real clock by up to sysmon's 10 ms sleep), its first
//! start included: a program that starts goroutines now and then (less often than every
//! 15 ms or so per M) has each one measured, one that starts millions has one in
//! thousands, and the
//! cost is bounded either way (a sample costs the release of the stack, its TLB
//! shoot-down, the page faults of the goroutine's first touches and one `mincore`: about
//! 9 µs on a 2-vCPU AMD EPYC Zen 3 VM, so at most 0.25% of an M's time). A start that is not sampled
//! costs a load of the coarse clock (the line `gopark` reads) and a compare.
//! `GMP_DEBUG=stackhwm=N` measures one start in N instead, counted per M (1: every
//! goroutine), and `stackhwm=off` none.
//!
//! The marks live in a fixed table keyed by entry function (open addressing, lock-free:
//! a slot's key is claimed once with a CAS and never changes). A start function that finds
//! the table full is counted in `DROPPED` ([`totals`]).

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::loom::AtomicWord;

use super::*;
use crate::stack::Stack;

/// Slots of the table (a power of two): distinct start functions it can tell apart.
const SLOTS: usize = 1024;

/// The entry function's address of each slot; 0 for a free slot. Set once ([`claim`]).
static KEYS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

/// What is measured of the start function whose address is in the same slot of [`KEYS`].
struct Slot {
    /// The deepest mark measured, in bytes from the top of the stack.
    high: AtomicUsize,
    /// The usable size of the stack of the goroutine measured last.
    size: AtomicUsize,
    /// Goroutines measured.
    samples: AtomicU64,
}

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        high: AtomicUsize::new(0),
        size: AtomicUsize::new(0),
        samples: AtomicU64::new(0),
    }
}; SLOTS];

/// Measurements of start functions that found the table full.
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Every goroutine measured.
static SAMPLES: AtomicU64 = AtomicU64::new(0);
/// The deepest mark of all.
static HIGHEST: AtomicUsize = AtomicUsize::new(0);

/// An M measures at most one goroutine start in this much of sysmon's clock, unless
/// `GMP_DEBUG=stackhwm` says otherwise.
pub(crate) const PERIOD_NS: i64 = 4_000_000;

/// `GMP_DEBUG=stackhwm`: -1 (not given: one start per M per [`PERIOD_NS`]), 0 (off), or
/// N (one start in N, per M).
pub(crate) fn rate() -> i64 {
    crate::sys::dbgvars::get(crate::sys::dbgvars::Var::Stackhwm)
}

/// Whether the goroutine `m` is about to start is measured. `M::stackhwm_next` holds, in
/// the default mode, the coarse time from which the next start is; with
/// `GMP_DEBUG=stackhwm=N`, minus the starts left until the next one (-1: this one); with
/// `off`, `i64::MAX`. 0 (a new M) takes the slow path, which decides.
#[inline(always)]
pub(super) fn sample(m: &M) -> bool {
    // SAFETY: called on m's own thread (execute), the owner of the field.
    let next = unsafe { m.stackhwm_next.get() };
    if next < -1 {
        // SAFETY: as above.
        unsafe { m.stackhwm_next.set(next + 1) };
        return false;
    }
    if next > 0 && coarsetime::coarse_now() < next {
        return false;
    }
    sample_slow(m)
}

#[cold]
#[inline(never)]
fn sample_slow(m: &M) -> bool {
    let (next, now) = match rate() {
        0 => (i64::MAX, false),
        n if n > 0 => (-n, true),
        _ => (
            coarsetime::coarse_now().saturating_add(PERIOD_NS).max(1),
            true,
        ),
    };
    // SAFETY: as in `sample`.
    unsafe { m.stackhwm_next.set(next) };
    now
}

/// Releases every page of `st` for a sampled goroutine that has not started yet: whatever
/// is resident when it ends, it touched.
///
/// # Safety
/// `st` is the stack of a goroutine that has not started, owned by the caller, and the
/// caller does not run on it.
pub(super) unsafe fn release(st: &Stack) {
    // SAFETY: nothing lives on the stack (caller contract); DONTNEED on private anonymous
    // memory only drops its contents, and the guard below the stack is outside the range.
    unsafe { libc::madvise(st.lo() as *mut c_void, st.size(), libc::MADV_DONTNEED) };
}

/// Records the mark of a sampled goroutine that started with `entry` and ended on `st`.
///
/// # Safety
/// The goroutine has ended and nothing runs on `st`.
pub(super) unsafe fn record(entry: usize, st: &Stack) {
    let Some(high) = measure(st) else { return };
    SAMPLES.fetch_add(1, Ordering::Relaxed);
    HIGHEST.fetch_max(high, Ordering::Relaxed);
    let Some(slot) = slot_for(entry) else {
        DROPPED.fetch_add(1, Ordering::Relaxed);
        return;
    };
    slot.high.fetch_max(high, Ordering::Relaxed);
    slot.size.store(st.size(), Ordering::Relaxed);
    // Release: a reader that sees the count sees the mark it counts.
    slot.samples.fetch_add(1, Ordering::Release);
}

/// The bytes from the top of `st` down to the lowest resident page, or None if the kernel
/// cannot tell.
fn measure(st: &Stack) -> Option<usize> {
    let page = crate::sys::page_size();
    let pages = st.size() / page;
    let mut vec = [0u8; 256];
    let mut first = 0;
    while first < pages {
        let n = (pages - first).min(vec.len());
        // SAFETY: the range lies inside the mapped stack; vec holds n bytes.
        let r = unsafe {
            libc::mincore(
                (st.lo() + first * page) as *mut c_void,
                n * page,
                vec.as_mut_ptr(),
            )
        };
        if r != 0 {
            return None;
        }
        if let Some(i) = vec[..n].iter().position(|&b| b & 1 != 0) {
            return Some(st.size() - (first + i) * page);
        }
        first += n;
    }
    Some(0)
}

/// The slot of `entry`, claimed if it has none; None when the table is full.
fn slot_for(entry: usize) -> Option<&'static Slot> {
    claim(&KEYS, entry as u64).map(|i| &TABLE[i])
}

/// The index of the slot of `keys` that holds `key` (not 0), claimed with a CAS if it has
/// none (open addressing from a multiplicative hash, linear probing); None when every slot
/// holds another key. A key, once stored, never changes, so two claims of the same key
/// find the same slot: the one that loses a CAS to it reads it back. Model:
/// `loom_tests::claims_find_one_slot_per_key`.
fn claim<W: AtomicWord<V = u64>>(keys: &[W], key: u64) -> Option<usize> {
    let n = keys.len();
    let home = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize;
    for probe in 0..n {
        let i = (home + probe) % n;
        let k = keys[i].load(Ordering::Relaxed);
        if k == key {
            return Some(i);
        }
        if k == 0 {
            match keys[i].compare_exchange(0, key, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some(i),
                Err(k) if k == key => return Some(i),
                Err(_) => {}
            }
        }
    }
    None
}

/// The mark of one start function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mark {
    /// The entry function's address.
    pub entry: usize,
    /// The deepest mark measured, in bytes (a multiple of the page size).
    pub high: usize,
    /// The usable size of the stacks its goroutines ran on (the last one measured).
    pub size: usize,
    /// Goroutines measured.
    pub samples: u64,
}

/// Every start function measured so far, deepest first. Allocates.
pub(crate) fn marks() -> Vec<Mark> {
    let mut v = Vec::new();
    for_each(|m| v.push(m));
    v.sort_by(|a, b| b.high.cmp(&a.high).then(a.entry.cmp(&b.entry)));
    v
}

/// Calls `f` with each start function measured so far, in table order. Allocates
/// nothing (the dump calls it from a signal handler).
pub(crate) fn for_each(mut f: impl FnMut(Mark)) {
    for (slot, key) in TABLE.iter().zip(&KEYS) {
        let entry = key.load(Ordering::Relaxed) as usize;
        if entry == 0 {
            continue;
        }
        let samples = slot.samples.load(Ordering::Acquire);
        if samples == 0 {
            continue;
        }
        f(Mark {
            entry,
            high: slot.high.load(Ordering::Relaxed),
            size: slot.size.load(Ordering::Relaxed),
            samples,
        });
    }
}

/// Goroutines measured, the deepest mark of all, and measurements dropped (table full).
pub(crate) fn totals() -> (u64, usize, u64) {
    (
        SAMPLES.load(Ordering::Relaxed),
        HIGHEST.load(Ordering::Relaxed),
        DROPPED.load(Ordering::Relaxed),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_claimed_once_and_found_again() {
        let keys: [AtomicU64; 4] = Default::default();
        let a = claim(&keys, 0x1234_5670).unwrap();
        assert_eq!(claim(&keys, 0x1234_5670), Some(a));
        let others: Vec<usize> = (1..4).map(|k| claim(&keys, k).unwrap()).collect();
        assert!(!others.contains(&a));
        assert_eq!(claim(&keys, 99), None, "a full table claims nothing");
        assert_eq!(claim(&keys, 2), Some(others[1]));
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;

    /// Claims racing on a small table: two of the same key find one slot, a different key
    /// another, and no slot ends up with a key nobody asked for. Broken when a claim that
    /// lost its CAS does not look at what won (the two claims of one key take two slots).
    #[test]
    fn claims_find_one_slot_per_key() {
        use crate::loom::sync::Arc;
        use crate::loom::sync::atomic::AtomicU64 as LoomU64;
        crate::loom::model(|| {
            let keys: Arc<[LoomU64; 2]> = Arc::new([LoomU64::new(0), LoomU64::new(0)]);
            let ts: Vec<_> = [7u64, 7, 9]
                .into_iter()
                .map(|k| {
                    let keys = keys.clone();
                    crate::loom::thread::spawn(move || claim(&*keys, k))
                })
                .collect();
            let got: Vec<Option<usize>> = ts.into_iter().map(|t| t.join().unwrap()).collect();
            let (a, b, c) = (got[0].unwrap(), got[1].unwrap(), got[2].unwrap());
            assert_eq!(a, b);
            assert_ne!(a, c);
            assert_eq!(keys[a].load(Ordering::Relaxed), 7);
            assert_eq!(keys[c].load(Ordering::Relaxed), 9);
        });
    }
}
