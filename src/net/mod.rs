//! The runtime's resolver (Go's `net` package, its pure-Go resolver): `getaddrinfo` for
//! goroutines that reads `/etc/hosts` and asks the DNS servers of `/etc/resolv.conf`
//! itself, over the poller, so that a lookup waiting for the network parks its goroutine
//! instead of holding a thread for the whole round trip (which the syscall hand-off of
//! libc's `getaddrinfo` does).
//!
//! The files: `conf.rs` decides whether we can serve the lookup at all (`nsswitch.conf`;
//! libc's NSS modules answer otherwise, as Go falls back to cgo), `dnsconfig.rs` reads
//! `resolv.conf`, `hosts.rs` and `services.rs` their files, `dnsmsg.rs` builds and parses
//! messages, `dnsclient.rs` exchanges them and walks the search list, `addrselect.rs`
//! sorts the answer by RFC 6724, and `addrinfo.rs` gives the answer in glibc's form:
//! a `struct addrinfo` list that glibc's `freeaddrinfo` frees; `nameinfo.rs` is
//! `getnameinfo` (`/etc/hosts` backwards, PTR queries, service names by port), and
//! `hostent.rs` the `gethostbyname` family.
//!
//! Rejected: libc's call through the syscall hand-off for every lookup (what remains for
//! configurations we cannot follow) holds a thread per lookup in flight, 1,000 threads
//! for 1,000 goroutines waiting on a slow server; a pool of helper threads bounds the
//! threads but queues fast lookups behind slow ones; glibc's `getaddrinfo_a` runs the
//! same lookups on threads of its own (such a pool); a resolver library (c-ares) would be a dependency
//! whose answers are its own, not glibc's. Go made the same choice for the same reasons:
//! its resolver is pure Go over the netpoller, cgo only where the configuration needs it.
//!
//! `/etc/host.conf`'s `multi` decides whether `/etc/hosts` gives every line that has a
//! name or the first, as in glibc. The configuration is read again when a file changed, looked at no more than every 5
//! seconds (Go's `resolverConfig`); `/etc/gai.conf` only when it says `reload yes`, as
//! glibc reads it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};

pub mod addrinfo;
pub mod addrselect;
pub mod conf;
pub mod dnsclient;
pub mod dnsconfig;
pub mod dnsmsg;
pub mod hostent;
pub mod hosts;
pub mod nameinfo;
pub mod services;

pub use addrinfo::getaddrinfo;
pub use hostent::{gethostbyname2, gethostbyname2_r};
pub use nameinfo::getnameinfo;

/// What a lookup reads: every configuration file, as of one moment.
pub struct Snapshot {
    pub dns: dnsconfig::DnsConfig,
    pub order: conf::HostLookupOrder,
    /// The order `netdns=go` uses: unknown sources skipped.
    pub order_forced: conf::HostLookupOrder,
    pub hosts: Vec<u8>,
    pub services: Vec<u8>,
    /// /etc/host.conf's `multi`: every line of /etc/hosts that has the name, not the first.
    pub multi: bool,
    /// /etc/gai.conf's tables for sorting answers.
    pub gai: addrselect::GaiConf,
}

struct Cache {
    checked_ns: i64,
    stamps: Vec<(i64, i64, i64)>,
    snap: Arc<Snapshot>,
}

static CACHE: Mutex<Option<Cache>> = Mutex::new(None);

/// How often the files' stamps are looked at.
const RECHECK_NS: i64 = 5_000_000_000;

const FILES: [&str; 6] = [
    "/etc/resolv.conf",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/services",
    "/etc/host.conf",
    "/etc/gai.conf",
];

/// A resolver variable of the environment (none in secure-execution mode, as glibc).
fn env(name: &str) -> Option<String> {
    // SAFETY: getauxval has no preconditions.
    if unsafe { libc::getauxval(libc::AT_SECURE) } != 0 {
        return None;
    }
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: getenv with a NUL-terminated name; a non-null result is a C string, copied.
    unsafe {
        let p = libc::getenv(c.as_ptr());
        (!p.is_null()).then(|| core::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

fn hostname() -> String {
    let mut b = [0u8; 256];
    // SAFETY: b is writable for its length minus the NUL kept at its end.
    if unsafe { libc::gethostname(b.as_mut_ptr().cast(), b.len() - 1) } != 0 {
        return String::new();
    }
    let n = b.iter().position(|&c| c == 0).unwrap_or(0);
    String::from_utf8_lossy(&b[..n]).into_owned()
}

fn load(root: &str) -> Snapshot {
    let read = |i: usize| conf::read_file(&format!("{root}{}", FILES[i]));
    let ns = read(1).unwrap_or_default();
    Snapshot {
        dns: dnsconfig::DnsConfig::parse(
            &read(0).unwrap_or_default(),
            &hostname(),
            &env,
            !root.is_empty(),
        ),
        order: conf::parse_nsswitch(&ns, false),
        order_forced: conf::parse_nsswitch(&ns, true),
        hosts: read(2).unwrap_or_default(),
        services: read(3).unwrap_or_default(),
        multi: hosts::parse_host_conf(&read(4).unwrap_or_default(), env("RESOLV_MULTI").as_deref()),
        gai: addrselect::GaiConf::parse(&read(5).unwrap_or_default()),
    }
}

/// The configuration as of now (read again if a file changed since it was read).
pub fn snapshot() -> Arc<Snapshot> {
    let now = crate::sys::nanotime();
    let root = conf::root();
    let mut g = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = g.as_mut() {
        if now - c.checked_ns < RECHECK_NS {
            return c.snap.clone();
        }
        c.checked_ns = now;
        let stamps: Vec<_> = FILES
            .iter()
            .map(|f| conf::stamp(&format!("{root}{f}")))
            .collect();
        if stamps == c.stamps {
            return c.snap.clone();
        }
    }
    let stamps = FILES
        .iter()
        .map(|f| conf::stamp(&format!("{root}{f}")))
        .collect();
    let mut snap = load(&root);
    if let Some(c) = g.as_ref()
        && !c.snap.gai.reload
    {
        // glibc reads gai.conf once per process unless it says `reload yes`.
        snap.gai = c.snap.gai.clone();
    }
    let snap = Arc::new(snap);
    *g = Some(Cache {
        checked_ns: now,
        stamps,
        snap: snap.clone(),
    });
    snap
}

/// A socket address for `ip`, `port` and IPv6 `scope`, with its length.
pub(crate) fn sockaddr_of(
    ip: &IpAddr,
    port: u16,
    scope: u32,
) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let len = match ip {
        IpAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: port.to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and aligned for it.
            unsafe { core::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            core::mem::size_of::<libc::sockaddr_in>()
        }
        IpAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: port.to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.octets(),
                },
                sin6_scope_id: scope,
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { core::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            core::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// The address of a socket address (None for another family).
pub(crate) fn ip_of(ss: &libc::sockaddr_storage) -> Option<IpAddr> {
    let p = (ss as *const libc::sockaddr_storage).cast::<u8>();
    match ss.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin = unsafe { &*(p as *const libc::sockaddr_in) };
            Some(IpAddr::V4(Ipv4Addr::from(
                sin.sin_addr.s_addr.to_ne_bytes(),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 = unsafe { &*(p as *const libc::sockaddr_in6) };
            Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

/// The interfaces' addresses and prefix lengths (getifaddrs(3)).
pub(crate) fn interface_addrs() -> Vec<(IpAddr, u32)> {
    let mut out = Vec::new();
    let mut list: *mut libc::ifaddrs = core::ptr::null_mut();
    // SAFETY: list is a valid out-parameter; freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return out;
    }
    let mut p = list;
    while !p.is_null() {
        // SAFETY: p is a node of the list getifaddrs gave, alive until freeifaddrs.
        let ifa = unsafe { &*p };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points to a sockaddr of the family it names, at most the
            // size of sockaddr_storage; the copy reads only that much for the families we
            // know.
            let addr = unsafe { read_sockaddr(ifa.ifa_addr) };
            let mask = if ifa.ifa_netmask.is_null() {
                None
            } else {
                // SAFETY: as above.
                unsafe { read_sockaddr(ifa.ifa_netmask) }
            };
            if let Some(a) = addr {
                let plen = match mask {
                    Some(IpAddr::V4(m)) => m.to_bits().count_ones(),
                    Some(IpAddr::V6(m)) => m.to_bits().count_ones(),
                    None => 0,
                };
                out.push((a, plen));
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: the list getifaddrs gave, freed once.
    unsafe { libc::freeifaddrs(list) };
    out
}

/// Copies a sockaddr of family AF_INET or AF_INET6 and returns its address.
///
/// # Safety
/// `sa` points to a valid sockaddr of the size its family implies.
unsafe fn read_sockaddr(sa: *const libc::sockaddr) -> Option<IpAddr> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    // SAFETY: caller contract: sa is readable for its family's size.
    let fam = unsafe { (*sa).sa_family } as i32;
    let n = match fam {
        libc::AF_INET => core::mem::size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => core::mem::size_of::<libc::sockaddr_in6>(),
        _ => return None,
    };
    // SAFETY: n bytes are readable at sa and writable at ss.
    unsafe {
        core::ptr::copy_nonoverlapping(
            sa.cast::<u8>(),
            (&mut ss as *mut libc::sockaddr_storage).cast::<u8>(),
            n,
        )
    };
    ip_of(&ss)
}
