//! Creating and ending goroutines (Go's newproc, goexit0) and the dead-G caches (gfput,
//! gfget): a finished G keeps its stack (if it has the default size; another size goes
//! back to the stack pool) and goes to its P's free list, then to the global one, and
//! `newproc` reuses it — any dead G, whatever stack size is asked for — so a steady state
//! of spawning allocates nothing, and Gs never outnumber the peak of live goroutines plus
//! the caches.

use core::ffi::c_void;
use core::ptr::null_mut;
use core::sync::atomic::Ordering;

use super::*;
use crate::arch;
use crate::stack;

/// A P keeps at most this many dead Gs; past it, half go to the global cache (Go: 64/32).
const GFREE_LOCAL_MAX: i32 = 64;
const GFREE_BATCH: i32 = 32;
/// The global cache keeps stacks for at most this many dead Gs; beyond that, a dead G's
/// stack is returned to the stack pool, which releases all but its top 16 KiB, so that a
/// burst of a million goroutines does not pin a million touched stacks after it ends.
/// Sized for bursts of ~100k live goroutines: skynet keeps ~67k alive at its peak, and with
/// a limit far below that (16,384) half its dead stacks would go through the pool, each
/// paying a DONTNEED batch that releases nothing (its goroutines touch one page), a large
/// share of skynet's time (`scripts/ab.sh skynet`). A cached stack keeps whatever pages
/// its goroutine touched (for most, one or two).
const GFREE_GLOBAL_STACKS_MAX: i32 = 131072;

/// Why `newproc` could not start a goroutine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartError {
    /// No memory for the stack (mmap failed).
    NoMemory,
    /// Stack size outside [MIN_STACK, MAX_STACK].
    BadStackSize,
}

/// Starts `entry(arg)` as a new goroutine and returns its id. `stack_size` 0 means the
/// default. From a goroutine the new G goes to the caller's P's `runnext` (it runs next
/// there, unless stolen); from a foreign thread to the global queue.
///
/// # Safety
/// `entry(arg)` must be sound to call once, on any thread, at any later time; the runtime
/// is started (`rt::init`).
pub unsafe fn newproc(
    entry: GoFn,
    arg: *mut c_void,
    stack_size: usize,
    pinned: bool,
    locked: bool,
) -> Result<u64, StartError> {
    debug_assert!(
        SCHED.start_ns.load(Ordering::Relaxed) != 0,
        "newproc before rt::init"
    );
    // Whole pages, as the stack will be: the caches compare sizes exactly. (The default
    // is stored rounded.)
    let size = if stack_size == 0 {
        SCHED.default_stack.load(Ordering::Relaxed)
    } else if (stack::MIN_STACK..=stack::MAX_STACK).contains(&stack_size) {
        stack::round_size(stack_size)
    } else {
        return Err(StartError::BadStackSize);
    };
    let m = getm();
    // SAFETY: a non-null TLS slot is this thread's M; while a goroutine runs on it, its P
    // is held by this thread.
    let pp = if m.is_null() {
        null_mut()
    } else {
        unsafe { (*m).p.load(Ordering::Relaxed) }
    };
    // SAFETY: pp, if non-null, is held by this thread.
    let gp = unsafe { gfget(pp, size) }?;
    // SAFETY: gp is DEAD or IDLE and ours alone (just taken off a free list or allocated).
    unsafe {
        let g = &*gp;
        // Nothing is written to the stack now (gfget set `sp` to SP_UNSTARTED, with the
        // size of the promised stack if it has none): `execute` starts the G at the top of
        // its stack (arch::start_from_g0), when it is about to run.
        g.entry.set(Some(entry));
        g.arg.set(arg);
        g.pinned.set(pinned);
        g.lockedm.store(
            if locked { LOCK_AT_START } else { null_mut() },
            Ordering::Relaxed,
        );
        let parent = getg();
        labels::inherit(parent, g);
        scope::inherit(parent, g);
        g.parentgoid.store(
            if parent.is_null() {
                0
            } else {
                (*parent).goid()
            },
            Ordering::Relaxed,
        );
        let goid = if pp.is_null() {
            // A thread without a P: its spawns are counted in `SCHED.spawned` (the goroutines
            // end on Ps, which count the ends), and take ids from a cache of its own, as a
            // P does.
            SCHED.spawned.fetch_add(1, Ordering::Relaxed);
            foreign_goid()
        } else {
            let p = &*pp;
            owner_inc(&p.nspawned);
            let (mut next, mut end) = p.goidcache.get();
            if next == end {
                next = SCHED.goidgen.fetch_add(GOID_CACHE_BATCH, Ordering::Relaxed) + 1;
                end = next + GOID_CACHE_BATCH;
            }
            p.goidcache.set((next + 1, end));
            next
        };
        g.goid.store(goid, Ordering::Relaxed);
        if hookflags::any() {
            hooks::spawn(gp, goid, g.parentgoid.load(Ordering::Relaxed));
        }
        let old = g.status.load(Ordering::Relaxed);
        casgstatus(g, old, G_RUNNABLE);
        let spilled = ready::ready_put(gp, true);
        if spilled {
            // The caller has filled its P's run queue: a safe point to let the queued
            // goroutines run (see `safepoint`).
            // (Spilling needs a P, so we are on a goroutine: gopreempt's contract.)
            park::gopreempt();
        } else if !pp.is_null() {
            safepoint(&*pp);
        }
        Ok(goid)
    }
}

/// A safe point of the running goroutine on the M that holds `p` (a `gmp_*` call that may
/// switch): if sysmon marked the P for preemption (`P::preempt`: a whole slice of
/// `FORCE_PREEMPT_NS` without passing through the scheduler), go to the back of the global
/// queue, as Go's preemption would. One relaxed load when nothing is asked.
///
/// # Safety
/// Called on a goroutine running on the M that holds `p`.
#[inline]
unsafe fn safepoint(p: &P) {
    if p.preempt.load(Ordering::Relaxed) {
        // SAFETY: caller contract: on a goroutine.
        unsafe { park::gopreempt() };
    }
}

/// This thread's M and the P it holds, if the caller is a goroutine holding one: null on a
/// foreign thread, and between `gmp_entersyscall` and `gmp_exitsyscall` (no P).
#[inline]
fn running_on_p() -> Option<(*mut M, *mut P)> {
    let m = getm();
    if m.is_null() {
        return None;
    }
    // SAFETY: m is this thread's M (a runtime thread: only goroutines call the API there).
    let pp = unsafe { (*m).p.load(Ordering::Relaxed) };
    // SAFETY: as above.
    if pp.is_null() || unsafe { (*m).curg.load(Ordering::Relaxed).is_null() } {
        return None;
    }
    Some((m, pp))
}

/// The safe point of every `gmp_*` call that may switch (see `safepoint`): a no-op on a
/// foreign thread, and between `gmp_entersyscall` and `gmp_exitsyscall` (no P).
pub fn preempt_check() {
    if let Some((_, pp)) = running_on_p() {
        // SAFETY: we run on a goroutine of this M, which holds pp.
        unsafe { safepoint(&*pp) };
    }
}

/// `preempt_check` on the way out of a blocking call (gmp_blocking): the goroutine is
/// preempted as there, but resumes on this same thread, since C code may keep `&errno`
/// across the call (HACKING.md, decisions 4 and 8; the header promises it).
pub fn preempt_check_bound() {
    if let Some((m, pp)) = running_on_p() {
        // SAFETY: we run on goroutine m.curg, whose M holds pp.
        unsafe {
            if (*pp).preempt.load(Ordering::Relaxed) {
                park::gopreempt_bound(m);
            }
        }
    }
}

/// Whether this thread's P has a preemption request pending (what `preempt_check` tests,
/// without acting on it, and without its check for a current goroutine: one load less on
/// a path that runs on goroutines only). For a caller that reads it inside a short
/// critical section and, only when it is set, leaves the section to call
/// `preempt_check` (see `Chan::safepoint_locked`).
#[inline]
pub fn preempt_wanted() -> bool {
    let m = getm();
    if m.is_null() {
        return false;
    }
    // SAFETY: m is this thread's M; only its thread writes `m.p`.
    let pp = unsafe { (*m).p.load(Ordering::Relaxed) };
    // SAFETY: Ps are never freed.
    !pp.is_null() && unsafe { (*pp).preempt.load(Ordering::Relaxed) }
}

/// First frame of every goroutine, on its own stack: runs the entry function, then exits.
pub(super) unsafe extern "C" fn goentry(_arg: usize) -> ! {
    let gp = getg();
    if hookflags::any() {
        hooks::started(gp);
    }
    // SAFETY: execute switched to this fresh stack for gp, which is running on this M.
    let (entry, arg) = unsafe { ((*gp).entry.get(), (*gp).arg.get()) };
    if let Some(f) = entry {
        // A C function cannot unwind; a Rust callback that panics is a bug we report
        // rather than unwind into the scheduler.
        // SAFETY: f and arg were given together to gmp_go, whose contract is that f may
        // be called with arg on a goroutine.
        if std::panic::catch_unwind(|| unsafe { f(arg) }).is_err() {
            throw("goroutine panicked");
        }
    }
    goexit();
}

/// Pushes `d` on the running goroutine's defer list; false (nothing pushed) off a
/// goroutine, where nothing can end the caller's frame early.
///
/// # Safety
/// `d` stays alive and unmoved until `defer_pop(d)`, which the pushing frame must call
/// before it returns (pushes and pops nest).
pub unsafe fn defer_push(d: *mut Defer) -> bool {
    let gp = getg();
    if gp.is_null() {
        return false;
    }
    // SAFETY: gp runs on this thread, which owns its defer list; d is live (contract).
    unsafe {
        (*d).link = (*gp).defers.get();
        (*gp).defers.set(d);
    }
    true
}

/// Pops `d`, which must be the innermost pushed record of the running goroutine (the
/// goroutine may have moved to another M since the push; the list moved with it).
///
/// # Safety
/// `d` was pushed by `defer_push` (which returned true) in the calling frame.
pub unsafe fn defer_pop(d: *mut Defer) {
    let gp = getg();
    // SAFETY: gp runs on this thread; d is the live record on its list (contract).
    unsafe {
        if gp.is_null() || (*gp).defers.get() != d {
            throw("defer_pop: not the innermost defer");
        }
        (*gp).defers.set((*d).link);
    }
}

/// Ends the calling goroutine (Go's Goexit); never returns. C frames above it are
/// abandoned, not unwound; the runtime's own cleanups (`Defer`) run first.
///
/// Must be called on a goroutine (the FFI layer checks).
pub fn goexit() -> ! {
    let gp = getg();
    if gp.is_null() {
        throw("goexit called off a goroutine");
    }
    // SAFETY: gp is the goroutine running on this thread; only its own M (us) changes its
    // status between RUNNING and SYSCALL.
    if unsafe { (*gp).status.load(Ordering::Relaxed) } == G_SYSCALL {
        // SAFETY: as above.
        park::throw_in_syscall(unsafe { &*gp }, "ended (returned, or called gmp_goexit)");
    }
    // Run the cleanups, innermost first. One may switch (an unlock's hand-off yields):
    // the goroutine resumes, perhaps on another M, and goes on exiting.
    loop {
        // SAFETY: gp is ours while it runs; its records live in abandoned frames above.
        let d = unsafe { (*gp).defers.get() };
        if d.is_null() {
            break;
        }
        // SAFETY: as above; popped before it runs, so it runs once.
        unsafe {
            (*gp).defers.set((*d).link);
            ((*d).f)((*d).arg);
        }
    }
    // SAFETY: we are on a goroutine.
    let m = getm();
    // SAFETY: m is this thread's M and curg is us.
    unsafe {
        let gp = (*m).curg.load(Ordering::Relaxed);
        if hookflags::any() {
            hooks::leave(&*m, &*gp, true);
        }
        arch::switch((*gp).sp.ptr(), (*m).g0_sp.get(), action::EXIT);
    }
    throw("goexit: dead goroutine resumed");
}

/// On the scheduler stack: `gp` finished. Mark it dead and cache it for reuse.
///
/// # Safety
/// On `m`'s own thread, right after `gp` switched to it with EXIT.
pub(super) unsafe fn goexit0(m: &M, gp: *mut G) {
    // SAFETY: gp is ours (it just exited on this M).
    let g = unsafe { &*gp };
    // A sampled goroutine's stack mark, before it counts as ended (the Release of
    // `nexited` below): whoever sees the goroutine count drop sees its mark.
    // SAFETY: gp is ours and ended; we run on g0, not on its stack.
    unsafe {
        if g.hwm.get() {
            g.hwm.set(false);
            if let (Some(entry), Some(st)) = (g.entry.get(), &*g.stack.ptr()) {
                stackhwm::record(entry as usize, st);
            }
        }
    }
    casgstatus(g, G_RUNNING, G_DEAD);
    // SAFETY: the scheduler loop runs holding a P.
    owner_inc(unsafe { &(*m.p.load(Ordering::Relaxed)).nexited });
    m.curg.store(null_mut(), Ordering::Relaxed);
    g.m.store(null_mut(), Ordering::Relaxed);
    if !g.affm.load(Ordering::Relaxed).is_null() {
        // A pinned goroutine unbinds from its M when it ends (it always ends there).
        g.affm.store(null_mut(), Ordering::Relaxed);
        // SAFETY: m's own thread owns naffine.
        unsafe { m.naffine.set(m.naffine.get() - 1) };
    }
    if !g.lockedm.load(Ordering::Relaxed).is_null() {
        // A goroutine that ends inside LockOSThread takes its thread with it (Go's goexit0
        // + mexit): whatever it changed in the thread's state must not leak into other
        // goroutines. The scheduler loop sees `exiting` and ends the thread — unless other
        // goroutines are pinned to this thread: they can run nowhere else, so the thread
        // stays (and they share whatever state the locked goroutine left behind).
        g.lockedm.store(null_mut(), Ordering::Relaxed);
        m.lockedg.store(null_mut(), Ordering::Relaxed);
        // SAFETY: m's own thread owns these fields.
        unsafe {
            if m.lockedext.get() > 0 {
                m.lockedext.set(0);
                if m.naffine.get() == 0 {
                    m.exiting.set(true);
                }
            }
        }
    }
    // SAFETY: gp is dead and ours.
    unsafe {
        labels::drop_of(g);
        scope::drop_of(g);
        g.entry.set(None);
        g.arg.set(null_mut());
        g.pinned.set(false);
        gfput(m.p.load(Ordering::Relaxed), gp);
    }
}

/// Caches dead G `gp` on P `pp` (or globally when `pp` is null).
///
/// # Safety
/// `gp` is DEAD and ours; `pp`, if non-null, is held by this thread.
unsafe fn gfput(pp: *mut P, gp: *mut G) {
    let default = SCHED.default_stack.load(Ordering::Relaxed);
    // SAFETY: gp is ours.
    let has_stack = unsafe {
        let st = &mut *(*gp).stack.ptr();
        // Odd-sized stacks are not cached with the G.
        if let Some(s) = st.take_if(|s| s.size() != default) {
            stack::free(s);
        }
        st.is_some()
    };
    if pp.is_null() {
        with_gfree(|gf| {
            // SAFETY: gp is ours; the global list is locked.
            unsafe { put_global(gf, gp, false) }
        });
        return;
    }
    // SAFETY: pp is held by this thread, so its lists are ours.
    let p = unsafe { &*pp };
    let (hot, cold) = unsafe { gfree_lists(p) };
    // A G without a stack has nothing to give a starting goroutine: it goes on the cold
    // list, so that the hot list's top always holds a stack `take_hot_stack` can trade.
    // SAFETY: gp is ours.
    unsafe {
        if has_stack {
            hot.push(gp);
        } else {
            cold.push(gp);
        }
    }
    if hot.len() + cold.len() >= GFREE_LOCAL_MAX {
        // Spill the cold Gs first, then hot ones from under the G just put: its stack is
        // the one the next goroutine to start here takes (`take_hot_stack`), in the cache
        // and faulted in. Spilling from the top once left a G with an untouched stack there
        // after every spill, and the next start faulted its page in (spawn from C main:
        // ~20,000 faults per million spawns, its RSS growing with them).
        // SAFETY: our list.
        let top = unsafe { hot.pop() };
        with_gfree(|gf| {
            while hot.len() + cold.len() > GFREE_LOCAL_MAX - GFREE_BATCH - 1 {
                // SAFETY: our lists; the global one is locked.
                unsafe {
                    if let Some(g) = cold.pop() {
                        put_global(gf, g, false);
                    } else if let Some(g) = hot.pop() {
                        put_global(gf, g, true);
                    } else {
                        break;
                    }
                }
            }
        });
        if let Some(top) = top {
            // SAFETY: our list; top came off it.
            unsafe { hot.push(top) };
        }
    }
    p.gfreecnt.store(hot.len() + cold.len(), Ordering::Relaxed);
}

/// P `p`'s dead-G lists: the hot one (`P::gfree`) and the cold one (`P::gfree_cold`).
///
/// # Safety
/// On the M holding `p`, with no other reference to either list live.
#[allow(clippy::mut_from_ref)]
pub(super) unsafe fn gfree_lists(p: &P) -> (&mut GList, &mut GList) {
    // SAFETY: caller contract: the holding M owns both.
    unsafe { (&mut *p.gfree.ptr(), &mut *p.gfree_cold.ptr()) }
}

/// Puts a dead G on the global cache (on its hot list if `hot`: its stack ran last),
/// releasing its stack when enough are cached already.
///
/// # Safety
/// `gp` is DEAD and ours; `gf` is the locked global cache.
pub(super) unsafe fn put_global(gf: &mut GFreeGlobal, gp: *mut G, hot: bool) {
    // SAFETY: gp is ours.
    unsafe {
        let st = &mut *(*gp).stack.ptr();
        if st.is_some() && gf.len_with_stack() < GFREE_GLOBAL_STACKS_MAX {
            if hot {
                gf.push_hot(gp);
            } else {
                gf.push_stack(gp);
            }
        } else {
            if let Some(s) = st.take() {
                stack::free(s);
            }
            gf.nostack.push(gp);
        }
    }
}

/// Dead Gs per global list (`stack`, `hot`) that [`trim_gfree`] leaves their stacks
/// however long unused: what a burst of goroutines from C main or a starved P starts on.
const GFREE_TRIM_FLOOR: i32 = 64;

/// sysmon's periodic trim of the global dead-G cache (Go frees the stacks of dead Gs at
/// each GC): the Gs that no spawn or start took during the whole period since the last
/// call, beyond [`GFREE_TRIM_FLOOR`] per list, give their stacks back to the pool with all
/// their pages released (`stack::free_released`), and go to the `nostack` list. The Ps'
/// own caches (at most `GFREE_LOCAL_MAX` each) are left alone. Returns whether the cache
/// still holds more than the floor, so that a later call may release more.
pub(super) fn trim_gfree() -> bool {
    // SAFETY: the global cache is locked.
    let chains = with_gfree(|gf| unsafe { gf.take_unused(GFREE_TRIM_FLOOR) });
    let mut stacks = Vec::new();
    let mut tails = [null_mut::<G>(); 2];
    for (&(head, _), tail) in chains.iter().zip(tails.iter_mut()) {
        let mut gp = head;
        while !gp.is_null() {
            // SAFETY: the chain came off the locked global cache: its dead Gs are ours
            // until they go back on a list.
            unsafe {
                if let Some(s) = (*(*gp).stack.ptr()).take() {
                    stacks.push(s);
                }
                *tail = gp;
                gp = (*gp).schedlink.get();
            }
        }
    }
    if !stacks.is_empty() {
        stack::free_released(stacks);
    }
    with_gfree(|gf| {
        for (&(head, n), &tail) in chains.iter().zip(tails.iter()) {
            if n > 0 {
                // SAFETY: the chain is ours (above) and on no list; the cache is locked.
                unsafe { gf.nostack.push_chain(head, tail, n) };
            }
        }
        gf.above(GFREE_TRIM_FLOOR)
    })
}

/// Takes a dead G for a new goroutine with a `size`-byte stack (whole pages): from P `pp`'s
/// cache, the global cache, or freshly allocated, and sets its `sp` to `SP_UNSTARTED`. Any
/// dead G will do, whatever stack it kept (Go's gfget): one whose stack has the wrong size
/// gives it back to the stack pool. A G left without a stack gets one now, or, for the
/// default size on a P, the promise of one (`take_ticket`), which `execute` keeps when the
/// goroutine starts.
/// Only when no dead G is cached anywhere is a new G allocated, so the number of Gs is
/// bounded by the peak of live goroutines plus the caches, whatever the mix of stack sizes.
/// For the default size, Gs that kept a stack are preferred; for another size, Gs without
/// one (a default stack would only go back to the pool).
///
/// # Safety
/// `pp`, if non-null, is held by this thread.
unsafe fn gfget(pp: *mut P, size: usize) -> Result<*mut G, StartError> {
    let default = SCHED.default_stack.load(Ordering::Relaxed);
    let want_stack = size == default;
    // A goroutine of the default size spawned by a goroutine gets its stack when it first
    // runs (see `take_ticket`); one of another size, or spawned by a thread without a P,
    // gets it now.
    let lazy = want_stack && !pp.is_null();
    let gp = if pp.is_null() {
        // SAFETY: the global cache is locked.
        with_gfree(|gf| unsafe {
            let gp = pop_global(gf, want_stack, false);
            // A thread without a P (C main) takes one G per spawn off the global cache,
            // where Ms left them: each is in another CPU's cache, and reading its link
            // stalls this thread. Fetch the next one now, so that it has arrived by the
            // next spawn.
            prefetch_g(peek_global(gf, want_stack));
            gp
        })
    } else {
        // SAFETY: pp is held by this thread, so its lists are ours.
        let p = unsafe { &*pp };
        let (hot, cold) = unsafe { gfree_lists(p) };
        // A goroutine promised a stack leaves the hot Gs alone: their stacks are for the
        // goroutines that start here (`take_hot_stack`). Taking them for queued goroutines left
        // the starting ones without, and each started on a fresh stack (skynet: ~40,000
        // page faults, against ~9,400 goroutines started and not ended at its peak).
        if cold.is_empty() && (lazy || hot.is_empty()) {
            with_gfree(|gf| {
                for _ in 0..GFREE_BATCH {
                    // SAFETY: the global cache is locked.
                    match unsafe { pop_global(gf, want_stack, lazy) } {
                        // SAFETY: our list; the G came off the locked global one.
                        Some(g) => unsafe { cold.push(g) },
                        None => break,
                    }
                }
            });
        }
        // The cold ones first: a hot stack is worth more to a goroutine starting here
        // (`take_hot_stack`) than to one being queued.
        // SAFETY: our lists.
        let gp = unsafe {
            match cold.pop() {
                None if !lazy => hot.pop(),
                gp => gp,
            }
        };
        p.gfreecnt.store(hot.len() + cold.len(), Ordering::Relaxed);
        gp
    };
    let fresh = gp.is_none();
    let gp = match gp {
        Some(gp) => gp,
        None => new_g(),
    };
    // SAFETY: gp is ours (off a free list or new).
    unsafe {
        let st = &mut *(*gp).stack.ptr();
        if let Some(s) = st.take_if(|s| s.size() != size) {
            stack::free(s);
        }
        if st.is_some() {
            (*gp).sp.set(SP_UNSTARTED);
            return Ok(gp);
        }
        if lazy {
            // SAFETY: pp is held by this thread (caller contract): its tickets are ours.
            if take_ticket(&mut *(*pp).stack_tickets.ptr(), size) {
                (*gp).sp.set(SP_UNSTARTED | size);
                return Ok(gp);
            }
            // The pool cannot promise a stack (no address space left for a slab), but a
            // dead G may still hold one: take that G instead, as an eager spawn would.
            with_gfree(|gf| gf.nostack.push(gp));
            return match gfget_stacked(&*pp, size) {
                Some(g) => {
                    (*g).sp.set(SP_UNSTARTED);
                    Ok(g)
                }
                None => Err(StartError::NoMemory),
            };
        }
        if want_stack && pp.is_null() && fresh {
            // A thread without a P (C main) with no dead G to reuse: a free stack if the
            // pool has one, else the promise of one rather than a new slab's (see
            // `take_ticket`).
            if let Some(s) = stack::alloc_free(size) {
                *st = Some(s);
                (*gp).sp.set(SP_UNSTARTED);
                return Ok(gp);
            }
            if stack::reserve(size, 1).is_ok() {
                (*gp).sp.set(SP_UNSTARTED | size);
                return Ok(gp);
            }
        }
        match stack::alloc(size) {
            Ok(s) => *st = Some(s),
            Err(e) => {
                // Give the G back so it is not lost.
                with_gfree(|gf| gf.nostack.push(gp));
                return Err(if e == libc::EINVAL {
                    StartError::BadStackSize
                } else {
                    StartError::NoMemory
                });
            }
        }
        (*gp).sp.set(SP_UNSTARTED);
    }
    Ok(gp)
}

/// A dead G holding a `size`-byte stack: the top of P `p`'s hot list, else one off the
/// global cache. For a spawn the pool could not promise a stack to.
///
/// # Safety
/// On the M holding `p`.
unsafe fn gfget_stacked(p: &P, size: usize) -> Option<*mut G> {
    let fits = |g: *mut G| {
        // SAFETY: g is a dead G on a list we hold (the caller's, or the locked global one).
        unsafe {
            (*(*g).stack.ptr())
                .as_ref()
                .is_some_and(|s| s.size() == size)
        }
    };
    // SAFETY: caller contract: p's lists are ours.
    let (hot, cold) = unsafe { gfree_lists(p) };
    let top = hot.peek();
    if !top.is_null() && fits(top) {
        // SAFETY: our list, top is on it.
        unsafe { hot.pop() };
        p.gfreecnt.store(hot.len() + cold.len(), Ordering::Relaxed);
        return Some(top);
    }
    // SAFETY: the global lists are locked; what is popped and not taken goes back.
    with_gfree(|gf| unsafe {
        if let Some(g) = gf.pop_stack() {
            if fits(g) {
                return Some(g);
            }
            gf.push_stack(g);
        }
        if let Some(g) = gf.pop_hot() {
            if fits(g) {
                return Some(g);
            }
            gf.push_hot(g);
        }
        None
    })
}

/// Promises taken from the stack pool at a time for a P's tickets.
const TICKET_BATCH: usize = 64;
/// A P holding more unused promises than this gives `TICKET_BATCH` back to the pool. A
/// goroutine spawning in a loop fills its P's run queue (256) before the spawned ones
/// start and give their promises back: a P that keeps two queues' worth trades with the
/// pool (a mutex each way) once per ~`TICKET_BATCH` goroutines only when the number
/// queued really grows or shrinks (with a cap of 64, spawn at GOMAXPROCS=1 took and gave
/// back a batch every ~37 goroutines). Unused promises cost address space only.
const TICKET_MAX: usize = 512;

/// Takes the promise of a `size`-byte stack for a goroutine that starts without one, from
/// a P's tickets `t`, refilling them from the stack pool (`stack::reserve`, which maps what
/// the promises need). False when the pool cannot promise one: `gmp_go` then fails with
/// -ENOMEM, as Go's `newproc` does, which allocates the stack at spawn.
///
/// Why promises: a goroutine gets its stack when it first runs (`schedule::take_hot_stack`),
/// mostly the warm stack of one that just died, so a program that spawns far ahead of
/// running does not fault in, guard and keep a stack for each queued goroutine (skynet at
/// GOMAXPROCS=1 has ~65,000 goroutines alive at its peak, of which ~9,400 have started:
/// with a stack per spawn it takes about four times the page faults and the peak RSS).
/// But `gmp_go` must still report running out of memory, and a goroutine must never find
/// no stack when it starts: the promise is a stack the pool keeps for it (address space
/// only, until handed out), taken by `take_hot_stack` if no dead G's stack is at hand.
///
/// A thread without a P (C main) takes a dead G with its stack, or a free stack of the
/// pool, when there is one. Only a brand-new G (no dead one to reuse: every goroutine
/// alive) whose stack the pool would have to map gets a promise instead
/// (`stack::reserve`, one at a time: such a thread has no tickets). Otherwise sleep_many
/// from C main, whose 100,000 sleepers keep every stack busy for 10 ms, would map and guard
/// a stack for each of the tens of thousands of goroutines C main keeps queued, most of
/// which never run on it (they take a dead goroutine's warm stack when they start);
/// `foreign_promises.c` bounds the page tables such spawns cost. Promising to every spawn
/// that finds no stack would let C main run ahead of the Ms in the spawn workload, as
/// promises for all of its spawns do (several times the goroutines queued, Gs gone cold,
/// several times the RSS): a promised goroutine that starts on a dead one's warm stack
/// leaves that dead G without one, C main reuses it and promises again. A reused G without
/// a stack still gets one at spawn, which keeps C main at the Ms' pace there (`scripts/ab.sh
/// -p 2 -a "-shape 1" spawn` and `sleep_many`).
#[inline(always)]
pub(super) fn take_ticket(t: &mut Tickets, size: usize) -> bool {
    if t.size == size && t.count > 0 {
        t.count -= 1;
        return true;
    }
    take_ticket_slow(t, size)
}

#[cold]
#[inline(never)]
fn take_ticket_slow(t: &mut Tickets, size: usize) -> bool {
    retarget(t, size);
    if stack::reserve(size, TICKET_BATCH).is_ok() {
        t.count = TICKET_BATCH;
    } else if stack::reserve(size, 1).is_ok() {
        t.count = 1;
    } else {
        return false;
    }
    t.count -= 1;
    true
}

/// Gives back to `t` the promise of a `size`-byte stack that a starting goroutine did not
/// need (it took a dead G's stack), returning a batch to the pool when `t` holds too many.
#[inline(always)]
pub(super) fn return_ticket(t: &mut Tickets, size: usize) {
    if t.size == size && t.count < TICKET_MAX {
        t.count += 1;
        return;
    }
    return_ticket_slow(t, size);
}

#[cold]
#[inline(never)]
fn return_ticket_slow(t: &mut Tickets, size: usize) {
    retarget(t, size);
    t.count += 1;
    if t.count > TICKET_MAX {
        stack::unreserve(size, TICKET_BATCH);
        t.count -= TICKET_BATCH;
    }
}

/// Makes `t` hold tickets for `size`: those left from before the default stack size
/// changed go back to the pool.
fn retarget(t: &mut Tickets, size: usize) {
    if t.size != size {
        if t.count > 0 {
            stack::unreserve(t.size, t.count);
        }
        *t = Tickets { size, count: 0 };
    }
}

/// Starts moving `gp`'s record (both of its cache lines) into this CPU's cache; null is
/// ignored.
#[inline(always)]
pub(super) fn prefetch_g(gp: *mut G) {
    if !gp.is_null() {
        crate::sys::prefetch_range(gp as usize, gp as usize + core::mem::size_of::<G>());
    }
}

thread_local! {
    /// Goroutine ids reserved for this thread without a P (C main, a Python thread),
    /// `[next, end)`: Go's goidcache, which a P keeps (`P::goidcache`), for the threads
    /// that spawn without one. A foreign thread spawning in a loop otherwise paid a locked
    /// add per spawn on `SCHED.goidgen`.
    static FOREIGN_GOIDS: core::cell::Cell<(u64, u64)> = const { core::cell::Cell::new((0, 0)) };
}

/// The next goroutine id for a spawn by a thread without a P.
fn foreign_goid() -> u64 {
    FOREIGN_GOIDS.with(|c| {
        let (mut next, mut end) = c.get();
        if next == end {
            next = SCHED.goidgen.fetch_add(GOID_CACHE_BATCH, Ordering::Relaxed) + 1;
            end = next + GOID_CACHE_BATCH;
        }
        c.set((next + 1, end));
        next
    })
}

/// A dead G off the global cache for a spawn: one that kept a (default-size) stack first
/// if `want_stack`, else one without a stack first. The hot list is not used at all for a
/// goroutine that will be promised a stack (`lazy`): a spawned goroutine may wait long
/// before it runs, and a hot stack is worth more to one starting now (`take_hot_stack`).
/// For one that takes its stack now it comes before the Gs without a stack (which the
/// trim leaves behind, `trim_gfree`), whose stack would come from the pool, released.
///
/// # Safety
/// `gf` is the locked global cache.
#[inline(always)]
unsafe fn pop_global(gf: &mut GFreeGlobal, want_stack: bool, lazy: bool) -> Option<*mut G> {
    // SAFETY: caller contract.
    unsafe {
        match (want_stack, lazy) {
            (true, true) => gf.pop_stack().or_else(|| gf.nostack.pop()),
            (true, false) => gf
                .pop_stack()
                .or_else(|| gf.pop_hot())
                .or_else(|| gf.nostack.pop()),
            (false, _) => gf
                .nostack
                .pop()
                .or_else(|| gf.pop_stack())
                .or_else(|| if lazy { None } else { gf.pop_hot() }),
        }
    }
}

/// The G `pop_global(gf, want_stack, false)` would take next (null if none), to prefetch.
#[inline(always)]
fn peek_global(gf: &GFreeGlobal, want_stack: bool) -> *mut G {
    let order = if want_stack {
        [gf.peek_stack(), gf.peek_hot(), gf.nostack.peek()]
    } else {
        [gf.nostack.peek(), gf.peek_stack(), gf.peek_hot()]
    };
    order
        .into_iter()
        .find(|g| !g.is_null())
        .unwrap_or(null_mut())
}

/// Refills `p`'s empty hot list from the global one (up to a batch), for the goroutines
/// about to start on `p` (`take_hot_stack`). One relaxed load when the global list is
/// empty.
///
/// # Safety
/// On the M holding `p`.
pub(super) unsafe fn refill_hot(p: &P) {
    if SCHED.gfree_hot.load(Ordering::Relaxed) == 0 {
        return;
    }
    // SAFETY: caller contract: p's lists are ours.
    let (hot, cold) = unsafe { gfree_lists(p) };
    with_gfree(|gf| {
        for _ in 0..GFREE_BATCH {
            // SAFETY: the global list is locked; ours is ours.
            match unsafe { gf.pop_hot() } {
                Some(g) => unsafe { hot.push(g) },
                None => break,
            }
        }
    });
    p.gfreecnt.store(hot.len() + cold.len(), Ordering::Relaxed);
}

/// Gs are carved out of chunks of this many: one allocation per chunk instead of one
/// aligned allocation per G, whose bookkeeping and alignment padding cost more than the
/// 128-byte G itself (it shows in the RSS of a million parked goroutines).
const G_CHUNK: usize = 256;

/// Serialises `new_g` (the chunk list's only writer).
static G_CHUNK_LOCK: Lock = Lock::new(crate::sys::Rank::GChunks);

/// Every G ever allocated, newest chunk first. Lock-free and allocation-free (the dump
/// calls it from a signal handler).
pub(crate) fn all_gs() -> impl Iterator<Item = &'static G> {
    let mut chunk = SCHED.allg.load(Ordering::Acquire) as *const GChunk;
    let mut i = 0usize;
    core::iter::from_fn(move || {
        loop {
            if chunk.is_null() {
                return None;
            }
            // SAFETY: chunks are never freed; `len` slots are constructed Gs (the acquire
            // pairs with new_g's release), and Gs are never freed.
            unsafe {
                let c = &*chunk;
                if i < c.len.load(Ordering::Acquire) {
                    i += 1;
                    return Some(&*c.gs.add(i - 1));
                }
                chunk = c.next;
                i = 0;
            }
        }
    })
}

/// Gs ever allocated (Go's `allglen`): the length of `SCHED.allg`. Gs are never freed, so
/// this is the peak of live goroutines plus the dead ones cached for reuse (`gfget`).
static ALLGLEN: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// The number of Gs ever allocated (see `ALLGLEN`).
pub(super) fn allglen() -> u64 {
    ALLGLEN.load(Ordering::Relaxed)
}

/// Allocates a new G (never freed) in the newest chunk, or a new chunk.
fn new_g() -> *mut G {
    ALLGLEN.fetch_add(1, Ordering::Relaxed);
    G_CHUNK_LOCK.lock();
    let mut chunk = SCHED.allg.load(Ordering::Relaxed) as *const GChunk;
    // SAFETY: chunks are never freed; G_CHUNK_LOCK makes us their only writer.
    if chunk.is_null() || unsafe { (*chunk).len.load(Ordering::Relaxed) } == G_CHUNK {
        let layout =
            std::alloc::Layout::array::<G>(G_CHUNK).unwrap_or_else(|_| throw("new_g: layout"));
        // SAFETY: a non-zero-sized layout.
        let gs = unsafe { std::alloc::alloc(layout) } as *mut G;
        if gs.is_null() {
            throw("new_g: out of memory");
        }
        let c = Box::leak(Box::new(GChunk {
            gs,
            len: AtomicUsize::new(0),
            next: chunk,
        }));
        // Release: a reader that sees the chunk sees its fields.
        SCHED.allg.store(c, Ordering::Release);
        chunk = c;
    }
    // SAFETY: as above; slot `len` is inside the chunk, unused and aligned.
    let gp = unsafe {
        let c = &*chunk;
        let n = c.len.load(Ordering::Relaxed);
        let gp = c.gs.add(n);
        gp.write(G::new());
        // Release: a reader that counts this slot sees the constructed G.
        c.len.store(n + 1, Ordering::Release);
        gp
    };
    G_CHUNK_LOCK.unlock();
    gp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every G `new_g` makes is listed by `all_gs` exactly once, across chunk boundaries,
    /// including while other threads allocate (readers see only constructed slots).
    #[test]
    fn all_gs_lists_every_g_once() {
        let mine: Vec<usize> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3)
                .map(|_| {
                    s.spawn(|| {
                        (0..G_CHUNK + 7)
                            .map(|_| {
                                // A reader walking the list meanwhile sees only whole Gs.
                                assert!(
                                    all_gs().all(|g| g.status.load(Ordering::Relaxed) <= G_DEAD)
                                );
                                new_g() as usize
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let listed: std::collections::HashMap<usize, usize> =
            all_gs().fold(Default::default(), |mut m, g| {
                *m.entry(g as *const G as usize).or_default() += 1;
                m
            });
        for g in &mine {
            assert_eq!(
                listed.get(g),
                Some(&1),
                "G {g:#x} listed {:?} times",
                listed.get(g)
            );
        }
    }
}
