//! The untimed waits of threads that are not Ms (C main, a Python thread) on the runtime's
//! notes (channels, select, WaitGroup, mutex, semaphore, cond), registered while they last:
//! the deadlock detector (checkdead.rs) counts them as asleep, the dump lists them.

use core::sync::atomic::{AtomicI32, AtomicI64, AtomicPtr, AtomicU8, AtomicU64, Ordering};

use super::*;
use crate::sys::Note;

/// Slots for foreign threads in untimed waits. A wait that finds them all taken is counted
/// in `FOREIGN_UNTRACKED` and keeps the detector quiet until it ends.
pub(super) const SLOTS: usize = 256;

pub(super) struct Slot {
    pub(super) tid: AtomicI32,
    pub(super) note: AtomicPtr<Note>,
    pub(super) reason: AtomicU8,
    pub(super) since: AtomicI64,
}

pub(super) static FOREIGN: [Slot; SLOTS] = [const {
    Slot {
        tid: AtomicI32::new(0),
        note: AtomicPtr::new(core::ptr::null_mut()),
        reason: AtomicU8::new(0),
        since: AtomicI64::new(0),
    }
}; SLOTS];
/// Changes at every registration and deregistration.
pub(super) static FOREIGN_GEN: AtomicU64 = AtomicU64::new(0);
/// Registered foreign waiters, and waits that found no slot.
pub(super) static FOREIGN_WAITING: AtomicI32 = AtomicI32::new(0);
pub(super) static FOREIGN_UNTRACKED: AtomicI32 = AtomicI32::new(0);

/// A foreign thread's untimed wait on `note` (`Note::sleep`), registered for the detector
/// once the spinning phase is over and the thread enters the kernel: a wait that ends
/// while spinning (a channel ping-pong with C main) costs nothing more.
#[cold]
#[inline(never)]
pub(crate) fn foreign_sleep(note: &Note, reason: WaitReason) {
    crate::sys::foreign_wait(
        None,
        |spin| note.spin_for(spin),
        |_| {
            let _registered = ForeignWait::begin(note, reason);
            note.sleep_kernel(None)
        },
    );
}

/// A foreign thread's untimed wait, registered while it lasts.
pub(super) struct ForeignWait {
    slot: usize,
}

impl ForeignWait {
    fn begin(note: &Note, reason: WaitReason) -> ForeignWait {
        let tid = crate::sys::gettid();
        let mut slot = SLOTS;
        for (i, s) in FOREIGN.iter().enumerate() {
            if s.tid.load(Ordering::Relaxed) == 0
                && s.tid
                    .compare_exchange(0, tid, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok()
            {
                s.reason.store(reason as u8, Ordering::Relaxed);
                s.since.store(crate::sys::nanotime(), Ordering::Relaxed);
                s.note
                    .store(note as *const Note as *mut Note, Ordering::SeqCst);
                slot = i;
                break;
            }
        }
        if slot == SLOTS {
            FOREIGN_UNTRACKED.fetch_add(1, Ordering::SeqCst);
        } else {
            FOREIGN_WAITING.fetch_add(1, Ordering::SeqCst);
        }
        FOREIGN_GEN.fetch_add(1, Ordering::SeqCst);
        // sysmon may be in its deep sleep (every P idle) with nobody else to wake it.
        super::sysmonwake::wake_if_deep();
        ForeignWait { slot }
    }
}

impl Drop for ForeignWait {
    fn drop(&mut self) {
        if self.slot == SLOTS {
            FOREIGN_UNTRACKED.fetch_sub(1, Ordering::SeqCst);
        } else {
            let s = &FOREIGN[self.slot];
            s.note.store(core::ptr::null_mut(), Ordering::SeqCst);
            s.tid.store(0, Ordering::SeqCst);
            FOREIGN_WAITING.fetch_sub(1, Ordering::SeqCst);
        }
        FOREIGN_GEN.fetch_add(1, Ordering::SeqCst);
    }
}
