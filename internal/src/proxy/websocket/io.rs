//! One WebSocket side: the upgraded byte stream, the bytes read from it that are not relayed yet,
//! and the message in flight from that peer (RFC 6455 section 5.4, against
//! `limits.websocket_max_message`: SPEC section 5).
//!
//! Two ways to read it. Frame by frame ([`FrameIo::read`]), for the relay's rare paths (Close,
//! a client's fragmented message, hops). And in batches ([`Track::scan`]), for the relay's
//! pump ([`super::pump`]): it checks the headers of the complete frames at the front of a read
//! batch and says how many bytes may go to the other side as they are, so a batch of frames is
//! one write. Both account the same way (a frame is checked from its header, before its payload
//! is buffered). An idle side holds no read buffer: reads go through a stack scratch array, and the
//! buffer is released whenever it is empty. Spawns nothing.

use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use futures_util::FutureExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::frame::{check_close, Frame, FrameError, Head, Kind, Peer};
use super::message::MessageSize;

/// Largest message relayed unless [`FrameIo::set_max_message`] says otherwise: the default
/// `limits.websocket_max_message` (SPEC section 5: no separate frame cap below the message cap).
/// A bigger message ends the socket with close code 1009 instead of growing the buffer.
pub(super) const MAX_MESSAGE: u64 = crate::config::DEFAULT_WEBSOCKET_MAX_MESSAGE;
/// A peer that takes longer than this to accept what is written is treated as gone. Only a write
/// that could not complete at once arms it.
pub(super) const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Reads [`FrameIo::peer_gone`] makes at most, looking past ready bytes for an end of stream.
const PEEK_READS: usize = 4;
/// Bytes one read takes off the socket when the buffer has no room prepared for a large frame.
/// They land in a scratch array on the stack (never kept across an await); only what cannot be
/// relayed at once is copied into the buffer (memory per idle WebSocket).
pub(super) const READ_CHUNK: usize = 8 * 1024;

/// What [`Track::scan`] found at the front of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Scan {
    /// Bytes of whole frames, from the start, that go to the other side as they are.
    pub(super) relay: usize,
    /// True if the scan stopped at a frame the relay handles itself ([`FrameIo::read`] returns
    /// it, or its error); false if it stopped at an incomplete frame or the end of the batch.
    pub(super) stop: bool,
}

/// One WebSocket side; see the module docs.
#[derive(Debug)]
pub(super) struct FrameIo<S> {
    pub(super) io: S,
    /// Bytes read and not relayed yet. Its first [`Self::owed`]`.1` bytes are scanned frames
    /// owed to the other side, of which the first `.0` are written already.
    pub(super) buf: BytesMut,
    /// See [`Self::buf`]; `None` when nothing is owed.
    pub(super) owed: Option<(usize, usize)>,
    /// Set once a read returned end of stream: later reads drain the buffer and stop there.
    pub(super) eof: bool,
    /// The frames' checks and the message in flight.
    pub(super) track: Track,
}

/// The checks of the frames from one peer and the message in flight from it.
#[derive(Debug)]
pub(super) struct Track {
    peer: Peer,
    limit: u64,
    msg: MessageSize,
}

impl<S: AsyncRead + AsyncWrite + Unpin> FrameIo<S> {
    /// Wraps an upgraded stream talking to `peer`.
    pub(super) fn new(io: S, peer: Peer) -> Self {
        FrameIo {
            io,
            buf: BytesMut::new(),
            owed: None,
            eof: false,
            track: Track {
                peer,
                limit: MAX_MESSAGE,
                msg: MessageSize::default(),
            },
        }
    }

    /// Sets the largest message accepted (`limits.websocket_max_message`), in bytes.
    pub(super) fn set_max_message(&mut self, max: u64) {
        self.track.limit = max;
    }

    /// True between the first and the last fragment of a message from this peer.
    pub(super) fn in_message(&self) -> bool {
        self.track.msg.open()
    }

    /// The next frame from the buffer, accounted; `Ok(None)` when it is not all there yet (room
    /// is reserved for the rest of a large one).
    fn parse(&mut self) -> Result<Option<Frame>, FrameError> {
        let Some(head) = self.track.head(&self.buf)? else {
            return Ok(None);
        };
        let limit = self.track.limit;
        let too_big = || FrameError::TooBig(head.payload, limit);
        let len = head.wire_len().ok_or_else(too_big)?;
        if self.buf.len() < len {
            self.buf.reserve(len - self.buf.len());
            return Ok(None);
        }
        self.track
            .msg
            .add(head.kind, head.payload, limit)
            .map_err(|size| FrameError::TooBig(size, limit))?;
        let wire = self.buf.split_to(len).freeze();
        self.release_if_empty();
        let frame = Frame::new(head, wire);
        check_close(&frame).map(|()| Some(frame))
    }

    /// Reserves room for the whole frame at the front of the buffer once its header is there, so
    /// the rest of a large frame is read straight into the buffer.
    pub(super) fn reserve_front(&mut self) {
        if let Ok(Some(head)) = self.track.head(&self.buf) {
            if let Some(n) = head.wire_len().filter(|&n| n > self.buf.len()) {
                self.buf.reserve(n - self.buf.len());
            }
        }
    }

    /// Drops the buffer's allocation once it holds nothing (an idle side holds no buffer).
    pub(super) fn release_if_empty(&mut self) {
        if self.buf.is_empty() && self.buf.capacity() > 0 {
            self.buf = BytesMut::new();
        }
    }

    /// Reads the next frame, accounted, as it was on the wire. `Ok(None)` means TCP closed
    /// cleanly between frames. Cancel-safe: bytes read so far stay in the buffer. Nothing may be
    /// owed ([`super::pump::finish`] first).
    ///
    /// # Errors
    /// [`FrameError::Protocol`], [`FrameError::TooBig`] (the message in flight passed the limit),
    /// [`FrameError::Truncated`] (end of stream inside a frame), [`FrameError::Io`].
    pub(super) async fn read(&mut self) -> Result<Option<Frame>, FrameError> {
        debug_assert!(self.owed.is_none(), "owed bytes are written first");
        loop {
            if let Some(frame) = self.parse()? {
                return Ok(Some(frame));
            }
            if self.eof || self.fill().await? == 0 {
                self.eof = true;
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(FrameError::Truncated)
                };
            }
        }
    }

    /// [`FrameIo::read`] without waiting: `None` when the next frame needs bytes not read yet.
    pub(super) fn read_now(&mut self) -> Option<Result<Option<Frame>, FrameError>> {
        match self.parse() {
            Ok(None) if self.eof => Some(if self.buf.is_empty() {
                Ok(None)
            } else {
                Err(FrameError::Truncated)
            }),
            Ok(None) => None,
            r => Some(r),
        }
    }

    /// Reads once from the socket into the buffer; returns the bytes read (0 at end of stream).
    fn fill(&mut self) -> impl std::future::Future<Output = std::io::Result<usize>> + '_ {
        std::future::poll_fn(move |cx| self.poll_fill(cx))
    }

    /// Reads once into the buffer: straight into it when room is reserved for a large frame,
    /// otherwise through a stack scratch array (left uninitialized: nothing zeroes 8 KiB per
    /// read), copied into a buffer sized to what arrived.
    pub(super) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() >= READ_CHUNK {
            let n = std::task::ready!(tokio_util::io::poll_read_buf(
                Pin::new(&mut self.io),
                cx,
                &mut self.buf
            ))?;
            self.eof |= n == 0;
            return Poll::Ready(Ok(n));
        }
        let mut scratch = [MaybeUninit::<u8>::uninit(); READ_CHUNK];
        let mut rb = ReadBuf::uninit(&mut scratch);
        std::task::ready!(self.poll_read_into(cx, &mut rb))?;
        self.buf.extend_from_slice(rb.filled());
        Poll::Ready(Ok(rb.filled().len()))
    }

    /// Reads once into `rb` (its filled part grows); 0 bytes read is the end of stream, which
    /// sets [`FrameIo::eof`].
    pub(super) fn poll_read_into(
        &mut self,
        cx: &mut Context<'_>,
        rb: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = rb.filled().len();
        std::task::ready!(Pin::new(&mut self.io).poll_read(cx, rb))?;
        if rb.filled().len() == before {
            self.eof = true;
        }
        Poll::Ready(Ok(()))
    }

    /// True if the peer has already closed TCP or failed, checked without waiting (bytes that
    /// arrived are kept for [`FrameIo::read`]). Used so a frame is never written to a node known
    /// to be gone. Reads on while bytes are ready, so a FIN or reset queued behind the node's last
    /// frames (a node killed right after answering) is seen too; at most [`PEEK_READS`] reads.
    pub(super) fn peer_gone(&mut self) -> bool {
        for _ in 0..PEEK_READS {
            if self.eof {
                return true;
            }
            match self.fill().now_or_never() {
                Some(Ok(0)) => self.eof = true,
                Some(Ok(_)) => {}
                None => return false,
                Some(Err(_)) => return true,
            }
        }
        self.eof
    }

    /// Writes `b` without waiting: returns how much of it the socket took (all of it, and
    /// flushed, unless the socket is full).
    ///
    /// # Errors
    /// The socket's error.
    pub(super) fn try_write(&mut self, cx: &mut Context<'_>, b: &[u8]) -> std::io::Result<Tried> {
        let mut done = 0;
        while done < b.len() {
            match Pin::new(&mut self.io).poll_write(cx, &b[done..]) {
                Poll::Ready(Ok(0)) => return Err(std::io::ErrorKind::WriteZero.into()),
                Poll::Ready(Ok(n)) => done += n,
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => return Ok(Tried::Partly(done)),
            }
        }
        match Pin::new(&mut self.io).poll_flush(cx) {
            Poll::Ready(Ok(())) => Ok(Tried::All),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Ok(Tried::Partly(done)),
        }
    }

    /// Writes all of `b` and flushes it: at once when the socket takes it, otherwise waiting at
    /// most [`WRITE_TIMEOUT`] (the only timer a write arms).
    ///
    /// # Errors
    /// [`FrameError::Io`], [`FrameError::WriteTimeout`].
    pub(super) async fn write_bytes(&mut self, b: &[u8]) -> Result<(), FrameError> {
        let tried = std::future::poll_fn(|cx| Poll::Ready(self.try_write(cx, b))).await?;
        let Tried::Partly(done) = tried else {
            return Ok(());
        };
        let io = &mut self.io;
        match tokio::time::timeout(WRITE_TIMEOUT, async {
            io.write_all(&b[done..]).await?;
            io.flush().await
        })
        .await
        {
            Ok(r) => r.map_err(FrameError::Io),
            Err(_) => Err(FrameError::WriteTimeout(WRITE_TIMEOUT)),
        }
    }

    /// Writes `frame` to this side's peer ([`Frame::for_peer`]: as it is unless its masking
    /// must change). Returns the bytes written.
    ///
    /// # Errors
    /// As [`FrameIo::write_bytes`].
    pub(super) async fn write(&mut self, frame: &Frame) -> Result<usize, FrameError> {
        let b = frame.for_peer(self.track.peer);
        self.write_bytes(&b).await?;
        Ok(b.len())
    }

    /// Closes the write side (TCP FIN) within a short bound; errors mean it is gone already.
    pub(super) async fn shutdown(&mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(1), self.io.shutdown()).await;
    }
}

impl Track {
    /// The header of the frame at the start of `b`, checked against the message in flight;
    /// `Ok(None)` when the header is incomplete. The frame is not accounted yet.
    fn head(&self, b: &[u8]) -> Result<Option<Head>, FrameError> {
        let Some(head) = Head::parse(b, self.peer)? else {
            return Ok(None);
        };
        self.msg
            .check(head.kind, head.payload, self.limit)
            .map_err(|size| FrameError::TooBig(size, self.limit))?;
        Ok(Some(head))
    }

    /// Walks the whole frames at the start of `b` (a read batch, or the buffer) and accounts each
    /// one that may be relayed as it is: data frames and pings and pongs, except a Close, and from
    /// the client any fragment of a message (its frames are kept for a hop: [`FrameIo::read`]). Stops
    /// at the first frame that is not, at an incomplete frame, or at a frame the limits refuse
    /// (left for [`FrameIo::read`] to report).
    pub(super) fn scan(&mut self, b: &[u8]) -> Scan {
        let mut at = 0;
        loop {
            let head = match self.head(&b[at..]) {
                Ok(Some(h)) => h,
                Ok(None) => {
                    return Scan {
                        relay: at,
                        stop: false,
                    }
                }
                Err(_) => {
                    return Scan {
                        relay: at,
                        stop: true,
                    }
                }
            };
            let slow = match head.kind {
                Kind::Close => true,
                // A client's fragments are kept for a hop; a message that starts while one is
                // open (a protocol error the node judges) resets that record.
                Kind::Start { fin } => self.peer == Peer::Client && (!fin || self.msg.open()),
                Kind::Continue { .. } => self.peer == Peer::Client,
                Kind::Ping | Kind::Pong => false,
            };
            if slow {
                return Scan {
                    relay: at,
                    stop: true,
                };
            }
            let Some(end) = head.wire_len().and_then(|n| n.checked_add(at)) else {
                return Scan {
                    relay: at,
                    stop: true,
                };
            };
            if end > b.len() {
                return Scan {
                    relay: at,
                    stop: false,
                };
            }
            let _ = self.msg.add(head.kind, head.payload, self.limit);
            at = end;
        }
    }
}

/// How much of a write the socket took at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tried {
    /// All of it, flushed.
    All,
    /// This many bytes; the rest (or the flush) must wait.
    Partly(usize),
}

/// The frames among the first `end` bytes of `b` (whole frames from `from`, as scanned) that end
/// after byte `sent`: those not fully written, for the next node when the write failed. Not
/// accounted again.
pub(super) fn unsent(b: &[u8], sent: usize, end: usize, from: Peer) -> Vec<Frame> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < end {
        let Ok(Some(head)) = Head::parse(&b[at..end], from) else {
            break;
        };
        let Some(next) = head.wire_len().map(|n| at + n).filter(|&n| n <= end) else {
            break;
        };
        if next > sent {
            out.push(Frame::new(
                head,
                bytes::Bytes::copy_from_slice(&b[at..next]),
            ));
        }
        at = next;
    }
    out
}

#[cfg(test)]
#[path = "io_tests.rs"]
pub(super) mod tests;
