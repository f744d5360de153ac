//! Destination address selection (RFC 6724; Go's `addrselect.go`, glibc's `rfc3484_sort`
//! with `/etc/gai.conf`'s defaults, which keep RFC 3484's precedence table): the rules a
//! host's own answer depends on. Rule 1 (avoid unusable destinations) asks the kernel for
//! the source address of each destination by connecting a UDP socket to it, as glibc does;
//! then matching scope (2), matching label (5), higher precedence (6), smaller scope (8),
//! longest matching prefix (9, IPv4 only inside the source's subnet), and the original
//! order. Rules 3, 4 and 7 need the kernel's per-address flags (deprecated, home,
//! native) and are left out: they change nothing between addresses without those flags.

use std::net::{IpAddr, Ipv6Addr};

/// The IPv6 form the tables are written in (an IPv4 address as `::ffff:a.b.c.d`).
fn v6(a: &IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => *v6,
    }
}

fn in_prefix(a: &Ipv6Addr, p: [u16; 8], bits: u32) -> bool {
    let p = Ipv6Addr::from(p).to_bits();
    let mask = if bits == 0 {
        0
    } else {
        u128::MAX << (128 - bits)
    };
    a.to_bits() & mask == p & mask
}

/// glibc's default precedence table.
fn precedence(a: &Ipv6Addr) -> u8 {
    if in_prefix(a, [0, 0, 0, 0, 0, 0, 0, 1], 128) {
        50
    } else if in_prefix(a, [0x2002, 0, 0, 0, 0, 0, 0, 0], 16) {
        30
    } else if in_prefix(a, [0; 8], 96) {
        20
    } else if in_prefix(a, [0, 0, 0, 0, 0, 0xffff, 0, 0], 96) {
        10
    } else {
        40
    }
}

/// glibc's default label table.
fn label(a: &Ipv6Addr) -> u8 {
    if in_prefix(a, [0, 0, 0, 0, 0, 0, 0, 1], 128) {
        0
    } else if in_prefix(a, [0x2002, 0, 0, 0, 0, 0, 0, 0], 16) {
        2
    } else if in_prefix(a, [0; 8], 96) {
        3
    } else if in_prefix(a, [0, 0, 0, 0, 0, 0xffff, 0, 0], 96) {
        4
    } else if in_prefix(a, [0xfec0, 0, 0, 0, 0, 0, 0, 0], 10) {
        5
    } else if in_prefix(a, [0xfc00, 0, 0, 0, 0, 0, 0, 0], 7) {
        6
    } else if in_prefix(a, [0x2001, 0, 0, 0, 0, 0, 0, 0], 32) {
        7
    } else {
        1
    }
}

/// glibc's `get_scope`: multicast scopes, link-local (loopback too) 2, site-local 5,
/// global 14; IPv4 link-local and loopback are link-local.
fn scope(a: &Ipv6Addr) -> u8 {
    let s = a.segments();
    if s[0] >> 8 == 0xff {
        (s[0] & 0xf) as u8
    } else if let Some(v4) = a.to_ipv4_mapped() {
        if v4.is_link_local() || v4.octets()[0] == 127 {
            2
        } else {
            14
        }
    } else if in_prefix(a, [0xfe80, 0, 0, 0, 0, 0, 0, 0], 10) || a.is_loopback() {
        2
    } else if in_prefix(a, [0xfec0, 0, 0, 0, 0, 0, 0, 0], 10) {
        5
    } else {
        14
    }
}

/// The source address the kernel would use for `dst`, and its prefix length; None if
/// there is no route.
fn source_of(dst: &IpAddr, ifaces: &[(IpAddr, u32)]) -> Option<(IpAddr, u32)> {
    let af = if dst.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain system call.
    let fd = unsafe { crate::sys::real::socket(af, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    let (ss, len) = super::sockaddr_of(dst, 9, 0);
    // SAFETY: ss is valid for len bytes; a UDP connect only picks a route.
    let ok = unsafe {
        crate::sys::real::connect(fd, (&ss as *const libc::sockaddr_storage).cast(), len)
    } == 0;
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut out: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let mut olen = core::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: out is writable for olen bytes.
    let ok = ok
        && unsafe {
            libc::getsockname(
                fd,
                (&mut out as *mut libc::sockaddr_storage).cast(),
                &mut olen,
            )
        } == 0;
    // SAFETY: fd is ours.
    unsafe { crate::sys::real::close(fd) };
    if !ok {
        return None;
    }
    let src = super::ip_of(&out)?;
    let plen = ifaces
        .iter()
        .find(|(a, _)| *a == src)
        .map(|(_, p)| *p)
        .unwrap_or(if src.is_ipv4() { 32 } else { 128 });
    Some((src, plen))
}

fn common_prefix_len(a: &IpAddr, b: &IpAddr) -> u32 {
    match (a, b) {
        (IpAddr::V4(x), IpAddr::V4(y)) => (x.to_bits() ^ y.to_bits()).leading_zeros(),
        (IpAddr::V6(x), IpAddr::V6(y)) => (x.to_bits() ^ y.to_bits()).leading_zeros(),
        _ => 0,
    }
}

struct Entry {
    dst: IpAddr,
    src: Option<(IpAddr, u32)>,
    index: usize,
}

fn rule9(e: &Entry) -> u32 {
    let Some((src, plen)) = e.src else { return 0 };
    let common = common_prefix_len(&src, &e.dst);
    if e.dst.is_ipv4() && common < plen {
        // Outside the source's subnet a common prefix says nothing.
        return 0;
    }
    common
}

fn compare(a: &Entry, b: &Entry) -> core::cmp::Ordering {
    use core::cmp::Ordering::*;
    // Rule 1: avoid unusable destinations.
    match (a.src.is_some(), b.src.is_some()) {
        (true, false) => return Less,
        (false, true) => return Greater,
        _ => {}
    }
    let (da, db) = (v6(&a.dst), v6(&b.dst));
    if let (Some((sa, _)), Some((sb, _))) = (a.src, b.src) {
        let (sa, sb) = (v6(&sa), v6(&sb));
        // Rule 2: prefer matching scope.
        let ma = scope(&da) == scope(&sa);
        let mb = scope(&db) == scope(&sb);
        if ma != mb {
            return if ma { Less } else { Greater };
        }
        // Rule 5: prefer matching label.
        let ma = label(&da) == label(&sa);
        let mb = label(&db) == label(&sb);
        if ma != mb {
            return if ma { Less } else { Greater };
        }
    }
    // Rule 6: prefer higher precedence.
    let (pa, pb) = (precedence(&da), precedence(&db));
    if pa != pb {
        return pb.cmp(&pa);
    }
    // Rule 8: prefer smaller scope.
    let (sa, sb) = (scope(&da), scope(&db));
    if sa != sb {
        return sa.cmp(&sb);
    }
    // Rule 9: longest matching prefix, within one family.
    if a.src.is_some() && a.dst.is_ipv4() == b.dst.is_ipv4() {
        let (ba, bb) = (rule9(a), rule9(b));
        if ba != bb {
            return bb.cmp(&ba);
        }
    }
    // Rule 10: otherwise, leave the order unchanged.
    a.index.cmp(&b.index)
}

/// Go's `sortByRFC6724`: sorts `addrs` in place (stable for equal addresses).
pub fn sort_by_rfc6724(addrs: &mut [IpAddr]) {
    if addrs.len() < 2 {
        return;
    }
    let ifaces = super::interface_addrs();
    let mut es: Vec<Entry> = addrs
        .iter()
        .enumerate()
        .map(|(index, dst)| Entry {
            dst: *dst,
            src: source_of(dst, &ifaces),
            index,
        })
        .collect();
    es.sort_by(compare);
    for (slot, e) in addrs.iter_mut().zip(es) {
        *slot = e.dst;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_follow_glibc() {
        let lo6: Ipv6Addr = "::1".parse().unwrap();
        let lo4 = Ipv6Addr::from(
            "127.0.0.1"
                .parse::<std::net::Ipv4Addr>()
                .unwrap()
                .to_ipv6_mapped(),
        );
        assert_eq!((precedence(&lo6), label(&lo6), scope(&lo6)), (50, 0, 2));
        assert_eq!((precedence(&lo4), label(&lo4), scope(&lo4)), (10, 4, 2));
        let g: Ipv6Addr = "2001:db8::1".parse().unwrap();
        assert_eq!((precedence(&g), label(&g), scope(&g)), (40, 1, 14));
        let teredo: Ipv6Addr = "2001::5".parse().unwrap();
        assert_eq!((precedence(&teredo), label(&teredo)), (40, 7));
        let ula: Ipv6Addr = "fd00::1".parse().unwrap();
        assert_eq!((precedence(&ula), label(&ula), scope(&ula)), (40, 6, 14));
    }

    fn entry(dst: &str, src: Option<(&str, u32)>, index: usize) -> Entry {
        Entry {
            dst: dst.parse().unwrap(),
            src: src.map(|(s, p)| (s.parse().unwrap(), p)),
            index,
        }
    }

    #[test]
    fn rules_order_destinations() {
        use core::cmp::Ordering::*;
        // Rule 1: a reachable IPv4 destination before an unreachable IPv6 one.
        let v6 = entry("2001:db8::1", None, 0);
        let v4 = entry("192.0.2.9", Some(("192.0.2.2", 24)), 1);
        assert_eq!(compare(&v4, &v6), Less);
        // Rule 6: with both reachable, IPv6's precedence (40) beats IPv4's (10).
        let v6 = entry("2001:db8::1", Some(("2001:db8::2", 64)), 0);
        assert_eq!(compare(&v6, &v4), Less);
        // Rule 2: a loopback destination from a loopback source keeps its scope.
        let lo = entry("::1", Some(("::1", 128)), 1);
        let far = entry("2001:db8::1", Some(("fe80::1", 64)), 0);
        assert_eq!(compare(&lo, &far), Less);
        // Rule 9: the longer common prefix with the source first, IPv4 within its subnet.
        let near = entry("192.0.2.200", Some(("192.0.2.2", 24)), 1);
        let other = entry("198.51.100.1", Some(("192.0.2.2", 24)), 0);
        assert_eq!(compare(&near, &other), Less);
        // Rule 10: otherwise the order they came in.
        let a = entry("192.0.2.7", Some(("192.0.2.2", 24)), 0);
        let b = entry("192.0.2.7", Some(("192.0.2.2", 24)), 1);
        assert_eq!(compare(&a, &b), Less);
    }
}
