//! `gethostbyname`, `gethostbyname2` and their `_r` forms in the runtime, giving what
//! glibc's give (its `getXXbyYY_r.c` over the files and dns sources): one family, the
//! canonical name, aliases (the other names of /etc/hosts's lines, the CNAMEs' owners),
//! every address; `h_errno` and the return values as glibc sets them. A name made of
//! digits and dots, or with a colon, is an address glibc reads itself
//! (`__nss_hostname_digits_dots`): libc answers those, as any lookup the configuration
//! gives to other sources.

use core::ffi::{c_char, c_int};
use core::sync::atomic::{AtomicUsize, Ordering};
use std::net::IpAddr;
use std::sync::Mutex;

use super::Snapshot;
use super::conf::Source;
use super::dnsclient::{self, DnsError};
use super::dnsmsg::{TYPE_A, TYPE_AAAA};
use super::hosts::lookup_static_lines;

// <netdb.h>'s h_errno values.
const NETDB_INTERNAL: c_int = -1;
const HOST_NOT_FOUND: c_int = 1;
const TRY_AGAIN: c_int = 2;
const NO_RECOVERY: c_int = 3;
const NO_DATA: c_int = 4;

/// An answer: the canonical name, the aliases, the addresses (all of one family).
#[derive(Debug, Default)]
struct HostEnt {
    name: String,
    aliases: Vec<String>,
    addrs: Vec<IpAddr>,
}

/// Why there is no answer: not found (with its h_errno: glibc's dns source reports a
/// temporary failure after an answered query so, `gethostbyname_r` returning 0), a
/// temporary failure with the servers unavailable (EAGAIN), or a system error (errno).
enum Miss {
    NotFound(c_int),
    TryAgain,
    System(c_int),
}

/// The sources in order, as glibc's `gethostbyname3_r` asks them for one family.
fn lookup(snap: &Snapshot, order: &[Source], name: &str, v6: bool) -> Result<HostEnt, Miss> {
    let mut last = Miss::NotFound(HOST_NOT_FOUND);
    for src in order {
        match src {
            Source::Files => {
                let mut lines = lookup_static_lines(&snap.hosts, name);
                lines.retain(|(ip, _)| ip.is_ipv6() == v6);
                if !snap.multi {
                    lines.truncate(1);
                }
                let Some((first, rest)) = lines.split_first() else {
                    last = Miss::NotFound(HOST_NOT_FOUND);
                    continue;
                };
                // The first line gives the name; with `multi`, each further line adds its
                // address, its aliases, and its name when it is another (glibc's
                // gethostbyname3_multi, duplicates and all).
                let mut h = HostEnt {
                    name: first.1[0].clone(),
                    aliases: first.1[1..].to_vec(),
                    addrs: vec![first.0],
                };
                for (ip, names) in rest {
                    h.addrs.push(*ip);
                    h.aliases.extend(names[1..].iter().cloned());
                    if names[0] != h.name {
                        h.aliases.push(names[0].clone());
                    }
                }
                return Ok(h);
            }
            Source::Dns => {
                let qtype = if v6 { TYPE_AAAA } else { TYPE_A };
                match dnsclient::lookup_ip(&snap.dns, name, &[qtype]) {
                    Ok(a) => {
                        let addrs: Vec<IpAddr> = a
                            .addrs
                            .into_iter()
                            .filter(|ip| ip.is_ipv6() == v6)
                            .collect();
                        if addrs.is_empty() {
                            last = Miss::NotFound(NO_DATA);
                            continue;
                        }
                        return Ok(HostEnt {
                            name: a.canonical,
                            aliases: a.aliases,
                            addrs,
                        });
                    }
                    Err(DnsError::NoSuchHost) => last = Miss::NotFound(HOST_NOT_FOUND),
                    Err(DnsError::NoData) => last = Miss::NotFound(NO_DATA),
                    Err(DnsError::NoRecovery) => last = Miss::NotFound(NO_RECOVERY),
                    Err(DnsError::ServerFailure { unanswered: false }) => {
                        last = Miss::NotFound(TRY_AGAIN)
                    }
                    Err(DnsError::ServerFailure { unanswered: true } | DnsError::Timeout) => {
                        last = Miss::TryAgain
                    }
                    Err(DnsError::System(e)) => return Err(Miss::System(e)),
                }
            }
        }
    }
    Err(last)
}

/// The bytes `fill` needs for `h` at `buf` (alignment included).
fn needed(h: &HostEnt, buf: usize) -> usize {
    let ptr = core::mem::size_of::<*mut c_char>();
    let len = if h.addrs.first().is_some_and(IpAddr::is_ipv6) {
        16
    } else {
        4
    };
    let pad = buf.wrapping_neg() % ptr;
    pad + ptr * (h.addrs.len() + 1)
        + ptr * (h.aliases.len() + 1)
        + len * h.addrs.len()
        + h.name.len()
        + 1
        + h.aliases.iter().map(|a| a.len() + 1).sum::<usize>()
}

/// Lays `h` out in `buf` (the pointer arrays, the addresses, the strings) and points
/// `ret` at it; false if `buflen` is too small. glibc needs more room for the same
/// answer (its files source keeps the whole line in the buffer, its dns source a parse
/// area), so a buffer glibc takes is never too small here; a smaller one may be enough.
/// Callers grow the buffer on ERANGE, so the difference only saves them a round.
///
/// # Safety
/// `ret` is writable; `buf` is writable for `buflen` bytes.
unsafe fn fill(h: &HostEnt, ret: *mut libc::hostent, buf: *mut c_char, buflen: usize) -> bool {
    if needed(h, buf as usize) > buflen {
        return false;
    }
    let v6 = h.addrs.first().is_some_and(IpAddr::is_ipv6);
    let ptr = core::mem::size_of::<*mut c_char>();
    // SAFETY: every write below stays inside the `needed` bytes checked above; the
    // pointer arrays start at the first pointer-aligned byte.
    unsafe {
        let mut at = buf.add((buf as usize).wrapping_neg() % ptr);
        let addr_list = at as *mut *mut c_char;
        at = at.add(ptr * (h.addrs.len() + 1));
        let alias_list = at as *mut *mut c_char;
        at = at.add(ptr * (h.aliases.len() + 1));
        for (i, ip) in h.addrs.iter().enumerate() {
            let bytes: Vec<u8> = match ip {
                IpAddr::V4(v4) => v4.octets().to_vec(),
                IpAddr::V6(v6) => v6.octets().to_vec(),
            };
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), at.cast::<u8>(), bytes.len());
            *addr_list.add(i) = at;
            at = at.add(bytes.len());
        }
        *addr_list.add(h.addrs.len()) = core::ptr::null_mut();
        let mut put = |s: &str| {
            let p = at;
            core::ptr::copy_nonoverlapping(s.as_ptr(), p.cast::<u8>(), s.len());
            *p.add(s.len()) = 0;
            at = at.add(s.len() + 1);
            p
        };
        let name = put(&h.name);
        for (i, a) in h.aliases.iter().enumerate() {
            *alias_list.add(i) = put(a);
        }
        *alias_list.add(h.aliases.len()) = core::ptr::null_mut();
        ret.write(libc::hostent {
            h_name: name,
            h_aliases: alias_list,
            h_addrtype: if v6 { libc::AF_INET6 } else { libc::AF_INET },
            h_length: if v6 { 16 } else { 4 },
            h_addr_list: addr_list,
        });
    }
    true
}

fn set_errno(e: c_int) {
    // SAFETY: this thread's errno, the caller's (the hooks keep the goroutine on it).
    unsafe { *libc::__errno_location() = e };
}

/// The answer for `name` in family `af`, or None when libc must answer (see the module
/// doc; also an address family other than AF_INET and AF_INET6).
///
/// # Safety
/// `name` is NULL or a C string.
unsafe fn resolve(name: *const c_char, af: c_int) -> Option<Result<HostEnt, Miss>> {
    let netdns = super::conf::netdns();
    if netdns == 2 || name.is_null() || (af != libc::AF_INET && af != libc::AF_INET6) {
        return None;
    }
    // SAFETY: caller contract.
    let name = unsafe { core::ffi::CStr::from_ptr(name) }.to_str().ok()?;
    if name.is_empty()
        || name.contains(':')
        || name.bytes().all(|b| b.is_ascii_digit() || b == b'.')
    {
        return None;
    }
    let snap = super::snapshot();
    let order = if netdns == 1 {
        snap.order_forced.clone()
    } else {
        snap.order.clone()
    }?;
    Some(lookup(&snap, &order, name, af == libc::AF_INET6))
}

/// The runtime's `gethostbyname2_r` (`gethostbyname_r` is it with AF_INET): None when
/// libc must answer, else its return value: 0 (`*result` the answer, or NULL with
/// `*h_errnop` saying why), ERANGE for a buffer too small, EAGAIN for a temporary
/// failure, an errno for a system error; errno as glibc leaves it.
///
/// # Safety
/// As gethostbyname2_r(3).
pub unsafe fn gethostbyname2_r(
    name: *const c_char,
    af: c_int,
    ret: *mut libc::hostent,
    buf: *mut c_char,
    buflen: usize,
    result: *mut *mut libc::hostent,
    h_errnop: *mut c_int,
) -> Option<c_int> {
    if ret.is_null() || buf.is_null() || result.is_null() || h_errnop.is_null() {
        return None;
    }
    // SAFETY: caller contract.
    let r = unsafe { resolve(name, af) }?;
    // SAFETY: caller contract: the out-parameters are writable, buf for buflen bytes.
    unsafe {
        *result = core::ptr::null_mut();
        match r {
            Ok(h) => {
                if !fill(&h, ret, buf, buflen) {
                    *h_errnop = NETDB_INTERNAL;
                    set_errno(libc::ERANGE);
                    return Some(libc::ERANGE);
                }
                *result = ret;
            }
            Err(Miss::NotFound(he)) => *h_errnop = he,
            Err(Miss::TryAgain) => {
                *h_errnop = TRY_AGAIN;
                set_errno(libc::EAGAIN);
                return Some(libc::EAGAIN);
            }
            Err(Miss::System(e)) => {
                *h_errnop = NETDB_INTERNAL;
                set_errno(e);
                return Some(e);
            }
        }
    }
    set_errno(0);
    Some(0)
}

/// glibc's `__h_errno_location`, found once (the libc crate does not declare it).
fn h_errno_ptr() -> Option<*mut c_int> {
    static ADDR: AtomicUsize = AtomicUsize::new(0);
    let mut f = ADDR.load(Ordering::Relaxed);
    if f == 0 {
        // SAFETY: dlsym with a NUL-terminated name; the symbol, if any, is glibc's
        // `int *__h_errno_location(void)`.
        f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__h_errno_location".as_ptr()) } as usize;
        if f == 0 {
            return None;
        }
        ADDR.store(f, Ordering::Relaxed);
    }
    // SAFETY: f is __h_errno_location, a function without arguments returning this
    // thread's h_errno.
    Some(unsafe { core::mem::transmute::<usize, extern "C" fn() -> *mut c_int>(f)() })
}

/// The answer `gethostbyname` returns, kept until the next call (glibc's static buffer,
/// with the same rule: a call overwrites the previous answer, so threads that use the
/// non-`_r` forms must not share them).
struct Static {
    ent: libc::hostent,
    buf: Vec<c_char>,
}

// SAFETY: the pointers in `ent` point into `buf`, which the struct owns.
unsafe impl Send for Static {}

static STATIC: Mutex<Option<Box<Static>>> = Mutex::new(None);

/// The runtime's `gethostbyname2` (`gethostbyname` is it with AF_INET): None when libc
/// must answer, else the answer or NULL with `h_errno` set.
///
/// # Safety
/// `name` is NULL or a C string.
pub unsafe fn gethostbyname2(name: *const c_char, af: c_int) -> Option<*mut libc::hostent> {
    let herr = h_errno_ptr()?;
    // SAFETY: caller contract.
    let r = unsafe { resolve(name, af) }?;
    let set = |e: c_int| {
        // SAFETY: this thread's h_errno.
        unsafe { *herr = e };
    };
    match r {
        Ok(h) => {
            let mut g = STATIC.lock().unwrap_or_else(|e| e.into_inner());
            let mut s = Box::new(Static {
                // SAFETY: all-zero is a valid hostent (null pointers).
                ent: unsafe { core::mem::zeroed() },
                buf: vec![0; needed(&h, 0) + core::mem::size_of::<*mut c_char>()],
            });
            let (ent, buf, len) = (
                &mut s.ent as *mut libc::hostent,
                s.buf.as_mut_ptr(),
                s.buf.len(),
            );
            // SAFETY: ent is writable, buf writable for len bytes (room for any padding).
            if !unsafe { fill(&h, ent, buf, len) } {
                set(NETDB_INTERNAL);
                return Some(core::ptr::null_mut());
            }
            let p = &mut s.ent as *mut libc::hostent;
            *g = Some(s);
            Some(p)
        }
        Err(Miss::NotFound(e)) => {
            set(e);
            Some(core::ptr::null_mut())
        }
        Err(Miss::TryAgain) => {
            set(TRY_AGAIN);
            Some(core::ptr::null_mut())
        }
        Err(Miss::System(e)) => {
            set(NETDB_INTERNAL);
            set_errno(e);
            Some(core::ptr::null_mut())
        }
    }
}
