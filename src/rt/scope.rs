//! Scopes: cancellation and deadlines that reach every wait of the goroutines started in
//! them (Go's `context.Context` with `WithCancel`/`WithDeadline`, made implicit: a C
//! library cannot be handed a context, so the scope rides with the goroutine).
//!
//! A goroutine (or a thread outside the runtime) has a *current scope*, null for none.
//! `begin` makes a new scope, a child of the current one, current; goroutines started
//! while it is current inherit it, so they and their own children are its *members*.
//! `end` restores the parent and cancels the scope, as Go's deferred `cancel()` does.
//!
//! # What a scope changes in a wait
//! A member that is about to park (a channel operation or select, a sleep, an fd wait, a
//! hooked blocking call on the poller) gives its wait the earlier of its own deadline and
//! the scope's ([`clamp`]), and publishes a [`CancelWait`]: a function that claims the
//! wait and wakes its waiter, as the wait's own timeout does. The wait then ends with the
//! scope's error ([`err`]): `ECANCELED` once the scope (or an ancestor) is cancelled,
//! `ETIMEDOUT` once its deadline (the earliest of its ancestors') has passed. A wait
//! that can complete without parking completes: cancellation is seen only by waits.
//!
//! # Who makes each transition
//! | what | from → to | by |
//! |---|---|---|
//! | `Scope::err` | 0 → ECANCELED | `cancel` (of the scope or an ancestor), under the tree lock and the scope's lock |
//! | a `CancelWait` | unlinked → on `waits` | its waiter, on g0 in gopark's unlock function (or before a thread sleeps), under the scope's lock; if `err` is already set it calls its function instead |
//! | a `CancelWait` | on `waits` → unlinked | its waiter once woken, under the scope's lock; after that nobody calls it, so its frame may die |
//! | `Scope::children` | linked ↔ unlinked | `begin` (link), `cancel` (unlink the cancelled subtree), under the tree lock |
//! | `Scope::live` | n → n ± 1 | `inherit` at a member's start, `drop_of` at its end, on the scope and every ancestor |
//!
//! A canceller calls the functions of the published waits with the scope's lock held, so
//! a function must not block and must not take a channel or descriptor lock (the timeout
//! callbacks it reuses take none). Lock order: the tree lock → a scope's lock →
//! `SCHED.lock` (a function's `goready`); a channel or descriptor lock → a scope's lock.
//!
//! # Deadlines
//! A deadline is the earliest of the scope's own and its parent's, fixed at `begin`. The
//! scope keeps no timer: a wait with a timeout of its own carries it (`clamp`), a wait
//! without one (a semaphore's, a cond's, a hand-off call) arms a timer of its own that
//! calls its cancel function at the deadline (`scopecall::WaitDeadline`; a foreign
//! thread sleeps until then, `scopecall::foreign_sleep_scoped`), and `err` reads the
//! clock when no cancel was recorded.

use core::cell::Cell;
use core::ptr::null;
use core::sync::atomic::{AtomicI32, AtomicU32, AtomicUsize, Ordering};

use super::*;
use crate::sys::{Lock, Note, Rank};

/// `Scope::magic` of a live scope (a stale or foreign pointer is refused, not trusted).
const MAGIC: u32 = 0x5c09_e5c0;

/// A scope. Allocated by `begin`, freed when its last reference goes.
pub struct Scope {
    magic: AtomicU32,
    /// References: the handle `begin` returns, each goroutine or thread whose current
    /// scope it is, each child (through `parent`).
    refs: AtomicUsize,
    /// The enclosing scope (a reference), null at the top.
    parent: *const Scope,
    /// The effective deadline (`nanotime`; i64::MAX: none).
    deadline: i64,
    /// 0, or the positive errno every wait of a member ends with (`ECANCELED`).
    err: AtomicI32,
    /// Goroutines started in this scope or a descendant that have not ended.
    live: AtomicUsize,
    /// Guards `waits` and `idle`.
    lock: Lock,
    /// The published waits of members (a doubly linked list of `CancelWait`s).
    waits: Cell<*const CancelWait>,
    /// Callers of `wait_members` waiting for `live` to reach 0 (linked through `next`).
    idle: Cell<*const IdleWaiter>,
    /// Children not yet cancelled, linked through `sibling`/`prev_sibling`. Owner: the
    /// holder of `TREE`.
    children: Cell<*const Scope>,
    sibling: Cell<*const Scope>,
    prev_sibling: Cell<*const Scope>,
    linked: Cell<bool>,
}

// SAFETY: the Cells are touched only under `lock` or `TREE` (field docs); the rest is
// atomic or immutable after `begin`.
unsafe impl Sync for Scope {}
// SAFETY: as above.
unsafe impl Send for Scope {}

/// The scope tree's lock: `begin` links, `cancel` walks and unlinks.
struct Tree(Lock);
static TREE: Tree = Tree(Lock::new(Rank::ScopeTree));

/// A wait a canceller can end: `f(arg)` claims it and wakes its waiter (the wait's own
/// timeout callback). Lives in the waiter's frame from `arm` until `disarm` returned.
pub(crate) struct CancelWait {
    scope: *const Scope,
    f: unsafe fn(usize),
    arg: usize,
    next: Cell<*const CancelWait>,
    prev: Cell<*const CancelWait>,
    linked: Cell<bool>,
}

impl CancelWait {
    pub(crate) const fn new(scope: *const Scope, f: unsafe fn(usize), arg: usize) -> CancelWait {
        CancelWait {
            scope,
            f,
            arg,
            next: Cell::new(null()),
            prev: Cell::new(null()),
            linked: Cell::new(false),
        }
    }
}

/// A caller of `wait_members`, in its frame while linked on `Scope::idle`.
struct IdleWaiter {
    g: *mut G,
    note: Note,
    next: Cell<*const IdleWaiter>,
}

thread_local! {
    /// The current scope of a thread outside the runtime (a reference), null for none.
    static FOREIGN: Cell<*const Scope> = const { Cell::new(null()) };
}

/// The calling goroutine's (or thread's) current scope, null for none. Borrowed: valid
/// while the caller's current scope does not change.
#[inline]
pub(crate) fn current() -> *const Scope {
    let g = getg();
    if g.is_null() {
        return FOREIGN.with(|f| f.get());
    }
    // SAFETY: our own G, on its M (the owner of `ext`).
    unsafe { (*g).ext_if_any().map_or(null(), |e| e.scope.get().cast()) }
}

/// Replaces the caller's current scope with `s` (whose reference the caller gives);
/// returns the old one (whose reference passes to the caller).
fn replace_current(s: *const Scope) -> *const Scope {
    let g = getg();
    if g.is_null() {
        return FOREIGN.with(|f| f.replace(s));
    }
    // SAFETY: our own G, on its M.
    unsafe {
        let e = (*g).ext();
        let old = e.scope.get().cast();
        e.scope.set(s.cast());
        old
    }
}

/// Validates a handle from C: non-null and a live scope's magic.
///
/// # Safety
/// `s` is null or points to readable memory (a handle `begin` returned, possibly ended).
pub unsafe fn valid(s: *const Scope) -> bool {
    // SAFETY: caller contract.
    !s.is_null() && unsafe { (*s).magic.load(Ordering::Relaxed) } == MAGIC
}

fn retain(s: *const Scope) {
    // SAFETY: the caller holds a reference, so s is live.
    unsafe { (*s).refs.fetch_add(1, Ordering::Relaxed) };
}

fn release(mut s: *const Scope) {
    while !s.is_null() {
        // SAFETY: the caller's reference keeps s live until this decrement.
        unsafe {
            if (*s).refs.fetch_sub(1, Ordering::AcqRel) != 1 {
                return;
            }
            let sc = &*s;
            debug_assert!(!sc.linked.get(), "scope freed while linked in the tree");
            debug_assert!(sc.waits.get().is_null(), "scope freed with published waits");
            sc.magic.store(0, Ordering::Relaxed);
            let parent = sc.parent;
            drop(Box::from_raw(s as *mut Scope));
            s = parent;
        }
    }
}

/// Whether a cancel of the scope (or an ancestor) or its deadline ended it: 0, or the
/// positive errno its members' waits end with.
///
/// # Safety
/// `s` is a live scope.
pub unsafe fn err(s: *const Scope) -> i32 {
    // SAFETY: caller contract.
    let s = unsafe { &*s };
    match s.err.load(Ordering::Acquire) {
        0 if s.deadline != i64::MAX && crate::sys::nanotime() >= s.deadline => libc::ETIMEDOUT,
        e => e,
    }
}

/// The errno of the caller's current scope if it has ended (cancelled, or its deadline
/// passed), else 0.
pub(crate) fn current_err() -> i32 {
    let s = current();
    // SAFETY: the caller's current scope is live while it is current.
    if s.is_null() { 0 } else { unsafe { err(s) } }
}

/// The error a wait of the caller that its timer ended reports: the current scope's, if
/// it has ended, else ETIMEDOUT (the wait's own deadline).
pub(crate) fn timeout_errno() -> i32 {
    let s = current();
    // SAFETY: the caller's current scope is live while it is current.
    match if s.is_null() { 0 } else { unsafe { err(s) } } {
        0 => libc::ETIMEDOUT,
        e => e,
    }
}

/// The deadline of scope `s` (i64::MAX: none).
///
/// # Safety
/// `s` is a live scope.
pub unsafe fn deadline(s: *const Scope) -> i64 {
    // SAFETY: caller contract.
    unsafe { (*s).deadline }
}

/// The earlier of a wait's own deadline and scope `s`'s (`s` may be null).
#[inline]
pub(crate) fn clamp(s: *const Scope, own: Option<i64>) -> Option<i64> {
    if s.is_null() {
        return own;
    }
    // SAFETY: a current scope is live.
    let d = unsafe { (*s).deadline };
    match own {
        _ if d == i64::MAX => own,
        Some(o) => Some(o.min(d)),
        None => Some(d),
    }
}

/// Creates a scope, a child of the caller's current one, with a deadline `timeout_ns` from
/// now (< 0: none but the parent's), and makes it the caller's current scope. Returns the
/// handle (a reference).
pub fn begin(timeout_ns: i64) -> *const Scope {
    let parent = current();
    let mut deadline = if timeout_ns < 0 {
        i64::MAX
    } else {
        crate::sys::nanotime().saturating_add(timeout_ns)
    };
    if !parent.is_null() {
        // SAFETY: the current scope is live.
        deadline = deadline.min(unsafe { (*parent).deadline });
        retain(parent);
    }
    let s = Box::into_raw(Box::new(Scope {
        magic: AtomicU32::new(MAGIC),
        // The handle and the caller's current-scope reference.
        refs: AtomicUsize::new(2),
        parent,
        deadline,
        err: AtomicI32::new(0),
        live: AtomicUsize::new(0),
        lock: Lock::new(Rank::ScopeWaits),
        waits: Cell::new(null()),
        idle: Cell::new(null()),
        children: Cell::new(null()),
        sibling: Cell::new(null()),
        prev_sibling: Cell::new(null()),
        linked: Cell::new(false),
    })) as *const Scope;
    if !parent.is_null() {
        TREE.0.lock();
        // SAFETY: both live; tree fields under TREE.
        unsafe {
            let (p, c) = (&*parent, &*s);
            match p.err.load(Ordering::Relaxed) {
                // Cancelled already: so is the child (Go's propagateCancel).
                0 => {
                    c.sibling.set(p.children.get());
                    if let Some(first) = p.children.get().as_ref() {
                        first.prev_sibling.set(s);
                    }
                    p.children.set(s);
                    c.linked.set(true);
                }
                e => c.err.store(e, Ordering::Release),
            }
        }
        TREE.0.unlock();
    }
    let old = replace_current(s);
    release(old);
    s
}

/// Ends scope `s`, the caller's current one: the parent becomes current again, and `s`
/// is cancelled (its members that still wait see ECANCELED) and its handle released.
/// Err(EINVAL) if `s` is not the caller's current scope.
///
/// # Safety
/// `s` is a live scope handle; the caller gives up its handle reference on success.
pub unsafe fn end(s: *const Scope) -> Result<(), i32> {
    if current() != s || began_elsewhere(s) {
        return Err(libc::EINVAL);
    }
    // SAFETY: caller contract: s is live.
    let parent = unsafe { (*s).parent };
    if !parent.is_null() {
        retain(parent);
    }
    let old = replace_current(parent);
    debug_assert_eq!(old, s);
    // SAFETY: s is live (the handle).
    unsafe { cancel(s, libc::ECANCELED) };
    release(old);
    release(s);
    Ok(())
}

/// Whether `s` is the scope the calling goroutine was started in (which it did not begin,
/// so may not end).
fn began_elsewhere(s: *const Scope) -> bool {
    let g = getg();
    // SAFETY: our own G, on its M.
    !g.is_null()
        && unsafe {
            (*g).ext_if_any()
                .is_some_and(|e| e.scope_base.get() == s.cast())
        }
}

/// Cancels `s` and every descendant not cancelled yet with `errno`: their published waits
/// are ended, and their members' later waits end at once.
///
/// # Safety
/// `s` is a live scope.
pub unsafe fn cancel(s: *const Scope, errno: i32) {
    TREE.0.lock();
    // SAFETY: s is live (caller); the tree is stable under TREE.
    unsafe {
        let sc = &*s;
        if sc.linked.get() {
            // Unlink from the parent (which is live: s holds a reference).
            let p = &*sc.parent;
            let (prev, next) = (sc.prev_sibling.get(), sc.sibling.get());
            if prev.is_null() {
                p.children.set(next);
            } else {
                (*prev).sibling.set(next);
            }
            if !next.is_null() {
                (*next).prev_sibling.set(prev);
            }
            sc.linked.set(false);
            sc.sibling.set(null());
            sc.prev_sibling.set(null());
        }
        cancel_subtree(sc, errno);
    }
    TREE.0.unlock();
}

/// Cancels `s` and its linked descendants, unlinking them all. TREE held.
///
/// # Safety
/// TREE held; `s` live.
unsafe fn cancel_subtree(s: &Scope, errno: i32) {
    s.lock.lock();
    // A scope is cancelled once: waits published after that end at `arm`.
    let mut w = if s.err.load(Ordering::Relaxed) == 0 {
        s.err.store(errno, Ordering::Release);
        s.waits.get()
    } else {
        null()
    };
    while !w.is_null() {
        // SAFETY: a linked wait's frame stays alive until its waiter unlinked it, which
        // needs the lock we hold; its function does not block (module doc).
        unsafe {
            ((*w).f)((*w).arg);
            w = (*w).next.get();
        }
    }
    s.lock.unlock();
    let mut c = s.children.replace(null());
    while !c.is_null() {
        // SAFETY: a linked child is live: it unlinks itself (under TREE) before it can be
        // freed, and it holds a reference on us.
        unsafe {
            let child = &*c;
            let next = child.sibling.replace(null());
            child.prev_sibling.set(null());
            child.linked.set(false);
            cancel_subtree(child, errno);
            c = next;
        }
    }
}

/// Publishes wait `cw` on its scope so that a cancel ends it; if the scope has ended
/// already, ends it now (`cw.f`). On g0 in gopark's unlock function, once the waiter is
/// findable by its other wakers, or on a thread before it sleeps. May be called holding a
/// channel or descriptor lock.
///
/// # Safety
/// `cw` stays alive and unmoved until `disarm(cw)` returned; `cw.scope` is live.
pub(crate) unsafe fn arm(cw: &CancelWait) {
    // SAFETY: caller contract.
    let s = unsafe { &*cw.scope };
    s.lock.lock();
    // SAFETY: as above.
    if unsafe { err(s) } != 0 {
        s.lock.unlock();
        // SAFETY: cw.f's contract (module doc): it claims the wait and wakes its waiter.
        unsafe { (cw.f)(cw.arg) };
        return;
    }
    let first = s.waits.get();
    cw.next.set(first);
    cw.prev.set(null());
    if !first.is_null() {
        // SAFETY: a linked wait is alive (lock held).
        unsafe { (*first).prev.set(cw) };
    }
    s.waits.set(cw);
    cw.linked.set(true);
    s.lock.unlock();
}

/// Takes `cw` off its scope's list (if `arm` linked it): after this no canceller calls
/// it. The waiter calls it once woken, before its frame dies.
///
/// # Safety
/// `cw` was given to `arm`; no lock held (it takes the scope's).
pub(crate) unsafe fn disarm(cw: &CancelWait) {
    // SAFETY: caller contract: the scope is live while it is the waiter's current.
    let s = unsafe { &*cw.scope };
    s.lock.lock();
    if cw.linked.get() {
        let (prev, next) = (cw.prev.get(), cw.next.get());
        if prev.is_null() {
            s.waits.set(next);
        } else {
            // SAFETY: linked neighbours are alive (lock held).
            unsafe { (*prev).next.set(next) };
        }
        if !next.is_null() {
            // SAFETY: as above.
            unsafe { (*next).prev.set(prev) };
        }
        cw.linked.set(false);
    }
    s.lock.unlock();
}

/// Gives new goroutine `g` its parent's current scope (a reference) and counts it live on
/// that scope and every ancestor.
///
/// # Safety
/// `g` is ours (newproc, before it is published); `parent` is the calling goroutine or
/// null.
pub(super) unsafe fn inherit(parent: *mut G, g: &G) {
    let s = if parent.is_null() {
        FOREIGN.with(|f| f.get())
    } else {
        // SAFETY: the parent is the calling goroutine, on its M.
        match unsafe { (*parent).ext_if_any() } {
            None => return,
            // SAFETY: as above.
            Some(e) => unsafe { e.scope.get().cast::<Scope>() },
        }
    };
    if s.is_null() {
        return;
    }
    retain(s);
    let mut a = s;
    while !a.is_null() {
        // SAFETY: s and its ancestors are live (references up the chain).
        unsafe {
            (*a).live.fetch_add(1, Ordering::Relaxed);
            a = (*a).parent;
        }
    }
    // SAFETY: caller contract: g is ours.
    unsafe {
        let e = g.ext();
        e.scope.set(s.cast());
        e.scope_base.set(s.cast());
    }
}

/// Goroutine `g` ended: scopes it began and did not end are cancelled and left, as if
/// ended; it is no longer counted live in the scope it was started in.
///
/// # Safety
/// On `g`'s M (goexit0).
pub(super) unsafe fn drop_of(g: &G) {
    // SAFETY: caller contract.
    let Some(e) = (unsafe { g.ext_if_any() }) else {
        return;
    };
    // SAFETY: as above: we own the fields.
    let (mut s, base): (*const Scope, *const Scope) =
        unsafe { (e.scope.get().cast(), e.scope_base.get().cast()) };
    if s.is_null() {
        return;
    }
    // SAFETY: as above.
    unsafe {
        e.scope.set(null());
        e.scope_base.set(null());
    }
    // `s` holds the current-scope reference; each scope holds its parent.
    while s != base && !s.is_null() {
        // SAFETY: live through the references above.
        unsafe {
            cancel(s, libc::ECANCELED);
            let p = (*s).parent;
            if !p.is_null() {
                retain(p);
            }
            release(s);
            s = p;
        }
    }
    if s.is_null() {
        return;
    }
    let mut a = s;
    while !a.is_null() {
        // SAFETY: live through the chain of references.
        unsafe {
            if (*a).live.fetch_sub(1, Ordering::AcqRel) == 1 {
                wake_idle(&*a);
            }
            a = (*a).parent;
        }
    }
    release(s);
}

fn wake_idle(s: &Scope) {
    s.lock.lock();
    let mut w = s.idle.replace(null());
    while !w.is_null() {
        // SAFETY: a linked idle waiter's frame lives until we wake it (its last access
        // by us is the wake-up below, after reading `next`).
        unsafe {
            let next = (*w).next.get();
            if (*w).g.is_null() {
                (*w).note.wakeup();
            } else {
                goready((*w).g);
            }
            w = next;
        }
    }
    s.lock.unlock();
}

unsafe fn unlock_idle(_gp: *mut G, arg: usize) -> bool {
    // SAFETY: arg is the scope the parking goroutine locked and linked itself on.
    unsafe { (*(arg as *const Scope)).lock.unlock() };
    true
}

/// Waits until every goroutine started in `s` or a descendant has ended (`live` is 0).
/// Not ended by a cancel: cancelling is what makes members end.
///
/// # Safety
/// `s` is live for the whole call.
pub unsafe fn wait_members(s: *const Scope) {
    // SAFETY: caller contract.
    let s = unsafe { &*s };
    s.lock.lock();
    if s.live.load(Ordering::Acquire) == 0 {
        s.lock.unlock();
        return;
    }
    let w = IdleWaiter {
        g: getg(),
        note: Note::new(),
        next: Cell::new(s.idle.get()),
    };
    s.idle.set(&w);
    if w.g.is_null() {
        s.lock.unlock();
        w.note.sleep_foreign(None);
    } else {
        // SAFETY: on a goroutine; we are findable (linked) under the lock unlock_idle
        // releases, the only lock we hold.
        unsafe {
            gopark(
                Some(unlock_idle),
                s as *const Scope as usize,
                WaitReason::ScopeWait,
            )
        };
    }
}
