//! Scheduler metrics (`gmp_metrics`, `gmp_metrics_write_prometheus`): Go's runtime/metrics
//! names where Go has the metric, `/gmp/...` where it has not, and a writer of Prometheus'
//! text exposition format.
//!
//! Read without stopping anything, as `gmp_stats` is: counters are exact once the
//! program is quiet, and the goroutines by state are one pass over every G, each status
//! read once (a goroutine that changes status meanwhile is counted in one of the two).

use core::ffi::{CStr, c_int};
use core::fmt::Write as _;
use core::sync::atomic::Ordering;

use super::*;

/// How a metric's value behaves (Prometheus' types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// Only grows.
    Counter = 0,
    /// Goes up and down.
    Gauge = 1,
    /// A distribution: `counts` per bucket (`schedlat`'s bounds), their `value` in all and
    /// their `sum` in the metric's unit.
    Histogram = 2,
}

/// One metric's value. Names and help texts are C strings: the C API hands them out as
/// they are.
#[derive(Clone, Debug)]
pub struct Metric {
    pub name: &'static CStr,
    pub help: &'static CStr,
    pub kind: Kind,
    pub value: u64,
    pub sum: f64,
    pub counts: [u64; schedlat::BUCKETS],
}

/// Buckets of the histograms (`gmp_metric`'s array).
pub const BUCKETS: usize = schedlat::BUCKETS;

/// The upper bound of bucket `i` in seconds (infinite for the last); None past the last.
pub fn bucket_bound_seconds(i: usize) -> Option<f64> {
    if i >= BUCKETS {
        return None;
    }
    Some(schedlat::bucket_bound_ns(i).map_or(f64::INFINITY, |ns| ns as f64 / 1e9))
}

/// Every metric, in a fixed order (the C API's indices).
pub fn read() -> Vec<Metric> {
    schedlat::enable();
    let (mut runnable, mut running, mut waiting, mut syscall) = (0u64, 0u64, 0u64, 0u64);
    for g in super::proc::all_gs() {
        match g.status.load(Ordering::Relaxed) {
            G_RUNNABLE => runnable += 1,
            G_RUNNING => running += 1,
            G_WAITING => waiting += 1,
            G_SYSCALL => syscall += 1,
            _ => {}
        }
    }
    let (counts, sum_ns) = schedlat::snapshot();
    let g = |v: i64| v.max(0) as u64;
    let relaxed = |a: &core::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    use Kind::*;
    let scalars: [(&'static CStr, &'static CStr, Kind, u64); 19] = [
        (
            c"/sched/goroutines:goroutines",
            c"Live goroutines.",
            Gauge,
            g(goroutine_count()),
        ),
        (
            c"/sched/goroutines/runnable:goroutines",
            c"Goroutines ready to run, waiting for a processor.",
            Gauge,
            runnable,
        ),
        (
            c"/sched/goroutines/running:goroutines",
            c"Goroutines running on a processor.",
            Gauge,
            running,
        ),
        (
            c"/sched/goroutines/waiting:goroutines",
            c"Goroutines parked: on a channel, a lock, a timer, the poller.",
            Gauge,
            waiting,
        ),
        (
            c"/sched/goroutines/not-in-go:goroutines",
            c"Goroutines in a blocking call (a system call or gmp_blocking).",
            Gauge,
            syscall,
        ),
        (
            c"/sched/goroutines-created:goroutines",
            c"Goroutines started since the runtime started.",
            Counter,
            spawned_count(),
        ),
        (
            c"/sched/gomaxprocs:threads",
            c"GOMAXPROCS: processors that run goroutines at once.",
            Gauge,
            g(SCHED.gomaxprocs.load(Ordering::Relaxed) as i64),
        ),
        (
            c"/sched/threads/total:threads",
            c"Threads the runtime runs goroutines on (Ms).",
            Gauge,
            g(SCHED.mcount.load(Ordering::Relaxed) as i64),
        ),
        (
            c"/gmp/sched/threads/idle:threads",
            c"Ms asleep without a processor.",
            Gauge,
            g(SCHED.nmidle.load(Ordering::Relaxed) as i64),
        ),
        (
            c"/gmp/sched/procs/idle:threads",
            c"Processors on the idle list.",
            Gauge,
            g(SCHED.npidle.load(Ordering::Relaxed) as i64),
        ),
        (
            c"/gmp/sched/runqueue/global:goroutines",
            c"Goroutines on the global run queue.",
            Gauge,
            g(SCHED.runqsize.load(Ordering::Relaxed) as i64),
        ),
        (
            c"/gmp/sched/steals:goroutines",
            c"Goroutines taken from another processor's run queue.",
            Counter,
            relaxed(&SCHED.steals),
        ),
        (
            c"/gmp/sched/handoffs:events",
            c"Processors handed to another M by an M about to block (Go's handoffp).",
            Counter,
            relaxed(&stopm::HANDOFFS),
        ),
        (
            c"/gmp/sched/preemptions:events",
            c"Preemption requests: a goroutine held its processor for a whole time slice.",
            Counter,
            relaxed(&SCHED.preempt_requests),
        ),
        (
            c"/gmp/sched/preemptions/async:events",
            c"Goroutines stopped by the preemption signal.",
            Counter,
            relaxed(&preempt::DONE),
        ),
        (
            c"/gmp/sched/unseen/signals:events",
            c"Signals to threads asleep in a blocking call the hooks did not see, to hand their processor on.",
            Counter,
            relaxed(&super::unseen::LOOKS_SIGNALLED),
        ),
        (
            c"/gmp/sched/unseen/missed:events",
            c"Of those, signals that found the thread out of that call; each may have ended another call early (EINTR or a short count).",
            Counter,
            relaxed(&super::unseen::MISSED),
        ),
        (
            c"/gmp/netpoll/polls:events",
            c"Polls of the network poller.",
            Counter,
            relaxed(&netpoll::POLLS),
        ),
        (
            c"/gmp/netpoll/readied:goroutines",
            c"Goroutines the network poller made ready.",
            Counter,
            relaxed(&netpoll::READIED),
        ),
    ];
    // One at a time onto the heap: a C caller may be a goroutine with a 16 KiB stack, and
    // a metric is ~300 bytes.
    let mut out = Vec::with_capacity(1 + scalars.len());
    out.push(Metric {
        name: c"/sched/latencies:seconds",
        help: c"Time goroutines spent runnable before they ran (sampled: GMP_DEBUG=schedlatency).",
        kind: Histogram,
        value: counts.iter().sum(),
        sum: sum_ns as f64 / 1e9,
        counts,
    });
    for (name, help, kind, value) in scalars {
        out.push(Metric {
            name,
            help,
            kind,
            value,
            sum: 0.0,
            counts: [0; BUCKETS],
        });
    }
    out
}

/// A metric's name in Prometheus' form: `/sched/latencies:seconds` is
/// `gmp_sched_latencies_seconds`, `/gmp/sched/steals:goroutines` is
/// `gmp_sched_steals_goroutines`, and a counter ends in `_total` (as the Go client library
/// names Go's metrics, with our prefix).
pub fn prometheus_name(m: &Metric) -> String {
    let name = m.name.to_str().unwrap_or_default();
    let path = name.strip_prefix("/gmp").unwrap_or(name);
    let mut s = String::from("gmp");
    for c in path.chars() {
        s.push(if c.is_ascii_alphanumeric() { c } else { '_' });
    }
    if m.kind == Kind::Counter {
        s.push_str("_total");
    }
    s
}

/// Every metric in Prometheus' text exposition format (version 0.0.4).
pub fn prometheus_text() -> String {
    let mut out = String::new();
    for m in read() {
        let name = prometheus_name(&m);
        let kind = match m.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(out, "# HELP {name} {}", m.help.to_str().unwrap_or_default());
        let _ = writeln!(out, "# TYPE {name} {kind}");
        if m.kind != Kind::Histogram {
            let _ = writeln!(out, "{name} {}", m.value);
            continue;
        }
        let mut below = 0u64;
        for (i, c) in m.counts.iter().enumerate() {
            below += c;
            match bucket_bound_seconds(i) {
                Some(b) if b.is_finite() => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"{b:e}\"}} {below}");
                }
                _ => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {below}");
                }
            }
        }
        let _ = writeln!(out, "{name}_sum {:e}", m.sum);
        let _ = writeln!(out, "{name}_count {below}");
    }
    out
}

/// Writes `prometheus_text` to `fd`. Returns 0 or the negative errno of the write.
pub fn write_prometheus(fd: c_int) -> c_int {
    let text = prometheus_text();
    let mut left = text.as_bytes();
    while !left.is_empty() {
        // SAFETY: a valid buffer of `left.len()` bytes.
        let n = unsafe { crate::sys::real::write(fd, left.as_ptr().cast(), left.len()) };
        match n {
            0 => return -libc::EIO,
            n if n < 0 && crate::sys::errno() == libc::EINTR => {}
            n if n < 0 => return -crate::sys::errno(),
            n => left = &left[n as usize..],
        }
    }
    0
}
