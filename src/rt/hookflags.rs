//! Which observers a switch must tell (AddressSanitizer, ThreadSanitizer, the execution
//! trace, the scheduling latency histogram), in one flag word that the scheduler's hot
//! sites test (`any`: one load, one predicted branch) before calling `hooks.rs`'
//! dispatch. Each observer sets its own bit.

use core::sync::atomic::{AtomicU8, Ordering};

/// The observers' bits.
pub(crate) const ASAN: u8 = 1;
pub(crate) const TSAN: u8 = 2;
pub(crate) const TRACE: u8 = 4;
pub(crate) const SCHEDLAT: u8 = 8;

/// The flag word, on a line of its own: read at every switch, written when an observer
/// starts or stops.
#[repr(align(128))]
struct Word(AtomicU8);

static HOOKS: Word = Word(AtomicU8::new(0));

/// Whether any observer is on.
#[inline(always)]
pub(crate) fn any() -> bool {
    HOOKS.0.load(Ordering::Relaxed) != 0
}

/// Whether observer `bit` is on.
#[inline]
pub(crate) fn get(bit: u8) -> bool {
    HOOKS.0.load(Ordering::Relaxed) & bit != 0
}

/// Turns observer `bit` on or off.
pub(crate) fn set(bit: u8, on: bool) {
    if on {
        HOOKS.0.fetch_or(bit, Ordering::SeqCst);
    } else {
        HOOKS.0.fetch_and(!bit, Ordering::SeqCst);
    }
}
