//! Destination address selection (RFC 6724; Go's `addrselect.go`, glibc's `rfc3484_sort`
//! with its tables: `/etc/gai.conf`'s `label`, `precedence` and `scopev4` lines, read as
//! glibc's `gaiconf_init` reads them, or its defaults, which keep RFC 3484's precedence
//! table): the rules a host's own answer depends on. Rule 1 (avoid unusable destinations)
//! asks the kernel for the source address of each destination by connecting a UDP socket
//! to it, as glibc does; then matching scope (2), no deprecated source (3), a home address
//! as source (4), matching label (5), higher precedence (6), native transport (7), smaller
//! scope (8), longest matching prefix (9, IPv4 only inside the source's subnet), and the
//! original order. As in glibc, rules 3, 4, 7 and 9 take the source's flags, prefix length
//! and interface from the kernel's address list (an `RTM_GETADDR` netlink dump), which
//! glibc keeps only when the host has an IPv6 address other than `::1`; rule 7 takes the
//! interfaces' types from an `RTM_GETLINK` dump, when two sources are on different
//! interfaces.

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

/// One `label` or `precedence` line of gai.conf: the addresses under `prefix`/`bits`
/// get `val`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PrefixEntry {
    prefix: u128,
    bits: u32,
    val: u32,
}

/// One `scopev4` line: the IPv4 addresses `addr` under `mask` have scope `scope`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ScopeEntry {
    addr: u32,
    mask: u32,
    scope: u32,
}

/// `/etc/gai.conf`: the tables it gives (each replaces glibc's default table whole, with
/// an entry for every address added when the file names none), and its `reload` line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GaiConf {
    labels: Option<Vec<PrefixEntry>>,
    precedence: Option<Vec<PrefixEntry>>,
    scopes: Option<Vec<ScopeEntry>>,
    /// `reload yes`: the file is read again when it changes (else once per process).
    pub reload: bool,
}

/// C's `strtoul(s, &end, 10)` that must use all of `s` (glibc's checks in gai.conf): an
/// optional sign and decimal digits (a minus negates, modulo 2^64; an empty string is 0);
/// None when something is left over or the value overflows.
fn c_strtoul(s: &str) -> Option<u64> {
    if s.is_empty() {
        return Some(0);
    }
    let (neg, digits) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut v: u64 = 0;
    for b in digits.bytes() {
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(if neg { v.wrapping_neg() } else { v })
}

/// A `label`/`precedence` line's prefix and value, as glibc's `add_prefixlist` takes
/// them (a prefix without a length is a whole address).
fn prefix_entry(val1: &str, val2: &str) -> Option<PrefixEntry> {
    let (addr, bits) = match val1.split_once('/') {
        Some((a, b)) => (a, c_strtoul(b)?),
        None => (val1, 128),
    };
    let prefix = addr.parse::<Ipv6Addr>().ok()?.to_bits();
    let val = c_strtoul(val2)?;
    (bits <= 128 && val <= i32::MAX as u64).then_some(PrefixEntry {
        prefix,
        bits: bits as u32,
        val: val as u32,
    })
}

/// A `scopev4` line, as glibc takes it: an IPv4-mapped IPv6 prefix of 96 to 128 bits,
/// or an IPv4 prefix of at most 32.
fn scope_entry(val1: &str, val2: &str) -> Option<ScopeEntry> {
    let (addr, len) = match val1.split_once('/') {
        Some((a, b)) => (a, Some(c_strtoul(b)?)),
        None => (val1, None),
    };
    let (v4, bits) = if let Ok(a6) = addr.parse::<Ipv6Addr>() {
        (a6.to_ipv4_mapped()?, len.unwrap_or(128))
    } else {
        let a4 = addr.parse::<std::net::Ipv4Addr>().ok()?;
        let bits = len.unwrap_or(32);
        if bits > 32 {
            return None;
        }
        (a4, bits + 96)
    };
    let val = c_strtoul(val2)?;
    if !(96..=128).contains(&bits) || val > i32::MAX as u64 {
        return None;
    }
    let mask = if bits == 96 {
        0
    } else {
        u32::MAX << (128 - bits)
    };
    Some(ScopeEntry {
        addr: v4.to_bits() & mask,
        mask,
        scope: val as u32,
    })
}

impl GaiConf {
    /// Reads gai.conf's text as glibc's `gaiconf_init` does: `#` starts a comment, a line
    /// is a command and two values, and a line that does not parse is left out.
    pub fn parse(text: &[u8]) -> GaiConf {
        let text = String::from_utf8_lossy(text);
        let (mut labels, mut precedence, mut scopes) = (Vec::new(), Vec::new(), Vec::new());
        let mut reload = false;
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("");
            let mut words = line.split_ascii_whitespace();
            let (cmd, val1) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            let val2 = words.next().unwrap_or("");
            match cmd {
                "label" => labels.extend(prefix_entry(val1, val2)),
                "precedence" => precedence.extend(prefix_entry(val1, val2)),
                "scopev4" => scopes.extend(scope_entry(val1, val2)),
                "reload" => reload = val1 == "yes",
                _ => {}
            }
        }
        // Most specific first (a stable sort: equal lengths keep the file's order), and
        // a catch-all entry when the file gives none.
        let finish = |mut t: Vec<PrefixEntry>, all: u32| {
            if t.is_empty() {
                return None;
            }
            if !t.iter().any(|e| e.bits == 0) {
                t.push(PrefixEntry {
                    prefix: 0,
                    bits: 0,
                    val: all,
                });
            }
            t.sort_by_key(|e| core::cmp::Reverse(e.bits));
            Some(t)
        };
        let scopes = (!scopes.is_empty()).then(|| {
            if !scopes.iter().any(|e| e.mask == 0) {
                scopes.push(ScopeEntry {
                    addr: 0,
                    mask: 0,
                    scope: 14,
                });
            }
            scopes.sort_by_key(|e| core::cmp::Reverse(e.mask.leading_ones()));
            scopes
        });
        GaiConf {
            labels: finish(labels, 1),
            precedence: finish(precedence, 40),
            scopes,
            reload,
        }
    }

    fn lookup(table: &[PrefixEntry], a: &Ipv6Addr) -> u32 {
        let a = a.to_bits();
        table
            .iter()
            .find(|e| {
                let mask = if e.bits == 0 {
                    0
                } else {
                    u128::MAX << (128 - e.bits)
                };
                a & mask == e.prefix & mask
            })
            .map_or(0, |e| e.val)
    }

    fn precedence(&self, a: &Ipv6Addr) -> u32 {
        match &self.precedence {
            Some(t) => Self::lookup(t, a),
            None => u32::from(precedence(a)),
        }
    }

    fn label(&self, a: &Ipv6Addr) -> u32 {
        match &self.labels {
            Some(t) => Self::lookup(t, a),
            None => u32::from(label(a)),
        }
    }

    /// glibc's `get_scope`: an IPv4 address's from the `scopev4` table when there is one.
    fn scope(&self, a: &IpAddr) -> u32 {
        match (&self.scopes, a) {
            (Some(t), IpAddr::V4(v4)) => {
                let v4 = v4.to_bits();
                t.iter()
                    .find(|e| v4 & e.mask == e.addr)
                    .map_or(14, |e| e.scope)
            }
            _ => u32::from(scope(a)),
        }
    }
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
/// global 14; IPv4 link-local and loopback are link-local. An IPv4-mapped IPv6 address
/// (an AF_INET6 answer with AI_V4MAPPED) is scoped as the IPv6 address it is: global.
fn scope(a: &IpAddr) -> u8 {
    let a = match a {
        IpAddr::V4(v4) if v4.is_link_local() || v4.octets()[0] == 127 => return 2,
        IpAddr::V4(_) => return 14,
        IpAddr::V6(v6) => v6,
    };
    let s = a.segments();
    if s[0] >> 8 == 0xff {
        (s[0] & 0xf) as u8
    } else if in_prefix(a, [0xfe80, 0, 0, 0, 0, 0, 0, 0], 10) || a.is_loopback() {
        2
    } else if in_prefix(a, [0xfec0, 0, 0, 0, 0, 0, 0, 0], 10) {
        5
    } else {
        14
    }
}

/// `ifa_flags` bits that make an address one to avoid as a source (rule 3): deprecated,
/// or optimistic (RFC 4429 counts those as deprecated), as glibc groups them.
const AVOID: u8 = (libc::IFA_F_DEPRECATED | libc::IFA_F_OPTIMISTIC) as u8;
/// `ifa_flags` bit of a Mobile IPv6 home address (rule 4).
const HOME: u8 = libc::IFA_F_HOMEADDRESS as u8;

/// One address of the host, as the kernel's `RTM_GETADDR` dump gives it (glibc's
/// `__check_pf`): the address (an IPv4 one in its `::ffff:a.b.c.d` form), its
/// `ifa_flags`, prefix length and interface index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HostAddr {
    addr: Ipv6Addr,
    flags: u8,
    prefixlen: u32,
    index: u32,
}

fn read_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Length of a netlink header (`struct nlmsghdr`).
const NLMSG_HDR: usize = 16;

/// Sends one netlink route dump request of type `ty` and returns the payloads of the
/// answer's messages with their types, up to `NLMSG_DONE`; None when the socket, the
/// request or an answer fails (as glibc, which then goes without the information).
fn netlink_dump(ty: u16) -> Option<Vec<(u16, Vec<u8>)>> {
    // SAFETY: plain system call.
    let fd = unsafe {
        crate::sys::real::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return None;
    }
    let out = netlink_dump_on(fd, ty);
    // SAFETY: fd is ours and closed once.
    unsafe { crate::sys::real::close(fd) };
    out
}

fn netlink_dump_on(fd: i32, ty: u16) -> Option<Vec<(u16, Vec<u8>)>> {
    // The header, then a `struct rtgenmsg` (one family byte, AF_UNSPEC) padded to 4.
    let seq: u32 = 0x6d70_6700;
    let mut req = Vec::with_capacity(NLMSG_HDR + 4);
    req.extend_from_slice(&((NLMSG_HDR + 4) as u32).to_ne_bytes());
    req.extend_from_slice(&ty.to_ne_bytes());
    req.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16).to_ne_bytes());
    req.extend_from_slice(&seq.to_ne_bytes());
    req.extend_from_slice(&0u32.to_ne_bytes());
    req.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
    // SAFETY: req is readable for its length; an unbound netlink socket sends to the
    // kernel (address 0) and is bound by the kernel on the way.
    let n = unsafe { crate::sys::real::send(fd, req.as_ptr().cast(), req.len(), 0) };
    if n != req.len() as isize {
        return None;
    }
    let mut msgs = Vec::new();
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        // SAFETY: buf is writable for its length.
        let n = unsafe {
            crate::sys::real::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_TRUNC)
        };
        if n < 0 || n as usize > buf.len() {
            // An error, or a datagram larger than the buffer (cut short).
            return None;
        }
        let b = &buf[..n as usize];
        let mut at = 0;
        while at + NLMSG_HDR <= b.len() {
            let len = read_u32(b, at)? as usize;
            if len < NLMSG_HDR || at + len > b.len() {
                break;
            }
            let mty = read_u16(b, at + 4)?;
            if read_u32(b, at + 8)? == seq {
                match mty {
                    t if t == libc::NLMSG_DONE as u16 => return Some(msgs),
                    t if t == libc::NLMSG_ERROR as u16 => return None,
                    _ => msgs.push((mty, b[at + NLMSG_HDR..at + len].to_vec())),
                }
            }
            at += (len + 3) & !3;
        }
    }
}

/// The host's addresses with their flags, as glibc's `__check_pf` lists them for the
/// sort: empty unless the host has an IPv6 address other than `::1` (glibc keeps the
/// list only then) or when the kernel cannot be asked.
fn host_addrs() -> Vec<HostAddr> {
    let Some(msgs) = netlink_dump(libc::RTM_GETADDR) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut seen_v6 = false;
    for (ty, m) in msgs {
        if ty != libc::RTM_NEWADDR || m.len() < 8 {
            continue;
        }
        // struct ifaddrmsg: family, prefix length, flags, scope (one byte each), index.
        let (family, prefixlen, flags) = (i32::from(m[0]), u32::from(m[1]), m[2]);
        let index = read_u32(&m, 4).unwrap_or(0);
        if family != libc::AF_INET && family != libc::AF_INET6 {
            continue;
        }
        // IFA_ADDRESS wins as soon as it is met; IFA_LOCAL otherwise.
        let (mut local, mut address) = (None, None);
        let mut at = 8;
        while at + 4 <= m.len() {
            let (Some(len), Some(aty)) = (read_u16(&m, at), read_u16(&m, at + 2)) else {
                break;
            };
            let len = usize::from(len);
            if len < 4 || at + len > m.len() {
                break;
            }
            let data = &m[at + 4..at + len];
            if aty == libc::IFA_LOCAL {
                local = Some(data);
            } else if aty == libc::IFA_ADDRESS {
                address = Some(data);
                break;
            }
            at += (len + 3) & !3;
        }
        let Some(data) = address.or(local) else {
            continue;
        };
        let addr = if family == libc::AF_INET {
            let Ok(o) = <[u8; 4]>::try_from(data.get(..4).unwrap_or(&[])) else {
                continue;
            };
            std::net::Ipv4Addr::from(o).to_ipv6_mapped()
        } else {
            let Ok(o) = <[u8; 16]>::try_from(data.get(..16).unwrap_or(&[])) else {
                continue;
            };
            let a = Ipv6Addr::from(o);
            seen_v6 |= !a.is_loopback();
            a
        };
        out.push(HostAddr {
            addr,
            flags: flags & (AVOID | HOME),
            prefixlen,
            index,
        });
    }
    if !seen_v6 {
        out.clear();
    }
    out
}

/// The interfaces that carry traffic natively (rule 7), by index: those of a type other
/// than the IPv4-in-IPv4, IPv6-in-IPv6 and IPv6-in-IPv4 tunnels, as glibc's
/// `__check_native` decides; None when the kernel cannot be asked.
fn native_links() -> Option<Vec<(u32, bool)>> {
    let msgs = netlink_dump(libc::RTM_GETLINK)?;
    let tunnels = [libc::ARPHRD_TUNNEL, libc::ARPHRD_TUNNEL6, libc::ARPHRD_SIT];
    Some(
        msgs.iter()
            .filter(|(ty, m)| *ty == libc::RTM_NEWLINK && m.len() >= 8)
            // struct ifinfomsg: family, pad, type (u16), index (i32), ...
            .filter_map(|(_, m)| Some((read_u32(m, 4)?, read_u16(m, 2)?)))
            .map(|(index, ty)| (index, !tunnels.contains(&ty)))
            .collect(),
    )
}

/// What the sort knows of the source address of a destination: the address, and from
/// the host's list (glibc's `in6addrinfo`) its prefix length (0 when it is not listed),
/// flags and interface index (`u32::MAX` when not listed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Source {
    addr: IpAddr,
    prefixlen: u32,
    flags: u8,
    index: u32,
}

/// The source address the kernel would use for `dst`, with what `host` says of it; None
/// if there is no route.
fn source_of(dst: &IpAddr, host: &[HostAddr]) -> Option<Source> {
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
    let addr = super::ip_of(&out)?;
    let key = v6(&addr);
    let found = host.iter().find(|h| h.addr == key);
    Some(Source {
        addr,
        prefixlen: found.map_or(0, |h| h.prefixlen),
        flags: found.map_or(0, |h| h.flags),
        index: found.map_or(u32::MAX, |h| h.index),
    })
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
    src: Option<Source>,
    /// Whether the source's interface carries traffic natively (rule 7); false when
    /// that is not known, as in glibc.
    native: bool,
    index: usize,
}

fn rule9(e: &Entry) -> u32 {
    let Some(src) = e.src else { return 0 };
    let common = common_prefix_len(&src.addr, &e.dst);
    // For IPv4 a common prefix counts only inside the source's subnet. glibc builds the
    // mask as `0xffffffff << (32 - prefixlen)`: for an unlisted source (prefix length
    // 0) that is a shift by 32, which x86-64 and AArch64 take as a shift by 0, a mask of
    // the whole address.
    let plen = if src.prefixlen == 0 {
        32
    } else {
        src.prefixlen
    };
    if e.dst.is_ipv4() && common < plen {
        return 0;
    }
    common
}

fn compare(gai: &GaiConf, a: &Entry, b: &Entry) -> core::cmp::Ordering {
    use core::cmp::Ordering::*;
    // Rule 1: avoid unusable destinations.
    match (a.src.is_some(), b.src.is_some()) {
        (true, false) => return Less,
        (false, true) => return Greater,
        _ => {}
    }
    let (da, db) = (v6(&a.dst), v6(&b.dst));
    if let (Some(xa), Some(xb)) = (a.src, b.src) {
        // Rule 2: prefer matching scope.
        let ma = gai.scope(&a.dst) == gai.scope(&xa.addr);
        let mb = gai.scope(&b.dst) == gai.scope(&xb.addr);
        if ma != mb {
            return if ma { Less } else { Greater };
        }
        // Rule 3: avoid deprecated (and optimistic) source addresses.
        let (ma, mb) = (xa.flags & AVOID != 0, xb.flags & AVOID != 0);
        if ma != mb {
            return if ma { Greater } else { Less };
        }
        // Rule 4: prefer home addresses.
        let (ma, mb) = (xa.flags & HOME != 0, xb.flags & HOME != 0);
        if ma != mb {
            return if ma { Less } else { Greater };
        }
        let (sa, sb) = (v6(&xa.addr), v6(&xb.addr));
        // Rule 5: prefer matching label.
        let ma = gai.label(&da) == gai.label(&sa);
        let mb = gai.label(&db) == gai.label(&sb);
        if ma != mb {
            return if ma { Less } else { Greater };
        }
    }
    // Rule 6: prefer higher precedence.
    let (pa, pb) = (gai.precedence(&da), gai.precedence(&db));
    if pa != pb {
        return pb.cmp(&pa);
    }
    // Rule 7: prefer native transport, between sources on different interfaces.
    if let (Some(xa), Some(xb)) = (a.src, b.src)
        && xa.index != xb.index
        && a.native != b.native
    {
        return if a.native { Less } else { Greater };
    }
    // Rule 8: prefer smaller scope.
    let (sa, sb) = (gai.scope(&a.dst), gai.scope(&b.dst));
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

/// Go's `sortByRFC6724`: sorts `addrs` in place (stable for equal addresses), with the
/// tables of `gai`.
pub fn sort_by_rfc6724(addrs: &mut [IpAddr], gai: &GaiConf) {
    if addrs.len() < 2 {
        return;
    }
    let host = host_addrs();
    let mut es: Vec<Entry> = addrs
        .iter()
        .enumerate()
        .map(|(index, dst)| Entry {
            dst: *dst,
            src: source_of(dst, &host),
            native: false,
            index,
        })
        .collect();
    // Rule 7 asks the kernel for the interfaces' types only when two sources are on
    // different interfaces.
    let mut indexes = es.iter().filter_map(|e| e.src.map(|s| s.index));
    if let Some(first) = indexes.next()
        && indexes.any(|i| i != first)
    {
        let links = native_links().unwrap_or_default();
        for e in &mut es {
            if let Some(s) = e.src {
                e.native = links.iter().any(|&(i, native)| i == s.index && native);
            }
        }
    }
    es.sort_by(|a, b| compare(gai, a, b));
    for (slot, e) in addrs.iter_mut().zip(es) {
        *slot = e.dst;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_follow_glibc() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let tables = |a: &str| (precedence(&v6(&ip(a))), label(&v6(&ip(a))), scope(&ip(a)));
        assert_eq!(tables("::1"), (50, 0, 2));
        assert_eq!(tables("127.0.0.1"), (10, 4, 2));
        // As an IPv6 answer (AI_V4MAPPED), an IPv4 loopback address is global.
        assert_eq!(tables("::ffff:127.0.0.1"), (10, 4, 14));
        assert_eq!(tables("2001:db8::1"), (40, 1, 14));
        assert_eq!(tables("2001::5").1, 7);
        assert_eq!(tables("fd00::1"), (40, 6, 14));
    }

    #[test]
    fn gai_conf_replaces_tables() {
        let text = b"# prefer IPv4\nprecedence ::ffff:0:0/96 100 # comment\nlabel 2001:db8::/32 9\nlabel ::/0 3\nlabel fd00::/8\nprecedence bad/7 1\nprecedence ::/200 1\nprecedence ::/96 -1\nscopev4 10.0.0.0/8 5\nscopev4 ::ffff:169.254.0.0/112 2\nreload yes\n";
        let c = GaiConf::parse(text);
        assert!(c.reload);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let prec = |a: &str| c.precedence(&v6(&ip(a)));
        let label = |a: &str| c.label(&v6(&ip(a)));
        let scope = |a: &str| c.scope(&ip(a));
        // The table given replaces the default whole, with a catch-all of 40 added.
        assert_eq!(
            (prec("10.1.2.3"), prec("::1"), prec("2001:db8::1")),
            (100, 40, 40)
        );
        // A line without a value takes 0 (C's strtoul of an empty string); ::/0 is given.
        assert_eq!(
            (label("2001:db8::1"), label("fd00::1"), label("::1")),
            (9, 0, 3)
        );
        assert_eq!(
            (scope("10.1.2.3"), scope("169.254.9.9"), scope("::1")),
            (5, 2, 2)
        );
        assert_eq!((scope("192.0.2.1"), scope("::ffff:10.1.2.3")), (14, 14));
        // Without the file, glibc's defaults.
        let d = GaiConf::parse(b"");
        assert!(!d.reload);
        let v4 = v6(&ip("10.1.2.3"));
        assert_eq!(
            (d.precedence(&v4), d.label(&v4), d.scope(&ip("169.254.9.9"))),
            (10, 4, 2)
        );
        assert_eq!(
            (c_strtoul("+7"), c_strtoul("-0"), c_strtoul("7x")),
            (Some(7), Some(0), None)
        );
    }

    fn entry(dst: &str, src: Option<(&str, u32)>, index: usize) -> Entry {
        Entry {
            dst: dst.parse().unwrap(),
            src: src.map(|(s, p)| Source {
                addr: s.parse().unwrap(),
                prefixlen: p,
                flags: 0,
                index: 1,
            }),
            native: false,
            index,
        }
    }

    #[test]
    fn rules_order_destinations() {
        use core::cmp::Ordering::*;
        let compare = |a: &Entry, b: &Entry| compare(&GaiConf::default(), a, b);
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

    #[test]
    fn source_flags_and_transport_order_destinations() {
        use core::cmp::Ordering::*;
        let compare = |a: &Entry, b: &Entry| compare(&GaiConf::default(), a, b);
        let with = |mut e: Entry, flags: u8, index: u32, native: bool| {
            let s = e.src.as_mut().unwrap();
            (s.flags, s.index) = (flags, index);
            e.native = native;
            e
        };
        let a = || entry("2001:db8::1", Some(("2001:db8::1", 64)), 0);
        let b = || entry("2001:db8::2", Some(("2001:db8::2", 64)), 1);
        // Rule 3: a deprecated or optimistic source goes after one that is neither,
        // whatever the order the answers came in.
        let dep = with(a(), libc::IFA_F_DEPRECATED as u8, 1, true);
        assert_eq!(compare(&dep, &b()), Greater);
        let opt = with(a(), libc::IFA_F_OPTIMISTIC as u8, 1, true);
        assert_eq!(compare(&b(), &opt), Less);
        // Rule 4: a home address first, but after rule 3.
        let home = with(b(), HOME, 1, true);
        assert_eq!(compare(&home, &a()), Less);
        let both = with(b(), HOME | AVOID, 1, true);
        assert_eq!(compare(&both, &a()), Greater);
        // Rule 2 comes before rule 3: a matching scope from a deprecated source first.
        let far = entry("2001:db8::9", Some(("fe80::1", 64)), 0);
        assert_eq!(compare(&dep, &far), Less);
        // Rule 7: a native interface before a tunnel, only between two interfaces.
        let native = with(b(), 0, 2, true);
        let tunnel = with(a(), 0, 3, false);
        assert_eq!(compare(&native, &tunnel), Less);
        let same_if = with(b(), 0, 3, true);
        assert_eq!(compare(&tunnel, &same_if), Less);
        // Rule 6 comes before rule 7: IPv6 over a tunnel before IPv4.
        let v4 = entry("192.0.2.9", Some(("192.0.2.2", 24)), 0);
        let v4 = with(v4, 0, 2, true);
        assert_eq!(compare(&tunnel, &v4), Less);
        // Rule 9 for an IPv4 source the host list does not give (prefix length 0): the
        // whole address is the subnet.
        let near = entry("192.0.2.200", Some(("192.0.2.2", 0)), 1);
        let other = entry("198.51.100.1", Some(("192.0.2.2", 0)), 0);
        assert_eq!(compare(&other, &near), Less);
    }

    #[test]
    fn host_list_comes_from_the_kernel() {
        // The list is glibc's: present only with an IPv6 address other than ::1, and
        // then it holds the IPv4 ones too, in their mapped form.
        let host = host_addrs();
        let ifaces = crate::net::interface_addrs();
        let has_v6 = ifaces
            .iter()
            .any(|(a, _)| matches!(a, IpAddr::V6(v6) if !v6.is_loopback()));
        assert_eq!(!host.is_empty(), has_v6, "{host:?} vs {ifaces:?}");
        for (a, plen) in ifaces.iter().filter(|_| has_v6) {
            assert!(
                host.iter().any(|h| h.addr == v6(a) && h.prefixlen == *plen),
                "{a}/{plen} missing from {host:?}"
            );
        }
        let links = native_links().expect("RTM_GETLINK");
        assert!(links.iter().any(|&(_, native)| native), "{links:?}");
    }
}
