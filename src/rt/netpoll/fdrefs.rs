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
//! `registered` is not part of the pair: `unregister` does not wait for references (it
//! only takes the fd off the poller; its number stays the user's), and `close_begin`
//! clears it only after the wait. Both flags are written under the descriptor lock.

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::sync::{AtomicFlag, AtomicWord};
use crate::sys::throw;

/// `refs`' wrapping add of this takes one away ([`AtomicWord`] has no subtraction).
const MINUS_ONE: u32 = u32::MAX;

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
    pub(crate) fn incref(&self) -> bool {
        // Acquire: pairs with `in_flight`'s release when that RMW came first in `refs`'
        // order; then `closing = true` happens before the look below.
        self.refs.fetch_add(1, Ordering::Acquire);
        // Relaxed: after the acquire above, which is what orders them (module doc).
        if self.closing.load(Ordering::Relaxed) || !self.registered.load(Ordering::Relaxed) {
            // Relaxed: this reference covered no use of the number, nothing to publish.
            self.refs.fetch_add(MINUS_ONE, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Gives back the reference of a successful `incref`.
    #[inline]
    pub(crate) fn decref(&self) {
        // Release: pairs with `in_flight`'s acquire that reads 0 (through a release
        // sequence if RMWs came between): the operation's uses of the number happen
        // before the closer releases it.
        if self.refs.fetch_add(MINUS_ONE, Ordering::Release) == 0 {
            throw("netpoll: decref without incref");
        }
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
        self.refs.fetch_add(0, Ordering::AcqRel) != 0
    }

    /// A registration (or a new one after a close): operations may take references again.
    /// Under the descriptor lock.
    pub(crate) fn open(&self) {
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

    /// The flags' life cycle, one thread: an `incref` succeeds only while the fd is
    /// registered and not being closed, and a failed one leaves no reference.
    #[test]
    fn flags_gate_incref() {
        let r = FdRefs::new();
        assert!(!r.incref(), "not registered yet");
        r.open();
        assert!(r.is_open() && r.incref());
        r.decref();
        r.mark_unregistered();
        assert!(!r.is_open() && !r.incref(), "unregistered");
        r.open();
        assert!(r.incref());
        r.mark_closing();
        assert!(r.in_flight(), "the reference taken before the close");
        assert!(!r.is_open() && r.is_registered() && !r.incref(), "closing");
        r.decref();
        assert!(!r.in_flight());
        r.mark_unregistered();
        r.open();
        assert!(
            !r.is_closing() && r.incref(),
            "registered again after the close"
        );
        r.decref();
        assert_eq!(r.refs.load(Ordering::Relaxed), 0);
    }
}

/// Loom models of the protocol on loom's atomics (run by `tests/loom.rs`). The fd number
/// is a loom `UnsafeCell`: operations read it while they hold a reference, the closer
/// writes it (releases the number) once `in_flight` said none is left, so an operation
/// still in flight then, or one not ordered before the write, fails the model.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::loom_support::model;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;
    use loom::sync::atomic::{AtomicBool as LoomBool, AtomicU32 as LoomU32};
    use loom::thread;

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
            self.refs.decref();
            true
        }

        fn op(&self) -> bool {
            self.op_with(Refs::incref)
        }

        /// `close_begin`, with `in_flight` as its look at the references: mark closing,
        /// wait until none is in flight (a yield where the runtime spins, yields or
        /// sleeps), release the number, unregister.
        fn close_with(&self, in_flight: impl Fn(&Refs) -> bool) {
            self.refs.mark_closing();
            while in_flight(&self.refs) {
                thread::yield_now();
            }
            // SAFETY: the model's subject: no operation holds a reference now.
            self.number.with_mut(|p| unsafe { *p = RELEASED });
            self.refs.mark_unregistered();
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
        check_close_vs_ops(Refs::incref, Refs::in_flight);
    }

    /// The closer's look made a plain load (the RMW's barrier gone): it can read 0 while
    /// an operation's increment is already done, and the operation miss `closing`. The
    /// model must find it.
    #[test]
    #[should_panic(expected = "Causality violation")]
    fn close_broken_with_a_plain_look() {
        check_close_vs_ops(Refs::incref, |r| r.refs.load(Ordering::Acquire) != 0);
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
                !fd.refs.incref(),
                "an incref succeeded after the close completed"
            );
            closer.join().unwrap();
            fd.check_final();
        });
    }
}
