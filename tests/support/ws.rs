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
