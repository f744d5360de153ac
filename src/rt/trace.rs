//! The execution trace (Go's `runtime/trace`) and its flight recorder (Go's
//! `trace.FlightRecorder`): `GMP_TRACE=path` / `gmp_trace_start` stream every event to a
//! file; `GMP_TRACE=flight[:SECONDS[:MIB]]` / `gmp_trace_flight_start` keep the newest
//! events in memory and write the window on demand (`gmp_trace_flight_write`), on
//! SIGQUIT beside the goroutine dump, on a deadlock report, and when a goroutine waited
//! runnable longer than a threshold (`GMP_TRACE_LATENCY`, `gmp_trace_flight_latency`).
//!
//! **Recording** is traceevent.rs: per-P chunks of binary events.
//!
//! **The file** is binary, written as recorded (formatting was the old JSON writer's
//! bottleneck); `scripts/trace2json.py` turns it into the Chrome trace-event JSON that
//! ui.perfetto.dev opens. Little-endian: the magic `gmptrace`, a u32 version, a u32 of
//! flags (1: a flight recorder's window), a u64 window in nanoseconds; then records, each a
//! tag byte:
//! - `CLOCK`: u64 ticks, i64 nanoseconds — the same instant on the events' clock and on
//!   CLOCK_MONOTONIC; the first is the trace's start, the last its end;
//! - `CHUNK`: u32 slot (a P id, or 1024 for threads without a P), u64 sequence, u64 base
//!   ticks, u32 offset, u32 length, then that many bytes of the chunk from that offset
//!   (a chunk may come in several pieces, in order);
//! - `NAME`: u64 pc, then the function's name up to a NUL;
//! - `COUNTERS`: u64 ticks, u64 runnable goroutines, u64 idle Ps, u64 threads;
//! - `NOTE`: text up to a NUL (why a flight recorder wrote);
//! - `END`: u64 events dropped, and nothing after it.
//!
//! **Streaming.** A writer thread, every millisecond, writes the chunks producers sealed
//! (and frees them) and the part of each current chunk it has not written, with counters.
//! At stop it writes the rest, the names of the goroutines' entry functions, and `END`.
//!
//! **Flight.** No writer runs; a write pins every chunk of the pool in turn and copies it
//! (traceevent.rs), with no lock and no allocation, so the SIGQUIT handler can do it.

use core::ffi::c_int;
use core::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::traceevent::*;
use super::*;

pub(super) const MAGIC: &[u8; 8] = b"gmptrace";
const VERSION: u32 = 1;
const FLAG_FLIGHT: u32 = 1;

mod rec {
    pub(super) const CLOCK: u8 = 1;
    pub(super) const CHUNK: u8 = 2;
    pub(super) const NAME: u8 = 3;
    pub(super) const COUNTERS: u8 = 4;
    pub(super) const NOTE: u8 = 5;
    pub(super) const END: u8 = 6;
}

/// Flight recorder defaults (Go's `FlightRecorderConfig`: MinAge 10 s; a 16 MiB pool).
pub(crate) const FLIGHT_SECONDS: u32 = 10;
pub(crate) const FLIGHT_MIB: u32 = 16;
/// The streaming trace's pool: what producers may run ahead of the writer.
const STREAM_BYTES: usize = 64 << 20;

enum Mode {
    Off,
    Stream {
        done: std::sync::mpsc::Sender<()>,
        thread: std::thread::JoinHandle<()>,
    },
    Flight,
}

/// What runs. Taken only inside a blocking call (`syscall::blocking`, by `start`, `stop`,
/// `flight_start` and `flight_stop`): its holder makes system calls the interposer would
/// otherwise see (the first start reads /proc/cpuinfo, a stream start creates its file
/// and thread, a stop joins the writer), and a goroutine parked or waiting for a P while
/// holding it would deadlock with the goroutines whose threads wait for it in the kernel
/// holding every P. In the blocking call the holder's calls pass the hooks by, and the
/// waiters' Ps are handed off.
static MODE: Mutex<Mode> = Mutex::new(Mode::Off);

fn mode() -> std::sync::MutexGuard<'static, Mode> {
    MODE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The flight recorder's window (ns) and its start, on both clocks (for the file).
static WINDOW_NS: AtomicU64 = AtomicU64::new(0);
static START_TICKS: AtomicU64 = AtomicU64::new(0);
static START_NS: AtomicI64 = AtomicI64::new(0);
/// Whether a flight recorder runs (readable without MODE's lock, by signal handlers).
static FLIGHT_ON: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

// ---- output ----

/// A buffer flushed with raw write(2) (no allocation, no lock: signal handlers use it);
/// large slices go straight to the file. Small, as everything a write keeps on its stack:
/// `gmp_trace_flight_write` may run on a goroutine's 16 KiB stack, and the SIGQUIT
/// handler on whatever stack it interrupted.
struct Raw {
    fd: c_int,
    buf: [u8; 512],
    len: usize,
    err: i32,
}

impl Raw {
    fn new(fd: c_int) -> Raw {
        Raw {
            fd,
            buf: [0; 512],
            len: 0,
            err: 0,
        }
    }
    fn write_all(&mut self, mut b: &[u8]) {
        while !b.is_empty() && self.err == 0 {
            // Raw syscall: an interposed `write` (LD_PRELOAD mode) must not see it.
            // SAFETY: b is a valid slice; write(2) reads at most b.len() bytes.
            let n = unsafe { libc::syscall(libc::SYS_write, self.fd, b.as_ptr(), b.len()) };
            if n < 0 {
                let e = crate::sys::errno();
                if e != libc::EINTR {
                    self.err = e;
                }
            } else if n == 0 {
                self.err = libc::EIO;
            } else {
                b = &b[n as usize..];
            }
        }
    }
    fn flush(&mut self) {
        let buf = self.buf;
        let n = self.len;
        self.len = 0;
        self.write_all(&buf[..n]);
    }
    fn bytes(&mut self, b: &[u8]) {
        if self.len + b.len() > self.buf.len() {
            self.flush();
        }
        if b.len() > self.buf.len() {
            self.write_all(b);
        } else {
            self.buf[self.len..self.len + b.len()].copy_from_slice(b);
            self.len += b.len();
        }
    }
    fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }
    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }

    fn header(&mut self, flags: u32, window_ns: u64) {
        self.bytes(MAGIC);
        self.u32(VERSION);
        self.u32(flags);
        self.u64(window_ns);
    }
    fn clock(&mut self, ticks: u64, ns: i64) {
        self.u8(rec::CLOCK);
        self.u64(ticks);
        self.u64(ns as u64);
    }
    fn clock_now(&mut self) {
        let t = ticks();
        self.clock(t, crate::sys::nanotime());
    }
    fn piece(&mut self, h: &Hdr, from: usize, b: &[u8]) {
        self.u8(rec::CHUNK);
        self.u32(h.slot);
        self.u64(h.seq);
        self.u64(h.base);
        self.u32(from as u32);
        self.u32(b.len() as u32);
        self.bytes(b);
    }
    fn name(&mut self, pc: u64) {
        self.u8(rec::NAME);
        self.u64(pc);
        // The name straight to the file, after what is buffered (the dump's writer).
        self.flush();
        let mut s = super::dump::Out::new(self.fd);
        super::dump::symbol_only(&mut s, pc as usize);
        s.flush();
        self.u8(0);
    }
    fn counters(&mut self) {
        let runnable = SCHED.runqsize.load(Ordering::Relaxed) as u64
            + all_ps().map(|p| p.runq.len() as u64).sum::<u64>();
        self.u8(rec::COUNTERS);
        self.u64(ticks());
        self.u64(runnable);
        self.u64(SCHED.npidle.load(Ordering::Relaxed) as u64);
        self.u64(SCHED.mcount.load(Ordering::Relaxed) as u64);
    }
    fn note(&mut self, s: &[u8]) {
        self.u8(rec::NOTE);
        self.bytes(s);
        self.u8(0);
    }
    fn end(&mut self) {
        self.u8(rec::END);
        self.u64(DROPPED.load(Ordering::Relaxed));
        self.flush();
    }
}

/// The entry functions already named in a file: a fixed table (no allocation); a pc
/// that does not fit is named again, harmlessly.
struct Named {
    pcs: [u64; 512],
    n: usize,
}

impl Named {
    fn new() -> Named {
        Named {
            pcs: [0; 512],
            n: 0,
        }
    }
    /// Writes a NAME for every start's entry in `b` not named yet; `pc` as `decode`'s.
    fn names_in(&mut self, out: &mut Raw, b: &[u8], pc: u64) -> u64 {
        decode(b, pc, |k, _, pc| {
            if k == kind::GO_START && pc != 0 && !self.pcs[..self.n].contains(&pc) {
                if self.n < self.pcs.len() {
                    self.pcs[self.n] = pc;
                    self.n += 1;
                }
                out.name(pc);
            }
        })
    }
}

/// Calls `f` with every chunk of the current trace that holds events, pinned.
fn for_each_pinned(mut f: impl FnMut(&Chunk, &Hdr, usize)) {
    let epoch = EPOCH.load(Ordering::Acquire);
    for slot in ALL.iter().take(NALL.load(Ordering::Acquire)) {
        let c = slot.load(Ordering::Acquire);
        if c.is_null() {
            continue;
        }
        // SAFETY: chunks are never freed.
        let c = unsafe { &*c };
        if !pin(&c.ctl) {
            continue;
        }
        let h = c.hdr();
        let st = c.state.load(Ordering::Acquire);
        if h.epoch == epoch && st != FREE {
            let len = c.len.load(Ordering::Acquire);
            f(c, &h, len);
        }
        unpin(&c.ctl);
    }
}

// ---- the streaming trace ----

/// Starts a trace into `path`. Err: a trace or flight recorder already runs (EBUSY) or the
/// file cannot be created (its errno).
pub fn start(path: &str) -> Result<(), i32> {
    super::syscall::blocking(|| start_blocking(path))
}

fn start_blocking(path: &str) -> Result<(), i32> {
    let mut m = mode();
    if !matches!(*m, Mode::Off) {
        return Err(libc::EBUSY);
    }
    let file = std::fs::File::create(path).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    reset(false, STREAM_BYTES / CHUNK);
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let mut out = Raw::new(std::os::fd::AsRawFd::as_raw_fd(&file));
    out.header(0, 0);
    out.clock_now();
    ON.0.store(true, Ordering::SeqCst);
    super::hookflags::set(super::hookflags::TRACE, true);
    let thread = std::thread::Builder::new()
        .name("gmp-trace".into())
        .spawn(move || {
            super::threads::register();
            write_loop(file, out, rx);
            super::threads::unregister();
        })
        .map_err(|_| libc::EAGAIN)?;
    *m = Mode::Stream { done: tx, thread };
    Ok(())
}

/// Stops the trace and finishes the file. Err(EINVAL): no trace runs.
pub fn stop() -> Result<(), i32> {
    super::syscall::blocking(stop_blocking)
}

fn stop_blocking() -> Result<(), i32> {
    let mut m = mode();
    if !matches!(*m, Mode::Stream { .. }) {
        return Err(libc::EINVAL);
    }
    let Mode::Stream { done, thread } = core::mem::replace(&mut *m, Mode::Off) else {
        unreachable!()
    };
    ON.0.store(false, Ordering::SeqCst);
    super::hookflags::set(super::hookflags::TRACE, false);
    let _ = done.send(());
    let _ = thread.join();
    Ok(())
}

fn write_loop(file: std::fs::File, mut out: Raw, done: std::sync::mpsc::Receiver<()>) {
    let mut named = Named::new();
    let mut sealed: Vec<*mut Chunk> = Vec::with_capacity(MAX_CHUNKS);
    let epoch = EPOCH.load(Ordering::Acquire);
    loop {
        let stop = !matches!(
            done.recv_timeout(core::time::Duration::from_millis(1)),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        );
        // The chunks sealed since the last round: ours until freed.
        with_pool(|p| sealed.extend(p.sealed.drain(..)));
        for &c in &sealed {
            // SAFETY: chunks are never freed; a sealed chunk taken from the queue is the
            // writer's alone (nothing recycles it in streaming mode).
            let c = unsafe { &*c };
            let h = c.hdr();
            if h.epoch == epoch {
                let len = c.len.load(Ordering::Acquire);
                let from = c.written.load(Ordering::Relaxed);
                let b = c.bytes(from, len);
                out.piece(&h, from, b);
                named.names_in(&mut out, b, c.written_pc.load(Ordering::Relaxed));
            }
            #[cfg(debug_assertions)]
            drain_delay();
        }
        with_pool(|p| {
            for &c in &sealed {
                // SAFETY: as above.
                unsafe { (*c).state.store(FREE, Ordering::Release) };
                p.free.push(c);
            }
        });
        sealed.clear();
        // What the current chunks gained.
        for_each_pinned(|c, h, len| {
            if c.state.load(Ordering::Acquire) != CURRENT {
                return;
            }
            let from = c.written.load(Ordering::Relaxed);
            if len > from {
                let b = c.bytes(from, len);
                out.piece(h, from, b);
                let pc = named.names_in(&mut out, b, c.written_pc.load(Ordering::Relaxed));
                c.written.store(len, Ordering::Relaxed);
                c.written_pc.store(pc, Ordering::Relaxed);
            }
            #[cfg(debug_assertions)]
            drain_delay();
        });
        out.counters();
        if stop {
            out.clock_now();
            out.end();
            drop(file);
            return;
        }
    }
}

/// Test hook, debug builds only: `GMP_DEBUG=tracedraindelay=<µs>` makes the writer sleep
/// after each chunk it writes, so that producers fill and seal chunks while it writes
/// others (`torture_traced_slow_writer`).
#[cfg(debug_assertions)]
fn drain_delay() {
    crate::sys::dbgvars::delay(crate::sys::dbgvars::Var::Tracedraindelay);
}

// ---- the flight recorder ----

/// Starts the flight recorder: the newest `seconds` of events (at least; 0: 10) in at
/// most `mib` MiB (0: 16). Err(EBUSY): a trace or flight recorder runs.
pub fn flight_start(seconds: u32, mib: u32) -> Result<(), i32> {
    super::syscall::blocking(|| flight_start_blocking(seconds, mib))
}

fn flight_start_blocking(seconds: u32, mib: u32) -> Result<(), i32> {
    let mut m = mode();
    if !matches!(*m, Mode::Off) {
        return Err(libc::EBUSY);
    }
    let seconds = if seconds == 0 {
        FLIGHT_SECONDS
    } else {
        seconds
    };
    let mib = if mib == 0 { FLIGHT_MIB } else { mib.min(1024) };
    // At least two chunks for every P and the shared slot.
    let chunks = ((mib as usize) << 20) / CHUNK;
    let procs = SCHED.gomaxprocs.load(Ordering::Relaxed).max(1) as usize;
    reset(true, chunks.max(2 * (procs + 1)));
    WINDOW_NS.store(seconds as u64 * 1_000_000_000, Ordering::Relaxed);
    START_TICKS.store(ticks(), Ordering::Relaxed);
    START_NS.store(crate::sys::nanotime(), Ordering::Relaxed);
    FLIGHT_ON.store(true, Ordering::SeqCst);
    ON.0.store(true, Ordering::SeqCst);
    super::hookflags::set(super::hookflags::TRACE, true);
    super::dump::set_after_sigquit(Some(flight_auto_sigquit));
    *m = Mode::Flight;
    Ok(())
}

/// Stops the flight recorder (its events are gone). Err(EINVAL): none runs.
pub fn flight_stop() -> Result<(), i32> {
    super::syscall::blocking(flight_stop_blocking)
}

fn flight_stop_blocking() -> Result<(), i32> {
    let mut m = mode();
    if !matches!(*m, Mode::Flight) {
        return Err(libc::EINVAL);
    }
    FLIGHT_ON.store(false, Ordering::SeqCst);
    ON.0.store(false, Ordering::SeqCst);
    super::hookflags::set(super::hookflags::TRACE, false);
    super::dump::set_after_sigquit(None);
    *m = Mode::Off;
    Ok(())
}

/// Writes the flight recorder's window to `fd`, noting `why`. No lock, no allocation (the
/// SIGQUIT handler calls it). Err: no flight recorder runs (EINVAL), or write(2)'s errno.
pub fn flight_write(fd: c_int, why: &[u8]) -> Result<(), i32> {
    if !FLIGHT_ON.load(Ordering::SeqCst) {
        return Err(libc::EINVAL);
    }
    let mut out = Raw::new(fd);
    out.header(FLAG_FLIGHT, WINDOW_NS.load(Ordering::Relaxed));
    out.clock(
        START_TICKS.load(Ordering::Relaxed),
        START_NS.load(Ordering::Relaxed),
    );
    out.note(why);
    let mut named = Named::new();
    for_each_pinned(|c, h, len| {
        let b = c.bytes(0, len);
        out.piece(h, 0, b);
        named.names_in(&mut out, b, 0);
    });
    out.counters();
    out.clock_now();
    out.end();
    match out.err {
        0 => Ok(()),
        e => Err(e),
    }
}

/// The directory automatic flight writes go to (`GMP_TRACE_DIR`, else the current one),
/// NUL-terminated, read at start-up so that a signal handler needs no allocation.
static DIR_PTR: core::sync::atomic::AtomicPtr<u8> =
    core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());
static FILES: AtomicUsize = AtomicUsize::new(0);

/// An automatic write of the window (`why`: "SIGQUIT", "deadlock", "latency"): into a new
/// file `gmp-flight-PID-N.trace` in `GMP_TRACE_DIR`, announced on stderr. Signal-safe.
pub(crate) fn flight_auto(why: &[u8]) {
    if !FLIGHT_ON.load(Ordering::SeqCst) {
        return;
    }
    // Written under a hidden name, then renamed: whoever watches the directory sees
    // whole files only.
    let mut tmp = [0u8; 1024];
    let mut path = [0u8; 1024];
    let (mut nt, mut np) = (0, 0);
    let mut push = |b: &[u8], hidden: bool| {
        for (i, (buf, n)) in [(&mut tmp, &mut nt), (&mut path, &mut np)]
            .into_iter()
            .enumerate()
        {
            if hidden && i == 1 {
                continue;
            }
            let k = b.len().min(buf.len() - 1 - *n);
            buf[*n..*n + k].copy_from_slice(&b[..k]);
            *n += k;
        }
    };
    let dir = DIR_PTR.load(Ordering::Acquire);
    if !dir.is_null() {
        // SAFETY: a leaked NUL-terminated string (set_dir), never freed.
        let d = unsafe { core::ffi::CStr::from_ptr(dir.cast()) };
        push(d.to_bytes(), false);
        push(b"/", false);
    }
    push(b".", true);
    push(b"gmp-flight-", false);
    // SAFETY: getpid has no preconditions.
    push(
        &crate::sys::fmt_u64(unsafe { libc::getpid() } as u64),
        false,
    );
    push(b"-", false);
    push(
        &crate::sys::fmt_u64(FILES.fetch_add(1, Ordering::Relaxed) as u64 + 1),
        false,
    );
    push(b".trace", false);
    let mut err = super::dump::Out::new(2);
    // SAFETY: tmp is NUL-terminated (nt < its length; zero-filled).
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            tmp.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o644,
        )
    } as c_int;
    err.str("gmp: flight recorder (");
    err.bytes(why);
    if fd < 0 {
        err.str("): cannot create ");
        err.bytes(&tmp[..nt]);
        err.str("\n");
        err.flush();
        return;
    }
    let r = flight_write(fd, why);
    // SAFETY: our descriptor; both paths are NUL-terminated.
    let renamed = unsafe {
        libc::syscall(libc::SYS_close, fd);
        libc::syscall(
            libc::SYS_renameat,
            libc::AT_FDCWD,
            tmp.as_ptr(),
            libc::AT_FDCWD,
            path.as_ptr(),
        ) == 0
    };
    err.str(if r.is_ok() && renamed {
        "): wrote "
    } else {
        "): failed to write "
    });
    err.bytes(&path[..np]);
    err.str("\n");
    err.flush();
}

fn set_dir(dir: &str) {
    let Ok(c) = std::ffi::CString::new(dir) else {
        return;
    };
    // Leaked: a signal handler may be reading it.
    let p = Box::leak(c.into_boxed_c_str()).as_ptr() as *mut u8;
    DIR_PTR.store(p, Ordering::Release);
}

static LATENCY_THREAD: std::sync::Once = std::sync::Once::new();

/// Sets the latency threshold (ns, 0: none) above which a goroutine's wait from runnable
/// to running makes the flight recorder write its window, at most once a window. Turns on
/// the timing of every wait (schedlat.rs), which sets the flag a `gmp-flight` thread
/// looks at every 5 ms.
pub fn flight_latency(ns: u64) {
    super::schedlat::OVER_NS.store(ns, Ordering::Relaxed);
    if ns == 0 {
        return;
    }
    super::schedlat::time_every_wait();
    LATENCY_THREAD.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("gmp-flight".into())
            .spawn(|| {
                super::threads::register();
                let mut last = i64::MIN / 2;
                loop {
                    std::thread::sleep(core::time::Duration::from_millis(5));
                    if !super::schedlat::OVER.swap(false, Ordering::Relaxed)
                        || !FLIGHT_ON.load(Ordering::Relaxed)
                    {
                        continue;
                    }
                    let now = crate::sys::nanotime();
                    // One file a window: the next covers what followed this one.
                    if now - last >= WINDOW_NS.load(Ordering::Relaxed) as i64 {
                        flight_auto(b"latency");
                        last = now;
                    }
                }
            });
    });
}

fn flight_auto_sigquit() {
    flight_auto(b"SIGQUIT");
}

// ---- start-up ----

/// Reads `GMP_TRACE`, `GMP_TRACE_DIR` and `GMP_TRACE_LATENCY` (from `init_once`).
pub(crate) fn init() {
    if let Some(d) = std::env::var_os("GMP_TRACE_DIR").filter(|p| !p.is_empty()) {
        set_dir(&d.to_string_lossy());
    }
    let Some(v) = std::env::var_os("GMP_TRACE").filter(|p| !p.is_empty()) else {
        return;
    };
    let v = v.to_string_lossy().into_owned();
    let warn =
        |msg: String| crate::sys::write_stderr(format!("gmp: GMP_TRACE={v:?}: {msg}\n").as_bytes());
    if let Some(spec) = v
        .strip_prefix("flight")
        .filter(|s| s.is_empty() || s.starts_with(':'))
    {
        let mut parts = spec.split(':').skip(1);
        let mut num = |what: &str| -> Option<u32> {
            match parts.next() {
                None | Some("") => Some(0),
                Some(s) => s.parse().ok().or_else(|| {
                    warn(format!("the {what} is not a number"));
                    None
                }),
            }
        };
        let (Some(secs), Some(mib)) = (num("window (seconds)"), num("size (MiB)")) else {
            return;
        };
        if let Err(e) = flight_start(secs, mib) {
            warn(format!("cannot start the flight recorder (errno {e})"));
            return;
        }
        if let Some(l) = std::env::var_os("GMP_TRACE_LATENCY") {
            match parse_ms(&l.to_string_lossy()) {
                Some(ns) => flight_latency(ns),
                None => warn("GMP_TRACE_LATENCY is not a duration (e.g. 50ms, 2s)".into()),
            }
        }
        return;
    }
    if let Err(e) = start(&v) {
        warn(format!("cannot trace (errno {e})"));
    } else {
        // Finish the file when the program exits normally.
        // SAFETY: registers a plain extern "C" function.
        unsafe { libc::atexit(stop_at_exit) };
    }
}

/// `50ms`, `2s`, `300us`, or a number of milliseconds, in nanoseconds.
fn parse_ms(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mul) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1_000_000)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 1_000)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1_000_000_000)
    } else {
        (s, 1_000_000)
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .map(|n| n.saturating_mul(mul))
        .filter(|&n| n > 0)
}

extern "C" fn stop_at_exit() {
    // A child forked from a traced process inherits this handler and the writer's state,
    // but not the writer's thread, and the file is the parent's to finish: nothing to do.
    if super::os_linux::forked() {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        let _ = stop();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_durations() {
        assert_eq!(parse_ms("50ms"), Some(50_000_000));
        assert_eq!(parse_ms("2s"), Some(2_000_000_000));
        assert_eq!(parse_ms("300us"), Some(300_000));
        assert_eq!(parse_ms("7"), Some(7_000_000));
        assert_eq!(parse_ms("x"), None);
        assert_eq!(parse_ms("0"), None);
    }

    /// The decoder reads what the producer's encoding writes, labels' text included.
    #[test]
    fn decode_reads_events() {
        // A start at pc 1234 (zigzag 2468 = 0xa4 0x13), labels, a stop.
        let mut b = vec![kind::GO_START, 5, 7, 0xa4, 0x13];
        b.extend_from_slice(&[kind::LABELS | kind::TRACK, 0, 3, 7, 4, b'k', 0, b'v', 0]);
        b.extend_from_slice(&[kind::GO_STOP, 0x80, 0x01, 7, 1]);
        let mut got = Vec::new();
        assert_eq!(decode(&b, 0, |k, a, x| got.push((k, a, x))), 1234);
        assert_eq!(
            got,
            vec![
                (kind::GO_START, 7, 1234),
                (kind::LABELS, 7, 4),
                (kind::GO_STOP, 7, 1)
            ]
        );
        // A cut event is not reported.
        let mut n = 0;
        decode(&b[..b.len() - 1], 0, |_, _, _| n += 1);
        assert_eq!(n, 2);
    }
}
