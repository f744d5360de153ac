//! A poll descriptor's reference count (Go's fdMutex reference count, without its read and
//! write locks): an operation on a registered fd holds a reference for as long as it uses
//! the fd number, and the closer waits until none is left before the number goes to
//! close(2), so no operation reads or writes a number that a new file has been given.
//!
//! # The protocol
//! - An operation (`incref`): `refs += 1`, then a look at `closing` (and `registered`); if
//!   set, it gives the reference back and fails (EBADF). When done: `decref`.
//! - The closer (`netpoll::close_begin`): `mark_closing`, then `in_flight` until it says
//!   none is left; then the number may be released.
//!
//! The claim: an operation sees `closing`, or the closer sees its reference — never
//! neither (an operation using the number after the closer decided nobody does).
//!
//! As "store closing, load refs" against "add to refs, load closing" this is a Dekker
//! pair (store buffering): it needs a StoreLoad barrier on each side, SeqCst accesses
//! throughout (as this code had before it had a model) or a SeqCst fence on each side.
//! Rejected: loom treats SeqCst accesses as acquire/release, so it cannot check the first;
//! the second costs every operation a second locked instruction on x86 (LLVM's SeqCst
//! fence, a `lock or` on the stack, or an `mfence`) after its locked add, which already is
//! a full barrier there.
//!
//! Instead the closer's look at `refs` is a read-modify-write (`fetch_add(0)`), so the two
//! sides meet on one word, whose RMWs are in one modification order, each reading the
//! latest value in it:
//! - the operation's increment first: the closer's RMW reads it (refs > 0) and the closer
//!   looks again until it reads 0, which it can only read after the matching decrement
//!   (each operation decrements after its own increment); that decrement is a release, the
//!   look an acquire (also through the RMWs in between: a release sequence), so the
//!   operation's use of the number happens before the closer goes on;
//! - the closer's RMW first: the increment reads from it (or from a later RMW of its
//!   release sequence), a release there and an acquire here, so `closing = true`, stored
//!   before it, happens before the operation's look, which sees it.
//!
//! Acquire and release suffice, with no fence: an operation costs what it did with SeqCst
//! (x86: a locked add and two plain loads; `decref` a locked add; the same instructions),
//! and loom models RMWs (the latest value, release sequences) and acquire/release exactly,
//! so the models below check the orderings the runtime uses, on this very code
//! (monomorphized with std's atomics in `PollDesc`, with loom's in the models). On x86
//! LLVM compiles the closer's RMW, which writes nothing new, to a `lock or` on the stack
//! and a plain load: the same under x86's memory model.
//!
//! # Deferred close
//! A closer that may not wait (inside `gmp_blocking`, on the thread the operations in
//! flight need to run on) hands the close to the last reference instead, as Go's last
//! `decref` destroys the fd: `defer_close` sets `DEFERRED` in `refs` (an RMW, ordered as
//! `in_flight`'s), and whoever then brings the count to zero under it — an operation's
//! `decref`, a refused `incref` giving its transient reference back, or the closer itself
//! if none was left — tries `claim`, a CAS from `DEFERRED` to `DEFERRED | CLAIMED`. The
//! one that succeeds closes, once: after it the count never reads `DEFERRED` alone again
//! (only refused increfs come and go). A try that fails lost to a refused incref that
//! raised the count in between; that one's give-back tries again. The claim's acquire
//! reads the end of a release sequence every `decref` is part of, so every operation's
//! use of the number happens before the close. Models: `deferred_close_*`.
//!
//! `registered` is not part of the pair: `unregister` does not wait for references (it
//! only takes the fd off the poller; its number stays the user's), and `close_begin`
//! clears it only after the wait. Both flags are written under the descriptor lock.

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::loom::{AtomicFlag, AtomicWord};
use crate::sys::throw;

/// `refs`' wrapping add of this takes one away ([`AtomicWord`] has no subtraction).
const MINUS_ONE: u32 = u32::MAX;

/// `refs`' high bit: the closer did not wait (`defer_close`); whoever takes the count to
/// zero claims the close.
const DEFERRED: u32 = 1 << 31;
/// Set with `DEFERRED` by the one `claim` that succeeds: the close is that caller's.
const CLAIMED: u32 = 1 << 30;
/// The reference count proper.
const COUNT: u32 = CLAIMED - 1;

/// What an `incref` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum Incref {
    /// A reference for the operation.
    Taken,
    /// None: closing or not registered.
    Refused,
    /// None, and giving its transient reference back claimed a deferred close: the
    /// caller closes.
    RefusedClaimed,
}

/// The reference count and the two flags it is checked against (see the module doc).
/// The runtime's is `FdRefs` (std's atomics), a loom model's has loom's.
pub(crate) struct FdRefs<F = AtomicBool, W = AtomicU32> {
    /// Under the poller now (`open`, `mark_unregistered`).
    registered: F,
    /// Set by `mark_closing` (and cleared by the next `open`): every `incref` fails.
    closing: F,
    /// References: operations in flight, and for a moment the ones an `incref` failed for.
    refs: W,
}

impl FdRefs {
    pub(crate) const fn new() -> FdRefs {
        FdRefs {
            registered: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            refs: AtomicU32::new(0),
        }
    }
}

impl<F: AtomicFlag, W: AtomicWord<V = u32>> FdRefs<F, W> {
    /// Takes a reference for one operation (Go's fdMutex incref). Fails while the fd is
    /// being closed or is not registered. Any thread.
    #[inline]
    pub(crate) fn incref(&self) -> Incref {
        // Acquire: pairs with `in_flight`'s release when that RMW came first in `refs`'
        // order; then `closing = true` happens before the look below.
        self.refs.fetch_add(1, Ordering::Acquire);
        // Relaxed: after the acquire above, which is what orders them (module doc).
        if self.closing.load(Ordering::Relaxed) || !self.registered.load(Ordering::Relaxed) {
            // Relaxed: this reference covered no use of the number, nothing to publish.
            return if self.release(Ordering::Relaxed) {
                Incref::RefusedClaimed
            } else {
                Incref::Refused
            };
        }
        Incref::Taken
    }

    /// Gives back the reference of a successful `incref`. True if that claimed a deferred
    /// close (`defer_close`): the caller closes.
    #[inline]
    #[must_use]
    pub(crate) fn decref(&self) -> bool {
        // Release: pairs with `in_flight`'s acquire that reads 0, or with the acquire of
        // the claim of a deferred close (through a release sequence if RMWs came between):
        // the operation's uses of the number happen before the closer releases it.
        self.release(Ordering::Release)
    }

    /// Takes one reference away; true if it took the count to zero under `DEFERRED` and
    /// its claim won.
    #[inline]
    fn release(&self, order: Ordering) -> bool {
        let prev = self.refs.fetch_add(MINUS_ONE, order);
        if prev & COUNT == 0 {
            throw("netpoll: decref without incref");
        }
        prev.wrapping_sub(1) == DEFERRED && self.claim()
    }

    /// The one move from `DEFERRED` with no reference to `DEFERRED | CLAIMED`: whoever
    /// makes it closes. Whoever brings the count back to zero tries; one whose try fails
    /// lost to a transient reference (a refused `incref`), whose give-back tries again.
    #[cold]
    fn claim(&self) -> bool {
        // Acquire: the value read ends a release sequence that every operation's `decref`
        // is part of, so their uses of the number happen before the close.
        self.refs
            .compare_exchange(
                DEFERRED,
                DEFERRED | CLAIMED,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// The closer, after `mark_closing`, instead of waiting until nothing is in flight
    /// (it may not wait: a caller inside a system call on the thread the operations need):
    /// hands the close to whoever gives back the last reference. True if none was left,
    /// and the close is the caller's own.
    pub(crate) fn defer_close(&self) -> bool {
        // AcqRel: as `in_flight`'s RMW (publishes `closing` to later increfs; acquires the
        // decrements before it).
        let prev = self.refs.fetch_add(DEFERRED, Ordering::AcqRel);
        prev & COUNT == 0 && self.claim()
    }

    /// A deferred close not yet claimed: the program's close has returned, the number is
    /// still open, and an operation in flight will close it.
    pub(crate) fn close_pending(&self) -> bool {
        // Acquire: pairs with the claim, a CAS whose acquire covers the release above.
        self.refs.load(Ordering::Acquire) & (DEFERRED | CLAIMED) == DEFERRED
    }

    /// Whether a deferred close was claimed (and not yet undone by a new `open`). Under the
    /// descriptor lock.
    pub(crate) fn close_claimed(&self) -> bool {
        self.refs.load(Ordering::Acquire) & CLAIMED != 0
    }

    /// Closing begins: from the next `in_flight` on, no `incref` succeeds. Under the
    /// descriptor lock, on a descriptor that `is_open`.
    pub(crate) fn mark_closing(&self) {
        // Relaxed: published to operations by `in_flight`'s RMW (a release), which follows.
        self.closing.store(true, Ordering::Relaxed);
    }

    /// Whether operations that took their reference before the closer's first call may
    /// still be in flight. The closer, after `mark_closing`, calls it until it is false;
    /// then no operation uses the number, and none will.
    pub(crate) fn in_flight(&self) -> bool {
        // A read-modify-write, not a load (module doc): it reads the latest value of
        // `refs`, so it counts every increment ordered before it, and an increment ordered
        // after it reads from it. Release: pairs with `incref`'s acquire (publishes
        // `closing`). Acquire: pairs with `decref`'s release.
        self.refs.fetch_add(0, Ordering::AcqRel) & COUNT != 0
    }

    /// A registration (or a new one after a close): operations may take references again.
    /// Under the descriptor lock.
    pub(crate) fn open(&self) {
        // A deferred close's bits go (a pending one's too: the number was closed where
        // the runtime did not see it and holds another file now, which the claimer must
        // not close). The count may move under us (refused increfs), the bits not: a
        // subtraction.
        let bits = self.refs.load(Ordering::Relaxed) & (DEFERRED | CLAIMED);
        if bits != 0 {
            self.refs.fetch_add(bits.wrapping_neg(), Ordering::Relaxed);
        }
        // Release: pairs with `is_open`'s acquire: whoever sees the fd open sees what the
        // registration wrote before (its `seq`).
        self.closing.store(false, Ordering::Release);
        self.registered.store(true, Ordering::Release);
    }

    /// Off the poller (`unregister`, or `close_begin` after its wait). Under the
    /// descriptor lock.
    pub(crate) fn mark_unregistered(&self) {
        // Relaxed: publishes nothing; an operation that misses it meets the eviction's new
        // `seq` (unregister) or `closing` (close_begin).
        self.registered.store(false, Ordering::Relaxed);
    }

    /// Registered and not being closed (`PollDesc::registered`).
    #[inline]
    pub(crate) fn is_open(&self) -> bool {
        // Acquire: pairs with `open`'s release.
        self.registered.load(Ordering::Acquire) && !self.closing.load(Ordering::Acquire)
    }

    /// Registered, being closed or not. Under the descriptor lock.
    pub(crate) fn is_registered(&self) -> bool {
        // Relaxed: the descriptor lock orders it with the stores.
        self.registered.load(Ordering::Relaxed)
    }

    /// Being closed (since `mark_closing`, until the next `open`). Under the descriptor
    /// lock, or by a waiter the close's eviction woke.
    pub(crate) fn is_closing(&self) -> bool {
        // Relaxed: the descriptor lock orders it with `mark_closing`, or the wake-up by the
        // eviction that follows `mark_closing` under that lock does.
        self.closing.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(i: Incref) -> bool {
        i == Incref::Taken
    }

    /// The flags' life cycle, one thread: an `incref` succeeds only while the fd is
    /// registered and not being closed, and a failed one leaves no reference.
    #[test]
    fn flags_gate_incref() {
        let r = FdRefs::new();
        assert!(!taken(r.incref()), "not registered yet");
        r.open();
        assert!(r.is_open() && taken(r.incref()));
        assert!(!r.decref());
        r.mark_unregistered();
        assert!(!r.is_open() && !taken(r.incref()), "unregistered");
        r.open();
        assert!(taken(r.incref()));
        r.mark_closing();
        assert!(r.in_flight(), "the reference taken before the close");
        assert!(
            !r.is_open() && r.is_registered() && !taken(r.incref()),
            "closing"
        );
        assert!(!r.decref());
        assert!(!r.in_flight());
        r.mark_unregistered();
        r.open();
        assert!(
            !r.is_closing() && taken(r.incref()),
            "registered again after the close"
        );
        assert!(!r.decref());
        assert_eq!(r.refs.load(Ordering::Relaxed), 0);
    }

    /// A deferred close, one thread: the closer goes with two references in flight; the
    /// second decref claims the close, once; a refused incref after that claims nothing;
    /// the next registration starts clean.
    #[test]
    fn deferred_close_goes_to_the_last_reference() {
        let r = FdRefs::new();
        r.open();
        assert!(taken(r.incref()) && taken(r.incref()));
        r.mark_closing();
        assert!(!r.defer_close(), "references in flight: deferred");
        assert!(r.close_pending());
        assert_eq!(r.incref(), Incref::Refused);
        assert!(!r.decref());
        assert!(r.decref(), "the last reference claims the close");
        assert!(!r.close_pending() && r.close_claimed());
        assert_eq!(r.incref(), Incref::Refused, "claimed once");
        r.mark_unregistered();
        r.open();
        assert!(!r.close_claimed() && taken(r.incref()));
        assert!(!r.decref());
        assert_eq!(r.refs.load(Ordering::Relaxed), 0);
        // Nothing in flight: the closer's own.
        r.mark_closing();
        assert!(r.defer_close());
    }
}

/// Loom models of the protocol on loom's atomics (run by `tests/loom.rs`). The fd number
/// is a loom `UnsafeCell`: operations read it while they hold a reference, the closer
/// writes it (releases the number) once `in_flight` said none is left, so an operation
/// still in flight then, or one not ordered before the write, fails the model.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::loom::cell::UnsafeCell;
    use crate::loom::model;
    use crate::loom::sync::Arc;
    use crate::loom::sync::atomic::{AtomicBool as LoomBool, AtomicU32 as LoomU32};
    use crate::loom::thread;

    /// The fd number while the fd is open.
    const NUMBER: i32 = 7;
    /// What the closer writes when it releases the number.
    const RELEASED: i32 = -1;

    type Refs = FdRefs<LoomBool, LoomU32>;

    /// A registered fd.
    struct Fd {
        refs: Refs,
        /// The fd number.
        number: UnsafeCell<i32>,
        /// Times the number was released.
        closes: LoomU32,
    }

    impl Fd {
        fn registered() -> Arc<Fd> {
            Arc::new(Fd {
                refs: FdRefs {
                    registered: LoomBool::new(true),
                    closing: LoomBool::new(false),
                    refs: LoomU32::new(0),
                },
                number: UnsafeCell::new(NUMBER),
                closes: LoomU32::new(0),
            })
        }

        /// An operation, with `incref` as its way of taking a reference: uses the number if
        /// it got one. Whether it did.
        fn op_with(&self, incref: impl Fn(&Refs) -> bool) -> bool {
            if !incref(&self.refs) {
                return false;
            }
            // SAFETY: the model's subject: the closer writes the number only once no
            // reference is left (loom reports the access if it is not ordered before).
            let n = self.number.with(|p| unsafe { *p });
            assert_eq!(n, NUMBER, "an operation used a released fd number");
            if self.refs.decref() {
                self.release_number();
            }
            true
        }

        /// An operation as the runtime's make it: a refused incref that claimed a deferred
        /// close makes it.
        fn op(&self) -> bool {
            self.op_with(|r| match r.incref() {
                Incref::Taken => true,
                Incref::Refused => false,
                Incref::RefusedClaimed => {
                    self.release_number();
                    false
                }
            })
        }

        /// The close proper (the number released), by the closer or by whoever claimed a
        /// deferred close; counted, so that a model sees it happen exactly once.
        fn release_number(&self) {
            // SAFETY: the model's subject: no operation holds a reference now.
            self.number.with_mut(|p| unsafe { *p = RELEASED });
            self.closes.fetch_add(1, Ordering::Relaxed);
        }

        /// `close_begin`, with `in_flight` as its look at the references: mark closing,
        /// wait until none is in flight (a yield where the runtime spins, yields or
        /// sleeps), release the number, unregister.
        fn close_with(&self, in_flight: impl Fn(&Refs) -> bool) {
            self.refs.mark_closing();
            while in_flight(&self.refs) {
                thread::yield_now();
            }
            self.release_number();
            self.refs.mark_unregistered();
        }

        /// `close_begin` from inside a system call: mark closing, hand the close to the
        /// last reference.
        fn close_deferred(&self) {
            self.refs.mark_closing();
            if self.refs.defer_close() {
                self.release_number();
            }
        }

        fn close(&self) {
            self.close_with(Refs::in_flight);
        }

        /// After every thread is done: no reference left, the fd neither open nor registered.
        fn check_final(&self) {
            assert_eq!(
                self.refs.refs.load(Ordering::Relaxed),
                0,
                "a reference left behind"
            );
            assert!(!self.refs.is_open() && !self.refs.is_registered());
            assert!(self.refs.is_closing());
            assert_eq!(self.closes.load(Ordering::Relaxed), 1, "closed once");
        }

        /// `check_final` for a deferred close: the count is zero, claimed, closed once.
        fn check_final_deferred(&self) {
            assert_eq!(
                self.refs.refs.load(Ordering::Relaxed),
                DEFERRED | CLAIMED,
                "a reference left behind, or the close unclaimed"
            );
            assert!(self.refs.is_closing() && !self.refs.close_pending());
            assert_eq!(self.closes.load(Ordering::Relaxed), 1, "closed once");
        }
    }

    /// Two operations race with a close: whichever got a reference finished with the
    /// number before the closer released it; the others did not touch it.
    fn check_close_vs_ops(incref: fn(&Refs) -> bool, in_flight: fn(&Refs) -> bool) {
        model(move || {
            let fd = Fd::registered();
            let ops: Vec<_> = (0..2)
                .map(|_| {
                    let fd = fd.clone();
                    thread::spawn(move || fd.op_with(incref))
                })
                .collect();
            fd.close_with(in_flight);
            for op in ops {
                op.join().unwrap();
            }
            fd.check_final();
        });
    }

    /// The protocol as the runtime runs it.
    #[test]
    fn close_waits_for_every_op() {
        check_close_vs_ops(|r| r.incref() == Incref::Taken, Refs::in_flight);
    }

    /// Two operations race with a closer that does not wait: whichever took a reference
    /// finished with the number before it was released; it is released exactly once, by
    /// the closer or by the last reference (a refused incref's included).
    #[test]
    fn deferred_close_is_made_once_after_every_op() {
        model(|| {
            let fd = Fd::registered();
            let ops: Vec<_> = (0..2)
                .map(|_| {
                    let fd = fd.clone();
                    thread::spawn(move || fd.op())
                })
                .collect();
            fd.close_deferred();
            for op in ops {
                op.join().unwrap();
            }
            fd.check_final_deferred();
        });
    }

    /// Without the claim (whoever sees the count reach zero under `DEFERRED` closes): the
    /// last decref and a refused incref's give-back after it both see it, and both close.
    /// The model must find it.
    #[test]
    #[should_panic(expected = "closed once")]
    fn deferred_close_broken_without_the_claim() {
        model(|| {
            let fd = Fd::registered();
            assert_eq!(fd.refs.incref(), Incref::Taken);
            let fd2 = fd.clone();
            let refused = thread::spawn(move || {
                // A refused incref whose give-back closes without claiming.
                fd2.refs.refs.fetch_add(1, Ordering::Acquire);
                if fd2.refs.closing.load(Ordering::Relaxed) {
                    let prev = fd2.refs.refs.fetch_add(MINUS_ONE, Ordering::Relaxed);
                    if prev.wrapping_sub(1) & COUNT == 0 && prev & DEFERRED != 0 {
                        fd2.closes.fetch_add(1, Ordering::Relaxed);
                    }
                } else {
                    let _ = fd2.refs.decref();
                }
            });
            fd.refs.mark_closing();
            if fd.refs.defer_close() {
                fd.closes.fetch_add(1, Ordering::Relaxed);
            }
            let prev = fd.refs.refs.fetch_add(MINUS_ONE, Ordering::Release);
            if prev.wrapping_sub(1) & COUNT == 0 {
                fd.closes.fetch_add(1, Ordering::Relaxed);
            }
            refused.join().unwrap();
            assert_eq!(fd.closes.load(Ordering::Relaxed), 1, "closed once");
        });
    }

    /// The closer's look made a plain load (the RMW's barrier gone): it can read 0 while
    /// an operation's increment is already done, and the operation miss `closing`. The
    /// model must find it.
    #[test]
    #[should_panic(expected = "Causality violation")]
    fn close_broken_with_a_plain_look() {
        check_close_vs_ops(
            |r| r.incref() == Incref::Taken,
            |r| r.refs.load(Ordering::Acquire) != 0,
        );
    }

    /// `incref` with a relaxed increment (its barrier gone): it can come after the
    /// closer's RMW in `refs`' order and still miss `closing`. The model must find it.
    #[test]
    #[should_panic(expected = "Causality violation")]
    fn incref_broken_without_acquire() {
        check_close_vs_ops(
            |r| {
                r.refs.fetch_add(1, Ordering::Relaxed);
                if r.closing.load(Ordering::Relaxed) || !r.registered.load(Ordering::Relaxed) {
                    r.refs.fetch_add(MINUS_ONE, Ordering::Relaxed);
                    return false;
                }
                true
            },
            Refs::in_flight,
        );
    }

    /// An operation that races with the close, then one that starts after the close
    /// completed (it learns so through `closed`, which stands for close(2) and whatever
    /// told it): that one's `incref` fails, and gives its reference back.
    #[test]
    fn incref_after_close_fails() {
        model(|| {
            let fd = Fd::registered();
            let closed = Arc::new(LoomBool::new(false));
            let (fd2, closed2) = (fd.clone(), closed.clone());
            let closer = thread::spawn(move || {
                fd2.close();
                closed2.store(true, Ordering::Release);
            });
            fd.op();
            while !closed.load(Ordering::Acquire) {
                thread::yield_now();
            }
            assert!(
                fd.refs.incref() != Incref::Taken,
                "an incref succeeded after the close completed"
            );
            closer.join().unwrap();
            fd.check_final();
        });
    }
}
