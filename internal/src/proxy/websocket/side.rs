//! The node side of a relayed WebSocket ([`NodeSide`]): its frames, the node and its signal, the
//! in-flight count held on it, and the `permessage-deflate` translation its parameters need
//! ([`super::deflate`]). Part of [`super::relay::Relay`]'s state; spawns nothing.

use std::borrow::Cow;
use std::sync::Arc;

use tokio::sync::watch;

use super::deflate::Translate;
use super::frame::{Frame, FrameError, Peer};
use super::io::FrameIo;
use super::Stream;
use crate::registry::{InflightGuard, Node, NodeSignal};

/// The node side: its frames, the node and its signal, and the in-flight count held on it.
#[derive(Debug)]
pub(super) struct NodeSide {
    pub(super) io: FrameIo<Stream>,
    pub(super) node: Arc<Node>,
    pub(super) signal: watch::Receiver<NodeSignal>,
    /// A second receiver of the node's signal, looked at (one atomic load) on each wake-up of
    /// the resting wait to learn whether `signal`'s armed `changed()` may be ready: that future
    /// holds `signal`, so `signal` itself cannot be asked ([`super::relay::Relay::next_event`]).
    pub(super) peek: watch::Receiver<NodeSignal>,
    pub(super) _inflight: InflightGuard,
    /// True once a Close went to the node on this side.
    pub(super) close_sent: bool,
    /// The inflaters this node's `permessage-deflate` parameters need ([`super::deflate`]);
    /// `None` (the usual case) when its frames pass as they are. A side with one is relayed frame
    /// by frame, never by the pump.
    pub(super) translate: Option<Box<Translate>>,
}

impl NodeSide {
    /// A side to `node` over the upgraded stream `io`, translating `permessage-deflate` messages
    /// as `translate` says.
    pub(super) fn new(
        node: Arc<Node>,
        io: Stream,
        inflight: InflightGuard,
        translate: Option<Box<Translate>>,
    ) -> Self {
        let mut signal = node.runtime.subscribe();
        // Look at the current state once: the node may have drained before the 101 went out.
        signal.mark_changed();
        NodeSide {
            io: FrameIo::new(io, Peer::Node),
            node,
            peek: signal.clone(),
            signal,
            _inflight: inflight,
            close_sent: false,
            translate,
        }
    }

    /// The frame `f` as it goes `to` its peer through this side: itself, or inflated
    /// ([`Translate::frame`]: a client frame to [`Peer::Node`], a node frame to [`Peer::Client`]);
    /// `limit` is `limits.websocket_max_message`, bytes.
    ///
    /// # Errors
    /// [`FrameError::TooBig`] past `limit`, [`FrameError::Protocol`] for data that does not inflate.
    pub(super) fn translated<'a>(
        &mut self,
        f: &'a Frame,
        to: Peer,
        limit: u64,
    ) -> Result<Cow<'a, Frame>, FrameError> {
        Ok(match self.translate.as_mut() {
            Some(t) => t.frame(f, to, limit)?.map_or(Cow::Borrowed(f), Cow::Owned),
            None => Cow::Borrowed(f),
        })
    }
}
