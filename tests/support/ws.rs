//! WebSocket client helpers shared by the scenarios (tokio-tungstenite over any stream: plain TCP,
//! TLS, or an RFC 8441 stream over HTTP/2).

use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{timeout_at, Instant};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// The next text message on `ws` within `t`, skipping control and binary frames. Panics when none
/// comes in time, the stream ends or fails, or a Close arrives (the socket must stay open).
pub async fn next_text<S>(ws: &mut WebSocketStream<S>, t: Duration) -> String
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let deadline = Instant::now() + t;
    loop {
        let m = timeout_at(deadline, ws.next())
            .await
            .expect("a text message in time")
            .expect("socket open")
            .expect("no socket error");
        match m {
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
