//! How one attempt to send a request to a node failed, as the retry rule needs to know it
//! (SPEC section 4): nothing sent (connect failed, or the request handed back), or failed after
//! sending; and how such a failure reads in logs and 502 bodies. A leaf: [`super::upstream`]
//! (HTTP/1.1 pools) and [`super::h2`] (multiplexed connections) both return it.

use super::{BoxError, ProxyBody};
use crate::tls::client as tls;

/// Why an upstream attempt failed.
#[derive(Debug)]
pub enum SendError {
    /// TCP connect or handshake failed: nothing was sent; the request's body is handed back.
    Connect(std::io::Error, ProxyBody),
    /// The connection failed before the request was written; the request's body is handed back.
    NotSent(BoxError, ProxyBody),
    /// Failed after (part of) the request was written.
    Sent(BoxError),
    /// A reused pooled HTTP/1.1 connection failed after the request was written and before a
    /// response head arrived: the node closed it while it sat idle (CASE-21). Not a node fault;
    /// the request may be replayed on a new connection to the same node when it is idempotent.
    Stale(BoxError),
}

impl SendError {
    /// Text for logs and the 502 body.
    pub fn detail(&self) -> String {
        match self {
            SendError::Connect(e, _) => connect_detail(e),
            SendError::NotSent(e, _) => format!("connection closed before sending: {e}"),
            SendError::Sent(e) => describe(&**e),
            SendError::Stale(e) => {
                format!("pooled connection closed by the node: {}", describe(&**e))
            }
        }
    }
}

/// A failed connect for logs and the 502 body: a TLS handshake error as is (it names the alert or
/// the verification error, SPEC section 10), anything else as `connect: <error>`.
pub fn connect_detail(e: &std::io::Error) -> String {
    match tls::handshake_error(e) {
        Some(hs) => hs.to_string(),
        None => format!("connect: {e}"),
    }
}

/// An upstream error (h2's, or the HTTP/1.1 client's
/// [`super::http1::node_conn::NodeError`]) with its cause chain, for a precise 502 message.
pub fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// True if an h2 error says the node did not process the stream (GOAWAY above its last stream id,
/// or REFUSED_STREAM), so any request may be replayed (RFC 9113 section 8.7).
pub fn is_unprocessed(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut src = Some(e);
    while let Some(err) = src {
        if let Some(h2e) = err.downcast_ref::<h2::Error>() {
            return h2e.reason() == Some(h2::Reason::REFUSED_STREAM)
                || (h2e.is_go_away() && h2e.reason() == Some(h2::Reason::NO_ERROR));
        }
        src = err.source();
    }
    false
}

/// True if an h2 error is the node's RST_STREAM(REFUSED_STREAM) for this stream: nothing was
/// processed, and the node itself declined, so another node should take it (SPEC section 5).
pub fn is_refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut src = Some(e);
    while let Some(err) = src {
        if let Some(h2e) = err.downcast_ref::<h2::Error>() {
            return h2e.is_reset() && h2e.reason() == Some(h2::Reason::REFUSED_STREAM);
        }
        src = err.source();
    }
    false
}
