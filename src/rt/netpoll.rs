//! The network poller (Go's netpoll.go and netpoll_epoll.go): goroutines wait for sockets
//! and pipes to become ready without holding a thread.
//!
//! - One epoll instance, created on first registration, edge-triggered for reading and
//!   writing at once, and an eventfd that breaks a blocking `epoll_wait` (`netpoll_break`,
//!   coalesced: while one break is pending, more cost nothing).
//! - A poll descriptor (`PollDesc`) per fd number, allocated on first use and never freed
//!   (chunks of `CHUNK` in `TABLE`), so that a late epoll event or waker never touches
//!   freed memory. `seq` changes at each registration and each close: an event tagged with
//!   an older `seq` (the epoll data carries fd and seq) belongs to a closed fd and is
//!   dropped, so readiness never leaks to a new fd with the same number.
//! - Each direction has a slot: `NIL`, `READY` (an edge arrived and nobody consumed it) or
//!   a pointer to the `IoWait` record of the goroutine parked on it. Slots change only
//!   under the descriptor's lock (`PollDesc::lock`, a leaf but for the timer lock the
//!   waiter takes under it to arm its deadline).
//!
//! # Waiting (`wait`) and readying — who makes each transition
//! | slot from → to | by |
//! |---|---|
//! | NIL → READY | an epoll event for that direction (`netpoll`) |
//! | READY → NIL | the waiter that consumes the readiness (`wait`) |
//! | NIL → record | the waiter, before it parks (gopark's unlock function drops the lock) |
//! | record → READY / NIL | an event (READY) or `evict` (close, unregister: NIL), which also claim the record |
//! | record → NIL | the waiter after it was woken (its timeout claimed it, or the other direction's slot) |
//!
//! A record is completed once, by whoever CASes its `done` flag 0 → 1 (as a channel waiter,
//! rt/sudog.rs): an event, `evict`, or the deadline's timer. The timer callback takes no
//! descriptor lock (the waiter holds it while arming the timer): it only claims and readies.
//! The woken waiter stops its timer (which waits for a callback in flight), then takes the
//! descriptor lock and removes its record from the slots, so after that nobody can reach
//! the record and its frame may die.
//!
//! # The scheduler's side
//! `find_runnable` polls without blocking when anybody waits (`SCHED.netpoll_waiters`) and
//! no M is blocked in the poller; the idle M that would sleep until the earliest timer
//! (the timer M, timer.rs) sleeps in `epoll_wait` instead once the poller exists, also
//! when no timer is pending but goroutines wait on fds; sysmon polls when nobody has for
//! 10 ms. Goroutines made ready by a poll are readied as by `goready` (to the polling
//! M's P, or the global queue with an M woken for them).

use core::cell::Cell;
use core::ptr::null_mut;
use core::sync::atomic::{
    AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

pub use super::epoll::inited;
use super::epoll::{BREAK_DATA, BREAK_PENDING, EPFD, EVFD, LAST_POLL};
use super::timer::{self, Timer};
use super::*;

mod fdrefs;
use fdrefs::{FdRefs, Incref};

/// Directions (also the bits of `IoWait::fired`). `pub(crate)` like `MAX_FD`: cbindgen
/// writes every `pub const` of the crate into gmp.h.
pub(crate) const MODE_READ: u32 = 1;
pub(crate) const MODE_WRITE: u32 = 2;
const FIRED_TIMEOUT: u32 = 4;
const FIRED_EVICT: u32 = 8;

const SLOT_NIL: usize = 0;
const SLOT_READY: usize = 1;

/// Descriptors per chunk of `TABLE`, and chunks: fds up to 1,048,576 (Linux's default
/// `nr_open`).
const CHUNK: usize = 4096;
const CHUNKS: usize = 256;
pub(crate) const MAX_FD: i32 = (CHUNK * CHUNKS) as i32;

/// The per-fd state (Go's pollDesc).
pub struct PollDesc {
    /// Guards the slots, the changes of `seq` and of `refs`' flags.
    lock: Lock,
    /// `SLOT_NIL`, `SLOT_READY` or a `*const IoWait`, for reading and for writing. Owner:
    /// `lock`.
    rg: Cell<usize>,
    wg: Cell<usize>,
    /// Changes at every registration and every close; events and waits carry the value
    /// they started with. Written under `lock`; read lock-free by `netpoll` to filter.
    seq: AtomicU32,
    /// Operations in flight (Go's fdMutex reference count) and the flags they check:
    /// registered, closing (set by `close_begin`, cleared by the next registration: every
    /// operation fails with EBADF, Go's "use of closed network connection").
    /// `close_begin` waits for no reference before the fd number is released, so no
    /// operation reads or writes a reused number (the protocol: fdrefs.rs).
    refs: FdRefs,
    /// The two words of a `gmp_mutex` per direction (state, sema), used by the C API to
    /// serve concurrent readers (writers) of one fd one at a time (Go's fdMutex rlock/wlock).
    pub op_lock: [(AtomicI32, AtomicU32); 2],
    /// The interposer's bits for this fd number (interpose/: `HOOK_*`), kept by the
    /// hooks; cleared when the fd is closed or unregistered here.
    pub hook: AtomicU32,
    /// SO_RCVTIMEO and SO_SNDTIMEO in nanoseconds (0: none), as the interposer saw them
    /// set; kept with `hook`.
    pub timeo: [AtomicI64; 2],
    /// The registration set the open file's O_NONBLOCK (`gmp_fd_register` on a blocking
    /// fd): `unregister` clears it again, and only then. Written under `lock`.
    set_nonblock: AtomicBool,
    /// The registered file's device and inode (`same_file`). Written under `lock`.
    file: [AtomicU64; 2],
    /// The number a deferred close releases (`close_begin_deferrable`): written by the
    /// closer before the RMW that defers, read by the claimer after its acquire.
    closing_fd: AtomicI32,
}

// SAFETY: the Cells are touched only under `lock`.
unsafe impl Sync for PollDesc {}

impl PollDesc {
    fn new() -> PollDesc {
        PollDesc {
            lock: Lock::new(crate::sys::Rank::PollDesc),
            rg: Cell::new(SLOT_NIL),
            wg: Cell::new(SLOT_NIL),
            seq: AtomicU32::new(0),
            refs: FdRefs::new(),
            op_lock: [
                (AtomicI32::new(0), AtomicU32::new(0)),
                (AtomicI32::new(0), AtomicU32::new(0)),
            ],
            hook: AtomicU32::new(0),
            timeo: [AtomicI64::new(0), AtomicI64::new(0)],
            set_nonblock: AtomicBool::new(false),
            file: [AtomicU64::new(0), AtomicU64::new(0)],
            closing_fd: AtomicI32::new(-1),
        }
    }

    fn slot(&self, mode: u32) -> &Cell<usize> {
        if mode == MODE_READ {
            &self.rg
        } else {
            &self.wg
        }
    }

    /// Whether the fd is under the poller (and not being closed).
    #[inline]
    pub fn registered(&self) -> bool {
        self.refs.is_open()
    }

    /// Whether the fd is being (or was) closed, as opposed to taken off the poller by
    /// `unregister`: a waiter woken by either tells them apart with this.
    #[inline]
    pub fn closing(&self) -> bool {
        self.refs.is_closing()
    }

    /// Whether `fd` still refers to the file registered under its number. A close the
    /// runtime did not see (glibc's own, inside `fclose`) frees the number with the
    /// registration still in place, and the next file given the number (an eventfd, a
    /// fopen'ed file, a socket) would be taken for the old one: waits on it would park on
    /// a registration epoll no longer has. Asked before a first park (an fstat).
    pub fn same_file(&self, fd: i32) -> bool {
        match file_id(fd) {
            Some([dev, ino]) => {
                self.file[0].load(Ordering::Relaxed) == dev
                    && self.file[1].load(Ordering::Relaxed) == ino
            }
            None => false,
        }
    }

    /// Takes a reference for one operation (Go's fdMutex incref). Fails while the fd is being
    /// closed or is not registered.
    #[inline]
    pub fn incref(&self) -> bool {
        match self.refs.incref() {
            Incref::Taken => true,
            Incref::Refused => false,
            Incref::RefusedClaimed => {
                finish_deferred_close(self);
                false
            }
        }
    }

    /// Gives back the reference of a successful `incref`; the last one of a deferred close
    /// makes it (`close_begin_deferrable`).
    #[inline]
    pub fn decref(&self) {
        if self.refs.decref() {
            finish_deferred_close(self);
        }
    }

    /// Whether the program closed the fd and the close waits for an operation in flight
    /// (`close_begin_deferrable`): the number is the closed file's until then.
    pub fn close_pending(&self) -> bool {
        self.refs.close_pending()
    }

    pub fn seq(&self) -> u32 {
        self.seq.load(Ordering::Acquire)
    }
}

/// One parked goroutine's wait (on its stack while it waits).
struct IoWait {
    g: *mut G,
    /// 0 until someone claims the wait (event, evict, timeout).
    done: AtomicU32,
    /// What completed it: `MODE_*` bits, `FIRED_TIMEOUT`, `FIRED_EVICT`. Written by the
    /// claimer before it readies the goroutine.
    fired: AtomicU32,
}

impl IoWait {
    fn claim(&self) -> bool {
        self.done
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

type Chunk = [PollDesc; CHUNK];

static TABLE: [AtomicPtr<Chunk>; CHUNKS] = [const { AtomicPtr::new(null_mut()) }; CHUNKS];

/// The descriptor of `fd` if one was ever made.
pub fn lookup(fd: i32) -> Option<&'static PollDesc> {
    if !(0..MAX_FD).contains(&fd) {
        return None;
    }
    let c = TABLE[fd as usize / CHUNK].load(Ordering::Acquire);
    // SAFETY: chunks are never freed once published.
    (!c.is_null()).then(|| unsafe { &(*c)[fd as usize % CHUNK] })
}

/// The descriptor of `fd`, made on first use; None for fds beyond `MAX_FD`.
pub(crate) fn pd_of(fd: i32) -> Option<&'static PollDesc> {
    if !(0..MAX_FD).contains(&fd) {
        return None;
    }
    let slot = &TABLE[fd as usize / CHUNK];
    let mut c = slot.load(Ordering::Acquire);
    if c.is_null() {
        let fresh: Box<[PollDesc]> = (0..CHUNK).map(|_| PollDesc::new()).collect();
        let fresh = Box::into_raw(fresh) as *mut Chunk;
        match slot.compare_exchange(null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => c = fresh,
            Err(other) => {
                // SAFETY: fresh was never published.
                drop(unsafe { Box::from_raw(fresh) });
                c = other;
            }
        }
    }
    // SAFETY: published chunks are never freed.
    Some(unsafe { &(*c)[fd as usize % CHUNK] })
}

// ---------------------------------------------------------------------------------------
// The epoll instance.

/// Ms blocked in `epoll_wait`: the timer M sleeping in the poller, and for a moment the
/// previous one, claimed by a waker and on its way out (timer.rs).
pub(crate) static BLOCKED: AtomicU32 = AtomicU32::new(0);
/// Counters for `gmp_stats`.
pub static POLLS: AtomicU64 = AtomicU64::new(0);
pub static READIED: AtomicU64 = AtomicU64::new(0);
/// Goroutines parked in `wait` (Go's netpollWaiters).
pub(crate) static WAITERS: AtomicUsize = AtomicUsize::new(0);

/// Whether anybody waits on the poller (Go's netpollAnyWaiters).
#[inline]
pub fn any_waiters() -> bool {
    WAITERS.load(Ordering::SeqCst) > 0
}

/// Registers `fd` (Go's poll_runtime_pollOpen): non-blocking, edge-triggered for both
/// directions. Ok(true) when it is under the poller (also when it already was), Ok(false)
/// when epoll cannot watch it (a regular file or a directory: the caller keeps using the
/// syscall hand-off), Err(errno) for a bad fd.
pub fn register(fd: i32) -> Result<bool, i32> {
    register_with(fd, true)
}

/// The device and inode `fd` refers to (None: not open).
fn file_id(fd: i32) -> Option<[u64; 2]> {
    // SAFETY: fstat into a valid buffer; fails if `fd` is not open.
    unsafe {
        let mut st: libc::stat = core::mem::zeroed();
        (libc::syscall(libc::SYS_fstat, fd, &mut st) == 0).then_some([st.st_dev, st.st_ino])
    }
}

/// Drops a registration whose number now names another file (`PollDesc::same_file`):
/// wakes and waits out what is in flight on it, as a close does, and clears the hooks'
/// bits; the number is the program's again, to register afresh.
pub fn forget_stale(fd: i32) {
    let Some(pd) = lookup(fd) else { return };
    if pd.registered() {
        close_begin(fd);
    }
    pd.hook.store(0, Ordering::Release);
    pd.timeo[0].store(0, Ordering::Relaxed);
    pd.timeo[1].store(0, Ordering::Relaxed);
}

/// `register` for an fd the runtime created non-blocking for the program (`gmp_socket`,
/// `gmp_pipe`, `gmp_accept`): as if the registration had set O_NONBLOCK, so that
/// `unregister` makes it blocking.
pub fn register_created(fd: i32) -> Result<bool, i32> {
    let r = register_with(fd, true)?;
    if let Some(pd) = lookup(fd) {
        pd.lock.lock();
        pd.set_nonblock.store(true, Ordering::Relaxed);
        pd.lock.unlock();
    }
    Ok(r)
}

/// `register`, leaving the open file's O_NONBLOCK as it is when `set_nonblock` is false
/// (the interposer: every operation the hooks make on it is non-blocking per call, so
/// what dup'd fds, children and libc's own calls see stays the program's).
pub fn register_with(fd: i32, set_nonblock: bool) -> Result<bool, i32> {
    let Some(pd) = pd_of(fd) else {
        return Err(libc::EBADF);
    };
    epoll::init()?;
    // SAFETY: fcntl on an arbitrary fd number only reports EBADF if it is not open.
    let flags = unsafe { crate::sys::real::fcntl(fd, libc::F_GETFL, 0) };
    if flags < 0 {
        return Err(crate::sys::errno());
    }
    let Some(id) = file_id(fd) else {
        return Err(libc::EBADF);
    };
    if pd.registered() && !pd.same_file(fd) {
        // The number's previous file was closed where the runtime did not see it.
        forget_stale(fd);
    }
    pd.lock.lock();
    if pd.refs.is_open() {
        pd.lock.unlock();
        return Ok(true);
    }
    pd.file[0].store(id[0], Ordering::Relaxed);
    pd.file[1].store(id[1], Ordering::Relaxed);
    let seq = pd.seq.load(Ordering::Relaxed).wrapping_add(1);
    let mut ev = libc::epoll_event {
        // Go's set, plus EPOLLPRI: a poll or select for urgent data (POLLPRI, exceptfds)
        // parks on the read side, and urgent data alone raises no EPOLLIN.
        events: (libc::EPOLLIN | libc::EPOLLPRI | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET)
            as u32,
        u64: fd as u32 as u64 | (seq as u64) << 32,
    };
    let ep = EPFD.load(Ordering::Acquire);
    // SAFETY: plain epoll_ctl on our epoll fd with a valid event.
    let mut rc = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) };
    if rc < 0 && crate::sys::errno() == libc::EEXIST {
        // Registered earlier under this number and closed behind our back with plain
        // close(2) while a dup kept the file open: take the registration over.
        // SAFETY: as above.
        rc = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_MOD, fd, &mut ev) };
    }
    if rc < 0 {
        let e = crate::sys::errno();
        pd.lock.unlock();
        return if e == libc::EPERM { Ok(false) } else { Err(e) };
    }
    let setting = set_nonblock && flags & libc::O_NONBLOCK == 0;
    if setting {
        // SAFETY: fd is open (F_GETFL succeeded).
        unsafe { crate::sys::real::fcntl(fd, libc::F_SETFL, (flags | libc::O_NONBLOCK) as usize) };
    }
    pd.set_nonblock.store(setting, Ordering::Relaxed);
    pd.seq.store(seq, Ordering::Release);
    pd.rg.set(SLOT_NIL);
    pd.wg.set(SLOT_NIL);
    pd.refs.open();
    pd.lock.unlock();
    Ok(true)
}

/// Wakes every goroutine parked on `pd` (they find `seq` changed) and invalidates its
/// pending events. Lock held by the caller; returns the goroutines to ready once it is
/// released.
fn evict_locked(pd: &PollDesc, out: &mut [*mut G; 2]) {
    pd.seq.store(
        pd.seq.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Release,
    );
    for (i, mode) in [MODE_READ, MODE_WRITE].into_iter().enumerate() {
        let slot = pd.slot(mode);
        let v = slot.replace(SLOT_NIL);
        if v > SLOT_READY {
            // SAFETY: a record in a slot is alive while the slot holds it (its waiter takes
            // the lock we hold before it returns).
            let w = unsafe { &*(v as *const IoWait) };
            if w.claim() {
                w.fired.fetch_or(FIRED_EVICT, Ordering::Relaxed);
                out[i] = w.g;
            }
        }
    }
}

fn ready_all(gs: [*mut G; 2]) {
    for g in gs {
        if !g.is_null() {
            // SAFETY: we claimed the parked goroutine's wait; nobody else readies it.
            unsafe { goready(g) };
        }
    }
}

/// Takes `fd` out of the poller and restores blocking mode (the user's own descriptor
/// again); goroutines waiting on it wake and fall back to the syscall hand-off.
pub fn unregister(fd: i32) -> Result<(), i32> {
    let Some(pd) = lookup(fd) else { return Ok(()) };
    let mut gs = [null_mut(); 2];
    pd.lock.lock();
    if !pd.refs.is_registered() {
        pd.lock.unlock();
        return Ok(());
    }
    pd.refs.mark_unregistered();
    pd.hook.store(0, Ordering::Relaxed);
    evict_locked(pd, &mut gs);
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    // SAFETY: plain syscalls on our epoll fd and the caller's fd.
    unsafe {
        libc::epoll_ctl(
            EPFD.load(Ordering::Acquire),
            libc::EPOLL_CTL_DEL,
            fd,
            &mut ev,
        );
        // Only an O_NONBLOCK the registration set: one the program set (or the hooks
        // registered the fd, which never set it) stays the program's.
        if pd.set_nonblock.swap(false, Ordering::Relaxed) {
            let flags = crate::sys::real::fcntl(fd, libc::F_GETFL, 0);
            if flags >= 0 {
                crate::sys::real::fcntl(fd, libc::F_SETFL, (flags & !libc::O_NONBLOCK) as usize);
            }
        }
    }
    pd.lock.unlock();
    ready_all(gs);
    Ok(())
}

/// How `close_begin_deferrable` left the fd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Close {
    /// Not registered (nor a deferred close pending): a plain close.
    NotRegistered,
    /// Off the poller, nothing in flight: the caller closes the number now.
    Released,
    /// The caller may not wait and operations were still in flight: the last one closes
    /// the number; the caller reports success.
    Deferred,
    /// A deferred close of this number is still pending: the program closed it already
    /// (libc says EBADF).
    Pending,
}

/// First half of closing a registered fd (Go's evict + fdMutex close): no new operation
/// starts, parked goroutines wake with EBADF, and the call returns once every operation in
/// flight has finished — then the caller may close(2) the number. Returns false if `fd` is
/// not registered (plain close). On a number whose deferred close is pending (dup2 onto a
/// number the program closed), waits until that close is made.
pub fn close_begin(fd: i32) -> bool {
    close_begin_inner(fd, false) == Close::Released
}

/// `close_begin` for the program's own close (the close hook, `gmp_close`): a caller that
/// may not switch (inside `gmp_blocking`) whose wait lasts more than `DEFER_AFTER_SLEEPS`
/// naps hands the close to the last operation in flight instead of waiting (Go's close
/// does: the last `decref` destroys the fd). The operations it waits for can be those of
/// goroutines bound to its own M, which cannot run until it returns.
pub fn close_begin_deferrable(fd: i32) -> Close {
    close_begin_inner(fd, true)
}

/// Naps of 20 µs a caller inside a system call makes before it defers the close.
const DEFER_AFTER_SLEEPS: u32 = 50;

fn close_begin_inner(fd: i32, may_defer: bool) -> Close {
    let Some(pd) = lookup(fd) else {
        return Close::NotRegistered;
    };
    if pd.refs.close_pending() {
        if may_defer {
            return Close::Pending;
        }
        // Reusing a number the program closed: once the close is made, the number is
        // free (or another file's: the caller's business, as with any number).
        wait_while(|| pd.refs.close_pending(), |_| false);
        return Close::NotRegistered;
    }
    let mut gs = [null_mut(); 2];
    pd.lock.lock();
    if !pd.refs.is_open() {
        pd.lock.unlock();
        return Close::NotRegistered;
    }
    pd.refs.mark_closing();
    evict_locked(pd, &mut gs);
    pd.lock.unlock();
    ready_all(gs);
    // Operations in flight see `closing` at their next look (woken ones at once): wait
    // for them to leave before the number can be reused.
    let deferred = wait_while(
        || pd.refs.in_flight(),
        |naps| {
            if !may_defer || naps < DEFER_AFTER_SLEEPS {
                return false;
            }
            pd.closing_fd.store(fd, Ordering::Relaxed);
            true
        },
    );
    // Nothing left in flight after all (`defer_close` true): the close is ours.
    if deferred && !pd.refs.defer_close() {
        return Close::Deferred;
    }
    pd.lock.lock();
    unregister_closed_locked(pd, fd);
    pd.lock.unlock();
    Close::Released
}

/// Waits until `busy` says no: spins, then yields, then sleeps 20 µs at a time. After a
/// while, sleep rather than yield: a caller bound to its M (an interposed close, a pinned
/// goroutine) that only yielded would keep the M's P busy, and what it waits for may
/// belong to a goroutine bound to another M that needs that P (GOMAXPROCS=1). A caller in
/// a system call (a close inside gmp_blocking) may not switch: its thread sleeps instead,
/// and asks `give_up` after each nap (with their count) whether to stop waiting. Returns
/// whether it gave up.
fn wait_while(busy: impl Fn() -> bool, give_up: impl Fn(u32) -> bool) -> bool {
    let gp = getg();
    // SAFETY: gp, if any, is the goroutine running on this thread; only its own M (us)
    // changes its status between RUNNING and SYSCALL.
    let in_syscall = !gp.is_null() && unsafe { (*gp).status.load(Ordering::Relaxed) } == G_SYSCALL;
    let mut spins = 0u32;
    let mut naps = 0u32;
    while busy() {
        spins += 1;
        if spins < crate::sys::pauses(100) {
            core::hint::spin_loop();
        } else if in_syscall {
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 20_000,
            };
            // SAFETY: a valid timespec; no remainder wanted.
            unsafe { crate::sys::real::nanosleep(&ts, core::ptr::null_mut()) };
            naps += 1;
            if in_syscall && give_up(naps) {
                return true;
            }
        } else if spins < 200 {
            gosched();
        } else {
            timer::sleep(20_000);
        }
    }
    false
}

/// Takes a closed fd off the poller (under its lock): nothing is in flight on it.
fn unregister_closed_locked(pd: &PollDesc, fd: i32) {
    pd.refs.mark_unregistered();
    pd.hook.store(0, Ordering::Relaxed);
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    // SAFETY: plain epoll_ctl on our epoll fd.
    unsafe {
        libc::epoll_ctl(
            EPFD.load(Ordering::Acquire),
            libc::EPOLL_CTL_DEL,
            fd,
            &mut ev,
        )
    };
}

/// The close a closer deferred (`close_begin_deferrable`), made by whoever gave back the
/// last reference: off the poller, then close(2) — unless the number was closed where
/// the runtime did not see it and holds another file (`same_file`), or was registered
/// again (the claim undone by `open`).
fn finish_deferred_close(pd: &PollDesc) {
    let fd = pd.closing_fd.load(Ordering::Relaxed);
    pd.lock.lock();
    let ours = pd.refs.close_claimed() && pd.same_file(fd);
    if ours {
        unregister_closed_locked(pd, fd);
    }
    pd.lock.unlock();
    if ours {
        DEFERRED_CLOSES.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the program's close of this number returned already; nothing else uses
        // it (no reference left, every new one refused).
        unsafe { crate::sys::real::close(fd) };
    }
}

/// Closes made by the last reference (`finish_deferred_close`), for tests.
pub static DEFERRED_CLOSES: AtomicU64 = AtomicU64::new(0);

/// Why a `wait` ended without readiness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitError {
    /// The fd was closed (or unregistered) meanwhile.
    Closed,
    TimedOut,
    /// The caller's scope ended the wait (rt/scope.rs): its positive errno.
    Scope(i32),
}

/// gopark's unlock function: arm the deadline, then release the descriptor lock.
struct ParkCtx {
    pd: *const PollDesc,
    timer: *mut Timer,
    when: i64,
    /// The wait to publish on the goroutine's scope, or null.
    cancel: *const scope::CancelWait,
}

unsafe fn park_commit(_gp: *mut G, arg: usize) -> bool {
    // SAFETY: arg is the parking goroutine's ParkCtx, read before the unlock below (after
    // which the goroutine may run again).
    unsafe {
        let ctx = &*(arg as *const ParkCtx);
        if !ctx.timer.is_null() {
            // Lock order: a descriptor lock → a P's timer lock. On g0 holding this M's P.
            timer::start(ctx.timer, ctx.when);
        }
        if !ctx.cancel.is_null() {
            // Lock order: a descriptor lock → the scope's lock.
            scope::arm(&*ctx.cancel);
        }
        (*ctx.pd).lock.unlock();
    }
    true
}

/// The deadline's timer callback: claims the wait and readies the goroutine. Takes no
/// descriptor lock (the waiter may hold it while arming this very timer).
unsafe fn on_deadline(w: usize) {
    // SAFETY: the waiter stops this timer before its frame dies, and stop waits for a
    // running callback.
    unsafe {
        let w = &*(w as *const IoWait);
        if w.claim() {
            w.fired.fetch_or(FIRED_TIMEOUT, Ordering::Relaxed);
            goready(w.g);
        }
    }
}

/// Parks the calling goroutine until `fd`'s descriptor is ready in one of `modes`
/// (Go's netpollblock), until `deadline` (`nanotime`; None: no limit), or until the fd is
/// closed. Returns the ready modes (readiness is consumed).
///
/// # Safety
/// On a goroutine holding a P, with a reference on `pd` (`incref`) taken when its `seq` was
/// `seq`.
pub unsafe fn wait(
    pd: &PollDesc,
    seq: u32,
    modes: u32,
    deadline: Option<i64>,
) -> Result<u32, WaitError> {
    let sc = scope::current();
    let deadline = scope::clamp(sc, deadline);
    // Why the deadline or a cancel ended the wait: the scope's, if it has ended.
    let ended = || match sc.is_null() {
        // SAFETY: our current scope is live.
        false => match unsafe { scope::err(sc) } {
            0 => WaitError::TimedOut,
            e => WaitError::Scope(e),
        },
        true => WaitError::TimedOut,
    };
    loop {
        pd.lock.lock();
        if pd.refs.is_closing() || pd.seq.load(Ordering::Relaxed) != seq {
            pd.lock.unlock();
            return Err(WaitError::Closed);
        }
        let mut ready = 0;
        for mode in [MODE_READ, MODE_WRITE] {
            if modes & mode != 0 && pd.slot(mode).get() == SLOT_READY {
                pd.slot(mode).set(SLOT_NIL);
                ready |= mode;
            }
        }
        if ready != 0 {
            pd.lock.unlock();
            return Ok(ready);
        }
        if let Some(d) = deadline
            && crate::sys::nanotime() >= d
        {
            pd.lock.unlock();
            return Err(ended());
        }
        let w = IoWait {
            g: getg(),
            done: AtomicU32::new(0),
            fired: AtomicU32::new(0),
        };
        let wp = &w as *const IoWait as usize;
        for mode in [MODE_READ, MODE_WRITE] {
            if modes & mode != 0 {
                if pd.slot(mode).get() != SLOT_NIL {
                    throw("netpoll: two goroutines wait on one fd in one direction");
                }
                pd.slot(mode).set(wp);
            }
        }
        WAITERS.fetch_add(1, Ordering::SeqCst);
        let mut t = core::mem::MaybeUninit::<Timer>::uninit();
        // A cancel ends the wait as its deadline does.
        let cw = scope::CancelWait::new(sc, on_deadline, wp);
        let ctx = ParkCtx {
            pd,
            timer: if deadline.is_some() {
                t.write(Timer::new(on_deadline, wp))
            } else {
                null_mut()
            },
            when: deadline.unwrap_or(0),
            cancel: if sc.is_null() { core::ptr::null() } else { &cw },
        };
        // SAFETY: on a goroutine (caller contract); our record is in the slots under the
        // lock that park_commit releases, the only lock we hold.
        unsafe {
            gopark(
                Some(park_commit),
                &ctx as *const ParkCtx as usize,
                WaitReason::IoWait,
            )
        };
        if !sc.is_null() {
            if w.fired.load(Ordering::Relaxed) & FIRED_TIMEOUT != 0 {
                // Woken by the timer or a cancel, which take no descriptor lock:
                // park_commit may still be arming the other one, under the lock.
                pd.lock.lock();
                pd.lock.unlock();
            }
            // SAFETY: park_commit armed it; after this no cancel reaches our record.
            unsafe { scope::disarm(&cw) };
        }
        if deadline.is_some() {
            // SAFETY: t was initialised (there is a deadline) and lives in this frame.
            unsafe { timer::stop(t.as_mut_ptr()) };
        }
        WAITERS.fetch_sub(1, Ordering::SeqCst);
        // Take our record out of whatever slot still holds it; after this nobody reaches
        // it. Readiness that arrived for a direction we also waited on is ours.
        pd.lock.lock();
        let mut ready = 0;
        for mode in [MODE_READ, MODE_WRITE] {
            if modes & mode != 0 {
                let slot = pd.slot(mode);
                if slot.get() == wp {
                    slot.set(SLOT_NIL);
                } else if slot.get() == SLOT_READY && pd.seq.load(Ordering::Relaxed) == seq {
                    slot.set(SLOT_NIL);
                    ready |= mode;
                }
            }
        }
        pd.lock.unlock();
        let fired = w.fired.load(Ordering::Relaxed);
        if ready != 0 {
            return Ok(ready);
        }
        if fired & FIRED_EVICT != 0 || pd.refs.is_closing() || pd.seq() != seq {
            return Err(WaitError::Closed);
        }
        if fired & FIRED_TIMEOUT != 0 {
            return Err(ended());
        }
        // Woken by readiness that the slot no longer shows (consumed by nobody else: we
        // are the only waiter per direction): look again.
    }
}

/// Goroutines a poll found ready (claimed, not yet readied): Go's gList from netpoll.
pub(crate) struct Ready {
    gs: [*mut G; 2 * EVENTS],
    n: usize,
}

impl Ready {
    pub(crate) const fn new() -> Ready {
        Ready {
            gs: [null_mut(); 2 * EVENTS],
            n: 0,
        }
    }

    /// Readies them all (Go's injectglist: some to the global queue with Ms started for
    /// the idle Ps, the rest to the caller's P).
    pub(crate) fn ready_all(&mut self) {
        // SAFETY: each wait was claimed by the poll that found it; nobody else readies
        // these goroutines.
        unsafe { ready::injectglist(&self.gs[..self.n]) };
        READIED.fetch_add(self.n as u64, Ordering::Relaxed);
        self.n = 0;
    }

    /// Readies them with the first one kept for the calling M, which holds a P and will
    /// run it next (Go's findRunnable: `gp := list.pop(); injectglist(&list)`): it goes to
    /// the P's local queue without waking anybody, and only the rest are injected. A poll
    /// that finds one goroutine then costs no thread wake-up: the M that polled runs it.
    ///
    /// # Safety
    /// On an M holding P `p`.
    pub(crate) unsafe fn run_first_ready_rest(&mut self, p: &P) {
        if self.n == 0 {
            return;
        }
        let gp = self.gs[0];
        // SAFETY: claimed by the poll; Gs are never freed; we hold p.
        unsafe {
            let g = &*gp;
            if !affinity::affine_m(g).is_null() {
                self.ready_all();
                return;
            }
            g.waitreason
                .store(WaitReason::None as u8, Ordering::Relaxed);
            if hookflags::any() {
                hooks::readied(gp);
            }
            casgstatus(g, G_WAITING, G_RUNNABLE);
            // At the tail, not runnext: the queue is empty (callers poll when it is), and a
            // goroutine woken by the poller starts a new slice, as Go's findRunnable
            // returns it with inheritTime false (sysmon would otherwise see the P's
            // schedtick stand still across idle periods and ask for preemption).
            ready::runqput(p, gp, false);
        }
        READIED.fetch_add(1, Ordering::Relaxed);
        self.gs.copy_within(1..self.n, 0);
        self.n -= 1;
        self.ready_all();
    }
}

/// Events per `epoll_wait`.
const EVENTS: usize = 128;

/// Polls the epoll instance: `delay` < 0 blocks until an event or a break, 0 returns at
/// once, > 0 waits that many nanoseconds at most. Claims the waits of the goroutines whose
/// fds became ready and adds them to `out` (the caller readies them); returns how many.
pub(crate) fn netpoll(delay: i64, out: &mut Ready) -> usize {
    let ep = EPFD.load(Ordering::Acquire);
    if ep < 0 {
        return 0;
    }
    const N: usize = EVENTS;
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; N];
    // SAFETY: plain epoll calls with a valid buffer.
    let n = unsafe {
        if delay > 0 {
            epoll_wait_ns(ep, &mut events, delay)
        } else {
            crate::sys::real::epoll_wait(
                ep,
                events.as_mut_ptr(),
                N as i32,
                if delay < 0 { -1 } else { 0 },
            )
        }
    };
    POLLS.fetch_add(1, Ordering::Relaxed);
    LAST_POLL.store(crate::sys::nanotime(), Ordering::Relaxed);
    if n <= 0 {
        return 0;
    }
    let mut readied = 0;
    for ev in &events[..n as usize] {
        let data = ev.u64;
        if data == BREAK_DATA {
            // Only a blocking poll consumes a break (as Go's netpoll): a non-blocking one
            // that raced with the timer M's blocking poll would otherwise swallow the break
            // meant for it, and it would sleep on (affine work queued for it then waits
            // forever). The eventfd is level-triggered: left unread, it stays pending.
            if delay == 0 {
                continue;
            }
            let mut buf = 0u64;
            // SAFETY: reads 8 bytes into a valid buffer from our non-blocking eventfd.
            unsafe {
                crate::sys::real::read(
                    EVFD.load(Ordering::Acquire),
                    &mut buf as *mut u64 as *mut libc::c_void,
                    8,
                )
            };
            BREAK_PENDING.store(false, Ordering::SeqCst);
            continue;
        }
        let (fd, seq) = (data as u32 as i32, (data >> 32) as u32);
        let Some(pd) = lookup(fd) else { continue };
        let e = ev.events;
        let mut modes = 0;
        if e & (libc::EPOLLIN | libc::EPOLLPRI | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR)
            as u32
            != 0
        {
            modes |= MODE_READ;
        }
        if e & (libc::EPOLLOUT | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
            modes |= MODE_WRITE;
        }
        let mut gs = [null_mut(); 2];
        pd.lock.lock();
        if pd.seq.load(Ordering::Relaxed) == seq {
            for (i, mode) in [MODE_READ, MODE_WRITE].into_iter().enumerate() {
                if modes & mode == 0 {
                    continue;
                }
                let slot = pd.slot(mode);
                let v = slot.replace(SLOT_READY);
                if v > SLOT_READY {
                    // SAFETY: a record in a slot is alive while the slot holds it.
                    let w = unsafe { &*(v as *const IoWait) };
                    if w.claim() {
                        w.fired.fetch_or(mode, Ordering::Relaxed);
                        gs[i] = w.g;
                    }
                }
            }
        }
        pd.lock.unlock();
        for g in gs {
            if !g.is_null() {
                readied += 1;
                out.gs[out.n] = g;
                out.n += 1;
            }
        }
    }
    readied
}

/// `epoll_wait` with a nanosecond timeout: epoll_pwait2 (Linux 5.11), else milliseconds
/// rounded up.
///
/// # Safety
/// `ep` is an epoll fd.
unsafe fn epoll_wait_ns(ep: i32, events: &mut [libc::epoll_event], ns: i64) -> i32 {
    static NO_PWAIT2: AtomicBool = AtomicBool::new(false);
    if !NO_PWAIT2.load(Ordering::Relaxed) {
        let ts = libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: valid buffer, length and timespec; a null sigmask.
        let r = unsafe {
            libc::syscall(
                libc::SYS_epoll_pwait2,
                ep,
                events.as_mut_ptr(),
                events.len() as i32,
                &ts as *const libc::timespec,
                core::ptr::null::<libc::sigset_t>(),
                0usize,
            )
        } as i32;
        if r >= 0 || crate::sys::errno() != libc::ENOSYS {
            return r;
        }
        NO_PWAIT2.store(true, Ordering::Relaxed);
    }
    let ms = ((ns + 999_999) / 1_000_000).min(i32::MAX as i64) as i32;
    // SAFETY: valid buffer and length.
    unsafe { crate::sys::real::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, ms) }
}

/// sysmon's part (Go: "poll network if not polled for more than 10ms"): returns true if it
/// polled.
pub(crate) fn sysmon_poll(now: i64) -> bool {
    if !inited() || !any_waiters() || BLOCKED.load(Ordering::SeqCst) != 0 {
        return false;
    }
    if LAST_POLL.load(Ordering::Relaxed) + 10_000_000 > now {
        return false;
    }
    let mut ready = Ready::new();
    netpoll(0, &mut ready);
    ready.ready_all();
    true
}
