//! A tiny HTTP/1.1 client for tests (hyper-util's pooled client), returning status, headers and body.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;

/// A finished response.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// `body` as text (invalid UTF-8 replaced).
pub(crate) fn body_text(body: &[u8]) -> String {
    String::from_utf8_lossy(body).into_owned()
}

/// `body` parsed as JSON; panics with the error and the body text if it is not JSON.
pub(crate) fn body_json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", body_text(body)))
}

impl Resp {
    pub fn text(&self) -> String {
        body_text(&self.body)
    }

    pub fn json(&self) -> serde_json::Value {
        body_json(&self.body)
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }
}

fn client() -> &'static Client<HttpConnector, Full<Bytes>> {
    static C: OnceLock<Client<HttpConnector, Full<Bytes>>> = OnceLock::new();
    C.get_or_init(|| {
        Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_millis(500))
            .build_http()
    })
}

/// `GET url` with `headers`.
pub async fn get(url: &str, headers: &[(&str, &str)]) -> anyhow::Result<Resp> {
    request("GET", url, headers, Vec::new()).await
}

/// Any request; 30 s overall timeout.
pub async fn request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> anyhow::Result<Resp> {
    let mut b = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Full::new(Bytes::from(body)))?;
    let fut = async {
        let resp = client().request(req).await?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok::<_, anyhow::Error>(Resp {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        })
    };
    tokio::time::timeout(Duration::from_secs(30), fut).await?
}
