//! Scheduler metrics (`gmp_metrics`, `gmp_metrics_write_prometheus`): Go's runtime/metrics
//! names where Go has the metric, `/gmp/...` where it has not, and a writer of Prometheus'
//! text exposition format.
//!
//! Read without stopping anything, as `gmp_stats` is: counters are exact once the
//! program is quiet, and the goroutines by state are one pass over every G, each status
//! read once (a goroutine that changes status meanwhile is counted in one of the two).

use core::ffi::c_int;
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

/// One metric's value.
#[derive(Clone, Debug)]
pub struct Metric {
    pub name: &'static str,
    pub help: &'static str,
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

fn scalar(name: &'static str, help: &'static str, kind: Kind, value: u64) -> Metric {
    Metric {
        name,
        help,
        kind,
        value,
        sum: 0.0,
        counts: [0; BUCKETS],
    }
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
    use Kind::*;
    // One at a time onto the heap: a C caller may be a goroutine with a 16 KiB stack, and
    // the metrics are ~300 bytes each.
    let mut out = Vec::with_capacity(20);
    out.push(Metric {
        name: "/sched/latencies:seconds",
        help: "Time goroutines spent runnable before they ran (sampled: GMP_DEBUG=schedlatency).",
        kind: Histogram,
        value: counts.iter().sum(),
        sum: sum_ns as f64 / 1e9,
        counts,
    });
    out.push(scalar(
        "/sched/goroutines:goroutines",
        "Live goroutines.",
        Gauge,
        g(goroutine_count()),
    ));
    out.push(scalar(
        "/sched/goroutines/runnable:goroutines",
        "Goroutines ready to run, waiting for a processor.",
        Gauge,
        runnable,
    ));
    out.push(scalar(
        "/sched/goroutines/running:goroutines",
        "Goroutines running on a processor.",
        Gauge,
        running,
    ));
    out.push(scalar(
        "/sched/goroutines/waiting:goroutines",
        "Goroutines parked: on a channel, a lock, a timer, the poller.",
        Gauge,
        waiting,
    ));
    out.push(scalar(
        "/sched/goroutines/not-in-go:goroutines",
        "Goroutines in a blocking call (a system call or gmp_blocking).",
        Gauge,
        syscall,
    ));
    out.push(scalar(
        "/sched/goroutines-created:goroutines",
        "Goroutines started since the runtime started.",
        Counter,
        spawned_count(),
    ));
    out.push(scalar(
        "/sched/gomaxprocs:threads",
        "GOMAXPROCS: processors that run goroutines at once.",
        Gauge,
        g(SCHED.gomaxprocs.load(Ordering::Relaxed) as i64),
    ));
    out.push(scalar(
        "/sched/threads/total:threads",
        "Threads the runtime runs goroutines on (Ms).",
        Gauge,
        g(SCHED.mcount.load(Ordering::Relaxed) as i64),
    ));
    out.push(scalar(
        "/gmp/sched/threads/idle:threads",
        "Ms asleep without a processor.",
        Gauge,
        g(SCHED.nmidle.load(Ordering::Relaxed) as i64),
    ));
    out.push(scalar(
        "/gmp/sched/procs/idle:threads",
        "Processors on the idle list.",
        Gauge,
        g(SCHED.npidle.load(Ordering::Relaxed) as i64),
    ));
    out.push(scalar(
        "/gmp/sched/runqueue/global:goroutines",
        "Goroutines on the global run queue.",
        Gauge,
        g(SCHED.runqsize.load(Ordering::Relaxed) as i64),
    ));
    out.push(scalar(
        "/gmp/sched/steals:goroutines",
        "Goroutines taken from another processor's run queue.",
        Counter,
        SCHED.steals.load(Ordering::Relaxed),
    ));
    out.push(scalar(
        "/gmp/sched/handoffs:events",
        "Processors handed to another M by an M about to block (Go's handoffp).",
        Counter,
        stopm::HANDOFFS.load(Ordering::Relaxed),
    ));
    out.push(scalar(
        "/gmp/sched/preemptions:events",
        "Preemption requests: a goroutine held its processor for a whole time slice.",
        Counter,
        SCHED.preempt_requests.load(Ordering::Relaxed),
    ));
    out.push(scalar(
        "/gmp/sched/preemptions/async:events",
        "Goroutines stopped by the preemption signal.",
        Counter,
        preempt::DONE.load(Ordering::Relaxed),
    ));
    out.push(scalar(
        "/gmp/netpoll/polls:events",
        "Polls of the network poller.",
        Counter,
        netpoll::POLLS.load(Ordering::Relaxed),
    ));
    out.push(scalar(
        "/gmp/netpoll/readied:goroutines",
        "Goroutines the network poller made ready.",
        Counter,
        netpoll::READIED.load(Ordering::Relaxed),
    ));
    out
}

/// A metric's name in Prometheus' form: `/sched/latencies:seconds` is
/// `gmp_sched_latencies_seconds`, `/gmp/sched/steals:goroutines` is
/// `gmp_sched_steals_goroutines`, and a counter ends in `_total` (as the Go client library
/// names Go's metrics, with our prefix).
pub fn prometheus_name(m: &Metric) -> String {
    let path = m.name.strip_prefix("/gmp").unwrap_or(m.name);
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
        let _ = writeln!(out, "# HELP {name} {}", m.help);
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
        if n < 0 {
            // SAFETY: errno is this thread's.
            let e = unsafe { *libc::__errno_location() };
            if e == libc::EINTR {
                continue;
            }
            return -e;
        }
        left = &left[n as usize..];
    }
    0
}
