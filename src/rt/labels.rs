//! Goroutine labels (Go's `pprof.SetGoroutineLabels`, `runtime.setProfLabel`): a set of
//! key/value strings per goroutine, inherited by the goroutines it starts, shown in the
//! goroutine dump.
//!
//! A set is immutable once published: one allocation holding a reference count, the
//! pairs as `key\0value\0…`, sorted by key, and the same pairs in the custom-labels ABI's
//! form for profilers outside the process (customlabels.rs), pointing into the text. Changing a label makes a new set
//! (copy-on-write), so a child shares its parent's set by taking a reference, and a
//! reader that holds a reference never sees it change. A goroutine's set lives in its
//! `GExt` (allocated on first use, never freed), a thread outside the runtime's in a
//! thread-local, for the goroutines it starts.
//!
//! Who touches what: only the goroutine itself (on its M) replaces its set; `newproc`
//! takes a reference to the parent's for the child before the child is published;
//! `goexit0` drops the set of a goroutine that ended. The dump reads other goroutines'
//! sets racily and without references, through `process_vm_readv` (a set freed under it
//! prints garbage at worst, never faults), as it reads their frames.

use core::ptr::null_mut;
use core::sync::atomic::{AtomicUsize, Ordering};
use std::alloc::{Layout, alloc, dealloc};

use super::customlabels::{self, AbiLabel, AbiSet, AbiString};
use super::*;

/// A label set's header; the text follows it in the same allocation, then (8-aligned)
/// the custom-labels ABI's label array, one entry per pair, pointing into the text.
#[repr(C)]
pub(crate) struct LabelSet {
    refs: AtomicUsize,
    /// Bytes of text after the header.
    len: usize,
    /// The set as `custom_labels_labelset_t`: the label array and its length (pairs).
    abi: AbiSet,
}

const HDR: usize = core::mem::size_of::<LabelSet>();

/// Where the ABI's label array starts, after `len` bytes of text.
fn array_offset(len: usize) -> usize {
    (HDR + len).next_multiple_of(core::mem::align_of::<AbiLabel>())
}

fn layout(len: usize, pairs: usize) -> Layout {
    let size = pairs
        .checked_mul(core::mem::size_of::<AbiLabel>())
        .and_then(|a| a.checked_add(array_offset(len)));
    size.and_then(|size| Layout::from_size_align(size, core::mem::align_of::<LabelSet>()).ok())
        .unwrap_or_else(|| throw("labels: set too large"))
}

impl LabelSet {
    /// A new set holding `text` (pairs, each `key\0value\0`), with one reference.
    fn new(text: &[u8]) -> *mut LabelSet {
        let pairs = pairs_of(text).count();
        // SAFETY: the layout is non-zero sized; the header, the text and the label array
        // are written before the pointer is returned, the array's strings pointing into
        // the text just copied (the set is never changed after).
        unsafe {
            let p = alloc(layout(text.len(), pairs)).cast::<LabelSet>();
            if p.is_null() {
                throw("labels: out of memory");
            }
            let own = p.cast::<u8>().add(HDR);
            core::ptr::copy_nonoverlapping(text.as_ptr(), own, text.len());
            let array = p
                .cast::<u8>()
                .add(array_offset(text.len()))
                .cast::<AbiLabel>();
            let own_text = core::slice::from_raw_parts(own, text.len());
            for (i, (k, v)) in pairs_of(own_text).enumerate() {
                array.add(i).write(AbiLabel {
                    key: AbiString {
                        len: k.len(),
                        buf: k.as_ptr(),
                    },
                    value: AbiString {
                        len: v.len(),
                        buf: v.as_ptr(),
                    },
                });
            }
            p.write(LabelSet {
                refs: AtomicUsize::new(1),
                len: text.len(),
                abi: AbiSet {
                    storage: array,
                    count: pairs,
                    capacity: pairs,
                },
            });
            p
        }
    }

    fn text(&self) -> &[u8] {
        // SAFETY: `len` bytes of text follow the header (`new`).
        unsafe {
            core::slice::from_raw_parts((self as *const LabelSet).cast::<u8>().add(HDR), self.len)
        }
    }

    /// The pairs, in key order.
    fn pairs(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        pairs_of(self.text())
    }
}

/// Takes a reference to `s` (not null).
fn retain(s: *mut LabelSet) {
    // SAFETY: the caller holds a reference, so the set is alive.
    unsafe { (*s).refs.fetch_add(1, Ordering::Relaxed) };
}

/// Drops a reference to `s` (null: nothing), freeing the set with the last.
fn release(s: *mut LabelSet) {
    if s.is_null() {
        return;
    }
    // SAFETY: the caller held a reference; with the last one gone nobody else reaches the
    // set (AcqRel: every earlier user's reads happen before the free).
    unsafe {
        if (*s).refs.fetch_sub(1, Ordering::AcqRel) == 1 {
            let (len, pairs) = ((*s).len, (*s).abi.count);
            dealloc(s.cast(), layout(len, pairs));
        }
    }
}

/// The labels of a thread outside the runtime, given back when the thread ends.
struct Foreign(core::cell::Cell<*mut LabelSet>);

impl Drop for Foreign {
    fn drop(&mut self) {
        customlabels::store_slow(core::ptr::null());
        release(self.0.replace(null_mut()));
    }
}

thread_local! {
    /// The labels of a thread outside the runtime (given to the goroutines it starts).
    static FOREIGN: Foreign = const { Foreign(core::cell::Cell::new(null_mut())) };
}

/// The calling goroutine's (or thread's) set, null for none. Borrowed: valid until the
/// caller changes it.
fn current() -> *mut LabelSet {
    let g = getg();
    if g.is_null() {
        return FOREIGN.with(|f| f.0.get());
    }
    // SAFETY: our own G; we run on its M, the owner of `ext`.
    unsafe { (*g).ext_if_any().map_or(null_mut(), |e| e.labels.get()) }
}

/// Replaces the calling goroutine's (or thread's) set with `s` (a reference the caller
/// gives), dropping the old one. The thread's custom-labels pointer shows the new set
/// before the old one can be freed.
fn replace(s: *mut LabelSet) {
    customlabels::store_slow(abi(s));
    let g = getg();
    let old = if g.is_null() {
        FOREIGN.with(|f| f.0.replace(s))
    } else {
        // SAFETY: as in `current`.
        unsafe {
            let e = (*g).ext();
            let old = e.labels.get();
            e.labels.set(s);
            e.trace_seq.set(LABELS_CHANGED);
            old
        }
    };
    release(old);
}

/// Sets label `key` to `value` on the calling goroutine (or thread), or removes it when
/// `value` is None. The goroutines it starts from now on inherit the new set.
pub(crate) fn set(key: &[u8], value: Option<&[u8]>) {
    let cur = current();
    let mut text = Vec::new();
    let mut placed = false;
    let push = |text: &mut Vec<u8>, k: &[u8], v: &[u8]| {
        text.extend_from_slice(k);
        text.push(0);
        text.extend_from_slice(v);
        text.push(0);
    };
    if !cur.is_null() {
        // SAFETY: our own set, alive while we hold it.
        for (k, v) in unsafe { (*cur).pairs() } {
            if !placed && k >= key {
                placed = true;
                if let Some(nv) = value {
                    push(&mut text, key, nv);
                }
                if k == key {
                    continue;
                }
            }
            push(&mut text, k, v);
        }
    }
    if !placed && let Some(nv) = value {
        push(&mut text, key, nv);
    }
    replace(if text.is_empty() {
        null_mut()
    } else {
        LabelSet::new(&text)
    });
}

/// Calls `f` with the value of label `key` of the calling goroutine (or thread), if set.
pub(crate) fn get<R>(key: &[u8], f: impl FnOnce(Option<&[u8]>) -> R) -> R {
    let cur = current();
    if cur.is_null() {
        return f(None);
    }
    // SAFETY: our own set, alive while we hold it.
    f(unsafe { (*cur).pairs() }
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v))
}

/// Gives new goroutine `g` the set of the goroutine (or thread) starting it.
///
/// # Safety
/// `g` is not published yet (ours alone, `newproc`); it has no set.
#[inline]
pub(super) unsafe fn inherit(parent: *mut G, g: &G) {
    let s = if parent.is_null() {
        FOREIGN.with(|f| f.0.get())
    } else {
        // SAFETY: the parent is the calling goroutine, on its M.
        match unsafe { (*parent).ext_if_any() } {
            None => return,
            // SAFETY: as above.
            Some(e) => unsafe { e.labels.get() },
        }
    };
    if !s.is_null() {
        retain(s);
        // SAFETY: caller contract: g is ours.
        unsafe { g.ext().labels.set(s) };
    }
}

/// Drops the set of goroutine `g`, which ended.
///
/// # Safety
/// On `g`'s M (goexit0).
#[inline]
pub(super) unsafe fn drop_of(g: &G) {
    // SAFETY: caller contract.
    if let Some(e) = unsafe { g.ext_if_any() } {
        // SAFETY: as above.
        let s = unsafe { e.labels.get() };
        if !s.is_null() {
            // SAFETY: as above.
            unsafe { e.labels.set(null_mut()) };
            release(s);
        }
    }
}

/// The custom-labels form of set `s` (null for null).
fn abi(s: *mut LabelSet) -> *const AbiSet {
    if s.is_null() {
        return core::ptr::null();
    }
    // SAFETY: only the field's address is taken; `s` is a live set.
    unsafe { &raw const (*s).abi }
}

/// The custom-labels form of `g`'s set (null: none), which `execute` makes the thread's
/// current one. Valid while `g` keeps its set: until it changes its labels or leaves
/// the thread (`after_switch` clears the pointer).
///
/// # Safety
/// On `g`'s M, which is about to run it (`execute`).
#[inline(always)]
pub(super) unsafe fn abi_of(g: &G) -> *const AbiSet {
    // SAFETY: caller contract: the M running g owns its `ext` and `labels`.
    unsafe { abi(g.ext_if_any().map_or(null_mut(), |e| e.labels.get())) }
}

/// Where the dump finds a set's text length and text (`dump::labels_racy`).
pub(crate) const LEN_OFFSET: usize = core::mem::offset_of!(LabelSet, len);
pub(crate) const TEXT_OFFSET: usize = HDR;

/// The address of `e`'s set pointer, for the dump's racy read.
pub(crate) fn slot_addr(e: &GExt) -> usize {
    // SAFETY: only the address is taken.
    unsafe { e.labels.ptr() as usize }
}

/// The pairs of a set's text (`key\0value\0…`) the dump copied.
pub(crate) fn pairs_of(text: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    let mut parts = text.split(|&b| b == 0);
    core::iter::from_fn(move || {
        let k = parts.next().filter(|k| !k.is_empty())?;
        Some((k, parts.next().unwrap_or(&[])))
    })
}

/// `GExt::trace_seq` after the goroutine's set changed: the execution trace writes it at
/// the goroutine's next start (traceevent.rs).
pub(crate) const LABELS_CHANGED: u64 = u64::MAX;

/// The text of set `s` (`key\0value\0…`), cut after the last whole pair within `max`
/// bytes, for the execution trace.
///
/// # Safety
/// `s` is not null, and alive while the result is used (its goroutine holds it).
pub(crate) unsafe fn text_cut<'a>(s: *mut LabelSet, max: usize) -> &'a [u8] {
    // SAFETY: caller contract.
    let text = unsafe { (*s).text() };
    if text.len() <= max {
        return text;
    }
    // The end of the last pair within `max`: every second NUL ends one.
    let mut end = 0;
    let mut nuls = 0;
    for (i, &b) in text[..max].iter().enumerate() {
        if b == 0 {
            nuls += 1;
            if nuls % 2 == 0 {
                end = i + 1;
            }
        }
    }
    &text[..end]
}

/// A reference to `g`'s set (null: none), for a CPU profile sample, which the profile's
/// writer gives back with [`release_set`]. Async-signal-safe: an increment.
///
/// # Safety
/// On `g`'s M, which runs it (the SIGPROF handler interrupted it): only g replaces its
/// set, and not while the handler runs.
pub(crate) unsafe fn retained_of(g: &G) -> *mut LabelSet {
    // SAFETY: caller contract.
    let s = unsafe { g.ext_if_any().map_or(null_mut(), |e| e.labels.get()) };
    if !s.is_null() {
        retain(s);
    }
    s
}

/// Gives back a reference [`retained_of`] took.
pub(crate) fn release_set(s: *mut LabelSet) {
    release(s);
}

/// Calls `f` with each pair of `s`, in key order (the CPU profile's sample labels).
///
/// # Safety
/// The caller holds a reference to `s` (not null).
pub(crate) unsafe fn for_each_pair(s: *mut LabelSet, mut f: impl FnMut(&[u8], &[u8])) {
    // SAFETY: caller contract.
    for (k, v) in unsafe { (*s).pairs() } {
        f(k, v);
    }
}
