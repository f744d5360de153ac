//! Threads that are not Ms: how one waits for goroutines (spinning first when its last
//! wait was quick, `foreign_wait`), the counters an idle M reads to stay awake for it, and
//! the switch that turns the C entries' quick paths off. The one part of `sys` with
//! thread-local state (`FOREIGN_QUICK`): these functions run only on foreign threads.

use super::*;

/// Set, never cleared, when the C entries' quick paths (`ffi::chan`'s leaf send and
/// receive) must not run: in a child forked after the runtime started (every entry must
/// abort there, `rt::os_linux`) and once TSan's hooks are on (`tsan::enable`; the quick
/// paths do not call them). One byte for both, so that a quick path tests one flag.
/// On a line of its own: every quick operation reads it, and it is written once.
pub(super) static QUICK_OFF: FlagLine = FlagLine(core::sync::atomic::AtomicBool::new(false));

/// Whether the C entries' quick paths are off (see `QUICK_OFF`).
#[inline(always)]
pub(crate) fn quick_off() -> bool {
    QUICK_OFF.0.load(Ordering::Relaxed)
}

/// Turns the quick paths off for good (async-signal-safe: one store).
pub(crate) fn set_quick_off() {
    QUICK_OFF.0.store(true, Ordering::Relaxed);
}

/// How long a thread that is not an M (C main) spins before sleeping, and how long an
/// idle M waits, spinning, for such a thread's next hand-off (`foreign::spin_for_foreign`):
/// about two wake-ups of an idle vCPU (each takes microseconds, more in a VM). In time,
/// not in pause instructions, whose length differs tenfold between CPU families.
pub(crate) const FOREIGN_SPIN_NS: i64 = 20_000;

/// Whether foreign waits and idle Ms may spin for each other (set at start-up: the
/// machine has at least two CPUs).
pub(crate) static FOREIGN_SPIN: core::sync::atomic::AtomicBool =
    core::sync::atomic::AtomicBool::new(false);

/// When a thread that is not an M last began or ended a wait on goroutines, or handed
/// one work in a quick exchange (`nanotime`): an M going idle within
/// `FOREIGN_RECENT_NS` of it waits for the next hand-off (`foreign::spin_for_foreign`).
pub(crate) static FOREIGN_LAST_NS: core::sync::atomic::AtomicI64 =
    core::sync::atomic::AtomicI64::new(i64::MIN / 2);

/// See `FOREIGN_LAST_NS`.
pub(crate) const FOREIGN_RECENT_NS: i64 = 50_000;

/// Hand-offs and waits of threads that are not Ms: bumped at each foreign wait
/// (`foreign_wait`) and when one in a quick exchange readies or spawns a goroutine
/// (`ready::ready_put`). An M going idle that sees it moved stays awake a moment for the
/// next one (`foreign::spin_for_foreign`). No clock read: a hand-off in an exchange pays one
/// relaxed RMW; a spawn outside one pays nothing.
pub(crate) static FOREIGN_ACTS: core::sync::atomic::AtomicU64 =
    core::sync::atomic::AtomicU64::new(0);

/// Records a hand-off or a wait of a thread that is not an M (`FOREIGN_ACTS`).
#[inline]
pub(crate) fn foreign_act() {
    FOREIGN_ACTS.fetch_add(1, Ordering::Relaxed);
}

/// A foreign wait shorter than this makes the thread's next wait spin first.
pub(super) const FOREIGN_QUICK_NS: i64 = 50_000;

thread_local! {
    /// Whether this (foreign) thread's last wait was quick: it is in an exchange with
    /// goroutines, whose answers come within microseconds.
    static FOREIGN_QUICK: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Whether this thread's last foreign wait was quick (it is in an exchange with
/// goroutines) and spinning is allowed.
pub fn foreign_quick() -> bool {
    FOREIGN_SPIN.load(Ordering::Relaxed) && FOREIGN_QUICK.with(|q| q.get())
}

/// A wait of a thread that is not an M, adaptively: it spins first (`spin(ns)`, true when
/// the wake-up came) only when its previous wait was quick, then sleeps (`sleep(left)`,
/// whether woken before `left` passed). A thread in a ping-pong with a goroutine then
/// answers within the spin and its partner's M, spinning for it too, takes the next
/// message without a wake-up on either side; a thread that waits long (a WaitGroup over
/// the whole program) sleeps at once. Spinning unconditionally is slower on a 2-CPU
/// machine (`scripts/ab.sh -p 2 -a "-shape 1" pingpong`): the kernel places the
/// goroutine's woken M on the spinning thread's CPU.
pub fn foreign_wait(
    timeout: Option<Duration>,
    spin: impl FnOnce(i64) -> bool,
    sleep: impl FnOnce(Option<Duration>) -> bool,
) -> bool {
    foreign_act();
    let start = nanotime();
    FOREIGN_LAST_NS.store(start, Ordering::Relaxed);
    let woken = if foreign_quick() {
        let max = timeout.map_or(FOREIGN_SPIN_NS, |t| {
            t.as_nanos().min(FOREIGN_SPIN_NS as u128) as i64
        });
        spin(max) || {
            let left = timeout.map(|t| t.saturating_sub(Duration::from_nanos(max as u64)));
            sleep(left)
        }
    } else {
        sleep(timeout)
    };
    let end = nanotime();
    FOREIGN_LAST_NS.store(end, Ordering::Relaxed);
    FOREIGN_QUICK.with(|q| q.set(woken && end - start < FOREIGN_QUICK_NS));
    woken
}
