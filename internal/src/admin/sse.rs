//! `GET /admin/events` (SPEC section 11): the event feed as `text/event-stream`.
//!
//! The response body reads the subscriber's queue in the hub ([`crate::events::feed`]) directly:
//! no task and no second queue per subscriber. A reader that stops reading stops hyper polling
//! the body once the socket buffers are full; its queue then grows until the feed's byte or lag
//! bound drops it, and the body ends with a comment saying why. A comment line every
//! [`KEEPALIVE`] keeps idle streams open through proxies and notices a reader that went away
//! (the body, and with it the subscription, is dropped when the connection ends).

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::StreamBody;
use hyper::body::Frame;

use crate::events::feed::{Next, Subscription};
use crate::events::Events;

/// Interval of the keep-alive comment on an idle stream.
pub(crate) const KEEPALIVE: Duration = Duration::from_secs(15);

type Chunk = Result<Frame<Bytes>, Infallible>;

/// The streaming body of one subscriber: a comment at once (so the reader knows it is
/// subscribed), then every event as it happens, each one SSE message; ends after the comment
/// that says the subscriber was dropped. Must run inside the tokio runtime.
pub(crate) fn subscribe(
    events: &Events,
) -> StreamBody<futures_util::stream::BoxStream<'static, Chunk>> {
    let sub = events.subscribe();
    let first = futures_util::stream::once(async { Bytes::from_static(b": subscribed\n\n") });
    let rest = futures_util::stream::unfold(Some(sub), next_chunk);
    StreamBody::new(first.chain(rest).map(|b| Ok(Frame::data(b))).boxed())
}

/// The next chunk of the stream of `sub`, `None` once the subscriber was dropped and told so.
async fn next_chunk(sub: Option<Subscription>) -> Option<(Bytes, Option<Subscription>)> {
    let mut sub = sub?;
    match sub.next(KEEPALIVE).await {
        Next::Message(msg) => Some((msg, Some(sub))),
        Next::Idle => Some((Bytes::from_static(b": keepalive\n\n"), Some(sub))),
        Next::Dropped(why) => Some((why.comment(), None)),
    }
}
