//! Retries (SPEC section 4 `retries`): which failures are retried on another node and which are
//! not, by method, by how much of the request the node took, and with the request body intact.

use std::time::Duration;

use integration_tests::check::{bind_to, echo_header, json_error, node_of, non_probe_paths, HDR};
use integration_tests::load::{pattern, sha_hex};
use integration_tests::raw::{body_of, read_while_writing};
use integration_tests::{get, request, Config, Gateway, Health, Mock, Route};
use tokio::io::AsyncWriteExt;

/// CASE-20: a POST the node read, or a streamed PUT it cut, is not retried (502); a GET, or a POST
/// whose connect was refused, is retried on another node with its body intact.
/// Long on purpose: CASE-20's four parts run in order on one gateway, each knob set on the node the
/// last left.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case20_retries_respect_methods_and_bodies() {
    let mut a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let gw = Gateway::start(
        &Config::single(Health::tcp_never(), &[&a, &b], Route::api().retries(2)).toml(),
    )
    .await;
    let c20 = bind_to(&gw, "c-20", "node-a").await;
    let c20b = bind_to(&gw, "c-20b", "node-a").await;
    a.reset_stats().await;
    b.reset_stats().await;
    let order = br#"{"sku":"X1","qty":1}"#.to_vec();
    assert_eq!(order.len(), 20);
    let retries = |reason: &'static str| {
        let gw = &gw;
        async move {
            gw.metric(&format!(
                "gateway_retries_total{{route=\"api\",reason=\"{reason}\"}}"
            ))
            .await
        }
    };
    let (reset0, connect0) = (retries("reset").await, retries("connect_error").await);

    // (a) node-a reads the POST, then resets: not retried, 502 JSON.
    a.control("/control/abort-all").await;
    let r = post_order(&gw, &c20, &order).await;
    assert_eq!(r.status, 502);
    let msg = json_error(&r.body);
    assert!(msg.starts_with("node node-a failed: "), "{msg}");
    assert_eq!(non_probe_paths(&a).await, ["/echo/orders"]);
    assert_eq!(non_probe_paths(&b).await, Vec::<String>::new());

    // (d) PUT 10 MiB, node-a resets after 1 MiB: the streamed body was not kept, so no retry.
    a.control("/control/abort-all?after_bytes=1048576").await;
    a.reset_stats().await;
    let big = pattern(10 * 1024 * 1024, 20);
    let head = format!(
        "PUT /echo/files/f1 HTTP/1.1\r\nHost: x\r\nX-Conn-Id: {c20}\r\nContent-Length: {}\r\n\r\n",
        big.len()
    );
    let (raw, _) = read_while_writing(gw.port, Duration::from_secs(10), |mut wr| async move {
        if wr.write_all(head.as_bytes()).await.is_ok() {
            let _ = wr.write_all(&big).await;
        }
        // The write side stays open (no FIN) until the answer is read.
        std::future::pending::<()>().await;
        drop(wr);
    })
    .await;
    let text = String::from_utf8_lossy(&raw).to_string();
    assert!(text.starts_with("HTTP/1.1 502 "), "{text}");
    assert!(json_error(body_of(&raw)).starts_with("node node-a failed: "));
    assert_eq!(non_probe_paths(&a).await, ["/echo/files/f1"]);
    assert_eq!(non_probe_paths(&b).await, Vec::<String>::new());
    assert_eq!(
        retries("reset").await,
        reset0,
        "(a) and (d) were not retried"
    );

    // (c) GET, node-a resets after reading it: retried on node-b, 200.
    a.control("/control/abort-all").await;
    a.reset_stats().await;
    let r = get(&gw.url("/echo/orders/1"), &[(HDR, c20.as_str())])
        .await
        .expect("get");
    assert_eq!((r.status, node_of(&r)), (200, "node-b".to_string()));
    assert_eq!(non_probe_paths(&a).await, ["/echo/orders/1"]);
    assert_eq!(retries("reset").await, reset0 + 1.0);
    gw.logs
        .wait_for(
            &["retrying on another node", "node-a", "node-b", "reset"],
            Duration::from_secs(2),
        )
        .await;

    // (b) node-a refuses the connect: the POST is retried on node-b with its body intact.
    a.control("/control/abort-all?state=off").await;
    a.kill().await;
    b.reset_stats().await;
    let r = post_order(&gw, &c20b, &order).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let echo = r.json();
    assert_eq!(echo["node"], "node-b");
    assert_eq!(echo["method"], "POST");
    assert_eq!(echo["body_len"], 20);
    assert_eq!(echo["body_sha256"], sha_hex(&order));
    assert_eq!(echo_header(&echo, "content-length"), ["20"]);
    assert_eq!(non_probe_paths(&b).await, ["/echo/orders"]);
    assert_eq!(retries("connect_error").await, connect0 + 1.0);
    gw.logs
        .wait_for(
            &[
                "retrying on another node",
                "node-a",
                "node-b",
                "connect_error",
            ],
            Duration::from_secs(2),
        )
        .await;
}

/// CASE-20 (b): a POST to a node refusing the connect is retried on another node with its body byte
/// for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_to_a_refusing_node_is_retried_with_its_body_intact() {
    // Slow probes: the killed node stays "healthy", so requests are still sent to it.
    let (mut mocks, gw) =
        Gateway::over_node_a_and_b(Health::http_never(), Route::api().retries(2)).await;
    let first = get(&gw.url("/data"), &[(HDR, "post-1")])
        .await
        .expect("get");
    let old = node_of(&first);
    let (victim, other) = if old == "node-a" {
        (0, "node-b")
    } else {
        (1, "node-a")
    };
    mocks[victim].kill().await;
    let series = "gateway_retries_total{route=\"api\",reason=\"connect_error\"}";
    let before = gw.metric(series).await;
    let body: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let want_sha = sha_hex(&body);
    let check = |r: &integration_tests::Resp| {
        assert_eq!(r.status, 200, "{}", r.text());
        let echo = r.json();
        assert_eq!(echo["node"], other);
        assert_eq!(echo["body_len"], body.len() as u64);
        assert_eq!(echo["body_sha256"], want_sha.as_str());
        assert_eq!(
            echo_header(&echo, "content-length"),
            [body.len().to_string()]
        );
    };
    // Bound to the refusing node: refused, then sent to the other node with the same body.
    let r = request(
        "POST",
        &gw.url("/echo"),
        &[
            (HDR, "post-1"),
            ("content-type", "application/octet-stream"),
        ],
        body.clone(),
    )
    .await
    .expect("post");
    check(&r);
    assert_eq!(
        gw.metric(series).await - before,
        1.0,
        "exactly one connect-error retry"
    );
    assert_eq!(gw.admin_json("/admin/conns/post-1").await["node"], other);
    assert_eq!(
        gw.node(&old).await["state"],
        "healthy",
        "probes have not run: only the retry saved the POST"
    );
    // Plain POSTs: whichever node the picker chooses, every one arrives intact at the live node.
    for _ in 0..3 {
        let r = request(
            "POST",
            &gw.url("/echo"),
            &[("content-type", "application/octet-stream")],
            body.clone(),
        )
        .await
        .expect("post");
        check(&r);
    }
}

/// CASE-20 (a, c): a node resetting after reading: POST gets 502 JSON and is not retried; GET is
/// retried on another node.
/// Long on purpose: the same three nodes are counted under `retries = 2` and then `retries = 1`.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_is_502_json_post_not_retried_get_retried_on_each_other_node() {
    let mocks = [
        Mock::start("node-a").await,
        Mock::start("node-b").await,
        Mock::start("node-c").await,
    ];
    let gw = Gateway::start(
        &Config::single(
            Health::http_never(),
            &[&mocks[0], &mocks[1], &mocks[2]],
            Route::api().retries(2),
        )
        .toml(),
    )
    .await;
    let sum = || async {
        let mut per = Vec::new();
        for m in &mocks {
            per.push(
                non_probe_paths(m)
                    .await
                    .into_iter()
                    .filter(|p| p == "/abort")
                    .count(),
            );
        }
        per
    };

    let r = request("POST", &gw.url("/abort"), &[], b"payload".to_vec())
        .await
        .expect("post");
    assert_eq!(r.status, 502);
    let j = r.json();
    assert_eq!(j["code"], -1);
    let msg = j["message"].as_str().expect("message");
    assert!(
        msg.starts_with("node node-") && msg.contains(" failed: "),
        "precise message naming the node: {msg}"
    );
    let per = sum().await;
    assert_eq!(per.iter().sum::<usize>(), 1, "POST is not retried: {per:?}");
    let failed_node = format!(
        "node-{}",
        ["a", "b", "c"][per.iter().position(|n| *n == 1).expect("one")]
    );
    assert_eq!(
        msg,
        format!("node {failed_node} failed: connection closed before message completed")
    );
    for m in &mocks {
        m.reset_stats().await;
    }

    let r = get(&gw.url("/abort"), &[]).await.expect("get");
    assert_eq!(r.status, 502);
    let j = r.json();
    assert_eq!(j["code"], -1);
    assert!(
        j["message"]
            .as_str()
            .expect("message")
            .contains(" failed: "),
        "{j}"
    );
    assert_eq!(
        sum().await,
        [1, 1, 1],
        "GET tried once and retried twice, each on another node"
    );
    drop(gw);

    // retries = 1: two attempts in all, on two different nodes.
    for m in &mocks {
        m.reset_stats().await;
    }
    let toml = Config::single(
        Health::http_never(),
        &[&mocks[0], &mocks[1], &mocks[2]],
        Route::api().retries(1),
    )
    .toml();
    let gw = Gateway::start(&toml).await;
    let r = get(&gw.url("/abort"), &[]).await.expect("get");
    assert_eq!(r.status, 502);
    let mut per = sum().await;
    per.sort_unstable();
    assert_eq!(per, [0, 1, 1], "one try plus one retry on another node");
}

/// POSTs `order` (JSON) to `/echo/orders` on `gw` with conn id `conn`; panics if no answer.
async fn post_order(gw: &Gateway, conn: &str, order: &[u8]) -> integration_tests::Resp {
    request(
        "POST",
        &gw.url("/echo/orders"),
        &[(HDR, conn), ("content-type", "application/json")],
        order.to_vec(),
    )
    .await
    .expect("post")
}
