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
//! are read (heads, `Content-Length` bodies, chunked bodies), numbering request heads. Each head
//! line is held until [`super::head`] has judged it, then released to hyper unchanged; body bytes
//! pass at once. A head that breaks a rule (both framing fields, or anything hyper's parser would
//! refuse with its own empty-bodied 400) is never shown to hyper: hyper reads a stand-in end of
//! head instead, the refusal is recorded in the connection's [`FramingLog`], and the proxy, which
//! asks the log first for every HTTP/1.x request ([`FramingLog::check_next`]), answers it with the
//! JSON error and closes the connection, so no byte of it, or of what it smuggles, is forwarded.
//! While a head is held the watch runs the header read timeout itself (hyper starts its own only
//! once it sees bytes). The watch stops following (bytes pass unchanged) at the HTTP/2 preface, an
//! upgrade or `CONNECT` request (the proxy closes the connection after an upgrade that is not
//! accepted). Spawns nothing.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::error::ProxyError;
use super::head::{HeadLimits, Refusal};

mod scanner;
use scanner::{Scanner, State};

/// Longest chunk-size or trailer line followed; past it the watch stops following (hyper refuses
/// such a body by itself, as a body error after the head was answered).
const MAX_LINE: usize = 128 * 1024;

/// Bytes read from the socket per read while following (the scratch buffer's size). The buffer is
/// allocated at the first read and released once the watch turns passive, so an upgraded
/// connection (a WebSocket, idle for hours) does not keep it: 16 KiB per idle socket was most of
/// its memory (issue 14 bench, idle `wss://`).
const READ_CHUNK: usize = 16 * 1024;

/// What the watch saw on one downstream connection, shared with the proxy.
#[derive(Debug, Default)]
pub struct FramingLog {
    /// The refused head: its 1-based index and why. At most one: nothing after it is read.
    refused: OnceLock<(u64, Refusal)>,
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
    /// The refusal of its head ([`super::head`]): 400, 414 or 431, the connection closed.
    pub fn check_next(&self) -> Result<(), ProxyError> {
        let n = self.requests.fetch_add(1, Ordering::AcqRel) + 1;
        match self.refused.get() {
            Some((index, why)) if *index == n => Err(why.clone().into_error()),
            _ => Ok(()),
        }
    }

    fn refuse(&self, index: u64, why: Refusal) {
        let _ = self.refused.set((index, why));
    }
}

/// What hyper reads of `wire` when it arrives in pieces of `step` bytes (at least 1), and the
/// refusal, if any (the 1-based head index and why). For tests and the `raw_head` fuzz target;
/// the watch itself feeds the scanner the same way.
pub fn replay(wire: &[u8], step: usize, limits: HeadLimits) -> (Vec<u8>, Option<(u64, Refusal)>) {
    let log = FramingLog::new();
    let mut s = Scanner::new(limits);
    let mut out = Vec::new();
    for piece in wire.chunks(step.max(1)) {
        s.feed(piece, &log, &mut out);
    }
    (out, log.refused.get().cloned())
}

pin_project_lite::pin_project! {
    /// The downstream socket with the framing follower on its read side; see the module docs.
    pub struct FramingWatch<T> {
        #[pin]
        inner: T,
        scanner: Scanner,
        log: Arc<FramingLog>,
        // Judged bytes hyper has not read yet, from `pos`.
        out: Vec<u8>,
        pos: usize,
        // READ_CHUNK bytes while following, empty before the first read and once passive.
        scratch: Box<[u8]>,
        head_timeout: Duration,
        // Runs while a head is held: hyper's own header timer starts only once it sees bytes.
        deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    }
}

impl<T> FramingWatch<T> {
    /// Wraps `inner`, recording into `log`; heads are judged against `limits` and must arrive
    /// within `head_timeout` of their first byte (SPEC section 4 `header_read_timeout`).
    pub fn new(inner: T, log: Arc<FramingLog>, limits: HeadLimits, head_timeout: Duration) -> Self {
        FramingWatch {
            inner,
            scanner: Scanner::new(limits),
            log,
            out: Vec::new(),
            pos: 0,
            scratch: Box::default(),
            head_timeout,
            deadline: None,
        }
    }
}

impl<T: AsyncRead> AsyncRead for FramingWatch<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut this = self.project();
        loop {
            if *this.pos < this.out.len() {
                let n = buf.remaining().min(this.out.len() - *this.pos);
                buf.put_slice(&this.out[*this.pos..*this.pos + n]);
                *this.pos += n;
                if *this.pos == this.out.len() {
                    this.out.clear();
                    *this.pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.scanner.state == State::Refused {
                // The refused head's stand-in is answered with `Connection: close`; nothing after
                // it is read, so hyper is never woken for more.
                return Poll::Pending;
            }
            if this.scanner.state == State::Passive {
                if !this.scratch.is_empty() || this.out.capacity() > 0 {
                    // Passive is final: release the follower's buffers (`out` is drained here).
                    *this.scratch = Box::default();
                    *this.out = Vec::new();
                }
                return this.inner.as_mut().poll_read(cx, buf);
            }
            if this.scratch.is_empty() {
                *this.scratch = vec![0; READ_CHUNK].into_boxed_slice();
            }
            let mut rb = ReadBuf::new(&mut this.scratch[..]);
            match this.inner.as_mut().poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) if rb.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => {
                    let was_holding = this.scanner.holding();
                    this.scanner.feed(rb.filled(), this.log, this.out);
                    if !this.scanner.holding() {
                        *this.deadline = None;
                    } else if !was_holding || this.deadline.is_none() {
                        *this.deadline = Some(Box::pin(tokio::time::sleep(*this.head_timeout)));
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    if let Some(d) = this.deadline.as_mut() {
                        if d.as_mut().poll(cx).is_ready() {
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::TimedOut,
                                "request head not complete within the header read timeout",
                            )));
                        }
                    }
                    return Poll::Pending;
                }
            }
        }
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
mod tests;
