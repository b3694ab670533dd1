//! `GET /admin/events` (SPEC section 11): the event feed as `text/event-stream`.
//!
//! Each subscriber gets one forwarding task that moves events from the hub's broadcast channel
//! into a channel of [`SUBSCRIBER_QUEUE`] messages, which the response body drains. A reader that
//! stops reading fills that queue (hyper stops polling the body once the socket buffers are full);
//! the task then drops the subscription, and the body ends after what was queued, with a comment
//! saying why. So a slow reader costs at most the queue plus the hub's shared ring, never more.
//! A comment line every [`KEEPALIVE`] keeps idle streams open through proxies and notices a
//! reader that went away.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::StreamBody;
use hyper::body::Frame;
use tokio::sync::{broadcast, mpsc};

use crate::events::Events;

/// Messages queued per subscriber before it counts as too slow and is dropped.
pub(crate) const SUBSCRIBER_QUEUE: usize = 64;
/// Interval of the keep-alive comment on an idle stream.
pub(crate) const KEEPALIVE: Duration = Duration::from_secs(15);

type Chunk = Result<Frame<Bytes>, Infallible>;

/// The streaming body of one subscriber: a comment at once (so the reader knows it is
/// subscribed), then every event as it happens. Must run inside the tokio runtime.
pub(crate) fn subscribe(
    events: &Events,
) -> StreamBody<futures_util::stream::BoxStream<'static, Chunk>> {
    let rx = events.subscribe();
    let (tx, out) = mpsc::channel::<Bytes>(SUBSCRIBER_QUEUE);
    // Ends on its own: when the reader goes (the body and its receiver drop) or falls behind.
    tokio::spawn(forward(rx, tx));
    let first = futures_util::stream::once(async { Bytes::from_static(b": subscribed\n\n") });
    let rest =
        futures_util::stream::unfold(
            out,
            |mut out| async move { out.recv().await.map(|b| (b, out)) },
        );
    use futures_util::StreamExt;
    StreamBody::new(first.chain(rest).map(|b| Ok(Frame::data(b))).boxed())
}

async fn forward(mut rx: broadcast::Receiver<Arc<crate::events::Event>>, tx: mpsc::Sender<Bytes>) {
    let mut keepalive = tokio::time::interval(KEEPALIVE);
    keepalive.tick().await;
    loop {
        let msg = tokio::select! {
            _ = tx.closed() => return,
            _ = keepalive.tick() => Bytes::from_static(b": keepalive\n\n"),
            r = rx.recv() => match r {
                Ok(ev) => Bytes::from(ev.to_sse()),
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::info!(missed = n, "event subscriber too slow; dropped");
                    // Best effort: the queue may be full; the stream ends either way.
                    let _ = tx.try_send(Bytes::from(format!(": dropped: {n} events behind\n\n")));
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
        };
        match tx.try_send(msg) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::info!(
                    queued = SUBSCRIBER_QUEUE,
                    "event subscriber stopped reading; dropped"
                );
                return;
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return,
        }
    }
}
