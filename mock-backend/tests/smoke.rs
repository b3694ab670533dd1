//! Smoke test: runs the mock in-process on an ephemeral port and checks the basic endpoints.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use mock_backend::MockConfig;
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

type TestClient = Client<HttpConnector, Full<Bytes>>;

struct Mock {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
}

async fn start(id: &str) -> Mock {
    let bound = mock_backend::bind(MockConfig::new(0, id))
        .await
        .expect("bind on an ephemeral port");
    let addr = bound.local_addr();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(bound.serve(async {
        // Either a send or a dropped sender means stop.
        let _ = stopped.await;
    }));
    Mock { addr, stop, task }
}

async fn call(
    client: &TestClient,
    method: Method,
    url: String,
    body: Bytes,
) -> (StatusCode, hyper::HeaderMap, Bytes) {
    let req = Request::builder()
        .method(method)
        .uri(url)
        .header("x-test", "smoke")
        .body(Full::new(body))
        .expect("valid request");
    let resp = client.request(req).await.expect("request answered");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("body read").to_bytes();
    (parts.status, parts.headers, body)
}

/// `GET {base}/control/stats` through `client`, its body parsed as JSON.
async fn get_stats(client: &TestClient, base: &str) -> serde_json::Value {
    let url = format!("{base}/control/stats");
    let (_, _, body) = call(client, Method::GET, url, Bytes::new()).await;
    serde_json::from_slice(&body).expect("JSON")
}

/// Kept as one function: one request per endpoint, all against one node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_endpoints_answer_as_specified() {
    let mock = start("node-t").await;
    let base = format!("http://{}", mock.addr);
    let client: TestClient = Client::builder(TokioExecutor::new()).build_http();

    // /health and the node header
    let (status, headers, body) =
        call(&client, Method::GET, format!("{base}/health"), Bytes::new()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&body[..], b"OK");
    assert_eq!(headers.get("x-node-id").expect("x-node-id"), "node-t");

    // /data names the node and its bound port
    let (status, _, body) = call(&client, Method::GET, format!("{base}/data"), Bytes::new()).await;
    assert_eq!(status, StatusCode::OK);
    let expected = format!("Data from Node node-t (Port {})", mock.addr.port());
    assert_eq!(body, expected.as_bytes());

    // /echo hashes the streamed body
    let payload: Bytes = (0..3_000_000_u32)
        .map(|i| u8::try_from(i % 199).expect("fits"))
        .collect::<Vec<u8>>()
        .into();
    let url = format!("{base}/echo/sub?x=1&y=2");
    let (status, _, body) = call(&client, Method::POST, url, payload.clone()).await;
    assert_eq!(status, StatusCode::OK);
    let echo: serde_json::Value = serde_json::from_slice(&body).expect("echo is JSON");
    assert_eq!(echo["node"], "node-t");
    assert_eq!(echo["method"], "POST");
    assert_eq!(echo["path"], "/echo/sub");
    assert_eq!(echo["query"], "x=1&y=2");
    assert_eq!(echo["version"], "HTTP/1.1");
    assert_eq!(echo["body_len"], 3_000_000);
    assert_eq!(echo["body_sha256"], hex::encode(Sha256::digest(&payload)));
    let headers = echo["headers"].as_array().expect("headers array");
    assert!(headers
        .iter()
        .any(|pair| pair[0] == "x-test" && pair[1] == "smoke"));

    // health switch
    let url = format!("{base}/control/health?state=down");
    let (status, _, body) = call(&client, Method::POST, url, Bytes::new()).await;
    assert_eq!(status, StatusCode::OK);
    let answer: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(answer["state"], "down");
    let (status, _, _) = call(&client, Method::GET, format!("{base}/health"), Bytes::new()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let url = format!("{base}/actuator/health/business");
    let (status, _, body) = call(&client, Method::GET, url, Bytes::new()).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(&body[..], br#"{"business":"DOWN"}"#);
    let url = format!("{base}/control/health?state=up");
    call(&client, Method::POST, url, Bytes::new()).await;
    let (status, _, _) = call(&client, Method::GET, format!("{base}/health"), Bytes::new()).await;
    assert_eq!(status, StatusCode::OK);

    // /download: exact length and pattern
    let url = format!("{base}/download?bytes=1000000");
    let (status, headers, body) = call(&client, Method::GET, url, Bytes::new()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers.get("content-length").expect("length"), "1000000");
    assert_eq!(body.len(), 1_000_000);
    assert!(body
        .iter()
        .enumerate()
        .all(|(i, b)| usize::from(*b) == i % 251));
    let url = format!("{base}/download?bytes=70000&chunked=1");
    let (_, headers, body) = call(&client, Method::GET, url, Bytes::new()).await;
    assert!(headers.get("content-length").is_none());
    assert_eq!(body.len(), 70_000);

    // /status and 404
    let (status, _, _) = call(
        &client,
        Method::PUT,
        format!("{base}/status/418"),
        Bytes::new(),
    )
    .await;
    assert_eq!(status, StatusCode::IM_A_TEAPOT);
    let (status, _, _) = call(&client, Method::GET, format!("{base}/nope"), Bytes::new()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // stats count everything but /control/*
    let stats = get_stats(&client, &base).await;
    assert_eq!(stats["requests"], 10, "{stats}");
    assert_eq!(stats["paths"][0], "/health");
    let url = format!("{base}/control/reset-stats");
    call(&client, Method::POST, url, Bytes::new()).await;
    let stats = get_stats(&client, &base).await;
    assert_eq!(stats["requests"], 0);

    mock.stop.send(()).expect("mock still running");
    mock.task.await.expect("serve task").expect("serve result");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flapping_health_follows_its_pattern_per_health_request() {
    let mock = start("node-f").await;
    let base = format!("http://{}", mock.addr);
    let client: TestClient = Client::builder(TokioExecutor::new()).build_http();
    let url = format!("{base}/control/health?state=flap&down=2&up=1");
    let (status, _, body) = call(&client, Method::POST, url, Bytes::new()).await;
    assert_eq!(status, StatusCode::OK);
    let answer: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(
        (
            answer["state"].as_str(),
            answer["down"].as_u64(),
            answer["up"].as_u64()
        ),
        (Some("flap"), Some(2), Some(1))
    );
    // Both health paths advance one pattern: down, down, up, down, down, up.
    let mut seen = Vec::new();
    for i in 0..6 {
        let path = if i % 2 == 0 {
            "/health"
        } else {
            "/actuator/health/business"
        };
        let (status, _, _) =
            call(&client, Method::GET, format!("{base}{path}"), Bytes::new()).await;
        seen.push(status.is_success());
        // Other paths do not advance it.
        let (status, _, _) = call(&client, Method::GET, format!("{base}/data"), Bytes::new()).await;
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(seen, [false, false, true, false, false, true]);
    let url = format!("{base}/control/health?state=flap&down=x");
    let (status, _, _) = call(&client, Method::POST, url, Bytes::new()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // state=up ends the pattern.
    let url = format!("{base}/control/health?state=up");
    call(&client, Method::POST, url, Bytes::new()).await;
    for _ in 0..3 {
        let (status, _, _) =
            call(&client, Method::GET, format!("{base}/health"), Bytes::new()).await;
        assert_eq!(status, StatusCode::OK);
    }
    let _ = mock.stop.send(());
    mock.task.await.expect("join").expect("serve");
}
