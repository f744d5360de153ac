//! Seeing inside the runtime: the goroutine dump, leak reports and the execution trace.

use core::ffi::{c_char, c_int, c_void};

use super::boundary;
use crate::rt;

/// Writes every goroutine (id, status or wait reason, how long it has waited, locked or
/// pinned, a symbolized backtrace, who started it) to file descriptor `fd`, in the format
/// of Go's traceback (`goroutine 7 [chan receive, 3 minutes]:`), followed by the threads
/// outside the runtime blocked in gmp calls. Returns 0, or -EBADF if fd is negative.
///
/// Backtraces follow frame pointers from each goroutine's saved context: compile with
/// -fno-omit-frame-pointer for complete traces, and link executables with -rdynamic for
/// their function names. A running goroutine's stack is shown only for the caller. The
/// same dump is written to stderr on SIGQUIT (then the process exits with status 2, as
/// Go's runtime does) unless GMP_DEBUG=sigquit=0 or the program installed its own
/// SIGQUIT handler before the runtime started.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_dump(fd: c_int) -> c_int {
    boundary("gmp_dump", || {
        if fd < 0 {
            return -libc::EBADF;
        }
        rt::init();
        rt::dump::dump_to_fd(fd);
        0
    })
}

/// Starts writing an execution trace to the file at `path` (created or truncated), in
/// libgmp's compact binary form; `scripts/trace2json.py` (installed as `gmp-trace2json`)
/// turns it into Chrome trace-event JSON, which ui.perfetto.dev and chrome://tracing open.
/// One track per P with a slice for each goroutine run (named after its entry function,
/// with its labels), instants for spawns, unparks (with the waker), steals, preemptions
/// and syscall hand-offs, one track per thread with its blocking calls, and counters
/// (runnable goroutines, idle Ps, threads). `GMP_TRACE=path` starts one when the runtime
/// starts (finished at exit). Returns 0, -EINVAL if `path` is NULL or not UTF-8, -EBUSY
/// if a trace or the flight recorder is running, or the negative errno of creating the
/// file.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_trace_start(path: *const c_char) -> c_int {
    boundary("gmp_trace_start", || {
        if path.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: the caller passes a NUL-terminated string (checked non-null above).
        let Ok(p) = unsafe { core::ffi::CStr::from_ptr(path) }.to_str() else {
            return -libc::EINVAL;
        };
        rt::init();
        match rt::trace::start(p) {
            Ok(()) => 0,
            Err(e) => -e,
        }
    })
}

/// Stops the trace gmp_trace_start (or GMP_TRACE) started and finishes its file (slices
/// still open end at this moment). Returns 0, or -EINVAL if no trace is running.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_trace_stop() -> c_int {
    boundary("gmp_trace_stop", || match rt::trace::stop() {
        Ok(()) => 0,
        Err(e) => -e,
    })
}

/// Starts the flight recorder (Go's `trace.FlightRecorder`): the execution trace's
/// events are kept in memory, the oldest overwritten, holding at least the last `seconds`
/// seconds (0: 10) within `mib` MiB (0: 16; at most 1024), until `gmp_trace_flight_write`
/// writes them. `GMP_TRACE=flight[:SECONDS[:MIB]]` starts it when the runtime starts.
/// While it runs, SIGQUIT (beside the goroutine dump) and a deadlock report also write
/// the window, to `gmp-flight-PID-N.trace` in `GMP_TRACE_DIR` (default: the current
/// directory). Returns 0, or -EBUSY if a trace or the flight recorder is running.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_trace_flight_start(seconds: u32, mib: u32) -> c_int {
    boundary("gmp_trace_flight_start", || {
        rt::init();
        match rt::trace::flight_start(seconds, mib) {
            Ok(()) => 0,
            Err(e) => -e,
        }
    })
}

/// Writes the flight recorder's window to file descriptor `fd`, in the execution trace's
/// binary form (`scripts/trace2json.py` converts it); the recorder keeps running. Returns
/// 0, -EBADF if fd is negative, -EINVAL if the flight recorder is not running, or the
/// negative errno of a failed write.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_trace_flight_write(fd: c_int) -> c_int {
    boundary("gmp_trace_flight_write", || {
        if fd < 0 {
            return -libc::EBADF;
        }
        match rt::trace::flight_write(fd, b"gmp_trace_flight_write") {
            Ok(()) => 0,
            Err(e) => -e,
        }
    })
}

/// Makes the flight recorder write its window (to a file, as on SIGQUIT) when a goroutine
/// waited longer than `ns` nanoseconds from runnable to running; at most one such file a
/// window. 0 turns it off. `GMP_TRACE_LATENCY=50ms` sets it at start-up. While it is on,
/// every wait is timed: a switch costs two clock reads more. Returns 0, or -EINVAL if `ns`
/// is negative.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_trace_flight_latency(ns: i64) -> c_int {
    boundary("gmp_trace_flight_latency", || {
        if ns < 0 {
            return -libc::EINVAL;
        }
        rt::init();
        rt::trace::flight_latency(ns as u64);
        0
    })
}

/// Stops the flight recorder; what it held is dropped. Returns 0, or -EINVAL if it is not
/// running.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_trace_flight_stop() -> c_int {
    boundary("gmp_trace_flight_stop", || match rt::trace::flight_stop() {
        Ok(()) => 0,
        Err(e) => -e,
    })
}

/// A goroutine-leak handler (`gmp_set_leak_handler`): the goroutine's id, its wait reason
/// ("chan receive", "chan send"; valid for the call) and the handler's argument.
pub type gmp_leak_fn =
    Option<unsafe extern "C" fn(goid: i64, reason: *const c_char, arg: *mut c_void)>;

/// Sets what happens when the last handle of a channel is released while goroutines wait
/// on it in a plain send or receive without a deadline (nothing can ever wake them):
/// `fn(goid, reason, arg)` is called once per such goroutine, on the thread that released
/// the handle, after the channel is unlocked; it must not block. NULL restores the
/// default, a record per goroutine on stderr in the dump's format (wait reason, backtrace,
/// creator). `GMP_DEBUG=leaks=off` turns the reports off, `leaks=abort` aborts after them.
/// A select, a timed operation and a thread outside the runtime are never reported
/// (another case or the deadline may still end their wait). Returns 0.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_set_leak_handler(f: gmp_leak_fn, arg: *mut c_void) -> c_int {
    boundary("gmp_set_leak_handler", || {
        rt::leaks::set_handler(f, arg);
        0
    })
}

/// Writes the goroutines reported as leaked so far (see `gmp_set_leak_handler`; they wait
/// forever, so they are all still there) to file descriptor `fd`, in the shape of Go's
/// `goroutineleak` profile: `goroutineleak profile: total N`, then a dump record for each
/// (wait reason, backtrace, creator). Goroutines on orphaned channels only: a mutex or a
/// WaitGroup is memory the program owns, and the runtime cannot prove nobody will unlock
/// or finish it. Returns 0, or -EBADF if fd is negative.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_leaks(fd: c_int) -> c_int {
    boundary("gmp_leaks", || {
        if fd < 0 {
            return -libc::EBADF;
        }
        rt::leaks::write_profile(fd);
        0
    })
}

/// Buckets of a histogram metric (`gmp_metric::buckets`).
pub const GMP_METRIC_BUCKETS: usize = 32;

/// A metric that only grows.
pub const GMP_METRIC_COUNTER: u32 = 0;
/// A metric that goes up and down.
pub const GMP_METRIC_GAUGE: u32 = 1;
/// A distribution (`gmp_metric::buckets`).
pub const GMP_METRIC_HISTOGRAM: u32 = 2;

// The header's literals (cbindgen writes literals only) are the runtime's values.
const _: () = assert!(
    GMP_METRIC_BUCKETS == rt::metrics::BUCKETS
        && GMP_METRIC_COUNTER == rt::metrics::Kind::Counter as u32
        && GMP_METRIC_GAUGE == rt::metrics::Kind::Gauge as u32
        && GMP_METRIC_HISTOGRAM == rt::metrics::Kind::Histogram as u32
);

/// One scheduler metric (`gmp_metrics`).
#[repr(C)]
pub struct gmp_metric {
    /// Go's runtime/metrics name where Go has the metric (`/sched/latencies:seconds`,
    /// `/sched/goroutines:goroutines`), else `/gmp/...`: the unit after the colon. A
    /// static string.
    pub name: *const c_char,
    /// One line saying what it counts. A static string.
    pub help: *const c_char,
    /// GMP_METRIC_COUNTER, GMP_METRIC_GAUGE or GMP_METRIC_HISTOGRAM.
    pub kind: u32,
    /// The value; for a histogram, the number of samples.
    pub value: u64,
    /// A histogram's samples added up, in its unit (seconds).
    pub sum: f64,
    /// A histogram's samples per bucket (not cumulative): bucket `i` holds those below
    /// `gmp_metric_bucket_bound(i)` and not below bucket `i - 1`'s bound. Zero otherwise.
    pub buckets: [u64; GMP_METRIC_BUCKETS],
}

/// Reads the scheduler's metrics into `out[0..n]` (as many as fit) and returns how many
/// there are, so that `gmp_metrics(NULL, 0)` sizes the array. Returns -EINVAL if `out` is
/// NULL and `n` is not 0. Read without stopping anything (as `gmp_stats`); the order is
/// the same at every call.
///
/// The scheduling latency histogram (`/sched/latencies:seconds`, how long goroutines
/// waited runnable before they ran) is a sample: from the first read on, the runtime
/// times one wait in 8 during 1 ms in every 100 (`GMP_DEBUG=schedlatency=N`: one in N all
/// the time; `off`: never).
///
/// # Safety
/// `out` is NULL or writable for `n` elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_metrics(out: *mut gmp_metric, n: usize) -> c_int {
    boundary("gmp_metrics", || {
        if out.is_null() && n != 0 {
            return -libc::EINVAL;
        }
        rt::init();
        let all = rt::metrics::read();
        for (i, m) in all.iter().take(n).enumerate() {
            // SAFETY: i < n, and the caller promises out is writable for n elements.
            unsafe {
                out.add(i).write(gmp_metric {
                    name: m.name.as_ptr(),
                    help: m.help.as_ptr(),
                    kind: m.kind as u32,
                    value: m.value,
                    sum: m.sum,
                    buckets: m.counts,
                })
            };
        }
        all.len() as c_int
    })
}

/// Stores the upper bound of histogram bucket `i` in seconds in `*out`: 2^(i+7)
/// nanoseconds (128 ns for bucket 0, about 137 s for bucket 30), and infinity for the last
/// bucket. Returns 0, or -EINVAL if `out` is NULL or `i` is not below GMP_METRIC_BUCKETS.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_metric_bucket_bound(i: usize, out: *mut f64) -> c_int {
    boundary("gmp_metric_bucket_bound", || {
        match rt::metrics::bucket_bound_seconds(i) {
            // SAFETY: non-null; the caller promises it is writable.
            Some(b) if !out.is_null() => unsafe { out.write(b) },
            _ => return -libc::EINVAL,
        }
        0
    })
}

/// Writes every metric to file descriptor `fd` in Prometheus' text exposition format
/// (version 0.0.4), for a scrape endpoint or a node exporter's textfile directory: each
/// name as `gmp_` followed by the metric's path and unit (`gmp_sched_latencies_seconds`,
/// `gmp_sched_goroutines_goroutines`; counters end in `_total`), with HELP and TYPE lines
/// and a histogram's cumulative `_bucket{le=...}`, `_sum` and `_count`. Returns 0, -EBADF
/// if `fd` is negative, or the negative errno of a failed write (a non-blocking fd that is
/// full gives -EAGAIN).
#[unsafe(no_mangle)]
pub extern "C" fn gmp_metrics_write_prometheus(fd: c_int) -> c_int {
    boundary("gmp_metrics_write_prometheus", || {
        if fd < 0 {
            return -libc::EBADF;
        }
        rt::init();
        rt::metrics::write_prometheus(fd)
    })
}

/// The stack high-water mark of one start function (`gmp_stack_usage`).
#[repr(C)]
pub struct gmp_stack_mark {
    /// The start function (`gmp_go`'s `f`).
    pub func: super::gmp_func,
    /// Its symbol name, or NULL when its object does not export it (link executables with
    /// -rdynamic). Valid while that object stays loaded.
    pub name: *const c_char,
    /// The deepest any of its measured goroutines went: bytes from the top of the stack
    /// down to the lowest page touched (a multiple of the page size).
    pub high_water: usize,
    /// The usable size of the stack of its goroutine measured last.
    pub stack_size: usize,
    /// Its goroutines measured.
    pub samples: u64,
}

/// Reads the stack high-water marks measured so far, one per start function, deepest
/// first, into `out[0..n]` (as many as fit), and returns how many there are, so that
/// `gmp_stack_usage(NULL, 0)` sizes the array. Returns -EINVAL if `out` is NULL and `n`
/// is not 0.
///
/// The marks come from a sample of the goroutines: each thread measures at most one
/// goroutine it starts every 4 ms, which runs on a stack whose pages were all given back
/// first; when it ends the runtime asks the kernel which pages it touched (`mincore`), so
/// a mark is exact to the page. `GMP_DEBUG=stackhwm=N` measures one start in N instead (1:
/// every goroutine), `stackhwm=off` none. `gmp_stats` has the deepest mark of all; the goroutine dump lists
/// them all.
///
/// # Safety
/// `out` is NULL or writable for `n` elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_stack_usage(out: *mut gmp_stack_mark, n: usize) -> c_int {
    boundary("gmp_stack_usage", || {
        if out.is_null() && n != 0 {
            return -libc::EINVAL;
        }
        let marks = rt::stackhwm::marks();
        for (i, m) in marks.iter().take(n).enumerate() {
            // SAFETY: entries are the addresses of the entry functions goroutines started
            // with (never 0), of exactly gmp_func's type.
            let func = unsafe {
                core::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void)>(m.entry)
            };
            // SAFETY: i < n, and the caller promises out is writable for n elements.
            unsafe {
                out.add(i).write(gmp_stack_mark {
                    func: Some(func),
                    name: symbol_name(m.entry),
                    high_water: m.high,
                    stack_size: m.size,
                    samples: m.samples,
                })
            };
        }
        marks.len() as c_int
    })
}

/// The name of the symbol that starts exactly at `addr`, or NULL.
fn symbol_name(addr: usize) -> *const c_char {
    // SAFETY: Dl_info is plain data; dladdr only reads the loader's tables and fills it.
    unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(addr as *const c_void, &mut info) != 0 && info.dli_saddr as usize == addr {
            info.dli_sname
        } else {
            core::ptr::null()
        }
    }
}

/// Sets the label `key` of the calling goroutine to `value`, or removes it when `value` is
/// NULL (Go's `pprof.SetGoroutineLabels`). Goroutines started afterwards, by it or by
/// the goroutines it starts, inherit its labels as they are then; later changes on either
/// side are their own. The goroutine dump shows them (`labels:{"key": "value"}`). Called
/// on a thread outside the runtime, it sets the labels that thread gives the goroutines it
/// starts. Returns 0, or -EINVAL if `key` is NULL or empty.
///
/// # Safety
/// `key` is NULL or a NUL-terminated string; so is `value`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_labels_set(key: *const c_char, value: *const c_char) -> c_int {
    boundary("gmp_labels_set", || {
        if key.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: the caller passes NUL-terminated strings (key checked non-null).
        let k = unsafe { core::ffi::CStr::from_ptr(key) }.to_bytes();
        if k.is_empty() {
            return -libc::EINVAL;
        }
        // SAFETY: as above, for a non-null value.
        let v = (!value.is_null()).then(|| unsafe { core::ffi::CStr::from_ptr(value) }.to_bytes());
        rt::labels::set(k, v);
        0
    })
}

/// Copies the value of the calling goroutine's label `key` (or the calling thread's, as
/// for `gmp_labels_set`) into `buf`, NUL-terminated and cut to `len - 1` bytes, and
/// returns its full length, as snprintf does (`gmp_labels_get(key, NULL, 0)` sizes it).
/// Returns -ENOENT if the label is not set, -EINVAL if `key` is NULL, or `buf` is NULL
/// and `len` is not 0.
///
/// # Safety
/// `key` is NULL or a NUL-terminated string; `buf` is NULL or writable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gmp_labels_get(key: *const c_char, buf: *mut c_char, len: usize) -> c_int {
    boundary("gmp_labels_get", || {
        if key.is_null() || (buf.is_null() && len != 0) {
            return -libc::EINVAL;
        }
        // SAFETY: the caller passes a NUL-terminated string (checked non-null).
        let k = unsafe { core::ffi::CStr::from_ptr(key) }.to_bytes();
        rt::labels::get(k, |v| match v {
            None => -libc::ENOENT,
            Some(v) => {
                if len > 0 {
                    let n = v.len().min(len - 1);
                    // SAFETY: buf is writable for len > n bytes (caller contract).
                    unsafe {
                        core::ptr::copy_nonoverlapping(v.as_ptr(), buf.cast::<u8>(), n);
                        *buf.add(n) = 0;
                    }
                }
                v.len().min(c_int::MAX as usize) as c_int
            }
        })
    })
}
