//! Request framing as the client put it on the wire (CASE-13, RFC 9112 section 6.3).
//!
//! hyper resolves a request carrying both `Content-Length` and `Transfer-Encoding` by the
//! transfer coding alone and silently drops the `Content-Length` line, so nothing after the parser
//! can tell such a request from an honest chunked one. That is the classic request-smuggling shape:
//! a proxy in front that frames by `Content-Length` and this gateway that frames by chunked
//! disagree on where the request ends, and the rest of the body becomes a second request. RFC 9112
//! lets a server reject it, and a gateway should.
//!
//! [`FramingWatch`] wraps the downstream socket and follows HTTP/1.x framing on the bytes as they
//! are read (heads, `Content-Length` bodies, chunked bodies), numbering request heads. A head with
//! both fields is recorded in the connection's [`FramingLog`]; the proxy asks it for every HTTP/1.x
//! request ([`FramingLog::check_next`]) before anything else, answers 400 and closes the connection,
//! so no byte of it, or of what it smuggles, is forwarded. Bytes pass through unchanged. The watch
//! stops following (and checks nothing more on that connection) at the HTTP/2 preface, an upgrade
//! or `CONNECT` request (the proxy closes the connection after an upgrade that is not accepted),
//! or a head hyper itself will refuse (obs-fold, malformed framing, oversized). Spawns nothing.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::respond::ProxyError;

/// Longest line followed; longer ones are refused by hyper anyway (its buffer limits), so the
/// watch stops there rather than buffer more.
const MAX_LINE: usize = 128 * 1024;

/// What the watch saw on one downstream connection, shared with the proxy.
#[derive(Debug, Default)]
pub struct FramingLog {
    /// 1-based index of the first head with conflicting framing; 0 = none.
    first_conflict: AtomicU64,
    /// HTTP/1.x requests handed to the proxy so far.
    requests: AtomicU64,
}

impl FramingLog {
    /// An empty log.
    pub fn new() -> Self {
        FramingLog::default()
    }

    /// Counts the next HTTP/1.x request of the connection (call once per request, in order).
    ///
    /// # Errors
    /// [`ProxyError::BadRequest`] if its head carried both `Content-Length` and `Transfer-Encoding`
    /// (400, connection closed).
    pub fn check_next(&self) -> Result<(), ProxyError> {
        let n = self.requests.fetch_add(1, Ordering::AcqRel) + 1;
        if self.first_conflict.load(Ordering::Acquire) == n {
            return Err(ProxyError::BadRequest(
                "Content-Length together with Transfer-Encoding",
            ));
        }
        Ok(())
    }

    fn conflict(&self, index: u64) {
        let _ = self
            .first_conflict
            .compare_exchange(0, index, Ordering::AcqRel, Ordering::Acquire);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a request head line by line.
    Head,
    /// A `Content-Length` body: bytes left.
    Body(u64),
    /// A chunk-size line.
    ChunkSize,
    /// Chunk data: bytes left.
    ChunkData(u64),
    /// The CRLF after chunk data.
    ChunkEnd,
    /// Trailer lines after the last chunk.
    Trailers,
    /// Not following any more.
    Passive,
}

/// Facts gathered from one head.
#[derive(Debug, Default)]
struct HeadFacts {
    started: bool,
    content_length: Option<Vec<u8>>,
    content_lengths: u32,
    transfer_encoding: Option<Vec<u8>>,
    upgrade: bool,
    refused: bool,
}

/// The framing follower; see the module docs.
#[derive(Debug)]
struct Scanner {
    state: State,
    line: Vec<u8>,
    head: HeadFacts,
    heads: u64,
}

impl Scanner {
    fn new() -> Self {
        Scanner {
            state: State::Head,
            line: Vec::new(),
            head: HeadFacts::default(),
            heads: 0,
        }
    }

    fn feed(&mut self, mut bytes: &[u8], log: &FramingLog) {
        while !bytes.is_empty() {
            match self.state {
                State::Passive => return,
                State::Body(left) | State::ChunkData(left) => {
                    let take = usize::try_from(left).map_or(bytes.len(), |l| l.min(bytes.len()));
                    bytes = &bytes[take..];
                    let left = left - take as u64;
                    self.state = match (self.state, left) {
                        (State::Body(_), 0) => State::Head,
                        (State::Body(_), l) => State::Body(l),
                        (_, 0) => State::ChunkEnd,
                        (_, l) => State::ChunkData(l),
                    };
                }
                State::Head | State::ChunkSize | State::ChunkEnd | State::Trailers => {
                    let Some(nl) = bytes.iter().position(|b| *b == b'\n') else {
                        self.push_line(bytes);
                        return;
                    };
                    self.push_line(&bytes[..nl]);
                    bytes = &bytes[nl + 1..];
                    if self.state == State::Passive {
                        return;
                    }
                    let mut line = std::mem::take(&mut self.line);
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    self.line_done(&line, log);
                    line.clear();
                    self.line = line;
                }
            }
        }
    }

    fn push_line(&mut self, part: &[u8]) {
        if self.line.len() + part.len() > MAX_LINE {
            self.state = State::Passive;
            self.line = Vec::new();
            return;
        }
        self.line.extend_from_slice(part);
    }

    fn line_done(&mut self, line: &[u8], log: &FramingLog) {
        match self.state {
            State::Head => self.head_line(line, log),
            State::ChunkSize => {
                let size = line.split(|b| *b == b';').next().unwrap_or_default();
                let size = std::str::from_utf8(size)
                    .ok()
                    .map(str::trim)
                    .filter(|s| !s.is_empty() && s.len() <= 16)
                    .and_then(|s| u64::from_str_radix(s, 16).ok());
                self.state = match size {
                    Some(0) => State::Trailers,
                    Some(n) => State::ChunkData(n),
                    None => State::Passive,
                };
            }
            State::ChunkEnd => {
                self.state = if line.is_empty() {
                    State::ChunkSize
                } else {
                    State::Passive
                }
            }
            State::Trailers => {
                if line.is_empty() {
                    self.state = State::Head;
                }
            }
            State::Body(_) | State::ChunkData(_) | State::Passive => {}
        }
    }

    fn head_line(&mut self, line: &[u8], log: &FramingLog) {
        if !self.head.started {
            // Empty lines before a request line are ignored (RFC 9112 section 2.2).
            if line.is_empty() {
                return;
            }
            self.head.started = true;
            if line.starts_with(b"PRI * HTTP/2.0") || line.starts_with(b"CONNECT ") {
                self.state = State::Passive;
            }
            return;
        }
        if line.is_empty() {
            self.end_of_head(log);
            return;
        }
        if line[0] == b' ' || line[0] == b'\t' {
            // obs-fold: hyper refuses the head.
            self.head.refused = true;
            return;
        }
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            self.head.refused = true;
            return;
        };
        let (name, value) = (&line[..colon], trim(&line[colon + 1..]));
        if name.eq_ignore_ascii_case(b"content-length") {
            self.head.content_lengths += 1;
            self.head.content_length = Some(value.to_vec());
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            self.head.transfer_encoding = Some(value.to_vec());
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            self.head.upgrade = true;
        }
    }

    fn end_of_head(&mut self, log: &FramingLog) {
        self.heads += 1;
        let head = std::mem::take(&mut self.head);
        self.state = if head.transfer_encoding.is_some() && head.content_lengths > 0 {
            log.conflict(self.heads);
            State::Passive
        } else if head.refused || head.upgrade {
            State::Passive
        } else if let Some(te) = head.transfer_encoding {
            // hyper frames by chunked when it is the last coding, and refuses the head otherwise.
            let last = te
                .rsplit(|b| *b == b',')
                .next()
                .map(trim)
                .unwrap_or_default();
            if last.eq_ignore_ascii_case(b"chunked") {
                State::ChunkSize
            } else {
                State::Passive
            }
        } else if let Some(cl) = head.content_length {
            match std::str::from_utf8(&cl)
                .ok()
                .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
            {
                Some(0) => State::Head,
                Some(n) => State::Body(n),
                None => State::Passive,
            }
        } else {
            State::Head
        };
    }
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|b| *b != b' ' && *b != b'\t')
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| *b != b' ' && *b != b'\t')
        .map_or(start, |e| e + 1);
    &v[start..end.max(start)]
}

pin_project_lite::pin_project! {
    /// The downstream socket with the framing follower on its read side; see the module docs.
    pub struct FramingWatch<T> {
        #[pin]
        inner: T,
        scanner: Scanner,
        log: Arc<FramingLog>,
    }
}

impl<T> FramingWatch<T> {
    /// Wraps `inner`, recording into `log`.
    pub fn new(inner: T, log: Arc<FramingLog>) -> Self {
        FramingWatch {
            inner,
            scanner: Scanner::new(),
            log,
        }
    }
}

impl<T: AsyncRead> AsyncRead for FramingWatch<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let polled = this.inner.poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &polled {
            this.scanner.feed(&buf.filled()[before..], this.log);
        }
        polled
    }
}

impl<T: AsyncWrite> AsyncWrite for FramingWatch<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.project().inner.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().inner.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `wire` in pieces of `step` bytes; returns the first conflict index and the heads seen.
    fn scan(wire: &[u8], step: usize) -> (u64, u64) {
        let log = FramingLog::new();
        let mut s = Scanner::new();
        for piece in wire.chunks(step) {
            s.feed(piece, &log);
        }
        (log.first_conflict.load(Ordering::Acquire), s.heads)
    }

    #[test]
    fn follows_bodies_and_finds_the_conflicting_head() {
        let wire = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
GET /b HTTP/1.1\r\nHost: x\r\n\r\n\
POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nab\ncd\r\n0\r\nX-T: 1\r\n\r\n\
POST /d HTTP/1.1\r\nContent-Length: 52\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: x\r\n\r\n";
        for step in [1, 3, 7, wire.len()] {
            assert_eq!(scan(wire, step), (4, 4), "step {step}");
        }
        // Reverse order, a body containing a fake head, LF-only lines.
        let wire =
            b"POST /a HTTP/1.1\nContent-Length: 38\n\nGET /x HTTP/1.1\r\nContent-Length: 1\r\n\r\n\
POST /e HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n42\r\n";
        assert_eq!(scan(wire, 5), (2, 2));
    }

    #[test]
    fn honest_traffic_has_no_conflict_and_upgrades_stop_the_watch() {
        let wire = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(scan(wire, 2), (0, 2));
        let wire = b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n\x81\x05Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(scan(wire, 4), (0, 1));
        let wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        assert_eq!(scan(wire, 4), (0, 0));
    }

    #[test]
    fn check_next_refuses_only_the_flagged_request() {
        let log = FramingLog::new();
        log.conflict(2);
        log.conflict(3);
        assert!(log.check_next().is_ok());
        assert!(matches!(log.check_next(), Err(ProxyError::BadRequest(_))));
        assert!(log.check_next().is_ok());
    }
}
