//! Start-up configuration: environment variables and the default GOMAXPROCS.
//!
//! - `GMP_MAXPROCS=N` — GOMAXPROCS, 1..=1024 (default: CPUs in the affinity mask, capped
//!   by the cgroup CPU quota rounded up, at least 1).
//! - `GMP_STACK_SIZE=BYTES` (suffix K, M or G allowed) — default goroutine stack size,
//!   16 KiB..=1 GiB, rounded up to a page.
//! - `GMP_MAX_THREADS=N` — the thread-count fuse, 1..=2^31-1 (default 10,000).
//! - `GMP_DEBUG=schedtrace=MS[,scheddetail=1]` — Go's scheduler trace on stderr.
//!
//! The ranges are those of the matching API calls. Malformed and out-of-range values are
//! reported on stderr (`gmp: ignoring NAME="value"`) and the default is used: a value
//! silently clamped would make the environment accept what the API refuses.

use super::{DEFAULT_MAX_THREADS, MAX_PROCS};
use crate::stack;

pub(super) struct Config {
    pub maxprocs: i32,
    pub stack_size: usize,
    pub max_threads: i32,
    pub trace: Option<TraceConfig>,
}

impl Config {
    pub fn from_env() -> Config {
        let mut c = Config {
            maxprocs: default_maxprocs(),
            stack_size: stack::DEFAULT_STACK,
            max_threads: DEFAULT_MAX_THREADS,
            trace: None,
        };
        if let Some(v) = env("GMP_MAXPROCS") {
            // The range gmp_maxprocs accepts; a value outside it is ignored like a
            // malformed one (not clamped: the caller asked for something we do not do).
            match v.trim().parse::<i32>() {
                Ok(n) if (1..=MAX_PROCS as i32).contains(&n) => c.maxprocs = n,
                _ => warn("GMP_MAXPROCS", &v),
            }
        }
        if let Some(v) = env("GMP_STACK_SIZE") {
            match parse_size(&v) {
                // As gmp_set_default_stack_size: in range, rounded up to a page.
                Some(n) if (stack::MIN_STACK..=stack::MAX_STACK).contains(&n) => {
                    let page = crate::sys::page_size();
                    c.stack_size = n.div_ceil(page) * page;
                }
                _ => warn("GMP_STACK_SIZE", &v),
            }
        }
        if let Some(v) = env("GMP_MAX_THREADS") {
            match v.trim().parse::<i32>() {
                Ok(n) if n >= 1 => c.max_threads = n,
                _ => warn("GMP_MAX_THREADS", &v),
            }
        }
        c.trace = TraceConfig::from_dbgvars();
        if crate::sys::dbgvars::malformed() {
            let v = std::env::var("GMP_DEBUG").unwrap_or_default();
            let mut vals = [0; crate::sys::dbgvars::DBGVARS.len()];
            let item = crate::sys::dbgvars::parse(v.as_bytes(), &mut vals).unwrap_or_default();
            let item = String::from_utf8_lossy(item);
            crate::sys::write_stderr(
                format!("gmp: ignoring GMP_DEBUG={v:?} (malformed item {item:?})\n").as_bytes(),
            );
        }
        c
    }
}

/// The scheduler trace `GMP_DEBUG` asks for (schedtrace.rs prints it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceConfig {
    pub interval_ms: u64,
    pub detail: bool,
}

impl TraceConfig {
    /// The trace `GMP_DEBUG` asks for (`schedtrace=MS`, `scheddetail=1`), if any.
    pub fn from_dbgvars() -> Option<TraceConfig> {
        use crate::sys::dbgvars::{Var, get};
        let interval = get(Var::Schedtrace);
        (interval > 0).then_some(TraceConfig {
            interval_ms: interval as u64,
            detail: get(Var::Scheddetail) != 0,
        })
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn warn(name: &str, value: &str) {
    crate::sys::write_stderr(format!("gmp: ignoring {name}={value:?}\n").as_bytes());
}

/// Parses "65536", "64K", "1M", "1G".
pub(super) fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1usize << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.trim().parse::<usize>().ok()?.checked_mul(mult)
}

/// CPUs in the process's affinity mask, as it was when the library was loaded (so not
/// narrowed by a thread that confined itself before starting the runtime; os_linux.rs).
pub fn num_cpu() -> i32 {
    super::os_linux::num_cpu()
}

/// GOMAXPROCS by default: the CPUs in the affinity mask, capped by the cgroup CPU quota
/// (rounded up), at least 1, at most MAX_PROCS.
pub fn default_maxprocs() -> i32 {
    let mut n = num_cpu().max(1);
    if let Some(q) = cgroup_cpu_limit() {
        n = n.min(q);
    }
    n.clamp(1, MAX_PROCS as i32)
}

/// The CPU limit of the cgroup this process is in (v2 `cpu.max`, or v1 `cpu.cfs_quota_us`
/// over `cpu.cfs_period_us`), rounded up; the tightest along the path to the root.
fn cgroup_cpu_limit() -> Option<i32> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut best: Option<i32> = None;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let limits = if id == "0" && controllers.is_empty() {
            walk_up("/sys/fs/cgroup", path, |dir| {
                std::fs::read_to_string(format!("{dir}/cpu.max"))
                    .ok()
                    .and_then(|s| parse_cpu_max(&s))
            })
        } else if controllers.split(',').any(|c| c == "cpu") {
            let mut r = None;
            for mount in [
                "/sys/fs/cgroup/cpu,cpuacct",
                "/sys/fs/cgroup/cpu",
                "/sys/fs/cgroup/cpuacct,cpu",
            ] {
                r = walk_up(mount, path, |dir| {
                    let q = std::fs::read_to_string(format!("{dir}/cpu.cfs_quota_us")).ok()?;
                    let p = std::fs::read_to_string(format!("{dir}/cpu.cfs_period_us")).ok()?;
                    parse_cfs(&q, &p)
                });
                if r.is_some() {
                    break;
                }
            }
            r
        } else {
            None
        };
        if let Some(l) = limits {
            best = Some(best.map_or(l, |b| b.min(l)));
        }
    }
    best
}

/// Applies `read` to `root + path` and each of its ancestors up to `root`; returns the
/// smallest limit found.
fn walk_up(root: &str, path: &str, read: impl Fn(&str) -> Option<i32>) -> Option<i32> {
    let mut best: Option<i32> = None;
    let mut p = path.trim_end_matches('/').to_string();
    loop {
        if let Some(l) = read(&format!("{root}{p}")) {
            best = Some(best.map_or(l, |b| b.min(l)));
        }
        match p.rfind('/') {
            Some(i) => p.truncate(i),
            None => break,
        }
        if p.is_empty() {
            if let Some(l) = read(root) {
                best = Some(best.map_or(l, |b| b.min(l)));
            }
            break;
        }
    }
    best
}

/// cgroup v2 `cpu.max`: "max 100000" (no limit) or "QUOTA PERIOD".
pub(super) fn parse_cpu_max(s: &str) -> Option<i32> {
    let mut it = s.split_whitespace();
    let quota = it.next()?;
    let period: u64 = it.next().map_or(Some(100_000), |p| p.parse().ok())?;
    if quota == "max" || period == 0 {
        return None;
    }
    let quota: u64 = quota.parse().ok()?;
    Some(quota.div_ceil(period).max(1) as i32)
}

/// cgroup v1: quota −1 means no limit.
pub(super) fn parse_cfs(quota: &str, period: &str) -> Option<i32> {
    let q: i64 = quota.trim().parse().ok()?;
    let p: i64 = period.trim().parse().ok()?;
    if q <= 0 || p <= 0 {
        return None;
    }
    Some(((q + p - 1) / p).max(1) as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_max_parsing() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("200000 100000\n"), Some(2));
        assert_eq!(parse_cpu_max("150000 100000"), Some(2)); // rounded up
        assert_eq!(parse_cpu_max("50000 100000"), Some(1));
        assert_eq!(parse_cpu_max("garbage"), None);
    }

    #[test]
    fn cfs_parsing() {
        assert_eq!(parse_cfs("-1\n", "100000\n"), None);
        assert_eq!(parse_cfs("250000", "100000"), Some(3));
        assert_eq!(parse_cfs("1000", "100000"), Some(1));
    }

    #[test]
    fn size_parsing() {
        assert_eq!(parse_size("65536"), Some(65536));
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size("1m"), Some(1 << 20));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
    }

    #[test]
    fn default_maxprocs_is_sane() {
        let n = default_maxprocs();
        assert!(n >= 1 && n <= num_cpu().max(1));
    }
}
