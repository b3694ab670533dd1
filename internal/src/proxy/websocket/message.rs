//! Message boundaries of one direction of a WebSocket (RFC 6455 section 5.4), for the message
//! size limit and for hops that never split a message (SPEC section 5, CASE-28).
//!
//! [`MessageSize`] adds up the fragments of the message in flight and says when it passes
//! `limits.websocket_max_message`. [`Partial`] keeps the frames of the client's unfinished message
//! that already went to the current node (as they were on the wire, shared `Bytes`), bounded; a hop
//! replays them to the new node before the rest, so the new node receives the message whole.
//! Control frames between fragments are neither counted nor kept. [`Held`] keeps the client
//! frames that arrive while no node takes them, and [`Carry`] groups what a socket carries from
//! one node to the next (with a counted hop's debts, [`OwedHop`]). Pure; spawns nothing.

use std::collections::VecDeque;

use tokio::time::Instant;

use super::frame::{Frame, Kind};
use crate::hopper::HopLine;

/// Bytes of an unfinished client message kept for replay on a hop; past it the message cannot
/// move and a hop mid-message becomes a reconnect hint (the same bound as frames held during a
/// re-dial, so one socket never keeps more than twice this).
const MAX_PARTIAL_BYTES: usize = 1 << 20;

/// The message in flight in one direction: its size so far and whether it is unfinished.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct MessageSize {
    len: u64,
    open: bool,
}

impl MessageSize {
    /// The message's size once a frame of kind `k` with `payload` bytes is added, if that passes
    /// `limit`; changes nothing. Lets a reader refuse a frame from its header alone.
    pub(super) fn check(&self, k: Kind, payload: u64, limit: u64) -> Result<(), u64> {
        let len = match k {
            Kind::Start { .. } => payload,
            Kind::Continue { .. } => self.len.saturating_add(payload),
            Kind::Ping | Kind::Pong | Kind::Close => return Ok(()),
        };
        if len > limit {
            return Err(len);
        }
        Ok(())
    }

    /// Accounts a frame of kind `k` with `payload` bytes; the message's size so far if it passed
    /// `limit` (nothing is accounted then).
    pub(super) fn add(&mut self, k: Kind, payload: u64, limit: u64) -> Result<(), u64> {
        self.check(k, payload, limit)?;
        match k {
            Kind::Start { fin } => (self.len, self.open) = (payload, !fin),
            Kind::Continue { fin } => {
                (self.len, self.open) = (self.len.saturating_add(payload), !fin);
            }
            Kind::Ping | Kind::Pong | Kind::Close => return Ok(()),
        }
        if !self.open {
            self.len = 0;
        }
        Ok(())
    }

    /// True between the first and the last fragment of a message.
    pub(super) fn open(&self) -> bool {
        self.open
    }
}

/// The client's unfinished message as sent to the current node; see the module docs.
#[derive(Debug, Default)]
pub(super) struct Partial {
    frames: Vec<Frame>,
    bytes: usize,
    /// The message outgrew [`MAX_PARTIAL_BYTES`]: it cannot be replayed.
    overflow: bool,
}

impl Partial {
    /// Records `f`, a client frame just written to the node.
    pub(super) fn sent(&mut self, f: &Frame) {
        match f.kind() {
            Kind::Start { fin: false } => {
                self.clear();
                self.keep(f);
            }
            Kind::Continue { fin: false } => self.keep(f),
            Kind::Start { fin: true } | Kind::Continue { fin: true } => self.clear(),
            Kind::Ping | Kind::Pong | Kind::Close => {}
        }
    }

    fn keep(&mut self, f: &Frame) {
        if self.overflow {
            return;
        }
        self.bytes += f.payload_len();
        if self.bytes > MAX_PARTIAL_BYTES {
            self.overflow = true;
            self.frames.clear();
        } else {
            self.frames.push(f.clone());
        }
    }

    fn clear(&mut self) {
        self.frames.clear();
        self.bytes = 0;
        self.overflow = false;
    }

    /// The frames to replay to a new node: `Some(frames)` (empty at a message boundary), or `None`
    /// when an unfinished message is too large to replay. Leaves this empty.
    pub(super) fn take(&mut self) -> Option<Vec<Frame>> {
        let overflow = self.overflow;
        let frames = std::mem::take(&mut self.frames);
        self.clear();
        (!overflow).then_some(frames)
    }
}

/// Client messages held while the node side is being replaced (SPEC section 5: bounded).
const MAX_HELD_FRAMES: usize = 1024;
/// Payload bytes held while the node side is being replaced.
const MAX_HELD_BYTES: usize = 1 << 20;

/// Client frames held while the node side is replaced, bounded by count and bytes.
#[derive(Debug, Default)]
pub(super) struct Held {
    pub(super) frames: VecDeque<Frame>,
    bytes: usize,
}

impl Held {
    /// Queues `frame`; false when that would pass a bound.
    pub(super) fn push(&mut self, frame: Frame) -> bool {
        let len = frame.payload_len();
        if self.frames.len() >= MAX_HELD_FRAMES || self.bytes + len > MAX_HELD_BYTES {
            return false;
        }
        self.bytes += len;
        self.frames.push_back(frame);
        true
    }

    /// Puts `frames` (already in order) before everything held; false when that would pass a
    /// bound.
    pub(super) fn prepend(&mut self, frames: Vec<Frame>) -> bool {
        let len: usize = frames.iter().map(Frame::payload_len).sum();
        if self.frames.len() + frames.len() > MAX_HELD_FRAMES || self.bytes + len > MAX_HELD_BYTES {
            return false;
        }
        self.bytes += len;
        for f in frames.into_iter().rev() {
            self.frames.push_front(f);
        }
        true
    }

    /// Takes every held frame, oldest first.
    pub(super) fn take(&mut self) -> VecDeque<Frame> {
        self.bytes = 0;
        std::mem::take(&mut self.frames)
    }
}

/// What a counted hop owes until the new node serves the socket (its first frame).
#[derive(Debug)]
pub(super) struct OwedHop {
    /// When the old node's failure was seen (hopping_latency_seconds runs from there).
    pub(super) seen: Instant,
    /// The hop's log line, written with the latency once served.
    pub(super) line: HopLine,
}

/// What the socket carries from one node to the next: the client frames held while no node
/// takes them, the client's unfinished message as the current node received it, and the debts
/// of a counted hop.
#[derive(Debug, Default)]
pub(super) struct Carry {
    /// Client frames that arrived after the node side was seen gone, for the next node.
    pub(super) held: Held,
    /// The client's unfinished message as the current node received it, for a hop.
    pub(super) partial: Partial,
    /// Set by a counted hop until the new node's first frame is relayed: its latency observation
    /// (hopping_latency_seconds) and its one log line are owed until then. Boxed: an idle socket
    /// pays 8 bytes for it.
    pub(super) owed: Option<Box<OwedHop>>,
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::super::frame::{Head, Kind};
    use super::*;

    fn data(first: bool, fin: bool, len: usize) -> Frame {
        let kind = if first {
            Kind::Start { fin }
        } else {
            Kind::Continue { fin }
        };
        let head = Head {
            kind,
            mask: None,
            len: 2,
            payload: len as u64,
        };
        Frame::new(head, Bytes::from(vec![b'a'; len + 2]))
    }

    #[test]
    fn sizes_add_up_over_fragments_and_reset_at_fin() {
        let mut m = MessageSize::default();
        assert_eq!(m.add(Kind::Start { fin: false }, 60, 100), Ok(()));
        assert!(m.open());
        assert_eq!(m.add(Kind::Ping, 4, 100), Ok(()));
        assert!(m.open(), "a ping between fragments leaves the message open");
        assert_eq!(m.add(Kind::Continue { fin: true }, 40, 100), Ok(()));
        assert!(!m.open());
        assert_eq!(m.add(Kind::Start { fin: false }, 60, 100), Ok(()));
        assert_eq!(m.check(Kind::Continue { fin: false }, 41, 100), Err(101));
        assert_eq!(m.add(Kind::Continue { fin: false }, 41, 100), Err(101));
        assert_eq!(
            m.add(Kind::Continue { fin: true }, 40, 100),
            Ok(()),
            "a refused frame is not accounted"
        );
    }

    #[test]
    fn partial_keeps_the_sent_fragments_of_the_open_message() {
        let mut p = Partial::default();
        p.sent(&data(true, true, 5));
        assert_eq!(p.take().map(|f| f.len()), Some(0));
        p.sent(&data(true, false, 5));
        p.sent(&data(false, false, 5));
        assert_eq!(p.take().map(|f| f.len()), Some(2));
        p.sent(&data(true, false, MAX_PARTIAL_BYTES));
        p.sent(&data(false, false, 1));
        assert!(p.take().is_none(), "too large to replay");
        assert_eq!(p.take().map(|f| f.len()), Some(0));
    }
}
