//! Phase 2, identify: the request's conn id (SPEC section 5) — the client's affinity header,
//! validated once, or one the gateway issues for a WebSocket or an HTTP/2 connection.

use http::HeaderMap;

use super::context::Kind;
use super::error::ProxyError;
use super::types::{DownstreamConn, Proxy};
use crate::hopper::ConnId;

/// A request's conn id and where it came from.
#[derive(Debug, Default)]
pub(crate) struct Identity {
    /// The id, if the request has one.
    pub conn_id: Option<ConnId>,
    /// True if the gateway issued it (it is returned to the client and sent to the node).
    pub issued: bool,
}

/// The conn id of a request with `headers`, of `kind`, over HTTP/2 when `h2`, on `dc`: the
/// client's (validated, SPEC section 5 rules), else a fresh one for each WebSocket (also over
/// HTTP/2, RFC 8441), else the HTTP/2 connection's own (issued once per connection), else none.
///
/// # Errors
/// [`ProxyError::BadConnId`] when the client's id breaks a rule (400).
pub(crate) fn identify(
    p: &Proxy,
    headers: &HeaderMap,
    kind: Kind,
    h2: bool,
    dc: &DownstreamConn,
) -> Result<Identity, ProxyError> {
    let header = &p.settings.affinity_header;
    Ok(match headers.get(header) {
        Some(v) => {
            let id = p
                .ids
                .parse(v.as_bytes())
                .map_err(|source| ProxyError::BadConnId {
                    header: header.to_string(),
                    source,
                })?;
            Identity {
                conn_id: Some(id),
                issued: false,
            }
        }
        None if kind == Kind::WebSocket => Identity {
            conn_id: Some(p.ids.issue()),
            issued: true,
        },
        None if h2 => Identity {
            conn_id: Some(dc.conn_id.get_or_init(|| p.ids.issue()).clone()),
            issued: true,
        },
        None => Identity::default(),
    })
}
