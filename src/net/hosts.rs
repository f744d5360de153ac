//! `/etc/hosts` (Go's `hosts.go`; glibc's `files` source): each line is an address and its
//! names, the first name canonical. A lookup gathers every line that carries the name (case
//! does not matter), in file order, as glibc does with `multi on`.

use std::net::IpAddr;

/// The addresses of one name and its canonical name (the first name of the first line
/// that has it).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostsAnswer {
    pub addrs: Vec<IpAddr>,
    pub canonical: String,
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
        let addr = addr.split('%').next().unwrap_or(addr);
        let Ok(ip) = addr.parse::<IpAddr>() else {
            continue;
        };
        let names: Vec<&str> = f.collect();
        if names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
            let a = ans.get_or_insert_with(|| HostsAnswer {
                addrs: Vec::new(),
                canonical: names[0].to_string(),
            });
            a.addrs.push(ip);
        }
    }
    ans
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
        assert_eq!(h.canonical, "Host.example");
        assert_eq!(
            h.addrs,
            [
                "10.0.0.1".parse::<IpAddr>().unwrap(),
                "10.0.0.2".parse().unwrap()
            ]
        );
        assert!(lookup_static_host(t, "x").is_none());
    }
}
