//! The execution trace (Go's `runtime/trace`, written as Chrome trace-event JSON so that
//! ui.perfetto.dev and chrome://tracing open it): `GMP_TRACE=path`, `gmp_trace_start`,
//! `gmp_trace_stop`.
//!
//! **Recording.** Each hook is `if exectrace::on() { ... }`: one relaxed load of a flag
//! that is false unless a trace runs, a branch the CPU predicts. When on, an event (32
//! bytes: time, kind, track, two arguments) goes to the ring of the P the thread holds —
//! single producer (the P's owner; ownership passes through `acquirep`/`releasep`'s
//! release/acquire), single consumer (the writer thread), no lock, no allocation after
//! the ring exists. A full ring makes the producer yield until the writer has drained it
//! (the cost of a trace that the writer cannot keep up with is time, never a hole). Threads without a P
//! (foreign threads, sysmon, an M returning from a syscall) use one ring under a lock.
//!
//! **Writing.** A writer thread drains the rings every millisecond, sorts the batch by time and
//! streams the events stamped before the drain began to the file, holding the rest for the
//! next batch (memory stays flat: rings of `RING` events per P), with counters
//! sampled at each drain (runnable goroutines, idle Ps, threads). Events recorded before
//! the current trace started (a late event of an earlier trace) are dropped; at stop the
//! writer ends every slice still open, then closes the JSON.
//!
//! **What the file holds.** Process "Ps" (pid 1): one track per P; a slice per goroutine
//! run, named after its entry function, with its id; instants `spawn` (new goroutine,
//! parent), `unpark` (goroutine, waker: 0 for a thread outside the runtime), `steal`
//! (victim P, count), `preempt`, `handoff` (sysmon gave away a P whose M is in a syscall);
//! counters. Process "Ms" (pid 2): one track per M; a `syscall` slice per blocking call.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;

use super::*;

/// The P-process track of events by threads without a P (foreign threads).
const OUTSIDE: u32 = 100_000;

/// Events per ring (per P, and the shared one).
const RING: usize = 1 << 15;

#[repr(align(128))]
struct Flag(AtomicBool);
static ON: Flag = Flag(AtomicBool::new(false));

/// Whether a trace is being recorded: the one test every hook makes.
#[inline(always)]
pub(crate) fn on() -> bool {
    ON.0.load(Ordering::Relaxed)
}

#[derive(Clone, Copy, Default)]
pub(crate) struct Ev {
    ts: i64,
    kind: u8,
    /// P id (P events) or M id (M events).
    track: u32,
    a: u64,
    b: u64,
}

// The kinds and reasons are `pub(crate)`, not `pub`: cbindgen writes every `pub const` of
// the crate into gmp.h, whatever module it is in.
pub(crate) mod kind {
    pub(crate) const GO_START: u8 = 1; // a = goid, b = entry pc
    pub(crate) const GO_STOP: u8 = 2; // a = goid, b = why
    pub(crate) const SPAWN: u8 = 3; // a = new goid, b = parent goid
    pub(crate) const UNPARK: u8 = 4; // a = goid, b = waker goid
    pub(crate) const STEAL: u8 = 5; // a = victim P, b = count
    pub(crate) const PREEMPT: u8 = 6; // a = goid
    pub(crate) const HANDOFF: u8 = 7; // a = P
    pub(crate) const SYSCALL_BEGIN: u8 = 8; // M track; a = goid
    pub(crate) const SYSCALL_END: u8 = 9; // M track; a = goid
}

/// Why a run ended (`GO_STOP`'s b).
pub(crate) mod why {
    pub(crate) const PARK: u64 = 1;
    pub(crate) const YIELD: u64 = 2;
    pub(crate) const PREEMPT: u64 = 3;
    pub(crate) const EXIT: u64 = 4;
    pub(crate) const SYSCALL: u64 = 5;
}

/// A single-producer single-consumer ring.
pub(crate) struct Ring {
    head: AtomicUsize,
    tail: AtomicUsize,
    dropped: AtomicU64,
    buf: Box<[UnsafeCell<Ev>]>,
}

// SAFETY: slots in [head, tail) are read only by the consumer and the others written only by
// the producer; the indices are atomics with release/acquire.
unsafe impl Sync for Ring {}

impl Ring {
    fn new() -> Ring {
        Ring {
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            buf: (0..RING).map(|_| UnsafeCell::new(Ev::default())).collect(),
        }
    }
    /// Producer side. The caller is the ring's one producer. A full ring makes it wait
    /// for the writer (yielding the CPU to it): a trace with holes would break its slices;
    /// only a trace that stops meanwhile drops the event.
    fn push(&self, e: Ev) {
        let t = self.tail.load(Ordering::Relaxed);
        while t - self.head.load(Ordering::Acquire) == RING {
            if !on() {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            crate::sys::osyield();
        }
        // SAFETY: slot t is outside [head, tail): the consumer does not read it.
        unsafe { *self.buf[t % RING].get() = e };
        self.tail.store(t + 1, Ordering::Release);
    }
    /// Consumer side (the writer thread).
    fn drain(&self, out: &mut Vec<Ev>) {
        let h = self.head.load(Ordering::Relaxed);
        let t = self.tail.load(Ordering::Acquire);
        for i in h..t {
            // SAFETY: [h, t) was published by the producer's release store of tail.
            out.push(unsafe { *self.buf[i % RING].get() });
        }
        self.head.store(t, Ordering::Release);
    }
}

/// Per-P rings, indexed by P id; created by `start` for the Ps that exist and by the first
/// event of a P created later; never freed (a late producer may still hold one).
static RINGS: [AtomicPtr<Ring>; MAX_PROCS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_PROCS];
/// The ring of threads without a P, under `SHARED_LOCK`.
static SHARED: AtomicPtr<Ring> = AtomicPtr::new(core::ptr::null_mut());
static SHARED_LOCK: crate::sys::Lock = crate::sys::Lock::new(crate::sys::Rank::TraceRing);

fn ring_for(id: usize) -> &'static Ring {
    let r = RINGS[id].load(Ordering::Acquire);
    if !r.is_null() {
        // SAFETY: rings are never freed.
        return unsafe { &*r };
    }
    let new = Box::into_raw(Box::new(Ring::new()));
    match RINGS[id].compare_exchange(
        core::ptr::null_mut(),
        new,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        // SAFETY: just published, never freed.
        Ok(_) => unsafe { &*new },
        Err(cur) => {
            // SAFETY: `new` was never shared.
            drop(unsafe { Box::from_raw(new) });
            // SAFETY: rings are never freed.
            unsafe { &*cur }
        }
    }
}

fn shared() -> &'static Ring {
    let r = SHARED.load(Ordering::Acquire);
    if !r.is_null() {
        // SAFETY: never freed.
        return unsafe { &*r };
    }
    SHARED_LOCK.lock();
    let mut r = SHARED.load(Ordering::Acquire);
    if r.is_null() {
        r = Box::into_raw(Box::new(Ring::new()));
        SHARED.store(r, Ordering::Release);
    }
    SHARED_LOCK.unlock();
    // SAFETY: never freed.
    unsafe { &*r }
}

/// Records an event on the calling thread's P's track (`track` None) or on an explicit
/// track, through the P's ring when the thread holds a P, else the shared ring.
#[cold]
#[inline(never)]
pub(crate) fn emit(k: u8, track: Option<u32>, a: u64, b: u64) {
    let m = getm();
    // SAFETY: a non-null TLS slot is this thread's live M.
    let pp = if m.is_null() {
        core::ptr::null_mut()
    } else {
        unsafe { (*m).p.load(Ordering::Relaxed) }
    };
    let ts = crate::sys::nanotime();
    if !pp.is_null() {
        // SAFETY: Ps are never freed; we hold pp, so we are its ring's one producer.
        let id = unsafe { (*pp).id } as usize;
        let e = Ev {
            ts,
            kind: k,
            track: track.unwrap_or(id as u32),
            a,
            b,
        };
        ring_for(id).push(e);
    } else {
        let e = Ev {
            ts,
            kind: k,
            track: track.unwrap_or(OUTSIDE),
            a,
            b,
        };
        let r = shared();
        SHARED_LOCK.lock();
        r.push(e);
        SHARED_LOCK.unlock();
    }
}

/// `execute`: `g` starts running on the calling M's P.
#[cold]
#[inline(never)]
pub(crate) fn go_start(g: &G) {
    // SAFETY: the caller (execute, exitsyscall) owns g, so its entry is stable.
    let entry = unsafe { g.entry.get() }.map_or(0, |f| f as usize as u64);
    emit(kind::GO_START, None, g.goid(), entry);
}

/// `after_switch`: `g` stopped running with action `act`.
#[cold]
#[inline(never)]
pub(crate) fn go_stop(g: &G, act: usize) {
    let w = match act {
        action::PARK => why::PARK,
        action::GOSCHED | action::LOCKMOVE => why::YIELD,
        action::PREEMPT => why::PREEMPT,
        _ => why::EXIT,
    };
    if act == action::PREEMPT {
        emit(kind::PREEMPT, None, g.goid(), 0);
    }
    emit(kind::GO_STOP, None, g.goid(), w);
}

/// `entersyscall`, while the M still holds its P.
#[cold]
#[inline(never)]
pub(crate) fn syscall_enter(m: &M, g: &G) {
    emit(kind::GO_STOP, None, g.goid(), why::SYSCALL);
    emit(kind::SYSCALL_BEGIN, Some(m.id as u32), g.goid(), 0);
}

/// `exitsyscall`, once the M holds a P again.
#[cold]
#[inline(never)]
pub(crate) fn syscall_exit(m: &M, g: &G) {
    emit(kind::SYSCALL_END, Some(m.id as u32), g.goid(), 0);
    go_start(g);
}

/// The calling goroutine's id, 0 on a thread outside the runtime.
pub(crate) fn cur_goid() -> u64 {
    let g = getg();
    // SAFETY: Gs are never freed.
    if g.is_null() {
        0
    } else {
        unsafe { (*g).goid() }
    }
}

struct Writer {
    done: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

static WRITER: Mutex<Option<Writer>> = Mutex::new(None);

/// Starts a trace into `path`. Err: a trace already runs (EBUSY) or the file cannot be
/// created (its errno).
pub fn start(path: &str) -> Result<(), i32> {
    let mut w = WRITER.lock().unwrap_or_else(|e| e.into_inner());
    if w.is_some() {
        return Err(libc::EBUSY);
    }
    let file = std::fs::File::create(path).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    for p in all_ps() {
        ring_for(p.id as usize);
    }
    shared();
    // Drop what an earlier trace left in the rings.
    let mut junk = Vec::new();
    for r in &RINGS {
        let r = r.load(Ordering::Acquire);
        if !r.is_null() {
            // SAFETY: never freed; only the writer (none runs now) consumes.
            unsafe { (*r).drain(&mut junk) };
        }
    }
    // Events older than this belong to an earlier trace (a late producer): dropped.
    let start = crate::sys::nanotime();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    ON.0.store(true, Ordering::SeqCst);
    super::hooks::set(super::hooks::TRACE, true);
    let thread = std::thread::Builder::new()
        .name("gmp-trace".into())
        .spawn(move || {
            super::threads::register();
            write_loop(file, rx, start)
        })
        .map_err(|_| libc::EAGAIN)?;
    *w = Some(Writer { done: tx, thread });
    Ok(())
}

/// Stops the trace and finishes the file. Err(EINVAL): no trace runs.
pub fn stop() -> Result<(), i32> {
    let w = WRITER
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .ok_or(libc::EINVAL)?;
    ON.0.store(false, Ordering::SeqCst);
    super::hooks::set(super::hooks::TRACE, false);
    let _ = w.done.send(());
    let _ = w.thread.join();
    Ok(())
}

/// Reads `GMP_TRACE` (from `init_once`).
pub(crate) fn init() {
    if let Some(path) = std::env::var_os("GMP_TRACE").filter(|p| !p.is_empty()) {
        let path = path.to_string_lossy().into_owned();
        if let Err(e) = start(&path) {
            crate::sys::write_stderr(
                format!("gmp: GMP_TRACE={path:?}: cannot trace (errno {e})\n").as_bytes(),
            );
        } else {
            // Finish the file when the program exits normally.
            // SAFETY: registers a plain extern "C" function.
            unsafe { libc::atexit(stop_at_exit) };
        }
    }
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

struct Json {
    out: std::io::BufWriter<std::fs::File>,
    first: bool,
    start: i64,
    names: HashMap<u64, std::rc::Rc<str>>,
    line: Line,
    /// The goroutine whose slice is open on each P track, and the open syscall slices on
    /// M tracks.
    open_p: HashMap<u32, u64>,
    open_m: HashMap<u32, u64>,
    seen_m: std::collections::HashSet<u32>,
    seen_p: std::collections::HashSet<u32>,
}

/// Microseconds since the trace started, with three decimals (`ts` is in nanoseconds),
/// printed from integers: the writer prints one or two per event, and float formatting
/// is too slow for it to keep up with a switch-bound program.
struct Us(i64);

impl core::fmt::Display for Us {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let ns = self.0.unsigned_abs();
        write!(f, "{sign}{}.{:03}", ns / 1000, ns % 1000)
    }
}

/// One JSON element built as bytes, for the events every switch writes (starts, stops,
/// instants): hand-rolled integer printing, since `core::fmt` would be the writer's main
/// cost.
#[derive(Default)]
struct Line(Vec<u8>);

impl Line {
    fn s(&mut self, s: &str) -> &mut Line {
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn u(&mut self, mut v: u64) -> &mut Line {
        let mut buf = [0u8; 20];
        let mut i = buf.len();
        loop {
            i -= 1;
            buf[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.0.extend_from_slice(&buf[i..]);
        self
    }
    /// `{"ph":"<ph>","pid":<pid>,"tid":<tid>,"ts":<ns as µs>`: how a slice's begin and end
    /// start.
    fn head(&mut self, ph: &str, pid: u32, tid: u32, ns: i64) -> &mut Line {
        self.s(r#"{"ph":""#)
            .s(ph)
            .s(r#"","pid":"#)
            .u(pid as u64)
            .s(r#","tid":"#)
            .u(tid as u64)
            .s(r#","ts":"#)
            .us(ns)
    }
    /// Microseconds with three decimals, from nanoseconds (as `Us`).
    fn us(&mut self, ns: i64) -> &mut Line {
        if ns < 0 {
            self.0.push(b'-');
        }
        let ns = ns.unsigned_abs();
        self.u(ns / 1000);
        let f = ns % 1000;
        self.0.extend_from_slice(&[
            b'.',
            b'0' + (f / 100) as u8,
            b'0' + (f / 10 % 10) as u8,
            b'0' + (f % 10) as u8,
        ]);
        self
    }
}

impl Json {
    /// Writes the element built in `self.line` and empties it.
    fn flush_line(&mut self) {
        if !self.first {
            let _ = self.out.write_all(b",\n");
        }
        self.first = false;
        let _ = self.out.write_all(&self.line.0);
        self.line.0.clear();
    }
    fn us(&self, ts: i64) -> Us {
        Us(ts - self.start)
    }
    /// Writes one JSON array element, formatted straight into the buffer.
    fn raw(&mut self, args: core::fmt::Arguments<'_>) {
        if !self.first {
            let _ = self.out.write_all(b",\n");
        }
        self.first = false;
        let _ = self.out.write_fmt(args);
    }
    fn name(&mut self, pc: u64) -> std::rc::Rc<str> {
        if let Some(n) = self.names.get(&pc) {
            return n.clone();
        }
        let n: std::rc::Rc<str> = symbol_name(pc as usize).into();
        self.names.insert(pc, n.clone());
        n
    }
    fn track(&mut self, pid: u32, tid: u32) {
        let (set, what) = if pid == 1 {
            (&mut self.seen_p, "P")
        } else {
            (&mut self.seen_m, "M")
        };
        if set.insert(tid) {
            let name = if pid == 1 && tid == OUTSIDE {
                "threads outside the runtime".to_string()
            } else {
                format!("{what}{tid}")
            };
            self.raw(format_args!(
                r#"{{"ph":"M","name":"thread_name","pid":{pid},"tid":{tid},"args":{{"name":"{name}"}}}}"#
            ));
            self.raw(format_args!(
                r#"{{"ph":"M","name":"thread_sort_index","pid":{pid},"tid":{tid},"args":{{"sort_index":{tid}}}}}"#
            ));
        }
    }
    fn event(&mut self, e: &Ev) {
        let ns = e.ts - self.start;
        let ts = Us(ns);
        let t = e.track;
        match e.kind {
            kind::GO_START => {
                // Written as recorded, also after a lost stop (a full ring): the checker
                // (scripts/check-trace.py) then reports the overlap.
                self.track(1, t);
                let name = self.name(e.b);
                self.line
                    .head("B", 1, t, ns)
                    .s(r#","name":"G"#)
                    .u(e.a)
                    .s(" ")
                    .s(&name)
                    .s(r#"","cat":"goroutine","args":{"goid":"#)
                    .u(e.a)
                    .s(r#","entry":""#)
                    .s(&name)
                    .s(r#""}}"#);
                self.flush_line();
                self.open_p.insert(t, e.a);
            }
            kind::GO_STOP => {
                // Nothing open: the run started before the trace did (left out).
                if self.open_p.remove(&t).is_some() {
                    let why = ["?", "park", "yield", "preempt", "exit", "syscall"]
                        .get(e.b as usize)
                        .copied()
                        .unwrap_or("?");
                    self.line
                        .head("E", 1, t, ns)
                        .s(r#","args":{"goid":"#)
                        .u(e.a)
                        .s(r#","why":""#)
                        .s(why)
                        .s(r#""}}"#);
                    self.flush_line();
                }
            }
            kind::SYSCALL_BEGIN => {
                self.track(2, t);
                self.raw(format_args!(r#"{{"ph":"B","pid":2,"tid":{t},"ts":{ts},"name":"syscall","cat":"syscall","args":{{"goid":{}}}}}"#, e.a));
                self.open_m.insert(t, e.a);
            }
            kind::SYSCALL_END => {
                if self.open_m.remove(&t).is_some() {
                    self.raw(format_args!(
                        r#"{{"ph":"E","pid":2,"tid":{t},"ts":{ts},"args":{{"goid":{}}}}}"#,
                        e.a
                    ));
                }
            }
            _ => {
                self.track(1, t);
                // (name, first argument's key, second's or "" for none)
                let (name, k1, k2) = match e.kind {
                    kind::SPAWN => ("spawn", "goid", "parent"),
                    kind::UNPARK => ("unpark", "goid", "waker"),
                    kind::STEAL => ("steal", "victim", "count"),
                    kind::PREEMPT => ("preempt", "goid", ""),
                    kind::HANDOFF => ("handoff", "p", ""),
                    _ => return,
                };
                self.line
                    .s(r#"{"ph":"i","s":"t","pid":1,"tid":"#)
                    .u(t as u64)
                    .s(r#","ts":"#)
                    .us(ns)
                    .s(r#","name":""#)
                    .s(name)
                    .s(r#"","args":{""#)
                    .s(k1)
                    .s(r#"":"#)
                    .u(e.a);
                if !k2.is_empty() {
                    self.line.s(r#",""#).s(k2).s(r#"":"#).u(e.b);
                }
                self.line.s("}}");
                self.flush_line();
            }
        }
    }
    fn counters(&mut self, now: i64) {
        let ts = self.us(now);
        let runnable = SCHED.runqsize.load(Ordering::Relaxed) as i64
            + all_ps().map(|p| p.runq.len() as i64).sum::<i64>();
        let idle = SCHED.npidle.load(Ordering::Relaxed);
        let threads = SCHED.mcount.load(Ordering::Relaxed);
        self.raw(format_args!(r#"{{"ph":"C","pid":1,"name":"runnable goroutines","ts":{ts},"args":{{"runnable":{runnable}}}}}"#));
        self.raw(format_args!(
            r#"{{"ph":"C","pid":1,"name":"idle Ps","ts":{ts},"args":{{"idle":{idle}}}}}"#
        ));
        self.raw(format_args!(
            r#"{{"ph":"C","pid":1,"name":"threads","ts":{ts},"args":{{"threads":{threads}}}}}"#
        ));
    }
}

fn symbol_name(pc: usize) -> String {
    let mut s = super::dump::Out::capture();
    super::dump::symbol_only(&mut s, pc);
    let name = s.captured();
    name.replace(['"', '\\'], "_")
}

fn drain_all(batch: &mut Vec<Ev>) {
    for r in &RINGS {
        let r = r.load(Ordering::Acquire);
        if !r.is_null() {
            // SAFETY: never freed; this thread is every ring's one consumer.
            unsafe { (*r).drain(batch) };
            #[cfg(debug_assertions)]
            drain_delay();
        }
    }
    let s = SHARED.load(Ordering::Acquire);
    if !s.is_null() {
        // SAFETY: as above.
        unsafe { (*s).drain(batch) };
    }
}

/// Test hook, debug builds only: `GMP_DEBUG=tracedraindelay=<µs>` makes the writer sleep
/// after draining each ring, so that producers push to the rings it has drained already
/// while it drains the others (`torture_traced_slow_writer`: see `write_loop`'s `cut`).
#[cfg(debug_assertions)]
fn drain_delay() {
    crate::sys::dbgvars::delay(crate::sys::dbgvars::Var::Tracedraindelay);
}

fn write_loop(file: std::fs::File, done: std::sync::mpsc::Receiver<()>, start: i64) {
    let mut j = Json {
        out: std::io::BufWriter::with_capacity(1 << 16, file),
        first: true,
        start,
        names: HashMap::new(),
        line: Line::default(),
        open_p: HashMap::new(),
        open_m: HashMap::new(),
        seen_m: Default::default(),
        seen_p: Default::default(),
    };
    let _ = writeln!(j.out, "{{\"displayTimeUnit\":\"ns\",\"traceEvents\":[");
    j.raw(format_args!(
        r#"{{"ph":"M","name":"process_name","pid":1,"args":{{"name":"Ps"}}}}"#
    ));
    j.raw(format_args!(
        r#"{{"ph":"M","name":"process_name","pid":2,"args":{{"name":"Ms"}}}}"#
    ));
    let mut batch = Vec::with_capacity(RING);
    // Events drained but held back for the next batch (see `cut`).
    let mut later: Vec<Ev> = Vec::new();
    loop {
        let stop = !matches!(
            done.recv_timeout(core::time::Duration::from_millis(1)),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        );
        // Only events stamped before the drain starts are written now. A thread pushes an
        // event after stamping it, and may push the next one to another P's ring (a
        // syscall begins on the P it leaves and ends on the P it gets): draining the rings
        // one after another could find the end in one ring while the begin went into an
        // already drained one, and the end would come out a batch before its begin and be
        // lost (`torture_traced` catches that). Whatever was pushed before an event stamped before
        // `cut` was pushed before the drain, so it is in this batch or an earlier one.
        let cut = if stop {
            i64::MAX
        } else {
            crate::sys::nanotime()
        };
        batch.clear();
        batch.append(&mut later);
        drain_all(&mut batch);
        batch.retain(|e| e.ts >= start);
        batch.sort_by_key(|e| e.ts);
        let now_part = batch.partition_point(|e| e.ts < cut);
        later.extend_from_slice(&batch[now_part..]);
        for e in &batch[..now_part] {
            j.event(e);
        }
        let now = crate::sys::nanotime();
        j.counters(now);
        if stop {
            // End what is still open.
            let end = j.us(crate::sys::nanotime());
            let open_p: Vec<_> = j.open_p.drain().collect();
            for (t, g) in open_p {
                j.raw(format_args!(r#"{{"ph":"E","pid":1,"tid":{t},"ts":{end},"args":{{"goid":{g},"why":"trace end"}}}}"#));
            }
            let open_m: Vec<_> = j.open_m.drain().collect();
            for (t, g) in open_m {
                j.raw(format_args!(
                    r#"{{"ph":"E","pid":2,"tid":{t},"ts":{end},"args":{{"goid":{g}}}}}"#
                ));
            }
            let dropped: u64 = RINGS
                .iter()
                .chain(core::iter::once(&SHARED))
                .map(|r| r.load(Ordering::Acquire))
                .filter(|r| !r.is_null())
                // SAFETY: never freed.
                .map(|r| unsafe { (*r).dropped.swap(0, Ordering::Relaxed) })
                .sum();
            let _ = write!(
                j.out,
                "\n],\"otherData\":{{\"dropped_events\":\"{dropped}\"}}}}\n"
            );
            let _ = j.out.flush();
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Line, Us};

    /// The byte builder prints what `Us` and `{}` print (the JSON must not change with it).
    #[test]
    fn line_prints_as_fmt() {
        for v in [0u64, 7, 10, 999, 1000, 123_456_789, u64::MAX] {
            let mut l = Line::default();
            l.u(v);
            assert_eq!(String::from_utf8(l.0).unwrap(), v.to_string());
        }
        for ns in [
            0i64,
            1,
            9,
            10,
            99,
            100,
            999,
            1000,
            1001,
            1_234_567,
            -1,
            -1500,
            i64::MIN + 1,
        ] {
            let mut l = Line::default();
            l.us(ns);
            assert_eq!(String::from_utf8(l.0).unwrap(), Us(ns).to_string(), "{ns}");
            if ns >= 0 {
                assert_eq!(
                    Us(ns).to_string(),
                    format!("{:.3}", ns as f64 / 1000.0),
                    "{ns}"
                );
            }
        }
    }
}
