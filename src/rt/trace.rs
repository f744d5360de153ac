//! The execution trace (Go's `runtime/trace`, written as Chrome trace-event JSON so that
//! ui.perfetto.dev and chrome://tracing open it): `GMP_TRACE=path`, `gmp_trace_start`,
//! `gmp_trace_stop`.
//!
//! **Recording** is traceevent.rs: per-P rings of 32-byte events, filled by the hooks.
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

use core::sync::atomic::Ordering;
use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;

use super::traceevent::*;
use super::*;

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
    super::hookflags::set(super::hookflags::TRACE, true);
    let thread = std::thread::Builder::new()
        .name("gmp-trace".into())
        .spawn(move || {
            super::threads::register();
            write_loop(file, rx, start);
            super::threads::unregister();
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
    super::hookflags::set(super::hookflags::TRACE, false);
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
    /// The labels (a JSON object) of the goroutines whose next start gets them.
    labels: HashMap<u64, String>,
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
                    .s(r#"""#);
                if let Some(l) = self.labels.remove(&e.a) {
                    self.line.s(r#","labels":"#).s(&l);
                }
                self.line.s(r#"}}"#);
                self.flush_line();
                self.open_p.insert(t, e.a);
            }
            kind::LABELS => {
                let s = e.b as usize as *mut labels::LabelSet;
                // SAFETY: the event carries a reference to the set (traceevent::go_start).
                let json = unsafe { labels::json_of(s) };
                labels::release_set(s);
                self.labels.insert(e.a, json);
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
        labels: HashMap::new(),
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
        batch.retain(|e| {
            let keep = e.ts >= start;
            if !keep && e.kind == kind::LABELS {
                // A late producer's: its reference is given back unwritten.
                labels::release_set(e.b as usize as *mut labels::LabelSet);
            }
            keep
        });
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
