//! The CPU profile's sample buffer (Go's `profBuf`): fixed-size records written by the
//! profiling signal's handler on any thread and read by the profile's writer thread.
//!
//! **Protocol.** A bounded multi-producer, single-consumer ring (Vyukov's bounded queue):
//! every slot has a sequence word; slot `i` starts at `i`. A producer reads `tail`, and
//! when the slot at `tail` has sequence `tail` (free for that position) claims the
//! position with a CAS on `tail`, fills the slot's words, and publishes it by storing
//! sequence `tail + 1` (Release: the words are visible to whoever reads that sequence with
//! Acquire). A slot whose sequence is below the position is still full from the previous
//! lap: the ring is full, and the producer drops its record (the caller counts it lost).
//! The consumer owns `head`: it takes the slot at `head` only when its sequence is
//! `head + 1`, reads the words, and frees it for the next lap by storing `head + CAP`
//! (Release: its reads are done before a producer of the next lap overwrites them).
//!
//! **Why not Go's.** Go's profBuf has one writer at a time (its `cpuprof.add` serializes
//! the signal handlers of all threads with a spin lock, `prof.signalLock`) and packs
//! variable-length records. A spin lock in a handler is a hazard here: a thread that took
//! it and was descheduled stalls every other thread's handler. The CAS on `tail` has no
//! such waiter, and fixed-size records need no wrap-around logic.
//!
//! **Signal safety.** A producer takes no lock and allocates nothing; the consumer may be
//! interrupted by a producer on its own thread (the handler on the writer thread), which
//! touches only `tail` and slots the consumer does not hold. A producer stopped between
//! its claim and its publish (descheduled) holds up the consumer at that slot only until
//! it resumes; other producers go on filling the ring behind it.
//!
//! Checked by the loom models below (`loom_tests`, run by `tests/loom.rs`).

use crate::loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

struct Slot<const W: usize> {
    seq: AtomicUsize,
    words: [AtomicU64; W],
}

/// A ring of `CAP` records of `W` words each.
pub(crate) struct ProfBuf<const CAP: usize, const W: usize> {
    /// The next position a producer claims (CAS by producers).
    tail: AtomicUsize,
    /// The next position the consumer reads (the consumer's alone; atomic only so that
    /// the ring is `Sync`).
    head: AtomicUsize,
    slots: Box<[Slot<W>]>,
}

impl<const CAP: usize, const W: usize> ProfBuf<CAP, W> {
    pub(crate) fn new() -> Self {
        let slots = (0..CAP)
            .map(|i| Slot {
                seq: AtomicUsize::new(i),
                words: core::array::from_fn(|_| AtomicU64::new(0)),
            })
            .collect();
        ProfBuf {
            tail: AtomicUsize::new(0),
            head: AtomicUsize::new(0),
            slots,
        }
    }

    /// Producer: claims a slot, fills it with `fill` (which gets the record's words, all
    /// zero) and publishes it. False, without calling `fill`, when the ring is full.
    /// Async-signal-safe.
    #[inline]
    pub(crate) fn push(&self, fill: impl FnOnce(&mut [u64; W])) -> bool {
        self.push_ordered::<false>(fill)
    }

    /// `push`, or with `PUBLISH_FIRST` the broken order the loom model must catch: the
    /// sequence stored before the words.
    fn push_ordered<const PUBLISH_FIRST: bool>(&self, fill: impl FnOnce(&mut [u64; W])) -> bool {
        let mut pos = self.tail.load(Ordering::Relaxed);
        let slot = loop {
            let slot = &self.slots[pos % CAP];
            // Acquire: pairs with the consumer's release of the slot, so that our writes
            // come after its reads of the previous lap.
            let seq = slot.seq.load(Ordering::Acquire);
            let dif = seq.wrapping_sub(pos) as isize;
            if dif == 0 {
                match self.tail.compare_exchange(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break slot,
                    Err(t) => pos = t,
                }
            } else if dif < 0 {
                return false; // full: the slot still holds the previous lap's record
            } else {
                pos = self.tail.load(Ordering::Relaxed); // another producer took it
            }
        };
        let mut rec = [0u64; W];
        fill(&mut rec);
        if PUBLISH_FIRST {
            slot.seq.store(pos.wrapping_add(1), Ordering::Release);
        }
        for (w, v) in slot.words.iter().zip(rec) {
            w.store(v, Ordering::Relaxed);
        }
        if !PUBLISH_FIRST {
            // Release: publishes the words to the consumer's Acquire load of the sequence.
            slot.seq.store(pos.wrapping_add(1), Ordering::Release);
        }
        true
    }

    /// Consumer (one thread at a time): the oldest published record, or None when the
    /// ring is empty or its oldest slot is still being filled.
    pub(crate) fn pop(&self) -> Option<[u64; W]> {
        let pos = self.head.load(Ordering::Relaxed);
        let slot = &self.slots[pos % CAP];
        // Acquire: pairs with the producer's publishing store; the words are complete.
        if slot.seq.load(Ordering::Acquire) != pos.wrapping_add(1) {
            return None;
        }
        let rec: [u64; W] = core::array::from_fn(|i| slot.words[i].load(Ordering::Relaxed));
        // Release: our reads happen before the next lap's producer writes the words.
        slot.seq.store(pos.wrapping_add(CAP), Ordering::Release);
        self.head.store(pos.wrapping_add(1), Ordering::Relaxed);
        Some(rec)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn records_come_back_in_order_and_a_full_ring_refuses() {
        let b: ProfBuf<4, 3> = ProfBuf::new();
        for lap in 0..3u64 {
            for i in 0..4u64 {
                assert!(b.push(|r| *r = [lap, i, lap * 10 + i]));
            }
            assert!(!b.push(|_| panic!("filled a full ring")));
            for i in 0..4u64 {
                assert_eq!(b.pop(), Some([lap, i, lap * 10 + i]));
            }
            assert_eq!(b.pop(), None);
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::loom::sync::Arc;

    /// Two producers push one record each (both words its id) into a two-slot ring while
    /// the consumer polls twice; then the consumer drains the rest. Every record arrives
    /// exactly once and whole. `PUBLISH_FIRST` stores the sequence before the words.
    fn check<const PUBLISH_FIRST: bool>() {
        crate::loom::model(|| {
            let b: Arc<ProfBuf<2, 2>> = Arc::new(ProfBuf::new());
            let ps: Vec<_> = [1u64, 2]
                .into_iter()
                .map(|id| {
                    let b = b.clone();
                    crate::loom::thread::spawn(move || {
                        assert!(b.push_ordered::<PUBLISH_FIRST>(|r| *r = [id, id]));
                    })
                })
                .collect();
            // The consumer polls while they push (a yield lets them run: loom explores a
            // producer preempted anywhere inside its push).
            let mut got = Vec::new();
            for _ in 0..2 {
                match b.pop() {
                    Some(r) => got.push(r),
                    None => crate::loom::thread::yield_now(),
                }
            }
            for p in ps {
                p.join().unwrap();
            }
            while let Some(r) = b.pop() {
                got.push(r);
            }
            for r in &got {
                assert!(r[0] == r[1] && r[0] != 0, "torn record: {r:?}");
            }
            got.sort();
            assert_eq!(got, vec![[1, 1], [2, 2]], "lost or duplicated record");
        });
    }

    #[test]
    fn every_record_arrives_once_and_whole() {
        check::<false>();
    }

    /// Publishing before the words: the consumer can read a slot whose words are not
    /// written yet, and the model must find it.
    #[test]
    #[should_panic(expected = "torn record")]
    fn broken_publish_before_the_words() {
        check::<true>();
    }
}
