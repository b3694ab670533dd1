//! CASE-09 (error variant): an h2 node's GOAWAY with an error code (RFC 9113 section 6.8) whose
//! last stream id covers a request means it may have been processed: retried only if idempotent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use integration_tests::check::{bind_to, json_error, node_of, non_probe_paths, HDR};
use integration_tests::nodes::hand_node;
use integration_tests::{get, request, Cluster, Config, Gateway, Health, Mock, Route};
use tokio::task::JoinHandle;

/// A hand-made h2c node `node-f`: answers every request `200 ok` with `x-node-id: node-f`, except
/// paths ending in `/boom`: it reads those whole, then sends GOAWAY(INTERNAL_ERROR) whose last
/// stream id covers them (they may have been processed) and closes the connection. Counts them.
async fn goaway_error_node() -> (String, Arc<AtomicU64>, JoinHandle<()>) {
    let booms = Arc::new(AtomicU64::new(0));
    let count = booms.clone();
    let (addr, task) = hand_node(move |s| {
        let count = count.clone();
        async move {
            let Ok(mut conn) = h2::server::handshake(s).await else {
                return; // a TCP probe
            };
            let (boom_tx, mut boom_rx) =
                tokio::sync::mpsc::channel::<h2::server::SendResponse<Bytes>>(4);
            loop {
                tokio::select! {
                    next = conn.accept() => {
                        let Some(Ok((req, mut respond))) = next else { return };
                        let (boom_tx, count) = (boom_tx.clone(), count.clone());
                        tokio::spawn(async move {
                            let boom = req.uri().path().ends_with("/boom");
                            let mut body = req.into_body();
                            while let Some(Ok(chunk)) = body.data().await {
                                let _ = body.flow_control().release_capacity(chunk.len());
                            }
                            if boom {
                                count.fetch_add(1, Ordering::SeqCst);
                                // Kept open (not reset) until the GOAWAY is out.
                                let _ = boom_tx.send(respond).await;
                                return;
                            }
                            let resp = http::Response::builder()
                                .status(200)
                                .header("x-node-id", "node-f")
                                .body(())
                                .expect("response");
                            if let Ok(mut send) = respond.send_response(resp, false) {
                                let _ = send.send_data(Bytes::from_static(b"ok"), true);
                            }
                        });
                    }
                    Some(held) = boom_rx.recv() => {
                        conn.abrupt_shutdown(h2::Reason::INTERNAL_ERROR);
                        let _ = std::future::poll_fn(|cx| conn.poll_closed(cx)).await;
                        drop(held);
                        return;
                    }
                }
            }
        }
    })
    .await;
    (addr, booms, task)
}

/// CASE-09 (error variant): a GOAWAY with an error code whose last stream id covers the request
/// means it may have been processed: a POST is not replayed and gets a 502 JSON (the node saw it
/// once, no other node saw it); an idempotent GET in the same position is retried on another node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case09_goaway_with_an_error_code_is_502_for_a_post_and_a_retry_for_a_get() {
    let (addr, booms, node) = goaway_error_node().await;
    let b = Mock::start("node-b").await;
    let toml = Config::new()
        .health(Health::tcp_never())
        .with_cluster(
            Cluster::new("c")
                .line("protocol = \"h2c\"")
                .node("node-f", &addr)
                .node("node-b", &b.addr()),
        )
        .route(Route::api().retries(2))
        .toml();
    let gw = Gateway::start(&toml).await;
    let c4005 = bind_to(&gw, "c-4005", "node-f").await;
    let c4006 = bind_to(&gw, "c-4006", "node-f").await;
    b.reset_stats().await;

    let r = request(
        "POST",
        &gw.url("/echo/boom"),
        &[
            (HDR, c4005.as_str()),
            ("content-type", "application/octet-stream"),
        ],
        vec![b'p'; 1024],
    )
    .await
    .expect("post");
    assert_eq!(r.status, 502, "{}", r.text());
    let msg = json_error(&r.body);
    assert!(msg.starts_with("node node-f failed: "), "{msg}");
    assert_eq!(booms.load(Ordering::SeqCst), 1, "node-f saw the POST once");
    assert_eq!(non_probe_paths(&b).await, Vec::<String>::new());

    let r = get(&gw.url("/echo/boom"), &[(HDR, c4006.as_str())])
        .await
        .expect("get");
    assert_eq!(
        (r.status, node_of(&r)),
        (200, "node-b".to_string()),
        "{}",
        r.text()
    );
    assert_eq!(booms.load(Ordering::SeqCst), 2);
    assert_eq!(non_probe_paths(&b).await, ["/echo/boom"]);
    node.abort();
}
