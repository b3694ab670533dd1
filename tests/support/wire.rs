//! Byte-level helpers for the hand-made nodes of the scenarios.

/// The first index of `needle` in `hay`, if any.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Reads from `s` into `buf` until it holds a whole HTTP/1.1 head (through the blank line);
/// returns the head's length in bytes, or `None` if the peer closed or failed first (e.g. a TCP
/// health probe). Bytes past the head stay in `buf`. For the hand-made nodes of the scenarios.
pub async fn read_head<S>(s: &mut S, buf: &mut Vec<u8>) -> Option<usize>
where
    S: tokio::io::AsyncRead + Unpin,
{
    use tokio::io::AsyncReadExt;
    loop {
        if let Some(p) = find(buf, b"\r\n\r\n") {
            return Some(p + 4);
        }
        let mut chunk = [0u8; 4096];
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}
