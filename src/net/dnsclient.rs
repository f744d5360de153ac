//! The stub resolver's exchanges (Go's `dnsclient_unix.go`): queries over UDP, over TCP
//! when a reply is truncated (or with `use-vc`), through the runtime's poller, so that a
//! goroutine waiting for a DNS server parks instead of holding its thread.
//!
//! As glibc, the A and AAAA queries of one name go out together on one socket (one after
//! the other with `single-request`), each answered query is done, and the others go to the
//! next server: `attempts` rounds over the servers, `timeout` per exchange, the first
//! server rotating with `rotate`. NXDOMAIN and a real empty answer end the name; SERVFAIL,
//! REFUSED, a lame referral, a timeout or a network error move on to the next server.
//! Go's `goLookupIPCNAMEOrder` then walks the search list as glibc's `res_nsearch` does.

use core::ffi::c_void;
use core::sync::atomic::{AtomicUsize, Ordering};
use std::net::{IpAddr, SocketAddr};

use super::dnsconfig::DnsConfig;
use super::dnsmsg::{self, Response};
use crate::poll;
use crate::rt::netpoll::{self, MODE_READ, MODE_WRITE};

/// Why a name has no addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DnsError {
    /// NXDOMAIN: the name does not exist (EAI_NONAME).
    NoSuchHost,
    /// The name exists without addresses of the types asked (EAI_NODATA).
    NoData,
    /// SERVFAIL, REFUSED, a lame referral or an unreachable server (EAI_AGAIN).
    ServerFailure,
    /// No server answered in time (EAI_AGAIN).
    Timeout,
    /// A socket could not be made (EAI_SYSTEM with this errno: EMFILE…).
    System(i32),
}

/// The addresses found for a name, and the name they belong to (for AI_CANONNAME).
#[derive(Clone, Debug, Default)]
pub struct Answer {
    pub addrs: Vec<IpAddr>,
    pub canonical: String,
    /// The CNAMEs' owners that led to `canonical`, without trailing dots.
    pub aliases: Vec<String>,
}

/// `rotate`'s counter.
static NEXT_SERVER: AtomicUsize = AtomicUsize::new(0);

/// A socket registered with the poller, closed on drop.
struct Conn(i32);

impl Drop for Conn {
    fn drop(&mut self) {
        match poll::close_begin(self.0) {
            netpoll::Close::Deferred | netpoll::Close::Pending => {}
            // SAFETY: the socket is ours and nothing uses it any more.
            _ => unsafe {
                crate::sys::real::close(self.0);
            },
        }
    }
}

/// A non-blocking socket connected to `server`, registered with the poller.
fn dial(server: &SocketAddr, tcp: bool, deadline: i64) -> Result<Conn, DnsError> {
    let domain = if server.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    let ty = if tcp {
        libc::SOCK_STREAM
    } else {
        libc::SOCK_DGRAM
    };
    // SAFETY: plain system call.
    let fd = poll::raw(|| unsafe {
        crate::sys::real::socket(domain, ty | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0)
    } as isize);
    if fd < 0 {
        return Err(DnsError::System(-fd as i32));
    }
    let fd = fd as i32;
    if let Err(e) = netpoll::register_created(fd) {
        // SAFETY: fd is ours, just created.
        unsafe { crate::sys::real::close(fd) };
        return Err(DnsError::System(e));
    }
    let conn = Conn(fd);
    let (ss, len) = super::sockaddr_of(&server.ip(), server.port(), 0);
    // SAFETY: ss is valid for len bytes.
    let r = poll::raw(|| unsafe {
        crate::sys::real::connect(fd, (&ss as *const libc::sockaddr_storage).cast(), len)
    } as isize);
    if r == -(libc::EINPROGRESS as i64) {
        // Writable means connected, or failed: then SO_ERROR says why.
        let w = poll::io(fd, MODE_WRITE, Some(deadline), || {
            if poll::ready_now(fd, libc::POLLOUT) {
                0
            } else {
                -1
            }
        });
        match w {
            Some(w) if w < 0 => return Err(err_of(w)),
            None => return Err(DnsError::ServerFailure),
            _ => {}
        }
        if poll::so_error(fd) < 0 {
            return Err(DnsError::ServerFailure);
        }
    } else if r < 0 {
        return Err(err_of(r));
    }
    Ok(conn)
}

fn send(c: &Conn, b: &[u8], deadline: i64) -> i64 {
    poll::io(c.0, MODE_WRITE, Some(deadline), || {
        // SAFETY: b is readable for its length.
        unsafe {
            crate::sys::real::send(
                c.0,
                b.as_ptr().cast::<c_void>(),
                b.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        }
    })
    .unwrap_or(-(libc::EBADF as i64))
}

fn recv(c: &Conn, b: &mut [u8], deadline: i64) -> i64 {
    poll::io(c.0, MODE_READ, Some(deadline), || {
        // SAFETY: b is writable for its length.
        unsafe {
            crate::sys::real::recv(
                c.0,
                b.as_mut_ptr().cast::<c_void>(),
                b.len(),
                libc::MSG_DONTWAIT,
            )
        }
    })
    .unwrap_or(-(libc::EBADF as i64))
}

/// A random query id (the getrandom(2) system call, not glibc's 2.25 wrapper, which the
/// Python wheel's library, linked for glibc 2.17, must not name; the clock if it fails).
fn random_id() -> u16 {
    let mut b = [0u8; 2];
    // SAFETY: b is writable for 2 bytes.
    let n = unsafe {
        crate::sys::raw_syscall6(
            libc::SYS_getrandom as u64,
            b.as_mut_ptr() as u64,
            2,
            libc::GRND_NONBLOCK as u64,
            0,
            0,
            0,
        )
    } as i64;
    if n == 2 {
        u16::from_ne_bytes(b)
    } else {
        crate::sys::nanotime() as u16
    }
}

/// One query in flight: what was asked and, once answered, the reply.
struct Query {
    name: String,
    qtype: u16,
    id: u16,
    msg: Vec<u8>,
    reply: Option<Response>,
}

/// Go's `exchange` over TCP: the query with its two-byte length, the reply likewise.
fn exchange_tcp(server: &SocketAddr, q: &Query, deadline: i64) -> Result<Response, DnsError> {
    let c = dial(server, true, deadline)?;
    let mut out = (q.msg.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(&q.msg);
    let mut sent = 0;
    while sent < out.len() {
        let n = send(&c, &out[sent..], deadline);
        if n <= 0 {
            return Err(err_of(n.min(-1)));
        }
        sent += n as usize;
    }
    let read_full = |buf: &mut [u8]| -> Result<(), DnsError> {
        let mut got = 0;
        while got < buf.len() {
            let n = recv(&c, &mut buf[got..], deadline);
            if n <= 0 {
                return Err(err_of(if n == 0 {
                    -(libc::ECONNRESET as i64)
                } else {
                    n
                }));
            }
            got += n as usize;
        }
        Ok(())
    };
    let mut len = [0u8; 2];
    read_full(&mut len)?;
    let mut body = vec![0u8; u16::from_be_bytes(len) as usize];
    read_full(&mut body)?;
    match dnsmsg::parse_response(&body, &q.name, q.qtype) {
        Some(r) if r.id == q.id => Ok(r),
        _ => Err(DnsError::ServerFailure),
    }
}

fn err_of(e: i64) -> DnsError {
    if e == -(libc::ETIMEDOUT as i64) {
        DnsError::Timeout
    } else {
        DnsError::ServerFailure
    }
}

/// Sends the unanswered `qs` to `server` on one UDP socket (or over TCP with `use-vc`)
/// and fills in the replies that come before `timeout_ns`. The error of the exchange when
/// some query got no reply.
fn exchange(cfg: &DnsConfig, server: &SocketAddr, qs: &mut [Query]) -> Option<DnsError> {
    let deadline = crate::sys::nanotime().saturating_add(cfg.timeout_ns);
    if cfg.use_tcp {
        let mut err = None;
        for q in qs.iter_mut().filter(|q| q.reply.is_none()) {
            match exchange_tcp(server, q, deadline) {
                Ok(r) => q.reply = Some(r),
                Err(e) => err = Some(e),
            }
        }
        return err;
    }
    let c = match dial(server, false, deadline) {
        Ok(c) => c,
        Err(e) => return Some(e),
    };
    for q in qs.iter_mut().filter(|q| q.reply.is_none()) {
        let n = send(&c, &q.msg, deadline);
        if n < 0 {
            return Some(err_of(n));
        }
        if cfg.single_request {
            // One at a time: wait for this reply before sending the next query.
            if let Some(e) = receive(server, &c, core::slice::from_mut(q), deadline) {
                return Some(e);
            }
        }
    }
    if cfg.single_request {
        return None;
    }
    receive(server, &c, qs, deadline)
}

/// Reads replies on `c` until every query of `qs` has one or `deadline` passes; replies
/// that answer none of them (another id, another question) are dropped, as Go does.
fn receive(server: &SocketAddr, c: &Conn, qs: &mut [Query], deadline: i64) -> Option<DnsError> {
    let mut buf = vec![0u8; dnsmsg::MAX_UDP.max(512)];
    while qs.iter().any(|q| q.reply.is_none()) {
        let n = recv(c, &mut buf, deadline);
        if n < 0 {
            return Some(err_of(n));
        }
        let m = &buf[..n as usize];
        if m.len() < 2 {
            continue;
        }
        let id = u16::from_be_bytes([m[0], m[1]]);
        let Some(q) = qs.iter_mut().find(|q| q.reply.is_none() && q.id == id) else {
            continue;
        };
        let Some(r) = dnsmsg::parse_response(m, &q.name, q.qtype) else {
            continue;
        };
        if r.truncated {
            // Too large for a datagram: ask again over TCP.
            match exchange_tcp(server, q, deadline) {
                Ok(r) => q.reply = Some(r),
                Err(e) => return Some(e),
            }
        } else {
            q.reply = Some(r);
        }
    }
    None
}

/// Whether a reply settles its query: NXDOMAIN, or NOERROR that is not a lame referral
/// (Go's `checkHeader`).
fn settles(r: &Response) -> bool {
    match r.rcode {
        dnsmsg::RCODE_NXDOMAIN => true,
        dnsmsg::RCODE_SUCCESS => {
            !r.addrs.is_empty()
                || r.answered
                || r.authoritative
                || r.recursion_available
                || r.has_authority
        }
        _ => false,
    }
}

/// Go's `tryOneName` for several query types at once: the replies for `name` (absolute),
/// one per type in `qtypes`, or why none settled.
fn try_one_name(cfg: &DnsConfig, name: &str, qtypes: &[u16]) -> Result<Vec<Response>, DnsError> {
    let mut qs = Vec::new();
    for &qtype in qtypes {
        // Ids differ within one exchange, so that a reply names its query.
        let mut id = random_id();
        while qs.iter().any(|q: &Query| q.id == id) {
            id = id.wrapping_add(1);
        }
        let Some(msg) = dnsmsg::build_query(id, name, qtype, cfg.edns0, cfg.trust_ad) else {
            return Err(DnsError::NoSuchHost);
        };
        qs.push(Query {
            name: name.to_string(),
            qtype,
            id,
            msg,
            reply: None,
        });
    }
    let n = cfg.servers.len();
    let first = if cfg.rotate {
        NEXT_SERVER.fetch_add(1, Ordering::Relaxed)
    } else {
        0
    };
    let mut last = DnsError::Timeout;
    for _ in 0..cfg.attempts {
        for j in 0..n {
            let server = cfg.servers[(first + j) % n];
            match exchange(cfg, &server, &mut qs) {
                Some(e @ DnsError::System(_)) => return Err(e),
                Some(e) => last = e,
                None => {}
            }
            for q in qs.iter_mut() {
                if let Some(r) = &q.reply
                    && !settles(r)
                {
                    // SERVFAIL, REFUSED, a lame referral: the next server may know.
                    last = DnsError::ServerFailure;
                    q.reply = None;
                }
            }
            if qs.iter().all(|q| q.reply.is_some()) {
                return Ok(qs.into_iter().filter_map(|q| q.reply).collect());
            }
        }
    }
    Err(last)
}

/// The reverse name of an address (RFC 1035's `in-addr.arpa.`, RFC 3596's `ip6.arpa.`;
/// Go's `reverseaddr`); an IPv4-mapped IPv6 address is asked as IPv4, as glibc does.
pub fn reverse_name(ip: &IpAddr) -> String {
    match ip {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
            let mut s = String::with_capacity(73);
            for b in v6.octets().iter().rev() {
                s.push_str(&format!("{:x}.{:x}.", b & 0xf, b >> 4));
            }
            s.push_str("ip6.arpa.");
            s
        }
        _ => {
            let o = match ip {
                IpAddr::V4(v4) => v4.octets(),
                IpAddr::V6(v6) => v6
                    .to_ipv4_mapped()
                    .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED)
                    .octets(),
            };
            format!("{}.{}.{}.{}.in-addr.arpa.", o[3], o[2], o[1], o[0])
        }
    }
}

/// Go's `lookupAddr`, its DNS half: the first PTR name of `ip`, without its trailing dot.
pub fn lookup_ptr(cfg: &DnsConfig, ip: &IpAddr) -> Result<String, DnsError> {
    let replies = try_one_name(cfg, &reverse_name(ip), &[dnsmsg::TYPE_PTR])?;
    let r = replies.first().ok_or(DnsError::ServerFailure)?;
    if r.rcode == dnsmsg::RCODE_NXDOMAIN {
        return Err(DnsError::NoSuchHost);
    }
    match r.names.first() {
        Some(n) => Ok(n.trim_end_matches('.').to_string()),
        None => Err(DnsError::NoData),
    }
}

/// Go's `goLookupIPCNAMEOrder`, its DNS half: the addresses of `name` for `qtypes`
/// (`TYPE_A`, `TYPE_AAAA`), through the search list as glibc's `res_nsearch` walks it.
pub fn lookup_ip(cfg: &DnsConfig, name: &str, qtypes: &[u16]) -> Result<Answer, DnsError> {
    let names = cfg.name_list(name);
    let as_is_first =
        !name.ends_with('.') && name.bytes().filter(|&b| b == b'.').count() >= cfg.ndots;
    let mut saved = None;
    let (mut got_nodata, mut got_servfail) = (false, false);
    for (i, fqdn) in names.iter().enumerate() {
        let outcome = match try_one_name(cfg, fqdn, qtypes) {
            Ok(replies) => {
                let mut ans = Answer::default();
                let mut nx = 0;
                for r in &replies {
                    if r.rcode == dnsmsg::RCODE_NXDOMAIN {
                        nx += 1;
                    }
                    if ans.canonical.is_empty() || (!r.addrs.is_empty() && ans.addrs.is_empty()) {
                        ans.canonical = r.canonical.clone();
                        ans.aliases = r
                            .aliases
                            .iter()
                            .map(|a| a.trim_end_matches('.').to_string())
                            .collect();
                    }
                    ans.addrs.extend(&r.addrs);
                }
                if !ans.addrs.is_empty() {
                    ans.canonical = ans.canonical.trim_end_matches('.').to_string();
                    if ans.canonical.is_empty() {
                        ans.canonical = ".".to_string();
                    }
                    return Ok(ans);
                }
                if nx == replies.len() {
                    DnsError::NoSuchHost
                } else {
                    DnsError::NoData
                }
            }
            Err(e) => e,
        };
        match outcome {
            DnsError::Timeout | DnsError::System(_) => return Err(outcome),
            DnsError::NoData => got_nodata = true,
            DnsError::ServerFailure => got_servfail = true,
            DnsError::NoSuchHost => {}
        }
        if i == 0 && as_is_first {
            saved = Some(outcome);
        }
    }
    Err(if let Some(s) = saved {
        s
    } else if got_nodata {
        DnsError::NoData
    } else if got_servfail {
        DnsError::ServerFailure
    } else {
        DnsError::NoSuchHost
    })
}
