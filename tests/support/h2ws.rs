//! A WebSocket over HTTP/2 test client (RFC 8441): an extended CONNECT with
//! `:protocol = websocket` on an h2 connection, and the stream's DATA frames as the socket's bytes,
//! wrapped into a tungstenite `WebSocketStream`.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::WebSocketStream;

/// One HTTP/2 stream as a byte stream.
pub struct H2Io {
    send: h2::SendStream<Bytes>,
    recv: h2::RecvStream,
    buf: Bytes,
}

impl AsyncRead for H2Io {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.buf.is_empty() {
                let n = self.buf.len().min(out.remaining());
                out.put_slice(&self.buf[..n]);
                self.buf.advance(n);
                return Poll::Ready(Ok(()));
            }
            match ready!(self.recv.poll_data(cx)) {
                None => return Poll::Ready(Ok(())),
                Some(Ok(d)) => {
                    let _ = self.recv.flow_control().release_capacity(d.len());
                    self.buf = d;
                }
                Some(Err(e)) => return Poll::Ready(Err(io::Error::other(e))),
            }
        }
    }
}

impl AsyncWrite for H2Io {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        self.send.reserve_capacity(data.len());
        loop {
            match ready!(self.send.poll_capacity(cx)) {
                None => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
                Some(Err(e)) => return Poll::Ready(Err(io::Error::other(e))),
                Some(Ok(0)) => continue,
                Some(Ok(n)) => {
                    let n = n.min(data.len());
                    self.send
                        .send_data(Bytes::copy_from_slice(&data[..n]), false)
                        .map_err(io::Error::other)?;
                    return Poll::Ready(Ok(n));
                }
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let _ = self.send.send_data(Bytes::new(), true);
        Poll::Ready(Ok(()))
    }
}

/// Opens a WebSocket at `path` with an extended CONNECT over the h2 connection on `io`; returns
/// the socket and the response head. Fails if the server does not enable the CONNECT protocol
/// (SETTINGS_ENABLE_CONNECT_PROTOCOL) within 5 s or answers other than 200.
pub async fn open<I>(
    io: I,
    authority: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> anyhow::Result<(WebSocketStream<H2Io>, http::response::Parts)>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut with_version = vec![("sec-websocket-version", "13")];
    with_version.extend_from_slice(headers);
    let (resp, send) = extended_connect(io, authority, path, "websocket", &with_version).await?;
    let resp = tokio::time::timeout(Duration::from_secs(10), resp).await??;
    let (parts, recv) = resp.into_parts();
    anyhow::ensure!(
        parts.status == 200,
        "extended CONNECT answered {}",
        parts.status
    );
    let io = H2Io {
        send,
        recv,
        buf: Bytes::new(),
    };
    Ok((
        WebSocketStream::from_raw_socket(io, Role::Client, None).await,
        parts,
    ))
}

/// Sends an extended CONNECT (RFC 8441 section 4) with `:protocol` `protocol` for `path` and
/// `headers` over a new h2 connection on `io`, the stream left open; returns the answer's future
/// and the stream's send half. Fails if the server does not enable the CONNECT protocol
/// (SETTINGS_ENABLE_CONNECT_PROTOCOL) within 5 s.
pub async fn extended_connect<I>(
    io: I,
    authority: &str,
    path: &str,
    protocol: &str,
    headers: &[(&str, &str)],
) -> anyhow::Result<(h2::client::ResponseFuture, h2::SendStream<Bytes>)>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (client, conn) = h2::client::handshake(io).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut client = client.ready().await?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !client.is_extended_connect_protocol_enabled() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "server did not enable the extended CONNECT protocol"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        client = client.ready().await?;
    }
    let mut b = http::Request::builder()
        .method(http::Method::CONNECT)
        .version(http::Version::HTTP_2)
        .uri(format!("https://{authority}{path}"))
        .extension(h2::ext::Protocol::from(protocol));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    Ok(client.send_request(b.body(())?, false)?)
}
