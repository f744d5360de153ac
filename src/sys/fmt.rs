//! Formatting without allocating: for messages written on paths that must not allocate
//! (a thread fuse about to abort, a signal handler).

/// Formats a u64 in decimal into a fixed buffer (for messages written without allocating).
pub(crate) fn fmt_u64(mut v: u64) -> FmtBuf {
    let mut b = FmtBuf {
        buf: [0; 20],
        start: 20,
    };
    loop {
        b.start -= 1;
        b.buf[b.start] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    b
}

pub(crate) struct FmtBuf {
    buf: [u8; 20],
    start: usize,
}

impl core::ops::Deref for FmtBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

/// Concatenates `parts` into `buf` (truncating), returning the written prefix.
pub(crate) fn fmt_msg<'a>(buf: &'a mut [u8], parts: &[&[u8]]) -> &'a [u8] {
    let mut n = 0;
    for part in parts {
        let k = part.len().min(buf.len() - n);
        buf[n..n + k].copy_from_slice(&part[..k]);
        n += k;
    }
    &buf[..n]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fmt_helpers() {
        assert_eq!(&*fmt_u64(0), b"0");
        assert_eq!(&*fmt_u64(10000), b"10000");
        assert_eq!(&*fmt_u64(u64::MAX), b"18446744073709551615");
        let mut buf = [0u8; 8];
        assert_eq!(fmt_msg(&mut buf, &[b"abc", b"defgh", b"ij"]), b"abcdefgh");
    }
}
