//! select (Go's selectgo, select.go).
//!
//! 1. The enabled cases (non-null channel) are put in a random *poll order* (an inside-out
//!    Fisher–Yates shuffle), so that among ready cases each is chosen with equal chance;
//!    and in a *lock order* by channel address, so that two selects on overlapping
//!    channels always lock them in the same order. A channel named by several cases is
//!    locked once.
//! 2. Pass 0, no lock held: while the cases in poll order are on buffered channels outside
//!    exclusive mode (nobody waits on them), each tries its operation lock-free, and the
//!    first that succeeds is the select's. Pass 1, all locks held and every buffered
//!    channel in exclusive mode: the first case in poll order that can proceed does, and
//!    the select returns it; only this pass decides that no case can.
//! 3. Otherwise (and if it may wait) one sudog per enabled case, all sharing one waiter,
//!    goes on its channel's queue, in lock order; the caller blocks (`waitq::block`).
//!    Whoever claims the waiter first (a peer, a closer, the timeout; see `sudog`)
//!    completes exactly one case.
//! 4. Pass 3, all locks held again: every sudog except the one that fired is taken off
//!    its queue (a queue may still hold them; a waker may have dropped some already).
//!
//! Unlike Go, a case woken by a close reports it (status -EPIPE) instead of looping: each
//! sudog knows its case, and the closer wrote the outcome into it.
//!
//! The sudogs come from the sudog caches (`sudog::acquire_sudog`, one per enabled case) and
//! go back once pass 3 is done. Scratch space (orders, distinct channels, the sudog
//! pointers) is on the stack for up to `SMALL_CASES` cases, on the heap beyond.

use core::ffi::c_void;
use core::ptr::null;
use core::sync::atomic::{AtomicU64, Ordering};

use super::hchan::{Chan, ChanError, Fast, Mode, Now};
use super::waitq;
use crate::rt::sudog::{self, Sudog, Waiter};
use crate::rt::{self, WaitReason};

/// Cases up to this many use stack scratch space (16 bytes per case).
const SMALL_CASES: usize = 16;

/// One case; the same layout as the C `gmp_select_case` (checked in ffi).
#[repr(C)]
pub struct Case {
    /// Null disables the case.
    pub chan: *mut Chan,
    /// SEND or RECV.
    pub op: u32,
    /// Send: the element; receive: where to store it (may be null).
    pub buf: *mut c_void,
    /// Out: set on the case that fired: 0, or -EPIPE (the channel is closed).
    pub status: i32,
}

// Private: cbindgen would copy any `pub` constant, even an associated one, into the C
// header; the C names (GMP_SEND, GMP_RECV) are in ffi.
const SEND: u32 = 1;
const RECV: u32 = 2;
const MAX_CASES: usize = 65536;

impl Case {
    /// Op of a send case (GMP_SEND).
    pub const fn send_op() -> u32 {
        SEND
    }
    /// Op of a receive case (GMP_RECV).
    pub const fn recv_op() -> u32 {
        RECV
    }
    /// Largest number of cases.
    pub const fn max_cases() -> usize {
        MAX_CASES
    }
}

/// Random state for threads that are not Ms (foreign threads): a Weyl sequence mixed by
/// splitmix64. Ms use their own `fastrand`.
static FOREIGN_RAND: AtomicU64 = AtomicU64::new(0x853c_49e6_748f_ea9b);

/// A random number (Go's cheaprand).
fn cheaprand() -> u32 {
    let m = rt::getm();
    if m.is_null() {
        let mut z = FOREIGN_RAND
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        return (z ^ (z >> 31)) as u32;
    }
    // SAFETY: m is this thread's M, and this thread is the owner of its fastrand; nothing
    // here can switch goroutines.
    unsafe {
        let mut x = (*m).fastrand.get();
        if x == 0 {
            x = 0x2545_f491_4f6c_dd1d;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        (*m).fastrand.set(x);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }
}

/// A uniform random number in [0, n) (Lemire's multiply-shift; bias < n / 2^32).
fn cheaprandn(n: u32) -> u32 {
    ((cheaprand() as u64 * n as u64) >> 32) as u32
}

/// Runs a select over `cases` (Go's selectgo). Returns the index of the case that fired,
/// with its `status` set; `WouldBlock` / `TimedOut` if none could proceed in time.
///
/// # Safety
/// Every enabled case has a live channel, `op` is SEND or RECV, and its `buf` is
/// valid for the channel's element size (receive: writable or null; send: readable).
/// The caller has checked that some case is enabled or `mode` is not `Block`.
pub unsafe fn select(cases: &mut [Case], mode: Mode) -> Result<usize, ChanError> {
    if let Some(i) = only_enabled(cases) {
        // SAFETY: caller contract.
        return unsafe { select_one(&mut cases[i], mode) }.map(|()| i);
    }
    if !crate::sys::tsan::on() {
        // SAFETY: caller contract.
        return unsafe { select_inner(cases, mode) };
    }
    // ThreadSanitizer (rt/tsan.rs): a case that fires acquires what a peer released on
    // its channel; every send case releases first (a select may send).
    for c in cases.iter().filter(|c| !c.chan.is_null()) {
        crate::sys::tsan::release(c.chan as usize);
    }
    // SAFETY: caller contract.
    let r = unsafe { select_inner(cases, mode) };
    if let Ok(i) = r {
        crate::sys::tsan::acquire(cases[i].chan as usize);
    }
    r
}

/// The index of the only enabled case, if exactly one is.
#[inline]
fn only_enabled(cases: &[Case]) -> Option<usize> {
    let mut it = cases.iter().enumerate().filter(|(_, c)| !c.chan.is_null());
    match (it.next(), it.next()) {
        (Some((i, _)), None) => Some(i),
        _ => None,
    }
}

/// A select with one enabled case is that case's send or receive, with the select's
/// `mode` (Go compiles such a select into one): the same outcomes, written into the case
/// (`status` -EPIPE for a closed channel), and the plain operations' speed.
///
/// # Safety
/// As `select`, for `cas`.
unsafe fn select_one(cas: &mut Case, mode: Mode) -> Result<(), ChanError> {
    // SAFETY: caller contract (an enabled case's channel is alive, its buffer valid).
    let r = unsafe {
        let c = &*cas.chan;
        if cas.op == SEND {
            c.send(cas.buf as *const u8, mode)
        } else {
            c.recv(cas.buf as *mut u8, mode)
        }
    };
    match r {
        Ok(()) => cas.status = 0,
        Err(ChanError::Closed) => cas.status = -libc::EPIPE,
        Err(e) => return Err(e),
    }
    Ok(())
}

/// `select` without the sanitizer's annotations.
///
/// # Safety
/// As for `select`.
unsafe fn select_inner(cases: &mut [Case], mode: Mode) -> Result<usize, ChanError> {
    // A safe point (see Chan::send).
    rt::preempt_check();
    let n = cases.len();
    if n <= SMALL_CASES {
        let mut order = [0u32; 2 * SMALL_CASES];
        let mut locks = [null::<Chan>(); SMALL_CASES];
        let mut sgs = [null::<Sudog>(); SMALL_CASES];
        // SAFETY: caller contract; scratch sized for n.
        unsafe {
            selectgo(
                cases,
                mode,
                &mut order[..2 * n],
                &mut locks[..n],
                &mut sgs[..n],
            )
        }
    } else {
        let mut order = vec![0u32; 2 * n];
        let mut locks = vec![null::<Chan>(); n];
        let mut sgs = vec![null::<Sudog>(); n];
        // SAFETY: as above.
        unsafe { selectgo(cases, mode, &mut order, &mut locks, &mut sgs) }
    }
}

/// Locks the distinct channels in `locks` (ascending).
fn sellock(locks: &[*const Chan]) {
    for &c in locks {
        // SAFETY: enabled cases' channels are alive during the select.
        unsafe { (*c).lock_excl() };
    }
}

fn selunlock(locks: &[*const Chan]) {
    for &c in locks.iter().rev() {
        // SAFETY: as above; we hold each lock.
        unsafe { (*c).unlock_excl() };
    }
}

/// Pass 1 of `selectgo`: the first case in poll order that can proceed does; its index
/// (with its status set) once the locks are released, or `None` with them still held.
/// `LOCK_FREE`: a case on a ring outside exclusive mode tries its operation lock-free
/// (without it, every buffered channel must be in the mode).
///
/// # Safety
/// All of `locks` held (the distinct channels of the enabled cases); buffers per
/// `select`'s contract.
#[inline(always)]
unsafe fn pass1<const LOCK_FREE: bool>(
    cases: &mut [Case],
    pollorder: &[u32],
    locks: &[*const Chan],
) -> Option<usize> {
    for &i in pollorder {
        let cas = &mut cases[i as usize];
        // SAFETY: caller contract.
        let now = unsafe {
            let c = &*cas.chan;
            if LOCK_FREE && c.lock_free_now() {
                match c.ring_fast(cas.op == SEND, cas.buf as *mut u8) {
                    // Outside the mode: nothing to count toward leaving it.
                    Fast::Done => {
                        selunlock(locks);
                        cas.status = 0;
                        return Some(i as usize);
                    }
                    Fast::WouldBlock => continue,
                    // Only the holder of the lock we hold could have entered the mode.
                    Fast::Locked => rt::throw("select: exclusive mode under our lock"),
                }
            } else if cas.op == SEND {
                c.send_locked(c.synced(), cas.buf as *const u8)
            } else {
                c.recv_locked(c.synced(), cas.buf as *mut u8)
            }
        };
        match now {
            Now::Blocked => continue,
            Now::Closed => {
                selunlock(locks);
                cas.status = -libc::EPIPE;
                return Some(i as usize);
            }
            Now::Done(w) => {
                // SAFETY: all locks held. A select that did not wait is as calm as a
                // plain operation under the lock: without counting it, a channel that
                // only selects receive from never left exclusive mode once anyone had
                // waited on it.
                unsafe { (*cas.chan).synced().count_op(!w.is_null()) };
                selunlock(locks);
                if !w.is_null() {
                    // SAFETY: claimed by send_locked/recv_locked; locks released.
                    unsafe { rt::wake_waiter(w) };
                }
                cas.status = 0;
                return Some(i as usize);
            }
        }
    }
    None
}

/// # Safety
/// As `select`; `order` has 2n entries, `locks` and `sgs` n.
unsafe fn selectgo(
    cases: &mut [Case],
    mode: Mode,
    order: &mut [u32],
    locks: &mut [*const Chan],
    sgs: &mut [*const Sudog],
) -> Result<usize, ChanError> {
    let n = cases.len();
    let (pollorder, lockorder) = order.split_at_mut(n);

    // Poll order: a random permutation of the enabled cases.
    let mut np = 0;
    for (i, cas) in cases.iter().enumerate() {
        if cas.chan.is_null() {
            continue;
        }
        let j = cheaprandn(np as u32 + 1) as usize;
        pollorder[np] = pollorder[j];
        pollorder[j] = i as u32;
        np += 1;
    }
    let pollorder = &pollorder[..np];
    if np == 0 {
        // Nothing can ever fire: only the timeout (or the caller's scope) can end this.
        let deadline = mode.wait_for()?;
        match rt::scope::clamp(rt::scope::current(), deadline) {
            Some(d) => {
                rt::timer::sleep(d - crate::sys::nanotime());
                return Err(ChanError::ended());
            }
            None => rt::throw("select: no cases and no timeout"),
        }
    }
    // Pass 0, without locks: in poll order, a case on a buffered channel outside exclusive
    // mode tries its operation lock-free, as a plain send or receive does first (nobody
    // waits on such a channel, and it is open). The pass stops at the first case it cannot
    // decide that way, so that a ready case earlier in poll order is never passed over for
    // a later one. A case done here is a send or receive that could proceed when it did.
    // "Nothing can proceed" is only ever decided below, with every channel locked and in
    // exclusive mode: cases looked at one after another, while others keep operating on
    // their rings, are no snapshot of the whole (a value may move from a channel not yet
    // looked at to one already passed).
    for &i in pollorder {
        let cas = &mut cases[i as usize];
        // SAFETY: an enabled case's channel is alive; buffers per the caller contract.
        match unsafe { (*cas.chan).select_fast(cas.op == SEND, cas.buf as *mut u8) } {
            Fast::Done => {
                cas.status = 0;
                return Ok(i as usize);
            }
            Fast::WouldBlock => continue,
            Fast::Locked => break,
        }
    }

    // Lock order: by channel address; distinct channels in `locks`.
    let lockorder = &mut lockorder[..np];
    lockorder.copy_from_slice(pollorder);
    lockorder.sort_unstable_by_key(|&i| cases[i as usize].chan as usize);
    let mut nl = 0;
    for &i in lockorder.iter() {
        let c = cases[i as usize].chan as *const Chan;
        if nl == 0 || locks[nl - 1] != c {
            locks[nl] = c;
            nl += 1;
        }
    }
    let locks = &locks[..nl];
    let lockorder = &*lockorder;

    // The locks, leaving each ring's mode as it is: a buffered channel outside exclusive
    // mode has nobody waiting on it and is open, and with its lock held nobody can start
    // to wait or close it, but lock-free operations still run on it.
    let mut lock_free = false;
    for &c in locks {
        // SAFETY: enabled cases' channels are alive during the select; then c is locked.
        unsafe {
            (*c).lock_keep_mode();
            lock_free |= (*c).lock_free_now();
        }
    }
    // Pass 1: the first ready case in poll order. With a ring outside exclusive mode among
    // the channels, a first pass tries such cases lock-free; if no case is ready, those
    // rings enter the mode and pass 1 runs again: only a pass over channels all in the
    // mode decides that no case can proceed, a snapshot of all of them at once, as Go's
    // is (see Pass 0).
    // SAFETY (both): all locks held; buffers per the caller contract.
    if lock_free {
        if let Some(i) = unsafe { pass1::<true>(cases, pollorder, locks) } {
            return Ok(i);
        }
        for &c in locks {
            // SAFETY: we hold c's lock (a no-op for a ring in the mode).
            unsafe { (*c).enter_excl_locked() };
        }
    }
    if let Some(i) = unsafe { pass1::<false>(cases, pollorder, locks) } {
        return Ok(i);
    }

    let deadline = match mode.wait_for() {
        Ok(d) => d,
        Err(e) => {
            selunlock(locks);
            return Err(e);
        }
    };

    // Pass 2: queue one sudog per enabled case, in lock order. Each channel is held until
    // pass 3 is done, and each sudog until it is completed or taken off its queue, so that
    // releasing a handle meanwhile does not destroy the channel under us (hchan
    // "Lifetime").
    for &c in locks {
        // SAFETY: all locks held.
        unsafe { (*c).synced().hold() };
    }
    let sc = rt::scope::current();
    let deadline = rt::scope::clamp(sc, deadline);
    // Several queues (and maybe a deadline): its claimants hold different locks.
    let w = Waiter::new(false);
    let sgs = &mut sgs[..np];
    for (k, &i) in lockorder.iter().enumerate() {
        let cas = &cases[i as usize];
        let sg = sudog::acquire_sudog();
        sg.prepare(&w, cas.buf as *mut u8, i as usize);
        sgs[k] = sg;
        // SAFETY: all locks held; w lives in this frame, and sg is ours, until pass 3.
        unsafe {
            let s = (*cas.chan).synced();
            s.hold();
            if cas.op == SEND {
                s.sendq.enqueue(sg);
            } else {
                s.recvq.enqueue(sg);
            }
        }
    }
    // SAFETY: we hold exactly `locks`, and our sudogs are queued on them.
    let claimed = unsafe { waitq::block(&w, locks, deadline, WaitReason::Select, sc) };

    // Pass 3: take every other sudog off its queue, and drop our holds.
    sellock(locks);
    let fired = w.fired.load(Ordering::Acquire) as *const Sudog;
    for (k, &i) in lockorder.iter().enumerate() {
        let sg = sgs[k];
        if sg == fired {
            continue;
        }
        let cas = &cases[i as usize];
        // SAFETY: all locks held; sg was queued on this channel's queue.
        unsafe {
            let s = (*cas.chan).synced();
            if cas.op == SEND {
                s.sendq.remove(sg);
            } else {
                s.recvq.remove(sg);
            }
            // Not the last hold: the channel's own hold remains.
            let _ = s.unhold();
        }
    }
    for &c in locks.iter().rev() {
        // SAFETY: we hold c's lock and a hold on it; after its last hold is dropped under
        // the lock, the destroyer is the only one to touch it.
        unsafe {
            let destroy = (*c).synced().unhold();
            (*c).unlock_excl();
            if destroy {
                Chan::destroy(c as *mut Chan);
            }
        }
    }
    let result = if claimed {
        // SAFETY: fired is one of our sudogs (a waker claimed us).
        let (i, ok) = unsafe { ((*fired).case.get(), (*fired).success.get()) };
        cases[i].status = if ok { 0 } else { -libc::EPIPE };
        Ok(i)
    } else {
        Err(ChanError::ended())
    };
    for &sg in sgs.iter() {
        // SAFETY: sgs holds the sudogs acquired in pass 2 (never freed); pass 3 took them
        // all off their queues (the fired one was dequeued by its waker, whose last access
        // preceded our wake-up), and no waker touches them once we hold no lock.
        unsafe {
            (*sg).clear();
            sudog::release_sudog(&*sg);
        }
    }
    result
}
