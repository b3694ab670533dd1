//! Streaming instead of buffering (CASE-23, SPEC section 4): large uploads and downloads, fast or
//! paced by a slow side, and many concurrent chunked uploads pass through with the gateway's
//! memory bounded (RSS from /proc) and the slow side's pace passed back to the other.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::Frame;
use integration_tests::check::echo_header;
use integration_tests::load::{h1_conn, h1_get, pattern, rss_kib_of, rss_sampler, unix_us};
use integration_tests::{get, Config, Gateway, Health, Mock, Route};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// Bytes uploaded and downloaded (64 MiB).
const BIG: usize = 64 * 1024 * 1024;

/// Upload chunk size (64 KiB).
const CHUNK: usize = 64 * 1024;

/// Allowed gateway RSS growth per direction (KiB).
const RSS_BUDGET_KIB: u64 = 16 * 1024;

/// Starts a gateway over node `a` (probes `health`, route timeout 60 s) and warms it with five
/// GETs so pools and buffers exist; returns it with its pid and its RSS then (the baseline, KiB).
async fn warmed_gateway(health: Health, a: &Mock) -> (Gateway, u32, u64) {
    let gw =
        Gateway::start(&Config::single(health, &[a], Route::api().timeout("60s")).toml()).await;
    let pid = gw.pid().expect("running");
    for _ in 0..5 {
        assert_eq!(get(&gw.url("/data"), &[]).await.expect("get").status, 200);
    }
    let baseline = rss_kib_of(pid);
    (gw, pid, baseline)
}

/// Asserts the download bytes `d` starting at offset `at` follow the mock's `/download` pattern
/// (byte i is i % 251, SPEC section 9).
fn check_download(d: &[u8], at: u64) {
    for (j, byte) in d.iter().enumerate() {
        assert_eq!(
            u64::from(*byte),
            (at + j as u64) % 251,
            "download byte {}",
            at + j as u64
        );
    }
}

/// Upload chunk `i`: a fixed pseudo-random block rotated by `i`, so order matters to the digest.
fn rotated_chunk(block: &[u8], i: usize) -> Bytes {
    let k = (i * 7919) % block.len();
    let mut v = Vec::with_capacity(block.len());
    v.extend_from_slice(&block[k..]);
    v.extend_from_slice(&block[..k]);
    Bytes::from(v)
}

/// CASE-23: large uploads and downloads stream with bounded gateway memory.
/// Long on purpose: upload and download are measured against one baseline of the same gateway.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_upload_and_download_stream_with_bounded_memory() {
    let a = Mock::start("node-a").await;
    let (gw, pid, baseline) = warmed_gateway(Health::http_fast(), &a).await;

    // Upload, streamed from the client in 64 KiB chunks (chunked encoding, no Content-Length).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let block: Vec<u8> = (0..CHUNK)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut sha = Sha256::new();
    for i in 0..BIG / CHUNK {
        sha.update(rotated_chunk(&block, i));
    }
    let want_sha = hex::encode(sha.finalize());
    let block = Arc::new(block);
    let stream = futures_util::stream::iter((0..BIG / CHUNK).map({
        let block = block.clone();
        move |i| Ok::<_, Infallible>(Frame::data(rotated_chunk(&block, i)))
    }));
    let (stop, sampler) = rss_sampler(pid);
    let started = Instant::now();
    let mut send = h1_conn(gw.port).await;
    let req = http::Request::post("/echo")
        .header("host", "big.test")
        .body(StreamBody::new(stream))
        .expect("request");
    let resp = send.send_request(req).await.expect("upload response");
    assert_eq!(resp.status(), 200);
    let body = resp
        .into_body()
        .collect()
        .await
        .expect("echo body")
        .to_bytes();
    let up_secs = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let up_max = sampler.await.expect("sampler");
    let echo: serde_json::Value = serde_json::from_slice(&body).expect("echo JSON");
    assert_eq!(echo["body_len"], BIG as u64);
    assert_eq!(echo["body_sha256"], want_sha.as_str());

    // Download, read as a stream and checked byte by byte (byte i is i % 251).
    let (stop, sampler) = rss_sampler(pid);
    let started = Instant::now();
    let mut send = h1_conn::<Empty<Bytes>>(gw.port).await;
    let req = http::Request::get(format!("/download?bytes={BIG}"))
        .header("host", "big.test")
        .body(Empty::new())
        .expect("request");
    let resp = send.send_request(req).await.expect("download response");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut got: u64 = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.expect("download frame");
        if let Some(d) = frame.data_ref() {
            check_download(d, got);
            got += d.len() as u64;
        }
    }
    let down_secs = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let down_max = sampler.await.expect("sampler");
    assert_eq!(got, BIG as u64);

    let (up_growth, down_growth) = (
        up_max.saturating_sub(baseline),
        down_max.saturating_sub(baseline),
    );
    eprintln!(
        "FIGURE rss baseline {baseline} KiB; 64 MiB upload: max {up_max} KiB (+{up_growth} KiB) in {up_secs:.2} s; \
         64 MiB download: max {down_max} KiB (+{down_growth} KiB) in {down_secs:.2} s"
    );
    assert!(
        up_growth < RSS_BUDGET_KIB,
        "upload grew the gateway RSS by {up_growth} KiB"
    );
    assert!(
        down_growth < RSS_BUDGET_KIB,
        "download grew the gateway RSS by {down_growth} KiB"
    );
}

/// 64 KiB upload chunk `i`: `block` with its first 8 bytes replaced by `i`.
fn upload_chunk(block: &[u8], i: usize) -> Bytes {
    let mut v = block.to_vec();
    v[..8].copy_from_slice(&(i as u64).to_le_bytes());
    Bytes::from(v)
}

/// CASE-23: a 256 MiB PUT to a node reading at 64 MiB/s is paced by the node, its first bytes are
/// not held back, and RSS grows < 16 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case23_large_put_to_a_slow_node_streams_with_bounded_memory() {
    const CHUNK: usize = 64 * 1024;
    const TOTAL: usize = 256 * 1024 * 1024;
    const READ_RATE: usize = 64 * 1024 * 1024;
    let a = Mock::start("node-a").await;
    let (gw, pid, baseline) = warmed_gateway(Health::tcp_fast(), &a).await;
    let block = Arc::new(pattern(CHUNK, 23));
    let mut sha = Sha256::new();
    for i in 0..TOTAL / CHUNK {
        sha.update(upload_chunk(&block, i));
    }
    let want = hex::encode(sha.finalize());
    let first_sent = Arc::new(AtomicU64::new(0));
    let stream = futures_util::stream::iter(0..TOTAL / CHUNK).map({
        let (block, first_sent) = (block.clone(), first_sent.clone());
        move |i| {
            if i == 0 {
                first_sent.store(unix_us(), Ordering::Relaxed);
            }
            Ok::<_, Infallible>(Frame::data(upload_chunk(&block, i)))
        }
    });
    let (stop, sampler) = rss_sampler(pid);
    let t0 = Instant::now();
    let mut send = h1_conn(gw.port).await;
    let req = http::Request::put(format!("/echo/big.bin?read_rate={READ_RATE}"))
        .header("host", "big.test")
        .header("content-length", TOTAL.to_string())
        .body(StreamBody::new(stream))
        .expect("request");
    let resp = send.send_request(req).await.expect("response");
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    let took = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let max = sampler.await.expect("sampler");
    let echo: serde_json::Value = serde_json::from_slice(&body).expect("echo");
    assert_eq!(echo["body_len"], TOTAL as u64);
    assert_eq!(echo["body_sha256"], want.as_str());
    assert_eq!(echo_header(&echo, "content-length"), [TOTAL.to_string()]);
    let first_ms = (echo["first_byte_unix_us"]
        .as_u64()
        .expect("first byte time") as f64
        - first_sent.load(Ordering::Relaxed) as f64)
        / 1000.0;
    let growth = max.saturating_sub(baseline);
    eprintln!("FIGURE case23 256 MiB PUT to a 64 MiB/s reader: {took:?}, node's first body byte after {first_ms:.1} ms, RSS {baseline} -> {max} KiB (+{growth} KiB)");
    // The node's pace held the client back (nothing was buffered ahead of it)...
    assert!(
        took >= Duration::from_millis(3500),
        "{took:?}: faster than the node reads"
    );
    // ...memory stayed bounded, and the first bytes were not held back either.
    assert!(growth < 16 * 1024, "gateway RSS grew by {growth} KiB");
    assert!(
        first_ms < 100.0,
        "node saw the first body byte after {first_ms:.1} ms"
    );
}

/// CASE-23: a 128 MiB download read at 32 MiB/s and 16 concurrent 8 MiB chunked uploads keep the
/// gateway's RSS growth bounded.
/// Long on purpose: download and uploads are measured against one baseline of the same gateway.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case23_slow_download_and_concurrent_chunked_uploads_keep_memory_bounded() {
    const DOWN: u64 = 128 * 1024 * 1024;
    let a = Mock::start("node-a").await;
    let (gw, pid, baseline) = warmed_gateway(Health::tcp_fast(), &a).await;

    // A 128 MiB download read at 32 MiB/s: the node is held back, the gateway holds nothing.
    let (stop, sampler) = rss_sampler(pid);
    let t0 = Instant::now();
    let path = format!("/download?bytes={DOWN}");
    let (_send, resp) = h1_get(gw.port, &path, &[("host", "big.test")]).await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut got: u64 = 0;
    while let Some(frame) = body.frame().await {
        if let Some(d) = frame.expect("frame").data_ref() {
            check_download(d, got);
            got += d.len() as u64;
            tokio::time::sleep_until(
                t0 + Duration::from_secs_f64(got as f64 / (32.0 * 1024.0 * 1024.0)),
            )
            .await;
        }
    }
    let down_took = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let down_max = sampler.await.expect("sampler");
    assert_eq!(got, DOWN);

    // 16 concurrent chunked uploads of 8 MiB each.
    let (stop, sampler) = rss_sampler(pid);
    let t0 = Instant::now();
    let uploads = (0..16u64).map(|k| {
        let port = gw.port;
        async move {
            let block = pattern(64 * 1024, 100 + k);
            let mut sha = Sha256::new();
            for i in 0..128 {
                sha.update(upload_chunk(&block, i));
            }
            let want = hex::encode(sha.finalize());
            let stream = futures_util::stream::iter(
                (0..128).map(move |i| Ok::<_, Infallible>(Frame::data(upload_chunk(&block, i)))),
            );
            let mut send = h1_conn(port).await;
            let resp = send
                .send_request(
                    http::Request::post(format!("/echo/up-{k}"))
                        .header("host", "big.test")
                        .body(StreamBody::new(stream))
                        .expect("request"),
                )
                .await
                .expect("response");
            assert_eq!(resp.status(), 200);
            let echo: serde_json::Value =
                serde_json::from_slice(&resp.into_body().collect().await.expect("body").to_bytes())
                    .expect("echo");
            assert_eq!(echo["body_len"], 8 * 1024 * 1024);
            assert_eq!(echo["body_sha256"], want.as_str());
            assert_eq!(echo_header(&echo, "transfer-encoding"), ["chunked"]);
        }
    });
    futures_util::future::join_all(uploads).await;
    let up_took = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let up_max = sampler.await.expect("sampler");
    let (down_growth, up_growth) = (
        down_max.saturating_sub(baseline),
        up_max.saturating_sub(baseline),
    );
    eprintln!("FIGURE case23 128 MiB download at 32 MiB/s: {down_took:?}, RSS +{down_growth} KiB; 16 x 8 MiB chunked uploads: {up_took:?}, RSS +{up_growth} KiB (baseline {baseline} KiB)");
    assert!(
        down_took >= Duration::from_millis(3500),
        "client pace held: {down_took:?}"
    );
    assert!(
        down_growth < 16 * 1024,
        "download grew RSS by {down_growth} KiB"
    );
    assert!(
        up_growth < 24 * 1024,
        "16 concurrent uploads grew RSS by {up_growth} KiB"
    );
}
