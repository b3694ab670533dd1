//! Header rewriting between downstream and upstream: hop-by-hop removal (RFC 9110 section 7.6.1,
//! including every header named in `Connection`), `X-Forwarded-*` (SPEC section 4), `TE` (only
//! `trailers` survives, RFC 9110 section 10.1.4), and the WebSocket upgrade pair.
//!
//! "Hop-by-hop" is the RFC's term and unrelated to hops between nodes.

use std::net::{IpAddr, SocketAddr};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// True if any `Connection` line lists `token` (case-insensitive, comma-separated).
pub(crate) fn connection_has(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// True for a WebSocket upgrade request (RFC 6455 section 4.1): `Connection` containing `upgrade`
/// in any case and position, and `Upgrade: websocket` in any case.
pub(crate) fn is_websocket_upgrade(headers: &HeaderMap) -> bool {
    connection_has(headers, "upgrade")
        && headers
            .get_all(header::UPGRADE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("websocket"))
}

/// True if a `101` answer whose `Upgrade` values are `upgrade` and `Connection` values are
/// `connection` switches to WebSocket and to nothing else: `Connection` names `upgrade`, and
/// `Upgrade` is not empty and every protocol in it is `websocket` in any case. A handshake offers
/// `websocket` alone, and a server switches only to a protocol the client offered (RFC 9110
/// section 7.8; RFC 6455 section 4.1 fails any other answer); SPEC section 4 turns any other
/// `101` into a failed attempt.
pub(crate) fn switches_to_websocket<'a>(
    upgrade: impl IntoIterator<Item = &'a [u8]>,
    connection: impl IntoIterator<Item = &'a [u8]>,
) -> bool {
    let mut protocols = tokens(upgrade).peekable();
    protocols.peek().is_some()
        && protocols.all(|t| t.eq_ignore_ascii_case(b"websocket"))
        && tokens(connection).any(|t| t.eq_ignore_ascii_case(b"upgrade"))
}

/// The comma-separated, trimmed, non-empty tokens of field `values` (RFC 9110 section 5.6.1).
fn tokens<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> impl Iterator<Item = &'a [u8]> {
    values
        .into_iter()
        .flat_map(|v| v.split(|b| *b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
}

/// `HTTP2-Settings`: only meaningful with an h2c upgrade, which is never forwarded (CASE-10).
const HTTP2_SETTINGS: HeaderName = HeaderName::from_static("http2-settings");
pub(crate) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub(crate) const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub(crate) const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Every name [`strip_hop_by_hop`] removes (or, for `TE`, rewrites) without looking at
/// `Connection`: the always-hop-by-hop headers (RFC 9110 section 7.6.1, RFC 7230 section 6.1, and
/// the de-facto `Proxy-Connection`, `Keep-Alive`), `TE`, and `HTTP2-Settings`. `Connection` first.
static STRIPPED: [HeaderName; 10] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::TE,
    HTTP2_SETTINGS,
];

/// The index of `name` (lower case, as `HeaderName` stores it) in [`STRIPPED`]: a string match
/// the compiler turns into a length switch, cheaper than comparing against each entry.
pub(crate) fn stripped_index(name: &[u8]) -> Option<usize> {
    Some(match name {
        b"connection" => 0,
        b"keep-alive" => 1,
        b"proxy-connection" => 2,
        b"proxy-authenticate" => 3,
        b"proxy-authorization" => 4,
        b"trailer" => 5,
        b"transfer-encoding" => 6,
        b"upgrade" => 7,
        b"te" => 8,
        b"http2-settings" => 9,
        _ => return None,
    })
}

/// The forwarding fields: every name [`set_forwarded`] rewrites, or drops for an untrusted peer
/// (CASE-11). `X-Forwarded-For` first.
static FORWARDING: [HeaderName; 7] = [
    X_FORWARDED_FOR,
    X_FORWARDED_PROTO,
    X_FORWARDED_HOST,
    HeaderName::from_static("x-forwarded-port"),
    HeaderName::from_static("x-forwarded-prefix"),
    header::FORWARDED,
    HeaderName::from_static("x-real-ip"),
];

/// True for a name in [`FORWARDING`] (`name` in lower case, as `HeaderName` stores it): a
/// string match the compiler turns into a length switch, as [`stripped_index`].
fn is_forwarding(name: &[u8]) -> bool {
    matches!(
        name,
        b"x-forwarded-for"
            | b"x-forwarded-proto"
            | b"x-forwarded-host"
            | b"x-forwarded-port"
            | b"x-forwarded-prefix"
            | b"forwarded"
            | b"x-real-ip"
    )
}

/// What [`strip_hop_by_hop`]'s pass over the names saw besides the hop-by-hop ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    /// A forwarding field ([`set_forwarded`]'s names) was present before the strip: only then
    /// does the node's map need [`set_forwarded`]; without one, the gateway's own three fields
    /// are all there is ([`super::upstream::request::ForwardedFields`]).
    pub(crate) forwarding: bool,
}

/// Removes hop-by-hop headers, and every header named in `Connection`, from `headers`.
/// `TE` keeps only `trailers` when it was offered (CASE-08); `Expect` is left to the caller.
/// Returns what else the pass over the names saw ([`Seen`]).
///
/// One pass over the names finds which of [`STRIPPED`] are present (a bit each), so a message
/// without hop-by-hop headers costs no hashing and no allocation.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) -> Seen {
    let mut present: u16 = 0;
    let mut seen = Seen { forwarding: false };
    for name in headers.keys() {
        let name = name.as_str().as_bytes();
        if let Some(i) = stripped_index(name) {
            present |= 1 << i;
        } else if is_forwarding(name) {
            seen.forwarding = true;
        }
    }
    if present == 0 {
        return seen;
    }
    let te_at = stripped_index(b"te").unwrap_or(0);
    if present == 1 << te_at && is_lone_te_trailers(headers) {
        // A lone `TE: trailers` (every gRPC call) is what would be kept: removing and adding it
        // back costs more than the rest of the strip.
        return seen;
    }
    // Read TE first: a compliant client lists it in `Connection` (RFC 9110 section 10.1.4), which
    // would otherwise remove it before `trailers` is kept (CASE-08).
    let te_trailers = present & (1 << te_at) != 0
        && headers
            .get_all(header::TE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| {
                t.split(';')
                    .next()
                    .is_some_and(|c| c.trim().eq_ignore_ascii_case("trailers"))
            });
    if present & 1 != 0 {
        // The names `Connection` nominates; `keep-alive` and `close` name no header that
        // survives anyway, so the usual `Connection: keep-alive` collects nothing.
        let mut named: Vec<HeaderName> = Vec::new();
        for v in headers.get_all(header::CONNECTION) {
            for t in v.as_bytes().split(|b| *b == b',') {
                let t = trim(t);
                if t.is_empty()
                    || t.eq_ignore_ascii_case(b"keep-alive")
                    || t.eq_ignore_ascii_case(b"close")
                {
                    continue;
                }
                if let Ok(name) = HeaderName::from_bytes(t) {
                    named.push(name);
                }
            }
        }
        for name in named {
            headers.remove(name);
        }
    }
    for (i, name) in STRIPPED.iter().enumerate() {
        if present & (1 << i) != 0 {
            headers.remove(name);
        }
    }
    if te_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
    seen
}

/// True if `headers` has exactly one `TE` field, whose value is `trailers` (ASCII case-insensitive,
/// RFC 9110 section 10.1.4: the token is case-insensitive).
fn is_lone_te_trailers(headers: &HeaderMap) -> bool {
    let mut te = headers.get_all(header::TE).iter();
    matches!(
        (te.next(), te.next()),
        (Some(v), None) if v.as_bytes().eq_ignore_ascii_case(b"trailers")
    )
}

/// Sets `Connection: Upgrade` and `Upgrade: websocket` for a forwarded WebSocket handshake.
pub(crate) fn set_websocket_upgrade(headers: &mut HeaderMap) {
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
}

/// Rewrites `X-Forwarded-*` for a request from `peer` (SPEC section 4, CASE-11).
///
/// With `trusted = None` (Go-compatible), every incoming `X-Forwarded-For` line is kept, joined into
/// one line and the peer appended. With trusted ranges, a peer outside them has every incoming
/// `X-Forwarded-*`, `Forwarded` and `X-Real-IP` dropped and replaced; a peer inside keeps them.
/// `X-Forwarded-Proto` and `X-Forwarded-Host` are set by the gateway in every case.
pub(crate) fn set_forwarded(
    headers: &mut HeaderMap,
    peer: &Peer,
    host: Option<&HeaderValue>,
    trusted: Option<&[ipnet::IpNet]>,
) {
    let keep = match trusted {
        None => true,
        Some(ranges) => ranges.iter().any(|n| n.contains(&peer.ip)),
    };
    if keep && !headers.contains_key(&X_FORWARDED_FOR) {
        // The common first hop: the peer alone, formatted once per connection.
        headers.insert(X_FORWARDED_FOR, peer.text.clone());
    } else {
        append_forwarded_for(headers, peer, keep);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
    match host {
        Some(h) => {
            headers.insert(X_FORWARDED_HOST, h.clone());
        }
        None => {
            headers.remove(X_FORWARDED_HOST);
        }
    }
}

/// A downstream peer as `X-Forwarded-For` names it: its IP (IPv4-mapped IPv6 shown as IPv4) and
/// that IP as a header value, made once per connection.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The canonical IP.
    pub ip: IpAddr,
    /// `ip` as text.
    pub text: HeaderValue,
}

impl Peer {
    /// The peer of a connection from `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        let ip = canonical_ip(addr.ip());
        let text = HeaderValue::from_maybe_shared(bytes::Bytes::from(ip.to_string()))
            .expect("an IP address is a valid header value");
        Peer { ip, text }
    }
}

/// `X-Forwarded-For` as one line: the prior hops when `keep`, then the peer; with `keep` false
/// every incoming forwarding header is dropped (untrusted peer, CASE-11).
fn append_forwarded_for(headers: &mut HeaderMap, peer: &Peer, keep: bool) {
    // One line: the prior hops (kept when trusted), then the peer. Written into one buffer.
    let mut value = String::new();
    if keep {
        for prior in headers
            .get_all(&X_FORWARDED_FOR)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            value.push_str(prior);
            value.push_str(", ");
        }
    } else {
        // `X-Forwarded-For` itself is replaced below.
        for name in &FORWARDING[1..] {
            headers.remove(name);
        }
    }
    value.push_str(peer.text.to_str().unwrap_or_default());
    // `insert` replaces every earlier line of the name.
    if let Ok(v) = HeaderValue::from_maybe_shared(bytes::Bytes::from(value)) {
        headers.insert(X_FORWARDED_FOR, v);
    }
}

/// IPv4-mapped IPv6 addresses shown as IPv4.
fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// True if `req` opens a WebSocket over HTTP/2: an extended CONNECT with `:protocol = websocket`
/// (RFC 8441 section 4), which hyper accepts when the listener enables the CONNECT protocol.
pub(crate) fn is_extended_connect<B>(req: &http::Request<B>) -> bool {
    req.version() == http::Version::HTTP_2
        && req.method() == http::Method::CONNECT
        && req
            .extensions()
            .get::<hyper::ext::Protocol>()
            .is_some_and(|p| p.as_str().eq_ignore_ascii_case("websocket"))
}

/// `v` without leading and trailing SP/HTAB (optional whitespace, RFC 9110 section 5.6.3).
pub(crate) fn trim(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|b| *b != b' ' && *b != b'\t')
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| *b != b' ' && *b != b'\t')
        .map_or(start, |e| e + 1);
    &v[start..end.max(start)]
}

#[cfg(test)]
#[path = "headers_tests.rs"]
mod tests;
