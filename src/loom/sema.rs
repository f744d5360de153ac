//! A model of Go's semaphore for one address, for the loom models of the sync primitives
//! built on it (`sync/mutex.rs`, `rwmutex.rs`, `waitgroup.rs`); `sync` makes it a
//! `SemaWord`. Not the subject: `sync/sema.rs` has its own tests.

use super::sync::{Condvar, Mutex};
use std::collections::VecDeque;

/// A waiter's state in [`ModelSema`].
#[derive(Clone, Copy, PartialEq, Debug)]
enum Slot {
    Queued,
    /// Dequeued by a plain release: tries the count again.
    Woken,
    /// Dequeued by a hand-off: the count is already its own.
    Ticket,
}

struct SemaState {
    count: u32,
    queue: VecDeque<usize>,
    /// Per waiter ever queued, by id (ids are never reused).
    slots: Vec<Slot>,
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

    /// Adds one and wakes a waiter (`handoff` gives the count to the woken waiter itself).
    pub(crate) fn up(&self, handoff: bool) {
        let mut st = self.st.lock().unwrap();
        st.count += 1;
        if let Some(w) = st.queue.pop_front() {
            st.slots[w] = if handoff {
                st.count -= 1;
                Slot::Ticket
            } else {
                Slot::Woken
            };
            self.cv.notify_all();
        }
    }
}
