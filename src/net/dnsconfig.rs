//! `/etc/resolv.conf` (Go's `dnsconfig.go`, `dnsconfig_unix.go`), read as glibc reads it:
//! `nameserver` (at most 3), `search` and `domain` (the last of them wins), and `options`
//! `ndots:n` (at most 15), `timeout:n` (at most 30 s), `attempts:n` (at most 5), `rotate`,
//! `single-request`, `single-request-reopen` (both: A and AAAA one after the other, as
//! Go), `use-vc` (TCP only), `trust-ad`, `edns0`. `LOCALDOMAIN` and `RES_OPTIONS` in the
//! environment change the search list and options as they do for glibc.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The resolver's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct DnsConfig {
    /// Servers to ask, in order (port 53; `[::1]:53` and `127.0.0.1:53` when none given).
    pub servers: Vec<SocketAddr>,
    /// Suffixes to append to relative names, each with its trailing dot.
    pub search: Vec<String>,
    /// The number of dots that make a name be tried as given first.
    pub ndots: usize,
    /// Wait per query and server, in nanoseconds.
    pub timeout_ns: i64,
    /// Rounds over the server list.
    pub attempts: usize,
    /// Start at a different server each query, round robin.
    pub rotate: bool,
    /// A and AAAA one after the other instead of together.
    pub single_request: bool,
    /// TCP from the start.
    pub use_tcp: bool,
    /// Set the AD bit in queries.
    pub trust_ad: bool,
    /// Add an EDNS0 record (a larger UDP payload).
    pub edns0: bool,
}

impl Default for DnsConfig {
    fn default() -> Self {
        DnsConfig {
            servers: Vec::new(),
            search: Vec::new(),
            ndots: 1,
            timeout_ns: 5_000_000_000,
            attempts: 2,
            rotate: false,
            single_request: false,
            use_tcp: false,
            trust_ad: false,
            edns0: false,
        }
    }
}

/// Makes `name` absolute (one trailing dot), lowercased as DNS compares names.
fn ensure_rooted(name: &str) -> String {
    let mut s = name.trim_end_matches('.').to_string();
    s.push('.');
    s
}

impl DnsConfig {
    /// Parses resolv.conf's text; `hostname` gives the default search domain (the part
    /// after its first dot) when the file names none.
    ///
    /// `test_ports`: a `nameserver` may name a port (`127.0.0.1:5353`, `[::1]:5353`), which
    /// glibc would reject; only under `GMP_RESOLV_ROOT`, for tests whose server cannot
    /// have port 53.
    pub fn parse(
        text: &[u8],
        hostname: &str,
        env: &dyn Fn(&str) -> Option<String>,
        test_ports: bool,
    ) -> Self {
        let mut c = DnsConfig::default();
        let text = String::from_utf8_lossy(text);
        let mut search_set = false;
        for line in text.lines() {
            let line = line.split(['#', ';']).next().unwrap_or("");
            let mut f = line.split_whitespace();
            let Some(key) = f.next() else { continue };
            match key {
                "nameserver" => {
                    if let Some(a) = f.next()
                        && c.servers.len() < 3
                    {
                        if let Some(ip) = parse_server(a) {
                            c.servers.push(SocketAddr::new(ip, 53));
                        } else if test_ports && let Ok(sa) = a.parse::<SocketAddr>() {
                            c.servers.push(sa);
                        }
                    }
                }
                "domain" => {
                    if let Some(d) = f.next() {
                        c.search = vec![ensure_rooted(d)];
                        search_set = true;
                    }
                }
                "search" => {
                    c.search = f.filter(|d| *d != ".").map(ensure_rooted).collect();
                    c.search.truncate(32);
                    search_set = true;
                }
                "options" => {
                    for o in f {
                        c.option(o);
                    }
                }
                _ => {}
            }
        }
        if let Some(d) = env("LOCALDOMAIN") {
            c.search = d.split_whitespace().map(ensure_rooted).collect();
            search_set = true;
        }
        if let Some(o) = env("RES_OPTIONS") {
            for o in o.split_whitespace() {
                c.option(o);
            }
        }
        if !search_set
            && let Some((_, d)) = hostname.split_once('.')
            && !d.is_empty()
        {
            c.search = vec![ensure_rooted(d)];
        }
        if c.servers.is_empty() {
            c.servers = vec![
                SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 53),
                SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 53),
            ];
        }
        c
    }

    /// One item of an `options` line (unknown ones are ignored, as glibc does).
    fn option(&mut self, o: &str) {
        let num = |p: &str| o.strip_prefix(p).and_then(|v| v.parse::<i64>().ok());
        if let Some(n) = num("ndots:") {
            self.ndots = n.clamp(0, 15) as usize;
        } else if let Some(n) = num("timeout:") {
            self.timeout_ns = n.clamp(1, 30) * 1_000_000_000;
        } else if let Some(n) = num("attempts:") {
            self.attempts = n.clamp(1, 5) as usize;
        } else {
            match o {
                "rotate" => self.rotate = true,
                "single-request" | "single-request-reopen" => self.single_request = true,
                "use-vc" | "usevc" | "tcp" => self.use_tcp = true,
                "trust-ad" => self.trust_ad = true,
                "edns0" => self.edns0 = true,
                _ => {}
            }
        }
    }

    /// Go's `nameList`: the absolute names to try for `name`, in order (glibc's
    /// `res_nsearch`): a rooted name alone; else the name as given first when it has at
    /// least `ndots` dots, then with each search suffix, then as given if not tried yet.
    pub fn name_list(&self, name: &str) -> Vec<String> {
        if name.ends_with('.') {
            return vec![name.to_string()];
        }
        let dots = name.bytes().filter(|&b| b == b'.').count();
        let rooted = format!("{name}.");
        let mut out = Vec::new();
        let as_is_first = dots >= self.ndots;
        if as_is_first {
            out.push(rooted.clone());
        }
        for s in &self.search {
            let n = format!("{name}.{s}");
            if n.len() <= 254 {
                out.push(n);
            }
        }
        if !as_is_first {
            out.push(rooted);
        }
        out
    }
}

/// A nameserver line's address (an IPv6 one may carry a `%zone`, which we do not serve:
/// such a server is skipped).
fn parse_server(a: &str) -> Option<IpAddr> {
    a.parse::<IpAddr>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_glibc_options() {
        let text = b"nameserver 10.0.0.1\nnameserver ::1 # c\nsearch a.example b.example\noptions ndots:3 timeout:40 attempts:0 rotate single-request-reopen\n";
        let c = DnsConfig::parse(text, "h.x.example", &|_| None, false);
        assert_eq!(c.servers.len(), 2);
        assert_eq!(c.search, ["a.example.", "b.example."]);
        assert_eq!((c.ndots, c.timeout_ns, c.attempts), (3, 30_000_000_000, 1));
        assert!(c.rotate && c.single_request);
        let d = DnsConfig::parse(b"", "h.x.example", &|_| None, false);
        assert_eq!(d.search, ["x.example."]);
        assert_eq!(d.servers.len(), 2);
        let e = DnsConfig::parse(
            b"domain z.example\nsearch q.example\nnameserver 127.0.0.1:5353\n",
            "h",
            &|k| (k == "RES_OPTIONS").then(|| "ndots:2".to_string()),
            true,
        );
        assert_eq!(e.servers, ["127.0.0.1:5353".parse::<SocketAddr>().unwrap()]);
        assert_eq!(
            (e.search.as_slice(), e.ndots),
            (&["q.example.".to_string()][..], 2)
        );
    }

    #[test]
    fn name_list_follows_ndots() {
        let c = DnsConfig::parse(
            b"search s.example\noptions ndots:1\n",
            "h",
            &|_| None,
            false,
        );
        assert_eq!(c.name_list("www"), ["www.s.example.", "www."]);
        assert_eq!(c.name_list("a.b"), ["a.b.", "a.b.s.example."]);
        assert_eq!(c.name_list("a.b."), ["a.b."]);
    }
}
