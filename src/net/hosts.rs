//! `/etc/hosts` (Go's `hosts.go`; glibc's `files` source): each line is an address and its
//! names, the first name canonical. A lookup gathers every line that carries the name (case
//! does not matter), in file order, as glibc does with `multi on`.

use std::net::IpAddr;

/// The addresses of one name, each with the canonical name of its line (the line's
/// first name), in file order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostsAnswer {
    pub addrs: Vec<IpAddr>,
    pub canonicals: Vec<String>,
}

impl HostsAnswer {
    /// What glibc's files source gives without `multi on` in /etc/host.conf: the first
    /// line only, for AF_UNSPEC (`v6` None), else the first line of each family.
    pub fn first_only(&self, v6: Option<bool>) -> HostsAnswer {
        let mut out = HostsAnswer::default();
        for (a, c) in self.addrs.iter().zip(&self.canonicals) {
            let taken = match v6 {
                None => !out.addrs.is_empty(),
                Some(_) => out.addrs.iter().any(|b| b.is_ipv6() == a.is_ipv6()),
            };
            if !taken {
                out.addrs.push(*a);
                out.canonicals.push(c.clone());
            }
        }
        out
    }

    /// The canonical name of the first address of a family (`v6`), or of any (None).
    pub fn canonical(&self, v6: Option<bool>) -> Option<&str> {
        self.addrs
            .iter()
            .zip(&self.canonicals)
            .find(|(a, _)| v6.is_none_or(|v6| a.is_ipv6() == v6))
            .map(|(_, c)| c.as_str())
    }
}

/// Looks `name` up in the text of a hosts file; None if no line names it. A trailing dot
/// is part of the name, as glibc compares them (`localhost.` is not `localhost`).
pub fn lookup_static_host(text: &[u8], name: &str) -> Option<HostsAnswer> {
    let mut ans: Option<HostsAnswer> = None;
    for line in text.split(|&b| b == b'\n') {
        let line = line.split(|&b| b == b'#').next().unwrap_or(&[]);
        let line = String::from_utf8_lossy(line);
        let mut f = line.split_whitespace();
        let Some(addr) = f.next() else { continue };
        // A zone (`fe80::1%eth0`) is not an address to glibc's parser: the line is skipped.
        let Ok(ip) = addr.parse::<IpAddr>() else {
            continue;
        };
        let names: Vec<&str> = f.collect();
        if names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
            let a = ans.get_or_insert_with(HostsAnswer::default);
            a.addrs.push(ip);
            a.canonicals.push(names[0].to_string());
        }
    }
    ans
}

/// Every line of a hosts file that has `name` (case does not matter): its address and
/// names, the canonical first.
pub fn lookup_static_lines(text: &[u8], name: &str) -> Vec<(IpAddr, Vec<String>)> {
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let line = line.split(|&b| b == b'#').next().unwrap_or(&[]);
        let line = String::from_utf8_lossy(line);
        let mut f = line.split_whitespace();
        let Some(Ok(ip)) = f.next().map(str::parse::<IpAddr>) else {
            continue;
        };
        let names: Vec<String> = f.map(str::to_string).collect();
        if names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
            out.push((ip, names));
        }
    }
    out
}

/// Whether /etc/host.conf turns `multi` on (glibc's default is off; `RESOLV_MULTI` in
/// the environment overrides the file, as glibc reads it).
pub fn parse_host_conf(text: &[u8], env: Option<&str>) -> bool {
    let word = |w: &str| w.eq_ignore_ascii_case("on");
    if let Some(v) = env {
        return word(v.trim());
    }
    let mut multi = false;
    for line in String::from_utf8_lossy(text).lines() {
        let mut f = line.split('#').next().unwrap_or("").split_whitespace();
        if f.next().is_some_and(|k| k.eq_ignore_ascii_case("multi")) {
            multi = f.next().is_some_and(word);
        }
    }
    multi
}

/// The first name of the first line of a hosts file with address `ip` (glibc's files
/// `gethostbyaddr`).
pub fn lookup_static_addr(text: &[u8], ip: &IpAddr) -> Option<String> {
    for line in text.split(|&b| b == b'\n') {
        let line = line.split(|&b| b == b'#').next().unwrap_or(&[]);
        let line = String::from_utf8_lossy(line);
        let mut f = line.split_whitespace();
        let (Some(addr), Some(name)) = (f.next(), f.next()) else {
            continue;
        };
        if addr.parse::<IpAddr>().is_ok_and(|a| a == *ip) {
            return Some(name.to_string());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathers_lines_in_order() {
        let t = b"127.0.0.1 localhost\n::1 localhost ip6-localhost\n# 1.2.3.4 x\n10.0.0.1 Host.example host alias\n10.0.0.2 other host\n";
        let a = lookup_static_host(t, "localhost").unwrap();
        assert_eq!(a.addrs.len(), 2);
        let h = lookup_static_host(t, "HOST").unwrap();
        assert!(lookup_static_host(t, "host.").is_none());
        assert_eq!(h.canonical(None), Some("Host.example"));
        assert_eq!(a.canonical(Some(true)), Some("localhost"));
        assert_eq!(
            lookup_static_host(t, "other")
                .unwrap()
                .canonical(Some(false)),
            Some("other")
        );
        assert_eq!(
            h.addrs,
            [
                "10.0.0.1".parse::<IpAddr>().unwrap(),
                "10.0.0.2".parse().unwrap()
            ]
        );
        assert!(lookup_static_host(t, "x").is_none());
        let first = h.first_only(None);
        assert_eq!(first.addrs.len(), 1);
        assert_eq!(a.first_only(Some(true)).addrs.len(), 2);
        assert!(parse_host_conf(b"order hosts,bind\nmulti on\n", None));
        assert!(!parse_host_conf(b"multi on\n", Some("off")));
        assert!(!parse_host_conf(b"", None));
        let ip = "10.0.0.2".parse().unwrap();
        assert_eq!(lookup_static_addr(t, &ip).as_deref(), Some("other"));
    }
}
