//! The chunked transfer coding (RFC 9112 section 7.1): one decoder for request bodies, one encoder
//! for response bodies.
//!
//! ```text
//! chunked-body   = *chunk last-chunk trailer-section CRLF
//! chunk          = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
//! chunk-size     = 1*HEXDIG
//! last-chunk     = 1*("0") [ chunk-ext ] CRLF
//! chunk-ext      = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
//! ```
//!
//! Decoder rules, as hyper's decoder applies them:
//! - a chunk-size is 1 to 16 hex digits (a size past `u64` is refused), optionally followed by
//!   BWS (SP/HTAB) before the extension or the line end (section 7.1.1);
//! - chunk extensions are skipped, not interpreted (section 7.1.1: a recipient ignores those it
//!   does not understand), up to [`MAX_EXTENSIONS`] bytes over the whole body;
//! - every line ends with CR LF; the chunk data is followed by exactly CR LF;
//! - trailer fields (section 7.1.2) are field lines as in a head, up to [`MAX_TRAILERS`] bytes;
//!   they are passed on as a trailers frame, and no framing field may be among them.
//!
//! The decoder never reads past the end of the chunked body: pipelined bytes stay in the buffer.

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::proxy::headers::trim;
use crate::proxy::http1_codec::head;

/// Chunk-extension bytes allowed over one body (hyper's limit).
pub const MAX_EXTENSIONS: usize = 16 * 1024;
/// Trailer-section bytes allowed (hyper's limit for a trailer section).
pub const MAX_TRAILERS: usize = 16 * 1024;

/// Why a chunked body is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid chunked body: {0}")]
pub struct ChunkedError(pub &'static str);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Hex digits of a chunk-size (`digits` read so far).
    Size { digits: u8 },
    /// BWS after the size.
    SizeWs,
    /// A chunk extension, skipped to the line's CR.
    Ext,
    /// The LF of a chunk-size line.
    SizeLf,
    /// Chunk data bytes left.
    Data,
    /// The CR after chunk data.
    DataCr,
    /// The LF after chunk data.
    DataLf,
    /// The trailer section (after the last chunk), collected until an empty line.
    Trailers,
    /// The body ended.
    Done,
}

/// What one [`Decoder::decode`] step yields.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Chunk data (never empty), split off the buffer without copying.
    Data(Bytes),
    /// The trailer fields (sent only when there are any), then the body ends.
    Trailers(HeaderMap),
    /// The body ended (the next call also says so).
    End,
    /// The buffer holds no complete step: read more.
    NeedMore,
}

/// The chunked decoder's state over one body.
#[derive(Debug, Clone)]
pub struct Decoder {
    state: State,
    size: u64,
    ext_bytes: usize,
    trailers: Vec<u8>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    /// A decoder at the start of a chunked body.
    pub fn new() -> Self {
        Decoder {
            state: State::Size { digits: 0 },
            size: 0,
            ext_bytes: 0,
            trailers: Vec::new(),
        }
    }

    /// True once the last chunk and the trailer section were read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes framing bytes from the front of `buf` until it can yield data, trailers or the end.
    ///
    /// # Errors
    /// [`ChunkedError`] for any rule of the module docs broken.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, ChunkedError> {
        loop {
            if self.state == State::Done {
                return Ok(Decoded::End);
            }
            if self.state == State::Data {
                if buf.is_empty() {
                    return Ok(Decoded::NeedMore);
                }
                let n = usize::try_from(self.size).map_or(buf.len(), |s| s.min(buf.len()));
                self.size -= n as u64;
                if self.size == 0 {
                    self.state = State::DataCr;
                }
                return Ok(Decoded::Data(buf.split_to(n).freeze()));
            }
            if self.state == State::Trailers {
                return self.trailers(buf);
            }
            let Some(&b) = buf.first() else {
                return Ok(Decoded::NeedMore);
            };
            buf.advance(1);
            self.state = match (self.state, b) {
                (State::Size { digits }, _) if b.is_ascii_hexdigit() => {
                    if digits == 16 {
                        return Err(ChunkedError("chunk size too large"));
                    }
                    let d = (b as char).to_digit(16).expect("a hex digit") as u64;
                    self.size = self.size << 4 | d;
                    State::Size { digits: digits + 1 }
                }
                (State::Size { digits: 0 }, _) => return Err(ChunkedError("no chunk size")),
                (State::Size { .. } | State::SizeWs, b' ' | b'\t') => State::SizeWs,
                (State::Size { .. } | State::SizeWs, b';') => State::Ext,
                (State::Size { .. } | State::SizeWs | State::Ext, b'\r') => State::SizeLf,
                (State::Ext, b'\n') => return Err(ChunkedError("bare LF in a chunk extension")),
                (State::Ext, _) => {
                    self.ext_bytes += 1;
                    if self.ext_bytes > MAX_EXTENSIONS {
                        return Err(ChunkedError("chunk extensions too long"));
                    }
                    State::Ext
                }
                (State::SizeLf, b'\n') if self.size == 0 => State::Trailers,
                (State::SizeLf, b'\n') => State::Data,
                (State::DataCr, b'\r') => State::DataLf,
                (State::DataLf, b'\n') => State::Size { digits: 0 },
                (State::Size { .. } | State::SizeWs, _) => {
                    return Err(ChunkedError("invalid chunk size line"))
                }
                (State::SizeLf | State::DataLf, _) => return Err(ChunkedError("expected LF")),
                (State::DataCr, _) => return Err(ChunkedError("chunk data longer than its size")),
                (State::Data | State::Trailers | State::Done, _) => {
                    unreachable!("handled above")
                }
            };
        }
    }

    /// The trailer section: collects lines to the empty one, then parses them.
    fn trailers(&mut self, buf: &mut BytesMut) -> Result<Decoded, ChunkedError> {
        loop {
            let Some(nl) = buf.iter().position(|b| *b == b'\n') else {
                if self.trailers.len() + buf.len() > MAX_TRAILERS {
                    return Err(ChunkedError("trailer section too long"));
                }
                return Ok(Decoded::NeedMore);
            };
            let line = buf.split_to(nl + 1);
            let Some(line) = line.strip_suffix(b"\r\n") else {
                return Err(ChunkedError("trailer line without CR LF"));
            };
            if line.is_empty() {
                self.state = State::Done;
                if self.trailers.is_empty() {
                    return Ok(Decoded::End);
                }
                return parse_trailers(&std::mem::take(&mut self.trailers)).map(Decoded::Trailers);
            }
            if self.trailers.len() + line.len() + 2 > MAX_TRAILERS {
                return Err(ChunkedError("trailer section too long"));
            }
            self.trailers.extend_from_slice(line);
            self.trailers.extend_from_slice(b"\r\n");
        }
    }
}

/// Trailer lines (each ending CR LF) as fields, judged by [`head::field_line`]'s syntax; framing
/// fields are refused in a trailer (RFC 9110 section 6.5.1).
fn parse_trailers(lines: &[u8]) -> Result<HeaderMap, ChunkedError> {
    let limits = head::HeadLimits {
        max_request_line: usize::MAX,
        max_header_bytes: MAX_TRAILERS,
        max_headers: usize::MAX,
    };
    let mut map = HeaderMap::new();
    for line in lines.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let mut facts = head::HeadFacts::default();
        head::field_line(line, &mut facts, &limits)
            .map_err(|_| ChunkedError("invalid trailer field"))?;
        if facts.content_length.is_some() || facts.chunked {
            return Err(ChunkedError("framing field in the trailer section"));
        }
        let colon = line
            .iter()
            .position(|b| *b == b':')
            .expect("field_line checked");
        let name = HeaderName::from_bytes(&line[..colon])
            .map_err(|_| ChunkedError("invalid trailer field"))?;
        let value = HeaderValue::from_bytes(trim(&line[colon + 1..]))
            .map_err(|_| ChunkedError("invalid trailer field"))?;
        map.append(name, value);
    }
    Ok(map)
}

/// The chunk-size line of a chunk of `len` bytes (`len` > 0): hex digits and CR LF, into `out`;
/// returns the bytes used. Chunk data then follows, then [`CHUNK_END`].
pub fn chunk_head(len: usize, out: &mut [u8; 18]) -> &[u8] {
    let mut n = 0;
    let mut shift = (usize::BITS - len.leading_zeros()).div_ceil(4).max(1) * 4;
    while shift > 0 {
        shift -= 4;
        out[n] = b"0123456789abcdef"[(len >> shift) & 0xf];
        n += 1;
    }
    out[n] = b'\r';
    out[n + 1] = b'\n';
    &out[..n + 2]
}

/// The CR LF that ends chunk data.
pub const CHUNK_END: &[u8] = b"\r\n";
/// The last chunk and an empty trailer section.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// The last chunk with `trailers` as its trailer section (RFC 9112 section 7.1.2).
pub fn last_chunk_with(trailers: &HeaderMap) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + trailers.len() * 32);
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// `data` chunked as one chunk (nothing for empty data), then the last chunk with `trailers`:
/// the encoder's whole output for a body, for tests and the fuzz targets.
pub fn encode(chunks: &[&[u8]], trailers: Option<&HeaderMap>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut size = [0u8; 18];
    for c in chunks.iter().filter(|c| !c.is_empty()) {
        out.extend_from_slice(chunk_head(c.len(), &mut size));
        out.extend_from_slice(c);
        out.extend_from_slice(CHUNK_END);
    }
    match trailers {
        Some(t) if !t.is_empty() => out.extend_from_slice(&last_chunk_with(t)),
        _ => out.extend_from_slice(LAST_CHUNK),
    }
    out
}

/// A whole decoded chunked body: its data, its trailers, and the bytes left after it.
pub type DecodedBody = (Vec<u8>, Option<HeaderMap>, Vec<u8>);

/// Decodes a whole chunked body from `wire` fed in pieces of `step` bytes: the data, the trailers
/// and the bytes left after the body; for tests and the fuzz targets.
///
/// # Errors
/// [`ChunkedError`] as [`Decoder::decode`]; `"incomplete"` when `wire` ends before the body does.
pub fn decode_all(wire: &[u8], step: usize) -> Result<DecodedBody, ChunkedError> {
    let mut d = Decoder::new();
    let mut buf = BytesMut::new();
    let mut data = Vec::new();
    let mut trailers = None;
    let mut pieces = wire.chunks(step.max(1));
    loop {
        match d.decode(&mut buf)? {
            Decoded::Data(b) => data.extend_from_slice(&b),
            Decoded::Trailers(t) => trailers = Some(t),
            Decoded::End => {
                let mut rest = buf.to_vec();
                pieces.for_each(|p| rest.extend_from_slice(p));
                return Ok((data, trailers, rest));
            }
            Decoded::NeedMore => match pieces.next() {
                Some(p) => buf.extend_from_slice(p),
                None => return Err(ChunkedError("incomplete")),
            },
        }
    }
}

#[cfg(test)]
#[path = "chunked_tests.rs"]
mod tests;
