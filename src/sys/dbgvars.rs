//! `GMP_DEBUG`: the runtime's debug variables, in one table (Go's `dbgvars` in runtime1.go,
//! read from `GODEBUG`). The variable is a comma-separated list of `key=integer` items (a
//! key may also name its values with words, as `leaks=report` for `leaks=1`),
//! read once, the first time any variable is asked for (at the latest when the library
//! is loaded: `asymlock` decides the lock protocol then). Unknown keys are ignored, as Go
//! does; an item without `=`, or a known key with a value that is not an integer, is
//! malformed: the runtime reports it when it starts ([`malformed`]) and the key keeps its
//! default.
//!
//! Nothing here allocates: the first reader may be the library's load-time constructor,
//! before Rust's runtime is set up for us, or a signal handler's callee.

use core::sync::atomic::{AtomicI64, AtomicU32, Ordering};

/// A debug variable (the index of its row in [`DBGVARS`]). Some are read by debug builds
/// only.
#[cfg_attr(not(debug_assertions), allow(dead_code))]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(usize)]
pub(crate) enum Var {
    Schedtrace,
    Scheddetail,
    Checkdead,
    Leaks,
    Sigquit,
    Stacktrim,
    Asyncpreemptoff,
    Asyncpreemptsig,
    Asyncpreemptstress,
    Asymlock,
    Lockspin,
    Schedlatency,
    Stackhwm,
    Handoffdelay,
    Idledelay,
    Mutexspindelay,
    Tracedraindelay,
    Netdns,
    Rwfnowait,
}

/// One row of the table.
pub(crate) struct DbgVar {
    pub(crate) name: &'static str,
    pub(crate) default: i64,
    /// Words the key accepts for some of its values (`off` for 0, …).
    pub(crate) words: &'static [(&'static str, i64)],
}

/// Every debug variable, in [`Var`]'s order (docs/debugging.md says what each does; a
/// test checks that it names them all).
pub(crate) static DBGVARS: [DbgVar; 19] = [
    DbgVar {
        name: "schedtrace",
        default: 0,
        words: &[],
    },
    DbgVar {
        name: "scheddetail",
        default: 0,
        words: &[],
    },
    DbgVar {
        name: "checkdead",
        default: 1,
        words: &[],
    },
    DbgVar {
        name: "leaks",
        default: 1,
        words: &[("off", 0), ("report", 1), ("abort", 2)],
    },
    DbgVar {
        name: "sigquit",
        default: 1,
        words: &[],
    },
    DbgVar {
        name: "stacktrim",
        default: 1000,
        words: &[],
    },
    DbgVar {
        name: "asyncpreemptoff",
        default: 0,
        words: &[],
    },
    DbgVar {
        name: "asyncpreemptsig",
        default: 0,
        words: &[],
    },
    DbgVar {
        name: "asyncpreemptstress",
        default: 0,
        words: &[],
    },
    DbgVar {
        name: "asymlock",
        default: 1,
        words: &[],
    },
    DbgVar {
        name: "lockspin",
        default: 1,
        words: &[],
    },
    DbgVar {
        name: "schedlatency",
        // Not given: timed windows start at the first read of the metrics, one wait in 8.
        default: -1,
        words: &[("off", 0)],
    },
    DbgVar {
        name: "stackhwm",
        // Not given: at most one goroutine start per M in `rt::stackhwm::PERIOD_NS`.
        default: -1,
        words: &[("off", 0)],
    },
    DbgVar {
        name: "handoffdelay",
        default: 0,
        words: &[],
    },
    DbgVar {
        name: "idledelay",
        default: 0,
        words: &[],
    },
    DbgVar {
        name: "mutexspindelay",
        default: 0,
        words: &[],
    },
    DbgVar {
        name: "tracedraindelay",
        default: 0,
        words: &[],
    },
    DbgVar {
        name: "netdns",
        // Not given: the runtime's resolver where the configuration allows (`net::conf`).
        default: 0,
        words: &[("go", 1), ("cgo", 2)],
    },
    DbgVar {
        name: "rwfnowait",
        // 0: the hooks' per-call non-blocking reads and writes never try RWF_NOWAIT, as
        // on a kernel or emulator without it (`poll::readv_nowait`).
        default: 1,
        words: &[],
    },
];

const N: usize = DBGVARS.len();

/// The values, once parsed.
static VALUES: [AtomicI64; N] = [const { AtomicI64::new(0) }; N];
/// 0: not parsed, 1: being parsed, 2: parsed (`VALUES` final), 3: parsed, malformed.
static STATE: AtomicU32 = AtomicU32::new(0);

/// The value of `v`: `GMP_DEBUG`'s, or the default.
#[inline]
pub(crate) fn get(v: Var) -> i64 {
    if STATE.load(Ordering::Acquire) < 2 {
        parse_once();
    }
    VALUES[v as usize].load(Ordering::Relaxed)
}

/// Whether `GMP_DEBUG` had a malformed item (the runtime says so when it starts).
pub(crate) fn malformed() -> bool {
    if STATE.load(Ordering::Acquire) < 2 {
        parse_once();
    }
    STATE.load(Ordering::Acquire) == 3
}

#[cold]
fn parse_once() {
    if STATE
        .compare_exchange(0, 1, Ordering::Acquire, Ordering::Acquire)
        .is_err()
    {
        while STATE.load(Ordering::Acquire) < 2 {
            super::osyield();
        }
        return;
    }
    // SAFETY: getenv with a NUL-terminated name; the result, if not null, is a
    // NUL-terminated string, read before anything of ours could change the environment.
    let env = unsafe {
        let p = libc::getenv(c"GMP_DEBUG".as_ptr());
        if p.is_null() {
            &[][..]
        } else {
            core::ffi::CStr::from_ptr(p).to_bytes()
        }
    };
    let mut vals = [0i64; N];
    let bad = parse(env, &mut vals).is_some();
    for (slot, v) in VALUES.iter().zip(vals) {
        slot.store(v, Ordering::Relaxed);
    }
    STATE.store(if bad { 3 } else { 2 }, Ordering::Release);
}

/// Fills `vals` from `env` (defaults for keys it lacks; the last item of a key wins) and
/// returns the first malformed item, if any.
pub(crate) fn parse<'a>(env: &'a [u8], vals: &mut [i64; N]) -> Option<&'a [u8]> {
    for (v, d) in vals.iter_mut().zip(&DBGVARS) {
        *v = d.default;
    }
    let mut bad = None;
    for item in env.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
        if item.is_empty() {
            continue;
        }
        let Some(eq) = item.iter().position(|&b| b == b'=') else {
            bad = bad.or(Some(item));
            continue;
        };
        let (key, val) = (item[..eq].trim_ascii(), item[eq + 1..].trim_ascii());
        let Some(i) = DBGVARS.iter().position(|d| d.name.as_bytes() == key) else {
            continue;
        };
        let word = DBGVARS[i].words.iter().find(|(w, _)| w.as_bytes() == val);
        match word.map(|&(_, n)| n).or_else(|| parse_i64(val)) {
            Some(n) => vals[i] = n,
            None => bad = bad.or(Some(item)),
        }
    }
    bad
}

/// A decimal integer with an optional sign.
fn parse_i64(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add((d - b'0') as i64)?;
    }
    Some(if neg { -n } else { n })
}

/// Test hooks, debug builds only: sleeps for the microseconds `v` asks for, to widen a
/// race window on purpose.
#[cfg(debug_assertions)]
pub(crate) fn delay(v: Var) {
    let us = get(v);
    if us > 0 {
        std::thread::sleep(std::time::Duration::from_micros(us as u64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(env: &str) -> ([i64; N], Option<String>) {
        let mut v = [0; N];
        let bad = parse(env.as_bytes(), &mut v).map(|b| String::from_utf8_lossy(b).into_owned());
        (v, bad)
    }

    #[test]
    fn table_is_in_var_order() {
        assert_eq!(DBGVARS[Var::Schedtrace as usize].name, "schedtrace");
        assert_eq!(
            DBGVARS[Var::Tracedraindelay as usize].name,
            "tracedraindelay"
        );
        assert_eq!(DBGVARS[Var::Asymlock as usize].name, "asymlock");
        for (i, a) in DBGVARS.iter().enumerate() {
            assert!(
                DBGVARS[i + 1..].iter().all(|b| b.name != a.name),
                "{} twice",
                a.name
            );
        }
    }

    #[test]
    fn the_user_docs_name_every_variable() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/debugging.md");
        let docs = std::fs::read_to_string(path).unwrap();
        for d in &DBGVARS {
            assert!(
                docs.contains(&format!("{}=", d.name)),
                "docs/debugging.md lacks {}",
                d.name
            );
        }
    }

    #[test]
    fn parses_items_and_keeps_defaults() {
        let (v, bad) = vals("schedtrace=100, scheddetail=1,checkdead=0,other=x,,stacktrim=-5");
        assert_eq!(bad, None);
        assert_eq!(v[Var::Schedtrace as usize], 100);
        assert_eq!(v[Var::Scheddetail as usize], 1);
        assert_eq!(v[Var::Checkdead as usize], 0);
        assert_eq!(v[Var::Stacktrim as usize], -5);
        assert_eq!(v[Var::Asymlock as usize], 1);
        assert_eq!(v[Var::Sigquit as usize], 1);
        let (v, _) = vals("asymlock=0,asymlock=1");
        assert_eq!(v[Var::Asymlock as usize], 1, "the last item wins");
    }

    #[test]
    fn takes_a_keys_words_for_its_values() {
        let (v, bad) = vals("leaks=abort");
        assert_eq!(bad, None);
        assert_eq!(v[Var::Leaks as usize], 2);
        let (v, _) = vals("leaks=off");
        assert_eq!(v[Var::Leaks as usize], 0);
        let (v, bad) = vals("leaks=report,checkdead=report");
        assert_eq!(v[Var::Leaks as usize], 1);
        assert_eq!(
            bad.as_deref(),
            Some("checkdead=report"),
            "words are the key's own"
        );
        let (v, bad) = vals("leaks=loud");
        assert_eq!(bad.as_deref(), Some("leaks=loud"));
        assert_eq!(
            v[Var::Leaks as usize],
            1,
            "a malformed item keeps the default"
        );
    }

    #[test]
    fn reports_the_first_malformed_item() {
        let (v, bad) = vals("scheddetail=1,schedtrace=x,checkdead,sigquit=0");
        assert_eq!(bad.as_deref(), Some("schedtrace=x"));
        assert_eq!(
            v[Var::Schedtrace as usize],
            0,
            "a malformed value keeps the default"
        );
        assert_eq!(v[Var::Sigquit as usize], 0, "later items still count");
        assert_eq!(vals("checkdead").1.as_deref(), Some("checkdead"));
        assert_eq!(
            vals("schedtrace=99999999999999999999").1.as_deref(),
            Some("schedtrace=99999999999999999999")
        );
        assert_eq!(vals("").1, None);
    }
}
