//! HTTP/2 frame accounting for abuse limits (SPEC section 4; RFC 9113 sections 4.1, 10.5;
//! CASE-25, CASE-26): a byte-stream [`FrameScanner`] that finds frame heads without buffering
//! payloads, and a [`Meter`] that charges what a client causes against per-second budgets.
//!
//! Counted per connection, as rates with bursts (token buckets), never as lifetime counters:
//! - resets: every RST_STREAM the client sends, and every RST_STREAM the gateway sends for a
//!   reason other than NO_ERROR or CANCEL (a reset the client provoked: WINDOW_UPDATE 0, DATA on a
//!   closed stream, "MadeYouReset", CVE-2025-8671), and WINDOW_UPDATE(0) on a stream as soon as
//!   it is read (it provokes such a reset); one charge per stream at most, and none on a stream
//!   the gateway itself reset with NO_ERROR or CANCEL (an early answer: the client's DATA in
//!   flight draws STREAM_CLOSED once h2 has forgotten the stream, CASE-25 D);
//! - control frames: PING and SETTINGS (not ACKs), PRIORITY, and empty DATA/HEADERS/CONTINUATION
//!   frames that end nothing (the 2019 "ping/settings/empty frames" floods, CVE-2019-9512/9515/9518);
//! - the time a header block stays open (HEADERS without END_HEADERS, then CONTINUATIONs): it must
//!   end within the header read timeout however slowly frames trickle in (CASE-26 D).
//!
//! Pure and allocation-free: the IO wrapper in [`super::watch`] feeds it bytes as they pass.

use std::time::Duration;

use tokio::time::Instant;

/// Frame types (RFC 9113 section 6).
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
/// Flags (RFC 9113 section 6).
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
/// Error codes (RFC 9113 section 7).
const NO_ERROR: u32 = 0x0;
const CANCEL: u32 = 0x8;
/// ENHANCE_YOUR_CALM: the code of the GOAWAY the gateway sends for abuse.
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// Control frames per second a connection may send, with bursts of the same size. Honest
/// clients send a handful (a PING per keepalive interval, SETTINGS at start); Envoy's default
/// cap on queued outbound control frames is the same 1,000.
pub const MAX_CONTROL_FRAMES_PER_SECOND: u32 = 1000;

/// Stream ids remembered as settled, so one stream costs at most one reset charge (a client's
/// CANCEL and the STREAM_CLOSED its late DATA draws are one event), and a stream the gateway
/// closed itself costs none. hyper's h2 server remembers at most 50 streams it reset, for 1 s
/// (h2 0.4 `DEFAULT_RESET_STREAM_MAX`/`_SECS`, not settable through hyper), and ignores the
/// DATA that arrives on them; DATA on one it has forgotten draws RST_STREAM(STREAM_CLOSED), so
/// this ring must hold more than those 50.
const SETTLED_STREAMS: usize = 64;

/// One frame head (RFC 9113 section 4.1) and, for RST_STREAM and WINDOW_UPDATE, the 32-bit word
/// that starts its payload (error code / increment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Payload length in bytes.
    pub len: u32,
    /// Frame type.
    pub kind: u8,
    /// Flags.
    pub flags: u8,
    /// Stream id (reserved bit cleared).
    pub stream: u32,
    /// First payload word of RST_STREAM / WINDOW_UPDATE (`None` if shorter than 4 bytes).
    pub word: Option<u32>,
}

/// Finds frame heads in a byte stream fed in arbitrary pieces; payloads are skipped, never kept.
#[derive(Debug, Default, Clone)]
pub struct FrameScanner {
    head: [u8; 9],
    head_len: usize,
    /// Payload bytes of the current frame not yet seen.
    remaining: u32,
    /// Frame waiting for its first payload word.
    pending: Option<Frame>,
    word: [u8; 4],
    word_len: usize,
}

impl FrameScanner {
    /// True if the stream sits between two frames (nothing of a frame seen but not finished).
    pub fn at_boundary(&self) -> bool {
        self.head_len == 0 && self.remaining == 0 && self.pending.is_none()
    }

    /// Bytes left in the current frame (its head and payload), or 0 at a boundary.
    pub fn left_in_frame(&self) -> usize {
        if self.head_len > 0 {
            9 - self.head_len
        } else {
            self.remaining as usize
        }
    }

    /// Feeds `bytes`, calling `on_frame` for each frame as soon as its head (and, where it has
    /// one, its first payload word) has been seen. Stops early, returning the error, when
    /// `on_frame` does.
    ///
    /// # Errors
    /// Whatever `on_frame` returns.
    pub fn feed<E>(
        &mut self,
        mut bytes: &[u8],
        mut on_frame: impl FnMut(Frame) -> Result<(), E>,
    ) -> Result<(), E> {
        while !bytes.is_empty() {
            if self.remaining == 0 && self.pending.is_none() {
                let take = (9 - self.head_len).min(bytes.len());
                self.head[self.head_len..self.head_len + take].copy_from_slice(&bytes[..take]);
                self.head_len += take;
                bytes = &bytes[take..];
                if self.head_len < 9 {
                    return Ok(());
                }
                self.head_len = 0;
                let h = self.head;
                let f = Frame {
                    len: u32::from_be_bytes([0, h[0], h[1], h[2]]),
                    kind: h[3],
                    flags: h[4],
                    stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
                    word: None,
                };
                self.remaining = f.len;
                if matches!(f.kind, RST_STREAM | WINDOW_UPDATE) && f.len >= 4 {
                    self.pending = Some(f);
                    self.word_len = 0;
                } else {
                    on_frame(f)?;
                }
                continue;
            }
            if let Some(mut f) = self.pending {
                let take = (4 - self.word_len).min(bytes.len());
                self.word[self.word_len..self.word_len + take].copy_from_slice(&bytes[..take]);
                self.word_len += take;
                self.remaining -= take as u32;
                bytes = &bytes[take..];
                if self.word_len == 4 {
                    self.pending = None;
                    f.word = Some(u32::from_be_bytes(self.word));
                    on_frame(f)?;
                }
                continue;
            }
            let take = (self.remaining as usize).min(bytes.len());
            self.remaining -= take as u32;
            bytes = &bytes[take..];
        }
        Ok(())
    }
}

/// Which limit a connection broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abuse {
    /// More stream resets than `h2_max_resets_per_second` allows.
    Resets,
    /// More control or empty frames than [`MAX_CONTROL_FRAMES_PER_SECOND`] allows.
    ControlFrames,
    /// A header block stayed open past the header read timeout.
    HeaderBlockTimeout,
}

impl Abuse {
    /// The GOAWAY debug data and metric/log reason.
    pub fn reason(self) -> &'static str {
        match self {
            Abuse::Resets => "too_many_resets",
            Abuse::ControlFrames => "too_many_control_frames",
            Abuse::HeaderBlockTimeout => "header_block_timeout",
        }
    }
}

/// A token bucket: `rate` tokens per second, at most `rate` stored (the burst).
#[derive(Debug, Clone)]
struct Bucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new(rate: u32, now: Instant) -> Self {
        let rate = f64::from(rate.max(1));
        Bucket {
            rate,
            tokens: rate,
            last: now,
        }
    }

    /// Takes one token; false if none is left.
    fn take(&mut self, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.rate);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The abuse budgets of one connection; see the module docs.
#[derive(Debug, Clone)]
pub struct Meter {
    resets: Bucket,
    control: Bucket,
    /// Streams charged once, or reset by the gateway with NO_ERROR / CANCEL: charged no more.
    settled: [u32; SETTLED_STREAMS],
    next_settled: usize,
    /// Highest stream id the client opened (for GOAWAY's last-stream-id).
    last_client_stream: u32,
    block_open_since: Option<Instant>,
    header_timeout: Duration,
}

impl Meter {
    /// A fresh meter: `resets_per_second` (burst of the same size), the control-frame budget of
    /// [`MAX_CONTROL_FRAMES_PER_SECOND`], header blocks bounded by `header_timeout`.
    pub fn new(resets_per_second: u32, header_timeout: Duration, now: Instant) -> Self {
        Meter {
            resets: Bucket::new(resets_per_second, now),
            control: Bucket::new(MAX_CONTROL_FRAMES_PER_SECOND, now),
            settled: [0; SETTLED_STREAMS],
            next_settled: 0,
            last_client_stream: 0,
            block_open_since: None,
            header_timeout,
        }
    }

    /// Highest stream id the client opened so far.
    pub fn last_client_stream(&self) -> u32 {
        self.last_client_stream
    }

    /// When the open header block (if any) must have ended.
    pub fn header_deadline(&self) -> Option<Instant> {
        self.block_open_since.map(|t| t + self.header_timeout)
    }

    /// True if `stream` is settled already; else settles it and returns false.
    fn settle(&mut self, stream: u32) -> bool {
        if stream != 0 && self.settled.contains(&stream) {
            return true;
        }
        self.settled[self.next_settled] = stream;
        self.next_settled = (self.next_settled + 1) % SETTLED_STREAMS;
        false
    }

    fn charge_reset(&mut self, stream: u32, now: Instant) -> Result<(), Abuse> {
        if self.settle(stream) {
            return Ok(());
        }
        if self.resets.take(now) {
            Ok(())
        } else {
            Err(Abuse::Resets)
        }
    }

    fn charge_control(&mut self, now: Instant) -> Result<(), Abuse> {
        if self.control.take(now) {
            Ok(())
        } else {
            Err(Abuse::ControlFrames)
        }
    }

    /// Accounts a frame the client sent.
    ///
    /// # Errors
    /// The [`Abuse`] this frame completes.
    pub fn client_frame(&mut self, f: Frame, now: Instant) -> Result<(), Abuse> {
        if let Some(deadline) = self.header_deadline() {
            if now >= deadline {
                return Err(Abuse::HeaderBlockTimeout);
            }
        }
        match f.kind {
            RST_STREAM => self.charge_reset(f.stream, now),
            // Increment 0 on a stream draws a stream error (RFC 9113 section 6.9): charged when
            // read, so a flood of them is cut before hyper sees the chunk that breaks the budget.
            WINDOW_UPDATE if f.stream != 0 && f.word.is_some_and(|w| w & 0x7fff_ffff == 0) => {
                self.charge_reset(f.stream, now)
            }
            PING | SETTINGS if f.flags & ACK == 0 => self.charge_control(now),
            PRIORITY => self.charge_control(now),
            DATA if f.len == 0 && f.flags & END_STREAM == 0 => self.charge_control(now),
            HEADERS | CONTINUATION => {
                if f.kind == HEADERS && f.stream % 2 == 1 {
                    self.last_client_stream = self.last_client_stream.max(f.stream);
                }
                if f.flags & END_HEADERS != 0 {
                    self.block_open_since = None;
                } else if self.block_open_since.is_none() {
                    self.block_open_since = Some(now);
                }
                if f.len == 0 && f.flags & (END_HEADERS | END_STREAM) == 0 {
                    self.charge_control(now)
                } else {
                    Ok(())
                }
            }
            _ => Ok(()),
        }
    }

    /// Accounts a frame the gateway sent to the client. A reset with NO_ERROR or CANCEL is the
    /// gateway's own doing (an answer that ended before the request body did, RFC 9113 section
    /// 8.1, or a stream it dropped): it settles the stream, so the STREAM_CLOSED resets that the
    /// client's DATA already in flight on it draws later are not charged (CASE-25 D).
    ///
    /// # Errors
    /// [`Abuse::Resets`] when the client has provoked more resets than its budget allows.
    pub fn gateway_frame(&mut self, f: Frame, now: Instant) -> Result<(), Abuse> {
        match (f.kind, f.word) {
            (RST_STREAM, Some(NO_ERROR | CANCEL)) => {
                self.settle(f.stream);
                Ok(())
            }
            (RST_STREAM, Some(_)) => self.charge_reset(f.stream, now),
            _ => Ok(()),
        }
    }
}

/// The bytes of a GOAWAY frame (RFC 9113 section 6.8) with `last_stream`, `code` and `debug`.
pub fn goaway(last_stream: u32, code: u32, debug: &[u8]) -> Vec<u8> {
    let len = 8 + debug.len();
    let mut out = Vec::with_capacity(9 + len);
    out.extend_from_slice(&u32::to_be_bytes(len as u32)[1..]);
    out.extend_from_slice(&[GOAWAY, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&(last_stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(debug);
    out
}

#[cfg(test)]
#[path = "frames_tests.rs"]
pub(crate) mod tests;
