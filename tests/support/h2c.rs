//! An HTTP/2 prior-knowledge (h2c) test client over one TCP connection (hyper's low-level
//! `client::conn::http2`), with frame-by-frame response reading and gRPC helpers built on
//! `mock_backend::grpc` framing.

use std::time::Duration;

use anyhow::Context as _;
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// One h2c connection: a request sender plus the task driving the connection.
pub struct H2Conn {
    pub send: http2::SendRequest<Full<Bytes>>,
    /// Resolves when the connection ends (after a GOAWAY once its streams finish, or on close).
    pub conn: JoinHandle<Result<(), hyper::Error>>,
    /// `host:port` the connection goes to (used as `:authority` by the helpers).
    pub authority: String,
}

/// hyper's client default SETTINGS_MAX_HEADER_LIST_SIZE (16 KiB).
const HYPER_MAX_HEADER_LIST: u32 = 16 * 1024;

/// Opens an h2c (prior knowledge) connection to `addr` (`host:port`).
pub async fn connect(addr: &str) -> H2Conn {
    connect_with_header_list(addr, HYPER_MAX_HEADER_LIST).await
}

/// [`connect`] accepting response heads and trailers of up to `max_header_list` bytes (RFC 9113
/// section 6.5.2 size) instead of hyper's 16 KiB.
pub async fn connect_with_header_list(addr: &str, max_header_list: u32) -> H2Conn {
    let tcp = TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let _ = tcp.set_nodelay(true);
    let (send, conn) = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .max_header_list_size(max_header_list)
        .handshake(TokioIo::new(tcp))
        .await
        .unwrap_or_else(|e| panic!("h2 handshake with {addr}: {e}"));
    let conn = tokio::spawn(conn);
    H2Conn {
        send,
        conn,
        authority: addr.to_string(),
    }
}

/// A finished h2 response read frame by frame.
#[derive(Debug, Clone)]
pub struct H2Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Number of DATA frames seen.
    pub data_frames: usize,
    /// The trailers frame, if one came.
    pub trailers: Option<HeaderMap>,
}

impl H2Resp {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }

    pub fn text(&self) -> String {
        crate::http::body_text(&self.body)
    }

    pub fn json(&self) -> serde_json::Value {
        crate::http::body_json(&self.body)
    }

    /// A trailer value.
    pub fn trailer(&self, name: &str) -> Option<String> {
        value_of(self.trailers.as_ref()?, name)
    }
}

impl H2Conn {
    /// Builds a request for `path` on this connection's authority.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Request<Full<Bytes>> {
        let mut b = Request::builder()
            .method(method)
            .version(http::Version::HTTP_2)
            .uri(format!("http://{}{path}", self.authority));
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(Full::new(body.into())).expect("valid request")
    }

    /// A mock-backend `Ticks` call (gRPC server streaming, `mock_backend::grpc::TICKS_PATH`) for
    /// `count` ticks, 0 meaning endless, with the usual gRPC headers.
    pub fn ticks(&self, count: u32) -> Request<Full<Bytes>> {
        self.request(
            "POST",
            mock_backend::grpc::TICKS_PATH,
            &grpc_headers(&[]),
            mock_backend::grpc::encode_frame(&mock_backend::grpc::proto::TicksRequest { count }),
        )
    }

    /// Sends `req` and returns the response head with its streaming body.
    pub async fn send(
        &mut self,
        req: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, hyper::Error> {
        self.send.ready().await?;
        self.send.send_request(req).await
    }

    /// Sends `req` and reads the whole response (10 s deadline).
    pub async fn fetch(&mut self, req: Request<Full<Bytes>>) -> anyhow::Result<H2Resp> {
        let fut = async {
            let resp = self.send(req).await?;
            read_all(resp).await
        };
        tokio::time::timeout(Duration::from_secs(10), fut)
            .await
            .context("h2 request timed out")?
    }

    /// `GET path` with `headers`, read whole.
    pub async fn get(&mut self, path: &str, headers: &[(&str, &str)]) -> anyhow::Result<H2Resp> {
        let req = self.request("GET", path, headers, Bytes::new());
        self.fetch(req).await
    }
}

/// Sends `req` on `send` (a clone of an [`H2Conn`]'s, for a task of its own) and waits up to `t`
/// for the response head. Panics, naming `what`, when it comes late or the request fails.
pub async fn head_within(
    mut send: http2::SendRequest<Full<Bytes>>,
    req: Request<Full<Bytes>>,
    t: Duration,
    what: &str,
) -> Response<Incoming> {
    tokio::time::timeout(t, send.send_request(req))
        .await
        .unwrap_or_else(|_| panic!("{what} in time"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Reads a response body frame by frame, counting DATA frames and keeping the trailers.
pub async fn read_all(resp: Response<Incoming>) -> anyhow::Result<H2Resp> {
    let (parts, mut body) = resp.into_parts();
    let mut data = BytesMut::new();
    let mut data_frames = 0;
    let mut trailers = None;
    while let Some(frame) = body.frame().await {
        let frame = frame?;
        match frame.into_data() {
            Ok(d) => {
                data_frames += 1;
                data.extend_from_slice(&d);
            }
            Err(f) => {
                if let Ok(t) = f.into_trailers() {
                    trailers = Some(t);
                }
            }
        }
    }
    Ok(H2Resp {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: data.freeze(),
        data_frames,
        trailers,
    })
}

/// gRPC request headers: `content-type: application/grpc`, `te: trailers`, plus `extra`.
pub fn grpc_headers<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut h = vec![("content-type", "application/grpc"), ("te", "trailers")];
    h.extend_from_slice(extra);
    h
}

/// Decodes every gRPC message in `buf` (uncompressed frames) as `M`.
pub fn grpc_messages<M: prost::Message + Default>(buf: &[u8]) -> Vec<M> {
    let mut out = Vec::new();
    let mut rest = buf;
    while let Some((compressed, msg, used)) = mock_backend::grpc::split_frame(rest) {
        assert!(!compressed, "compressed gRPC message");
        out.push(M::decode(msg).expect("valid protobuf"));
        rest = &rest[used..];
    }
    assert!(
        rest.is_empty(),
        "trailing partial gRPC frame of {} bytes",
        rest.len()
    );
    out
}

/// A streaming response read incrementally: each call to [`Stream::next_message`] returns the
/// next gRPC message (or raw chunk for non-gRPC) with its arrival time.
pub struct Stream {
    pub status: u16,
    pub headers: HeaderMap,
    /// When the response head arrived.
    pub head_at: Instant,
    body: Incoming,
    buf: BytesMut,
    pub trailers: Option<HeaderMap>,
}

impl Stream {
    /// Wraps a response whose head just arrived.
    pub fn new(resp: Response<Incoming>) -> Stream {
        let head_at = Instant::now();
        let (parts, body) = resp.into_parts();
        Stream {
            status: parts.status.as_u16(),
            headers: parts.headers,
            head_at,
            body,
            buf: BytesMut::new(),
            trailers: None,
        }
    }

    /// The next DATA chunk with its arrival time; `Ok(None)` at the end of the stream (trailers
    /// kept in `self.trailers`); `Err` when the stream fails (reset, connection closed).
    pub async fn next_chunk(&mut self) -> Result<Option<(Bytes, Instant)>, hyper::Error> {
        while let Some(frame) = self.body.frame().await {
            let frame = frame?;
            match frame.into_data() {
                Ok(d) => return Ok(Some((d, Instant::now()))),
                Err(f) => {
                    if let Ok(t) = f.into_trailers() {
                        self.trailers = Some(t);
                    }
                }
            }
        }
        Ok(None)
    }

    /// The next whole gRPC message decoded as `M`, with the arrival time of its last byte.
    pub async fn next_message<M: prost::Message + Default>(
        &mut self,
    ) -> Result<Option<(M, Instant)>, hyper::Error> {
        loop {
            if let Some((compressed, msg, used)) = mock_backend::grpc::split_frame(&self.buf) {
                assert!(!compressed, "compressed gRPC message");
                let m = M::decode(msg).expect("valid protobuf");
                let _ = self.buf.split_to(used);
                return Ok(Some((m, Instant::now())));
            }
            match self.next_chunk().await? {
                Some((d, _)) => self.buf.extend_from_slice(&d),
                None => return Ok(None),
            }
        }
    }

    /// A trailer value.
    pub fn trailer(&self, name: &str) -> Option<String> {
        value_of(self.trailers.as_ref()?, name)
    }

    /// A header value.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }
}

/// The value of `name` in `map` as text; `None` when absent or not visible ASCII.
fn value_of(map: &HeaderMap, name: &str) -> Option<String> {
    map.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}
