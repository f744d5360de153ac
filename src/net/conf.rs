//! Which resolver serves a lookup (Go's `conf.go`, `nss.go`): the `hosts:` line of
//! `/etc/nsswitch.conf` gives the order of the sources, and only `files` and `dns` are
//! ours. Anything else there (`mdns4_minimal`, `resolve`, `myhostname`, `ldap`…), or a
//! `[NOTFOUND=return]`-style action other than the defaults, means glibc's NSS modules
//! must answer: the lookup goes to libc through the syscall hand-off, as Go falls back to
//! cgo. `GMP_DEBUG=netdns=go|cgo` forces one side.
//!
//! Also the configuration files' location: `/`, or `GMP_RESOLV_ROOT` for tests (ignored in
//! secure-execution mode, as glibc ignores its resolver variables there).

use std::ffi::CString;

use crate::sys::dbgvars::{self, Var};

/// The directory the configuration files are read under (`etc/resolv.conf`…).
pub(crate) fn root() -> String {
    // SAFETY: getauxval has no preconditions.
    if unsafe { libc::getauxval(libc::AT_SECURE) } != 0 {
        return String::new();
    }
    // SAFETY: getenv with a NUL-terminated name; a non-null result is a C string, copied
    // at once.
    unsafe {
        let p = libc::getenv(c"GMP_RESOLV_ROOT".as_ptr());
        if p.is_null() {
            return String::new();
        }
        let s = core::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
        s.trim_end_matches('/').to_string()
    }
}

/// Reads a configuration file whole, through the raw system calls (never through the
/// interposer's own hooks). None if it cannot be read.
pub(crate) fn read_file(path: &str) -> Option<Vec<u8>> {
    let c = CString::new(path).ok()?;
    // SAFETY: a NUL-terminated path; no mode is needed without O_CREAT.
    let fd = unsafe { crate::sys::real::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let ok = loop {
        // SAFETY: buf is writable for its length; fd is ours.
        let n = unsafe { crate::sys::real::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 && crate::sys::errno() == libc::EINTR {
            continue;
        }
        if n < 0 {
            break false;
        }
        if n == 0 {
            break true;
        }
        out.extend_from_slice(&buf[..n as usize]);
        if out.len() > 16 << 20 {
            break false;
        }
    };
    // SAFETY: fd is ours.
    unsafe { crate::sys::real::close(fd) };
    ok.then_some(out)
}

/// The file's modification time and size, to tell when it changed (0 if it is missing).
pub(crate) fn stamp(path: &str) -> (i64, i64, i64) {
    let Ok(c) = CString::new(path) else {
        return (0, 0, 0);
    };
    // SAFETY: an all-zero stat is a valid out-parameter; the path is NUL-terminated.
    unsafe {
        let mut st: libc::stat = core::mem::zeroed();
        if libc::stat(c.as_ptr(), &mut st) != 0 {
            return (0, 0, 0);
        }
        (st.st_mtime, st.st_mtime_nsec, st.st_size)
    }
}

/// A source of the `hosts:` line we can serve ourselves.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Source {
    Files,
    Dns,
}

/// Go's `hostLookupOrder`: the sources in order, or None when libc must answer.
pub type HostLookupOrder = Option<Vec<Source>>;

/// Parses nsswitch.conf's `hosts:` line. A missing file or line means glibc's default,
/// `files dns`. `forced` (`netdns=go`) skips the sources and actions that are not ours
/// instead of giving the lookup to libc, as Go's `netdns=go` does.
pub fn parse_nsswitch(text: &[u8], forced: bool) -> HostLookupOrder {
    let text = String::from_utf8_lossy(text);
    let mut line = None;
    for l in text.lines() {
        let l = l.split('#').next().unwrap_or("");
        if let Some(rest) = l.trim_start().strip_prefix("hosts:") {
            line = Some(rest.to_string());
        }
    }
    let Some(line) = line else {
        return Some(vec![Source::Files, Source::Dns]);
    };
    let mut order = Vec::new();
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.next() {
        if w.starts_with('[') {
            // An action: only "[!UNAVAIL=return]" after files, which is what glibc does
            // anyway, leaves the meaning unchanged; any other changes it.
            let mut action = w.to_string();
            while !action.ends_with(']') {
                action.push_str(words.next()?);
            }
            let a = action.to_ascii_lowercase();
            if a != "[!unavail=return]" && a != "[notfound=continue]" && !forced {
                return None;
            }
            continue;
        }
        match w {
            "files" => order.push(Source::Files),
            "dns" => order.push(Source::Dns),
            _ if forced => {}
            _ => return None,
        }
    }
    if order.is_empty() {
        return Some(vec![Source::Dns]);
    }
    Some(order)
}

/// `GMP_DEBUG=netdns`: 0 the configuration decides, 1 always ours, 2 always libc's.
pub(crate) fn netdns() -> i64 {
    dbgvars::get(Var::Netdns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_line_decides_the_side() {
        let ours = Some(vec![Source::Files, Source::Dns]);
        assert_eq!(
            parse_nsswitch(b"passwd: files\nhosts: files dns\n", false),
            ours
        );
        assert_eq!(parse_nsswitch(b"# nothing\n", false), ours);
        let mdns = b"hosts: files mdns4_minimal [NOTFOUND=return] dns myhostname\n";
        assert_eq!(parse_nsswitch(mdns, false), None);
        assert_eq!(parse_nsswitch(mdns, true), ours);
        assert_eq!(
            parse_nsswitch(b"hosts: dns [!UNAVAIL=return] files\n", false),
            Some(vec![Source::Dns, Source::Files])
        );
        assert_eq!(
            parse_nsswitch(b"hosts: files resolve [!UNAVAIL=return] dns\n", false),
            None
        );
    }
}
