//! `getaddrinfo` in the runtime, giving what glibc's gives (its `getaddrinfo.c`,
//! `gaih_inet`): the same checks of the arguments in the same order and the same `EAI_*`
//! codes, one entry per socket type when the hints name none (stream/TCP, datagram/UDP,
//! raw), the service looked up per protocol, `AI_PASSIVE`, `AI_NUMERICHOST`,
//! `AI_NUMERICSERV`, `AI_CANONNAME`, `AI_ADDRCONFIG`, `AI_V4MAPPED` and `AI_ALL`, the
//! sources of nsswitch.conf's `hosts:` line in order, and the answer sorted by RFC 6724.
//! A socket the resolver cannot make (EMFILE…) is `EAI_SYSTEM` with errno, as in glibc;
//! a server that refuses or fails every query is `EAI_AGAIN`.
//!
//! # Memory
//! glibc's `freeaddrinfo` frees each node with `free()`, and its `ai_canonname`
//! separately. So each node is one `malloc` block holding the `struct addrinfo` and then
//! its socket address (`ai_addr` points inside the block), and the canonical name, on
//! the first node only, is a `malloc`'d string of its own, as glibc allocates them.

use core::ffi::{c_char, c_int};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::Snapshot;
use super::addrselect::{GaiConf, sort_by_rfc6724};
use super::conf::Source;
use super::dnsclient::{self, DnsError};
use super::dnsmsg::{TYPE_A, TYPE_AAAA};
use super::hosts::lookup_static_host;
use super::services::lookup_port;

// glibc's <netdb.h> values.
pub(crate) const EAI_BADFLAGS: c_int = -1;
pub(crate) const EAI_NONAME: c_int = -2;
pub(crate) const EAI_AGAIN: c_int = -3;
pub(crate) const EAI_NODATA: c_int = -5;
pub(crate) const EAI_FAMILY: c_int = -6;
pub(crate) const EAI_SOCKTYPE: c_int = -7;
pub(crate) const EAI_SERVICE: c_int = -8;
pub(crate) const EAI_ADDRFAMILY: c_int = -9;
pub(crate) const EAI_MEMORY: c_int = -10;
pub(crate) const EAI_SYSTEM: c_int = -11;

const AI_PASSIVE: c_int = 0x1;
const AI_CANONNAME: c_int = 0x2;
const AI_NUMERICHOST: c_int = 0x4;
const AI_V4MAPPED: c_int = 0x8;
const AI_ALL: c_int = 0x10;
const AI_ADDRCONFIG: c_int = 0x20;
const AI_IDN: c_int = 0x40;
const AI_CANONIDN: c_int = 0x80;
const AI_NUMERICSERV: c_int = 0x400;
const KNOWN_FLAGS: c_int = AI_PASSIVE
    | AI_CANONNAME
    | AI_NUMERICHOST
    | AI_ADDRCONFIG
    | AI_V4MAPPED
    | AI_NUMERICSERV
    | AI_ALL
    | AI_IDN
    | AI_CANONIDN;

/// One row of glibc's `gaih_inet_typeproto`: socket type, protocol, the protocol's name in
/// /etc/services, whether any protocol goes (raw), whether it comes when the hints name no
/// type (the default rows).
struct TypeProto {
    socktype: c_int,
    protocol: c_int,
    name: &'static str,
    any_protocol: bool,
    default: bool,
}

const TYPEPROTO: [TypeProto; 7] = [
    TypeProto {
        socktype: libc::SOCK_STREAM,
        protocol: libc::IPPROTO_TCP,
        name: "tcp",
        any_protocol: false,
        default: true,
    },
    TypeProto {
        socktype: libc::SOCK_DGRAM,
        protocol: libc::IPPROTO_UDP,
        name: "udp",
        any_protocol: false,
        default: true,
    },
    TypeProto {
        socktype: libc::SOCK_DCCP,
        protocol: libc::IPPROTO_DCCP,
        name: "dccp",
        any_protocol: false,
        default: false,
    },
    TypeProto {
        socktype: libc::SOCK_DGRAM,
        protocol: libc::IPPROTO_UDPLITE,
        name: "udplite",
        any_protocol: false,
        default: false,
    },
    TypeProto {
        socktype: libc::SOCK_STREAM,
        protocol: libc::IPPROTO_SCTP,
        name: "sctp",
        any_protocol: false,
        default: false,
    },
    TypeProto {
        socktype: libc::SOCK_SEQPACKET,
        protocol: libc::IPPROTO_SCTP,
        name: "sctp",
        any_protocol: false,
        default: false,
    },
    TypeProto {
        socktype: libc::SOCK_RAW,
        protocol: 0,
        name: "raw",
        any_protocol: true,
        default: true,
    },
];

/// A socket type, protocol and port (network order) that each address comes with.
#[derive(Clone, Copy, Debug)]
struct ServTuple {
    socktype: c_int,
    protocol: c_int,
    port: u16,
}

fn matches(tp: &TypeProto, socktype: c_int, protocol: c_int) -> bool {
    (socktype == 0 || socktype == tp.socktype)
        && (protocol == 0 || tp.any_protocol || protocol == tp.protocol)
}

/// The service tuples of glibc's `gaih_inet`: Err is an `EAI_*` code.
fn serv_tuples(
    snap: &Snapshot,
    service: Option<(&str, Option<u32>)>,
    socktype: c_int,
    protocol: c_int,
) -> Result<Vec<ServTuple>, c_int> {
    let chosen = if socktype != 0 || protocol != 0 {
        match TYPEPROTO.iter().find(|tp| matches(tp, socktype, protocol)) {
            Some(tp) => Some(tp),
            None if socktype != 0 => return Err(EAI_SOCKTYPE),
            None => return Err(EAI_SERVICE),
        }
    } else {
        None
    };
    let tuple = |tp: &TypeProto, port: u16| ServTuple {
        socktype: tp.socktype,
        protocol: if tp.any_protocol {
            protocol
        } else {
            tp.protocol
        },
        port,
    };
    let port = match service {
        Some((name, None)) => {
            if chosen.is_some_and(|tp| tp.any_protocol) {
                return Err(EAI_SERVICE);
            }
            if let Some(tp) = chosen {
                let port = lookup_port(&snap.services, name, tp.name).ok_or(EAI_SERVICE)?;
                return Ok(vec![tuple(tp, port.to_be())]);
            }
            let out: Vec<_> = TYPEPROTO
                .iter()
                .filter(|tp| !tp.any_protocol && matches(tp, socktype, protocol))
                .filter_map(|tp| {
                    lookup_port(&snap.services, name, tp.name).map(|p| tuple(tp, p.to_be()))
                })
                .collect();
            return if out.is_empty() {
                Err(EAI_SERVICE)
            } else {
                Ok(out)
            };
        }
        Some((_, Some(num))) => {
            if chosen.is_some_and(|tp| tp.any_protocol) {
                return Err(EAI_SERVICE);
            }
            (num as u16).to_be()
        }
        None => 0,
    };
    Ok(match chosen {
        Some(tp) => vec![tuple(tp, port)],
        None => TYPEPROTO
            .iter()
            .filter(|tp| tp.default)
            .map(|tp| tuple(tp, port))
            .collect(),
    })
}

/// inet_aton(3)'s forms, whole string only (glibc's `__inet_aton_exact`): one to four
/// parts, each decimal, octal (leading 0) or hex (0x), the last filling the bytes left.
fn inet_aton(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.len() > 4 {
        return None;
    }
    let mut vals = Vec::with_capacity(4);
    for p in &parts {
        let (digits, radix) = if let Some(h) = p.strip_prefix("0x").or_else(|| p.strip_prefix("0X"))
        {
            (h, 16)
        } else if p.len() > 1 && p.starts_with('0') {
            (&p[1..], 8)
        } else {
            (*p, 10)
        };
        let hex_without_digits = radix == 16 && digits.is_empty();
        if p.is_empty() || hex_without_digits || !digits.chars().all(|c| c.is_digit(radix)) {
            return None;
        }
        let v = if digits.is_empty() {
            0
        } else {
            u64::from_str_radix(digits, radix).ok()?
        };
        if v > u32::MAX as u64 {
            return None;
        }
        vals.push(v as u32);
    }
    let last = *vals.last()?;
    let n = vals.len();
    let max_last = if n == 1 {
        u32::MAX
    } else {
        u32::MAX >> (8 * (n - 1))
    };
    if last > max_last || vals[..n - 1].iter().any(|&v| v > 255) {
        return None;
    }
    let mut a = last;
    for (i, &v) in vals[..n - 1].iter().enumerate() {
        a |= v << (24 - 8 * i);
    }
    Some(Ipv4Addr::from(a))
}

/// An address of the answer and, for a numeric IPv6 one, its scope.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Addr {
    ip: IpAddr,
    scope: u32,
}

/// A numeric host as glibc reads one: inet_aton's forms for IPv4 (`1`, `0x7f.1`…, nothing
/// after them), inet_pton's for IPv6 with an optional `%scope`. None if not numeric.
fn numeric_host(node: &str) -> Option<Addr> {
    if let Some(v4) = inet_aton(node) {
        return Some(Addr {
            ip: IpAddr::V4(v4),
            scope: 0,
        });
    }
    let (addr, scope) = match node.split_once('%') {
        Some((a, s)) => (a, Some(s)),
        None => (node, None),
    };
    let ip: Ipv6Addr = addr.parse().ok()?;
    let scope = match scope {
        None => 0,
        Some(s) => match s.parse::<u32>() {
            Ok(n) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => {
                let cs = std::ffi::CString::new(s).ok()?;
                // SAFETY: a NUL-terminated interface name.
                let i = unsafe { libc::if_nametoindex(cs.as_ptr()) };
                if i == 0 {
                    return None;
                }
                i
            }
        },
    };
    Some(Addr {
        ip: IpAddr::V6(ip),
        scope,
    })
}

/// The addresses of a name for `family` from the sources in order, and its canonical
/// name; Err is an `EAI_*` code.
fn lookup_host(
    snap: &Snapshot,
    order: &[Source],
    name: &str,
    family: c_int,
    flags: c_int,
) -> Result<(Vec<IpAddr>, String), c_int> {
    let mapped = family == libc::AF_INET6 && flags & AI_V4MAPPED != 0;
    // What a source's addresses give for the family asked.
    let pick = |addrs: &[IpAddr]| -> Vec<IpAddr> {
        let v6: Vec<IpAddr> = addrs.iter().filter(|a| a.is_ipv6()).copied().collect();
        let v4: Vec<IpAddr> = addrs.iter().filter(|a| a.is_ipv4()).copied().collect();
        match family {
            libc::AF_INET => v4,
            libc::AF_INET6 if mapped && (v6.is_empty() || flags & AI_ALL != 0) => {
                let mut out = v6;
                out.extend(v4.iter().map(|a| match a {
                    IpAddr::V4(v4) => IpAddr::V6(v4.to_ipv6_mapped()),
                    v6 => *v6,
                }));
                out
            }
            libc::AF_INET6 => v6,
            _ => addrs.to_vec(),
        }
    };
    let mut err = EAI_NONAME;
    for src in order {
        match src {
            Source::Files => {
                if let Some(a) = lookup_static_host(&snap.hosts, name) {
                    let a = if snap.multi {
                        a
                    } else {
                        a.first_only((family != libc::AF_UNSPEC).then_some(true))
                    };
                    let addrs = pick(&a.addrs);
                    if !addrs.is_empty() {
                        // The first line of the family asked gives the name (glibc's
                        // files source: one lookup per family, or both for AF_UNSPEC).
                        let fam = match family {
                            libc::AF_INET => Some(false),
                            libc::AF_INET6 if addrs.iter().any(|a| a.is_ipv6()) => Some(true),
                            libc::AF_INET6 => Some(false),
                            _ => None,
                        };
                        let canonical = a.canonical(fam).unwrap_or(name).to_string();
                        return Ok((addrs, canonical));
                    }
                }
            }
            Source::Dns => {
                let r = match family {
                    libc::AF_INET => dnsclient::lookup_ip(&snap.dns, name, &[TYPE_A]),
                    libc::AF_INET6 => {
                        let r6 = dnsclient::lookup_ip(&snap.dns, name, &[TYPE_AAAA]);
                        let no6 = r6.as_ref().map_or(true, |a| a.addrs.is_empty());
                        if mapped && (no6 || flags & AI_ALL != 0) {
                            let r4 = dnsclient::lookup_ip(&snap.dns, name, &[TYPE_A]);
                            match (r6, r4) {
                                (Ok(mut a6), Ok(a4)) => {
                                    a6.addrs.extend(a4.addrs);
                                    Ok(a6)
                                }
                                (Ok(a), Err(_)) | (Err(_), Ok(a)) => Ok(a),
                                (Err(e), Err(_)) => Err(e),
                            }
                        } else {
                            r6
                        }
                    }
                    _ => dnsclient::lookup_ip(&snap.dns, name, &[TYPE_A, TYPE_AAAA]),
                };
                match r {
                    Ok(a) => {
                        let addrs = pick(&a.addrs);
                        if !addrs.is_empty() {
                            return Ok((addrs, a.canonical));
                        }
                        err = EAI_NODATA;
                    }
                    Err(DnsError::NoSuchHost | DnsError::NoRecovery) => err = EAI_NONAME,
                    Err(DnsError::NoData) => err = EAI_NODATA,
                    Err(DnsError::ServerFailure { .. } | DnsError::Timeout) => err = EAI_AGAIN,
                    Err(DnsError::System(e)) => {
                        // SAFETY: this thread's errno; the caller's thread, as the hook
                        // keeps the goroutine on it (glibc reports EAI_SYSTEM so).
                        unsafe { *libc::__errno_location() = e };
                        return Err(EAI_SYSTEM);
                    }
                }
            }
        }
    }
    Err(err)
}

/// Whether the host has IPv4 and IPv6 addresses other than loopback (glibc's
/// `__check_pf`, for AI_ADDRCONFIG).
fn seen_families() -> (bool, bool) {
    let mut seen = (false, false);
    for (a, _) in super::interface_addrs() {
        match a {
            IpAddr::V4(v4) => seen.0 |= v4 != Ipv4Addr::LOCALHOST,
            IpAddr::V6(v6) => seen.1 |= !v6.is_loopback(),
        }
    }
    seen
}

/// Reads a C string argument; Err(()) if it is not UTF-8 (libc then answers).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn c_str<'a>(p: *const c_char) -> Result<Option<&'a str>, ()> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: caller contract.
    let s = unsafe { core::ffi::CStr::from_ptr(p) };
    s.to_str().map(Some).map_err(|_| ())
}

/// The runtime's `getaddrinfo`: None when libc must answer instead (a `hosts:` source
/// that is not ours, IDN flags, a name that is not UTF-8, or `GMP_DEBUG=netdns=cgo`),
/// else the `EAI_*` result (0: `*res` holds the list).
///
/// # Safety
/// As getaddrinfo(3): `node` and `service` NULL or C strings, `hints` NULL or valid,
/// `res` writable.
pub unsafe fn getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const libc::addrinfo,
    res: *mut *mut libc::addrinfo,
) -> Option<c_int> {
    let netdns = super::conf::netdns();
    if netdns == 2 {
        return None;
    }
    // SAFETY: caller contract.
    let (mut node, mut service) = unsafe { (c_str(node).ok()?, c_str(service).ok()?) };
    if node == Some("*") {
        node = None;
    }
    if service == Some("*") {
        service = None;
    }
    if node.is_none() && service.is_none() {
        return Some(EAI_NONAME);
    }
    let (flags, mut family, socktype, protocol) = if hints.is_null() {
        (AI_V4MAPPED | AI_ADDRCONFIG, libc::AF_UNSPEC, 0, 0)
    } else {
        // SAFETY: caller contract.
        let h = unsafe { &*hints };
        (h.ai_flags, h.ai_family, h.ai_socktype, h.ai_protocol)
    };
    if flags & !KNOWN_FLAGS != 0 {
        return Some(EAI_BADFLAGS);
    }
    if flags & AI_CANONNAME != 0 && node.is_none() {
        return Some(EAI_BADFLAGS);
    }
    if flags & (AI_IDN | AI_CANONIDN) != 0 {
        return None;
    }
    if flags & AI_ADDRCONFIG != 0 {
        let (v4, v6) = seen_families();
        if family == libc::AF_UNSPEC && (v4 || v6) {
            if v4 != v6 {
                family = if v4 { libc::AF_INET } else { libc::AF_INET6 };
            }
        } else if (family == libc::AF_INET && !v4) || (family == libc::AF_INET6 && !v6) {
            return Some(EAI_NONAME);
        }
    }
    let service = match service {
        Some(s) if !s.is_empty() => {
            let c = std::ffi::CString::new(s).ok()?;
            let mut end: *mut c_char = core::ptr::null_mut();
            // SAFETY: a NUL-terminated string and a valid end pointer.
            let num = unsafe { libc::strtoul(c.as_ptr(), &mut end, 10) } as c_int;
            // SAFETY: strtoul points `end` into the string.
            let rest = unsafe { *end };
            if rest != 0 {
                if flags & AI_NUMERICSERV != 0 {
                    return Some(EAI_NONAME);
                }
                Some((s, None))
            } else if num < 0 {
                Some((s, None))
            } else {
                Some((s, Some(num as u32)))
            }
        }
        _ => None,
    };
    if family != libc::AF_UNSPEC && family != libc::AF_INET && family != libc::AF_INET6 {
        return Some(EAI_FAMILY);
    }
    let snap = super::snapshot();
    let order = if netdns == 1 {
        snap.order_forced.clone()
    } else {
        snap.order.clone()
    };
    let tuples = match serv_tuples(&snap, service, socktype, protocol) {
        Ok(t) => t,
        Err(e) => return Some(e),
    };
    let mut canon = None;
    let addrs: Vec<Addr> = match node {
        Some(name) => match numeric_host(name) {
            Some(a) => {
                let a = match (a.ip, family) {
                    (IpAddr::V4(_), libc::AF_UNSPEC | libc::AF_INET) => a,
                    (IpAddr::V4(v4), libc::AF_INET6) if flags & AI_V4MAPPED != 0 => Addr {
                        ip: IpAddr::V6(v4.to_ipv6_mapped()),
                        scope: 0,
                    },
                    (IpAddr::V6(_), libc::AF_UNSPEC | libc::AF_INET6) => a,
                    (IpAddr::V6(v6), libc::AF_INET) if v6.to_ipv4_mapped().is_some() => Addr {
                        ip: IpAddr::V4(v6.to_ipv4_mapped()?),
                        scope: 0,
                    },
                    _ => return Some(EAI_ADDRFAMILY),
                };
                canon = Some(name.to_string());
                vec![a]
            }
            None if flags & AI_NUMERICHOST != 0 => return Some(EAI_NONAME),
            None => {
                let order = order?;
                match lookup_host(&snap, &order, name, family, flags) {
                    Ok((ips, c)) => {
                        canon = Some(c);
                        ips.into_iter().map(|ip| Addr { ip, scope: 0 }).collect()
                    }
                    Err(e) => return Some(e),
                }
            }
        },
        None => {
            let passive = flags & AI_PASSIVE != 0;
            let v6 = IpAddr::V6(if passive {
                Ipv6Addr::UNSPECIFIED
            } else {
                Ipv6Addr::LOCALHOST
            });
            let v4 = IpAddr::V4(if passive {
                Ipv4Addr::UNSPECIFIED
            } else {
                Ipv4Addr::LOCALHOST
            });
            let ips = match family {
                libc::AF_INET => vec![v4],
                libc::AF_INET6 => vec![v6],
                _ => vec![v6, v4],
            };
            ips.into_iter().map(|ip| Addr { ip, scope: 0 }).collect()
        }
    };
    let addrs = sorted(addrs, &snap.gai);
    let canon = if flags & AI_CANONNAME != 0 {
        canon
    } else {
        None
    };
    // SAFETY: caller contract: res is writable.
    Some(unsafe { build_list(&addrs, &tuples, flags, canon.as_deref(), res) })
}

/// The addresses in RFC 6724 order (stable for equal ones, which keep their scopes).
fn sorted(addrs: Vec<Addr>, gai: &GaiConf) -> Vec<Addr> {
    let mut ips: Vec<IpAddr> = addrs.iter().map(|a| a.ip).collect();
    sort_by_rfc6724(&mut ips, gai);
    let mut pool = addrs;
    ips.into_iter()
        .map(|ip| {
            let i = pool.iter().position(|a| a.ip == ip).unwrap_or(0);
            pool.remove(i)
        })
        .collect()
}

/// Allocates the list (see the module doc, "Memory") and stores it in `*res`: 0, or
/// EAI_MEMORY with nothing allocated.
///
/// # Safety
/// `res` is writable.
unsafe fn build_list(
    addrs: &[Addr],
    tuples: &[ServTuple],
    flags: c_int,
    canon: Option<&str>,
    res: *mut *mut libc::addrinfo,
) -> c_int {
    let mut head: *mut libc::addrinfo = core::ptr::null_mut();
    let mut tail: *mut *mut libc::addrinfo = &mut head;
    for a in addrs {
        for t in tuples {
            let (ss, len) = super::sockaddr_of(&a.ip, u16::from_be(t.port), a.scope);
            let size = core::mem::size_of::<libc::addrinfo>() + len as usize;
            // SAFETY: malloc of a non-zero size; the result is checked below.
            let p = unsafe { libc::malloc(size) } as *mut libc::addrinfo;
            if p.is_null() {
                // SAFETY: head is a list built here, nodes from malloc.
                unsafe { free_list(head) };
                return EAI_MEMORY;
            }
            // SAFETY: p is a fresh block of `size` bytes, aligned by malloc for any
            // type; the socket address goes right after the addrinfo (whose size is a
            // multiple of 8, the sockaddr's alignment).
            unsafe {
                let sa = (p as *mut u8).add(core::mem::size_of::<libc::addrinfo>());
                core::ptr::copy_nonoverlapping(
                    (&ss as *const libc::sockaddr_storage).cast::<u8>(),
                    sa,
                    len as usize,
                );
                p.write(libc::addrinfo {
                    ai_flags: flags,
                    ai_family: if a.ip.is_ipv4() {
                        libc::AF_INET
                    } else {
                        libc::AF_INET6
                    },
                    ai_socktype: t.socktype,
                    ai_protocol: t.protocol,
                    ai_addrlen: len,
                    ai_addr: sa.cast(),
                    ai_canonname: core::ptr::null_mut(),
                    ai_next: core::ptr::null_mut(),
                });
                *tail = p;
                tail = &mut (*p).ai_next;
            }
        }
    }
    if let Some(c) = canon
        && !head.is_null()
    {
        // SAFETY: a fresh block of len + 1 bytes, filled and NUL-terminated.
        unsafe {
            let s = libc::malloc(c.len() + 1) as *mut u8;
            if s.is_null() {
                free_list(head);
                return EAI_MEMORY;
            }
            core::ptr::copy_nonoverlapping(c.as_ptr(), s, c.len());
            *s.add(c.len()) = 0;
            (*head).ai_canonname = s.cast();
        }
    }
    if head.is_null() {
        return EAI_NONAME;
    }
    // SAFETY: caller contract.
    unsafe { *res = head };
    0
}

/// Frees a list as glibc's `freeaddrinfo` does (each node, then its canonical name).
///
/// # Safety
/// `p` is NULL or a list from `build_list` not yet freed.
unsafe fn free_list(mut p: *mut libc::addrinfo) {
    while !p.is_null() {
        // SAFETY: caller contract: p is a node of the list, freed once.
        unsafe {
            let next = (*p).ai_next;
            libc::free((*p).ai_canonname.cast());
            libc::free(p.cast());
            p = next;
        }
    }
}
