//! `getnameinfo` in the runtime, giving what glibc's gives (its `getnameinfo.c`): the
//! address's name from the `hosts:` sources in order (`/etc/hosts`, then a PTR query,
//! Go's `lookupAddr`), else the numeric form (`%scope` for a scoped IPv6 address, the
//! interface's name for a link-local one), and the port's service name from
//! `/etc/services` (`udp` with `NI_DGRAM`); the same checks and `EAI_*` codes.
//! `NI_NOFQDN` and `NI_IDN`, and Unix-domain addresses, go to libc.

use core::ffi::{c_char, c_int};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::addrinfo::{EAI_AGAIN, EAI_BADFLAGS, EAI_FAMILY, EAI_NONAME, EAI_SYSTEM};
use super::conf::Source;
use super::dnsclient::{self, DnsError};
use super::hosts::lookup_static_addr;
use super::services::lookup_name;

/// glibc's <netdb.h> value: a buffer too small for the answer.
pub(crate) const EAI_OVERFLOW: c_int = -12;

const NI_NUMERICHOST: c_int = 1;
const NI_NUMERICSERV: c_int = 2;
const NI_NOFQDN: c_int = 4;
const NI_NAMEREQD: c_int = 8;
const NI_DGRAM: c_int = 16;
const NI_IDN: c_int = 32;
/// `NI_IDN_ALLOW_UNASSIGNED`, `NI_IDN_USE_STD3_ASCII_RULES`: glibc still takes them.
const NI_IDN_DEPRECATED: c_int = 64 | 128;

/// Copies `s` and its NUL into a buffer of `len` bytes: EAI_OVERFLOW if it does not fit.
///
/// # Safety
/// `buf` is writable for `len` bytes.
unsafe fn put(buf: *mut c_char, len: usize, s: &str) -> c_int {
    if s.len() + 1 > len {
        return EAI_OVERFLOW;
    }
    // SAFETY: caller contract; s.len() + 1 <= len.
    unsafe {
        core::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        *buf.add(s.len()) = 0;
    }
    0
}

/// The name of `ip` from the sources in order; Err is an `EAI_*` code for a lookup that
/// failed (not for one that found nothing: Ok(None)).
fn host_name(
    order: &[Source],
    snap: &super::Snapshot,
    ip: &IpAddr,
) -> Result<Option<String>, c_int> {
    let mut again = false;
    for src in order {
        match src {
            Source::Files => {
                if let Some(n) = lookup_static_addr(&snap.hosts, ip) {
                    return Ok(Some(n));
                }
            }
            Source::Dns => match dnsclient::lookup_ptr(&snap.dns, ip) {
                Ok(n) => return Ok(Some(n)),
                Err(DnsError::NoSuchHost | DnsError::NoData | DnsError::NoRecovery) => {}
                Err(DnsError::ServerFailure { .. } | DnsError::Timeout) => again = true,
                Err(DnsError::System(e)) => {
                    // SAFETY: this thread's errno, the caller's (the hook keeps the
                    // goroutine on its thread).
                    unsafe { *libc::__errno_location() = e };
                    return Err(EAI_SYSTEM);
                }
            },
        }
    }
    if again { Err(EAI_AGAIN) } else { Ok(None) }
}

/// The runtime's `getnameinfo`: None when libc must answer instead (a `hosts:` source that
/// is not ours, `NI_NOFQDN`, `NI_IDN`, a Unix-domain address, `GMP_DEBUG=netdns=cgo`),
/// else the `EAI_*` result.
///
/// # Safety
/// As getnameinfo(3): `sa` NULL or readable for `salen` bytes, `host` NULL or writable for
/// `hostlen` bytes, `serv` likewise.
pub unsafe fn getnameinfo(
    sa: *const libc::sockaddr,
    salen: libc::socklen_t,
    host: *mut c_char,
    hostlen: libc::socklen_t,
    serv: *mut c_char,
    servlen: libc::socklen_t,
    flags: c_int,
) -> Option<c_int> {
    let netdns = super::conf::netdns();
    if netdns == 2 {
        return None;
    }
    if flags
        & !(NI_NUMERICHOST
            | NI_NUMERICSERV
            | NI_NOFQDN
            | NI_NAMEREQD
            | NI_DGRAM
            | NI_IDN
            | NI_IDN_DEPRECATED)
        != 0
    {
        return Some(EAI_BADFLAGS);
    }
    if sa.is_null() || (salen as usize) < core::mem::size_of::<libc::sa_family_t>() {
        return Some(EAI_FAMILY);
    }
    if flags & NI_NAMEREQD != 0 && host.is_null() && serv.is_null() {
        return Some(EAI_NONAME);
    }
    // SAFETY: caller contract: at least the family is readable (checked above).
    let family = unsafe { (*sa).sa_family } as c_int;
    let (ip, port, scope) = match family {
        libc::AF_INET if salen as usize >= core::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: a sockaddr_in is readable (its size checked); read unaligned.
            let sin = unsafe { core::ptr::read_unaligned(sa.cast::<libc::sockaddr_in>()) };
            (
                IpAddr::V4(Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes())),
                u16::from_be(sin.sin_port),
                0,
            )
        }
        libc::AF_INET6 if salen as usize >= core::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { core::ptr::read_unaligned(sa.cast::<libc::sockaddr_in6>()) };
            (
                IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_scope_id,
            )
        }
        libc::AF_UNIX => return None,
        _ => return Some(EAI_FAMILY),
    };
    if flags & (NI_NOFQDN | NI_IDN | NI_IDN_DEPRECATED) != 0 {
        return None;
    }
    let snap = super::snapshot();
    if !host.is_null() && hostlen > 0 {
        let mut name = None;
        if flags & NI_NUMERICHOST == 0 {
            let order = if netdns == 1 {
                snap.order_forced.clone()
            } else {
                snap.order.clone()
            }?;
            match host_name(&order, &snap, &ip) {
                Ok(n) => name = n,
                Err(e) => return Some(e),
            }
        }
        let text = match name {
            Some(n) => n,
            None if flags & NI_NAMEREQD != 0 => return Some(EAI_NONAME),
            None => numeric(&ip, scope),
        };
        // SAFETY: caller contract.
        let r = unsafe { put(host, hostlen as usize, &text) };
        if r != 0 {
            return Some(r);
        }
    }
    if !serv.is_null() && servlen > 0 {
        let proto = if flags & NI_DGRAM != 0 { "udp" } else { "tcp" };
        let name = if flags & NI_NUMERICSERV == 0 {
            lookup_name(&snap.services, port, proto)
        } else {
            None
        };
        let text = name.unwrap_or_else(|| port.to_string());
        // SAFETY: caller contract.
        let r = unsafe { put(serv, servlen as usize, &text) };
        if r != 0 {
            return Some(r);
        }
    }
    Some(0)
}

/// The numeric form, with `%scope` for a scoped IPv6 address: the interface's name for a
/// link-local (unicast or multicast) one, else the number (glibc's header does not offer
/// `NI_NUMERICSCOPE`, and its getnameinfo refuses the flag).
fn numeric(ip: &IpAddr, scope: u32) -> String {
    let mut s = ip.to_string();
    if let IpAddr::V6(v6) = ip
        && scope != 0
    {
        let seg = v6.segments();
        let link_local = seg[0] & 0xffc0 == 0xfe80 || seg[0] & 0xff0f == 0xff02;
        let mut name = [0 as c_char; libc::IF_NAMESIZE];
        // SAFETY: name has IF_NAMESIZE bytes, as if_indextoname needs.
        let named =
            link_local && !unsafe { libc::if_indextoname(scope, name.as_mut_ptr()) }.is_null();
        s.push('%');
        if named {
            // SAFETY: if_indextoname wrote a NUL-terminated name.
            s.push_str(&unsafe { core::ffi::CStr::from_ptr(name.as_ptr()) }.to_string_lossy());
        } else {
            s.push_str(&scope.to_string());
        }
    }
    s
}
