//! `permessage-deflate` (RFC 7692) on a socket that hops (SPEC section 5, "Extensions and
//! subprotocols").
//!
//! A compressed socket can move because the gateway keeps both ends' streams valid:
//! - **Client to node.** The answer relayed to the client carries `client_no_context_takeover`
//!   (section 7.1.1.1 lets a server impose it), so every client message is compressed on its own
//!   and any node that accepts the client's window inflates it. Where the new node accepts no
//!   compression, or a smaller client window, the gateway inflates the client's messages and sends
//!   them uncompressed (an uncompressed message is valid on a permessage-deflate socket: RSV1
//!   clear, section 6).
//! - **Node to client.** A new node's compressor starts fresh, and a stream that refers to no
//!   earlier message is valid for the client's inflater whatever history it keeps, as long as the
//!   node's window is no larger than the client agreed to (section 7.1.2.1) and the node resets its
//!   context per message where the client agreed the server would (section 7.1.1.1). Otherwise the
//!   gateway inflates the node's messages (with the node's own context) and sends them
//!   uncompressed. A node that accepts no compression sends uncompressed messages, which pass.
//!
//! So the gateway only ever inflates, and only on a node side whose parameters need it
//! ([`Plan`]); a socket whose nodes agree with the client relays byte for byte. Every inflated
//! message is bounded by `limits.websocket_max_message`; an inflater holds one 32 KiB window,
//! and only while a message is in flight unless its sender keeps its context across messages.
//! Pure apart from the inflater's state; spawns nothing.

use flate2::{Decompress, FlushDecompress, Status};

use super::frame::{Frame, FrameError, Kind, Peer};

/// Extension name of RFC 7692.
const NAME: &str = "permessage-deflate";
/// The window size, as a power of two, when a parameter leaves it out (RFC 7692 section 7.1.2).
const MAX_WINDOW_BITS: u8 = 15;
/// The four bytes a sender removes from the end of each compressed message and a receiver appends
/// before inflating it (RFC 7692 section 7.2.2).
const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// The parameters of an accepted `permessage-deflate` (RFC 7692 section 7.1), as a server's answer
/// states them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeflateParams {
    /// The server resets its compression context after each message.
    pub(crate) server_no_context_takeover: bool,
    /// The client resets its compression context after each message.
    pub(crate) client_no_context_takeover: bool,
    /// The server's LZ77 window, a power of two from 8 to 15.
    pub(crate) server_max_window_bits: u8,
    /// The client's LZ77 window, a power of two from 8 to 15.
    pub(crate) client_max_window_bits: u8,
}

/// The extensions a node's `101` accepted (`Sec-WebSocket-Extensions`, RFC 6455 section 9.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Agreed {
    /// None.
    None,
    /// `permessage-deflate` alone, with these parameters.
    Deflate(DeflateParams),
    /// Anything else (another extension, several, or an answer that does not parse): its state is
    /// unknown to the gateway, so such a socket never hops (it gets the reconnect hint).
    Other,
}

impl Agreed {
    /// What the answer's `Sec-WebSocket-Extensions` values `values` accepted.
    pub(crate) fn of<'a>(values: impl Iterator<Item = &'a [u8]>) -> Agreed {
        let joined: Vec<&[u8]> = values
            .map(<[u8]>::trim_ascii)
            .filter(|v| !v.is_empty())
            .collect();
        match joined.as_slice() {
            [] => Agreed::None,
            [one] => std::str::from_utf8(one)
                .ok()
                .and_then(DeflateParams::parse)
                .map_or(Agreed::Other, Agreed::Deflate),
            _ => Agreed::Other,
        }
    }

    /// The deflate parameters, if that is what was agreed.
    pub(crate) fn deflate(&self) -> Option<DeflateParams> {
        match self {
            Agreed::Deflate(p) => Some(*p),
            Agreed::None | Agreed::Other => None,
        }
    }
}

impl DeflateParams {
    /// Parses one extension element of an answer, e.g.
    /// `permessage-deflate; client_no_context_takeover; server_max_window_bits=10`. `None` when it
    /// is not `permessage-deflate`, or a parameter is unknown, repeated or out of range
    /// (RFC 7692 section 7.1: such an answer fails the connection).
    pub(crate) fn parse(element: &str) -> Option<DeflateParams> {
        let mut parts = element.split(';').map(str::trim);
        if !parts.next()?.eq_ignore_ascii_case(NAME) {
            return None;
        }
        let mut p = DeflateParams {
            server_no_context_takeover: false,
            client_no_context_takeover: false,
            server_max_window_bits: MAX_WINDOW_BITS,
            client_max_window_bits: MAX_WINDOW_BITS,
        };
        let mut seen = [false; 4];
        for part in parts {
            let (name, value) = match part.split_once('=') {
                Some((n, v)) => (n.trim(), Some(v.trim().trim_matches('"'))),
                None => (part, None),
            };
            let slot = match name.to_ascii_lowercase().as_str() {
                "server_no_context_takeover" if value.is_none() => {
                    p.server_no_context_takeover = true;
                    0
                }
                "client_no_context_takeover" if value.is_none() => {
                    p.client_no_context_takeover = true;
                    1
                }
                "server_max_window_bits" => {
                    p.server_max_window_bits = window_bits(value?)?;
                    2
                }
                // An answer may name it without a value only as an offer does; treat that as 15.
                "client_max_window_bits" => {
                    p.client_max_window_bits = value.map_or(Some(MAX_WINDOW_BITS), window_bits)?;
                    3
                }
                _ => return None,
            };
            if std::mem::replace(&mut seen[slot], true) {
                return None;
            }
        }
        Some(p)
    }

    /// The parameters as an extension element (an answer's, or an offer asking for exactly them).
    pub(crate) fn render(&self) -> String {
        let mut s = String::from(NAME);
        if self.server_no_context_takeover {
            s.push_str("; server_no_context_takeover");
        }
        if self.client_no_context_takeover {
            s.push_str("; client_no_context_takeover");
        }
        if self.server_max_window_bits < MAX_WINDOW_BITS {
            s.push_str(&format!(
                "; server_max_window_bits={}",
                self.server_max_window_bits
            ));
        }
        if self.client_max_window_bits < MAX_WINDOW_BITS {
            s.push_str(&format!(
                "; client_max_window_bits={}",
                self.client_max_window_bits
            ));
        }
        s
    }

    /// What the client is told when the socket may hop: these parameters with
    /// `client_no_context_takeover` imposed (RFC 7692 section 7.1.1.1).
    pub(crate) fn for_hopping_client(self) -> DeflateParams {
        DeflateParams {
            client_no_context_takeover: true,
            ..self
        }
    }
}

/// A window size parameter's value: a decimal from 8 to 15 (RFC 7692 section 7.1.2).
fn window_bits(v: &str) -> Option<u8> {
    if v.is_empty() || v.len() > 2 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse::<u8>().ok().filter(|b| (8..=15).contains(b))
}

/// Which directions of one node side the gateway inflates (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Plan {
    /// Inflate the client's compressed messages before they go to the node.
    pub(crate) client: bool,
    /// Inflate the node's compressed messages before they go to the client.
    pub(crate) node: bool,
}

impl Plan {
    /// The plan for a node that answered `node` on a socket whose client agreed to `client`
    /// (`None`: no compression). A node that compresses toward a client that agreed to none is
    /// refused before this (it accepted an extension that was not offered), so that pair plans
    /// nothing.
    pub(crate) fn of(client: Option<DeflateParams>, node: Option<DeflateParams>) -> Plan {
        match (client, node) {
            (None, _) => Plan::default(),
            (Some(_), None) => Plan {
                client: true,
                node: false,
            },
            (Some(c), Some(n)) => Plan {
                client: !c.client_no_context_takeover
                    || c.client_max_window_bits > n.client_max_window_bits,
                node: n.server_max_window_bits > c.server_max_window_bits
                    || (c.server_no_context_takeover && !n.server_no_context_takeover),
            },
        }
    }

    /// True when neither direction is inflated.
    pub(crate) fn is_empty(&self) -> bool {
        !self.client && !self.node
    }
}

/// The inflaters of one node side that [`Plan`] asked for.
#[derive(Debug)]
pub(crate) struct Translate {
    /// Client messages to the node.
    client: Option<Inflate>,
    /// Node messages to the client.
    node: Option<Inflate>,
}

impl Translate {
    /// The inflaters `plan` asks for, given the client's agreed parameters `client` and the
    /// node's `node`; `None` when the plan is empty.
    pub(crate) fn new(
        plan: Plan,
        client: Option<DeflateParams>,
        node: Option<DeflateParams>,
    ) -> Option<Box<Translate>> {
        if plan.is_empty() {
            return None;
        }
        Some(Box::new(Translate {
            client: plan
                .client
                .then(|| Inflate::new(client.is_some_and(|c| c.client_no_context_takeover))),
            node: plan
                .node
                .then(|| Inflate::new(node.is_some_and(|n| n.server_no_context_takeover))),
        }))
    }

    /// The frame `f` as it goes `to` its peer: `None` to send it as it is, or its inflated form
    /// (masked for a node). A client frame goes to [`Peer::Node`], a node frame to
    /// [`Peer::Client`]. `limit` is `limits.websocket_max_message`, bytes.
    ///
    /// # Errors
    /// [`FrameError::TooBig`] when the inflated message passes `limit`,
    /// [`FrameError::Protocol`] for compressed data that does not inflate.
    pub(crate) fn frame(
        &mut self,
        f: &Frame,
        to: Peer,
        limit: u64,
    ) -> Result<Option<Frame>, FrameError> {
        let inflater = match to {
            Peer::Node => self.client.as_mut(),
            Peer::Client => self.node.as_mut(),
        };
        match inflater {
            Some(z) => z.frame(f, to, limit),
            None => Ok(None),
        }
    }
}

/// One direction's inflater and the message in flight through it.
struct Inflate {
    /// The inflater (about 43 KiB: a 32 KiB window and its tables); made at a compressed message's
    /// first frame and, where the sender resets its context per message, dropped at its last, so an
    /// idle socket keeps none.
    z: Option<Decompress>,
    /// The sender resets its context per message: so does the inflater.
    reset_each_message: bool,
    /// The message in flight is compressed (RSV1 on its first frame).
    compressed: bool,
    /// Inflated bytes of the message in flight.
    size: u64,
    /// The message in flight ended its deflate stream (a final block) before its last frame.
    ended: bool,
}

impl std::fmt::Debug for Inflate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflate")
            .field("reset_each_message", &self.reset_each_message)
            .field("compressed", &self.compressed)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl Inflate {
    fn new(reset_each_message: bool) -> Self {
        Inflate {
            z: None,
            reset_each_message,
            compressed: false,
            size: 0,
            ended: false,
        }
    }

    /// See [`Translate::frame`].
    fn frame(&mut self, f: &Frame, to: Peer, limit: u64) -> Result<Option<Frame>, FrameError> {
        let fin = match f.kind() {
            Kind::Start { fin } => {
                self.compressed = f.rsv1();
                self.size = 0;
                self.ended = false;
                fin
            }
            Kind::Continue { fin } => fin,
            Kind::Ping | Kind::Pong | Kind::Close => return Ok(None),
        };
        if !self.compressed {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(f.payload_len().saturating_mul(2).min(64 * 1024));
        self.inflate(&f.payload(), &mut out, limit)?;
        if fin {
            self.inflate(&TAIL, &mut out, limit)?;
            self.compressed = false;
            if self.reset_each_message {
                self.z = None;
            }
        }
        // RSV1 belongs to the first frame of a compressed message only (RFC 7692 section 6.1).
        Ok(Some(Frame::data(f.first_byte() & !0x40, &out, to)))
    }

    /// Inflates `input` onto the end of `out`, keeping the message within `limit` bytes. A
    /// sender that ended its stream with a final block (RFC 7692 section 7.2.3.3) starts a new one
    /// with its next message: the inflater is reset, and the rest of this message's bytes are not
    /// inflated.
    fn inflate(&mut self, input: &[u8], out: &mut Vec<u8>, limit: u64) -> Result<(), FrameError> {
        let mut at = 0;
        // Raw deflate with the largest window: it inflates every smaller window too.
        let z = self.z.get_or_insert_with(|| Decompress::new(false));
        while !self.ended {
            if out.capacity() - out.len() < 4096 {
                out.reserve(out.len().max(16 * 1024));
            }
            let (before_in, before_out) = (z.total_in(), z.total_out());
            let status = z
                .decompress_vec(&input[at..], out, FlushDecompress::Sync)
                .map_err(|_| FrameError::Protocol("compressed message does not inflate"))?;
            let consumed = (z.total_in() - before_in) as usize;
            let produced = z.total_out() - before_out;
            at += consumed;
            self.size += produced;
            if self.size > limit {
                return Err(FrameError::TooBig(self.size, limit));
            }
            if status == Status::StreamEnd {
                z.reset(false);
                self.ended = true;
                break;
            }
            let full = out.len() == out.capacity();
            if at == input.len() && !full {
                break;
            }
            if consumed == 0 && produced == 0 && !full {
                return Err(FrameError::Protocol("compressed message does not inflate"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "deflate_tests.rs"]
mod tests;
