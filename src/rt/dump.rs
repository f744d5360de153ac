//! The goroutine dump (Go's traceback of all goroutines): `gmp_dump(fd)`, the SIGQUIT
//! handler, and the report of the deadlock detector (checkdead.rs).
//!
//! Every goroutine on `SCHED.allg` that is not dead gets Go's header line,
//! `goroutine 7 [chan receive, 3 minutes]:` (status or wait reason; how long it has
//! waited — Go prints only whole minutes, we print seconds below a minute; `locked to
//! thread`, `pinned to thread`), then its frames, innermost first, then who started it,
//! and, for a runnable goroutine only one thread may run, that thread and what it runs:
//!
//! ```text
//! goroutine 7 [chan receive, 12 seconds]:
//! #0  0x00007f3a1c2b4e1d in ?? (libgmp.so.0+0x4ae1d)
//! #1  0x000055d0c1a2b3c4 in worker+0x24 (/tmp/prog)
//! created by goroutine 1, entry worker (/tmp/prog)
//!
//! goroutine 9 [runnable, pinned to thread]:
//! #0  0x00007f3a1c2b5f02 in ?? (libgmp.so.0+0x4bf02)
//! #1  0x000055d0c1a2b4d0 in reader+0x30 (/tmp/prog)
//! created by goroutine 1, entry reader (/tmp/prog)
//! waits for thread 4242, which runs goroutine 1
//! ```
//!
//! **Backtraces** walk frame pointers from the context the goroutine saved when it
//! switched away (`arch::switch` leaves the frame pointer and the return address at
//! `arch::SAVED_FP_OFFSET` above its saved sp: sp+48 on x86-64, sp+144 on aarch64):
//! a parked or runnable goroutine has one; a running one has none (Go: "stack
//! unavailable"), except the goroutine calling `gmp_dump`, which walks its own frames.
//! Code compiled without frame pointers (gcc and clang at -O1 and above unless
//! `-fno-omit-frame-pointer`) breaks the chain: the walk stops at the first frame pointer
//! outside the goroutine's stack or not above the previous one, and says so. Every word is
//! read with `process_vm_readv` on our own process, which returns EFAULT instead of
//! faulting, so a stack that changes under the dump (a goroutine resumed meanwhile) yields
//! wrong frames at worst, never a crash. Names come from `dladdr1` (the dynamic symbol
//! table: link executables with `-rdynamic` to see their own functions), shown only when
//! the address falls inside the symbol's size; otherwise `?? (object+offset)` (for libgmp's
//! own frames, which export no symbols; `addr2line -e libgmp.so.0 OFFSET` or gdb names them).
//!
//! **Async-signal safety.** The dump allocates nothing, takes no lock, and writes with raw
//! write(2) from a buffer on its stack, so that the SIGQUIT handler may run it on any
//! thread, also one interrupted inside the runtime. `dladdr1` is not on POSIX's list (glibc
//! takes the loader's lock, which a thread stopped inside `dlopen` would hold): accepted
//! for a dump taken just before the process exits, as Go's crash-time traceback accepts
//! its own compromises.
//!
//! **Wait times** come from `G::waitsince`, stored by `gopark` from the coarse clock
//! sysmon keeps (coarsetime.rs).

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicBool, Ordering};

use super::*;

/// A fixed buffer flushed with raw write(2): no allocation, no lock.
pub(crate) struct Out {
    fd: c_int,
    buf: [u8; 2048],
    len: usize,
    /// write(2) failed (other than EINTR): the rest is dropped.
    failed: bool,
}

impl Out {
    pub(crate) fn new(fd: c_int) -> Out {
        Out {
            fd,
            buf: [0; 2048],
            len: 0,
            failed: false,
        }
    }

    /// An `Out` that only collects (up to its buffer's size), for `captured_bytes`.
    #[cfg(test)]
    pub(crate) fn capture() -> Out {
        Out::new(-1)
    }

    /// What `capture` collected, as bytes (no allocation).
    #[cfg(test)]
    pub(crate) fn captured_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    pub(crate) fn bytes(&mut self, mut b: &[u8]) {
        while !b.is_empty() {
            if self.len == self.buf.len() {
                if self.fd < 0 {
                    return;
                }
                self.flush();
            }
            let k = b.len().min(self.buf.len() - self.len);
            self.buf[self.len..self.len + k].copy_from_slice(&b[..k]);
            self.len += k;
            b = &b[k..];
        }
    }

    pub(crate) fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    pub(crate) fn dec(&mut self, v: u64) {
        self.bytes(&crate::sys::fmt_u64(v));
    }

    /// `0x` and `v` in hex, zero-padded to `width` digits.
    pub(crate) fn hex(&mut self, v: u64, width: usize) {
        let mut digits = [0u8; 16];
        let mut n = 0;
        let mut x = v;
        loop {
            digits[15 - n] = b"0123456789abcdef"[(x & 15) as usize];
            n += 1;
            x >>= 4;
            if x == 0 {
                break;
            }
        }
        let width = width.min(16);
        while n < width {
            digits[15 - n] = b'0';
            n += 1;
        }
        self.bytes(b"0x");
        self.bytes(&digits[16 - n..]);
    }

    /// A NUL-terminated C string (at most 512 bytes of it).
    fn cstr(&mut self, p: *const c_char) {
        if p.is_null() {
            return;
        }
        let mut n = 0;
        // SAFETY: dladdr returns NUL-terminated strings that live as long as the object.
        while n < 512 && unsafe { *p.add(n) } != 0 {
            n += 1;
        }
        // SAFETY: the n bytes before the NUL (or the cap) are readable.
        self.bytes(unsafe { core::slice::from_raw_parts(p.cast::<u8>(), n) });
    }

    pub(crate) fn flush(&mut self) {
        let mut b = &self.buf[..self.len];
        while !b.is_empty() && !self.failed {
            // Raw syscall: an interposed `write` (LD_PRELOAD mode) must not see the dump.
            // SAFETY: b is a valid slice; write(2) reads at most b.len() bytes.
            let n = unsafe { libc::syscall(libc::SYS_write, self.fd, b.as_ptr(), b.len()) };
            if n < 0 {
                if crate::sys::errno() != libc::EINTR {
                    self.failed = true;
                }
                continue;
            }
            if n == 0 {
                self.failed = true;
                break;
            }
            b = &b[n as usize..];
        }
        self.len = 0;
    }
}

/// Fills `buf` from `addr` without faulting (`sys::read_unfaulting`): false if any of it
/// is not mapped.
fn read_bytes(addr: usize, buf: &mut [u8]) -> bool {
    crate::sys::read_unfaulting(addr, buf)
}

/// Reads the u32 at `addr` without faulting.
pub(crate) fn read_u32(addr: usize) -> Option<u32> {
    let mut v = [0u8; 4];
    read_bytes(addr, &mut v).then(|| u32::from_ne_bytes(v))
}

/// Reads `N` words at `addr` without faulting: None if any of it is not mapped.
fn read_words<const N: usize>(addr: usize) -> Option<[usize; N]> {
    let mut w = [0usize; N];
    // SAFETY: the words' bytes, a plain-data view of the array for the copy.
    let bytes = unsafe { core::slice::from_raw_parts_mut(w.as_mut_ptr().cast::<u8>(), N * 8) };
    read_bytes(addr, bytes).then_some(w)
}

/// Writes `name+0xoff (object)` for `pc`, or `?? (object+0xoff)` when no symbol covers it.
fn symbolize(out: &mut Out, pc: usize) {
    symbolize_as(out, pc, true);
}

/// Writes the name of the function at `pc` (`name`, or `name+0xoff` inside it), or
/// `?? (object+0xoff)`.
pub(crate) fn symbol_only(out: &mut Out, pc: usize) {
    symbolize_as(out, pc, false);
}

/// What the loader knows of `pc`: the path of the object holding it, its load base, and
/// the symbol covering it (name, start), if one does.
pub(crate) struct Symbol {
    pub(crate) object: *const c_char,
    pub(crate) base: usize,
    pub(crate) name: Option<(*const c_char, usize)>,
}

/// Looks `pc` up in the dynamic symbol tables. The symbol dladdr finds is only the nearest
/// exported one below pc: it is trusted when pc lies inside its size (else it names the
/// wrong function, e.g. an exported gmp_* before an internal Rust function).
pub(crate) fn lookup(pc: usize) -> Option<Symbol> {
    let (info, size) = crate::sys::dl::dl_info(pc)?;
    let start = info.dli_saddr as usize;
    let name = size
        .filter(|&size| pc >= start && (pc - start < size || size == 0 && pc - start < 4096))
        .map(|_| (info.dli_sname, start));
    Some(Symbol {
        object: info.dli_fname,
        base: info.dli_fbase as usize,
        name,
    })
}

fn symbolize_as(out: &mut Out, pc: usize, with_object: bool) {
    let Some(sym) = lookup(pc) else {
        out.str("?");
        return;
    };
    match sym.name {
        Some((name, start)) => {
            out.cstr(name);
            if with_object || pc != start {
                out.str("+");
                out.hex((pc - start) as u64, 0);
            }
            if with_object {
                out.str(" (");
                out.cstr(sym.object);
                out.str(")");
            }
        }
        None => {
            out.str("?? (");
            out.cstr(basename(sym.object));
            out.str("+");
            out.hex((pc - sym.base) as u64, 0);
            out.str(")");
        }
    }
}

/// The file name part of path `p` (a NUL-terminated string from the loader).
pub(crate) fn basename(p: *const c_char) -> *const c_char {
    let mut last = p;
    let mut i = 0;
    // SAFETY: p is a NUL-terminated string from dladdr.
    while i < 4096 && unsafe { *p.add(i) } != 0 {
        // SAFETY: as above.
        if unsafe { *p.add(i) } == b'/' as c_char {
            // SAFETY: i + 1 is at most the NUL.
            last = unsafe { p.add(i + 1) };
        }
        i += 1;
    }
    last
}

/// Most frames printed per goroutine.
const MAX_FRAMES: usize = 64;

fn frame(out: &mut Out, n: usize, pc: usize, ret: bool) {
    out.str("#");
    out.dec(n as u64);
    out.str(if n < 10 { "  " } else { " " });
    out.hex(pc as u64, 16);
    out.str(" in ");
    // A return address points after the call: look up the call itself.
    symbolize(out, if ret { pc.saturating_sub(1) } else { pc });
    out.str("\n");
}

/// Walks the frame-pointer chain from `fp` (frame `first` has already been printed),
/// staying inside `[lo, hi)`.
fn walk(out: &mut Out, lo: usize, hi: usize, mut fp: usize, first: usize) {
    let mut n = first;
    while n < MAX_FRAMES {
        if fp == 0 {
            return; // the goroutine trampoline's rbp = 0: the chain is complete
        }
        // The chain is read racily (another thread may be running or switching the
        // goroutine): any word may be garbage, so no arithmetic on it may overflow.
        if fp < lo || fp > hi.saturating_sub(16) || fp & 7 != 0 {
            break;
        }
        let Some([next, ret]) = read_words::<2>(fp) else {
            break;
        };
        if ret == 0 {
            return;
        }
        frame(out, n, ret, true);
        n += 1;
        if next != 0 && next <= fp {
            break;
        }
        fp = next;
    }
    if n >= MAX_FRAMES {
        out.str("...additional frames elided...\n");
    } else {
        out.str("(frame-pointer chain ends: frames compiled without frame pointers are missing)\n");
    }
}

pub(crate) fn status_str(g: &G, status: u32) -> &'static str {
    match status {
        G_IDLE => "idle",
        G_RUNNABLE => "runnable",
        G_RUNNING => "running",
        G_SYSCALL => "syscall",
        G_WAITING => {
            let r = g.waitreason();
            if r == WaitReason::None {
                "waiting"
            } else {
                r.as_str()
            }
        }
        _ => "dead",
    }
}

/// Writes `, N minutes` (Go) or `, N seconds` for a wait that started at `since`.
pub(crate) fn waited(out: &mut Out, since: i64, now: i64) {
    if since == 0 || now <= since {
        return;
    }
    let secs = ((now - since) / 1_000_000_000) as u64;
    if secs >= 60 {
        out.str(", ");
        out.dec(secs / 60);
        out.str(" minutes");
    } else if secs >= 1 {
        out.str(", ");
        out.dec(secs);
        out.str(" seconds");
    }
}

/// `, labels:{"key": "value", …}` for a goroutine with labels (as Go's tracebacks show
/// them), bytes outside printable ASCII, quotes and backslashes escaped; nothing without.
/// Racy (labels.rs): read without faulting.
fn dump_labels(out: &mut Out, g: &G) {
    let mut buf = [0u8; 512];
    let n = labels_racy(g, &mut buf);
    if n == 0 {
        return;
    }
    out.str(", labels:{");
    for (i, (k, v)) in labels::pairs_of(&buf[..n]).enumerate() {
        if i > 0 {
            out.str(", ");
        }
        quoted(out, k);
        out.str(": ");
        quoted(out, v);
    }
    out.str("}");
}

fn quoted(out: &mut Out, s: &[u8]) {
    out.str("\"");
    for &b in s {
        match b {
            b'"' | b'\\' => out.bytes(&[b'\\', b]),
            0x20..=0x7e => out.bytes(&[b]),
            _ => {
                out.str("\\x");
                out.bytes(&[
                    b"0123456789abcdef"[(b >> 4) as usize],
                    b"0123456789abcdef"[(b & 15) as usize],
                ]);
            }
        }
    }
    out.str("\"");
}

/// Copies the text of `g`'s label set into `buf` without faulting; returns its length (0:
/// none, or not readable). At most `buf.len()` bytes: a longer set is cut.
fn labels_racy(g: &G, buf: &mut [u8]) -> usize {
    // SAFETY: a GExt is never freed; only its set pointer is read, without faulting.
    let Some(e) = (unsafe { g.ext_if_any() }) else {
        return 0;
    };
    let Some([p]) = read_words::<1>(labels::slot_addr(e)) else {
        return 0;
    };
    if p == 0 {
        return 0;
    }
    let Some([len]) = read_words::<1>(p + labels::LEN_OFFSET) else {
        return 0;
    };
    let n = len.min(buf.len());
    if read_bytes(p + labels::TEXT_OFFSET, &mut buf[..n]) {
        n
    } else {
        0
    }
}

/// One goroutine's record. `self_fp`: the caller's frame pointer when `g` is the calling
/// goroutine (its registers are live, not saved).
pub(crate) fn dump_g(out: &mut Out, g: &G, now: i64, self_fp: Option<usize>) {
    let status = g.status.load(Ordering::Acquire);
    out.str("goroutine ");
    out.dec(g.goid());
    out.str(" [");
    out.str(status_str(g, status));
    if status == G_WAITING {
        waited(out, g.waitsince.load(Ordering::Relaxed), now);
    }
    if !g.lockedm.load(Ordering::Relaxed).is_null() {
        out.str(", locked to thread");
    } else if !g.affm.load(Ordering::Relaxed).is_null() {
        out.str(", pinned to thread");
    }
    dump_labels(out, g);
    out.str("]:\n");
    // The stack bounds and saved sp are the G's owner's; read racily, and used only to
    // bound reads that cannot fault (read_words).
    // SAFETY: Gs are never freed; a torn or stale Option<Stack> only mis-bounds the walk.
    let bounds = unsafe { (*g.stack.ptr()).as_ref().map(|s| (s.lo(), s.top())) };
    // The caller's own frames only when they are on the goroutine's stack (a SIGQUIT
    // handler runs on the thread's alternate signal stack: then it is "running").
    let self_fp = self_fp.filter(|&fp| bounds.is_some_and(|(lo, hi)| fp >= lo && fp < hi));
    // SAFETY: as above: a racy read of the saved sp, validated below.
    let sp = unsafe { g.sp.get() };
    match (self_fp, bounds) {
        (Some(fp), Some((lo, hi))) => walk(out, lo, hi, fp, 0),
        _ if status == G_RUNNABLE && unstarted(sp) => out.str("(not started yet)\n"),
        (None, Some((lo, hi))) if status == G_WAITING || status == G_RUNNABLE => {
            if sp < lo || sp > hi.saturating_sub(crate::arch::SAVED_FP_OFFSET + 16) {
                out.str("(saved context not on its stack)\n");
            } else if let Some([rbp, ret]) = read_words::<2>(sp + crate::arch::SAVED_FP_OFFSET) {
                // A goroutine publishes its wait before its switch saves the context, so
                // `sp` may still be the previous switch's and the words there overwritten
                // by the frames it has run since (a zero return address). Not shown then,
                // nor when the saved sp moved while we read.
                // SAFETY: as above.
                if ret == 0 || unsafe { g.sp.get() } != sp {
                    out.str("(switching: stack not shown)\n");
                } else {
                    frame(out, 0, ret, true);
                    walk(out, lo, hi, rbp, 1);
                }
            }
        }
        _ if status == G_RUNNING || status == G_SYSCALL => {
            out.str("(running on thread ");
            let m = g.m.load(Ordering::Relaxed);
            if m.is_null() {
                out.str("?");
            } else {
                // SAFETY: Ms are never freed.
                out.dec(unsafe { (*m).tid.load(Ordering::Relaxed) } as u64);
            }
            out.str("; stack unavailable)\n");
        }
        _ => {}
    }
    let parent = g.parentgoid.load(Ordering::Relaxed);
    out.str("created by ");
    if parent == 0 {
        out.str("a thread outside the runtime");
    } else {
        out.str("goroutine ");
        out.dec(parent);
    }
    // SAFETY: as for the stack: the entry is the owner's, read racily for its address only.
    if let Some(f) = unsafe { g.entry.get() } {
        out.str(", entry ");
        symbolize(out, f as usize);
    }
    out.str("\n");
    if status == G_RUNNABLE {
        waits_for_thread(out, g);
    }
    out.str("\n");
}

/// For a runnable goroutine that only one thread may run (locked or pinned to it): which
/// thread, and what that thread runs meanwhile (a hang's usual cause).
fn waits_for_thread(out: &mut Out, g: &G) {
    let locked = g.lockedm.load(Ordering::Relaxed);
    let m = if locked.is_null() {
        g.affm.load(Ordering::Relaxed)
    } else {
        locked
    };
    // A goroutine started locked that has not run yet takes the first M free for it.
    if m.is_null() || m == LOCK_AT_START {
        return;
    }
    // SAFETY: Ms and Gs are never freed; the words are read racily, for the report only.
    let (tid, cur, lg) = unsafe {
        (
            (*m).tid.load(Ordering::Relaxed),
            (*m).curg.load(Ordering::Relaxed),
            (*m).lockedg.load(Ordering::Relaxed),
        )
    };
    out.str("waits for thread ");
    out.dec(tid as u64);
    if !cur.is_null() {
        out.str(", which runs goroutine ");
        // SAFETY: as above.
        out.dec(unsafe { (*cur).goid() });
    } else if !lg.is_null() && !core::ptr::eq(lg, g) {
        out.str(", which waits for its locked goroutine ");
        // SAFETY: as above.
        out.dec(unsafe { (*lg).goid() });
    } else {
        out.str(", which runs no goroutine");
    }
    out.str("\n");
}

/// The caller's frame pointer.
#[inline(always)]
fn current_fp() -> usize {
    crate::arch::frame_pointer()
}

/// Writes every goroutine that is not dead, then the foreign threads blocked in the
/// runtime's waits (checkdead.rs knows them). Async-signal-safe (module doc).
pub(crate) fn dump_all(out: &mut Out) {
    let now = crate::sys::nanotime();
    let me = getg();
    for g in super::proc::all_gs() {
        let st = g.status.load(Ordering::Acquire);
        if st != G_DEAD && st != G_IDLE {
            let fp = core::ptr::eq(g, me).then(current_fp);
            dump_g(out, g, now, fp);
        }
    }
    dump_foreign(out);
    dump_stack_marks(out);
    out.flush();
}

/// The stack high-water marks measured so far (stackhwm.rs), one line per start function:
/// `  name: 112 KiB of 256 KiB (37 goroutines)`. Nothing when none was measured.
/// Async-signal-safe.
fn dump_stack_marks(out: &mut Out) {
    let (samples, _, dropped) = stackhwm::totals();
    if samples == 0 {
        return;
    }
    out.str("stack high-water marks by start function (");
    match stackhwm::rate() {
        n if n > 0 => {
            out.str("1 goroutine start in ");
            out.dec(n as u64);
        }
        _ => out.str("at most 1 goroutine start per thread every 4 ms"),
    }
    out.str(" measured):\n");
    stackhwm::for_each(|m| {
        out.str("  ");
        symbol_only(out, m.entry);
        out.str(": ");
        out.dec((m.high / 1024) as u64);
        out.str(" KiB of ");
        out.dec((m.size / 1024) as u64);
        out.str(" KiB (");
        out.dec(m.samples);
        out.str(if m.samples == 1 {
            " goroutine)\n"
        } else {
            " goroutines)\n"
        });
    });
    if dropped != 0 {
        out.str("  (");
        out.dec(dropped);
        out.str(" goroutines of start functions the table had no room for)\n");
    }
    out.str("\n");
}

/// `gmp_dump(fd)`.
pub fn dump_to_fd(fd: c_int) {
    let mut out = Out::new(fd);
    dump_all(&mut out);
}

static SIGQUIT_INSTALLED: AtomicBool = AtomicBool::new(false);

/// Installs the SIGQUIT handler (from `init_once`), as Go's runtime does: unless
/// `GMP_DEBUG=sigquit=0`, and only if SIGQUIT still has its default action — a program that
/// installed its own handler (or ignores SIGQUIT) before the runtime started keeps it.
pub(crate) fn init() {
    coarsetime::set_coarse_now(crate::sys::nanotime());
    if crate::sys::dbgvars::get(crate::sys::dbgvars::Var::Sigquit) == 0 {
        return;
    }
    // SAFETY: plain sigaction calls on valid, zeroed structs.
    unsafe {
        let mut old: libc::sigaction = core::mem::zeroed();
        if libc::sigaction(libc::SIGQUIT, core::ptr::null(), &mut old) != 0
            || old.sa_sigaction != libc::SIG_DFL
        {
            return;
        }
        let mut act: libc::sigaction = core::mem::zeroed();
        act.sa_sigaction = on_sigquit as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        libc::sigfillset(&mut act.sa_mask);
        if libc::sigaction(libc::SIGQUIT, &act, core::ptr::null_mut()) == 0 {
            SIGQUIT_INSTALLED.store(true, Ordering::Relaxed);
        }
    }
}

/// What the SIGQUIT handler runs after the dump (the flight recorder's write, from
/// trace.rs, a floor above): null, or a `fn()` that is async-signal-safe.
static AFTER_SIGQUIT: core::sync::atomic::AtomicPtr<()> =
    core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());

/// Sets (or with None clears) what the SIGQUIT handler runs after the dump.
pub(crate) fn set_after_sigquit(f: Option<fn()>) {
    AFTER_SIGQUIT.store(
        f.map_or(core::ptr::null_mut(), |f| f as *mut ()),
        Ordering::Release,
    );
}

extern "C" fn on_sigquit(_sig: c_int, _info: *mut libc::siginfo_t, _ctx: *mut c_void) {
    let mut out = Out::new(2);
    out.str("SIGQUIT: quit\n\n");
    dump_all(&mut out);
    out.flush();
    let after = AFTER_SIGQUIT.load(Ordering::Acquire);
    if !after.is_null() {
        // SAFETY: only `fn()` values are stored (`set_after_sigquit`).
        let f: fn() = unsafe { core::mem::transmute::<*mut (), fn()>(after) };
        f();
    }
    // SAFETY: _exit is async-signal-safe and ends the process.
    unsafe { libc::_exit(2) }
}

/// Where the gdb script (`scripts/gmp-gdb.py`) finds what it reads, for builds without
/// type information (release: `debug = 1`): not exported, found through the symbol table
/// as `gmp::rt::dump::GDB_LAYOUT`, beside `gmp::rt::SCHED` and `gmp::rt::coarsetime::COARSE_NOW`.
/// Rust lays structs out as it likes, so the offsets are computed here. Entries: a
/// version, the offset of `allg` in `Sched` (the newest `GChunk`), then the offsets in `G`
/// of `sp`, `status`, `goid`, `waitreason`, `parentgoid`, `lockedm`, `affm`, `waitsince`,
/// `entry` (an `Option<fn>`: a nullable pointer), the size of a `G`, then the offsets in
/// `GChunk` of `gs` (the slots), `len` and `next` (see `proc::all_gs`).
#[used]
pub(crate) static GDB_LAYOUT: [usize; 15] = [
    4,
    core::mem::offset_of!(Sched, allg),
    core::mem::offset_of!(G, sp),
    core::mem::offset_of!(G, status),
    core::mem::offset_of!(G, goid),
    core::mem::offset_of!(G, waitreason),
    core::mem::offset_of!(G, parentgoid),
    core::mem::offset_of!(G, lockedm),
    core::mem::offset_of!(G, affm),
    core::mem::offset_of!(G, waitsince),
    core::mem::offset_of!(G, entry),
    core::mem::size_of::<G>(),
    core::mem::offset_of!(GChunk, gs),
    core::mem::offset_of!(GChunk, len),
    core::mem::offset_of!(GChunk, next),
];

/// The foreign threads in tracked waits, for the dump.
pub(super) fn dump_foreign(out: &mut Out) {
    let now = crate::sys::nanotime();
    for s in &foreignwait::FOREIGN {
        let tid = s.tid.load(Ordering::SeqCst);
        if tid == 0 {
            continue;
        }
        out.str("thread ");
        out.dec(tid as u64);
        out.str(" [");
        let r = WaitReason::from_u8(s.reason.load(Ordering::Relaxed));
        out.str(if r == WaitReason::None {
            "waiting"
        } else {
            r.as_str()
        });
        waited(out, s.since.load(Ordering::Relaxed), now);
        out.str("]: a thread outside the runtime, blocked in a gmp call\n\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The walk reads another goroutine's stack racily: frame pointers and return
    /// addresses near the top of the address space (garbage left by frames that ran since
    /// the context was saved) end it with a note, without an overflow.
    #[test]
    fn walk_survives_garbage_words() {
        // A fake stack whose first frame links to an address near usize::MAX.
        let stack = [usize::MAX & !7, usize::MAX, 0usize, 0];
        let lo = stack.as_ptr() as usize;
        let hi = lo + core::mem::size_of_val(&stack);
        let mut out = Out::capture();
        walk(&mut out, lo, hi, lo, 0);
        walk(&mut out, 0, usize::MAX, usize::MAX & !7, 0);
        walk(&mut out, lo, usize::MAX, lo, 0);
        frame(&mut out, 0, 0, true);
        let text = String::from_utf8_lossy(out.captured_bytes());
        assert!(text.contains("frame-pointer chain ends"), "{text}");
    }
}
