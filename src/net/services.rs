//! `/etc/services` (Go's `port_unix.go`): a service name and protocol to a port, as
//! glibc's `getservbyname_r` finds them in the `files` source (names and aliases compare
//! exactly; the first line wins).

/// The port of service `name` over protocol `proto` ("tcp", "udp"…).
pub fn lookup_port(text: &[u8], name: &str, proto: &str) -> Option<u16> {
    for line in text.split(|&b| b == b'\n') {
        let line = line.split(|&b| b == b'#').next().unwrap_or(&[]);
        let line = String::from_utf8_lossy(line);
        let mut f = line.split_whitespace();
        let (Some(svc), Some(pp)) = (f.next(), f.next()) else {
            continue;
        };
        let Some((port, p)) = pp.split_once('/') else {
            continue;
        };
        if p != proto || (svc != name && !f.any(|a| a == name)) {
            continue;
        }
        if let Ok(port) = port.parse::<u16>() {
            return Some(port);
        }
    }
    None
}

/// The name of the service on `port` over `proto` (glibc's `getservbyport_r`, files).
pub fn lookup_name(text: &[u8], port: u16, proto: &str) -> Option<String> {
    for line in text.split(|&b| b == b'\n') {
        let line = line.split(|&b| b == b'#').next().unwrap_or(&[]);
        let line = String::from_utf8_lossy(line);
        let mut f = line.split_whitespace();
        let (Some(svc), Some(pp)) = (f.next(), f.next()) else {
            continue;
        };
        if pp.split_once('/') == Some((&port.to_string(), proto)) {
            return Some(svc.to_string());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_names_and_aliases() {
        let t = b"http 80/tcp www # web\nhttp 80/udp\ndomain 53/tcp\n";
        assert_eq!(super::lookup_port(t, "www", "tcp"), Some(80));
        assert_eq!(super::lookup_port(t, "http", "udp"), Some(80));
        assert_eq!(super::lookup_port(t, "domain", "udp"), None);
        assert_eq!(super::lookup_name(t, 80, "udp").as_deref(), Some("http"));
        assert_eq!(super::lookup_name(t, 53, "udp"), None);
    }
}
