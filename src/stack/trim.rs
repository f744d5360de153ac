//! Giving idle stacks back: the pool's and the dead-G caches' stacks no goroutine took for
//! a whole period go back to the system (sysmon's trim).

use super::*;

/// Clean stacks per class whose top pages [`trim`](fn@super::trim::trim) leaves resident however long unused:
/// what a burst of this many goroutines starts on without faults.
pub(super) const TRIM_CLEAN_FLOOR: usize = 64;

/// Trims the pool (sysmon calls it once a period; see "Trimming"): in each class, the
/// dirty stacks that no allocation took during the whole period since the last call
/// release all their pages, and the clean ones (beyond [`TRIM_CLEAN_FLOOR`]) their top
/// pages too; all of them go to `bare`. Returns whether some class still holds stacks that
/// a later call could release (so sysmon keeps calling while it idles).
pub fn trim() -> bool {
    let mut work: Vec<(usize, Vec<usize>, Vec<usize>)> = Vec::new();
    let mut more = false;
    {
        let mut pool = lock_pool();
        for (&size, class) in pool.iter_mut() {
            let nd = class.dirty_low.min(class.dirty.len());
            let nc = class
                .clean_low
                .min(class.clean.len())
                .saturating_sub(TRIM_CLEAN_FLOOR);
            if nd + nc > 0 {
                let dirty: Vec<usize> = class.dirty.drain(..nd).collect();
                let clean: Vec<usize> = class.clean.drain(..nc).collect();
                class.inflight += nd + nc;
                work.push((size, dirty, clean));
            }
            class.dirty_low = class.dirty.len();
            class.clean_low = class.clean.len();
            more |= !class.dirty.is_empty() || class.clean.len() > TRIM_CLEAN_FLOOR;
        }
    }
    for (size, dirty, clean) in work {
        release_ranges(dirty.iter().map(|&lo| iov(lo, size)));
        let keep = KEEP_RESIDENT.min(size);
        release_ranges(clean.iter().map(|&lo| iov(lo + size - keep, keep)));
        let mut pool = lock_pool();
        let class = pool.entry(size).or_insert_with(Class::new);
        class.inflight -= dirty.len() + clean.len();
        class.bare.extend_from_slice(&dirty);
        class.bare.extend_from_slice(&clean);
    }
    more
}

/// Gives stacks back to the pool with all their pages released (they go to `bare`): for
/// the stacks of dead Gs that the scheduler's trim takes out of its caches.
pub fn free_released(stacks: Vec<Stack>) {
    release_ranges(stacks.iter().map(|s| iov(s.lo, s.size)));
    let mut pool = lock_pool();
    for s in stacks {
        pool.entry(s.size)
            .or_insert_with(Class::new)
            .bare
            .push(s.lo);
    }
}

/// `MADV_DONTNEED` over every range of `ranges`, [`RELEASE_BATCH`] ranges per
/// `process_madvise` call (one `madvise` each where that is refused). Every range must lie
/// in a free stack that only the caller holds.
pub(super) fn release_ranges(ranges: impl Iterator<Item = libc::iovec>) {
    let mut batch = [iov(0, 0); RELEASE_BATCH];
    let mut n = 0;
    let flush = |b: &[libc::iovec]| {
        // SAFETY: each range lies in a free stack only the caller holds, on which nothing
        // runs any more; DONTNEED on private anonymous memory only drops its contents (the
        // guard markers below the stacks are outside the ranges and survive it anyway).
        if unsafe { madvise_batch(b, libc::MADV_DONTNEED) } {
            return;
        }
        for r in b {
            // SAFETY: as above.
            unsafe { libc::madvise(r.iov_base, r.iov_len, libc::MADV_DONTNEED) };
        }
    };
    for r in ranges {
        batch[n] = r;
        n += 1;
        if n == RELEASE_BATCH {
            flush(&batch);
            n = 0;
        }
    }
    flush(&batch[..n]);
}
