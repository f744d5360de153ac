//! C API for channels and select.

use core::ffi::{c_int, c_void};
use core::mem::offset_of;

use super::{boundary, guard};
use crate::chan::select::{self, Case};
use crate::chan::{Chan, ChanError, Mode};
use crate::rt;

/// A channel (Go's chan): a FIFO of fixed-size elements, buffered or not, shared by
/// goroutines and other threads. Opaque and reference counted: gmp_chan_make returns it
/// holding one reference; gmp_chan_retain adds one, gmp_chan_release drops one.
pub struct gmp_chan {
    _opaque: [u8; 0],
}

/// Largest element size gmp_chan_make accepts, in bytes.
pub const GMP_CHAN_MAX_ELEM: usize = 65536;
const _: () = assert!(GMP_CHAN_MAX_ELEM == Chan::max_elem());

/// gmp_select_case.op: send `buf` on the channel.
pub const GMP_SEND: u32 = 1;
/// gmp_select_case.op: receive from the channel into `buf`.
pub const GMP_RECV: u32 = 2;
const _: () = assert!(GMP_SEND == Case::send_op() && GMP_RECV == Case::recv_op());

/// One case of gmp_select.
#[repr(C)]
pub struct gmp_select_case {
    /// The channel; NULL disables the case (Go's nil channel).
    pub chan: *mut gmp_chan,
    /// GMP_SEND or GMP_RECV.
    pub op: u32,
    /// GMP_SEND: the element to send; GMP_RECV: where to store the element received
    /// (may be NULL: discarded).
    pub buf: *mut c_void,
    /// Out, set on the case that fired only: 0, or -EPIPE (GMP_RECV: the channel is closed
    /// and drained, `buf` zeroed; GMP_SEND: the channel is closed, nothing was sent).
    pub status: i32,
}

const _: () = {
    assert!(size_of::<gmp_select_case>() == size_of::<Case>());
    assert!(offset_of!(gmp_select_case, chan) == offset_of!(Case, chan));
    assert!(offset_of!(gmp_select_case, op) == offset_of!(Case, op));
    assert!(offset_of!(gmp_select_case, buf) == offset_of!(Case, buf));
    assert!(offset_of!(gmp_select_case, status) == offset_of!(Case, status));
};

fn errno(e: ChanError) -> c_int {
    match e {
        ChanError::Closed => -libc::EPIPE,
        ChanError::WouldBlock => -libc::EAGAIN,
        ChanError::TimedOut => -libc::ETIMEDOUT,
        ChanError::Canceled => -libc::ECANCELED,
    }
}

fn result(r: Result<(), ChanError>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => errno(e),
    }
}

/// The channel behind a handle, or None for NULL.
///
/// # Safety
/// `c` is NULL or a channel handle the caller holds a reference to.
unsafe fn chan<'a>(c: *mut gmp_chan) -> Option<&'a Chan> {
    // SAFETY: caller contract: a non-null handle is a live Chan (made by gmp_chan_make).
    unsafe { (c as *const Chan).as_ref() }
}

/// Sends with `mode` after checking the arguments.
///
/// # Safety
/// As gmp_chan_send.
#[inline(always)]
unsafe fn send(c: *mut gmp_chan, elem: *const c_void, mode: Mode) -> c_int {
    // SAFETY: caller contract.
    let Some(ch) = (unsafe { chan(c) }) else {
        return -libc::EINVAL;
    };
    if elem.is_null() && ch.elem_size() > 0 {
        return -libc::EINVAL;
    }
    // SAFETY: elem is readable for elem_size bytes (caller contract).
    result(unsafe { ch.send(elem as *const u8, mode) })
}

/// Receives with `mode` after checking the arguments.
///
/// # Safety
/// As gmp_chan_recv.
#[inline(always)]
unsafe fn recv(c: *mut gmp_chan, out: *mut c_void, mode: Mode) -> c_int {
    // SAFETY: caller contract.
    let Some(ch) = (unsafe { chan(c) }) else {
        return -libc::EINVAL;
    };
    // SAFETY: out is NULL or writable for elem_size bytes (caller contract).
    result(unsafe { ch.recv(out as *mut u8, mode) })
}

/// Makes a channel of elements of `elem_size` bytes (0 allowed: a signal channel) with a
/// buffer of `cap` elements (0: unbuffered, every send waits for its receiver).
///
/// Returns 0 and stores in `*out` a new channel holding one reference, which the caller
/// owns and must give back with gmp_chan_release. -EINVAL if `out` is NULL, `elem_size` >
/// GMP_CHAN_MAX_ELEM, `cap` > 2^31 or `elem_size * cap` overflows; -ENOMEM if the buffer
/// cannot be allocated. `*out` is untouched on failure.
///
/// The buffer holds `cap` slots of `elem_size` + 8 bytes rounded up to a power of two. One
/// of 128 KiB or more is mapped from the system and becomes resident only as it is used:
/// making a channel of 2^30 8-byte elements (a 16 GiB buffer) takes microseconds and
/// costs memory only for the pages its values pass through. It is charged to the
/// system's commit limit and address space limit (`ulimit -v`) as any allocation, and is
/// -ENOMEM when they refuse it.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_chan_make(
    out: *mut *mut gmp_chan,
    elem_size: usize,
    cap: usize,
) -> c_int {
    boundary("gmp_chan_make", || {
        if out.is_null() {
            return -libc::EINVAL;
        }
        rt::init();
        match Chan::make(elem_size, cap) {
            Ok(c) => {
                // SAFETY: out is non-null and writable (caller contract).
                unsafe { *out = c as *mut gmp_chan };
                0
            }
            Err(e) => -e,
        }
    })
}

/// Adds a reference to `c` (for another owner, e.g. a goroutine the channel is passed
/// to). Returns 0, or -EINVAL if `c` is NULL. Aborts with a `gmp:` message if the channel
/// has no reference left (it was released).
///
/// # Safety
/// `c` is NULL or a channel the caller holds a reference to.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_chan_retain(c: *mut gmp_chan) -> c_int {
    boundary("gmp_chan_retain", || {
        // SAFETY: caller contract.
        match unsafe { chan(c) } {
            Some(ch) => {
                ch.retain();
                0
            }
            None => -libc::EINVAL,
        }
    })
}

/// Drops a reference to `c`. When the last one goes, the channel is freed: at once, or, if
/// operations are blocked on it (senders, receivers, selects), once the last of them has
/// finished — they complete as they would have (with a value from another holder, a close
/// by another holder, or their timeout; without a timeout they wait forever, as in Go).
/// Closing is not required before. Whoever holds a reference may release it once;
/// releasing more often than the channel was made and retained aborts with a `gmp:`
/// message (as long as its memory has not been reused by a newer channel), and so does an
/// operation started after the last release.
///
/// An operation that has not blocked yet runs on its caller's reference: give each
/// goroutine or thread that uses the channel a reference of its own (gmp_chan_retain), or
/// release the last one only when the others are done or blocked. Returns 0, or -EINVAL
/// if `c` is NULL.
///
/// # Safety
/// `c` is NULL or a channel the caller holds a reference to, which it gives up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_chan_release(c: *mut gmp_chan) -> c_int {
    boundary("gmp_chan_release", || {
        if c.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: caller contract: c came from gmp_chan_make and we own a reference.
        unsafe { Chan::release(c as *mut Chan) };
        0
    })
}

/// Sends the element at `elem` (`elem_size` bytes, copied) on `c`, waiting until a
/// receiver takes it or the buffer has room. Values are received in the order they were
/// sent; blocked senders are served first come, first served.
///
/// Returns 0; -EPIPE if the channel is closed, also when it is closed while the caller
/// waits (the value was not sent); -EINVAL if `c` is NULL, or `elem` is NULL and the
/// element size is not 0. May switch goroutines.
///
/// # Safety
/// `c` is NULL or a live channel; `elem` is NULL or readable for the element size.
#[unsafe(no_mangle)]
#[unsafe(naked)]
pub unsafe extern "C" fn gmp_chan_send(c: *mut gmp_chan, elem: *const c_void) -> c_int {
    // The common case (a buffered channel outside exclusive mode) in a leaf, the rest in
    // `chan_send`, chosen without a frame (see `Chan::send_quick`).
    crate::arch::gate_on_byte!(Chan::EXCL_HINT_OFFSET, chan_send_quick, chan_send)
}

/// `gmp_chan_send` on a channel that looked lock-free: the quick send, else `chan_send`
/// (a jump: this function keeps nothing after it).
///
/// # Safety
/// As gmp_chan_send; `c` is not null.
unsafe extern "C" fn chan_send_quick(c: *mut gmp_chan, elem: *const c_void) -> c_int {
    // SAFETY: caller contract: c is a live channel.
    let ch = unsafe { &*(c as *const Chan) };
    if !crate::sys::quick_off()
        && !elem.is_null()
        // SAFETY: caller contract; elem is not null.
        && guard("gmp_chan_send", || unsafe { ch.send_quick(elem as _) })
    {
        return 0;
    }
    // SAFETY: caller contract.
    unsafe { chan_send(c, elem) }
}

/// `gmp_chan_send`, the whole of it. Exported under a name C cannot declare, for the
/// names in goroutine dumps and debuggers: a goroutine parked in a send has this
/// function's frame where it had `gmp_chan_send`'s (the entry itself only jumps).
///
/// # Safety
/// As gmp_chan_send.
#[unsafe(export_name = "gmp_chan_send.slow")]
unsafe extern "C" fn chan_send(c: *mut gmp_chan, elem: *const c_void) -> c_int {
    if crate::sys::quick_off() {
        // A forked child (which aborts), or TSan's hooks on.
        // SAFETY: caller contract.
        return unsafe { chan_send_checked(c, elem) };
    }
    guard("gmp_chan_send", || {
        // SAFETY: caller contract.
        let Some(ch) = (unsafe { chan(c) }) else {
            return -libc::EINVAL;
        };
        if elem.is_null() && ch.elem_size() > 0 {
            return -libc::EINVAL;
        }
        // SAFETY: caller contract.
        result(unsafe { ch.send_after_quick(elem as _) })
    })
}

/// `gmp_chan_send` in a forked child or with TSan's hooks on: through `boundary` and
/// the whole `Chan::send`.
///
/// # Safety
/// As gmp_chan_send.
#[cold]
#[inline(never)]
unsafe fn chan_send_checked(c: *mut gmp_chan, elem: *const c_void) -> c_int {
    // SAFETY: caller contract.
    boundary("gmp_chan_send", || unsafe { send(c, elem, Mode::Block) })
}

/// Receives an element from `c` into `out` (`elem_size` bytes; `out` may be NULL to
/// discard it), waiting until one is available.
///
/// Returns 0; -EPIPE once the channel is closed and its buffer drained (`out` is zeroed),
/// also when it is closed while the caller waits; -EINVAL if `c` is NULL. May switch
/// goroutines.
///
/// # Safety
/// `c` is NULL or a live channel; `out` is NULL or writable for the element size.
#[unsafe(no_mangle)]
#[unsafe(naked)]
pub unsafe extern "C" fn gmp_chan_recv(c: *mut gmp_chan, out: *mut c_void) -> c_int {
    // As gmp_chan_send.
    crate::arch::gate_on_byte!(Chan::EXCL_HINT_OFFSET, chan_recv_quick, chan_recv)
}

/// `gmp_chan_recv` on a channel that looked lock-free (as `chan_send_quick`).
///
/// # Safety
/// As gmp_chan_recv; `c` is not null.
unsafe extern "C" fn chan_recv_quick(c: *mut gmp_chan, out: *mut c_void) -> c_int {
    // SAFETY: caller contract: c is a live channel.
    let ch = unsafe { &*(c as *const Chan) };
    if !crate::sys::quick_off()
        // SAFETY: caller contract.
        && guard("gmp_chan_recv", || unsafe { ch.recv_quick(out as _) })
    {
        return 0;
    }
    // SAFETY: caller contract.
    unsafe { chan_recv(c, out) }
}

/// `gmp_chan_recv`, the whole of it (exported as `chan_send` is).
///
/// # Safety
/// As gmp_chan_recv.
#[unsafe(export_name = "gmp_chan_recv.slow")]
unsafe extern "C" fn chan_recv(c: *mut gmp_chan, out: *mut c_void) -> c_int {
    if crate::sys::quick_off() {
        // As in chan_send.
        // SAFETY: caller contract.
        return unsafe { chan_recv_checked(c, out) };
    }
    guard("gmp_chan_recv", || {
        // SAFETY: caller contract.
        let Some(ch) = (unsafe { chan(c) }) else {
            return -libc::EINVAL;
        };
        // SAFETY: caller contract.
        result(unsafe { ch.recv_after_quick(out as _) })
    })
}

/// `gmp_chan_recv` in a forked child or with TSan's hooks on (as `chan_send_checked`).
///
/// # Safety
/// As gmp_chan_recv.
#[cold]
#[inline(never)]
unsafe fn chan_recv_checked(c: *mut gmp_chan, out: *mut c_void) -> c_int {
    // SAFETY: caller contract.
    boundary("gmp_chan_recv", || unsafe { recv(c, out, Mode::Block) })
}

/// gmp_chan_send without waiting: -EAGAIN if no receiver waits and the buffer is full.
///
/// # Safety
/// As gmp_chan_send.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_chan_try_send(c: *mut gmp_chan, elem: *const c_void) -> c_int {
    // SAFETY: caller contract.
    boundary("gmp_chan_try_send", || unsafe { send(c, elem, Mode::Try) })
}

/// gmp_chan_recv without waiting: -EAGAIN if no sender waits and the buffer is empty
/// (and the channel is not closed).
///
/// # Safety
/// As gmp_chan_recv.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_chan_try_recv(c: *mut gmp_chan, out: *mut c_void) -> c_int {
    // SAFETY: caller contract.
    boundary("gmp_chan_try_recv", || unsafe { recv(c, out, Mode::Try) })
}

/// gmp_chan_send waiting at most `timeout_ns` nanoseconds: -ETIMEDOUT when it passes
/// (the value was not sent). `timeout_ns` 0 does not wait (-ETIMEDOUT if it would);
/// negative waits without limit.
///
/// # Safety
/// As gmp_chan_send.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_chan_send_timeout(
    c: *mut gmp_chan,
    elem: *const c_void,
    timeout_ns: i64,
) -> c_int {
    boundary("gmp_chan_send_timeout", || {
        // SAFETY: caller contract.
        unsafe { send(c, elem, Mode::from_timeout(timeout_ns)) }
    })
}

/// gmp_chan_recv waiting at most `timeout_ns` nanoseconds: -ETIMEDOUT when it passes
/// (`out` untouched). `timeout_ns` 0 does not wait (-ETIMEDOUT if it would); negative
/// waits without limit.
///
/// # Safety
/// As gmp_chan_recv.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_chan_recv_timeout(
    c: *mut gmp_chan,
    out: *mut c_void,
    timeout_ns: i64,
) -> c_int {
    boundary("gmp_chan_recv_timeout", || {
        // SAFETY: caller contract.
        unsafe { recv(c, out, Mode::from_timeout(timeout_ns)) }
    })
}

/// Closes `c`: no value can be sent any more; receivers drain the buffer, then get
/// -EPIPE. Every blocked receiver and sender is woken (with -EPIPE). Returns 0; -EPIPE if
/// it was already closed (Go panics); -EINVAL if `c` is NULL.
///
/// # Safety
/// `c` is NULL or a live channel.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_chan_close(c: *mut gmp_chan) -> c_int {
    boundary("gmp_chan_close", || {
        // SAFETY: caller contract.
        match unsafe { chan(c) } {
            Some(ch) => result(ch.close()),
            None => -libc::EINVAL,
        }
    })
}

/// The number of elements in the buffer (a snapshot); -EINVAL if `c` is NULL.
///
/// # Safety
/// `c` is NULL or a live channel.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_chan_len(c: *mut gmp_chan) -> i64 {
    boundary("gmp_chan_len", || {
        // SAFETY: caller contract.
        match unsafe { chan(c) } {
            Some(ch) => ch.len() as i64,
            None => -(libc::EINVAL as i64),
        }
    })
}

/// The buffer's capacity (0: unbuffered); -EINVAL if `c` is NULL.
///
/// # Safety
/// `c` is NULL or a live channel.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_chan_cap(c: *mut gmp_chan) -> i64 {
    boundary("gmp_chan_cap", || {
        // SAFETY: caller contract.
        match unsafe { chan(c) } {
            Some(ch) => ch.cap() as i64,
            None => -(libc::EINVAL as i64),
        }
    })
}

/// Waits until one of the `n` cases can proceed, performs it, sets its `status` and
/// returns its index (Go's select). When several are ready, each is chosen with equal
/// probability. A case whose `chan` is NULL never fires; a channel may appear in several
/// cases.
///
/// `timeout_ns` < 0: no timeout; 0: do not wait (Go's select with a default case):
/// -ETIMEDOUT at once if no case is ready; > 0: -ETIMEDOUT after that many nanoseconds.
/// On -ETIMEDOUT no case was performed and no status written.
///
/// -EINVAL: `cases` NULL with `n` > 0; `n` > 65536; an `op` other than GMP_SEND or
/// GMP_RECV; a GMP_SEND case with a channel, a NULL `buf` and a nonzero element size;
/// `n` == 0 or every `chan` NULL with `timeout_ns` < 0 (it would wait forever).
/// May switch goroutines.
///
/// # Safety
/// `cases` is NULL or points to `n` cases, which the caller does not touch during the
/// call; each non-NULL `chan` is live; each `buf` is valid for its channel's element size
/// (GMP_RECV: writable or NULL; GMP_SEND: readable).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_select(
    cases: *mut gmp_select_case,
    n: usize,
    timeout_ns: i64,
) -> c_int {
    boundary("gmp_select", || {
        if n > Case::max_cases() || (cases.is_null() && n > 0) {
            return -libc::EINVAL;
        }
        let cases: &mut [Case] = if n == 0 {
            &mut []
        } else {
            // SAFETY: cases points to n gmp_select_case (caller contract), whose layout is
            // Case's (checked above).
            unsafe { core::slice::from_raw_parts_mut(cases as *mut Case, n) }
        };
        let mut enabled = false;
        for cas in cases.iter() {
            if cas.op != GMP_SEND && cas.op != GMP_RECV {
                return -libc::EINVAL;
            }
            if cas.chan.is_null() {
                continue;
            }
            enabled = true;
            // SAFETY: a non-null chan is live (caller contract).
            if cas.op == GMP_SEND && cas.buf.is_null() && unsafe { (*cas.chan).elem_size() } > 0 {
                return -libc::EINVAL;
            }
        }
        if !enabled && timeout_ns < 0 {
            return -libc::EINVAL;
        }
        let mode = if timeout_ns == 0 {
            Mode::Try
        } else {
            Mode::from_timeout(timeout_ns)
        };
        // SAFETY: checked above and caller contract.
        match unsafe { select::select(cases, mode) } {
            Ok(i) => i as c_int,
            // A zero timeout has passed at once, as for every timeout of the library.
            Err(ChanError::WouldBlock) => -libc::ETIMEDOUT,
            Err(e) => errno(e),
        }
    })
}

// The slow halves are exported only to be named (above): bound here, not through the PLT
// (a protected symbol cannot be interposed, so the linker resolves our own jumps to it).
core::arch::global_asm!(
    ".protected \"gmp_chan_send.slow\"",
    ".protected \"gmp_chan_recv.slow\"",
);
