//! Loom model of the foreign spinner's mailbox (`ready::FOREIGN_MAILBOX`: a foreign
//! thread hands a goroutine straight to the M spinning for it; HACKING.md, "Foreign
//! exchanges").
//!
//! A **model**, as `spinning_loom` is: `spin_for_foreign` and `ready_put` work on `SCHED`
//! and Ms, which loom cannot run. It keeps the mailbox word and the order and orderings
//! of its accesses:
//!
//! - the spinner: becomes it by opening the box (`open_mailbox`: CAS null → OPEN,
//!   AcqRel; at most one M holds the box open), polls it (Relaxed loads) until it is not
//!   OPEN or it gives up, then closes it (swap to null, AcqRel) and owns whatever
//!   goroutine the swap returned;
//! - a foreign thread handing over a goroutine it has just written (status RUNNABLE, a
//!   plain write here): if the box looks OPEN, CAS OPEN → G (Release); if that fails, the
//!   goroutine goes to the global queue as before.
//!
//! The claims: the goroutine ends up in exactly one place (run by the spinner or on the
//! global queue), and the spinner sees what the foreign thread wrote to it (loom's cell
//! checks the access). `broken_close_with_store` closes the box with a plain load and
//! store instead of the swap, and must lose the goroutine in some interleaving.
//!
//! Run by `tests/loom.rs`.

#[cfg(all(test, loom))]
mod loom_tests {
    use crate::loom::cell::UnsafeCell;
    use crate::loom::sync::Arc;
    use crate::loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
    use crate::loom::thread;

    const NULL: usize = 0;
    const OPEN: usize = 1;
    /// The goroutine's "address".
    const G: usize = 128;

    struct World {
        mailbox: AtomicUsize,
        /// The goroutine's state, written by the foreign thread before it hands it over.
        status: UnsafeCell<u32>,
        /// The foreign thread put it on the global queue.
        global: AtomicBool,
    }

    /// The spinner: open, poll up to `polls` times, close. Whether it owns the goroutine.
    fn spinner(w: &World, polls: usize, swap_close: bool) -> bool {
        assert!(
            w.mailbox
                .compare_exchange(NULL, OPEN, AcqRel, Relaxed)
                .is_ok(),
            "the box was not closed when the spinner came"
        );
        for _ in 0..polls {
            if w.mailbox.load(Relaxed) != OPEN {
                break;
            }
            thread::yield_now();
        }
        let got = if swap_close {
            w.mailbox.swap(NULL, AcqRel)
        } else {
            let v = w.mailbox.load(Acquire);
            w.mailbox.store(NULL, Relaxed);
            v
        };
        if got == G {
            // Runs it: reads what the foreign thread wrote.
            // SAFETY: loom's cell; the model checks that this read is ordered after the
            // write (a data race fails the model).
            let s = w.status.with(|p| unsafe { *p });
            assert_eq!(s, 2, "the handed goroutine is not RUNNABLE to its runner");
            return true;
        }
        assert!(got == OPEN, "the box held {got} while open");
        false
    }

    /// The foreign thread's `ready_put`.
    fn foreign(w: &World) {
        // SAFETY: loom's cell, checked by the model as above.
        w.status.with_mut(|p| unsafe { *p = 2 });
        if w.mailbox.load(Relaxed) == OPEN
            && w.mailbox
                .compare_exchange(OPEN, G, Release, Relaxed)
                .is_ok()
        {
            return;
        }
        w.global.store(true, Relaxed);
    }

    fn check(polls: usize, swap_close: bool) {
        crate::loom::model_bounded(None, move || {
            let w = Arc::new(World {
                mailbox: AtomicUsize::new(NULL),
                status: UnsafeCell::new(0),
                global: AtomicBool::new(false),
            });
            let w2 = w.clone();
            let s = thread::spawn(move || spinner(&w2, polls, swap_close));
            foreign(&w);
            let ran = s.join().unwrap();
            let queued = w.global.load(Relaxed);
            assert!(
                ran != queued,
                "lost or duplicated goroutine: run by the spinner {ran}, on the global queue \
                 {queued}"
            );
            assert_eq!(w.mailbox.load(Relaxed), NULL, "the box was left open");
        });
    }

    /// Every interleaving of a hand-off with the spinner's open, polls and close puts the
    /// goroutine in exactly one place.
    #[test]
    fn handoff_is_taken_exactly_once() {
        check(2, true);
    }

    /// Closing with a load and a store instead of one swap: a hand-off between the two is
    /// lost, and the model must find it.
    #[test]
    #[should_panic(expected = "lost or duplicated goroutine")]
    fn broken_close_with_store() {
        check(0, false);
    }
}
