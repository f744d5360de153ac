//! A model of Go's semaphore for one address, for the loom models of the sync primitives
//! built on it (`sync/mutex.rs`, `rwmutex.rs`, `waitgroup.rs`); `sync` makes it a
//! `SemaWord`. With the runtime's scoped waits too: one scope for all of a model's
//! scoped waiters ([`ModelSema::cancel`]), and the ghost a cancelled waiter leaves in its
//! place (`sync/sema.rs`, "Ghosts"). Not the subject: `sync/sema.rs` has its own tests.

use super::sync::{Condvar, Mutex};
use std::collections::VecDeque;

/// A ghost's action (`sync::sema::Ghost`): `Some(handoff)` asks for another release.
pub(crate) type GhostAct = std::sync::Arc<dyn Fn() -> Option<bool> + Send + Sync>;

/// A waiter's state in [`ModelSema`].
#[derive(Clone, Copy, PartialEq, Debug)]
enum Slot {
    Queued,
    /// Dequeued by a plain release: tries the count again.
    Woken,
    /// Dequeued by a hand-off: the count is already its own.
    Ticket,
    /// A cancelled waiter's ghost, queued in its place.
    Ghost,
}

struct SemaState {
    count: u32,
    queue: VecDeque<usize>,
    /// Per waiter ever queued, by id (ids are never reused).
    slots: Vec<Slot>,
    /// The ghosts' actions, by id.
    acts: Vec<Option<GhostAct>>,
    /// The scope of the scoped waiters has ended.
    cancelled: bool,
}

/// Go's semaphore for one address, as a reference: a count, a FIFO of waiters, `lifo`
/// re-queueing at the head, `handoff` giving the count to the dequeued waiter itself;
/// under loom's mutex and condvar, so a release happens-before the acquire it satisfies,
/// as the real one's atomics make it.
pub(crate) struct ModelSema {
    st: Mutex<SemaState>,
    cv: Condvar,
}

impl ModelSema {
    pub(crate) fn new() -> ModelSema {
        ModelSema {
            st: Mutex::new(SemaState {
                count: 0,
                queue: VecDeque::new(),
                slots: Vec::new(),
                acts: Vec::new(),
                cancelled: false,
            }),
            cv: Condvar::new(),
        }
    }

    /// Waits until the count is positive and takes one (`lifo` queues at the head).
    pub(crate) fn down(&self, lifo: bool) {
        let mut st = self.st.lock().unwrap();
        loop {
            if st.count > 0 {
                st.count -= 1;
                return;
            }
            let id = st.slots.len();
            st.slots.push(Slot::Queued);
            st.acts.push(None);
            if lifo {
                st.queue.push_front(id);
            } else {
                st.queue.push_back(id);
            }
            while st.slots[id] == Slot::Queued {
                st = self.cv.wait(st).unwrap();
            }
            if st.slots[id] == Slot::Ticket {
                return;
            }
        }
    }

    /// `down` for a scoped waiter: Err once [`ModelSema::cancel`] ended the wait first,
    /// leaving a ghost running `act` in its place (at the head if it had been woken and
    /// lost the count, as a woken waiter queues again).
    pub(crate) fn down_scoped(&self, lifo: bool, act: GhostAct) -> Result<(), i32> {
        let mut st = self.st.lock().unwrap();
        let mut woken = false;
        loop {
            if st.count > 0 {
                st.count -= 1;
                return Ok(());
            }
            let id = st.slots.len();
            if st.cancelled {
                st.slots.push(Slot::Ghost);
                st.acts.push(Some(act));
                if lifo || woken {
                    st.queue.push_front(id);
                } else {
                    st.queue.push_back(id);
                }
                return Err(libc::ECANCELED);
            }
            st.slots.push(Slot::Queued);
            st.acts.push(None);
            if lifo {
                st.queue.push_front(id);
            } else {
                st.queue.push_back(id);
            }
            while st.slots[id] == Slot::Queued && !st.cancelled {
                st = self.cv.wait(st).unwrap();
            }
            match st.slots[id] {
                Slot::Ticket => return Ok(()),
                Slot::Queued => {
                    // Cancelled while queued: the ghost takes our place.
                    st.slots[id] = Slot::Ghost;
                    st.acts[id] = Some(act);
                    return Err(libc::ECANCELED);
                }
                _ => woken = true, // woken: take the count, or queue again
            }
        }
    }

    /// Ends every scoped wait, present and future (the scope's cancel).
    pub(crate) fn cancel(&self) {
        self.st.lock().unwrap().cancelled = true;
        self.cv.notify_all();
    }

    /// Whether [`ModelSema::cancel`] was called.
    pub(crate) fn cancelled(&self) -> bool {
        self.st.lock().unwrap().cancelled
    }

    /// The count now.
    pub(crate) fn count(&self) -> u32 {
        self.st.lock().unwrap().count
    }

    /// Adds one and wakes a waiter (`handoff` gives the count to the woken waiter itself).
    /// A ghost it reaches takes the count and runs (outside the model's lock), and the
    /// releases it asks for follow in the same loop.
    pub(crate) fn up(&self, handoff: bool) {
        let mut handoff = handoff;
        loop {
            let act = {
                let mut st = self.st.lock().unwrap();
                st.count += 1;
                let Some(w) = st.queue.pop_front() else {
                    return;
                };
                if st.slots[w] == Slot::Ghost {
                    st.count -= 1;
                    st.acts[w].take().expect("a ghost without its action")
                } else {
                    st.slots[w] = if handoff {
                        st.count -= 1;
                        Slot::Ticket
                    } else {
                        Slot::Woken
                    };
                    self.cv.notify_all();
                    return;
                }
            };
            match act() {
                Some(h) => handoff = h,
                None => return,
            }
        }
    }
}
