//! WebSocket frames on the wire (RFC 6455 section 5), read and written one at a time so the relay
//! forwards each frame as it came: opcode, FIN and RSV bits untouched (extensions such as
//! permessage-deflate stay end to end), control frames never answered here.
//!
//! tungstenite's `WebSocket` cannot be used for this: it answers pings and closes by itself and
//! rejects frames with RSV bits set. Its frame layer ([`FrameHeader::parse`], [`Frame::format`]) is
//! used instead. Masking follows the side: frames to a node are masked with a fresh key, frames to the
//! client are not (section 5.3). Holds one bounded read buffer, released whenever it is empty; spawns nothing.

use std::io::Cursor;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use futures_util::FutureExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Control, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::{Frame, FrameHeader};

/// Largest frame payload relayed unless [`FrameIo::set_max_payload`] says otherwise: the default
/// `limits.websocket_max_message` (SPEC section 5: no separate frame cap below the message cap).
/// A bigger frame ends the socket with close code 1009 instead of growing the buffer.
pub(super) const MAX_FRAME_PAYLOAD: u64 = crate::config::DEFAULT_WEBSOCKET_MAX_MESSAGE;
/// A peer that takes longer than this to accept one frame is treated as gone (no task waits forever).
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Reads [`FrameIo::peer_gone`] makes at most, looking past ready bytes for an end of stream.
const PEEK_READS: usize = 4;
/// Bytes one read takes off the socket when the buffer has no room prepared for a large frame.
/// They are read into a scratch array on the stack (never kept across an await) and copied into
/// the buffer, so an idle side holds no read buffer at all (issue 7: memory per idle WebSocket).
const READ_CHUNK: usize = 8 * 1024;

/// Which side a [`FrameIo`] talks to; decides masking (RFC 6455 section 5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Peer {
    /// The downstream client: its frames arrive masked, ours go out unmasked.
    Client,
    /// An upstream node: its frames arrive unmasked, ours go out masked.
    Node,
}

/// Why reading or writing a frame failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum FrameError {
    /// The socket failed (reset, broken pipe, ...).
    #[error("socket error: {0}")]
    Io(#[from] std::io::Error),
    /// The peer closed TCP in the middle of a frame.
    #[error("connection closed in the middle of a frame")]
    Truncated,
    /// A frame broke RFC 6455 framing (reserved opcode, wrong masking, oversized control frame).
    #[error("protocol violation: {0}")]
    Protocol(&'static str),
    /// A frame larger than the limit (`.0` its length, `.1` the limit).
    #[error("frame of {0} bytes is larger than the {1} byte limit (limits.websocket_max_message)")]
    TooBig(u64, u64),
    /// The peer did not take a frame within the write timeout.
    #[error("peer did not accept a frame within {WRITE_TIMEOUT:?}")]
    WriteTimeout,
}

/// One WebSocket side: the upgraded byte stream plus its read buffer.
#[derive(Debug)]
pub(super) struct FrameIo<S> {
    io: S,
    buf: BytesMut,
    peer: Peer,
    /// Set once a read returned end of stream: later reads drain the buffer and stop there.
    eof: bool,
    /// Largest payload accepted, bytes.
    max_payload: u64,
}

impl<S: AsyncRead + AsyncWrite + Unpin> FrameIo<S> {
    /// Wraps an upgraded stream talking to `peer`.
    pub(super) fn new(io: S, peer: Peer) -> Self {
        FrameIo {
            io,
            buf: BytesMut::new(),
            peer,
            eof: false,
            max_payload: MAX_FRAME_PAYLOAD,
        }
    }

    /// Sets the largest frame payload accepted (`limits.websocket_max_message`), in bytes.
    pub(super) fn set_max_payload(&mut self, max: u64) {
        self.max_payload = max;
    }

    /// Reads the next frame with its payload unmasked, and its size on the wire. `Ok(None)` means
    /// TCP closed cleanly between frames. Cancel-safe: bytes read so far stay in the buffer.
    pub(super) async fn read(&mut self) -> Result<Option<(Frame, usize)>, FrameError> {
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

    /// Reads once from the socket into the buffer; returns the bytes read (0 at end of stream).
    /// With room already reserved for a large frame the read goes straight into the buffer;
    /// otherwise into a stack scratch array, copied into a buffer sized to what arrived.
    fn fill(&mut self) -> impl std::future::Future<Output = std::io::Result<usize>> + '_ {
        std::future::poll_fn(move |cx| self.poll_fill(cx))
    }

    fn poll_fill(&mut self, cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() >= READ_CHUNK {
            return tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.buf);
        }
        let mut scratch = [0u8; READ_CHUNK];
        let mut rb = ReadBuf::new(&mut scratch);
        match Pin::new(&mut self.io).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) => {
                let got = rb.filled();
                self.buf.extend_from_slice(got);
                Poll::Ready(Ok(got.len()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// True if the peer has already closed TCP or failed, checked without waiting (bytes that arrived
    /// are kept for [`FrameIo::read`]). Used so a frame is never written to a node known to be gone.
    /// Reads on while bytes are ready, so a FIN or reset queued behind the node's last frames (a
    /// node killed right after answering) is seen too; at most [`PEEK_READS`] reads.
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

    fn parse(&mut self) -> Result<Option<(Frame, usize)>, FrameError> {
        let mut cursor = Cursor::new(&self.buf[..]);
        let Some((mut header, len)) =
            FrameHeader::parse(&mut cursor).map_err(|_| FrameError::Protocol("reserved opcode"))?
        else {
            return Ok(None);
        };
        if len >> 63 != 0 {
            // RFC 6455 section 5.2: the most significant bit of a 64-bit length MUST be 0.
            return Err(FrameError::Protocol(
                "64-bit payload length with the most significant bit set",
            ));
        }
        if len > self.max_payload {
            return Err(FrameError::TooBig(len, self.max_payload));
        }
        let head = usize::try_from(cursor.position()).expect("a frame header is at most 14 bytes");
        let len = usize::try_from(len).map_err(|_| FrameError::TooBig(len, self.max_payload))?;
        if self.buf.len() < head + len {
            self.buf.reserve(head + len - self.buf.len());
            return Ok(None);
        }
        if let OpCode::Control(_) = header.opcode {
            if !header.is_final || len > 125 {
                return Err(FrameError::Protocol(
                    "control frame fragmented or longer than 125 bytes",
                ));
            }
        }
        match (self.peer, header.mask.take()) {
            (Peer::Client, None) => Err(FrameError::Protocol("unmasked frame from the client")),
            (Peer::Node, Some(_)) => Err(FrameError::Protocol("masked frame from the node")),
            (_, mask) => {
                self.buf.advance(head);
                let mut payload = self.buf.split_to(len);
                if self.buf.is_empty() {
                    // Idle between frames: hold no buffer (the payload keeps its own bytes).
                    self.buf = BytesMut::new();
                }
                if let Some(key) = mask {
                    apply_mask(&mut payload, key);
                }
                Ok(Some((
                    Frame::from_payload(header, payload.freeze()),
                    head + len,
                )))
            }
        }
    }

    /// Writes `frame` (masked for a node, unmasked for the client) and flushes it. Returns the bytes
    /// written.
    pub(super) async fn write(&mut self, frame: &Frame) -> Result<usize, FrameError> {
        let mut header = frame.header().clone();
        header.mask = match self.peer {
            Peer::Node => Some(rand::random()),
            Peer::Client => None,
        };
        let len = frame.payload().len();
        let mut out = Vec::with_capacity(header.len(len as u64) + len);
        header
            .format(len as u64, &mut out)
            .map_err(|_| FrameError::Protocol("frame header could not be encoded"))?;
        let start = out.len();
        out.extend_from_slice(frame.payload());
        if let Some(key) = header.mask {
            apply_mask(&mut out[start..], key);
        }
        let io = &mut self.io;
        match tokio::time::timeout(WRITE_TIMEOUT, async {
            io.write_all(&out).await?;
            io.flush().await
        })
        .await
        {
            Ok(r) => r.map(|()| out.len()).map_err(FrameError::Io),
            Err(_) => Err(FrameError::WriteTimeout),
        }
    }

    /// Closes the write side (TCP FIN) within a short bound; errors mean it is gone already.
    pub(super) async fn shutdown(&mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(1), self.io.shutdown()).await;
    }
}

/// XOR `payload` with the 4-byte masking key (RFC 6455 section 5.3).
fn apply_mask(payload: &mut [u8], key: [u8; 4]) {
    for (i, b) in payload.iter_mut().enumerate() {
        *b ^= key[i & 3];
    }
}

/// What a frame is, for the relay's decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// First frame of a data message; `fin` false when more fragments follow.
    Start {
        /// True if this frame is the whole message.
        fin: bool,
    },
    /// A continuation fragment; `fin` true on the last one.
    Continue {
        /// True on the message's last fragment.
        fin: bool,
    },
    /// Ping.
    Ping,
    /// Pong.
    Pong,
    /// Close.
    Close,
}

/// Classifies `frame` (reserved opcodes never get here: [`FrameIo::read`] rejects them).
pub(super) fn kind(frame: &Frame) -> Kind {
    let fin = frame.header().is_final;
    match frame.header().opcode {
        OpCode::Data(Data::Continue) => Kind::Continue { fin },
        OpCode::Data(_) => Kind::Start { fin },
        OpCode::Control(Control::Ping) => Kind::Ping,
        OpCode::Control(Control::Pong) => Kind::Pong,
        OpCode::Control(_) => Kind::Close,
    }
}

/// A Close frame with `code` and `reason` (reason cut to fit the 125-byte control frame limit).
pub(super) fn close(code: u16, reason: &str) -> Frame {
    let mut cut = reason.len().min(123);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut payload = Vec::with_capacity(2 + cut);
    payload.extend_from_slice(&code.to_be_bytes());
    payload.extend_from_slice(&reason.as_bytes()[..cut]);
    let header = FrameHeader {
        opcode: OpCode::Control(Control::Close),
        ..FrameHeader::default()
    };
    Frame::from_payload(header, Bytes::from(payload))
}

/// The code of a Close frame, `None` when it carries none (RFC 6455 section 5.5.1).
pub(super) fn close_code(frame: &Frame) -> Option<u16> {
    let p = frame.payload();
    (p.len() >= 2).then(|| u16::from_be_bytes([p[0], p[1]]))
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    fn pair() -> (
        FrameIo<tokio::io::DuplexStream>,
        FrameIo<tokio::io::DuplexStream>,
    ) {
        let (a, b) = tokio::io::duplex(64 * 1024);
        // `a` is the gateway's node side (writes masked), `b` plays the gateway's client side (reads masked).
        (FrameIo::new(a, Peer::Node), FrameIo::new(b, Peer::Client))
    }

    #[tokio::test]
    async fn frames_keep_opcode_fin_and_rsv_bits_across_masking() {
        let (mut to_node, mut from_client) = pair();
        let header = FrameHeader {
            is_final: false,
            rsv1: true,
            opcode: OpCode::Data(Data::Binary),
            mask: None,
            ..FrameHeader::default()
        };
        let frame = Frame::from_payload(header.clone(), Bytes::from_static(b"compressed bytes"));
        let written = to_node.write(&frame).await.expect("write");
        let (got, wire) = from_client.read().await.expect("read").expect("a frame");
        assert_eq!(wire, written);
        assert_eq!(got.header(), &header);
        assert_eq!(got.payload(), b"compressed bytes");
    }

    #[tokio::test]
    async fn partial_frames_wait_for_the_rest_and_eof_between_frames_is_clean() {
        let (a, b) = tokio::io::duplex(1024);
        let mut node_side = FrameIo::new(b, Peer::Node);
        let (mut ra, mut wa) = tokio::io::split(a);
        // Unmasked text frame "hello" sent in two writes.
        wa.write_all(&[0x81, 0x05, b'h', b'e'])
            .await
            .expect("write");
        let read = tokio::spawn(async move {
            let f = node_side.read().await.expect("read").expect("frame");
            let end = node_side.read().await.expect("clean eof");
            (f, end)
        });
        wa.write_all(b"llo").await.expect("write");
        wa.shutdown().await.expect("shutdown");
        drop(wa);
        let mut sink = Vec::new();
        let _ = ra.read_to_end(&mut sink).await;
        let (f, end) = read.await.expect("join");
        assert_eq!(f.0.payload(), b"hello");
        assert_eq!(kind(&f.0), Kind::Start { fin: true });
        assert!(end.is_none());
    }

    #[tokio::test]
    async fn unmasked_client_frames_and_oversized_control_frames_are_refused() {
        let (a, b) = tokio::io::duplex(1024);
        let mut client_side = FrameIo::new(b, Peer::Client);
        let (_, mut wa) = tokio::io::split(a);
        wa.write_all(&[0x81, 0x01, b'x']).await.expect("write");
        assert!(matches!(
            client_side.read().await,
            Err(FrameError::Protocol(_))
        ));
        let (a, b) = tokio::io::duplex(1024);
        let mut node_side = FrameIo::new(b, Peer::Node);
        let (_, mut wa) = tokio::io::split(a);
        let mut ping = vec![0x89, 126, 0, 200];
        ping.extend(std::iter::repeat_n(0u8, 200));
        wa.write_all(&ping).await.expect("write");
        assert!(matches!(
            node_side.read().await,
            Err(FrameError::Protocol(_))
        ));
    }

    #[test]
    fn close_frames_carry_code_and_cut_reason() {
        let f = close(1012, &"é".repeat(100));
        assert_eq!(close_code(&f), Some(1012));
        assert!(f.payload().len() <= 125);
        assert!(std::str::from_utf8(&f.payload()[2..]).is_ok());
        assert_eq!(kind(&f), Kind::Close);
        let empty = Frame::from_payload(FrameHeader::default(), Bytes::new());
        assert_eq!(close_code(&empty), None);
    }
}
