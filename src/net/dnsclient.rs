//! The stub resolver's exchanges (Go's `dnsclient_unix.go`): queries over UDP, over TCP
//! when a reply is truncated (or with `use-vc`), through the runtime's poller, so that a
//! goroutine waiting for a DNS server parks instead of holding its thread.
//!
//! As glibc, the A and AAAA queries of one name go out together on one socket (one after
//! the other with `single-request`), each answered query is done, and the others go to the
//! next server: `attempts` rounds over the servers, `timeout` per exchange, the first
//! server rotating with `rotate`. Over UDP, SERVFAIL, NOTIMP, REFUSED and a lame referral
//! reject a query (glibc's `send_dg`): when the server answered the other query of the
//! pair, the rejected one counts as empty, else both go to the next server; a timeout or
//! a network error moves on too. Over TCP every reply is taken (glibc's `send_vc`). A
//! reply taken ends the name with glibc's `h_errno` for it (`res_query`): NXDOMAIN
//! HOST_NOT_FOUND, an empty NOERROR NO_DATA, SERVFAIL TRY_AGAIN, any other code (FORMERR,
//! or REFUSED and NOTIMP over TCP) NO_RECOVERY; no reply at all is TRY_AGAIN. The names of
//! the search list are then tried as glibc's `res_nsearch` tries them (`lookup_ip`).

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
    /// NXDOMAIN: the name does not exist (HOST_NOT_FOUND, EAI_NONAME).
    NoSuchHost,
    /// The name exists without addresses of the types asked (NO_DATA, EAI_NODATA).
    NoData,
    /// A reply glibc takes as final with another code: FORMERR, or REFUSED and NOTIMP over
    /// TCP (NO_RECOVERY, EAI_NONAME).
    NoRecovery,
    /// SERVFAIL, or no server took the query (REFUSED, NOTIMP, a lame referral, an
    /// unreachable server): TRY_AGAIN, EAI_AGAIN. `unanswered`: the last query asked got
    /// no reply it took (glibc's `res_send` failed, leaving errno ETIMEDOUT or
    /// ECONNREFUSED, which its dns source reports as unavailable: `gethostbyname_r`
    /// returns EAGAIN; after a later answered query it returns 0).
    ServerFailure { unanswered: bool },
    /// No server answered in time (EAI_AGAIN).
    Timeout,
    /// A socket could not be made (EAI_SYSTEM with this errno: EMFILE…).
    System(i32),
}

/// How an exchange reports a network error (a refused or reset connection, a bad reply
/// over TCP).
const NET_ERROR: DnsError = DnsError::ServerFailure { unanswered: true };

/// Why every server failed one name's queries (glibc's `res_send` returning -1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unanswered {
    /// Each server rejected, timed out or could not be reached. `servfail`: the last reply
    /// to the first query was SERVFAIL (glibc's search list goes on after it, and stops
    /// after any other); `reached`: some server replied or timed out (else glibc's errno
    /// is ECONNREFUSED, which ends the search at once); `timeout`: the last exchange
    /// timed out.
    Rejected {
        servfail: bool,
        reached: bool,
        timeout: bool,
    },
    /// The name cannot be asked (an empty label, one over 63 bytes): not found.
    BadName,
    /// A socket could not be made.
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
            None => return Err(NET_ERROR),
            _ => {}
        }
        if poll::so_error(fd) < 0 {
            return Err(NET_ERROR);
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
    /// Whether the reply came over TCP (taken whatever its code, as glibc's `send_vc`).
    tcp: bool,
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
        _ => Err(NET_ERROR),
    }
}

fn err_of(e: i64) -> DnsError {
    if e == -(libc::ETIMEDOUT as i64) {
        DnsError::Timeout
    } else {
        NET_ERROR
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
                Ok(r) => {
                    q.reply = Some(r);
                    q.tcp = true;
                }
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
                Ok(r) => {
                    q.reply = Some(r);
                    q.tcp = true;
                }
                Err(e) => return Some(e),
            }
        } else {
            q.reply = Some(r);
        }
    }
    None
}

/// Whether a reply settles its query: over UDP, anything but SERVFAIL, NOTIMP, REFUSED
/// and a lame referral (an empty NOERROR that is neither authoritative nor from a
/// recursive server, without authority records: glibc's `send_dg`, Go's `checkHeader`);
/// over TCP, any reply (glibc's `send_vc`).
fn settles(r: &Response, tcp: bool) -> bool {
    if tcp {
        return true;
    }
    match r.rcode {
        dnsmsg::RCODE_SERVFAIL | dnsmsg::RCODE_NOTIMP | dnsmsg::RCODE_REFUSED => false,
        dnsmsg::RCODE_SUCCESS => {
            !r.addrs.is_empty()
                || r.answered
                || r.authoritative
                || r.recursion_available
                || r.has_authority
        }
        _ => true,
    }
}

/// Go's `tryOneName` for several query types at once: the replies for `name` (absolute)
/// that settle their queries, in the order of `qtypes` (a query one server rejected while
/// it answered another is left out, as glibc's `send_dg` leaves it empty), or why none
/// did.
fn try_one_name(cfg: &DnsConfig, name: &str, qtypes: &[u16]) -> Result<Vec<Response>, Unanswered> {
    let mut qs = Vec::new();
    for &qtype in qtypes {
        // Ids differ within one exchange, so that a reply names its query.
        let mut id = random_id();
        while qs.iter().any(|q: &Query| q.id == id) {
            id = id.wrapping_add(1);
        }
        let Some(msg) = dnsmsg::build_query(id, name, qtype, cfg.edns0, cfg.trust_ad) else {
            return Err(Unanswered::BadName);
        };
        qs.push(Query {
            name: name.to_string(),
            qtype,
            id,
            msg,
            reply: None,
            tcp: false,
        });
    }
    let n = cfg.servers.len();
    let first = if cfg.rotate {
        NEXT_SERVER.fetch_add(1, Ordering::Relaxed)
    } else {
        0
    };
    let (mut servfail, mut reached, mut timeout) = (false, false, true);
    for _ in 0..cfg.attempts {
        for j in 0..n {
            let server = cfg.servers[(first + j) % n];
            let pending: Vec<bool> = qs.iter().map(|q| q.reply.is_none()).collect();
            match exchange(cfg, &server, &mut qs) {
                Some(DnsError::System(e)) => return Err(Unanswered::System(e)),
                Some(DnsError::Timeout) => (reached, timeout) = (true, true),
                _ => timeout = false,
            }
            let mut rejected = vec![false; qs.len()];
            for (i, q) in qs.iter_mut().enumerate() {
                if !pending[i] {
                    continue;
                }
                if let Some(r) = &q.reply {
                    reached = true;
                    if i == 0 {
                        servfail = r.rcode == dnsmsg::RCODE_SERVFAIL;
                    }
                    if !settles(r, q.tcp) {
                        // The next server may know.
                        rejected[i] = true;
                        q.reply = None;
                    }
                }
            }
            let answered = qs.iter().any(|q| q.reply.is_some());
            if answered
                && qs
                    .iter()
                    .zip(&rejected)
                    .all(|(q, &r)| q.reply.is_some() || r)
            {
                return Ok(qs.into_iter().filter_map(|q| q.reply).collect());
            }
        }
    }
    Err(Unanswered::Rejected {
        servfail,
        reached,
        timeout,
    })
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

/// The `h_errno` glibc's `res_query` gives one name's settled replies (`Ok`: some
/// carry addresses): the first reply's code, or the second's when the first is NOERROR.
fn reply_outcome(replies: &[Response]) -> DnsError {
    let rcode = match replies {
        [a, b, ..] if a.rcode == dnsmsg::RCODE_SUCCESS => b.rcode,
        [a, ..] => a.rcode,
        [] => dnsmsg::RCODE_SUCCESS,
    };
    match rcode {
        dnsmsg::RCODE_NXDOMAIN => DnsError::NoSuchHost,
        dnsmsg::RCODE_SUCCESS => DnsError::NoData,
        dnsmsg::RCODE_SERVFAIL => DnsError::ServerFailure { unanswered: false },
        _ => DnsError::NoRecovery,
    }
}

/// Go's `lookupAddr`, its DNS half: the first PTR name of `ip`, without its trailing dot.
pub fn lookup_ptr(cfg: &DnsConfig, ip: &IpAddr) -> Result<String, DnsError> {
    let replies = match try_one_name(cfg, &reverse_name(ip), &[dnsmsg::TYPE_PTR]) {
        Ok(r) => r,
        Err(Unanswered::System(e)) => return Err(DnsError::System(e)),
        Err(Unanswered::BadName) => return Err(DnsError::NoSuchHost),
        Err(Unanswered::Rejected { timeout: true, .. }) => return Err(DnsError::Timeout),
        Err(Unanswered::Rejected { .. }) => {
            return Err(DnsError::ServerFailure { unanswered: true });
        }
    };
    match replies.first().and_then(|r| r.names.first()) {
        Some(n) => Ok(n.trim_end_matches('.').to_string()),
        None => Err(reply_outcome(&replies)),
    }
}

/// One name of the search list asked: its addresses, or glibc's `h_errno` for it with
/// what its search needs to know (the last reply's SERVFAIL, a server reached).
enum Tried {
    Found(Answer),
    Failed {
        error: DnsError,
        servfail: bool,
        reached: bool,
    },
}

fn try_name(cfg: &DnsConfig, fqdn: &str, qtypes: &[u16]) -> Tried {
    let failed = |error, servfail, reached| Tried::Failed {
        error,
        servfail,
        reached,
    };
    let replies = match try_one_name(cfg, fqdn, qtypes) {
        Ok(r) => r,
        Err(Unanswered::System(e)) => return failed(DnsError::System(e), false, true),
        Err(Unanswered::BadName) => return failed(DnsError::NoSuchHost, false, true),
        Err(Unanswered::Rejected {
            servfail,
            reached,
            timeout,
        }) => {
            let error = if timeout {
                DnsError::Timeout
            } else {
                DnsError::ServerFailure { unanswered: true }
            };
            return failed(error, servfail, reached);
        }
    };
    let mut ans = Answer::default();
    for r in &replies {
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
    if ans.addrs.is_empty() {
        let error = reply_outcome(&replies);
        let servfail = replies
            .first()
            .is_some_and(|r| r.rcode == dnsmsg::RCODE_SERVFAIL);
        return failed(error, servfail, true);
    }
    ans.canonical = ans.canonical.trim_end_matches('.').to_string();
    if ans.canonical.is_empty() {
        ans.canonical = ".".to_string();
    }
    Tried::Found(ans)
}

/// Go's `goLookupIPCNAMEOrder`, its DNS half: the addresses of `name` for `qtypes`
/// (`TYPE_A`, `TYPE_AAAA`), through the search list as glibc's `res_nsearch` walks it: the
/// name as it is first when it has `ndots` dots (its failure is the one reported); then
/// each search suffix, going on after NXDOMAIN, an empty answer or SERVFAIL and stopping
/// after any other failure (or at once when no server could be reached); then the name
/// as it is, if not tried first. Without a saved failure, an empty answer seen, then a
/// SERVFAIL seen, the last name's failure is the one reported. A timeout ends the walk
/// (glibc would time out on each name).
pub fn lookup_ip(cfg: &DnsConfig, name: &str, qtypes: &[u16]) -> Result<Answer, DnsError> {
    let names = cfg.name_list(name);
    let trailing_dot = name.ends_with('.');
    let as_is_first = trailing_dot || name.bytes().filter(|&b| b == b'.').count() >= cfg.ndots;
    let search_end = if as_is_first {
        names.len()
    } else {
        names.len() - 1
    };
    let mut saved = None;
    let (mut got_nodata, mut got_servfail, mut done) = (false, false, false);
    let mut last = DnsError::NoSuchHost;
    for (i, fqdn) in names.iter().enumerate() {
        let searching = !(i == 0 && as_is_first) && i < search_end;
        if searching && done {
            continue;
        }
        let (error, servfail, reached) = match try_name(cfg, fqdn, qtypes) {
            Tried::Found(ans) => return Ok(ans),
            Tried::Failed {
                error,
                servfail,
                reached,
            } => (error, servfail, reached),
        };
        if matches!(error, DnsError::Timeout | DnsError::System(_)) {
            return Err(error);
        }
        last = error;
        if i == 0 && as_is_first {
            if trailing_dot {
                return Err(error);
            }
            saved = Some(error);
            continue;
        }
        if !searching {
            continue;
        }
        if !reached {
            // No server could be reached (glibc's ECONNREFUSED): TRY_AGAIN at once.
            return Err(DnsError::ServerFailure { unanswered: true });
        }
        match error {
            DnsError::NoData => got_nodata = true,
            DnsError::NoSuchHost => {}
            DnsError::ServerFailure { .. } if servfail => got_servfail = true,
            _ => done = true,
        }
    }
    // glibc's dns source tells an unavailable server (`res_send` failed last) from a
    // failure after an answered query by the errno the last query left.
    let unanswered = matches!(last, DnsError::ServerFailure { unanswered: true });
    Err(if let Some(s) = saved {
        match s {
            DnsError::ServerFailure { .. } => DnsError::ServerFailure { unanswered },
            other => other,
        }
    } else if got_nodata {
        DnsError::NoData
    } else if got_servfail {
        DnsError::ServerFailure { unanswered }
    } else {
        last
    })
}
