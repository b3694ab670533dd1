//! WebSocket client helpers shared by the scenarios (tokio-tungstenite over any stream: plain TCP,
//! TLS, or an RFC 8441 stream over HTTP/2).

use std::time::Duration;

use futures_util::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{timeout_at, Instant};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Request;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{Error, Message};
use tokio_tungstenite::WebSocketStream;

/// The next message on `ws` before `deadline`. Panics, naming `what`, when none comes in time, the
/// stream ends or fails.
pub async fn next_by<S>(ws: &mut S, deadline: Instant, what: &str) -> Message
where
    S: Stream<Item = Result<Message, Error>> + Unpin,
{
    timeout_at(deadline, ws.next())
        .await
        .unwrap_or_else(|_| panic!("{what} in time"))
        .unwrap_or_else(|| panic!("{what}: socket open"))
        .unwrap_or_else(|e| panic!("{what}: no socket error: {e}"))
}

/// A `ws://` handshake request for `/ws` on the gateway at `port` with `X-Conn-Id: id`.
pub fn conn_id_request(port: u16, id: &str) -> Request {
    let mut req = format!("ws://127.0.0.1:{port}/ws")
        .into_client_request()
        .expect("request");
    req.headers_mut()
        .insert("x-conn-id", HeaderValue::from_str(id).expect("value"));
    req
}

/// The next text message on `ws` within `t`, skipping control and binary frames. Panics when none
/// comes in time, the stream ends or fails, or a Close arrives (the socket must stay open).
pub async fn next_text<S>(ws: &mut WebSocketStream<S>, t: Duration) -> String
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let deadline = Instant::now() + t;
    loop {
        match next_by(ws, deadline, "a text message").await {
            Message::Text(s) => return s.to_string(),
            Message::Close(c) => panic!("the client saw a Close: {c:?}"),
            _ => {}
        }
    }
}

/// The payload length and header size of the server-to-client WebSocket frame at the start of
/// `b` (RFC 6455 section 5.2: 7-bit, 16-bit or 64-bit length), once its length field is complete;
/// `None` before. Panics if a 64-bit length does not fit in `usize`.
pub fn frame_len(b: &[u8]) -> Option<(usize, usize)> {
    match *b.get(1)? & 0x7f {
        126 if b.len() >= 4 => Some((usize::from(u16::from_be_bytes([b[2], b[3]])), 4)),
        127 if b.len() >= 10 => {
            let len = u64::from_be_bytes(b[2..10].try_into().expect("8 bytes"));
            Some((usize::try_from(len).expect("length fits"), 10))
        }
        n @ 0..=125 => Some((usize::from(n), 2)),
        _ => None,
    }
}
