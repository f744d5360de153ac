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
        let ip = "10.0.0.2".parse().unwrap();
        assert_eq!(lookup_static_addr(t, &ip).as_deref(), Some("other"));
    }
}
