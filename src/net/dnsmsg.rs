//! DNS messages (RFC 1035; Go's `golang.org/x/net/dns/dnsmessage`, the parts a stub
//! resolver needs): a query for one name and type, and the header, question and answer
//! records of a response, with compressed names followed (a bounded number of pointers).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub(crate) const TYPE_A: u16 = 1;
pub(crate) const TYPE_CNAME: u16 = 5;
pub(crate) const TYPE_PTR: u16 = 12;
pub(crate) const TYPE_AAAA: u16 = 28;
const TYPE_OPT: u16 = 41;
const CLASS_INET: u16 = 1;

pub(crate) const RCODE_SUCCESS: u8 = 0;
pub(crate) const RCODE_SERVFAIL: u8 = 2;
pub(crate) const RCODE_NXDOMAIN: u8 = 3;
pub(crate) const RCODE_NOTIMP: u8 = 4;
pub(crate) const RCODE_REFUSED: u8 = 5;

/// The UDP payload an EDNS0 query advertises (Go's `maxDNSPacketSize`), also the size of
/// the receive buffer.
pub(crate) const MAX_UDP: usize = 1232;

/// Builds a query for `name` (absolute, with its trailing dot) of `qtype`. None if a label
/// is empty or longer than 63 bytes, or the name longer than 255 on the wire.
pub fn build_query(id: u16, name: &str, qtype: u16, edns0: bool, ad: bool) -> Option<Vec<u8>> {
    let mut m = Vec::with_capacity(64);
    m.extend_from_slice(&id.to_be_bytes());
    let flags: u16 = 0x0100 | if ad { 0x0020 } else { 0 };
    m.extend_from_slice(&flags.to_be_bytes());
    m.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, edns0 as u8]);
    let start = m.len();
    let body = name.strip_suffix('.').unwrap_or(name);
    if !body.is_empty() {
        for label in body.split('.') {
            if label.is_empty() || label.len() > 63 {
                return None;
            }
            m.push(label.len() as u8);
            m.extend_from_slice(label.as_bytes());
        }
    }
    m.push(0);
    if m.len() - start > 255 {
        return None;
    }
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&CLASS_INET.to_be_bytes());
    if edns0 {
        m.push(0);
        m.extend_from_slice(&TYPE_OPT.to_be_bytes());
        m.extend_from_slice(&(MAX_UDP as u16).to_be_bytes());
        m.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    }
    Some(m)
}

/// What a response says.
#[derive(Debug, Default, Clone)]
pub struct Response {
    pub id: u16,
    pub truncated: bool,
    pub authoritative: bool,
    pub recursion_available: bool,
    pub rcode: u8,
    /// The addresses of the queried name, CNAMEs in the answer followed.
    pub addrs: Vec<IpAddr>,
    /// The name the addresses belong to (the last CNAME's target, or the queried name),
    /// with its trailing dot.
    pub canonical: String,
    /// The owners of the CNAMEs followed, in order (the queried name first), each with its
    /// trailing dot: a hostent's aliases.
    pub aliases: Vec<String>,
    /// The names of the queried name's PTR records (CNAMEs followed), each with its
    /// trailing dot.
    pub names: Vec<String>,
    /// Whether the answer section had any record (a CNAME without addresses counts).
    pub answered: bool,
    /// Whether the authority section had an SOA or NS record (not a lame referral).
    pub has_authority: bool,
}

struct Reader<'a> {
    m: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn u8(&mut self) -> Option<u8> {
        let b = *self.m.get(self.at)?;
        self.at += 1;
        Some(b)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes([self.u8()?, self.u8()?]))
    }
    fn bytes(&mut self, n: usize) -> Option<&[u8]> {
        let b = self.m.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(b)
    }
    /// A possibly compressed name, as text with a trailing dot.
    fn name(&mut self) -> Option<String> {
        let mut out = String::new();
        let mut at = self.at;
        let mut jumped = false;
        let mut hops = 0;
        loop {
            let len = *self.m.get(at)? as usize;
            match len & 0xc0 {
                0x00 => {
                    at += 1;
                    if len == 0 {
                        break;
                    }
                    let label = self.m.get(at..at + len)?;
                    for &b in label {
                        out.push(b as char);
                    }
                    out.push('.');
                    at += len;
                    if out.len() > 255 {
                        return None;
                    }
                }
                0xc0 => {
                    let ptr = ((len & 0x3f) << 8) | *self.m.get(at + 1)? as usize;
                    if !jumped {
                        self.at = at + 2;
                    }
                    jumped = true;
                    hops += 1;
                    if hops > 32 || ptr >= self.m.len() {
                        return None;
                    }
                    at = ptr;
                }
                _ => return None,
            }
        }
        if !jumped {
            self.at = at;
        }
        if out.is_empty() {
            out.push('.');
        }
        Some(out)
    }
}

/// Parses a response to a query of `qname` (with its trailing dot) and `qtype`. None if
/// it is malformed or answers another question.
pub fn parse_response(m: &[u8], qname: &str, qtype: u16) -> Option<Response> {
    let mut r = Reader { m, at: 0 };
    let id = r.u16()?;
    let flags = r.u16()?;
    let (qd, an, ns) = (r.u16()?, r.u16()?, r.u16()?);
    let _ar = r.u16()?;
    if flags & 0x8000 == 0 {
        return None;
    }
    let mut resp = Response {
        id,
        truncated: flags & 0x0200 != 0,
        authoritative: flags & 0x0400 != 0,
        recursion_available: flags & 0x0080 != 0,
        rcode: (flags & 0x000f) as u8,
        canonical: qname.to_string(),
        ..Response::default()
    };
    if qd != 1 {
        // A truncated reply may carry no question; anything else must echo ours.
        return (qd == 0 && resp.truncated).then_some(resp);
    }
    let n = r.name()?;
    let (t, c) = (r.u16()?, r.u16()?);
    if !n.eq_ignore_ascii_case(qname) || t != qtype || c != CLASS_INET {
        return None;
    }
    let mut records = Vec::new();
    for _ in 0..an {
        let Some(rec) = record(&mut r) else {
            // A reply cut short: what was read so far.
            break;
        };
        records.push(rec);
    }
    for _ in 0..ns {
        match record(&mut r) {
            Some((_, t, _)) if t == 6 || t == 2 => resp.has_authority = true,
            Some(_) => {}
            None => break,
        }
    }
    resp.answered = !records.is_empty();
    // Follow CNAMEs from the queried name, at most as many as there are records.
    let mut chain = vec![qname.to_ascii_lowercase()];
    for _ in 0..records.len() {
        let cur = chain.last().cloned().unwrap_or_default();
        let next = records.iter().find_map(|(owner, t, data)| match data {
            Rdata::Name(target) if *t == TYPE_CNAME && owner.eq_ignore_ascii_case(&cur) => {
                Some(target.clone())
            }
            _ => None,
        });
        match next {
            Some(t) if !chain.contains(&t.to_ascii_lowercase()) => {
                resp.aliases
                    .push(core::mem::replace(&mut resp.canonical, t.clone()));
                chain.push(t.to_ascii_lowercase());
            }
            _ => break,
        }
    }
    for (owner, t, data) in &records {
        if *t != qtype || !chain.contains(&owner.to_ascii_lowercase()) {
            continue;
        }
        match data {
            Rdata::Addr(a) => resp.addrs.push(*a),
            Rdata::Name(n) => resp.names.push(n.clone()),
            Rdata::Other => {}
        }
    }
    Some(resp)
}

enum Rdata {
    Addr(IpAddr),
    Name(String),
    Other,
}

/// One resource record: owner, type, data.
fn record(r: &mut Reader<'_>) -> Option<(String, u16, Rdata)> {
    let owner = r.name()?;
    let (t, c) = (r.u16()?, r.u16()?);
    let _ttl = (r.u16()?, r.u16()?);
    let len = r.u16()? as usize;
    let end = r.at + len;
    let data = match (t, c, len) {
        (TYPE_A, CLASS_INET, 4) => {
            let b = r.bytes(4)?;
            Rdata::Addr(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])))
        }
        (TYPE_AAAA, CLASS_INET, 16) => {
            let b: [u8; 16] = r.bytes(16)?.try_into().ok()?;
            Rdata::Addr(IpAddr::V6(Ipv6Addr::from(b)))
        }
        (TYPE_CNAME | TYPE_PTR, CLASS_INET, _) => Rdata::Name(r.name()?),
        _ => Rdata::Other,
    };
    if end > r.m.len() {
        return None;
    }
    r.at = end;
    Some((owner, t, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_and_answer_round_trip() {
        let q = build_query(0x1234, "www.example.", TYPE_A, true, false).unwrap();
        assert_eq!(&q[..2], &[0x12, 0x34]);
        assert!(build_query(1, "a..b.", TYPE_A, false, false).is_none());
        // The response: the question, a CNAME (compressed) and an A for its target.
        let mut m = q[..q.len() - 11].to_vec();
        m[2] = 0x81;
        m[3] = 0x80;
        m[7] = 2;
        m[11] = 0;
        m.extend_from_slice(&[
            0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 60, 0, 6, 3, b'w', b'e', b'b', 0xc0, 16,
        ]);
        m.extend_from_slice(&[0xc0, 41, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 0, 0, 7]);
        let r = parse_response(&m, "www.example.", TYPE_A).unwrap();
        assert_eq!(r.canonical, "web.example.");
        assert_eq!(r.aliases, ["www.example."]);
        assert_eq!(r.addrs, ["10.0.0.7".parse::<IpAddr>().unwrap()]);
        assert!(parse_response(&m, "other.example.", TYPE_A).is_none());
    }
}
