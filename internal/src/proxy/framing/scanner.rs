//! The framing follower behind [`super::FramingWatch`]: a state machine over the bytes of
//! HTTP/1.x requests as they are read (heads line by line, `Content-Length` bodies, chunked
//! bodies and trailers; RFC 9112 sections 2, 6 and 7), handing each head line to
//! [`super::super::head`] to judge before it is released.

use super::super::head::{self, HeadFacts, HeadLimits, Refusal};
use super::{FramingLog, MAX_LINE};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// Reading a request head line by line; lines are held until judged.
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
    /// Not following any more: bytes pass unchanged.
    Passive,
    /// A head was refused: nothing more is read or passed on.
    Refused,
}

/// The framing follower; see the module docs.
#[derive(Debug)]
pub(super) struct Scanner {
    pub(super) state: State,
    pub(super) line: Vec<u8>,
    pub(super) head: HeadFacts,
    /// The current head's request line was seen (and released).
    pub(super) started: bool,
    pub(super) heads: u64,
    pub(super) limits: HeadLimits,
}

/// What hyper reads in place of a head refused at its request line: a head it parses, whose
/// request the proxy answers with the refusal (hyper never sees the refused bytes).
const STAND_IN: &[u8] = b"GET / HTTP/1.1\r\n\r\n";

impl Scanner {
    pub(super) fn new(limits: HeadLimits) -> Self {
        Scanner {
            state: State::Head,
            line: Vec::new(),
            head: HeadFacts::default(),
            started: false,
            heads: 0,
            limits,
        }
    }

    /// True while part of a head is held (the head read timeout runs).
    pub(super) fn holding(&self) -> bool {
        self.state == State::Head && (self.started || !self.line.is_empty())
    }

    /// Consumes `bytes`, appending what hyper may read to `out`.
    pub(super) fn feed(&mut self, mut bytes: &[u8], log: &FramingLog, out: &mut Vec<u8>) {
        while !bytes.is_empty() {
            match self.state {
                State::Refused => return,
                State::Passive => {
                    out.extend_from_slice(bytes);
                    return;
                }
                State::Body(left) | State::ChunkData(left) => {
                    let take = usize::try_from(left).map_or(bytes.len(), |l| l.min(bytes.len()));
                    out.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    let left = left - take as u64;
                    self.state = match (self.state, left) {
                        (State::Body(_), 0) => State::Head,
                        (State::Body(_), l) => State::Body(l),
                        (_, 0) => State::ChunkEnd,
                        (_, l) => State::ChunkData(l),
                    };
                }
                State::ChunkSize | State::ChunkEnd | State::Trailers => {
                    // Body framing lines pass at once; they are followed, not judged.
                    let nl = bytes.iter().position(|b| *b == b'\n');
                    let upto = nl.map_or(bytes.len(), |i| i + 1);
                    out.extend_from_slice(&bytes[..upto]);
                    let part = &bytes[..nl.unwrap_or(bytes.len())];
                    bytes = &bytes[upto..];
                    if self.line.len() + part.len() > MAX_LINE {
                        self.state = State::Passive;
                        self.line = Vec::new();
                        continue;
                    }
                    self.line.extend_from_slice(part);
                    if nl.is_some() {
                        let mut line = std::mem::take(&mut self.line);
                        if line.last() == Some(&b'\r') {
                            line.pop();
                        }
                        self.body_line(&line);
                        line.clear();
                        self.line = line;
                    }
                }
                State::Head => {
                    let nl = bytes.iter().position(|b| *b == b'\n');
                    let part = &bytes[..nl.unwrap_or(bytes.len())];
                    bytes = &bytes[nl.map_or(bytes.len(), |i| i + 1)..];
                    self.line.extend_from_slice(part);
                    if nl.is_none() {
                        // Too long already: refused before the rest arrives.
                        if let Some(why) = self.overlong() {
                            self.refuse(why, log, out);
                        }
                        return;
                    }
                    let mut line = std::mem::take(&mut self.line);
                    self.head_line(&mut line, log, out);
                    line.clear();
                    if self.line.is_empty() {
                        self.line = line;
                    }
                }
            }
        }
    }

    /// The refusal for a partial head line that is already past its limit.
    pub(super) fn overlong(&self) -> Option<Refusal> {
        if !self.started {
            (self.line.len() + 1 > self.limits.max_request_line)
                .then_some(Refusal::UriTooLong(self.limits.max_request_line))
        } else {
            (self.head.bytes + self.line.len() > self.limits.max_header_bytes).then(|| {
                Refusal::HeadersTooLarge(format!("{} bytes", self.limits.max_header_bytes))
            })
        }
    }

    /// Records the refusal of the current head and hands hyper a complete head in its place.
    pub(super) fn refuse(&mut self, why: Refusal, log: &FramingLog, out: &mut Vec<u8>) {
        if !self.started {
            self.heads += 1;
            out.extend_from_slice(STAND_IN);
        } else {
            // The released lines were all valid; the head ends here for hyper.
            out.extend_from_slice(b"\r\n");
        }
        log.refuse(self.heads, why);
        self.state = State::Refused;
        self.line = Vec::new();
    }

    /// Judges one head line (without its LF) and releases it, or refuses the head.
    pub(super) fn head_line(&mut self, line: &mut Vec<u8>, log: &FramingLog, out: &mut Vec<u8>) {
        let had_cr = line.last() == Some(&b'\r');
        if had_cr {
            line.pop();
        }
        let release = |line: &[u8], out: &mut Vec<u8>| {
            out.extend_from_slice(line);
            out.extend_from_slice(if had_cr { &b"\r\n"[..] } else { &b"\n"[..] });
        };
        if !self.started {
            // Empty lines before a request line are ignored (RFC 9112 section 2.2).
            if line.is_empty() {
                release(line, out);
                return;
            }
            if line.starts_with(b"PRI * HTTP/2.0") {
                release(line, out);
                self.state = State::Passive;
                return;
            }
            match head::request_line(line, &self.limits) {
                Ok(l) => {
                    self.started = true;
                    self.heads += 1;
                    self.head = HeadFacts {
                        line: l,
                        ..HeadFacts::default()
                    };
                    release(line, out);
                    if l.connect {
                        self.state = State::Passive;
                    }
                }
                Err(why) => self.refuse(why, log, out),
            }
            return;
        }
        if line.is_empty() {
            release(line, out);
            self.end_of_head();
            return;
        }
        match head::field_line(line, &mut self.head, &self.limits) {
            Ok(()) => release(line, out),
            Err(why) => self.refuse(why, log, out),
        }
    }

    pub(super) fn body_line(&mut self, line: &[u8]) {
        match self.state {
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
            State::Trailers if line.is_empty() => self.state = State::Head,
            _ => {}
        }
    }

    pub(super) fn end_of_head(&mut self) {
        let head = std::mem::take(&mut self.head);
        self.started = false;
        self.state = if head.upgrade {
            State::Passive
        } else if head.chunked {
            State::ChunkSize
        } else {
            match head.content_length {
                Some(0) | None => State::Head,
                Some(n) => State::Body(n),
            }
        };
    }
}
