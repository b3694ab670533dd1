//! WebSocket frames on the wire (RFC 6455 section 5.2): the header read in place, and a frame
//! kept as the exact bytes it arrived in, so the relay forwards it byte for byte: opcode, FIN and
//! RSV bits untouched (extensions such as permessage-deflate stay end to end), a client's frame
//! still masked with the key the client chose (section 5.3: any key is as good as a fresh one),
//! a node's frame unmasked. Control frames are never answered here.
//!
//! Only frames the gateway makes itself (Close) or sends the other way than they came (a client's
//! Close echoed back to the client during a hop) are re-encoded, masked for a node and unmasked
//! for the client ([`Frame::for_peer`]). Pure; spawns nothing.

use bytes::Bytes;

use crate::proxy::respond::CloseCode;

/// Which side a frame comes from or goes to; decides masking (RFC 6455 section 5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Peer {
    /// The downstream client: its frames arrive masked, frames to it go out unmasked.
    Client,
    /// An upstream node: its frames arrive unmasked, frames to it go out masked.
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
    /// A message larger than the limit (`.0` its size so far in bytes, `.1` the limit).
    #[error(
        "message of {0} bytes is larger than the {1} byte limit (limits.websocket_max_message)"
    )]
    TooBig(u64, u64),
    /// The peer did not take the bytes written within the write timeout.
    #[error("peer did not accept a frame within {0:?}")]
    WriteTimeout(std::time::Duration),
}

impl FrameError {
    /// The reason a Close 1002 gives for this error: the rule a [`FrameError::Protocol`] names,
    /// or a general one for the others.
    pub(super) fn protocol_reason(&self) -> &'static str {
        match self {
            FrameError::Protocol(what) => what,
            _ => "invalid frame",
        }
    }
}

/// What a frame is, for the relay's decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// First frame of a data message (text or binary); `fin` false when more fragments follow.
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

/// A frame header read in place (RFC 6455 section 5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Head {
    /// What the frame is.
    pub(super) kind: Kind,
    /// The masking key, if the MASK bit is set.
    pub(super) mask: Option<[u8; 4]>,
    /// Length of the header on the wire, bytes (2 to 14).
    pub(super) len: usize,
    /// Payload length, bytes.
    pub(super) payload: u64,
}

impl Head {
    /// Reads the header at the start of `b` for a frame coming from `from`. `Ok(None)` when `b`
    /// holds less than the whole header.
    ///
    /// # Errors
    /// [`FrameError::Protocol`] for a reserved opcode, a 64-bit length with its most significant
    /// bit set, a fragmented or longer than 125 bytes control frame (section 5.5), an unmasked
    /// client frame or a masked node frame (section 5.1).
    pub(super) fn parse(b: &[u8], from: Peer) -> Result<Option<Head>, FrameError> {
        let [b0, b1, ..] = *b else {
            return Ok(None);
        };
        let fin = b0 & 0x80 != 0;
        let kind = match b0 & 0x0f {
            0x0 => Kind::Continue { fin },
            0x1 | 0x2 => Kind::Start { fin },
            0x8 => Kind::Close,
            0x9 => Kind::Ping,
            0xa => Kind::Pong,
            _ => return Err(FrameError::Protocol("reserved opcode")),
        };
        let masked = b1 & 0x80 != 0;
        let (payload, mut len) = match b1 & 0x7f {
            126 if b.len() < 4 => return Ok(None),
            126 => (u64::from(u16::from_be_bytes([b[2], b[3]])), 4),
            127 if b.len() < 10 => return Ok(None),
            127 => {
                let n = u64::from_be_bytes(b[2..10].try_into().expect("8 bytes"));
                if n >> 63 != 0 {
                    return Err(FrameError::Protocol(
                        "64-bit payload length with the most significant bit set",
                    ));
                }
                (n, 10)
            }
            n => (u64::from(n), 2),
        };
        if matches!(kind, Kind::Close | Kind::Ping | Kind::Pong) && (!fin || payload > 125) {
            return Err(FrameError::Protocol(
                "control frame fragmented or longer than 125 bytes",
            ));
        }
        match (from, masked) {
            (Peer::Client, false) => {
                return Err(FrameError::Protocol("unmasked frame from the client"))
            }
            (Peer::Node, true) => return Err(FrameError::Protocol("masked frame from the node")),
            _ => {}
        }
        let mask = if masked {
            let Some(key) = b.get(len..len + 4) else {
                return Ok(None);
            };
            len += 4;
            Some(key.try_into().expect("4 bytes"))
        } else {
            None
        };
        Ok(Some(Head {
            kind,
            mask,
            len,
            payload,
        }))
    }

    /// Header plus payload, bytes; `None` when that does not fit in memory.
    pub(super) fn wire_len(&self) -> Option<usize> {
        usize::try_from(self.payload).ok()?.checked_add(self.len)
    }
}

/// One whole frame as it was (or will be) on the wire.
#[derive(Debug, Clone)]
pub(super) struct Frame {
    head: Head,
    wire: Bytes,
}

impl Frame {
    /// The frame whose header is `head` and whose bytes on the wire are `wire` (header included,
    /// `head.wire_len()` of them).
    pub(super) fn new(head: Head, wire: Bytes) -> Self {
        debug_assert_eq!(head.wire_len(), Some(wire.len()));
        Frame { head, wire }
    }

    /// What the frame is.
    pub(super) fn kind(&self) -> Kind {
        self.head.kind
    }

    /// Payload length, bytes.
    pub(super) fn payload_len(&self) -> usize {
        self.wire.len() - self.head.len
    }

    /// The bytes on the wire, header included.
    pub(super) fn wire(&self) -> &[u8] {
        &self.wire
    }

    /// The first byte on the wire: FIN, the three RSV bits and the opcode (RFC 6455 section 5.2).
    pub(super) fn first_byte(&self) -> u8 {
        self.wire[0]
    }

    /// True if RSV1 is set: on a message's first frame, a compressed message (RFC 7692 section 6).
    pub(super) fn rsv1(&self) -> bool {
        self.wire[0] & 0x40 != 0
    }

    /// A data frame the gateway makes itself: first byte `b0` (FIN, RSV, opcode) and `payload`
    /// (plain), encoded for `to`: masked with a fresh key for a node, unmasked for the client
    /// (RFC 6455 section 5.3).
    pub(super) fn data(b0: u8, payload: &[u8], to: Peer) -> Frame {
        let mask = (to == Peer::Node).then(rand::random);
        let wire = encode(b0, payload, mask);
        let from = match to {
            Peer::Node => Peer::Client,
            Peer::Client => Peer::Node,
        };
        let head = Head::parse(&wire, from)
            .ok()
            .flatten()
            .expect("an encoded data frame parses");
        Frame::new(head, wire)
    }

    /// The payload, unmasked (a copy only when the frame is masked).
    pub(super) fn payload(&self) -> std::borrow::Cow<'_, [u8]> {
        let p = &self.wire[self.head.len..];
        match self.head.mask {
            None => p.into(),
            Some(key) => {
                let mut v = p.to_vec();
                apply_mask(&mut v, key);
                v.into()
            }
        }
    }

    /// The code of a Close frame, `None` when it carries none (RFC 6455 section 5.5.1).
    pub(super) fn close_code(&self) -> Option<u16> {
        let p = self.wire.get(self.head.len..self.head.len + 2)?;
        let mut code = [p[0], p[1]];
        if let Some(key) = self.head.mask {
            apply_mask(&mut code, key);
        }
        Some(u16::from_be_bytes(code))
    }

    /// The bytes to write to `to`: the frame as it is when its masking already suits `to` (a
    /// client's frame to a node, a node's or the gateway's frame to the client), otherwise
    /// re-encoded with a fresh key for a node, unmasked for the client (section 5.3).
    pub(super) fn for_peer(&self, to: Peer) -> Bytes {
        match (to, self.head.mask) {
            (Peer::Node, Some(_)) | (Peer::Client, None) => self.wire.clone(),
            (Peer::Node, None) => encode(self.wire[0], &self.payload(), Some(rand::random())),
            (Peer::Client, Some(_)) => encode(self.wire[0], &self.payload(), None),
        }
    }
}

/// A frame whose first byte (FIN, RSV, opcode) is `b0`, carrying `payload` (plain), masked with
/// `mask` if given.
fn encode(b0: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Bytes {
    let len = payload.len();
    let mut out = Vec::with_capacity(14 + len);
    out.push(b0);
    let m = if mask.is_some() { 0x80 } else { 0 };
    match len {
        0..=125 => out.push(m | len as u8),
        126..=0xffff => {
            out.push(m | 126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.push(m | 127);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    if let Some(key) = mask {
        out.extend_from_slice(&key);
    }
    let start = out.len();
    out.extend_from_slice(payload);
    if let Some(key) = mask {
        apply_mask(&mut out[start..], key);
    }
    Bytes::from(out)
}

/// XOR `payload` (a whole frame payload, from its first byte) with the 4-byte masking key
/// (RFC 6455 section 5.3).
fn apply_mask(payload: &mut [u8], key: [u8; 4]) {
    for (i, b) in payload.iter_mut().enumerate() {
        *b ^= key[i & 3];
    }
}

/// A Close frame with `code` and `reason` (reason cut to fit the 125-byte control frame limit),
/// unmasked: [`Frame::for_peer`] masks it on its way to a node.
pub(super) fn close(code: CloseCode, reason: &str) -> Frame {
    let mut cut = reason.len().min(123);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut payload = Vec::with_capacity(2 + cut);
    payload.extend_from_slice(&code.0.to_be_bytes());
    payload.extend_from_slice(&reason.as_bytes()[..cut]);
    let wire = encode(0x88, &payload, None);
    let head = Head::parse(&wire, Peer::Node)
        .ok()
        .flatten()
        .expect("an encoded Close frame parses");
    Frame::new(head, wire)
}

/// Takes a frame a peer sent; returns `Ok` unless it is a Close that may not be relayed as it is.
/// A Close may carry no payload, or a 2-byte code that may go on the wire (1000-1003, 1007-1014,
/// 3000-4999: RFC 6455 section 7.4.1 and the IANA WebSocket Close Code Number Registry; 1004,
/// 1005, 1006, 1015 and the unassigned codes never go on the wire) and a UTF-8 reason (5.5.1).
///
/// # Errors
/// [`FrameError::Protocol`] naming the broken rule; the caller answers Close 1002 (section 7.4.1).
pub(super) fn check_close(frame: &Frame) -> Result<(), FrameError> {
    if frame.kind() != Kind::Close {
        return Ok(());
    }
    let payload = frame.payload();
    let (code, reason) = match payload.split_first_chunk::<2>() {
        Some((code, reason)) => (u16::from_be_bytes(*code), reason),
        None if payload.is_empty() => return Ok(()),
        None => return Err(FrameError::Protocol("close frame with a one-byte payload")),
    };
    let broken = match code {
        1000..=1003 | 1007..=1014 | 3000..=4999 if std::str::from_utf8(reason).is_ok() => {
            return Ok(())
        }
        1000..=1003 | 1007..=1014 | 3000..=4999 => "close reason is not UTF-8",
        _ => "close code reserved or unassigned (RFC 6455 section 7.4)",
    };
    Err(FrameError::Protocol(broken))
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
